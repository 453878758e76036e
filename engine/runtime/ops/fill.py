"""Fill ops (init nets): ConstantFill, GaussianFill, XavierFill, MSRAFill, UniformFill, GivenTensor*Fill, RangeFill…"""
from __future__ import annotations

import inspect

import numpy as np

from engine.runtime import device as dev
from engine.runtime.ops.tensor import np_dtype
from engine.runtime.grad_makers import no_gradient
from engine.catalogue.registry import gradient, kernel
from engine.catalogue.registry import shape
from engine.runtime.shapes import BOOL, FLOAT, INT32, INT64, UINT8, TensorInfo, Unknown, dims
from proto import caffe2_pb2

# ---- kernels ----

def _shape(x, shape, extra_shape, input_as_shape):
    """Output shape of a filler: `shape` arg, or input 0's dims / values, plus `extra_shape`."""
    if x is None:
        if extra_shape or input_as_shape:
            raise ValueError("extra_shape and input_as_shape need an input")
        if isinstance(shape, (int, float)):
            raise ValueError("Argument 'shape' was a scalar, list expected")
        return tuple(int(v) for v in shape or ())
    if shape:
        raise ValueError("Cannot set the shape argument and pass in an input at the same time")
    if input_as_shape:
        dims = dev.to_host(x)
        if dims.ndim != 1 or dims.size == 0:
            raise ValueError("input_as_shape needs a non-empty 1-D tensor of dims")
        base = tuple(int(v) for v in dims)
    else:
        base = tuple(x.shape)
    return base + tuple(int(v) for v in extra_shape or ())


def filler(fn):
    """Register a random/derived filler: `fn(rng, shape, **args)` returns a numpy array."""
    def run(xp, x=None, *, ctx, shape: list | None = None, extra_shape: list | None = None,
            input_as_shape: int = 0, **args):
        return xp.asarray(fn(ctx.rng, _shape(x, shape, extra_shape, input_as_shape), **args))
    sig = inspect.signature(run)
    extra = [p.replace(kind=p.KEYWORD_ONLY) for p in list(inspect.signature(fn).parameters.values())[2:]]
    run.__signature__ = sig.replace(parameters=[p for p in sig.parameters.values()
                                                if p.kind is not p.VAR_KEYWORD] + extra)
    return run


@kernel("ConstantFill")
def constant_fill(xp, x=None, v=None, *, value=None, dtype: int | None = None, shape: list | None = None,
                  extra_shape: list | None = None, input_as_shape: int = 0):
    # NOTE: without `dtype` a float value gives FLOAT and an int value INT64 (Caffe2's inference).
    if dtype is None:
        if value is not None and not isinstance(value, (int, float)):
            raise ValueError("Argument 'value' is of unexpected type")
        dtype = 10 if isinstance(value, int) else 1
    if dtype == 0:
        raise ValueError("ConstantFill: dtype UNDEFINED")
    if v is not None:
        value = dev.to_host(v).reshape(()).item()
    out = np.full(_shape(x, shape, extra_shape, input_as_shape), 0 if value is None else value, dtype=np_dtype(dtype))
    return out if np_dtype(dtype) is object else xp.asarray(out)


kernel("GaussianFill", needs_context=True)(filler(
    lambda rng, shape, mean=0.0, std=1.0: rng.normal(mean, std, shape).astype(np.float32)))


def _uniform(draw, lo_default, hi_default):
    """UniformFill / UniformIntFill: bounds from the min/max args, or from inputs 1 and 2 (one value each)."""
    def run(xp, x=None, lo=None, hi=None, *, ctx, shape: list | None = None, extra_shape: list | None = None,
            input_as_shape: int = 0, min=lo_default, max=hi_default):  # noqa: A002
        if (lo is None) != (hi is None):
            raise ValueError("min and max come both as inputs or both as arguments")
        dims_ = _shape(x, shape, extra_shape, input_as_shape)
        if lo is not None:  # NOTE: bounds as inputs: min == max is allowed, min > max gives dim 0 = 0
            min, max = (dev.to_host(v).reshape(-1)[0].item() for v in (lo, hi))  # noqa: A001
            if min > max:
                return xp.asarray(draw(ctx.rng, (0, *tuple(dims_)[1:]), min, min))
        elif not min < max:
            raise ValueError(f"max ({max}) must be bigger than min ({min})")
        return xp.asarray(draw(ctx.rng, dims_, min, max))
    return run


kernel("UniformFill", needs_context=True)(_uniform(
    lambda rng, shape, lo, hi: rng.uniform(lo, hi, shape).astype(np.float32), 0.0, 1.0))
kernel("UniformIntFill", needs_context=True)(_uniform(
    lambda rng, shape, lo, hi: rng.integers(lo, hi, shape, endpoint=True).astype(np.int32), 0, 1))
# NOTE: Xavier: uniform in ±sqrt(3 / fan_in), fan_in = numel / dim0; MSRA: normal std sqrt(2 / fan_out),
# fan_out = numel / dim1.
kernel("XavierFill", needs_context=True)(filler(lambda rng, shape: rng.uniform(
    -1, 1, shape).astype(np.float32) * np.float32(np.sqrt(3 / max(np.prod(shape) / shape[0], 1)))))
kernel("MSRAFill", needs_context=True)(filler(lambda rng, shape: rng.normal(
    0, np.sqrt(2 / max(np.prod(shape) / shape[1], 1)), shape).astype(np.float32)))
kernel("RangeFill", needs_context=True)(filler(
    lambda rng, shape: np.arange(np.prod(shape, dtype=np.int64), dtype=np.float32).reshape(shape)))


@kernel("DiagonalFill", needs_context=True)
@filler
def diagonal_fill(rng, shape, value=0.0, dtype=1):
    out = np.zeros(shape, dtype=np_dtype(dtype))
    np.fill_diagonal(out, value)
    return out


@kernel("Range")
def range_(xp, *bounds):
    # NOTE: [stop], [start, stop] or [start, stop, step], scalars of one type; the output has that type.
    vals = [dev.to_host(b).reshape(-1)[0] for b in bounds]
    if len({b.dtype for b in bounds}) != 1:
        raise TypeError("Range: start, stop and step must have one type")
    start, stop, step = (0, vals[0], 1) if len(vals) == 1 else (vals[0], vals[1], 1) if len(vals) == 2 else vals
    if step == 0:
        raise ValueError("Range: enforce fail: Step size cannot be 0")  # NOTE: Caffe2's words (utility_ops_test)
    n = max(int(np.ceil((stop - start) / step)), 0)
    return xp.asarray(start + np.arange(n, dtype=bounds[0].dtype) * np.asarray(step, bounds[0].dtype))


@kernel("LengthsRangeFill")
def lengths_range_fill(xp, lengths):
    n = dev.to_host(lengths).astype(np.int64)
    return xp.asarray(np.arange(n.sum(), dtype=np.int32) - np.repeat(np.cumsum(n) - n, n).astype(np.int32))


def given(np_type, field_dtype=None):
    def run(xp, x=None, *, values=(), shape: list | None = None, extra_shape: list | None = None,
            input_as_shape: int = 0, dtype: int | None = None):
        t = np_dtype(dtype) if dtype is not None and field_dtype is None else np_type
        dims = _shape(x, shape, extra_shape, input_as_shape)
        if t is object:
            return np.array([v if isinstance(v, bytes) else str(v).encode() for v in values], dtype=object).reshape(dims)
        arr = np.asarray(values, dtype=t)  # NOTE: an init net's float values view the mapped file: no copy
        if arr.size != int(np.prod(dims)):
            raise ValueError(f"{arr.size} values for shape {dims}")
        return xp.asarray(arr.reshape(dims))
    return run


for _t, _d in {"GivenTensorFill": np.float32, "GivenTensorDoubleFill": np.float64,
               "GivenTensorBoolFill": np.bool_, "GivenTensorInt16Fill": np.int16, "GivenTensorIntFill": np.int32,
               "GivenTensorInt64Fill": np.int64, "GivenTensorStringFill": object}.items():
    kernel(_t)(given(_d, None if _t == "GivenTensorFill" else _d))


@kernel("GivenTensorByteStringToUInt8Fill")
def given_bytes_fill(xp, x=None, *, values=(), shape: list | None = None):
    if isinstance(values, np.ndarray):  # NOTE: the string's bytes, viewing the mapped init file
        return xp.asarray(values.reshape(_shape(x, shape, None, 0)))
    data = values[0] if values else b""
    data = data.encode("latin-1") if isinstance(data, str) else data
    return xp.asarray(np.frombuffer(data, dtype=np.uint8).reshape(_shape(x, shape, None, 0)).copy())


@kernel("OneHot")
def one_hot(xp, indices, index_size):
    # NOTE: float32 rows of length index_size_tensor; row i has a 1 at indices[i].
    n = int(dev.to_host(index_size).reshape(-1)[0])
    return (indices.reshape(-1, 1).astype(np.int64) == xp.arange(n)).astype(np.float32)


# ---- gradients ----
no_gradient("ConstantFill", "UniformFill", "UniformIntFill", "UniqueUniformFill", "GaussianFill",
            "XavierFill", "MSRAFill", "DiagonalFill", "RangeFill", "LengthsRangeFill", "GivenTensorFill",
            "GivenTensorDoubleFill", "GivenTensorBoolFill", "GivenTensorInt16Fill", "GivenTensorIntFill",
            "GivenTensorInt64Fill", "GivenTensorStringFill", "Range", "OneHot")


# ---- shapes ----

def fill_rule(default_dtype, typed=True):
    """Rule of a filler: `shape` arg, or input 0's dims, plus `extra_shape`; dtype from `dtype` or the op."""
    def rule(x=None, *_, shape: list | None = None, extra_shape: list | None = None, input_as_shape: int = 0,
             dtype: int | None = None):
        if x is not None and input_as_shape:
            raise Unknown  # NOTE: the dims are the input's values
        base = tuple(int(v) for v in shape or ()) if x is None else dims(x)
        return TensorInfo(base + tuple(int(v) for v in extra_shape or ()),
                          dtype if typed and dtype is not None else default_dtype)
    return rule


@shape("ConstantFill")
def constant_fill_shape(x=None, *_, value=None, dtype: int | None = None, shape: list | None = None,
                        extra_shape: list | None = None, input_as_shape: int = 0):
    # NOTE: without `dtype` a float value gives FLOAT and an int value INT64 (Caffe2's inference).
    if dtype is None:
        dtype = INT64 if isinstance(value, int) else FLOAT
    return fill_rule(dtype)(x, shape=shape, extra_shape=extra_shape, input_as_shape=input_as_shape, dtype=dtype)


@shape("Range")
def range_shape(*bounds):
    raise Unknown  # NOTE: the length is a function of the values


@shape("OneHot")
def one_hot_shape(indices, index_size):
    raise Unknown  # NOTE: the row length is index_size_tensor's value


for _t, _d in {"GaussianFill": FLOAT, "UniformFill": FLOAT, "XavierFill": FLOAT, "MSRAFill": FLOAT,
               "RangeFill": FLOAT, "DiagonalFill": FLOAT, "UniformIntFill": INT32}.items():
    shape(_t)(fill_rule(_d))


def given_rule(default, typed):
    def rule(x=None, *, values=(), shape: list | None = None, extra_shape: list | None = None,
             input_as_shape: int = 0, dtype: int | None = None):
        if x is None and shape is None:  # NOTE: no shape means a scalar, which needs exactly one value
            return TensorInfo((), dtype if typed and dtype is not None else default) if len(values) == 1 else None
        return fill_rule(default, typed)(x, shape=shape, extra_shape=extra_shape, input_as_shape=input_as_shape,
                                          dtype=dtype)
    return rule


for _t, _d in {"GivenTensorFill": FLOAT, "GivenTensorDoubleFill": caffe2_pb2.TensorProto.DOUBLE,
               "GivenTensorBoolFill": BOOL, "GivenTensorInt16Fill": caffe2_pb2.TensorProto.INT16,
               "GivenTensorIntFill": INT32, "GivenTensorInt64Fill": INT64,
               "GivenTensorStringFill": caffe2_pb2.TensorProto.STRING}.items():
    shape(_t)(given_rule(_d, _t == "GivenTensorFill"))
shape("GivenTensorByteStringToUInt8Fill")(given_rule(UINT8, False))
shape("LengthsRangeFill")(lambda lengths: TensorInfo((None,), INT32))


# ---- onnx ----
from engine.catalogue.registry import onnx_converter  # noqa: E402


@onnx_converter("ConstantFill")
def constant_fill_onnx(c):
    """A fixed shape folds to a Constant; a shape taken from a computed input (its dims, or with
    input_as_shape its values) is ConstantOfShape(that + extra_shape) at run time."""
    if c.n_in == 0 or c.const_value(0) is not None:
        return c.fold()
    if c.n_in > 1:
        raise c.refuse("the value comes from a computed blob")
    dt = np_dtype(c.arg("dtype", 10 if isinstance(c.arg("value"), int) else 1))
    if dt is object:
        raise c.refuse("a STRING fill")
    as_shape = c.arg("input_as_shape", 0)
    dims = c.emit("Cast", [c.emit("Reshape", [c.x(0), c.ints([-1])])], to=7) if as_shape else c.shape_of(c.x(0))
    if c.arg("extra_shape"):
        dims = c.emit("Concat", [dims, c.ints(c.arg("extra_shape"))], axis=0)
    c.emit("ConstantOfShape", [dims], [c.y(0)], value=c.tensor(np.array([c.arg("value", 0) or 0], dt)))


@onnx_converter("GivenTensorFill", "GivenTensorDoubleFill", "GivenTensorBoolFill", "GivenTensorInt16Fill",
                "GivenTensorIntFill", "GivenTensorInt64Fill", "GivenTensorByteStringToUInt8Fill", "Range",
                "DiagonalFill", "OneHot")
def fixed_fill_onnx(c):
    """Deterministic from fixed values: folded (run once in the engine) into a Constant."""
    c.fold()


@onnx_converter("LengthsRangeFill")
def lengths_range_fill_onnx(c):
    """Fixed lengths fold to a Constant; lengths computed at run time give each position minus its
    segment's start (int32), from the lengths' running sums."""
    if c.const_value(0) is not None:
        return c.fold()
    from engine.runtime.ops.lengths import onnx_segments  # noqa: PLC0415

    _, starts, ids, pos = onnx_segments(c, c.x(0))
    c.emit("Cast", [c.emit("Sub", [pos, c.emit("Gather", [starts, ids], axis=0)])], [c.y(0)], to=6)
