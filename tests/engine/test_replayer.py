"""The recording behind the live debugger's face (engine.debugger.replayer): the session's moves and
values over a recording, stepping back into finished subnets, no kernel run."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.debugger import Debugger
from engine.debugger.machine import DebuggerError
from engine.debugger.recorded import Recording
from engine.debugger.recording import record_run
from engine.debugger.replayer import ReplayDebugger
from engine.model.modelio import load_model

ROOT = Path(__file__).resolve().parents[2]


def _replay(tmp: Path, name: str) -> tuple[ReplayDebugger, Debugger]:
    live = Debugger(load_model(ROOT / "examples" / name / "predict_net.pb"), {}, device="cpu")
    record_run(live, tmp / "run.nvrec")
    return ReplayDebugger(Recording.open(tmp / "run.nvrec")), live


def test_moves_match_the_live_records_and_values(tmp_path: Path) -> None:
    dbg, live = _replay(tmp_path, "while_net")
    assert dbg.step().pc.text() == "main › op#1 CreateScope"
    stop = dbg.step()
    # the pc before the While, as live: its runs are ahead (not in the records, not in the values)
    before = Debugger(load_model(ROOT / "examples" / "while_net" / "predict_net.pb"), {}, device="cpu")
    before.step(), before.step()
    assert stop.pc.text() == "main › op#2 While" and [r.path for r in dbg.records] == [r.path for r in before.records]
    assert {k: dbg.versions[k] for k in before.versions} == dict(before.versions)
    np.testing.assert_array_equal(dbg.value("acc"), np.asarray(before.value("acc")))
    assert dbg.step().pc.text() == "main › op#3 AveragedLoss" and dbg.records[-2].frames  # n passed it whole
    assert dbg.step_back().pc.text() == "main › op#2 While"  # u undoes the whole While, as live
    assert dbg.step_back().pc.text() == "main › op#1 CreateScope"
    # the finished loop's ops are still reachable: a breakpoint in it, run to backwards
    dbg.continue_()
    dbg.add_breakpoint("path", next(s.path for s in dbg.rec.stops if s.op_type == "Tanh"))
    back = dbg.reverse_continue()
    assert back.reason == "breakpoint" and back.pc.text().endswith("op#1 Tanh") and len(dbg.cursor.stop.path) > 2
    dbg.remove(next(iter(dbg.breakpoints)))
    assert dbg.continue_().reason == "end" and dbg.finished
    assert [r.path for r in dbg.records] == [r.path for r in live.records]
    for name in ("acc", "i"):
        np.testing.assert_array_equal(dbg.value(name), np.asarray(live.value(name)))
    dbg.restart()
    assert dbg.cursor.pos == 0 and dbg.records == []


def test_breakpoints_and_run_to_inside_a_loop(tmp_path: Path) -> None:
    dbg, _ = _replay(tmp_path, "while_net")
    tanh = next(s for s in dbg.rec.stops if s.op_type == "Tanh")
    bp = dbg.add_breakpoint("path", tanh.path)
    assert dbg.continue_().reason == "breakpoint" and dbg.cursor.stop == tanh
    assert dbg.continue_().pc.text().endswith("op#1 Tanh") and dbg.cursor.stop.iteration == "iteration 1"
    assert dbg.reverse_continue().reason == "breakpoint" and dbg.cursor.stop == tanh
    dbg.remove(bp.id)
    dbg.run_to(tanh.path)
    assert dbg.cursor.stop.iteration == "iteration 1"
    assert "iteration" in dbg.step_out().pc.text() or dbg.cursor.stop.path[:2] == tanh.path[:2]


def test_edits_are_refused_in_one_line(tmp_path: Path) -> None:
    dbg, _ = _replay(tmp_path, "mlp")
    with pytest.raises(DebuggerError, match="read-only"):
        dbg.inject("data", 0.0)


@pytest.mark.parametrize("name", ["lstm", "nested_if_in_while", "do_net"])
def test_the_pc_names_each_stop_as_the_live_debugger_ran_it(name: str, tmp_path: Path) -> None:
    """RNN timesteps are their step net with Caffe2's link ops (engine.runtime.ops.rnn.timestep_program)."""
    dbg, _ = _replay(tmp_path, name)
    for stop in dbg.rec.stops:
        dbg.cursor.goto(stop.seq)
        assert dbg.current_op().type == stop.op_type and dbg.pc.frames[-1].op_type == stop.op_type
        assert dbg.pc.path == stop.path


def test_norms_are_read_from_the_recording_when_asked(tmp_path: Path) -> None:
    live = Debugger(load_model(ROOT / "examples" / "mlp_forward" / "predict_net.pb"), {"data": (16, 8)},
                    device="cpu", loss="loss")
    record_run(live, tmp_path / "run.nvrec")
    dbg = ReplayDebugger(Recording.open(tmp_path / "run.nvrec"))
    dbg.continue_()
    got = [(r.path, r.grad_norm, [o.norm for o in r.outputs]) for r in dbg.records]
    want = [(r.path, r.grad_norm, [o.norm for o in r.outputs]) for r in live.records]
    assert [g[0] for g in got] == [w[0] for w in want]
    for g, w in zip(got, want):
        assert (g[1] is None) == (w[1] is None) and (g[1] is None or abs(g[1] - w[1]) <= 1e-6 * max(1.0, w[1]))
        np.testing.assert_allclose([x if x is not None else np.nan for x in g[2]],
                                   [x if x is not None else np.nan for x in w[2]], rtol=1e-6)
    assert any(g[1] for g in got)


def _pc(dbg: object) -> str:
    return "end" if dbg.finished else dbg.pc.text()


def _press(dbg: object, key: str, target: tuple) -> str:
    """One debugger key as the TUI sends it; the pc label after it, or "refused"."""
    try:
        {"n": dbg.step, "s": dbg.step_into, "f": dbg.step_out, "u": dbg.step_back, "c": dbg.continue_,
         "t": lambda: dbg.run_to(target)}[key]()
    except DebuggerError:
        return "refused"
    return _pc(dbg)


@pytest.mark.parametrize(("name", "keys"), [
    ("while_net", "nns" + "s" * 40),  # QA: s at the While steps into its cond_net check, not over the loop
    ("while_net", "nnssssfsuuuunnsssssssssnfu" + "t" + "c" * 3),
    ("if_net", "s" * 30),
    ("if_net", "nnsssussfuunnnsssnsuuut" + "c" * 3),
    ("nested_if_in_while", "nns" + "s" * 70),
    ("nested_if_in_while", "nnsssssnfusssssssfuuuusnsnsnft" + "c" * 3),
    ("do_net", "s" * 30),
    ("do_net", "ssuunssnsuusfuuunnnnnsnsfut" + "c" * 3),
    ("lstm", "s" * 60),
    ("lstm", "snsfuusnnnnnnnnsssfnnt" + "c" * 3),
])
def test_every_move_lands_where_the_live_debugger_stops(name: str, keys: str, tmp_path: Path) -> None:
    """n, s, f, u, t, c on the replay and on a live debugger of the same net: the same pc label after
    each key (c with the same breakpoint on both: the deepest op type the run has; t to the first op
    of a subnet run)."""
    dbg, _ = _replay(tmp_path, name)
    live = Debugger(load_model(ROOT / "examples" / name / "predict_net.pb"), {}, device="cpu")
    deepest = max(dbg.rec.stops, key=lambda s: len(s.path))
    target = next(s.path for s in dbg.rec.stops if len(s.path) > 2)
    for d in (dbg, live):
        d.add_breakpoint("type", deepest.op_type)
    done = ""
    for key in keys:
        done += key
        assert _press(dbg, key, target) == _press(live, key, target), f"{name}: after {done}"


def test_an_expression_at_a_replay_stop_reads_what_live_reads(tmp_path: Path) -> None:
    """``:`` in a replay was an internal error (the expression's blobs came from ``dbg.frames``, which a
    replay has not); it reads the pc workspace's recorded values, and a name that workspace cannot see
    is no blob there, as live says."""
    from engine.debugger.repl import EvalError, evaluate  # noqa: PLC0415

    dbg, _ = _replay(tmp_path, "while_net")
    live = Debugger(load_model(ROOT / "examples" / "while_net" / "predict_net.pb"), {}, device="cpu")
    seen = 0
    while not live.finished:
        for expr in ("acc.sum()", "float(np.abs(W).max())", "b.mean()", "i"):
            try:
                want = evaluate(live, expr)
            except EvalError as e:
                with pytest.raises(EvalError) as got:
                    evaluate(dbg, expr)
                assert str(got.value) == str(e)
                continue
            seen += 1
            np.testing.assert_allclose(evaluate(dbg, expr), want)
        live.step_into(), dbg.step_into()
    assert seen > 20


@pytest.mark.parametrize("name", ["lstm", "while_net"])
def test_a_condition_stop_is_worded_as_live_words_it(name: str, tmp_path: Path) -> None:
    """Live says which writes made the condition hold (``… · hits 1 (after lstm/hidden_state,
    lstm/cell_state)``); a replay's stop said ``… · hits 1`` only."""
    dbg, _ = _replay(tmp_path, name)
    live = Debugger(load_model(ROOT / "examples" / name / "predict_net.pb"), {}, device="cpu")
    blob = "lstm/hidden_state" if name == "lstm" else "acc"
    texts = []
    for d in (live, dbg):
        d.add_breakpoint("condition", condition=f"max_abs({blob}) > 0.3")
        stops = [d.continue_() for _ in range(3)]
        texts.append([(s.reason, s.detail, d.pc.text()) for s in stops])
    assert texts[0] == texts[1]
    assert texts[0][0][0] == "condition" and "(after " in texts[0][0][1]
