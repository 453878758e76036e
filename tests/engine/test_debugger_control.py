"""Stepping through control flow: If branches, While iterations, Do nets, gradient While in
reverse iteration order, RNN timesteps — on the bundled examples."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.debugger import Debugger
from engine.model.modelio import load_model

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def debugger(name: str) -> Debugger:
    return Debugger(load_model(EXAMPLES / name / "predict_net.pb"))


def first_op(dbg: Debugger, op_type: str) -> tuple:
    return next(("op", i) for i, op in enumerate(dbg.frames[0].net.op) if op.type == op_type)


def labels(dbg: Debugger) -> list[str]:
    return [f.label for f in dbg.pc.frames]


def test_step_into_the_taken_if_branch() -> None:
    dbg = debugger("if_net")
    dbg.run_to(first_op(dbg, "If"))
    dbg.step_into()
    assert labels(dbg) == ["main", "then_net"] and dbg.pc.path[2] == "then_net"
    while dbg.current_op() is None or dbg.current_op().type != "FC":   # the branch body may sit in a Do
        dbg.step_into()
    assert labels(dbg)[1] == "then_net"
    depth = len(dbg.frames)
    dbg.step_out()
    assert len(dbg.frames) == depth - 1
    while len(dbg.frames) > 1:
        dbg.step_out()
    assert labels(dbg) == ["main"] and dbg.records[-1].op_type == "If"
    assert "Y" in dbg.ws.values


def test_step_over_an_if_runs_it_whole() -> None:
    dbg = debugger("if_net")
    dbg.run_to(first_op(dbg, "If"))
    before = len(dbg.records)
    dbg.step()
    ran = [r.op_type for r in dbg.records[before:]]
    assert labels(dbg) == ["main"] and ran[-1] == "If" and {"FC", "Relu"} <= set(ran)
    assert "Tanh" not in ran                                               # the else branch did not run


def test_step_into_a_while_iteration_and_out() -> None:
    dbg = debugger("while_net")
    dbg.run_to(first_op(dbg, "While"))
    seen = []
    while len(dbg.frames) > 1 or not seen:
        dbg.step_into()
        if len(dbg.frames) > 1:
            seen.append(dbg.pc.frames[1].label)
        if seen and seen[-1] == "iteration 1":
            break
    assert seen[0] == "cond_net check 0" and "iteration 0" in seen and seen[-1] == "iteration 1"
    assert "main › While op#" in dbg.pc.text() and "iteration 1" in dbg.pc.text()
    dbg.step_out()
    assert labels(dbg) == ["main"] and dbg.records[-1].op_type == "While"
    assert int(dbg.value("i")[0]) == 4


def _forward_h_per_iteration(dbg: Debugger, while_index: int) -> list[np.ndarray]:
    """Step through the forward While, collecting the Do-local `h` of each iteration."""
    hs = []
    while dbg.pc.path[:2] != ("op", while_index + 1) or len(dbg.frames) > 1:
        dbg.step_into()
        if dbg.records and dbg.records[-1].op_type == "FC" and len(dbg.frames) == 3:
            hs.append(np.array(dbg.frames[-1].ws.values["h"]))
    return hs


def test_backward_steps_through_the_gradient_while_in_reverse_iteration_order() -> None:
    dbg = debugger("while_net")
    fwd_while, grad_while = [i for i, op in enumerate(dbg.frames[0].net.op) if op.type == "While"]
    dbg.run_to(("op", fwd_while))
    forward_h = _forward_h_per_iteration(dbg, fwd_while)
    assert len(forward_h) == 3
    dbg.run_to(("op", grad_while))
    backward_h = []
    while not (dbg.pc.path == ("op", grad_while + 1)):
        dbg.step_into()
        ws_values = dbg.frames[-1].ws.values
        if len(dbg.frames) == 3 and dbg.pc.frames[1].label.startswith("iteration") and "h" in ws_values:
            h = np.array(ws_values["h"])
            if not backward_h or not np.array_equal(backward_h[-1], h):
                backward_h.append(h)
    assert len(backward_h) == 3
    for got, want in zip(backward_h, reversed(forward_h)):
        np.testing.assert_array_equal(got, want)


def test_do_runs_in_its_own_workspace() -> None:
    dbg = debugger("do_net")
    dbg.run_to(first_op(dbg, "Do"))
    dbg.step_into()
    assert labels(dbg) == ["main", "net"]
    inner_ws = dbg.frames[-1].ws
    assert inner_ws is not dbg.ws
    dbg.step_out()
    local = set(getattr(inner_ws.values, "local", {}))
    assert local and not (local - set(inner_ws.bindings())) & set(dbg.ws.values)


def test_nested_if_in_while_pc_has_three_levels() -> None:
    dbg = debugger("nested_if_in_while")
    deepest = 0
    while not dbg.finished and deepest < 4:
        dbg.step_into()
        deepest = max(deepest, len(dbg.frames))
    assert deepest >= 3
    assert dbg.continue_().reason == "end"


def test_step_back_out_of_a_subnet_undoes_the_whole_control_op() -> None:
    dbg = debugger("while_net")
    dbg.skip_end_stops = True  # past iteration 0: the whole While is undone, acc too
    w = first_op(dbg, "While")
    dbg.run_to(w)
    before = {k: np.array(v) for k, v in dbg.ws.values.items() if getattr(v, "dtype", object) != object}
    for _ in range(9):
        dbg.step_into()
    assert len(dbg.frames) > 1
    while len(dbg.frames) > 1 or dbg.pc.path != w:
        dbg.step_back()
    for k, v in before.items():
        np.testing.assert_array_equal(dbg.ws.values[k], v, err_msg=k)


def test_rnn_timesteps_are_frames() -> None:
    if not (EXAMPLES / "lstm" / "predict_net.pb").exists():
        pytest.skip("lstm example not built")
    dbg = debugger("lstm")
    rnn = first_op(dbg, "RecurrentNetwork")
    dbg.run_to(rnn)
    dbg.step_into()
    assert dbg.pc.frames[1].label == "timestep 0"
    timesteps = {"timestep 0"}
    while len(dbg.frames) > 1:
        dbg.step_into()
        if len(dbg.frames) > 1:
            timesteps.add(dbg.pc.frames[1].label)
    assert timesteps == {f"timestep {t}" for t in range(5)}
