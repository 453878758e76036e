"""Dense kernels where netviz deliberately differs from Caffe2 1.10.2 (docs/fidelity.md): checked against
the mathematics (central differences, numpy) instead of Caffe2's recorded values."""
from __future__ import annotations

import numpy as np
import pytest

from engine.errors import NetvizError
from engine.runtime.workspace import eval_op


def _numeric_grad(f, x: np.ndarray, step: float = 1e-6) -> np.ndarray:
    """d sum(f(x)) / dx by central differences (float64)."""
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = step
        g[i] = (f(x + e).sum() - f(x - e).sum()) / (2 * step)
    return g


@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
def test_spatial_bn_is_test_gradient_is_the_frozen_affine_map(order: str, fixed_caffe2: None) -> None:
    """In test mode Y = scale * (X - mean) / sqrt(var + eps) + bias with constant statistics, so
    dX = dY * scale / sqrt(var + eps) (--fix-caffe2); Caffe2 1.10.2 reads var as an inverse std instead."""
    r = np.random.RandomState(0)
    x = r.randn(2, 3, 2, 2) if order == "NCHW" else r.randn(2, 2, 2, 3)
    scale, bias, mean, var = r.rand(3) + 0.5, r.randn(3), r.randn(3), r.rand(3) + 0.5
    dy = r.randn(*x.shape)
    args = dict(is_test=1, order=order, epsilon=1e-3)
    f = lambda v: eval_op("SpatialBN", v, scale, bias, mean, var, **args)[0] * dy  # noqa: E731
    dx, dscale, dbias = eval_op("SpatialBNGradient", x, scale, dy, mean, var, n_out=3, **args)
    np.testing.assert_allclose(dx, _numeric_grad(f, x), rtol=1e-6, atol=1e-8)
    g_scale = _numeric_grad(lambda s: eval_op("SpatialBN", x, s, bias, mean, var, **args)[0] * dy, scale)
    np.testing.assert_allclose(dscale, g_scale, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(dbias, dy.sum(axis=(0, 2, 3) if order == "NCHW" else (0, 1, 2)), rtol=1e-12)


def test_spatial_bn_is_test_gradient_is_caffe2s_by_default() -> None:
    """Caffe2-exact mode reproduces docs/fidelity.md's numbers: dX = [-30, -98], dscale = 4."""
    f = lambda v: np.array(v, "f4")  # noqa: E731
    x, dy = f([1, 3]).reshape(1, 1, 1, 2), f([1, 0]).reshape(1, 1, 1, 2)
    dx, dscale, dbias = eval_op("SpatialBNGradient", x, f([1]), dy, f([0]), f([4]), n_out=3, is_test=1)
    np.testing.assert_allclose(dx.ravel(), [-30, -98], rtol=1e-5)
    np.testing.assert_allclose((dscale, dbias), ([4], [1]), rtol=1e-5)


def test_max_rejects_inputs_of_other_shapes() -> None:
    """Caffe2 1.10.2 checks X0's shape twice instead of X1's and reads past a smaller X1."""
    with pytest.raises(NetvizError, match="must match"):
        eval_op("Max", np.ones((3, 4), "f4"), np.ones(4, "f4"))


def test_accumulate_starts_from_zero_when_the_output_has_another_shape() -> None:
    """Caffe2 1.10.2 resizes Y and adds to uninitialised memory; netviz starts Y at 0."""
    x = np.arange(6, dtype="f4").reshape(2, 3)
    np.testing.assert_array_equal(eval_op("Accumulate", x, gamma=0.5)[0], x)


def test_range_with_a_negative_integer_step_keeps_the_last_value() -> None:
    """Caffe2 1.10.2 computes the integer length as trunc(diff / step), +1 only when the product falls
    short of diff, which misses the last value for negative steps: Range(9, 2, -2) gives [9, 7, 5]."""
    args = (np.array(9, "i4"), np.array(2, "i4"), np.array(-2, "i4"))
    np.testing.assert_array_equal(eval_op("Range", *args)[0], np.arange(9, 2, -2, dtype="i4"))
