"""checker/*: GradientChecker.CheckSimple vs Caffe2 1.10.2 (CAFFE2_FULL_GRAD_CHECK=1).

The analytic gradient is compared at 1e-5 relative (atol 1e-6).  The numeric estimate is a
float32 central difference of a loss of order 1-10 with step 0.005: its round-off is about
1e-7 * loss / step ~ 2e-4, and netviz sums the loss in float64 where Caffe2 uses float32, so
estimates are compared at rtol = atol = 1e-3.
"""
from __future__ import annotations

import pytest
from google.protobuf import text_format

from engine.caffe2.gradient_checker import GradientChecker
from engine.autodiff.gradient_ir import GradientRegistry
from proto import caffe2_pb2
from tests.differential.goldens import arrays, assert_close, case_names, clean_net, load

EST_TOL = 1e-3


def _op(text: str) -> caffe2_pb2.OperatorDef:
    return text_format.Parse(text, caffe2_pb2.OperatorDef())


def _clean(ops: list[caffe2_pb2.OperatorDef]) -> str:
    return text_format.MessageToString(clean_net(caffe2_pb2.NetDef(op=ops)))


@pytest.mark.parametrize("name", case_names("gradient_checker"))
def test_checker_matches_caffe2(name, monkeypatch):
    monkeypatch.setenv("CAFFE2_FULL_GRAD_CHECK", "1")
    case, data = load(name), arrays(load(name))
    op = _op(case["op"])
    ops, g_input = GradientRegistry.GetGradientForOp(op, [o + "_grad" for o in op.output])
    assert _clean(ops) == _clean([_op(t) for t in case["grad_ops"]])
    assert list(g_input) == case["g_input"]
    inputs = [data["input/" + b] for b in op.input]
    checker = GradientChecker(case["stepsize"], case["threshold"])
    for check in case["checks"]:
        k = check["input_to_check"]
        passed, analytic, numeric = checker.CheckSimple(op, inputs, k, case["outputs_with_grads"])
        assert passed == check["passed"]
        assert_close(analytic, data[f"grad/{k}"], f"grad/{k}")
        assert_close(numeric, data[f"grad_estimate/{k}"], f"grad_estimate/{k}", rtol=EST_TOL, atol=EST_TOL)
