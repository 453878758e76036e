"""Nets Caffe2 refuses to run in the builders corpus (goldens from gen_builders_layers.py and
gen_builders_onnx.py), netviz's --fix-caffe2 gradient for the one the ONNX corpus found, and the
ONNX backend's whole init nets.

test_builders.py skips a case whose run Caffe2 refused ("run_error"); here netviz must refuse it
too in its default, Caffe2-exact mode.  The ONNX-exported MLP's BatchNorm1d is such a case:
Caffe2's SpatialBNGradient enforces a 3-D input (docs/fidelity.md, SpatialBNGradient in test
mode); with --fix-caffe2 netviz computes the gradient, checked here against central differences.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from engine.runtime import executor
from engine.errors import NetvizError
from engine.analysis.lint import fix_caffe2, lint_net
from engine.model.modelio import load_net
from engine.autodiff.training import FORWARD, split_training_net
from engine.caffe2.workspace import Workspace
from proto import caffe2_pb2
from tests.differential.test_builders import CASES, GOLDEN, _load, _run

META = {c: json.loads((GOLDEN / f"{c}.json").read_text()) for c in CASES if not c.startswith("builders/")}
REFUSED = [c for c, meta in META.items() if "run_error" in meta]
BACKEND_INIT = [c for c, meta in META.items() if "backend_init" in meta]


def test_the_onnx_corpus_holds_a_refused_batchnorm1d_gradient():
    assert "builders_onnx/onnx_mlp_grad" in REFUSED


@pytest.mark.parametrize("name", REFUSED)
def test_netviz_refuses_what_caffe2_refused(name):
    meta, net, arrays = _load(name)
    with pytest.raises(NetvizError, match="SpatialBNGradient"):
        _run(meta, net, arrays)


@pytest.mark.parametrize("name, refused", [("onnx_mlp_grad", True), ("onnx_cnn_grad", False)])
def test_lint_says_caffe2_refuses_the_gradient_of_a_2d_batchnorm(name, refused):
    _, net, _ = _load(f"builders_onnx/{name}")
    found = [f for f in lint_net(net) if f.rule == "spatialbn-is-test-gradient"]
    assert any(f.values_differ for f in found)  # both are is_test=1 (eval-mode export)
    assert any(f.refused for f in found) == refused


@pytest.mark.parametrize("name", BACKEND_INIT)
def test_the_backends_whole_init_net_fails_alone_and_runs_after_the_input(name):
    """onnx_graph_to_caffe2_net's init net (onnx >= 1.9) holds the fills and a copy of the graph
    ops, which read the input: Caffe2 refuses to run it alone, and so does netviz; fed the input
    as Caffe2's prepare() feeds it (zeros), it runs and leaves the parameters the fills made."""
    meta, _, arrays = _load(name)
    init = load_net(GOLDEN / meta["backend_init"])
    assert "non-existing input blob: x" in meta["backend_init_error"]["error"]
    with pytest.raises(NetvizError, match="input blob 'x' not found"):
        executor.run_net(init, Workspace("alone"))
    ws = Workspace("prepared")
    ws.feed_blob("x", np.zeros(meta["shapes"]["in/x"], arrays["in/x"].dtype))
    executor.run_net(init, ws)
    params = {o for op in load_net(GOLDEN / meta["init"]).op for o in op.output}
    for p in params:
        np.testing.assert_array_equal(ws.values[p], arrays["in/" + p].reshape(meta["shapes"]["in/" + p]), err_msg=p)


def test_fix_caffe2_gives_the_batchnorm1d_gradient_central_differences_give():
    meta, net, arrays = _load("builders_onnx/onnx_mlp_grad")
    with fix_caffe2():
        ws = _run(meta, net, arrays)
    got = {p: np.asarray(ws.values[p + "_grad"], np.float64) for p in ("bn.weight", "bn.bias")}
    forward = caffe2_pb2.NetDef()
    forward.op.extend(net.op[i] for i in split_training_net(net).indices(FORWARD))
    loss, eps = meta["losses"][0], 1e-2  # NOTE: float32 net; a ReLU kink within eps costs ~1e-3 of the largest

    def loss_at(param: str, j: int, step: float) -> float:
        arr = np.array(ws.values[param], np.float32)
        arr[j] += step
        ws.feed_blob(param, arr)
        executor.run_net(forward, ws)
        arr[j] -= step
        ws.feed_blob(param, arr)
        return float(np.asarray(ws.values[loss]).reshape(()))

    for param, g in got.items():
        fd = np.array([(loss_at(param, j, eps) - loss_at(param, j, -eps)) / (2 * eps) for j in range(g.size)])
        np.testing.assert_allclose(g, fd, rtol=2e-2, atol=1e-2 * np.abs(fd).max(), err_msg=param)
