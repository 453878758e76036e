"""op/*: one forward op per case vs Caffe2 1.10.2: gradient ops, gradient map, forward and gradient values."""
from __future__ import annotations

import numpy as np
import pytest

from engine.runtime.workspace import eval_op
from tests.differential.bugs import assert_differs_from_caffe2, check_numeric
from tests.differential.goldens import (arrays, assert_same_ops, backward, case_names, check_backward_case,
                                        grad_net_of, load)

XFAIL: dict[str, str] = {}
# Caffe2's CPU-only wheel cannot create these ops; netviz runs them (host stand-in for CUDA, fp16 on CPU).
RUNS_IN_NETVIZ = {"op/CopyCPUToGPU", "op/CopyGPUToCPU"}
RANDOM = {"op/Dropout_train": ("Y", "mask"), "op/Dropout_inplace": ("X", "mask")}
BUGS = {"op/Mul_inplace0": (["A", "B"], ["B_grad"]), "op/Mul_inplace_y_eq_y_times_x": (["X0", "x"], ["x_grad"]),
        "op/Log_inplace": (["X"], ["X_grad"]), "op/Sqr_inplace": (["X"], ["X_grad"])}
DIVERGES = {"op/SpatialBN_test", "op/ReluFp16"}  # separate tests below


def _param(name: str, xfail: dict[str, str]) -> object:
    return pytest.param(name, marks=pytest.mark.xfail(reason=xfail[name], strict=False)) if name in xfail else name


CASES = [_param(n, XFAIL) for n in case_names("op_gradient") if n not in BUGS and n not in DIVERGES]


@pytest.mark.parametrize("name", CASES)
def test_op_matches_caffe2(name):
    check_backward_case(load(name), random=RANDOM.get(name, ()), forward_error=name not in RUNS_IN_NETVIZ)


@pytest.mark.parametrize("name", sorted(RANDOM))
def test_dropout_output_follows_its_own_mask(name):
    """netviz's RNG is not Caffe2's: the mask differs, but Y = X * mask / (1 - ratio) holds."""
    data = arrays(load(name))
    x = data["input/X"]
    y, mask = eval_op("Dropout", x, n_out=2, ratio=0.5, is_test=0)
    np.testing.assert_allclose(y, x * mask / 0.5, rtol=1e-6)


@pytest.mark.parametrize("name", sorted(BUGS))
def test_caffe2_bug_inplace_gradient_is_correct(name):
    """Caffe2's gradient reads the input the in-place op overwrote; netviz reads a copy saved
    before the op (``_<blob>_saved_<i>``, docs/fidelity.md) and matches central differences."""
    case = load(name)
    wrt, wrong_in_caffe2 = BUGS[name]
    check_numeric(case, wrt)
    assert_differs_from_caffe2(case, wrong_in_caffe2)


def test_spatialbn_is_test_gradient_is_the_inference_one():
    """Caffe2's SpatialBNGradient ignores is_test and reads running_mean / running_var as the saved
    mean and inverse std of training mode; netviz differentiates the inference formula
    Y = scale * (X - mean) / sqrt(var + eps) + bias (docs/fidelity.md)."""
    case = load("op/SpatialBN_test")
    ops, _ = backward(case)
    assert_same_ops(case, "backward.grad_net", grad_net_of(ops, "SpatialBN_test_grad"))
    check_numeric(case, ["X", "scale", "bias"])
    assert_differs_from_caffe2(case, ["X_grad"])


def test_relufp16_has_the_cuda_builds_gradient():
    """Caffe2's CPU-only wheel registers no ReluFp16 gradient ("GradientRegistry()->Has"); CUDA
    builds do, and netviz always does: ReluFp16Gradient(Y, dY) -> dX (docs/fidelity.md)."""
    case = load("op/ReluFp16")
    assert "GradientRegistry()->Has" in case["backward"]["error"]
    ops, grads = backward(case)
    assert [(o.type, list(o.input), list(o.output)) for o in ops] == [("ReluFp16Gradient", ["Y", "Y_grad"], ["X_grad"])]
