"""``u`` after a breakpoint stop inside a nested run (If/While/Do subnet, RNN timestep), found by QA's
random key walks: the live debugger went back to where the move that hit the breakpoint began (a ``t``
from timestep 0's op#4 that stopped at timestep 1's op#0 went back 4 ops), a replay of the recording one
op, to timestep 0's last op.  One op back is right: it is what ``u`` does in the main net, what the replay
does, and what a fresh run to that op holds.

Seeded random walks of n, s, f, u, c, t over the examples' control-flow nets, a breakpoint on the deepest
op type; at every breakpoint stop inside a nested run, ``u`` on the live debugger and on a replay of the
same stop must land on the same pc with the same records and blob versions, and the live state must be a
fresh run's to the same point (its records and pc: ground truth), values included."""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.debugger import Debugger
from engine.debugger.machine import DebuggerError
from engine.debugger.recorded import Recording
from engine.debugger.recording import record_run
from engine.debugger.replayer import ReplayDebugger
from engine.model.modelio import load_model

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NETS = ("while_net", "if_net", "nested_if_in_while", "do_net", "lstm")
WALKS, KEYS = 12, 40


def _live(name: str) -> Debugger:
    return Debugger(load_model(EXAMPLES / name / "predict_net.pb"), {}, device="cpu")


def _pc(d: Any) -> str:
    return "end" if d.finished else d.pc.text()


def _versions(d: Any) -> dict[str, int]:
    return {k: d.versions[k] for k in d.versions if d.versions[k]}


def _value(d: Debugger, blob: str) -> Any:
    """`blob`'s value as the pc's frame sees it (None: not visible there)."""
    try:
        return d.value(blob)
    except DebuggerError:
        return None


def _press(d: Any, key: str, target: tuple) -> Any:
    try:
        return {"n": d.step, "s": d.step_into, "f": d.step_out, "u": d.step_back, "c": d.continue_,
                "t": lambda: d.run_to(target)}[key]()
    except DebuggerError:
        return None


def _fresh(name: str, records: int, pc: str) -> Debugger:
    """A new debugger run unit by unit from the start until `records` ops ran and its pc reads `pc`."""
    d = _live(name)
    while not (len(d.records) == records and _pc(d) == pc):
        assert len(d.records) <= records and not d.finished, f"{name}: no fresh run reaches {pc} after {records} ops"
        d._advance()
    return d


def _replay_at(rec: Recording, bp_type: str, records: int) -> ReplayDebugger:
    """A replay stopped by the same breakpoint after the same ops (c from the start, hit after hit)."""
    rp = ReplayDebugger(rec)
    rp.add_breakpoint("type", bp_type)
    while len(rp.records) < records and rp.continue_().reason == "breakpoint":
        pass
    return rp


def _recorded(name: str, tmp: Path) -> tuple[Recording, str, list[tuple[Any, ...]]]:
    """A recording of `name`'s run, the deepest op type (the walks' breakpoint) and the nested op paths
    (the walks' ``t`` targets)."""
    record_run(_live(name), tmp / "run.nvrec")
    rec = Recording.open(tmp / "run.nvrec")
    return rec, max(rec.stops, key=lambda s: len(s.path)).op_type, [s.path for s in rec.stops if len(s.path) > 2]


@pytest.mark.parametrize("name", NETS)
def test_u_after_a_breakpoint_stop_in_a_nested_run_matches_replay_and_a_fresh_run(name: str, tmp_path: Path) -> None:
    rec, bp_type, nested = _recorded(name, tmp_path)
    checked = 0
    for seed in range(WALKS):
        rng = random.Random(seed)
        live = _live(name)
        live.add_breakpoint("type", bp_type)
        target, keys = rng.choice(nested), ""
        for _ in range(KEYS):
            key = rng.choice("nnssfuuuct")
            keys += key
            stop = _press(live, key, target)
            if stop is None or stop.reason != "breakpoint" or len(live.pc.path) <= 2:
                continue
            where = f"{name} seed {seed} after {keys}"
            rp = _replay_at(rec, bp_type, len(live.records))
            assert (_pc(rp), len(rp.records)) == (_pc(live), len(live.records)), where
            for d in (live, rp):
                d.step_back()
            keys += "u"
            assert _pc(rp) == _pc(live), where
            assert [r.path for r in rp.records] == [r.path for r in live.records], where
            assert _versions(rp) == _versions(live), where
            truth = _fresh(name, len(live.records), _pc(live))
            assert _versions(truth) == _versions(live), where
            for blob, version in _versions(live).items():
                ours, fresh = _value(live, blob), _value(truth, blob)
                assert (ours is None) == (fresh is None), f"{where}: {blob}@{version}"
                if isinstance(ours, np.ndarray):
                    np.testing.assert_allclose(ours, fresh, rtol=1e-6, err_msg=f"{where}: {blob}@{version}")
                    # NOTE: the replay reads the pc's workspace too (a name a subnet shadows: its own value)
                    np.testing.assert_allclose(rp.value(blob), ours, rtol=1e-6, err_msg=f"{where}: replay {blob}")
            checked += 1
    assert checked >= 3, f"{name}: the walks stopped at a breakpoint inside a nested run only {checked} times"


def _pair(name: str, tmp: Path) -> tuple[Debugger, ReplayDebugger]:
    record_run(_live(name), tmp / "run.nvrec")
    return _live(name), ReplayDebugger(Recording.open(tmp / "run.nvrec"))


def test_c_before_a_control_op_stops_at_a_breakpoint_on_its_first_subnet_op(tmp_path: Path) -> None:
    """The replay's c scanned from after the first subnet op of the If the pc was before: it ran to the end."""
    live, rp = _pair("if_net", tmp_path)
    for d in (live, rp):
        d.add_breakpoint("type", "FC")
        d.step(), d.step()
        assert _pc(d) == "main › op#2 If"
        assert d.continue_().reason == "breakpoint"
    assert _pc(rp) == _pc(live) == "main › If op#2 then_net › Do op#0 › op#0 FC"
    assert len(rp.records) == len(live.records)


@pytest.mark.parametrize(("name", "last"), [("do_net", "main › Do op#5 › op#4 Copy"),
                                             ("if_net", "main › If op#6 then_net › Do op#0 › op#4 Copy")])
def test_u_after_c_to_the_end_goes_into_the_last_control_op_as_live(name: str, last: str, tmp_path: Path) -> None:
    """u after c goes back one op, into the last op the final control op ran (live replays into it); the
    replay went back before that op, as after n over it, and the next u's parted further."""
    live, rp = _pair(name, tmp_path)
    for d in (live, rp):
        assert d.continue_().reason == "end"
        d.step_back()
    assert _pc(rp) == _pc(live) == last
    assert _versions(rp) == _versions(live)
    for d in (live, rp):
        d.step(), d.step_back()  # after n, u reverses the n: back to the same op
    assert _pc(rp) == _pc(live) == last


def test_a_breakpoint_on_a_control_op_stops_before_it_only(tmp_path: Path) -> None:
    """A control op's recorded stop comes after its subnets' ops: the replay read a location breakpoint
    there as the place before it, so c at a Do breakpoint stopped at the same Do again, and n out of the
    Do's last op stopped "before" the Do it had just left (live: the next Do, the program's end)."""
    live, rp = _pair("if_net", tmp_path)
    seen = []
    for d in (live, rp):
        d.run_to(("op", 6, "then_net", 0, "net", 4))
        d.add_breakpoint("type", "Do")
        seen.append((_pc(d), d.step().reason, _pc(d)))
        d.restart()
        seen.append([_pc(d) for _ in range(3) if d.continue_().reason == "breakpoint"])
    assert seen[0] == seen[2] and seen[0][:2] == ("main › If op#6 then_net › Do op#0 › op#4 Copy", "step")
    assert seen[1] == seen[3] == ["main › If op#2 then_net › op#0 Do", "main › If op#6 then_net › op#0 Do"]


def test_t_to_an_op_its_subnet_will_not_run_again_says_so() -> None:
    """t from a Do's Relu to the same Do's FC ran on past the Do and stopped as if it had arrived
    (reason "step": the TUI shows no word for it)."""
    d = _live("do_net")
    d.run_to(("op", 1, "net", 1))
    stop = d.run_to(("op", 1, "net", 0))
    assert (stop.reason, _pc(d)) == ("passed", "main › op#2 AveragedLoss")
    assert stop.detail.startswith("run to main › Do op#1 › op#0 FC: it does not run again in this run")
    with pytest.raises(DebuggerError, match="ran already in this run"):  # now behind the pc: refused
        d.run_to(("op", 1, "net", 0))
    assert d.run_to(("op", 3)).reason == "step" and _pc(d) == "main › op#3 ConstantFill"


def test_u_after_a_stop_in_a_backward_loop_goes_back_into_its_last_iteration(tmp_path: Path) -> None:
    """The backward While's cond_net check 1, stopped at by a breakpoint: u went back over the whole While
    (re-running its iteration failed, "Failed to initialize Do op workspace": a backward Do's workspace
    stack, in the loop's child workspace, was not put back), the replay into iteration 0's last op."""
    live, rp = _pair("nested_if_in_while", tmp_path)
    for d in (live, rp):
        d.add_breakpoint("type", "HasScope")
        while "While op#9 cond_net check 1" not in _pc(d):
            assert d.continue_().reason == "breakpoint"
        d.step_back()
    assert _pc(rp) == _pc(live) == "main › While op#9 iteration 0 › op#2 Sum"
    assert _versions(rp) == _versions(live) == _versions(_fresh("nested_if_in_while", len(live.records), _pc(live)))
    assert live.step().reason == rp.step().reason == "step" and _pc(rp) == _pc(live)


def test_u_after_s_from_a_subnets_end_in_a_replay_goes_back_to_that_end(tmp_path: Path) -> None:
    """f to ``then_net › end``, s to the program's end, u: live goes back to the end stop s began at (it
    reverses the step); the replay went to the branch's last op, as after c."""
    live, rp = _pair("if_net", tmp_path)
    for d in (live, rp):
        d.run_to(("op", 6, "then_net", 0, "net", 4))
        d.step_out()
        assert _pc(d) == "main › If op#6 then_net › end"
        d.step_into()
        assert _pc(d) == "end"
        d.step_back()
    assert _pc(rp) == _pc(live) == "main › If op#6 then_net › end"
    assert [r.path for r in rp.records] == [r.path for r in live.records]


@pytest.mark.parametrize("name", NETS)
def test_full_walks_agree_after_every_key(name: str, tmp_path: Path) -> None:
    """The same seeded walks, live and a replay side by side, compared after every key (not only at u
    after a nested breakpoint stop): 8 of 60 parted, in chains around a subnet's "› end" (``tnfnuu``,
    ``f`` to the program's end then ``u``).  Live lost where a move began once a ``u`` popped an op (its
    move starts held the count of units pushed, not the last unit's serial) or ran units again (new
    serials); the replay forgot an ``n`` that ran no op but moved from a subnet's end.  The u after such
    chains reverses the last move not undone, as in the main net; each u's state is a fresh run's."""
    rec, bp_type, nested = _recorded(name, tmp_path)
    fresh_checks = 0
    for seed in range(WALKS):
        rng = random.Random(seed)
        live, rp = _live(name), ReplayDebugger(rec)
        for d in (live, rp):
            d.add_breakpoint("type", bp_type)
        target, keys = rng.choice(nested), ""
        for _ in range(KEYS):
            key = rng.choice("nnssfuuuct")
            keys += key
            reasons = [getattr(_press(d, key, target), "reason", None) for d in (live, rp)]
            where = f"{name} seed {seed} after {keys}"
            assert (_pc(rp), len(rp.records)) == (_pc(live), len(live.records)), where
            assert (reasons[0] is None) == (reasons[1] is None), f"{where}: refused on one side only"
            assert _versions(rp) == _versions(live), where
            if key == "u" and reasons[0] is not None and fresh_checks < 20:
                assert _versions(_fresh(name, len(live.records), _pc(live))) == _versions(live), where
                fresh_checks += 1


@pytest.mark.parametrize("name, kind, spec", [("lstm", "type", "LSTMUnit"), ("while_net", "path", None)])
def test_a_reverse_breakpoint_stop_names_its_op_as_a_forward_one(name: str, kind: str, spec: Any,
                                                                 tmp_path: Path) -> None:
    """``U`` said ``#1 op op/5 · hits 0 (reverse)`` (a raw path) and ``#1 type LSTMUnit · hits 2 (reverse)``
    (no place): live and replay now word the stop as a forward one, plus "(reverse)"."""
    from engine.debugger.timetravel import reverse_continue_live  # noqa: PLC0415

    rec, _, nested = _recorded(name, tmp_path)
    spec = spec if spec is not None else nested[0]
    live, replay = _live(name), ReplayDebugger(rec)
    for d in (live, replay):
        d.add_breakpoint(kind, spec)
        forward = d.continue_()
        assert forward.reason == "breakpoint"
        d.step()
        back = reverse_continue_live(d) if d is live else d.reverse_continue()
        assert back.reason == "breakpoint" and back.detail.endswith(" (reverse)"), back.detail
        assert back.detail.removesuffix(" (reverse)").split(" · ")[0] == forward.detail.split(" · ")[0], \
            (forward.detail, back.detail)
        assert " › " in back.detail and "op#" in back.detail, back.detail
