"""The last kernels (issue 35 item 6) beyond their one-op oracle cases (tests/golden/kernels_last/, checked
by tests/differential/test_kernels_oracle.py): whole nets from tests/golden/last_nets/ (written by
tests/oracle/gen_kernels_last.py) — ONNX-exported torch modules whose ATen nodes netviz must run, the
exporter's ATen configurations Caffe2's own op refuses (torch's values), and a PythonDLPack op with its
gradient (Caffe2's values) — plus the Stylizer noise cache and the one-line refusals."""
from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format

from engine.errors import ExecutionError
from engine.runtime.executor import run_op
from engine.autodiff.gradient_ir import GradientRegistry
from engine.model.opdef import create_operator
from engine.runtime.ops.image import STYLIZER_NOISE, caffe2_gaussian
from engine.runtime.ops.python_op import register_python_gradient_op, register_python_op
from engine.caffe2.workspace import Workspace
from tests.engine import golden_nets


def dlpack_affine(inputs, outputs):
    """Twin of the oracle's function (torch there, NumPy here): Y = 2 X + 1 through DLPack capsules."""
    outputs[0].feed(np.from_dlpack(_Capsule(inputs[0].data)) * 2 + 1)


def dlpack_affine_grad(inputs, outputs):
    outputs[0].feed(np.from_dlpack(_Capsule(inputs[2].data)) * 2)


class _Capsule:
    def __init__(self, c):
        self.c = c

    def __dlpack__(self, **_kw):
        return self.c

    def __dlpack_device__(self):
        return (1, 0)


@pytest.mark.parametrize("name", golden_nets.names("last_nets"))
def test_last_net_matches_reference(name: str) -> None:
    net, data, ws = golden_nets.load("last_nets", name)
    if name.startswith("python_dlpack"):
        token = register_python_op(dlpack_affine)
        register_python_gradient_op(token, dlpack_affine_grad)
        for op in net.op:
            op.arg[0].s = token.encode()
        grad_ops, _ = GradientRegistry.GetGradientForOp(net.op[0], ["Y_grad"])
        assert [text_format.MessageToString(g) for g in grad_ops] == [text_format.MessageToString(net.op[1])]
    ws.run_net_once(net)
    outs = [k for k in data if k.startswith("out/")]
    assert outs
    for k in outs:
        got, ref = ws.fetch_blob(k[4:]), data[k]
        assert got.dtype == ref.dtype and got.shape == ref.shape, k
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5, err_msg=k)


def test_onnx_net_stops_in_caffe2_runs_here() -> None:
    """The exporter's embedding_bag node carries include_last_offset, which Caffe2 1.10.2's ATen op was not
    built for; netviz runs the whole converted net (torch's output is the reference)."""
    net, _, _ = golden_nets.load("last_nets", "onnx_embedding_bag_layer_norm")
    ops = [(op.type, next(a.s for a in op.arg if a.name == "operator").decode()) for op in net.op if op.type == "ATen"]
    assert ops == [("ATen", "embedding_bag"), ("ATen", "layer_norm"), ("ATen", "cumsum")]
    assert any(a.name == "include_last_offset" for a in net.op[0].arg)


def _preprocess(ws: Workspace, seed: int | None, **args) -> np.ndarray:
    op = create_operator("PackedInt8BGRANHWCToNCHWCStylizerPreprocess", ["X", "M"], ["Y"], **args)
    if seed is not None:
        op.device_option.random_seed = seed
    run_op(op, ws)
    return ws.fetch_blob("Y")


def test_stylizer_noise_is_drawn_once_per_workspace() -> None:
    """Caffe2 keeps the first run's noise in the workspace for temporal consistency: a later run (another
    seed) reuses it, and the noise-free part is exactly value - mean."""
    ws = Workspace("stylizer")
    x = np.random.RandomState(0).randint(0, 256, size=(1, 4, 5, 4)).astype(np.uint8)
    ws.feed_blob("X", x)
    ws.feed_blob("M", np.array([1.0, 2.0, 3.0], np.float32))
    first = _preprocess(ws, 7, noise_size=13)
    noise = ws.fetch_blob(STYLIZER_NOISE)
    np.testing.assert_array_equal(noise, caffe2_gaussian(7, 13, 0.0, 10.0))
    np.testing.assert_array_equal(_preprocess(ws, 8, noise_size=13), first)
    clean = x[..., :3].astype(np.float32) - np.array([1, 2, 3], np.float32)
    cycle = noise[np.arange(4 * 5 * 3) % 13].reshape(4, 5, 3)
    np.testing.assert_array_equal(first, (clean + cycle).transpose(0, 3, 1, 2))


def test_refusals_are_one_line() -> None:
    ws = Workspace("refuse")
    ws.feed_blob("X", np.ones((2, 3), np.float32))
    for op, words in ((create_operator("ATen", ["X"], ["Y"], operator="no_such_fn"), "'no_such_fn'"),
                      (create_operator("ATen", ["X"], ["Y"], operator="sum", bogus=1), "bogus"),
                      (create_operator("TTLinearGradient", ["X"], ["Y"]), "stub")):
        with pytest.raises(ExecutionError) as err:
            run_op(op, ws)
        assert words in str(err.value) and "\n" not in str(err.value)
