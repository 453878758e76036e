"""Losses: SoftmaxWithLoss, LabelCrossEntropy, CrossEntropy, AveragedLoss, SquaredL2Distance."""
from __future__ import annotations

import numpy as np

from engine.grad_makers import cc_maker, simple
from engine.registry import gradient, kernel
from engine.registry import shape
from engine.shapes import TensorInfo, dims, same_as

# ---- kernels ----

def _probs(xp, x, axis):
    x2 = x.reshape(int(np.prod(x.shape[:axis])), -1)
    e = xp.exp(x2 - x2.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@kernel("SoftmaxWithLoss")
def softmax_with_loss(xp, x, label, weight=None, *, label_prob: int = 0, scale: float = 1.0,
                      axis: int = 1, spatial: int = 0, order: str = "NCHW"):
    # NOTE: loss = scale * sum(w_i * -log p_i[label_i]) / sum(w_i); p is clamped at 1e-20 (FLT_MIN-ish).
    if spatial:
        n, c = x.shape[:2]
        p = _probs(xp, xp.moveaxis(x, 1, -1).reshape(-1, c), 1)
        probs = xp.moveaxis(p.reshape((n,) + x.shape[2:] + (c,)), -1, 1)
        lab = label.reshape(-1)
    else:
        p = _probs(xp, x, axis)
        probs = p.reshape(x.shape)
    w = xp.ones(p.shape[0], dtype=x.dtype) if weight is None else weight.reshape(-1).astype(x.dtype)
    if label_prob:
        nll = -(label.reshape(p.shape) * xp.log(xp.maximum(p, 1e-20))).sum(axis=1)
    else:
        lab = label.reshape(-1).astype(np.int64)
        nll = -xp.log(xp.maximum(p[xp.arange(p.shape[0]), lab], 1e-20))
    loss = (nll * w).sum() / xp.maximum(w.sum(), 1e-20) * scale if not spatial else \
        (nll * w * (lab >= 0)).sum() / xp.maximum((w * (lab >= 0)).sum(), 1e-20) * scale
    return probs.astype(x.dtype), xp.asarray(loss, dtype=x.dtype)


@kernel("SoftmaxWithLossGradient")
def softmax_with_loss_gradient(xp, x, label, *rest, label_prob: int = 0, scale: float = 1.0,
                               axis: int = 1, spatial: int = 0, order: str = "NCHW"):
    weight, probs, dloss = (rest if len(rest) == 3 else (None,) + rest)
    if spatial:
        c = x.shape[1]
        p = xp.moveaxis(probs, 1, -1).reshape(-1, c)
    else:
        p = probs.reshape(int(np.prod(x.shape[:axis])), -1)
    w = xp.ones(p.shape[0], dtype=x.dtype) if weight is None else weight.reshape(-1).astype(x.dtype)
    if label_prob:
        d = p - label.reshape(p.shape)
    else:
        d = p.copy()
        d[xp.arange(p.shape[0]), label.reshape(-1).astype(np.int64)] -= 1
    d = d * (w / xp.maximum(w.sum(), 1e-20) * scale * dloss.reshape(())).reshape(-1, 1)
    if spatial:
        return xp.moveaxis(d.reshape((x.shape[0],) + x.shape[2:] + (c,)), -1, 1).astype(x.dtype)
    return d.reshape(x.shape).astype(x.dtype)


@kernel("LabelCrossEntropy")
def label_cross_entropy(xp, x, label):
    x2 = x.reshape(x.shape[0], -1) if x.ndim > 1 else x.reshape(1, -1)
    return -xp.log(xp.maximum(x2[xp.arange(x2.shape[0]), label.reshape(-1)], 1e-20)).astype(x.dtype)


@kernel("LabelCrossEntropyGradient")
def label_cross_entropy_gradient(xp, x, label, dy):
    x2 = x.reshape(x.shape[0], -1) if x.ndim > 1 else x.reshape(1, -1)
    dx = xp.zeros_like(x2)
    rows = xp.arange(x2.shape[0])
    dx[rows, label.reshape(-1)] = -dy.reshape(-1) / xp.maximum(x2[rows, label.reshape(-1)], 1e-20)
    return dx.reshape(x.shape)


@kernel("CrossEntropy")
def cross_entropy(xp, x, label):
    return -(label * xp.log(xp.maximum(x, 1e-20))).reshape(x.shape[0], -1).sum(axis=1).astype(x.dtype)


@kernel("CrossEntropyGradient")
def cross_entropy_gradient(xp, x, label, dy):
    return (-label / xp.maximum(x, 1e-20) * dy.reshape((-1,) + (1,) * (x.ndim - 1))).astype(x.dtype)


@kernel("AveragedLoss")
def averaged_loss(xp, x):
    return xp.asarray(x.mean(), dtype=x.dtype)


@kernel("AveragedLossGradient")
def averaged_loss_gradient(xp, x, dy):
    return xp.full(x.shape, dy.reshape(()) / x.size, dtype=x.dtype)


@kernel("SquaredL2Distance")
def squared_l2_distance(xp, x, y):
    d = (x - y).reshape(x.shape[0], -1) if x.ndim else (x - y).reshape(1, 1)
    return (0.5 * (d * d).sum(axis=1)).astype(x.dtype)


@kernel("SquaredL2DistanceGradient")
def squared_l2_distance_gradient(xp, x, y, dd):
    g = (x - y) * dd.reshape((-1,) + (1,) * (x.ndim - 1))
    return g, -g


# ---- gradients ----

@gradient("SoftmaxWithLoss")
@cc_maker
def softmax_with_loss_gradient(g):
    """Only the loss gradient GO1 is used; labels (and weights) get none."""
    ins = [g.I(0), g.I(1)] + ([g.I(2)] if len(g.op.input) == 3 else []) + [g.O(0), g.GO(1)]
    return [g.op_("SoftmaxWithLossGradient", ins, [g.GI(0)])]


gradient("LabelCrossEntropy", "CrossEntropy")(simple("{T}Gradient", "I0 I1 GO0", "GI0"))
gradient("AveragedLoss")(simple("AveragedLossGradient", "I0 GO0", "GI0"))
gradient("SquaredL2Distance")(simple("SquaredL2DistanceGradient", "I0 I1 GO0", "GI0 GI1"))


# ---- shapes ----

@shape("SoftmaxWithLoss")
def softmax_with_loss_shape(x, label, weight=None):
    return x, TensorInfo((), x.dtype)  # NOTE: the loss is a 0-d tensor.


shape("SoftmaxWithLossGradient")(same_as(0))


@shape("LabelCrossEntropy", "CrossEntropy", "SquaredL2Distance")
def per_row_shape(x, *_):
    xd = dims(x)
    return TensorInfo(xd[:1] if xd else (1,), x.dtype)


shape("AveragedLoss")(lambda x: TensorInfo((), x.dtype))
shape("LabelCrossEntropyGradient", "CrossEntropyGradient", "AveragedLossGradient")(same_as(0))
shape("SquaredL2DistanceGradient")(same_as(0, 1))
