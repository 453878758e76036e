"""Keys and flow of issue 42 (items 7, 15, 17, 18, 19, 21), each as a user meets it on the screen."""
from __future__ import annotations

from pathlib import Path

import pytest

from engine.errors import ModelError
from netviz.app import NetvizApp
from netviz.screens.prompt import PromptScreen
from netviz.session import OpRef, Session
from tests.conftest import zoo_nets
from tests.netviz.tui_nets import mlp, while_net, write
from tests.netviz.waiting import answer, asynctest, notified, ready, screen_text, wait_for

ZOO = {p.parent.name: p for p in zoo_nets()}


def test_a_mistyped_input_is_refused_naming_the_closest(tmp_path: Path) -> None:
    """Item 7: ``--input dta=…`` ran the TUI on random data without a word; the CLI warned."""
    path = write(tmp_path, "mlp", mlp())
    with pytest.raises(ModelError, match=r"--input Xx: no blob of 'mlp' has this name; did you mean X\?"):
        Session.open(path, inputs=["Xx=4,8"])
    # an inner blob is fed (as Caffe2's FeedBlob takes any name), with a notice
    assert Session.open(path, inputs=["h1=4,3"]).notices == [
        "--input h1: not an external input of the net (fed anyway)"]


@asynctest
async def test_every_missing_input_is_asked_for_in_one_round(tmp_path: Path) -> None:
    """Item 19: the mlp lacks X and label; a run asked for X, and only the next run found label."""
    app = NetvizApp(Session.open(write(tmp_path, "mlp", mlp())))
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await ready(pilot)
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(app.screen, PromptScreen), "the missing-input prompt")
        assert app.screen.title_text.startswith("give input X  [1 of 2: X, label]")
        assert notified(app, "2 inputs of the net are given by neither the init net nor --input: X, label")
        await answer(pilot, app, "4,8", then="give input label  [2 of 2: X, label]")
        await answer(pilot, app, "4:int32")
        await wait_for(pilot, lambda: notified(app, "X = float32[4, 8]; label = int32[4]; restarting"), "the feeds")
        await wait_for(pilot, lambda: app.main.idle and app.session.pc == OpRef((), 0), "the restart")
        await pilot.press("c")
        await wait_for(pilot, lambda: app.main.idle and app.session.last_stop.reason == "end", "the end of the net")


@pytest.mark.skipif("resnet50" not in ZOO, reason="no model zoo")
@asynctest
async def test_skip_default_works_on_a_zoo_net() -> None:
    """Item 15: K then Enter (zeros of the outputs' shapes) said "the shape of gpu_0/conv1 is unknown" on
    every zoo net: the made-up weights' widths are known only once they are made."""
    app = NetvizApp(Session.open(ZOO["resnet50"]))
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        await ready(pilot)
        for k in range(2):
            await pilot.press("K")
            await answer(pilot, app, "", clear=False)
            await wait_for(pilot, lambda: app.main.idle and app.session.pc == OpRef((), k + 1), f"pc at op {k + 1}")
        rec = app.session.record(OpRef((), 0))
        assert rec.skipped and rec.outputs[0].shape == (1, 16, 112, 112)
        assert not [n.message for n in app._notifications if n.severity == "error"]


@pytest.mark.skipif("mask_rcnn_2go_int8" not in ZOO, reason="no model zoo")
def test_skip_at_a_missing_input_asks_for_it() -> None:
    """Item 15 on Mask R-CNN2Go: op #0 reads `data`, which nothing gives; K's stop names it (the screen
    then asks for every missing input, as after n) instead of an unknown shape."""
    session = Session.open(ZOO["mask_rcnn_2go_int8"])
    session.skip("")
    assert session.last_stop.reason == "error" and "input blob 'data' not found" in session.last_stop.detail
    assert session.debugger.missing_inputs() == ["data", "im_info"]
