"""``u`` into a finished subnet run and a second ``t`` in a loop (issue 42 item 18), on while_net."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.debugger import Debugger
from engine.model.modelio import load_model

WHILE = Path(__file__).resolve().parents[2] / "examples" / "while_net" / "predict_net.pb"
TANH = ("op", 2, "loop_net", 0, "net", 1)  # the loop body's Do › Tanh


def test_u_goes_back_into_the_iteration_it_left_with_its_values() -> None:
    d = Debugger(load_model(WHILE))
    d.run_to(TANH)
    d.run_to(TANH)
    assert "iteration 1" in d.pc.text()
    d.step()  # Tanh, out of the body (its end stop is passed over), to the next check
    assert "cond_net check 2" in d.pc.text()
    after = np.array(d.value("acc"), copy=True)
    d.step_back()
    assert d.pc.path == TANH and "iteration 1" in d.pc.text()
    d.step()
    assert "cond_net check 2" in d.pc.text()
    np.testing.assert_allclose(d.value("acc"), after)  # the replayed run made the same values
    while "iteration 2" not in d.pc.text():
        d.step()
    do = d.pc.path
    d.step()  # over the body's Do and out of the body
    assert "cond_net check 3" in d.pc.text()
    d.step_back()  # back before that Do, not into it
    assert d.pc.path == do and "iteration 2" in d.pc.text()


def test_u_after_n_over_a_loop_goes_back_over_it_whole() -> None:
    d = Debugger(load_model(WHILE))
    d.step()
    d.step()
    assert d.pc.path == ("op", 2)
    d.step()  # the whole While
    d.step_back()
    assert d.pc.path == ("op", 2)
    d.step_into()  # into it, to its last op, and out: u goes back in
    while len(d.frames) > 1:
        last = d.pc.path
        d.step()
    assert d.pc.path == ("op", 3)
    d.step_back()
    assert d.pc.path == last and "cond_net check 3" in d.pc.text()


def test_a_second_run_to_in_a_loop_reaches_the_next_iteration() -> None:
    d = Debugger(load_model(WHILE))
    seen = []
    for _ in range(4):
        d.run_to(TANH)
        seen.append(d.pc.text().split(" › ")[1])
    assert seen == ["While op#2 iteration 0", "While op#2 iteration 1", "While op#2 iteration 2", "op#3 AveragedLoss"]


def test_u_over_a_recurrent_gradient_and_n_again_give_the_same_values() -> None:
    """Stepping back over LSTM's RecurrentNetworkGradient stopped with "blob 'lstm/gates_t_grad' is a
    view of rows 0:1 of 'lstm/i2h_grad' …; cannot write shape ()" (a link's value from before it was linked)."""
    d = Debugger(load_model(WHILE.parents[1] / "lstm" / "predict_net.pb"))
    for op in (1, 5):  # the forward RecurrentNetwork, then its gradient
        d.run_to(("op", op))
        d.step()
        after = {n: np.array(v, copy=True) for n, v in d.frames[0].ws.values.items() if isinstance(v, np.ndarray)}
        d.step_back()
        assert d.pc.path == ("op", op)
        d.step()
        for name, value in after.items():
            np.testing.assert_allclose(d.value(name), value, err_msg=name)


def test_u_after_s_from_a_subnets_end_goes_back_to_that_end() -> None:
    """u reverses the last move: from ``cond_net check 0 › end`` (where f stops), s then u is there again
    (it went to the op before the end: found by a random s/n/f/u walk)."""
    d = Debugger(load_model(WHILE))
    while "Do op#0 › op#1 LT" not in d.pc.text():
        d.step_into()
    d.step_out()
    end = d.pc.text()
    assert end.endswith("cond_net check 0 › end")
    d.step_into()
    assert d.pc.text() != end
    d.step_back()
    assert d.pc.text() == end
