"""Pointwise activations: Relu, Sigmoid, Tanh, Softmax, LeakyRelu, PRelu, Clip, Elu, Softplus, Selu, Swish,
Mish, Gelu, Softsign, HardSigmoid, ThresholdedRelu, ReluN, Glu, Logit."""
from __future__ import annotations

import numpy as np

from engine.runtime import onednn_eltwise, parallel
from engine.runtime.grad_makers import cc_maker, from_output, simple
from engine.catalogue.registry import gradient, kernel
from engine.catalogue.registry import shape
from engine.runtime.shapes import TensorInfo, dims, same_as
from engine.runtime.ops.elementwise import erf

# ---- kernels ----

@kernel("Relu")
def relu(xp, x):
    # NOTE: not routed to oneDNN: one pass at the memory's speed either way (benchmarks/README.md, round 4)
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
    dx = onednn_eltwise.relu_gradient(y, dy)  # NOTE: one oneDNN pass, NumPy's values (its NaN included)
    if dx is not None:
        return dx
    dx = np.empty(dy.shape, np.result_type(dy, True))
    parallel.split(lambda t: np.multiply(t(dy), t(y) > 0, out=t(dx)), dy.shape, dy.nbytes)
    return dx


@kernel("Sigmoid")
def sigmoid(xp, x):
    # NOTE: exp(-|x|) never overflows and, unlike the tanh form, keeps Caffe2's tiny values for x << 0
    # (RPN scores there order the proposals).
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


@kernel("SigmoidGradient")
def sigmoid_gradient(xp, y, dy):
    return dy * y * (1 - y)


@kernel("Tanh")
def tanh(xp, x):
    return xp.tanh(x)


@kernel("TanhGradient")
def tanh_gradient(xp, y, dy):
    return dy * (1 - y * y)


def _rows(x, axis):
    """`x` as Caffe2's 2-D view at `axis` (products of both sides, so an empty N or D stays empty)."""
    return x.reshape(int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:])))


def _softmax(xp, x, axis):
    # NOTE: Caffe2 flattens to 2-D at `axis` (canonical axis), not a single-axis softmax.
    if x.size == 0:
        return x.copy()
    x2 = _rows(x, axis)
    e = xp.exp(x2 - x2.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).reshape(x.shape)


@kernel("Softmax")
def softmax(xp, x, *, axis: int = 1):
    return _softmax(xp, x, axis % max(x.ndim, 1))


@kernel("SoftmaxGradient")
def softmax_gradient(xp, y, dy, *, axis: int = 1):
    axis = axis % max(y.ndim, 1)
    y2, dy2 = _rows(y, axis), _rows(dy, axis)
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


@kernel("Selu")
def selu(xp, x, *, alpha: float = 1.6732632423543772, scale: float = 1.0507009873554805):
    if scale <= 1:
        raise ValueError(f"Selu: scale must be greater than 1, got {scale}")
    return (scale * xp.where(x > 0, x, alpha * xp.expm1(xp.minimum(x, 0)))).astype(x.dtype, copy=False)


@kernel("SeluGradient")
def selu_gradient(xp, y, dy, *, alpha: float = 1.6732632423543772, scale: float = 1.0507009873554805):
    # NOTE: from Y: below 0, dY/dX = scale * alpha * exp(X) = Y + scale * alpha.
    return xp.where(y > 0, scale * dy, dy * (y + alpha * scale)).astype(dy.dtype, copy=False)


@kernel("Swish")
def swish(xp, x):
    return (x * sigmoid(xp, x)).astype(x.dtype, copy=False)


@kernel("SwishGradient")
def swish_gradient(xp, x, y, dy):
    return (dy * (y + sigmoid(xp, x) * (1 - y))).astype(dy.dtype, copy=False)


@kernel("Mish")
def mish(xp, x):
    return (x * xp.tanh(xp.logaddexp(x, 0))).astype(x.dtype, copy=False)


@kernel("MishGradient")
def mish_gradient(xp, x, y, dy):
    t = xp.tanh(xp.logaddexp(x, 0))
    return (dy * (t + x * (1 - t * t) * sigmoid(xp, x))).astype(dy.dtype, copy=False)


_SQRT_2_PI = 0.7978845608028654  # sqrt(2 / pi)


@kernel("Gelu")
def gelu(xp, x, *, fast_gelu: int = 0):
    if fast_gelu:  # the tanh approximation
        return (0.5 * x * (1 + xp.tanh(_SQRT_2_PI * (x + 0.044715 * x * x * x)))).astype(x.dtype, copy=False)
    return (0.5 * x * (1 + erf(xp, x * x.dtype.type(0.7071067811865476)))).astype(x.dtype, copy=False)


@kernel("GeluGradient")
def gelu_gradient(xp, dy, x, *, fast_gelu: int = 0):
    if fast_gelu:
        t = xp.tanh(_SQRT_2_PI * (x + 0.044715 * x * x * x))
        d = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * _SQRT_2_PI * (1 + 3 * 0.044715 * x * x)
    else:
        d = 0.5 * (1 + erf(xp, x * x.dtype.type(0.7071067811865476))) + x * xp.exp(-0.5 * x * x) * (_SQRT_2_PI / 2)
    return (dy * d).astype(dy.dtype, copy=False)


@kernel("Softsign")
def softsign(xp, x):
    return x / (1 + xp.abs(x))


@kernel("SoftsignGradient")
def softsign_gradient(xp, x, dy):
    return dy / xp.square(1 + xp.abs(x))


@kernel("HardSigmoid")
def hard_sigmoid(xp, x, *, alpha: float = 0.2, beta: float = 0.5):
    return xp.clip(x * x.dtype.type(alpha) + x.dtype.type(beta), 0, 1).astype(x.dtype, copy=False)


@kernel("HardSigmoidGradient")
def hard_sigmoid_gradient(xp, y, dy, *, alpha: float = 0.2, beta: float = 0.5):
    return (dy * dy.dtype.type(alpha) * ((y > 0) & (y < 1))).astype(dy.dtype, copy=False)


@kernel("ThresholdedRelu")
def thresholded_relu(xp, x, *, alpha: float = 1.0):
    return xp.where(x > alpha, x, x.dtype.type(0))


@kernel("ThresholdedReluGradient")
def thresholded_relu_gradient(xp, y, dy, *, alpha: float = 1.0):
    return dy * (y > 0)


@kernel("ReluN")
def relu_n(xp, x, *, n: float = 6.0):
    if n <= 0:
        raise ValueError(f"ReluN: n must be positive, got {n}")
    return xp.clip(x, 0, x.dtype.type(n))


@kernel("ReluNGradient")
def relu_n_gradient(xp, y, dy, *, n: float = 6.0):
    return dy * ((y > 0) & (y < n))


@kernel("Glu")
def glu(xp, x, *, dim: int = -1):
    # NOTE: the split axis is halved: first half * sigmoid(second half).
    a, b = xp.split(x, 2, axis=dim if dim != -1 else x.ndim - 1)
    return (a * sigmoid(xp, b)).astype(x.dtype, copy=False)


@kernel("Logit")
def logit(xp, x, *, eps: float = 1e-6):
    c = xp.clip(x, x.dtype.type(eps), x.dtype.type(1 - eps))
    return xp.log(c / (1 - c)).astype(x.dtype, copy=False)


@kernel("LogitGradient")
def logit_gradient(xp, x, dy, *, eps: float = 1e-6):
    # NOTE: zero where the forward clipped X to [eps, 1 - eps].
    inside = (x >= eps) & (x <= 1 - eps)
    return xp.where(inside, dy / (x * (1 - x)), 0).astype(dy.dtype, copy=False)


# ---- gradients ----
# NOTE: these read the OUTPUT, so an in-place forward (Relu(X)->X) stays differentiable.
gradient("Relu", "ReluFp16", "Sigmoid", "Tanh", "Softmax", "LeakyRelu", "Clip", "Elu", "Softplus",
         "Selu", "Reciprocal", "HardSigmoid", "ThresholdedRelu", "ReluN")(from_output())
gradient("PRelu")(simple("PReluGradient", "O0 GO0 I0 I1", "GI0 GI1"))
gradient("Swish", "Mish")(simple("{T}Gradient", "I0 O0 GO0", "GI0"))
gradient("Gelu")(simple("GeluGradient", "GO0 I0", "GI0"))
gradient("Softsign", "Logit")(simple("{T}Gradient", "I0 GO0", "GI0"))


# ---- shapes ----

shape("Relu", "ReluFp16", "Sigmoid", "Tanh", "Softmax", "LeakyRelu", "PRelu", "Clip", "Elu", "Softplus",
      "Swish", "Selu", "Mish", "Gelu", "Softsign", "HardSigmoid", "ThresholdedRelu", "ReluN", "Logit")(same_as(0))
shape("ReluGradient", "SigmoidGradient", "TanhGradient", "SoftmaxGradient", "LeakyReluGradient",
      "ClipGradient", "EluGradient", "SoftplusGradient")(same_as(1))  # NOTE: [Y, dY] -> dX
shape("PReluGradient")(same_as(1, 3))  # [Y, dY, X, slope] -> dX, dslope
shape("SwishGradient", "MishGradient", "SoftsignGradient", "LogitGradient")(same_as(0))  # [X, …] -> dX
shape("SeluGradient", "HardSigmoidGradient", "ThresholdedReluGradient", "ReluNGradient", "GeluGradient")(same_as(1))


@shape("Glu")
def glu_shape(x, *, dim: int = -1):
    xd = list(dims(x))
    ax = dim if dim != -1 else len(xd) - 1
    xd[ax] = None if xd[ax] is None else xd[ax] // 2
    return TensorInfo(tuple(xd), x.dtype)


# ---- onnx ----
from engine.catalogue.registry import onnx_converter  # noqa: E402

#: Caffe2 activations that are one ONNX op: ONNX type and the Caffe2 args it takes (name, default).
_ONNX_SAME = {"Relu": ("Relu", {}), "Sigmoid": ("Sigmoid", {}), "Tanh": ("Tanh", {}), "Softsign": ("Softsign", {}),
              "Softplus": ("Softplus", {}), "LeakyRelu": ("LeakyRelu", {"alpha": 0.01}),
              "Elu": ("Elu", {"alpha": 1.0}), "Selu": ("Selu", {"alpha": 1.6732632423543772, "scale": 1.0507009873554805}),
              "HardSigmoid": ("HardSigmoid", {"alpha": 0.2, "beta": 0.5}),
              "ThresholdedRelu": ("ThresholdedRelu", {"alpha": 1.0})}


@onnx_converter(*_ONNX_SAME)
def same_activation_onnx(c):
    """One ONNX op with the same formula and the same float args."""
    onnx_type, args = _ONNX_SAME[c.op.type]
    c.emit(onnx_type, [c.x(0)], [c.y(0)], **{k: float(c.arg(k, v)) for k, v in args.items()})


@onnx_converter("Softmax")
def softmax_onnx(c):
    """Caffe2's Softmax normalises the 2-D view split at `axis`; ONNX's (opset 13+) one axis only: so
    Flatten at axis, Softmax over axis 1, Reshape back to X's shape."""
    r = c.rank(0)
    axis = c.arg("axis", 1) % max(r, 1)
    if r == 2 and axis == 1 or axis == r - 1:
        return c.emit("Softmax", [c.x(0)], [c.y(0)], axis=axis)
    flat = c.emit("Softmax", [c.rows(c.x(0), axis, r)], axis=1)
    c.emit("Reshape", [flat, c.shape_of(c.x(0))], [c.y(0)])


@onnx_converter("PRelu")
def prelu_onnx(c):
    """ONNX PRelu broadcasts the slope numpy-style: a per-channel slope is reshaped to (C, 1, ...)."""
    r = c.rank(0)
    slope = c.x(1)
    if c.nchw and r > 2 and c.shape(1) != (1,):
        slope = c.emit("Reshape", [slope, c.ints([-1] + [1] * (r - 2))])
    c.emit("PRelu", [c.x(0), slope], [c.y(0)])


@onnx_converter("Clip")
def clip_onnx(c):
    """Clip's min/max args become ONNX's optional inputs (in X's dtype)."""
    lo, hi = c.arg("min"), c.arg("max")
    ins = [c.x(0), c.const(np.array(lo, c.np_dtype(0)), "min") if lo is not None else "",
           c.const(np.array(hi, c.np_dtype(0)), "max") if hi is not None else ""]
    c.emit("Clip", ins[:3 if hi is not None else 2 if lo is not None else 1], [c.y(0)])


@onnx_converter("Swish")
def swish_onnx(c):
    c.emit("Mul", [c.x(0), c.emit("Sigmoid", [c.x(0)])], [c.y(0)])


@onnx_converter("Mish")
def mish_onnx(c):
    c.emit("Mul", [c.x(0), c.emit("Tanh", [c.emit("Softplus", [c.x(0)])])], [c.y(0)])


@onnx_converter("Gelu")
def gelu_onnx(c):
    """Exact Gelu: x / 2 * (1 + erf(x / sqrt 2)); fast_gelu's tanh form spelled out."""
    x = c.x(0)
    half = c.const(np.float32(0.5), "half")
    if c.arg("fast_gelu", 0):
        cube = c.emit("Mul", [c.emit("Mul", [x, x]), x])
        inner = c.emit("Add", [x, c.emit("Mul", [cube, c.const(np.float32(0.044715), "k")])])
        t = c.emit("Tanh", [c.emit("Mul", [inner, c.const(np.float32(np.sqrt(2 / np.pi)), "s")])])
    else:
        t = c.emit("Erf", [c.emit("Mul", [x, c.const(np.float32(0.7071067811865476), "r")])])
    one = c.emit("Add", [t, c.const(np.float32(1.0), "one")])
    c.emit("Mul", [c.emit("Mul", [x, half]), one], [c.y(0)])
