"""Elementwise math and checks: trigonometric/hyperbolic, Cbrt, Cube, Erf, Log1p, Rsqrt, Max/Min, Mod,
bitwise ops, NaN checks, row scaling, clipping helpers, Accumulate, Conditional, Assert, Fail.

Every unary op with a gradient is one table row: its kernel, its gradient kernel, and the input
order its Caffe2 maker gives the gradient op (some read ``[X, dY]``, some ``[dY, X]``, some the
output ``Y``); see ``_UNARY``.
"""
from __future__ import annotations

import math

import numpy as np

from engine.runtime import device as dev
from engine.errors import ExecutionError
from engine.runtime.grad_makers import cc_maker, no_gradient, should_not_do_gradient, simple
from engine.runtime.ops.arith import _binary, _binary_shape
from engine.catalogue.registry import gradient, kernel, shape
from engine.runtime.shapes import UINT8, TensorInfo, dims, same_as

# ---- kernels ----


def erf(xp, x):
    """erf(x) for NumPy or CuPy arrays, in x's dtype.

    NOTE: NumPy has no erf; on NumPy this is, in float64, the Maclaurin series up to x^13 for
    |x| < 0.5 (relative error < 1e-9) and Abramowitz & Stegun 7.1.26 beyond (absolute error
    < 1.5e-7, relative < 3e-7 there), i.e. float32 rounding; on CuPy cupyx's erf.
    """
    if xp is not np:
        from cupyx.scipy.special import erf as cupy_erf  # noqa: PLC0415 - only with a GPU
        return cupy_erf(x).astype(x.dtype, copy=False)
    x64 = x.astype(np.float64)
    a, x2 = np.abs(x64), x64 * x64
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    series = x64 * (1 + x2 * (-1 / 3 + x2 * (1 / 10 + x2 * (-1 / 42 + x2 * (1 / 216 + x2 * (-1 / 1320 + x2 / 9360))))))
    return np.where(a < 0.5, series * (2 / math.sqrt(math.pi)),
                    np.sign(x64) * (1.0 - poly * np.exp(-x2))).astype(x.dtype, copy=False)


def _f(x, v):
    """The Python number `v` as x's scalar type (keeps float32 math in float32)."""
    return x.dtype.type(v)


# type -> (forward(xp, x), gradient(xp, v, dy) with v the X or Y the maker passes, maker inputs).
# The gradient op is ``<type>Gradient`` with inputs in the maker's order ("I0 GO0" = [X, dY]).
_UNARY = {
    "Acos": (lambda xp, x: xp.arccos(x), lambda xp, x, dy: -dy / xp.sqrt(1 - x * x), "I0 GO0"),
    "Asin": (lambda xp, x: xp.arcsin(x), lambda xp, x, dy: dy / xp.sqrt(1 - x * x), "I0 GO0"),
    "Atan": (lambda xp, x: xp.arctan(x), lambda xp, x, dy: dy / (1 + x * x), "I0 GO0"),
    "Cos": (lambda xp, x: xp.cos(x), lambda xp, x, dy: -dy * xp.sin(x), "I0 GO0"),
    "Sin": (lambda xp, x: xp.sin(x), lambda xp, x, dy: dy * xp.cos(x), "I0 GO0"),
    "Tan": (lambda xp, x: xp.tan(x), lambda xp, x, dy: dy / xp.square(xp.cos(x)), "I0 GO0"),
    "Cosh": (lambda xp, x: xp.cosh(x), lambda xp, x, dy: dy * xp.sinh(x), "GO0 I0"),
    "Sinh": (lambda xp, x: xp.sinh(x), lambda xp, x, dy: dy * xp.cosh(x), "GO0 I0"),
    "Cbrt": (lambda xp, x: xp.cbrt(x), lambda xp, y, dy: dy / (3 * y * y), "GO0 O0"),
    "Cube": (lambda xp, x: x * x * x, lambda xp, x, dy: dy * 3 * x * x, "GO0 I0"),
    "Erf": (erf, lambda xp, x, dy: dy * _f(x, 2 / math.sqrt(math.pi)) * xp.exp(-x * x), "I0 GO0"),
    "Log1p": (lambda xp, x: xp.log1p(x), lambda xp, x, dy: dy / (1 + x), "I0 GO0"),
    "Rsqrt": (lambda xp, x: 1 / xp.sqrt(x), lambda xp, y, dy: dy * _f(y, -0.5) * y * y * y, "GO0 O0"),
}


def _unary_kernels(op_type, fwd, grad, tokens):
    swapped = tokens.startswith("GO0")  # NOTE: [dY, X] makers: the kernel reads its inputs swapped.
    kernel(op_type)(lambda xp, x: fwd(xp, x).astype(x.dtype, copy=False))
    kernel(op_type + "Gradient")(
        (lambda xp, dy, v: grad(xp, v, dy).astype(dy.dtype, copy=False)) if swapped else
        (lambda xp, v, dy: grad(xp, v, dy).astype(dy.dtype, copy=False)))
    gradient(op_type)(simple(op_type + "Gradient", tokens, "GI0"))


for _t, (_fwd, _grad, _tokens) in _UNARY.items():
    _unary_kernels(_t, _fwd, _grad, _tokens)


def _select(name, reduce_name):
    def run(xp, *xs):
        # NOTE: float32 only and no broadcasting in Caffe2 1.10.2: every input must have X0's shape.
        if xs[0].dtype != np.float32:
            raise TypeError(f"{name} takes float32 inputs, got {xs[0].dtype}")
        for i, x in enumerate(xs[1:], 1):
            if x.shape != xs[0].shape:
                raise ValueError(f"{name}: input #{i} has shape {x.shape}, input #0 {xs[0].shape}; they must match")
        y = xp.array(xs[0], copy=True)  # NOTE: an ndarray even for a 0-d input (a scalar cannot be `out`)
        for x in xs[1:]:
            getattr(xp, reduce_name)(y, x, out=y)
        return y
    return run


kernel("Max")(_select("Max", "maximum"))
kernel("Min")(_select("Min", "minimum"))


@kernel("MaxGradient", "MinGradient")
def select_gradient(xp, y, dy, *xs):
    # NOTE: every input equal to the extremum gets the whole gradient (ties are not split).
    return tuple((dy * (x == y)).astype(dy.dtype, copy=False) for x in xs)


@kernel("Mod")
def mod(xp, x, *, divisor: int = 0, sign_follow_divisor: int = 0):
    # NOTE: C's %: the result has the dividend's sign (np.fmod), or the divisor's when asked.
    if not divisor:
        raise ValueError("Mod: argument 'divisor' must be a nonzero integer")
    if x.dtype not in (np.int32, np.int64):
        raise TypeError(f"Mod takes int32 or int64, got {x.dtype}")
    y = xp.fmod(x, x.dtype.type(divisor))
    if sign_follow_divisor:
        y = xp.where((y != 0) & ((y < 0) != (divisor < 0)), y + x.dtype.type(divisor), y)
    return y


for _t, _f2 in {"BitwiseAnd": lambda xp, a, b: a & b, "BitwiseOr": lambda xp, a, b: a | b,
                "BitwiseXor": lambda xp, a, b: a ^ b}.items():
    kernel(_t)(_binary(_f2))


@kernel("SumRelu")
def sum_relu(xp, *xs):
    y = xs[0].copy()
    for x in xs[1:]:
        y += x
    return xp.maximum(y, 0)


@kernel("ReplaceNaN")
def replace_nan(xp, x, *, value: float = 0.0):
    return xp.where(xp.isnan(x), x.dtype.type(value), x)


@kernel("IsNaN")
def is_nan(xp, x):
    return xp.isnan(x).astype(np.uint8)  # NOTE: uint8, not bool, in Caffe2 1.10.2


def _check_finite(xp, x, what):
    if x.dtype.kind == "f" and not bool(xp.isfinite(x).all()):
        bad = "NaN" if bool(xp.isnan(x).any()) else "Inf"
        raise ExecutionError(f"{what}: the tensor contains {bad} values")


@kernel("NanCheck")
def nan_check(xp, x, *rest):
    for i, t in enumerate((x, *rest)):
        _check_finite(xp, t, f"NanCheck input #{i}")
    return x.copy()


@kernel("EnforceFinite")
def enforce_finite(xp, x):
    _check_finite(xp, x, "EnforceFinite")
    return ()


@kernel("EnsureClipped")
def ensure_clipped(xp, param, indices=None, grad=None, *, min: float = float("-inf"),  # noqa: A002
                   max: float = float("inf")):  # noqa: A002
    # NOTE: with [param, indices, grad] only the rows named by indices are clipped (sparse update).
    lo, hi = param.dtype.type(min), param.dtype.type(max)
    if indices is None:
        return xp.clip(param, lo, hi)
    y = param.copy()
    rows = indices.reshape(-1)
    y[rows] = xp.clip(param[rows], lo, hi)
    return y


@kernel("ClipTensorByScaling")
def clip_tensor_by_scaling(xp, x, val, threshold_scale=None, *, threshold: float = 0.0):
    # NOTE: X * threshold / val when val > threshold (threshold times input 2, when given).
    if x.size == 0:
        raise ValueError("ClipTensorByScaling needs a non-empty input (Caffe2 refuses size 0)")
    t = float(threshold) * (float(dev.to_host(threshold_scale).reshape(-1)[0]) if threshold_scale is not None else 1.0)
    v = float(dev.to_host(val).reshape(-1)[0])
    return (x * x.dtype.type(t / v)).astype(x.dtype, copy=False) if v > t else x.copy()


@kernel("SquareRootDivide")
def square_root_divide(xp, data, scale):
    # NOTE: row i of data is divided by sqrt(scale[i]); rows whose scale is 0 are copied.
    s = scale.reshape((-1,) + (1,) * (data.ndim - 1)).astype(data.dtype)
    return xp.where(s == 0, data, data / xp.sqrt(xp.where(s == 0, 1, s))).astype(data.dtype, copy=False)


@kernel("RowMul")
def row_mul(xp, mat, w):
    return mat * w.reshape((-1,) + (1,) * (mat.ndim - 1))


@kernel("ReduceTailSum")
def reduce_tail_sum(xp, mat):
    return mat.reshape(mat.shape[0], int(np.prod(mat.shape[1:]))).sum(axis=1).astype(mat.dtype, copy=False)


@kernel("Accumulate", needs_context=True)
def accumulate(xp, x, *, ctx, gamma: float = 1.0):
    # NOTE: Y = X + gamma * Y, where Y starts at 0 whenever its shape is not X's (Caffe2 1.10.2 leaves
    # it uninitialised then: docs/fidelity.md).
    old = ctx.workspace.values.get(ctx.op.output[0])
    if old is None or getattr(old, "shape", None) != x.shape:
        return x.copy()
    return (x + x.dtype.type(gamma) * old).astype(x.dtype, copy=False)


@kernel("ScaleBlobs")
def scale_blobs(xp, *xs, scale: float = 1.0):
    return tuple((x * x.dtype.type(scale)).astype(x.dtype, copy=False) for x in xs)


@kernel("WeightScale")
def weight_scale(xp, w, it, *, stepsize: int = 2**63 - 1, upper_bound_iter: int = 2**63 - 1,
                 scale: float = 1.0):
    # NOTE: scaled when iter + 1 is a multiple of stepsize and below upper_bound_iter.
    i = int(dev.to_host(it).reshape(-1)[0]) + 1
    return w.copy() if i % stepsize or i >= upper_bound_iter else (w * w.dtype.type(scale)).astype(w.dtype)


@kernel("NegateGradient")
def negate_gradient(xp, x):
    return x.copy()


@kernel("Conditional")
def conditional(xp, cond, data_t, data_f):
    # NOTE: picks whole rows: cond has one entry per row of DataT / DataF.
    if data_t.shape != data_f.shape:
        raise ValueError(f"Conditional: DataT {data_t.shape} and DataF {data_f.shape} differ")
    return xp.where(cond.reshape((-1,) + (1,) * (data_t.ndim - 1)), data_t, data_f)


@kernel("Assert")
def assert_(xp, x, *, error_msg: str = ""):
    if not bool(x.all()):
        raise ExecutionError(error_msg or f"Assert failed for input {dev.to_host(x).tolist()}")
    return ()


@kernel("Fail")
def fail(xp):
    raise ExecutionError("Fail op: this op always fails")


# ---- gradients ----
# (the unary table's makers are registered with its kernels above)
gradient("Max", "Min")(cc_maker(lambda g: [g.op_(g.type + "Gradient", [g.O(0), g.GO(0), *g.op.input],
                                                 [g.GI(k) for k in range(len(g.op.input))])]))
gradient("NanCheck")(simple("NanCheck", "GO0", "GI0"))
gradient("NegateGradient")(simple("Negative", "GO0", "GI0"))
gradient("SquareRootDivide")(simple("SquareRootDivide", "GO0 I1", "GI0"))
should_not_do_gradient("BitwiseAnd", "BitwiseOr", "BitwiseXor", "ReplaceNaN", "EnforceFinite", "EnsureClipped",
                       "ClipTensorByScaling", "Accumulate", "WeightScale", "Fail")
no_gradient("Conditional")


@gradient("RowMul")
@cc_maker
def row_mul_gradient(g):
    pre = g.I(1) + "_gradbefore_aggregate"
    return [g.op_("RowMul", [g.GO(0), g.I(1)], [g.GI(0)]), g.op_("Mul", [g.GO(0), g.I(0)], [pre]),
            g.op_("ReduceTailSum", [pre], [g.GI(1)])]


# ---- shapes ----
shape(*_UNARY, "Max", "Min", "SumRelu", "ReplaceNaN", "NanCheck", "EnsureClipped", "ClipTensorByScaling",
      "SquareRootDivide", "RowMul", "Accumulate", "WeightScale", "NegateGradient", "Mod")(same_as(0))
shape(*(t + "Gradient" for t in _UNARY))(same_as(0))
shape("IsNaN")(lambda x: TensorInfo(x.shape, UINT8))
shape("Conditional")(same_as(1))
shape("ReduceTailSum")(lambda x: TensorInfo(dims(x)[:1], x.dtype))


shape("EnforceFinite", "Assert", "Fail")(lambda *_, **__: ())  # no outputs


@shape("MaxGradient", "MinGradient")
def select_gradient_shape(y, dy, *xs):
    return xs


@shape("ScaleBlobs")
def scale_blobs_shape(*xs):
    return xs


@shape("BitwiseAnd", "BitwiseOr", "BitwiseXor")
def bitwise_shape(a, b, *, broadcast: int = 0, axis: int = -1):
    return _binary_shape()(a, b, broadcast=broadcast, axis=axis)


# ---- onnx ----
from engine.catalogue.registry import onnx_converter  # noqa: E402

#: Caffe2 unary ops with an ONNX op of the same formula (Log1p, Cbrt and Rsqrt have none: refused).
_ONNX_SAME_UNARY = {t: t for t in ("Acos", "Asin", "Atan", "Cos", "Sin", "Tan", "Cosh", "Sinh", "Erf")}


@onnx_converter(*_ONNX_SAME_UNARY)
def same_unary_onnx(c):
    c.emit(_ONNX_SAME_UNARY[c.op.type], [c.x(0)], [c.y(0)])


@onnx_converter("Cube")
def cube_onnx(c):
    c.emit("Mul", [c.emit("Mul", [c.x(0), c.x(0)]), c.x(0)], [c.y(0)])


@onnx_converter("Max", "Min")
def select_onnx(c):
    """Elementwise max / min of equal-shaped inputs (ONNX's variadic Max / Min)."""
    c.emit(c.op.type, [c.x(i) for i in range(c.n_in)], [c.y(0)])


@onnx_converter("SumRelu")
def sum_relu_onnx(c):
    c.emit("Relu", [c.emit("Sum", [c.x(i) for i in range(c.n_in)])], [c.y(0)])


@onnx_converter("IsNaN")
def is_nan_onnx(c):
    c.emit("IsNaN", [c.x(0)], [c.y(0)])


@onnx_converter("Mod")
def mod_onnx(c):
    """C's % (fmod: the dividend's sign) or, with sign_follow_divisor, Python's (ONNX Mod fmod=0)."""
    d = c.const(np.array(c.arg("divisor", 0), c.np_dtype(0)), "divisor")
    c.emit("Mod", [c.x(0), d], [c.y(0)], fmod=0 if c.arg("sign_follow_divisor", 0) else 1)


@onnx_converter("Conditional")
def conditional_onnx(c):
    """ONNX Where picking whole rows: the condition (one entry per row of DataT) reshaped to
    (rows, 1, ..., 1) at DataT's rank, read from its shape at run time (a step net may not know it)."""
    tail = c.emit("Slice", [c.shape_of(c.x(1)), c.ints([1]), c.ints([np.iinfo(np.int64).max])])
    ones = c.emit("Add", [c.emit("Sub", [tail, tail]), c.ints([1])])
    cond = c.emit("Reshape", [c.x(0), c.emit("Concat", [c.ints([-1]), ones], axis=0)])
    c.emit("Where", [c.emit("Cast", [cond], to=9), c.x(1), c.x(2)], [c.y(0)])
