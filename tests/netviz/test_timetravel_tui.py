"""Time travel in the TUI (issue 45): T records, U reverse-continues, G jumps to a value's writer, ``?`` in
the search screen queries stops, the inspector's sparklines; live and on a replay of examples/while_net."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from engine.debugger.recorded import Recording
from engine.debugger.replayer import ReplayDebugger
from engine.debugger.timetravel import history, query
from netviz.app import NetvizApp
from netviz.cli import main
from netviz.commands.replay import session_of
from netviz.session import BlobRef, Session
from tests.netviz.waiting import asynctest, notified, ready, screen_text, text_of, wait_for

ROOT = Path(__file__).resolve().parents[2]
WHILE = ROOT / "examples" / "while_net" / "predict_net.pb"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rec") / "while.nvrec"
    assert main(["run", str(WHILE), "--record", str(path)]) == 0
    return path


async def press_move(pilot, app, key: str) -> None:
    """Press a move key and wait for its stop to be shown."""
    before = app.session.last_stop if hasattr(app.session, "last_stop") else None
    await pilot.press(key)
    await wait_for(pilot, lambda: app.main.idle and getattr(app.session, "last_stop", None) is not before,
                   f"the move {key}")
    await pilot.pause()


def shows(app, text: str) -> bool:
    return any(text in line for line in screen_text(app))


@asynctest
async def test_reverse_continue_in_a_replay_goes_back_to_the_previous_hit(recorded: Path) -> None:
    session = session_of(str(recorded))
    session.add_global_breakpoint("type Tanh")
    app = NetvizApp(session)
    async with app.run_test(size=(140, 44)) as pilot:
        await ready(pilot)
        await press_move(pilot, app, "c")
        await press_move(pilot, app, "c")
        second = session.debugger.cursor.pos
        assert "iteration 1" in session.pc_label() and "Tanh" in session.pc_label()
        await press_move(pilot, app, "U")
        tanhs = [s.seq for s in session.debugger.rec.stops if s.op_type == "Tanh"]
        assert session.debugger.cursor.pos == tanhs[0] < second
        assert session.pc_label().startswith("main › While op#2 iteration 0 ›") and "Tanh" in session.pc_label()
        assert "(reverse)" in session.pc_label()
        await pilot.pause(0.2)
        assert shows(app, "iteration 0"), "the status line shows the earlier iteration"
        await press_move(pilot, app, "U")
        assert session.debugger.cursor.pos == 0 and "start of recording" in session.pc_label()


@asynctest
async def test_reverse_continue_live_uses_the_undo_history() -> None:
    session = Session.open(WHILE)
    session.add_global_breakpoint("type Tanh")
    app = NetvizApp(session)
    async with app.run_test(size=(140, 44)) as pilot:
        await ready(pilot)
        await pilot.press("U")
        await wait_for(pilot, lambda: notified(app, "nothing to step back over"), "the refusal at the start")
        await press_move(pilot, app, "c")
        first = len(session.debugger.records)
        await press_move(pilot, app, "c")
        assert len(session.debugger.records) > first
        await press_move(pilot, app, "U")
        assert len(session.debugger.records) == first
        assert "iteration 0" in session.pc_label() and "Tanh" in session.pc_label()


@asynctest
async def test_last_writer_jumps_to_the_op_run_that_wrote_the_version(recorded: Path) -> None:
    session = session_of(str(recorded))
    app = NetvizApp(session)
    async with app.run_test(size=(140, 44)) as pilot:
        await ready(pilot)
        await press_move(pilot, app, "c")
        rec = session.debugger.rec
        app.main.select_blob(BlobRef((), "acc", None))
        await press_move(pilot, app, "G")
        writer = rec.last_writer("acc", len(rec.stops) - 1)
        assert session.debugger.cursor.pos == writer.seq
        assert f"op run #{writer.seq} {writer.op_type} wrote acc" in session.pc_label()
        await pilot.pause(0.2)
        assert shows(app, f"op run #{writer.seq}")
        # a version names its op in the net shown: acc@1 of the main net is the While's (its last run)
        app.main.select_blob(BlobRef((), "acc", 1))
        await pilot.press("G")  # the pc is at the While completing: acc@1, its output, is not written yet
        await wait_for(pilot, lambda: notified(app, "acc@1: its writer has not run yet"), "the refusal ahead")
        await press_move(pilot, app, "c")
        await press_move(pilot, app, "G")
        while_run = max(s.seq for s in rec.stops if s.path == ("op", 2))
        assert session.debugger.cursor.pos == while_run and "While wrote acc@1" in session.pc_label()
        app.main.select_blob(BlobRef((), "acc", 0))
        await pilot.press("G")
        await wait_for(pilot, lambda: notified(app, "acc@0 is the value the net starts with"), "the refusal of @0")


@asynctest
async def test_last_writer_live_steps_back_to_it() -> None:
    session = Session.open(WHILE)
    app = NetvizApp(session)
    async with app.run_test(size=(140, 44)) as pilot:
        await ready(pilot)
        await press_move(pilot, app, "c")
        records = list(session.debugger.records)
        k = max(i for i, r in enumerate(records) if any(o.name == "acc" for o in r.outputs))
        app.main.select_blob(BlobRef((), "acc", None))
        await press_move(pilot, app, "G")
        # NOTE: the last writer is the While completing; undoing it lands in its last cond check (the
        # undo history goes back a subnet run at a time there), just before the write
        assert records[k].op_type == "While" and len(session.debugger.records) <= k
        assert session.pc_label().startswith("main › While op#2 ") and f"op run #{k} While wrote acc" in \
            session.pc_label()


async def run_query(pilot, app, expr: str) -> None:
    from netviz.screens.search import SearchScreen

    await pilot.press("slash")
    await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen), "the search screen")
    box = app.screen.query_one("#search-input")
    await wait_for(pilot, lambda: app.screen.focused is box, "the search input's focus")
    box.value = expr
    await pilot.press("enter")
    await wait_for(pilot, lambda: app.screen.hits and "holds" in str(app.screen.hits[0][1]), "the query's rows")
    await pilot.pause()


@asynctest
async def test_a_query_in_the_search_screen_lists_stops_and_enter_jumps(recorded: Path) -> None:
    session = session_of(str(recorded))
    app = NetvizApp(session)
    async with app.run_test(size=(160, 44)) as pilot:
        await ready(pilot)
        await run_query(pilot, app, "? max_abs(acc) > 0.5")
        rows = query(session.debugger.rec, "max_abs(acc) > 0.5")
        assert rows and len(app.screen.hits) == len(rows) + 1
        assert shows(app, f"{len(rows)} stop") and shows(app, rows[0].blobs[0]) and shows(app, rows[0].iteration)
        await pilot.press("down")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.screen is app.main and app.main.idle
                       and session.debugger.cursor.pos == rows[1].seq + 1, "the jump to the second row")
        assert f"after op run #{rows[1].seq}" in session.pc_label()


@asynctest
async def test_a_live_query_runs_over_the_run_so_far() -> None:
    session = Session.open(WHILE)
    app = NetvizApp(session)
    async with app.run_test(size=(160, 44)) as pilot:
        await ready(pilot)
        await press_move(pilot, app, "c")
        await run_query(pilot, app, "? has_inf_or_nan")
        assert shows(app, "0 stops where has_inf_or_nan holds")
        app.screen.query_one("#search-input").value = "? max_abs(acc) >= 0"
        await pilot.press("enter")
        await wait_for(pilot, lambda: "max_abs(acc)" in str(app.screen.hits[0][1]), "the second query")
        hit = app.screen.hits[1][2]
        assert "acc" in hit.blobs[0] and hit.pos <= len(session.debugger.records)
        bad = "? max_abs(acc >"
        app.screen.query_one("#search-input").value = bad
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(app.screen.hits) == 1 and "holds" not in str(app.screen.hits[0][1]),
                       "the parse error line")
        app.screen.query_one("#search-input").value = "? max_abs(acc) >= 0"
        await pilot.press("enter")
        await wait_for(pilot, lambda: "max_abs(acc)" in str(app.screen.hits[0][1]), "the query again")
        await pilot.press("enter")  # the same query: Enter jumps to the highlighted row (the first)
        await wait_for(pilot, lambda: app.screen is app.main and app.main.idle and "query:" in session.pc_label(),
                       "the jump back to the first row")
        assert len(session.debugger.records) <= hit.pos and f"after op run #{hit.op}" in session.pc_label()


@asynctest
async def test_the_inspector_shows_per_iteration_sparklines(recorded: Path) -> None:
    session = session_of(str(recorded))
    app = NetvizApp(session)
    async with app.run_test(size=(160, 50)) as pilot:
        await ready(pilot)
        app.main.select_blob(BlobRef((), "acc", None))
        widget = app.main.blob_inspector().history
        await wait_for(pilot, lambda: "per write" in text_of(widget), "the history sparklines")
        stats = history(session.debugger.rec, "acc")
        text = text_of(widget)
        assert f"{len(stats)} writes" in text and "‖·‖" in text
        assert f"{stats[0].norm:.4g} → {stats[-1].norm:.4g}" in text
        assert any(c in text for c in "▁█")
        await pilot.resize_terminal(120, 40)  # NOTE: a narrow inspector squeezed the labels' column to nothing
        await wait_for(pilot, lambda: any(re.search(r"‖·‖ +[▁-█]+ ", line) for line in screen_text(app)),
                       "the norm's sparkline beside its label on screen")


@asynctest
async def test_record_from_the_tui_equals_the_command_line_recording(recorded: Path, tmp_path: Path) -> None:
    from netviz.screens.prompt import PromptScreen

    session = Session.open(WHILE)
    app = NetvizApp(session)
    target = tmp_path / "[tui] run.nvrec"  # NOTE: brackets: the notice shows the name as it is
    async with app.run_test(size=(140, 44)) as pilot:
        await ready(pilot)
        await pilot.press("T")
        await wait_for(pilot, lambda: isinstance(app.screen, PromptScreen), "the file prompt")
        app.screen.query_one("#prompt-input").value = str(target)
        await pilot.press("enter")
        await wait_for(pilot, lambda: notified(app, f"to {target} (end)"), "the recording's end")
        assert session.debugger.finished
    tui, cli = Recording.open(target), Recording.open(recorded)
    assert [s.path for s in tui.stops] == [s.path for s in cli.stops]
    for stop in cli.stops:
        for o in (o for o in stop.outputs if o.key in cli.members):  # NOTE: scopes are not arrays: not recorded
            np.testing.assert_allclose(tui.value(o.name, o.version), cli.value(o.name, o.version), rtol=1e-6)


@asynctest
async def test_record_to_a_missing_folder_is_refused_before_the_restart() -> None:
    from netviz.screens.prompt import PromptScreen

    session = Session.open(WHILE)
    app = NetvizApp(session)
    async with app.run_test(size=(140, 44)) as pilot:
        await ready(pilot)
        await press_move(pilot, app, "n")
        await press_move(pilot, app, "n")
        here = session.pc_label()
        await pilot.press("T")
        await wait_for(pilot, lambda: isinstance(app.screen, PromptScreen), "the file prompt")
        app.screen.query_one("#prompt-input").value = "/no/such/folder/x.nvrec"
        await pilot.press("enter")
        await wait_for(pilot, lambda: notified(app, "no folder /no/such/folder"), "the refusal")
        assert session.pc_label() == here and not [n for n in app._notifications if n.severity == "error"]


@asynctest
async def test_record_is_refused_in_a_replay(recorded: Path) -> None:
    app = NetvizApp(session_of(str(recorded)))
    async with app.run_test(size=(140, 44)) as pilot:
        await ready(pilot)
        await pilot.press("T")
        await wait_for(pilot, lambda: notified(app, "this is a recording already"), "the refusal")


def test_replay_watchpoint_stops_after_the_write_as_live_does(recorded: Path) -> None:
    dbg = ReplayDebugger(Recording.open(recorded))
    live = Session.open(WHILE)._debugger()
    for d in (dbg, live):
        d.add_watchpoint("acc")
    for _ in range(3):  # Tanh writes acc, then the Do returning it from the iteration's workspace
        a, b = dbg.continue_(), live.continue_()
        assert a.reason == b.reason == "watchpoint"
        assert a.detail == b.detail  # NOTE: the pcs' words differ: a recording has no "› end" stops
        # live stops at the Do's "› end" after Tanh, a replay after the Do (the write ended its net)
        last = dbg.records[-1] if dbg.records[-1].path == live.records[-1].path else dbg.records[-2]
        assert (last.path, last.op_type) == (live.records[-1].path, live.records[-1].op_type)


def test_replay_shows_the_update_ratios_live_measures(tmp_path: Path) -> None:
    from engine.debugger.recording import Recorder

    path = tmp_path / "mlp.nvrec"
    live = Session.open(ROOT / "examples" / "mlp" / "predict_net.pb")._debugger()
    recorder = Recorder(live, path)
    recorder.close(live.continue_())
    replay = ReplayDebugger(Recording.open(path))
    replay.continue_()
    want = [(r.op_type, r.update_ratio) for r in live.records if r.update_ratio is not None]
    got = [(r.op_type, r.update_ratio) for r in replay.records if r.update_ratio is not None]
    assert want and [t for t, _ in got] == [t for t, _ in want]
    np.testing.assert_allclose([v for _, v in got], [v for _, v in want], rtol=1e-5)


@asynctest
async def test_live_sparklines_follow_training_iterations() -> None:
    """examples/mlp's plan trains 20 iterations: fc1_w's norm per iteration, from a LiveHistory attached when
    the blob is first shown with the debugger made (n)."""
    session = Session.open(ROOT / "examples" / "mlp" / "plan.pbtxt")
    app = NetvizApp(session)
    async with app.run_test(size=(160, 50)) as pilot:
        await ready(pilot)
        await press_move(pilot, app, "n")
        app.main.select_blob(BlobRef((), "fc1_w", None))
        await press_move(pilot, app, "c")
        last = float(np.linalg.norm(session.debugger.value("fc1_w")))
        app.main.select_blob(BlobRef((), "fc1_w", None))
        widget = app.main.blob_inspector().history
        await wait_for(pilot, lambda: "writes (" in text_of(widget), "the training iterations' sparklines")
        text = text_of(widget)
        assert "20 writes (train iteration 0 … train iteration 19; live" in text, text
        assert f"→ {last:.4g}" in text and "‖·‖" in text


def live_or_replay(net: Path, tmp_path: Path, live: bool) -> Session:
    """A live session on `net`, or the replay of its recording (`netviz run --record`)."""
    if live:
        return Session.open(net)
    assert main(["run", str(net), "--record", str(tmp_path / "run.nvrec")]) == 0
    return session_of(str(tmp_path / "run.nvrec"))


@pytest.mark.parametrize("live", [False, True], ids=["replay", "live"])
@asynctest
async def test_reverse_moves_inside_rnn_timesteps(tmp_path: Path, live: bool) -> None:
    """examples/lstm: U from timestep 2's LSTMUnit back to timestep 1's, then G on gates_t to its Sum there."""
    session = live_or_replay(ROOT / "examples" / "lstm" / "predict_net.pb", tmp_path, live)
    session.add_global_breakpoint("type LSTMUnit")
    app = NetvizApp(session)
    async with app.run_test(size=(160, 44)) as pilot:
        await ready(pilot)
        for _ in range(3):
            await press_move(pilot, app, "c")
        assert "timestep 2" in session.pc_label() and "LSTMUnit" in session.pc_label()
        await press_move(pilot, app, "U")
        assert "timestep 1" in session.pc_label() and "LSTMUnit" in session.pc_label(), session.pc_label()
        app.main.select_blob(BlobRef((), "lstm/gates_t", None))
        await press_move(pilot, app, "G")
        assert session.pc_label().startswith("main › RecurrentNetwork op#1 timestep 1 ›"), session.pc_label()
        assert "Sum" in session.pc_label() and "wrote lstm/gates_t" in session.pc_label()


@pytest.mark.parametrize("live", [False, True], ids=["replay", "live"])
@asynctest
async def test_reverse_moves_into_an_if_branch(tmp_path: Path, live: bool) -> None:
    """examples/if_net: from the end, U goes back into the finished If's then-branch Do to its FC, and G on
    h_then (written there) puts the pc at that FC again."""
    session = live_or_replay(ROOT / "examples" / "if_net" / "predict_net.pb", tmp_path, live)
    session.add_global_breakpoint("type FC")
    app = NetvizApp(session)
    async with app.run_test(size=(160, 44)) as pilot:
        await ready(pilot)
        await press_move(pilot, app, "c")
        at_fc = session.pc_label()
        assert at_fc.startswith("main › If op#2 ") and "FC" in at_fc, at_fc
        await press_move(pilot, app, "c")
        assert session.debugger.finished
        await press_move(pilot, app, "U")
        assert session.pc_label().split("  [")[0] == at_fc.split("  [")[0], session.pc_label()
        await press_move(pilot, app, "c")
        await press_move(pilot, app, "c")
        assert session.debugger.finished
        app.main.select_blob(BlobRef((), "h_then", None))
        await press_move(pilot, app, "G")
        assert session.pc_label().split("  [")[0] == at_fc.split("  [")[0], session.pc_label()
        assert "wrote h_then" in session.pc_label()


@asynctest
async def test_a_replay_shows_the_update_ratio_in_the_op_inspector(tmp_path: Path) -> None:
    """examples/mlp trains: a replay's WeightedSum on fc1_w shows ‖ΔW‖/‖W‖ from the recorded versions."""
    from netviz.session import OpRef

    session = live_or_replay(ROOT / "examples" / "mlp" / "predict_net.pb", tmp_path, live=False)
    rec = session.debugger.rec
    stop = next(s for s in rec.stops if s.op_type == "WeightedSum" and s.outputs[0].name == "fc1_w")
    w0, w1 = rec.value("fc1_w", 0), rec.value("fc1_w", 1)
    want = float(np.linalg.norm(w1 - w0) / np.linalg.norm(w0))
    app = NetvizApp(session)
    async with app.run_test(size=(160, 50)) as pilot:
        await ready(pilot)
        await press_move(pilot, app, "c")
        app.main.select(OpRef((), stop.path[1]))
        await wait_for(pilot, lambda: shows(app, "‖ΔW‖/‖W‖"), "the update ratio row")
        assert shows(app, f"‖ΔW‖/‖W‖ {want:.4g}")
