"""Elementwise (Caffe2 broadcasting, legacy broadcast/axis), reductions: forward and gradient kernels."""
from __future__ import annotations

import numpy as np
import pytest

from engine.errors import ExecutionError
from engine.runtime.workspace import eval_op
from tests.engine.kernel_cases import GradCase, check_grad_case, pos, randn

BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}


@pytest.mark.parametrize("op", BINARY)
def test_binary_numpy_broadcasting(op):
    a, b = randn(2, 3, 4), pos(3, 1)
    np.testing.assert_allclose(eval_op(op, a, b)[0], BINARY[op](a, b), rtol=1e-6)


@pytest.mark.parametrize("op", BINARY)
def test_binary_legacy_broadcast_axis(op):
    a, b = randn(2, 3, 4, 5), pos(3, 4)
    np.testing.assert_allclose(eval_op(op, a, b, broadcast=1, axis=1)[0], BINARY[op](a, b[None, :, :, None]),
                               rtol=1e-6)
    np.testing.assert_allclose(eval_op(op, a, pos(5), broadcast=1)[0].shape, a.shape)  # suffix match (axis=-1)
    c = pos(3)
    np.testing.assert_allclose(eval_op(op, a, c, broadcast=1, axis_str="C", order="NCHW")[0],
                               BINARY[op](a, c[None, :, None, None]), rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_div_truncates_toward_zero_like_caffe2(dtype):
    # NOTE: values from Caffe2 1.10.2's Div on int32/int64 ([-3 -3 3 3 2 0 -2]); beam_search.py's
    # hypothesis index (best_index / beam_size) depends on it.
    a, b = np.array([-7, 7, -7, 7, 6, 0, -6], dtype), np.array([2, -2, -2, 2, 3, 5, 3], dtype)
    got = eval_op("Div", a, b)[0]
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, [-3, -3, 3, 3, 2, 0, -2])


def test_binary_shape_mismatch_is_execution_error():
    with pytest.raises(ExecutionError, match=r"op #0 Add .*I0\(2, 3\).*I1\(4,\)"):
        eval_op("Add", randn(2, 3), randn(4))


def test_comparisons_logic_and_unary():
    a, b = randn(3, 4), randn(3, 4)
    for op, f in {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal, "GT": np.greater,
                  "GE": np.greater_equal}.items():
        np.testing.assert_array_equal(eval_op(op, a, b)[0], f(a, b))
    p, q = a > 0, b > 0
    np.testing.assert_array_equal(eval_op("And", p, q)[0], p & q)
    np.testing.assert_array_equal(eval_op("Or", p, q)[0], p | q)
    np.testing.assert_array_equal(eval_op("Xor", p, q)[0], p ^ q)
    np.testing.assert_array_equal(eval_op("Not", p)[0], ~p)
    np.testing.assert_array_equal(eval_op("Where", p, a, b)[0], np.where(p, a, b))
    x = pos(3, 4)
    for op, f in {"Exp": np.exp, "Log": np.log, "Sqrt": np.sqrt, "Sqr": np.square, "Negative": np.negative,
                  "Abs": np.abs, "Sign": np.sign, "Ceil": np.ceil, "Floor": np.floor,
                  "Reciprocal": np.reciprocal}.items():
        y = eval_op(op, x)[0]
        assert y.dtype == np.float32, op
        np.testing.assert_allclose(y, f(x), rtol=1e-6, err_msg=op)
    np.testing.assert_allclose(eval_op("Pow", x, exponent=2.5)[0], x ** 2.5, rtol=1e-5)
    np.testing.assert_allclose(eval_op("Pow", x, pos(4))[0].shape, (3, 4))
    np.testing.assert_allclose(eval_op("Scale", x, scale=3.0)[0], 3 * x, rtol=1e-6)


def test_nary_sum_mean_weighted_sum():
    xs = [randn(2, 3) for _ in range(3)]
    np.testing.assert_allclose(eval_op("Sum", *xs)[0], xs[0] + xs[1] + xs[2], rtol=1e-6)
    np.testing.assert_allclose(eval_op("Mean", *xs)[0], (xs[0] + xs[1] + xs[2]) / 3, rtol=1e-6)
    w = [np.array([v], np.float32) for v in (0.5, -2.0)]
    np.testing.assert_allclose(eval_op("WeightedSum", xs[0], w[0], xs[1], w[1])[0], 0.5 * xs[0] - 2 * xs[1],
                               rtol=1e-6)
    g = eval_op("MeanGradient", xs[0], n_out=3)
    assert all(np.allclose(v, xs[0] / 3) for v in g)


def test_weighted_sum_adds_equal_sizes_in_x0s_shape():
    # NOTE: Caffe2 1.10.2: (3, 2, 1) and (3, 2) (or (2, 3)) give X0's shape, no broadcasting
    # (beam search's attention average); 7 vs 6 elements fails "X1.numel() == size".
    a, w = np.arange(6, dtype=np.float32).reshape(3, 2, 1), np.array([0.5], np.float32)
    for b in (np.ones((3, 2), np.float32), np.ones((2, 3), np.float32)):
        got = eval_op("WeightedSum", a, w, b, w)[0]
        np.testing.assert_array_equal(got, 0.5 * a + 0.5)
        dx0, dx1 = eval_op("WeightedSumGradient", got, a, w, b, w, n_out=2)
        assert dx0.shape == a.shape and dx1.shape == b.shape
    with pytest.raises(ExecutionError, match="X1 has 7 elements but X0 has 6"):
        eval_op("WeightedSum", a, w, np.ones(7, np.float32), w)


def test_reductions():
    x = randn(2, 3, 4)
    np.testing.assert_allclose(eval_op("ReduceSum", x, axes=[1], keepdims=0)[0], x.sum(1), rtol=1e-5)
    np.testing.assert_allclose(eval_op("ReduceMean", x, axes=[0, 2])[0], x.mean((0, 2), keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(eval_op("ReduceMax", x)[0], x.max(keepdims=True))
    np.testing.assert_allclose(eval_op("ReduceMin", x, axes=[-1], keepdims=0)[0], x.min(-1))
    np.testing.assert_allclose(eval_op("ReduceFrontSum", x)[0], x.sum(0), rtol=1e-5)
    np.testing.assert_allclose(eval_op("ReduceBackMean", x, num_reduce_dim=2)[0], x.mean((1, 2)), rtol=1e-5)
    np.testing.assert_allclose(eval_op("SumElements", x)[0], x.sum(), rtol=1e-5)
    np.testing.assert_allclose(eval_op("SumElements", x, average=1)[0], x.mean(), rtol=1e-5)
    np.testing.assert_allclose(eval_op("SumSqrElements", x)[0], (x * x).sum(), rtol=1e-5)
    np.testing.assert_array_equal(eval_op("ArgMax", x, axis=1)[0], x.argmax(1)[:, None])
    np.testing.assert_array_equal(eval_op("ArgMin", x, keepdims=0)[0], x.argmin(-1))


GRAD_CASES = [
    GradCase("Add", [randn(2, 3, 4), randn(3, 1)], "AddGradient", "GO0 I0 I1", "GI0 GI1", label="Add-numpy"),
    GradCase("Add", [randn(2, 3, 4, 2), randn(3, 4)], "AddGradient", "GO0 I0 I1", "GI0 GI1",
             dict(broadcast=1, axis=1), label="Add-legacy"),
    GradCase("Sub", [randn(2, 1, 4), randn(3, 1)], "SubGradient", "GO0 I0 I1", "GI0 GI1"),
    GradCase("Mul", [randn(2, 3, 4), randn(4)], "MulGradient", "GO0 I0 I1", "GI0 GI1"),
    GradCase("Mul", [randn(2, 3, 4), randn(2)], "MulGradient", "GO0 I0 I1", "GI0 GI1", dict(broadcast=1, axis=0),
             label="Mul-legacy-axis0"),
    GradCase("Div", [randn(2, 3), pos(3)], "DivGradient", "GO0 I0 I1 O0", "GI0 GI1"),
    # NOTE: Caffe2's 3-input DivGradient is the legacy [B, C, dC] (checked against Caffe2 1.10.2).
    GradCase("Div", [randn(2, 3), pos(2, 3)], "DivGradient", "I1 O0 GO0", "GI0 GI1", label="Div-3-inputs"),
    GradCase("Abs", [randn(3, 4)], "AbsGradient", "I0 GO0", "GI0"),
    GradCase("WeightedSum", [randn(2, 3), np.array([0.5], np.float32), randn(2, 3), np.array([-1.5], np.float32)],
             "WeightedSumGradient", "GO0 I0 I1 I2 I3", "GI0 GI2"),
    GradCase("ReduceSum", [randn(2, 3, 4)], "ReduceSumGradient", "GO0 I0 O0", "GI0", dict(axes=[1], keepdims=0)),
    GradCase("ReduceMean", [randn(2, 3, 4)], "ReduceMeanGradient", "GO0 I0 O0", "GI0", dict(axes=[0, 2])),
    GradCase("ReduceMax", [randn(2, 3, 4)], "ReduceMaxGradient", "GO0 I0 O0", "GI0", dict(axes=[2], keepdims=0)),
    GradCase("SumElements", [randn(2, 3)], "SumElementsGradient", "I0 GO0", "GI0", dict(average=1)),
]


@pytest.mark.parametrize("c", GRAD_CASES, ids=str)
def test_gradient_kernel_matches_numeric(c):
    check_grad_case(c)


def test_weighted_sum_gradient_on_weights():
    x0, x1 = randn(2, 3), randn(2, 3)
    w0, w1 = np.array([0.5], np.float32), np.array([2.0], np.float32)
    dy = randn(2, 3)
    dx0, dx1, dw0, dw1 = eval_op("WeightedSumGradient", dy, x0, w0, x1, w1, n_out=4, grad_on_w=1)
    np.testing.assert_allclose(dx1, 2 * dy, rtol=1e-6)
    np.testing.assert_allclose(dw0, [(dy * x0).sum()], rtol=1e-5)
    np.testing.assert_allclose(dw1, [(dy * x1).sum()], rtol=1e-5)
