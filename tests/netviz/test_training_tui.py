"""The TUI on training nets (backward pass and optimizer already in the net): sections, `g`, stepping."""
from __future__ import annotations

from pathlib import Path

from netviz.app import NetvizApp
from netviz.session import OpRef, Session
from tests.netviz.waiting import asynctest, ready, wait_for

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
