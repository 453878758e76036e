"""Issue #30 item 3: moves a gdb user expects, checked on what the TUI shows.

``f`` in the main net and ``t`` on an op behind the pc say so (``t`` offers a restart) instead of
running to the end; n/s pass over subnet ends (E brings those stops back); cond checks and
iterations are numbered in the status line; marks in a running subnet are this timestep's; the
If inspector shows ``cond`` and the branch.
"""
from __future__ import annotations

from pathlib import Path

from netviz.app import NetvizApp
from netviz.session import OpRef, Session
from netviz.widgets.op_inspector import OpInspector
from netviz.widgets.status_line import StatusLine
from tests.netviz.waiting import answer, asynctest, continue_to_end, notified, ready, text_of, tree_line, wait_for

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def status(app) -> str:
    return app.main.query_one(StatusLine).render().plain


async def press_and_wait(pilot, app, key: str) -> None:
    await pilot.press(key)
    await wait_for(pilot, lambda: app.main.idle and app.session.debugger is not None, f"the move {key}")
    await pilot.pause()


@asynctest
async def test_f_in_the_main_net_says_so_instead_of_running_to_the_end():
    app = NetvizApp(Session.open(EXAMPLES / "mlp" / "predict_net.pb"))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await press_and_wait(pilot, app, "n")
        await press_and_wait(pilot, app, "f")
        await wait_for(pilot, lambda: notified(app, "nothing to finish"), "the refusal")
        assert app.session.pc == OpRef((), 1) and not app.session.debugger.finished
        refusal = next(n for n in app._notifications if "nothing to finish" in n.message)
        assert (refusal.severity, refusal.title) == ("warning", "Not available")  # a refusal, not an error


@asynctest
async def test_t_behind_the_pc_offers_a_restart():
    app = NetvizApp(Session.open(EXAMPLES / "mlp" / "predict_net.pb"))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        for _ in range(3):
            await press_and_wait(pilot, app, "n")
        assert app.session.pc == OpRef((), 3)
        app.main.select(OpRef((), 1))
        await pilot.press("t")
        await answer(pilot, app, "yes", then="")  # the question first
        await wait_for(pilot, lambda: app.main.idle and app.session.pc == OpRef((), 1), "the restart and run to op 1")
        assert not app.session.debugger.finished
        assert status(app).startswith("pc main › op#1 ")


@asynctest
async def test_no_end_stops_and_numbered_checks_and_iterations():
    app = NetvizApp(Session.open(EXAMPLES / "while_net" / "predict_net.pb"))
    async with app.run_test(size=(200, 48)) as pilot:
        await ready(pilot)
        seen = []
        await press_and_wait(pilot, app, "n")
        await press_and_wait(pilot, app, "n")
        while len(seen) < 40 and app.session.pc != OpRef((), 3):
            await press_and_wait(pilot, app, "s")
            seen.append(status(app).split("  │  ")[0])
        assert seen and not any(s.endswith("› end") for s in seen), seen
        assert any("cond_net check 1 ›" in s for s in seen) and any("iteration 1 ›" in s for s in seen), seen
        await pilot.press("E")  # end stops back on
        await wait_for(pilot, lambda: notified(app, "stop at each subnet's end too"), "the toggle")
        await press_and_wait(pilot, app, "r")
        await press_and_wait(pilot, app, "n")
        await press_and_wait(pilot, app, "n")
        ends = 0
        for _ in range(12):
            await press_and_wait(pilot, app, "s")
            ends += status(app).split("  │  ")[0].endswith("› end")
        assert ends, "E brings the end stops back"


@asynctest
async def test_marks_belong_to_the_current_timestep():
    app = NetvizApp(Session.open(EXAMPLES / "lstm" / "predict_net.pb"))
    async with app.run_test(size=(200, 60)) as pilot:
        await ready(pilot)
        await press_and_wait(pilot, app, "n")          # op 0 ran: pc at the RecurrentNetwork
        await press_and_wait(pilot, app, "s")          # into timestep 0
        assert "timestep 0" in status(app)
        while "timestep 1" not in status(app):
            await press_and_wait(pilot, app, "s")
        await press_and_wait(pilot, app, "s")          # the first op of timestep 1 ran
        pc = app.session.pc
        n = len(app.session.view(pc.path).net.op)
        later = [OpRef(pc.path, i) for i in range(pc.index + 1, n)]
        assert later
        for ref in later:
            line = tree_line(app, ref)
            assert not line.startswith("✓"), (ref, line)   # not run yet in timestep 1
        first = OpRef(pc.path, 0)
        line = tree_line(app, first)
        assert line.startswith("✓"), line


@asynctest
async def test_the_if_inspector_shows_cond_and_the_branch():
    app = NetvizApp(Session.open(EXAMPLES / "if_net" / "predict_net.pb"))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await press_and_wait(pilot, app, "n")
        await press_and_wait(pilot, app, "n")          # pc at the If
        app.main.select(OpRef((), 2))
        await pilot.pause()
        cond = bool(app.session.debugger.value("cond").reshape(()))
        shown = text_of(app.main.query_one(OpInspector))
        branch = "then_net" if cond else "else_net"
        assert f"cond@0 = {cond}" in shown and f"takes {branch}" in shown, shown
        await continue_to_end(pilot, app)
        app.main.select(OpRef((), 2))
        await pilot.pause()
        assert f"took {branch}" in text_of(app.main.query_one(OpInspector))
