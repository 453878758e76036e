"""Elementwise arithmetic with Caffe2 broadcasting: Add, Sub, Mul, Div, Sum, WeightedSum, Scale, Exp, Log, Sqr, Sqrt, Negative, Abs, Pow, Mean, comparisons, logical ops."""
from __future__ import annotations

import numpy as np

from engine.runtime import onednn_eltwise, parallel
from engine.runtime.grad_makers import (
    GradientMakerError, cc_maker, gradient_not_implemented_yet, pass_through,
    should_not_do_gradient, simple)
from engine.catalogue.registry import gradient, kernel
from engine.catalogue.registry import shape
import functools
from engine.errors import ShapeError
from engine.runtime.shapes import BOOL, TensorInfo, broadcast as broadcast_dims, dims, merge, same_as

# ---- kernels ----

def _legacy_b(a, b, broadcast, axis, axis_str, order):
    """B reshaped for Caffe2's legacy ``broadcast=1``: B's dims match A's starting at `axis`."""
    if not broadcast:
        return b  # NOTE: without broadcast=1, Caffe2 >= 2018 uses numpy-style broadcasting.
    if axis_str:
        axis = order.index(axis_str)
    if axis == -1:
        axis = a.ndim - b.ndim
    return b.reshape(b.shape + (1,) * (a.ndim - axis - b.ndim))


def _binary(fn):
    def run(xp, a, b, *, broadcast: int = 0, axis: int = -1, axis_str: str = "", order: str = "NCHW"):
        # NOTE: Caffe2 dispatches on A's type and reads B as the same type; NumPy would promote.
        if a.dtype != b.dtype:
            raise TypeError(f"A is {a.dtype} but B is {b.dtype}; both inputs must have one type (Cast one)")
        return fn(xp, a, _legacy_b(a, b, broadcast, axis, axis_str, order))
    return run


def _div(xp, a, b):
    """A / B in A's type: integers divide as C++ does, truncating toward zero (beam search's
    hypothesis index, best_index / beam_size, relies on it), not as NumPy's true division."""
    if a.dtype.kind not in "iu":
        return a / b
    q = a // b
    return q + ((q < 0) & (q * b != a)).astype(q.dtype)


for _t, _f in {"Add": lambda xp, a, b: a + b, "Sub": lambda xp, a, b: a - b,
               "Mul": lambda xp, a, b: a * b, "Div": _div,
               "EQ": lambda xp, a, b: a == b, "NE": lambda xp, a, b: a != b, "LT": lambda xp, a, b: a < b,
               "LE": lambda xp, a, b: a <= b, "GT": lambda xp, a, b: a > b, "GE": lambda xp, a, b: a >= b,
               "And": lambda xp, a, b: a & b, "Or": lambda xp, a, b: a | b, "Xor": lambda xp, a, b: a ^ b,
               }.items():
    kernel(_t)(_binary(_f))


def _unbroadcast(xp, g, like, broadcast, axis, axis_str, order, a):
    """Sum `g` down to the shape of `like` (the gradient of a broadcast operand)."""
    if g.shape == like.shape:
        return g
    target = _legacy_b(a, like, broadcast, axis, axis_str, order).shape
    lead = g.ndim - len(target)
    axes = tuple(range(lead)) + tuple(i + lead for i, n in enumerate(target) if n == 1 and g.shape[i + lead] != 1)
    return g.sum(axis=axes, keepdims=True).reshape(like.shape).astype(g.dtype, copy=False)


def _grad_kernel(fa, fb):
    def run(xp, dc, a, b, *c, broadcast: int = 0, axis: int = -1, axis_str: str = "", order: str = "NCHW"):
        bb = _legacy_b(a, b, broadcast, axis, axis_str, order)
        args = (broadcast, axis, axis_str, order, a)
        return (_unbroadcast(xp, fa(xp, dc, a, bb, *c), a, *args),
                _unbroadcast(xp, fb(xp, dc, a, bb, *c), b, *args))
    return run


def _full(xp, g, a, b):
    """`g` at the full output shape (an operand may be broadcast to it)."""
    return xp.broadcast_to(g, np.broadcast_shapes(a.shape, b.shape))


kernel("AddGradient")(_grad_kernel(_full, _full))
kernel("SubGradient")(_grad_kernel(_full, lambda xp, g, a, b: -_full(xp, g, a, b)))
kernel("MulGradient")(_grad_kernel(lambda xp, g, a, b: g * b, lambda xp, g, a, b: g * a))
# NOTE: DivGradient's 4th input is the output C = A / B, so dB = -dC * C / B.
_div_gradient = _grad_kernel(lambda xp, g, a, b, *c: g / b, lambda xp, g, a, b, *c: -g * (c[0] if c else a / b) / b)


@kernel("DivGradient")
def div_gradient(xp, *ins, broadcast: int = 0, axis: int = -1, axis_str: str = "", order: str = "NCHW"):
    """[dC, A, B, C] -> dA, dB; the legacy 3-input form is [B, C, dC] (A is not needed)."""
    if len(ins) != 3:
        return _div_gradient(xp, *ins, broadcast=broadcast, axis=axis, axis_str=axis_str, order=order)
    b, c, dc = ins
    bb = _legacy_b(c, b, broadcast, axis, axis_str, order)
    return (dc / bb).astype(dc.dtype, copy=False), _unbroadcast(xp, -dc * c / bb, b, broadcast, axis, axis_str, order, c)


@kernel("SumReduceLike")
def sum_reduce_like(xp, a, b, *, axis: int = -1, axis_str: str = "", order: str = "NCHW"):
    # NOTE: B's dims match A's from `axis` (legacy broadcast); A is summed over the other dims.
    return _unbroadcast(xp, a, b, 1, axis, axis_str, order, a)


@kernel("Sum")
def sum_(xp, *xs):
    return _sum(xp, xs, False)


def sum_relu_inplace(xp, *xs):
    """Sum whose output an in-place Relu overwrites at once (run_compiled fuses the pair): the Sum's own
    values, then ``max(., 0)`` in the same pass (one oneDNN chain on big float32 maps, else NumPy's block
    pass), as the two ops apart would give."""
    return _sum(xp, xs, True)


def _sum(xp, xs, relu):
    # NOTE: the first add writes the new array (one pass, not copy + add); X0's dtype is kept.
    out = onednn_eltwise.sum_relu(xs) if relu and xp is np else None  # NOTE: one oneDNN pass, NaN kept
    if out is not None:
        return out
    if xp is np and len(xs) > 1 and xs[0].nbytes >= parallel.MIN_BYTES and all(x.shape == xs[0].shape for x in xs):
        out = np.empty(xs[0].shape, xs[0].dtype)

        def part(t):
            np.add(t(xs[0]), t(xs[1]), out=t(out), dtype=out.dtype)
            for x in xs[2:]:
                np.add(t(out), t(x), out=t(out))
            if relu:
                np.maximum(t(out), 0, out=t(out))
        parallel.split(part, out.shape, out.nbytes)
        return out
    if len(xs) > 1 and xs[0].shape == xs[1].shape:
        out, rest = xp.add(xs[0], xs[1], dtype=xs[0].dtype), xs[2:]
    else:
        out, rest = xs[0].copy(), xs[1:]
    for x in rest:
        out += x
    return xp.maximum(out, 0, out=out) if relu else out


@kernel("Mean")
def mean(xp, *xs):
    return sum_(xp, *xs) / xs[0].dtype.type(len(xs))


@kernel("MeanGradient", needs_context=True)
def mean_gradient(xp, dy, *, ctx):
    n = len(ctx.op.output)
    return tuple(dy / dy.dtype.type(n) for _ in range(n))


def _like_x0(xs):
    """The X inputs read in X0's shape: Caffe2 adds them as flat buffers (equal sizes, any shapes;
    beam search averages [beam, L, 1] attention with [beam, L] zeros), never broadcasting."""
    for i, x in enumerate(xs[1:], 1):
        if x.size != xs[0].size:
            raise ValueError(f"X{i} has {x.size} elements but X0 has {xs[0].size}; WeightedSum needs equal sizes")
    return [x.reshape(xs[0].shape) for x in xs]


@kernel("WeightedSum")
def weighted_sum(xp, *xw):
    xs = _like_x0(xw[0::2])
    out = xs[0] * xw[1].reshape(())
    for x, w in zip(xs[1:], xw[3::2]):
        out = out + x * w.reshape(())
    return out.astype(xw[0].dtype, copy=False)


@kernel("WeightedSumGradient", needs_context=True)
def weighted_sum_gradient(xp, dy, *xw, ctx, grad_on_w: int = 0):
    xs, ws = xw[0::2], xw[1::2]
    dxs = tuple((dy * w.reshape(())).reshape(x.shape) for x, w in zip(xs, ws))
    return dxs + (tuple((dy * x.reshape(dy.shape)).sum().reshape(1) for x in xs) if grad_on_w else ())


@kernel("Scale")
def scale(xp, x, *, scale: float = 1.0):
    return x * x.dtype.type(scale)


#: Unary elementwise ops: one line each (Caffe2 keeps the input dtype; numpy does too).
UNARY = {
    "Exp": lambda xp, x: xp.exp(x),
    "Log": lambda xp, x: xp.log(x),
    "Sqr": lambda xp, x: x * x,
    "Sqrt": lambda xp, x: xp.sqrt(x),
    "Negative": lambda xp, x: -x,
    "Abs": lambda xp, x: xp.abs(x),
    "Sign": lambda xp, x: xp.sign(x),
    "Reciprocal": lambda xp, x: 1 / x,
    "Ceil": lambda xp, x: xp.ceil(x),
    "Floor": lambda xp, x: xp.floor(x),
    "Not": lambda xp, x: ~x,
}
for _op_type, _fn in UNARY.items():
    kernel(_op_type)(_fn)


@kernel("ReciprocalGradient")
def reciprocal_gradient(xp, y, dy):
    return -dy * y * y  # NOTE: [Y, dY]: d(1/x)/dx = -1/x^2 = -Y^2


@kernel("AbsGradient")
def abs_gradient(xp, x, dy):
    return dy * xp.sign(x)


@kernel("Pow")
def pow_(xp, x, e=None, *, exponent: float | None = None, broadcast: int = 0, axis: int = -1,
         axis_str: str = "", order: str = "NCHW"):
    if e is None:
        return xp.power(x, x.dtype.type(exponent))
    return xp.power(x, _legacy_b(x, e, broadcast, axis, axis_str, order)).astype(x.dtype, copy=False)


@kernel("Where")
def where(xp, c, a, b):
    return xp.where(c, a, b)


# ---- gradients ----
gradient("Add", "Sub", "Mul")(simple("{T}Gradient", "GO0 I0 I1", "GI0 GI1"))
gradient("Div")(simple("DivGradient", "GO0 I0 I1 O0", "GI0 GI1"))
gradient("Sum")(pass_through)
gradient("Scale")(simple("Scale", "GO0", "GI0"))
gradient("Exp")(simple("Mul", "O0 GO0", "GI0"))
gradient("Log")(simple("Div", "GO0 I0", "GI0"))  # NOTE: reads X, so an in-place Log fails the version check.
gradient("Negative")(simple("Negative", "GO0", "GI0"))
gradient("Abs")(simple("AbsGradient", "I0 GO0", "GI0"))
should_not_do_gradient("EQ", "NE", "LT", "LE", "GT", "GE", "Not", "And", "Or", "Xor", "Where", "Sign")
gradient_not_implemented_yet("Ceil", "Floor", "BatchBoxCox")


@gradient("Sqr")
@cc_maker
def sqr_gradient(g):
    # NOTE: the first op scales the incoming gradient blob in place.
    return [g.op_("Scale", [g.GO(0)], [g.GO(0)], scale=2.0), g.op_("Mul", [g.GO(0), g.I(0)], [g.GI(0)])]


@gradient("Sqrt")
@cc_maker
def sqrt_gradient(g):
    return [g.op_("Scale", [g.GO(0)], [g.GI(0)], scale=0.5), g.op_("Div", [g.GI(0), g.O(0)], [g.GI(0)])]


@gradient("Mean")
@cc_maker
def mean_gradient_maker(g):
    return [g.op_("MeanGradient", [g.GO(0)], [g.GI(k) for k in range(len(g.op.input))])]


@gradient("WeightedSum")
@cc_maker
def weighted_sum_gradient_maker(g):
    n = len(g.op.input)
    outs = [g.GI(k) for k in range(0, n, 2)] + ([g.GI(k) for k in range(1, n, 2)] if g.arg("grad_on_w", 0) else [])
    return [g.op_("WeightedSumGradient", [g.GO(0), *g.op.input], outs)]


@gradient("Pow")
@cc_maker(copy_args=False)
def pow_gradient(g):
    if g.arg("exponent") is not None:
        e = g.arg("exponent")
        if abs(e) <= 1e-12:
            raise GradientMakerError("The exponent of Pow must be nonzero to compute its gradient.")
        p = (e - 1) / e if g.I(0) == g.O(0) else e - 1  # NOTE: in place, X is X**e already.
        return [g.op_("Pow", [g.I(0)], [g.GI(0)], exponent=float(p)),
                g.op_("Mul", [g.GI(0), g.GO(0)], [g.GI(0)]), g.op_("Scale", [g.GI(0)], [g.GI(0)], scale=float(e))]
    if g.I(0) == g.O(0) or g.I(1) == g.O(0):
        raise GradientMakerError(f"Gradient computation cannot be carried out if Pow uses in-place computation: {g.O(0)}")
    # NOTE: Caffe2 1.10.2 also differentiates E (older sources left E_grad = E - 1).
    bc = dict(broadcast=1, axis=g.arg("axis", -1), axis_str=g.arg("axis_str", ""),
              order=g.arg("order", "NCHW")) if g.arg("broadcast", 0) else {}
    pre = g.I(1) + "_grad_autogen_pre_red"
    ops = [g.op_("ConstantFill", [g.I(1)], [g.GI(1)], value=1.0), g.op_("Sub", [g.I(1), g.GI(1)], [g.GI(1)]),
           g.op_("Pow", [g.I(0), g.GI(1)], [g.GI(0)], **bc), g.op_("Mul", [g.GI(0), g.GO(0)], [g.GI(0)]),
           g.op_("Mul", [g.GI(0), g.I(1)], [g.GI(0)], **bc),
           g.op_("Log", [g.I(0)], [pre]), g.op_("Mul", [pre, g.O(0)], [pre])]
    if not bc:
        return ops + [g.op_("Mul", [pre, g.GO(0)], [g.GI(1)])]
    red = {k: bc[k] for k in ("axis", "axis_str", "order")}
    return ops + [g.op_("Mul", [pre, g.GO(0)], [pre]), g.op_("SumReduceLike", [pre, g.I(1)], [g.GI(1)], **red)]


# ---- shapes ----

def _binary_shape(dtype=None):
    def rule(a, b, *, broadcast: int = 0, axis: int = -1, axis_str: str = "", order: str = "NCHW"):
        # NOTE: legacy broadcast=1 aligns B's dims with A's starting at `axis`; else numpy rules.
        dtype_out = a.dtype if dtype is None else dtype
        if broadcast and b.shape is None:
            return TensorInfo(dims(a), dtype_out)  # NOTE: legacy broadcast: the output has A's shape.
        ad, bd = dims(a), dims(b)
        if broadcast:
            axis = order.index(axis_str) if axis_str else len(ad) - len(bd) if axis == -1 else axis
            if axis < 0 or axis + len(bd) > len(ad):
                raise ShapeError(f"legacy broadcast of {bd} into {ad} at axis {axis}")
            bd = tuple(bd) + (1,) * (len(ad) - axis - len(bd))
        return TensorInfo(broadcast_dims(ad, bd), dtype_out)
    return rule


for _t in ("Add", "Sub", "Mul", "Div"):
    shape(_t)(_binary_shape())
for _t in ("EQ", "NE", "LT", "LE", "GT", "GE", "And", "Or", "Xor"):
    shape(_t)(_binary_shape(BOOL))
shape("AddGradient", "SubGradient", "MulGradient", "DivGradient")(same_as(1, 2))  # [dC, A, B(, C)] -> dA, dB
shape("SumReduceLike")(lambda a, b, **_: TensorInfo(dims(b), a.dtype))


@shape("Sum", "Mean")
def sum_shape(*xs):
    # NOTE: Sum/Mean need equal shapes, so any input with a known dim tells the output's.
    ranked = [dims(x) for x in xs if x.shape is not None] or dims(xs[0])
    return TensorInfo(functools.reduce(merge, ranked), xs[0].dtype)


@shape("MeanGradient")
def mean_gradient_shape(dy, *, n_out):
    return (dy,) * n_out


shape("WeightedSum", "Scale", "Exp", "Log", "Sqr", "Sqrt", "Negative", "Abs", "Sign", "Reciprocal", "Ceil",
      "Floor", "Not")(same_as(0))
shape("AbsGradient", "ReciprocalGradient")(same_as(0))  # [X or Y, dY] -> dX


@shape("Pow")
def pow_shape(x, e=None, *, exponent: float | None = None, broadcast: int = 0, axis: int = -1):
    return x if e is None else _binary_shape()(x, e, broadcast=broadcast, axis=axis)


@shape("Where")
def where_shape(c, a, b):
    return TensorInfo(broadcast_dims(broadcast_dims(dims(c), dims(a)), dims(b)), a.dtype)


# ---- onnx ----
from engine.catalogue.registry import onnx_converter  # noqa: E402

#: Caffe2 binary op -> ONNX op (NE is Not(Equal)).
_ONNX_BINARY = {"Add": "Add", "Sub": "Sub", "Mul": "Mul", "Div": "Div", "EQ": "Equal", "NE": "Equal", "LT": "Less",
                "LE": "LessOrEqual", "GT": "Greater", "GE": "GreaterOrEqual", "And": "And", "Or": "Or", "Xor": "Xor"}


def onnx_legacy_b(c, i=1):
    """Input `i` as Caffe2's legacy ``broadcast=1`` reads it: its dims aligned with A's from `axis`
    (trailing ones appended); ONNX's numpy broadcasting then matches.  Without broadcast=1 Caffe2
    broadcasts numpy-style already."""
    b = c.x(i)
    if not c.arg("broadcast", 0) or (c.arg("axis", -1) == -1 and not c.arg("axis_str")):
        return b  # NOTE: no axis: B's dims line up with A's last ones, as numpy's (ranks not needed)
    ra, rb = c.rank(0), c.rank(i)
    axis = c.arg("order", "NCHW").index(c.arg("axis_str")) if c.arg("axis_str") else c.arg("axis", -1)
    axis = ra - rb if axis == -1 else axis
    trailing = ra - axis - rb
    return b if trailing <= 0 else c.emit("Reshape", [b, c.ints(list(c.shape(i)) + [1] * trailing)])


@onnx_converter(*_ONNX_BINARY)
def binary_onnx(c):
    """Elementwise ops; integer Div truncates toward zero in both; NE is Not(Equal)."""
    b = onnx_legacy_b(c)
    if c.op.type == "NE":
        return c.emit("Not", [c.emit("Equal", [c.x(0), b])], [c.y(0)])
    c.emit(_ONNX_BINARY[c.op.type], [c.x(0), b], [c.y(0)])


@onnx_converter("Sum")
def sum_onnx(c):
    """ONNX Sum (float types); integer inputs as a chain of Adds (ONNX Sum takes floats only)."""
    if c.np_dtype(0).kind == "f":
        return c.emit("Sum", [c.x(i) for i in range(c.n_in)], [c.y(0)])
    acc = c.x(0)
    for i in range(1, c.n_in):
        acc = c.emit("Add", [acc, c.x(i)], [c.y(0)] if i == c.n_in - 1 else 1)
    if c.n_in == 1:
        c.emit("Identity", [acc], [c.y(0)])


@onnx_converter("Mean")
def mean_onnx(c):
    c.emit("Mean", [c.x(i) for i in range(c.n_in)], [c.y(0)])


@onnx_converter("Scale")
def scale_onnx(c):
    c.emit("Mul", [c.x(0), c.const(np.array(c.arg("scale", 1.0), c.np_dtype(0)), "scale")], [c.y(0)])


#: Caffe2 unary op -> ONNX op of the same formula.
_ONNX_UNARY = {"Exp": "Exp", "Log": "Log", "Sqrt": "Sqrt", "Negative": "Neg", "Abs": "Abs", "Sign": "Sign",
               "Reciprocal": "Reciprocal", "Ceil": "Ceil", "Floor": "Floor", "Not": "Not"}


@onnx_converter(*_ONNX_UNARY)
def unary_onnx(c):
    c.emit(_ONNX_UNARY[c.op.type], [c.x(0)], [c.y(0)])


@onnx_converter("Sqr")
def sqr_onnx(c):
    c.emit("Mul", [c.x(0), c.x(0)], [c.y(0)])


@onnx_converter("Pow")
def pow_onnx(c):
    """Pow by the `exponent` arg (in X's dtype) or by a (legacy-broadcast) second input."""
    e = onnx_legacy_b(c) if c.n_in > 1 else c.const(np.array(c.arg("exponent", 1.0), c.np_dtype(0)), "exponent")
    c.emit("Pow", [c.x(0), e], [c.y(0)])


@onnx_converter("Where")
def where_onnx(c):
    c.emit("Where", [c.x(0), c.x(1), c.x(2)], [c.y(0)])


@onnx_converter("WeightedSum")
def weighted_sum_onnx(c):
    """X0 * w0 + X1 * w1 + ..., summed left to right as the kernel; each weight read as a scalar and
    each X reshaped to X0's shape (Caffe2 asks for equal sizes only); one dtype throughout."""
    if c.n_in % 2 or len({c.np_dtype(i) for i in range(c.n_in)}) != 1:
        raise c.refuse("an odd number of inputs, or X and weights of different dtypes")
    out = None
    for i in range(0, c.n_in, 2):
        x = c.x(i) if i == 0 else c.emit("Reshape", [c.x(i), c.shape_of(c.x(0))])
        term = c.emit("Mul", [x, c.emit("Reshape", [c.x(i + 1), c.ints([])])])
        out = term if out is None else c.emit("Add", [out, term])
    c.emit("Identity", [out], [c.y(0)])
