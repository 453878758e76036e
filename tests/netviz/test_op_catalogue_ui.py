"""Pilot tests of the catalogue in the TUI: the op inspector's description, named slots, argument
defaults, in-place markers and gradient status; graph colours by category; search by category."""
from __future__ import annotations

from pathlib import Path

from netviz.app import NetvizApp
from netviz.screens.search import SearchScreen
from netviz.session import OpRef, Session
from netviz.style import category_fill
from netviz.widgets.op_inspector import OpInspector
from tests.netviz.tui_nets import mlp, write
from tests.netviz.waiting import asynctest, notified, ready, text_of, wait_for


@asynctest
async def test_inspector_shows_description_slots_defaults_inplace_and_gradient(tmp_path: Path) -> None:
    app = NetvizApp(Session.open(write(tmp_path, "mlp", mlp())))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        inspector = app.main.query_one(OpInspector)
        text = text_of(inspector)
        assert "FC  op #0  fc1  [linear]" in text
        assert "Y = X W^T + b" in text  # netviz's description
        flat = " ".join(text.split())
        assert "in X = X@0" in flat and "in W = W1@0" in flat and "in b = b1@0" in flat and "out Y = h1@1" in flat
        unset = flat[flat.index(" unset "):]  # unset arguments folded into one row, after the set ones
        assert "axis=1" in unset  # unset argument with its default
        assert "float16_compute in X" in unset  # in Caffe2's schema, no netviz default: its name only
        assert "gradient has gradient" in flat
        await pilot.press("down")
        await wait_for(pilot, lambda: app.main.selected == OpRef((), 1), "Relu selected")
        await wait_for(pilot, lambda: "Relu" in text_of(inspector), "inspector on Relu")
        relu = text_of(inspector)
        assert "X -> Y in place (h1)" in relu and "max(X, 0)" in relu


@asynctest
async def test_graph_colours_ops_by_category_and_search_finds_a_category(tmp_path: Path) -> None:
    app = NetvizApp(Session.open(write(tmp_path, "mlp", mlp())))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        styles = {n.op: n.style for n in app.main.canvas.scene.nodes if n.kind == "op"}
        assert styles == {0: "linear", 1: "activation", 2: "linear", 3: "loss"}
        assert len({category_fill(s) for s in styles.values()}) == 3
        await pilot.press("slash")
        await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen), "search")
        await pilot.press(*"cat:loss", "enter")
        await wait_for(pilot, lambda: app.main.selected == OpRef((), 3), "the loss op selected")


@asynctest
async def test_loading_a_net_that_breaks_a_schema_warns(tmp_path: Path) -> None:
    net = mlp()
    del net.op[0].input[2]  # FC without its bias: Caffe2 refuses it
    app = NetvizApp(Session.open(write(tmp_path, "mlp", net)))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await wait_for(pilot, lambda: notified(app, "Input size 2 not in range [min=3, max=3]."), "the warning")
        assert "schema" in text_of(app.main.query_one(OpInspector))
