"""Pointwise activations: Relu, Sigmoid, Tanh, Softmax, LeakyRelu, PRelu, Clip, Elu, Softplus."""
from __future__ import annotations

import numpy as np

from engine import parallel
from engine.grad_makers import cc_maker, from_output, simple
from engine.registry import gradient, kernel
from engine.registry import shape
from engine.shapes import same_as

# ---- kernels ----

@kernel("Relu")
def relu(xp, x):
    if xp is not np or x.nbytes < parallel.MIN_BYTES or not x.flags.c_contiguous:
        return xp.maximum(x, 0)
    y = np.empty_like(x)
    parallel.split(lambda t: np.maximum(t(x), 0, out=t(y)), x.shape, x.nbytes)
    return y


@kernel("ReluGradient")
def relu_gradient(xp, y, dy):
    # NOTE: reads the OUTPUT, so in-place Relu(X)->X stays differentiable.
    if xp is not np or dy.nbytes < parallel.MIN_BYTES or y.shape != dy.shape:
        return dy * (y > 0)
    dx = np.empty(dy.shape, np.result_type(dy, True))
    parallel.split(lambda t: np.multiply(t(dy), t(y) > 0, out=t(dx)), dy.shape, dy.nbytes)
    return dx


@kernel("Sigmoid")
def sigmoid(xp, x):
    # NOTE: the tanh form never overflows (1 / (1 + exp(-x)) does for x << 0).
    return (0.5 * (1 + xp.tanh(0.5 * x))).astype(x.dtype, copy=False)


@kernel("SigmoidGradient")
def sigmoid_gradient(xp, y, dy):
    return dy * y * (1 - y)


@kernel("Tanh")
def tanh(xp, x):
    return xp.tanh(x)


@kernel("TanhGradient")
def tanh_gradient(xp, y, dy):
    return dy * (1 - y * y)


def _softmax(xp, x, axis):
    # NOTE: Caffe2 flattens to 2-D at `axis` (canonical axis), not a single-axis softmax.
    x2 = x.reshape(int(np.prod(x.shape[:axis])), -1)
    e = xp.exp(x2 - x2.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).reshape(x.shape)


@kernel("Softmax")
def softmax(xp, x, *, axis: int = 1):
    return _softmax(xp, x, axis % max(x.ndim, 1))


@kernel("SoftmaxGradient")
def softmax_gradient(xp, y, dy, *, axis: int = 1):
    axis = axis % max(y.ndim, 1)
    y2, dy2 = y.reshape(int(np.prod(y.shape[:axis])), -1), dy.reshape(int(np.prod(y.shape[:axis])), -1)
    return ((dy2 - (dy2 * y2).sum(axis=1, keepdims=True)) * y2).reshape(y.shape)


@kernel("LeakyRelu")
def leaky_relu(xp, x, *, alpha: float = 0.01):
    return xp.where(x > 0, x, x * x.dtype.type(alpha))


@kernel("LeakyReluGradient")
def leaky_relu_gradient(xp, y, dy, *, alpha: float = 0.01):
    return xp.where(y > 0, dy, dy * dy.dtype.type(alpha))


def _slope(x, slope, order):
    # NOTE: one slope for all channels when slope has one element, else per channel (axis 1 or last).
    if slope.size == 1:
        return slope.reshape(())
    return slope.reshape((-1,) + (1,) * (x.ndim - 2)) if order == "NCHW" else slope


@kernel("PRelu")
def prelu(xp, x, slope, *, order: str = "NCHW"):
    return xp.where(x > 0, x, x * _slope(x, slope, order))


@kernel("PReluGradient")
def prelu_gradient(xp, y, dy, x, slope, *, order: str = "NCHW"):
    dx = xp.where(x > 0, dy, dy * _slope(x, slope, order))
    g = xp.where(x > 0, 0, dy * x)
    if slope.size == 1:
        return dx, g.sum().reshape(slope.shape)
    axes = tuple(a for a in range(x.ndim) if a != (1 if order == "NCHW" else x.ndim - 1))
    return dx, g.sum(axis=axes).reshape(slope.shape)


@kernel("Clip")
def clip(xp, x, *, min: float = float("-inf"), max: float = float("inf")):  # noqa: A002
    return xp.clip(x, min, max).astype(x.dtype, copy=False)


@kernel("ClipGradient")
def clip_gradient(xp, y, dy, *, min: float = float("-inf"), max: float = float("inf")):  # noqa: A002
    return dy * ((y > min) & (y < max))


@kernel("Elu")
def elu(xp, x, *, alpha: float = 1.0):
    return xp.where(x > 0, x, alpha * (xp.exp(xp.minimum(x, 0)) - 1)).astype(x.dtype, copy=False)


@kernel("EluGradient")
def elu_gradient(xp, y, dy, *, alpha: float = 1.0):
    return xp.where(y > 0, dy, dy * (y + alpha)).astype(dy.dtype, copy=False)


@kernel("Softplus")
def softplus(xp, x):
    return xp.logaddexp(x, 0).astype(x.dtype, copy=False)


@kernel("SoftplusGradient")
def softplus_gradient(xp, y, dy):
    return dy * (1 - xp.exp(-y))


# ---- gradients ----
# NOTE: these read the OUTPUT, so an in-place forward (Relu(X)->X) stays differentiable.
gradient("Relu", "ReluFp16", "Sigmoid", "Tanh", "Softmax", "LeakyRelu", "Clip", "Elu", "Softplus",
         "Selu", "Reciprocal")(from_output())
gradient("PRelu")(simple("PReluGradient", "O0 GO0 I0 I1", "GI0 GI1"))
gradient("Swish")(simple("SwishGradient", "I0 O0 GO0", "GI0"))


# ---- shapes ----

shape("Relu", "ReluFp16", "Sigmoid", "Tanh", "Softmax", "LeakyRelu", "PRelu", "Clip", "Elu", "Softplus",
      "Swish")(same_as(0))
shape("ReluGradient", "SigmoidGradient", "TanhGradient", "SoftmaxGradient", "LeakyReluGradient",
      "ClipGradient", "EluGradient", "SoftplusGradient")(same_as(1))  # NOTE: [Y, dY] -> dX
shape("PReluGradient")(same_as(1, 3))  # [Y, dY, X, slope] -> dX, dslope
shape("SwishGradient")(same_as(0))
