"""The blob inspector on an Int8 blob (issue #20): integer values, scale, zero point, real statistics."""
from __future__ import annotations

from engine.opdef import create_operator as op
from netviz.app import NetvizApp
from netviz.session import Session
from proto import caffe2_pb2
from tests.netviz.tui_nets import write
from tests.netviz.waiting import asynctest, ready, text_of, wait_for


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
