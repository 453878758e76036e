"""Conv & image kernels where Caffe2's own gradient is wrong: netviz is checked against the exact
adjoint (the forward kernel is linear in the input, so <dY, J e_i> for every unit vector e_i is the
exact input gradient). IntegralImageGradient is Caffe2-exact by default (the oracle checks that) and
the adjoint with --fix-caffe2. See docs/fidelity.md "Conv and image gradients"."""
from __future__ import annotations

from pathlib import Path

import numpy as np

import engine.runtime.ops  # noqa: F401  (fills the kernel table)
from engine.runtime.workspace import eval_op
from engine.analysis.lint import fix_caffe2

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


def test_integral_image_gradient_with_fixes_is_the_adjoint():
    r = np.random.RandomState(1)
    x, dy = r.randn(2, 3, 4, 5), r.randn(2, 3, 5, 6)
    exact = _exact_input_gradient("IntegralImage", x, [], dy)
    with fix_caffe2():
        np.testing.assert_allclose(eval_op("IntegralImageGradient", x, dy)[0], exact, rtol=1e-9, atol=1e-9)
    assert not np.allclose(eval_op("IntegralImageGradient", x, dy)[0], exact)  # exact mode: Caffe2's values
