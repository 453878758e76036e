"""The TUI on issue #20's nets: an Int8 blob in the inspector (integers, scale, zero point, real
statistics) and stepping into the If of the Mask R-CNN2Go zoo nets."""
from __future__ import annotations

import numpy as np
import pytest

from engine.model.opdef import create_operator as op
from netviz.app import NetvizApp
from netviz.session import OpRef, Session
from proto import caffe2_pb2
from tests.netviz.tui_nets import write
from tests.netviz.waiting import asynctest, continue_to_end, ready, text_of, wait_for


def int8_net() -> caffe2_pb2.NetDef:
    net = caffe2_pb2.NetDef(name="q", op=[
        op("Int8Quantize", "X", "Xq", Y_scale=0.5, Y_zero_point=10, name="quantize"),
        op("Int8Relu", "Xq", "Yq", Y_scale=0.5, Y_zero_point=10, name="relu"),
        op("Int8Dequantize", "Yq", "Y", name="dequantize"),
    ])
    net.external_input.append("X")
    net.external_output.append("Y")
    return net


@asynctest
async def test_int8_blob_shows_integers_scale_zero_point_and_real_stats(tmp_path):
    app = NetvizApp(Session.open(write(tmp_path, "q", int8_net()), inputs=["X=2,3"]))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("c")
        await wait_for(pilot, lambda: app.main.idle and app.session.value("Yq") is not None, "the run")
        app.main.query_one("#blob-list").focus()
        for _ in range(8):  # the first Int8 blob of the list (Xq or Yq)
            if app.main.blob is not None and app.main.blob.name in ("Xq", "Yq"):
                break
            await pilot.press("down")
            await pilot.pause()
        assert app.main.blob is not None and app.main.blob.name in ("Xq", "Yq")
        text = text_of(app.main.query_one("#blob-values"))
        assert "Int8 tensor: real = 0.5 × (q − 10)" in text
        assert "dequantized (real) values" in text and "mean/std" in text


@pytest.mark.parametrize("model", ["mask_rcnn_2go_fp32", "mask_rcnn_2go_int8"])
@asynctest
async def test_step_into_the_mask_rcnn_if(zoo, tmp_path, model):
    """A zoo detection net runs to its If (random seeded weights) and `s` steps into the branch taken."""
    np.save(tmp_path / "im_info.npy", np.array([[192, 192, 1.0]], np.float32))
    session = Session.open(zoo / model / "model.pbtxt", inputs=["data=1,3,192,192", f"im_info={tmp_path / 'im_info.npy'}"])
    app = NetvizApp(session)
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        at_if = next(i for i, o in enumerate(session.model.predict.op) if o.type == "If")
        session.toggle_breakpoint(OpRef((), at_if))
        await pilot.press("c")
        await wait_for(pilot, lambda: app.main.idle and session.pc == OpRef((), at_if), "the pc at the If", timeout=120)
        await pilot.press("s")
        await wait_for(pilot, lambda: session.pc is not None and session.pc.path
                       and session.pc.path[0][0] == at_if, "the pc inside a branch of the If", timeout=60)
        assert session.pc.path[0][1] in ("then_net", "else_net")


@asynctest
async def test_faster_rcnn_runs_to_the_end_in_the_tui(zoo, tmp_path):
    """Continue through the whole zoo Faster R-CNN (random seeded weights): proposals, RoIAlign, box head, NMS."""
    np.save(tmp_path / "im_info.npy", np.array([[192, 192, 1.0]], np.float32))
    path = zoo / "detectron_e2e_faster_rcnn_R-50-C4_1x" / "predict_net.pbtxt"
    session = Session.open(path, inputs=["data=1,3,192,192", f"im_info={tmp_path / 'im_info.npy'}"])
    app = NetvizApp(session)
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await continue_to_end(pilot, app, timeout=120)
        assert session.value("score_nms") is not None and session.value("bbox_nms").shape[1] == 4
