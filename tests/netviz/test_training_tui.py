"""The TUI on training nets (backward pass and optimizer already in the net): sections, `g`, stepping."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from netviz.app import NetvizApp
from netviz.session import OpRef, Session
from netviz.widgets.op_inspector import OpInspector
from tests.netviz.waiting import asynctest, ready, text_of, wait_for

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def section_labels(app: NetvizApp) -> list[str]:
    return [str(n.label) for n in app.main.op_tree.root.children]


@asynctest
async def test_training_example_shows_sections_and_g_pairs_its_own_backward_ops():
    app = NetvizApp(Session.open(EXAMPLES / "mlp" / "predict_net.pb"))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        assert section_labels(app) == ["forward · 4 ops", "backward · 5 ops", "optimizer · 6 ops"]
        assert len(app.main.op_tree.nodes_by_ref) == 15
        await pilot.press("g")
        await wait_for(pilot, lambda: app.session.show_backward, "backward view")
        assert app.session.loss == "loss" and app.session.view(()).net is app.session.model.predict
        await wait_for(pilot, lambda: app.main.op_tree.populated, "the op tree")
        assert section_labels(app) == ["forward · 4 ops", "backward · 5 ops (loss loss)", "optimizer · 6 ops"]
        app.main.select(OpRef((), 6))  # FCGradient of fc2
        assert app.main.op_tree.linked == {OpRef((), 2)}


@asynctest
async def test_training_iteration_steps_forward_backward_and_update():
    app = NetvizApp(Session.open(EXAMPLES / "mlp" / "predict_net.pb"))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("g")
        await wait_for(pilot, lambda: app.session.show_backward, "backward view")
        await pilot.press("c")
        await wait_for(pilot, lambda: app.session.last_stop is not None and app.session.last_stop.reason == "end",
                       "the end of the iteration")
        assert all(app.session.executed(OpRef((), i)) for i in range(15))


@asynctest
async def test_grad_norm_overlay_shows_update_ratios_of_optimizer_ops():
    app = NetvizApp(Session.open(EXAMPLES / "mlp" / "predict_net.pb"))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("c")
        await wait_for(pilot, lambda: app.session.last_stop is not None and app.session.last_stop.reason == "end",
                       "the end of the iteration")
        rec = app.session.record(OpRef((), 11))  # WeightedSum updating fc1_w
        w0 = app.session.debugger.initial_value("fc1_w")
        w1 = app.session.debugger.value("fc1_w")
        assert rec.update_ratio == pytest.approx(float(np.linalg.norm(w1 - w0) / np.linalg.norm(w0)), rel=1e-6)
        assert 0 < rec.update_ratio < 1
        assert app.session.record(OpRef((), 6)).update_ratio is None  # FCGradient: a gradient norm
        await pilot.press("m", "m", "m")  # time, NaN, grad-norm
        await wait_for(pilot, lambda: app.main.op_tree.overlay == "grad-norm", "the grad-norm overlay")
        assert "Δ" in str(app.main.op_tree.nodes_by_ref[OpRef((), 11)].label)
        assert "‖" in str(app.main.op_tree.nodes_by_ref[OpRef((), 6)].label)


@asynctest
async def test_rnn_timestep_markers_point_at_the_ops_that_run():
    """Stepping into a RecurrentNetwork timestep: the pc and executed marks index the timestep
    program (link ops are rows of their own), so each marks the op the debugger ran."""
    app = NetvizApp(Session.open(EXAMPLES / "lstm" / "predict_net.pb"))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        s = app.session
        await pilot.press("n")
        await wait_for(pilot, lambda: s.pc == OpRef((), 1), "pc at the RecurrentNetwork")
        await pilot.press("s")
        step = ((1, "step_net"),)
        await wait_for(pilot, lambda: s.pc is not None and s.pc.path == step, "pc inside timestep 0")
        view = s.view(step)
        assert [op.type for op in view.net.op[:5]] == ["rnn_internal_apply_link"] * 5
        for k in range(7):
            dbg_op = s.debugger.current_op()
            assert s.op(s.pc) == dbg_op, f"step {k}: the pc marks {s.op(s.pc).type}, the debugger runs {dbg_op.type}"
            before = s.last_stop
            await pilot.press("n")
            await wait_for(pilot, lambda: s.last_stop is not before, f"step {k}")
        ran = [OpRef(step, i) for i in range(len(view.net.op)) if s.record(OpRef(step, i)) is not None]
        assert len(ran) == 7 and all(s.record(r).op_type == s.op(r).type for r in ran)
        await wait_for(pilot, lambda: app.main.op_tree.populated, "the op tree")
        node = app.main.op_tree.nodes_by_ref.get(OpRef(step, 0))
        assert node is None or str(node.label).startswith("✓")


@asynctest
async def test_lint_icon_and_inspector_explain_where_caffe2_differs():
    app = NetvizApp(Session.open(EXAMPLES / "while_net" / "predict_net.pb"))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        labels = {r.index: str(n.label) for r, n in app.main.op_tree.nodes_by_ref.items() if not r.path}
        assert "⚑" in labels[2] and "⚑" not in labels[3]  # the While Caffe2 refuses to differentiate
        details = app.session.op_details(OpRef((), 2))
        assert any("[while-writes-outer-blob] (Caffe2 refuses)" in t for t in details["lint"])
        app.main.select(OpRef((), 2))
        inspector = app.main.query_one(OpInspector)
        await wait_for(pilot, lambda: "⚑" in text_of(inspector) and "while-writes-outer-blob" in text_of(inspector),
                       "the inspector's lint line")
