"""Detectron's CUDA-only ops (the Caffe2 CPU wheel cannot create them, so there is no oracle):
forward values on hand-computed cases, and every gradient kernel against central differences of
its forward kernel (the gradient op is fed dLoss and must equal d(dLoss * loss)/dX)."""
from __future__ import annotations

import numpy as np
import pytest

import engine.runtime.ops  # noqa: F401  (fills the kernel table)
from engine.runtime.workspace import eval_op


def _numeric(op, inputs, wrt, out=0, dy=None, step=1e-3, **args):
    """Central differences of sum(dy * output `out`) w.r.t. input `wrt` (float64 inputs)."""
    x = inputs[wrt].astype(np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        vals = []
        for h in (step, -step):
            xs = list(inputs)
            xh = x.copy()
            xh[i] += h
            xs[wrt] = xh
            y = np.asarray(eval_op(op, *xs, n_out=out + 1, **args)[out], dtype=np.float64)
            vals.append((y * (1.0 if dy is None else dy)).sum())
        g[i] = (vals[0] - vals[1]) / (2 * step)
    return g


R = np.random.RandomState(7)
LOSSES = [
    ("SmoothL1Loss", [R.randn(3, 4), R.randn(3, 4), R.rand(3, 4).round(), R.rand(3, 4)], dict(beta=0.5, scale=2.0)),
    ("SigmoidCrossEntropyLoss", [R.randn(2, 5), R.randint(-1, 2, (2, 5)).astype("i4")], dict(scale=1.5)),
    ("SigmoidCrossEntropyLoss", [R.randn(2, 5), R.randint(-1, 2, (2, 5)).astype("i4")], dict(normalize=0)),
    ("SigmoidFocalLoss", [R.randn(2, 6, 2, 3), R.randint(-1, 4, (2, 2, 2, 3)).astype("i4"), np.array([3.0])],
     dict(num_classes=3, gamma=2.0, scale=0.5)),
    ("SelectSmoothL1Loss", [R.randn(2, 8, 3, 3), R.randn(3, 4), np.array([[0, 0, 1, 2], [1, 4, 0, 0], [1, 0, 2, 1.0]]),
                            np.array([2.0])], dict(beta=0.5, scale=2.0)),
]


@pytest.mark.parametrize("op,inputs,args", LOSSES, ids=[c[0] + str(i) for i, c in enumerate(LOSSES)])
def test_detectron_loss_gradient_matches_central_differences(op, inputs, args):
    dloss = np.array(1.7, dtype=np.float32)
    n_in = len(inputs)
    got = eval_op(op + "Gradient", *inputs, dloss, **args)[0]
    np.testing.assert_allclose(got, _numeric(op, inputs, 0, dy=1.7, **args), rtol=2e-3, atol=2e-3)
    assert got.shape == inputs[0].shape and n_in >= 2


def test_softmax_focal_loss_gradient_and_probabilities():
    x, t, wp = R.randn(2, 8, 2, 3), R.randint(-1, 4, (2, 2, 2, 3)).astype("i4"), np.array([2.0])
    args = dict(num_classes=4, gamma=2.0, alpha=0.25, scale=1.5)
    loss, p = eval_op("SoftmaxFocalLoss", x, t, wp, n_out=2, **args)
    assert loss.shape == () and p.shape == (x.size,)
    np.testing.assert_allclose(p.reshape(2, 2, 4, 2, 3).sum(axis=2), 1, rtol=1e-6)
    got = eval_op("SoftmaxFocalLossGradient", x, t, wp, p, np.array(0.7, "f4"), **args)[0]
    np.testing.assert_allclose(got, _numeric("SoftmaxFocalLoss", [x, t, wp], 0, dy=0.7, **args), rtol=2e-3, atol=2e-3)


def test_softmax_focal_loss_with_gamma_0_is_weighted_cross_entropy():
    x, t = R.randn(1, 3, 1, 2), np.array([[[[0, 2]]]], dtype="i4")
    loss, _ = eval_op("SoftmaxFocalLoss", x, t, np.array([1.0]), n_out=2, num_classes=3, gamma=0.0, alpha=0.25)
    p = np.exp(x[0, :, 0]) / np.exp(x[0, :, 0]).sum(axis=0)
    np.testing.assert_allclose(loss, -(0.75 * np.log(p[0, 0]) + 0.25 * np.log(p[2, 1])), rtol=1e-5)


def test_forward_values_by_hand():
    loss = eval_op("SmoothL1Loss", np.array([[0.5, 3.0]]), np.zeros((1, 2)), np.ones((1, 2)), np.ones((1, 2)))[0]
    np.testing.assert_allclose(loss, 0.125 + 2.5)  # 0.5 * 0.5^2 / 1 + (3 - 0.5)
    sce = eval_op("SigmoidCrossEntropyLoss", np.zeros((1, 3)), np.array([[1, -1, 0]], "i4"))[0]
    np.testing.assert_allclose(sce, np.log(2.0), rtol=1e-6)  # two counted targets, each log 2, mean
    sel = eval_op("SelectSmoothL1Loss", np.zeros((1, 4, 1, 1)), np.full((1, 4), 2.0), np.zeros((1, 4)),
                  np.array([4.0]))[0]
    np.testing.assert_allclose(sel, 4 * 1.5 / 4)  # |v| - 0.5 per coordinate, / max(S, 1)
    assert eval_op("SelectSmoothL1Loss", np.zeros((1, 4, 1, 1)), np.zeros((0, 4)), np.zeros((0, 4)),
                   np.array([1.0]))[0] == 0


def test_group_spatial_softmax_and_gradient():
    x, dy = R.randn(2, 6, 2, 2), R.randn(2, 6, 2, 2)
    y = eval_op("GroupSpatialSoftmax", x, num_classes=3)[0]
    np.testing.assert_allclose(y.reshape(2, 2, 3, 2, 2).sum(axis=2), 1, rtol=1e-12)
    got = eval_op("GroupSpatialSoftmaxGradient", y, dy, num_classes=3)[0]
    np.testing.assert_allclose(got, _numeric("GroupSpatialSoftmax", [x], 0, dy=dy, num_classes=3), rtol=1e-5, atol=1e-6)


def test_upsample_nearest_and_spatial_narrow_as():
    x = np.arange(12.0).reshape(1, 1, 3, 4)
    y = eval_op("UpsampleNearest", x, scale=2)[0]
    assert y.shape == (1, 1, 6, 8) and y[0, 0, 5, 7] == 11 and y[0, 0, 1, 1] == 0
    dy = R.randn(1, 1, 6, 8)
    np.testing.assert_allclose(eval_op("UpsampleNearestGradient", x, dy, scale=2)[0],
                               dy.reshape(1, 1, 3, 2, 4, 2).sum(axis=(3, 5)))
    a, b = R.randn(2, 3, 5, 6), np.zeros((2, 4, 3))
    c = eval_op("SpatialNarrowAs", a, b)[0]
    np.testing.assert_array_equal(c, a[:, :, :4, :3])
    da = eval_op("SpatialNarrowAsGradient", a, b, np.ones_like(c))[0]
    assert da.shape == a.shape and da.sum() == c.size and da[:, :, 4:].sum() == 0
