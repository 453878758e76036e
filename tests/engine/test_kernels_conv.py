"""Conv & image kernels where Caffe2's own gradient is wrong: netviz is checked against the exact
adjoint (the forward kernel is linear in the input, so <dY, J e_i> for every unit vector e_i is the
exact input gradient), and against Caffe2's recorded (wrong) value, which it must differ from.
See docs/fidelity.md "Conv and image gradients"."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import engine.ops  # noqa: F401  (fills the kernel table)
from engine.executor import eval_op

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "kernels_conv"


def _exact_input_gradient(op_type, x, others, dy, **args):
    """J^T dY of a forward op linear in its first input, one unit vector at a time (float64)."""
    g = np.zeros(x.shape)
    for i in np.ndindex(x.shape):
        e = np.zeros(x.shape)
        e[i] = 1
        g[i] = (eval_op(op_type, e, *others, **args)[0] * dy).sum()
    return g


def test_conv_3d_nhwc_input_gradient_is_the_adjoint():
    r = np.random.RandomState(0)
    x, w, dy = r.randn(1, 3, 4, 4, 2), r.randn(3, 2, 2, 2, 2), r.randn(1, 2, 3, 3, 3)
    args = dict(kernels=[2, 2, 2], order="NHWC")
    exact = _exact_input_gradient("Conv", x, [w], dy, **args)
    dw, db, dx = eval_op("ConvGradient", x, w, dy, n_out=3, **args)
    np.testing.assert_allclose(dx, exact, rtol=1e-9, atol=1e-9)


def test_integral_image_gradient_is_the_adjoint():
    r = np.random.RandomState(1)
    x, dy = r.randn(2, 3, 4, 5), r.randn(2, 3, 5, 6)
    exact = _exact_input_gradient("IntegralImage", x, [], dy)
    np.testing.assert_allclose(eval_op("IntegralImageGradient", x, dy)[0], exact, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("case", ["IntegralImage"])
def test_caffe2_integral_image_gradient_is_a_prefix_sum(case):
    """Caffe2 1.10.2 returns the PREFIX sums of dY's first H x W block (run by hand on these seed-2 inputs:
    max |Caffe2 - prefix sums| = 1.2e-7, max |Caffe2 - adjoint| = 5.11; docs/fidelity.md): netviz does not."""
    r = np.random.RandomState(2)
    x, dy = r.randn(1, 1, 3, 4).astype("f4"), r.randn(1, 1, 4, 5).astype("f4")
    caffe2_like = dy[:, :, :3, :4].cumsum(axis=2).cumsum(axis=3)
    assert not np.allclose(eval_op("IntegralImageGradient", x, dy)[0], caffe2_like)
