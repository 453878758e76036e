"""QA: an in-place activation of an inference net is no parameter update (no ‖ΔW‖/‖W‖ for it)."""
from __future__ import annotations

from netviz.app import NetvizApp
from netviz.overlays import OVERLAYS
from netviz.session import OpRef, Session
from tests.netviz.waiting import asynctest, ready, tree_line, wait_for


@asynctest
async def test_resnet_in_place_relu_gets_no_update_ratio_in_the_grad_norm_overlay(zoo):
    # ResNet-50: op #2 Relu writes gpu_0/res_conv1_bn in place (the SpatialBN output of op #1)
    app = NetvizApp(Session.open(zoo / "resnet50" / "predict_net.pbtxt"))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        relu = app.session.op(OpRef((), 2))
        assert relu.type == "Relu" and list(relu.input) == list(relu.output)
        for _ in range(3):
            await pilot.press("n")
            await wait_for(pilot, lambda: app.main.idle and app.session.debugger is not None, "a step")
        await wait_for(pilot, lambda: app.session.executed(OpRef((), 2)), "op #2 run")
        assert app.session.record(OpRef((), 2)).update_ratio is None
        while OVERLAYS[app.main.overlay] != "grad-norm":
            await pilot.press("m")
        await pilot.pause()
        assert "Δ" not in tree_line(app, OpRef((), 2)), tree_line(app, OpRef((), 2))
