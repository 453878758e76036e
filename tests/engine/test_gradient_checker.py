"""GradientChecker / NetGradientChecker, and generated backward ops checked against numeric gradients."""
from __future__ import annotations

import numpy as np
import pytest

from engine.caffe2 import workspace as ws
from engine.caffe2.gradient_checker import GradientChecker, NetGradientChecker
from engine.model.opdef import create_operator as co
from proto import caffe2_pb2
from tests.engine.kernel_cases import away, pos, randn

gradient_ir = pytest.importorskip("engine.autodiff.gradient_ir")


def test_check_simple_with_custom_grad_ops_passes_and_restores_workspace():
    ws.SwitchWorkspace("default")
    ws.FeedBlob("keep_me", np.ones(1))
    op = co("FC", ["X", "W", "b"], ["Y"])
    g = co("FCGradient", ["X", "W", "Y_grad"], ["W_grad", "b_grad", "X_grad"])
    inputs = [randn(3, 4), randn(2, 4), randn(2)]
    for i in range(3):
        ok, analytic, numeric = GradientChecker(0.01, 0.01).CheckSimple(op, inputs, i, [0], grad_ops=[g])
        assert ok and analytic.shape == inputs[i].shape
    assert ws.CurrentWorkspace() == "default" and ws.HasBlob("keep_me")
    assert "gradient_check" in ws.Workspaces() and not ws.HasBlob("X")


def test_check_simple_detects_a_wrong_gradient():
    op = co("Sigmoid", ["X"], ["Y"])
    wrong = co("TanhGradient", ["Y", "Y_grad"], ["X_grad"])
    ok, analytic, numeric = GradientChecker(0.01, 0.005).CheckSimple(op, [randn(2, 3)], 0, [0], grad_ops=[wrong])
    assert not ok and not np.allclose(analytic, numeric, atol=0.005)


CASES = [
    (co("Relu", ["X"], ["Y"]), [away(3, 4)], 0),
    (co("Conv", ["X", "W", "b"], ["Y"], kernel=3, pad=1, stride=2), [randn(2, 3, 5, 5), randn(4, 3, 3, 3), randn(4)], 1),
    (co("Conv", ["X", "W", "b"], ["Y"], kernel=3, pad=1, stride=2), [randn(2, 3, 5, 5), randn(4, 3, 3, 3), randn(4)], 0),
    (co("MaxPool", ["X"], ["Y"], kernel=2, stride=2), [randn(2, 2, 4, 4)], 0),
    # is_test is a required argument: Caffe2's maker refuses a SpatialBN without it (schema check)
    (co("SpatialBN", ["X", "s", "b", "m", "v"], ["Y", "m", "v", "sm", "sv"], is_test=0),
     [randn(3, 2, 2, 2), pos(2), randn(2), randn(2), pos(2)], 0),
    (co("Mul", ["A", "B"], ["C"], broadcast=1, axis=1), [randn(2, 3, 4), randn(3)], 1),
    (co("Softmax", ["X"], ["Y"]), [randn(2, 5)], 0),
    (co("LRN", ["X"], ["Y"], size=3, alpha=0.1, beta=0.75), [randn(2, 4, 2, 2)], 0),
    (co("Concat", ["A", "B"], ["C", "info"]), [randn(2, 3), randn(2, 2)], 1),
    (co("Sum", ["A", "B"], ["C"]), [randn(2, 3), randn(2, 3)], 0),
    (co("AveragePool", ["X"], ["Y"], kernel=3, stride=1, pad=1), [randn(1, 2, 4, 4)], 0),
]


@pytest.mark.parametrize("op,inputs,k", CASES, ids=lambda v: getattr(v, "type", None) or "")
def test_registry_generated_gradient_ops_match_numeric(op, inputs, k):
    ok, a, n = GradientChecker(0.005, 0.01).CheckSimple(op, inputs, k, [0])
    assert ok, (a, n)


def test_sparse_gradient_slice_is_densified():
    op = co("Gather", ["DATA", "IDX"], ["Y"])
    ok, analytic, _ = GradientChecker(0.01, 0.01).CheckSimple(op, [randn(5, 2), np.array([4, 1, 4])], 0, [0])
    assert ok and analytic.shape == (5, 2) and (analytic[[0, 2, 3]] == 0).all()


def test_net_gradient_checker_on_generated_backward_pass():
    net = caffe2_pb2.NetDef(name="small")
    net.op.extend([co("FC", ["X", "W", "b"], "h"), co("Tanh", "h", "h"), co("Sqr", "h", "h2"),
                   co("SumElements", "h2", "loss")])
    values = {"X": randn(3, 4), "W": randn(5, 4) * 0.5, "b": randn(5)}
    mean_d, max_d = NetGradientChecker.Check(net, ["loss"], values, "W", step_size=1e-2, threshold=0.05,
                                             print_net=False)
    assert max_d < 0.05


def test_generated_backward_of_conv_bn_relu_pool_fc_runs_and_matches_numeric():
    net = caffe2_pb2.NetDef(name="cnn")
    net.op.extend([
        co("Conv", ["data", "cw", "cb"], "c1", kernel=3, pad=1), co("SpatialBN", ["c1", "s", "bb", "rm", "rv"],
                                                                    ["bn", "rm", "rv", "sm", "siv"], is_test=0),
        co("Relu", "bn", "bn"), co("MaxPool", "bn", "p1", kernel=2, stride=2), co("FC", ["p1", "fw", "fb"], "logits"),
        co("SoftmaxWithLoss", ["logits", "label"], ["prob", "loss"])])
    values = {"data": randn(2, 2, 4, 4), "cw": randn(3, 2, 3, 3), "cb": randn(3), "s": pos(3), "bb": randn(3),
              "rm": np.zeros(3, np.float32), "rv": np.ones(3, np.float32), "fw": randn(4, 12), "fb": randn(4),
              "label": np.array([1, 3], np.int32)}
    for blob in ("cw", "fw", "data"):
        _, max_d = NetGradientChecker.Check(net, ["loss"], values, blob, step_size=1e-2, threshold=0.05,
                                            print_net=False)
        assert max_d < 0.05
