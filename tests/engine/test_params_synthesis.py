"""``--random-params`` on weightless nets whose layers need more than "16 filters per conv" (issue #30
item 5, #35 item 8): ConvTranspose, MatMul and BatchMatMul weights; Mul/Add constants in the shape
Caffe2 broadcasts (``(C, 1, 1)`` for an NCHW channel vector, ``(C,)`` at ``axis`` with
``broadcast=1``); a depthwise conv after an op the old walk did not pass (its filter was
``(60, 0, 3, 3)``); a conv whose width a fixed Reshape or a given FC/conv filter decides (ONNX
SqueezeNet's Reshape to 1000); AffineChannel.  Each net runs end to end through ``netviz run``.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.model.modelio import save_net
from engine.model.opdef import create_operator as op
from engine.runtime.params import synthesize_params
from netviz.cli import main
from proto import caffe2_pb2


def _net(name: str, ops: list, inputs: list[str]) -> caffe2_pb2.NetDef:
    net = caffe2_pb2.NetDef(name=name, op=ops)
    net.external_input.extend(inputs + [i for o in ops for i in o.input if i.endswith(("_w", "_b", "_s"))])
    return net


NETS = {
    "conv_transpose": [op("Conv", ["data", "c1_w", "c1_b"], "c1", kernel=3), op("Relu", "c1", "c1"),
                       op("ConvTranspose", ["c1", "up_w", "up_b"], "up", kernel=2, stride=2)],
    "matmul": [op("Flatten", "data", "flat"), op("MatMul", ["flat", "mm_w"], "mm"),
               op("ExpandDims", "mm", "mm3", dims=[0]), op("BatchMatMul", ["mm3", "bmm_w"], "bmm")],
    "broadcast_constants": [op("Conv", ["data", "c1_w", "c1_b"], "c1", kernel=1),
                            op("Mul", ["c1", "scale_s"], "m"),  # NumPy rules: (C, 1, 1)
                            op("Add", ["m", "shift_b"], "a", broadcast=1, axis=1)],  # legacy: (C,) at axis 1
    "depthwise_after_mul": [op("Conv", ["data", "c1_w", "c1_b"], "c1", kernel=1),
                            op("Mul", ["c1", "gate_s"], "g"),
                            op("Conv", ["g", "dw_w", "dw_b"], "dw", kernel=3, pad=1, group=60)],
    "fixed_reshape": [op("Conv", ["data", "c10_w", "c10_b"], "c10", kernel=1), op("Relu", "c10", "c10"),
                      op("AveragePool", "c10", "pool", global_pooling=1), op("Reshape", "pool", ["flat", "old"],
                                                                               shape=[1, 1000]),
                      op("Softmax", "flat", "prob")],
    "affine_channel": [op("Conv", ["data", "c1_w", "c1_b"], "c1", kernel=3),
                       op("AffineChannel", ["c1", "ac_s", "ac_b"], "ac")],
}


def _write(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    save_net(_net(name, NETS[name], ["data"]), folder / "predict_net.pb")
    (folder / "value_info.json").write_text(json.dumps({"data": [1, [1, 3, 8, 8]]}))
    return folder / "predict_net.pb"


@pytest.mark.parametrize("name", sorted(NETS))
def test_weightless_net_runs_with_random_params(name, tmp_path, capsys):
    rc = main(["run", str(_write(tmp_path, name)), "--random-params"])
    out, err = capsys.readouterr()
    assert rc == 0 and out.splitlines()[-1].endswith("stopped: end"), err


def _made(name: str) -> dict[str, np.ndarray]:
    return synthesize_params(_net(name, NETS[name], ["data"]), {"data": np.zeros((1, 3, 8, 8), np.float32)})


def test_broadcast_constants_have_caffe2s_shapes():
    made = _made("broadcast_constants")
    assert made["scale_s"].shape == (16, 1, 1) and made["shift_b"].shape == (16,)


def test_the_layer_before_a_depthwise_conv_gets_its_groups_as_width():
    made = _made("depthwise_after_mul")
    assert made["c1_w"].shape == (60, 3, 1, 1) and made["dw_w"].shape == (60, 1, 3, 3)


def test_a_fixed_reshape_decides_the_width_of_the_conv_before_it():
    assert _made("fixed_reshape")["c10_w"].shape == (1000, 3, 1, 1)


def test_conv_transpose_and_matmul_weights_are_made():
    made = {**_made("conv_transpose"), **_made("matmul")}
    assert made["up_w"].shape == (16, 16, 2, 2) and made["up_b"].shape == (16,)
    assert made["mm_w"].shape == (192, 1000) and made["bmm_w"].shape == (1, 1000, 1000)


def test_a_width_no_reader_fixes_says_which_flag_may_fit(tmp_path, capsys):
    """A Reshape to (1, 7, -1) takes any width divisible by 7: nothing says which, so a failing run
    names --param-width (and --init) instead of leaving the user with NumPy's reshape error alone."""
    NETS["reshape_by_7"] = [op("Conv", ["data", "c1_w", "c1_b"], "c1", kernel=3),
                            op("Reshape", "c1", ["r", "old"], shape=[1, 7, -1])]
    try:
        path = _write(tmp_path, "reshape_by_7")
    finally:
        del NETS["reshape_by_7"]
    rc = main(["run", str(path), "--random-params"])
    err = capsys.readouterr().err
    assert rc == 2 and "op #1 Reshape" in err and "--param-width" in err and "Error" not in err
    assert main(["run", str(path), "--random-params", "--param-width", "14"]) == 0


def test_onnx_squeezenets_reshape_constant_decides_the_last_conv(tmp_path, capsys):
    """Caffe2's ONNX backend gives Reshape its target as a constant input filled by the init net
    (SqueezeNet: (1, 1000) after conv10 and a 13x13 average pool): conv10 gets 1000 filters."""
    folder = tmp_path / "squeezenet_tail"
    folder.mkdir()
    net = caffe2_pb2.NetDef(name="squeezenet_tail", op=[
        op("Conv", ["data", "conv10_w", "conv10_b"], "c10", kernel=1), op("Relu", "c10", "c10"),
        op("AveragePool", "c10", "pool", kernel=8), op("Reshape", ["pool", "OC2_DUMMY_1"], ["flat", "old"]),
        op("Softmax", "flat", "prob")])
    net.external_input.extend(["data", "conv10_w", "conv10_b", "OC2_DUMMY_1"])
    save_net(net, folder / "predict_net.pb")
    save_net(caffe2_pb2.NetDef(name="init", op=[op("GivenTensorInt64Fill", [], "OC2_DUMMY_1", shape=[2],
                                                   values=[1, 1000])]), folder / "init_net.pb")
    (folder / "value_info.json").write_text(json.dumps({"data": [1, [1, 3, 8, 8]]}))
    rc = main(["run", str(folder / "predict_net.pb"), "--random-params"])
    out, err = capsys.readouterr()
    assert rc == 0 and "prob[1, 1000]" in out, err
