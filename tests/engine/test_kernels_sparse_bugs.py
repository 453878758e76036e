"""Gradients where Caffe2 1.10.2 is wrong and netviz follows the mathematics (docs/fidelity.md,
goldens noted ``caffe2_bug``): checked against central differences of the forward op."""
from __future__ import annotations

import numpy as np

from engine.runtime.workspace import eval_op


def _numeric(f, x: np.ndarray, dy: np.ndarray, eps: float = 1e-3) -> np.ndarray:
    """d(sum(f(x) * dy))/dx by central differences in float64."""
    g = np.zeros_like(x, dtype=np.float64)
    for i in np.ndindex(x.shape):
        hi, lo = x.astype(np.float64), x.astype(np.float64)
        hi[i] += eps
        lo[i] -= eps
        g[i] = ((f(hi) - f(lo)) * dy).sum() / (2 * eps)
    return g


def test_boolean_mask_gradient_has_the_data_shape() -> None:
    x = np.arange(12, dtype=np.float64).reshape(4, 3)
    mask = np.array([True, False, True, True])
    dy = np.random.default_rng(0).standard_normal((3, 3))
    (dx,) = eval_op("BooleanMaskGradient", mask, dy)
    want = _numeric(lambda v: eval_op("BooleanMask", v, mask)[0], x, dy)
    np.testing.assert_allclose(dx, want, atol=1e-6)


def test_merge_single_list_gradient_zeroes_absent_examples() -> None:
    lengths = np.array([2, 1, 0], np.int32)
    values = np.array([0.5, -1.0, 2.0])
    present = np.array([True, False, True])
    other = (np.array([0, 2, 0], np.int32), np.array([3.0, 4.0]), np.array([False, True, False]))
    dy = np.array([0.25, -0.5, 1.5, 2.0])

    def fwd(v):
        return eval_op("MergeSingleListFeatureTensors", lengths, v, present, *other, n_out=4,
                       feature_ids=[1, 2])[3]
    grads = eval_op("MergeSingleListFeatureTensorsGradient", lengths, present, other[0], other[2], dy, n_out=2)
    np.testing.assert_allclose(grads[0], _numeric(fwd, values, dy), atol=1e-6)
    assert grads[0].shape == values.shape and grads[0][2] == 0
