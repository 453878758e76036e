"""Int8 ops (Mask R-CNN2Go int8): Int8Conv, Int8Quantize, Int8Dequantize…

An Int8 blob is an :class:`Int8Tensor`: integer values (uint8, or int32 for biases) plus the
scale and zero point that map them to reals, ``real = scale * (q - zero_point)``.  The ops
reproduce the integer arithmetic of Caffe2's QNNPACK kernels on x86: exact int32 accumulation
of ``(x - x_zp) * (w - w_zp)``, then QNNPACK's Q31 requantization (a multiplier taken from the
float32 bits of ``x_scale * w_scale / y_scale``, round half up, then a rounding right shift
that rounds half away from zero), the output zero point, and saturation to the activation
range.  Layout is NHWC, as Caffe2's Int8 ops require.
"""
from __future__ import annotations

import inspect

import numpy as np

from engine.runtime.blobio import Int8Tensor
from engine.errors import ExecutionError
from engine.runtime.ops.conv import conv_shape, geometry, geometry_args, require_image, windows
from engine.runtime.ops.conv import conv_transpose_shape
from engine.runtime.ops.detection import roi_align_shape
from engine.runtime.ops.tensor import concat_shape, flatten, flatten_shape, reshape_shape, slice_shape, transpose_shape
from engine.catalogue.registry import kernel
from engine.catalogue.registry import shape
from engine.runtime.ops.pool import pool_shape
from engine.runtime.shapes import FLOAT, INT32, UINT8, UNKNOWN, TensorInfo, dims, opaque, same_as


def _bits(x: float) -> int:
    return int(np.array(x, np.float32).view(np.uint32))


def requantize(acc: np.ndarray, scale: np.float32, zero_point: int, qmin: int = 0, qmax: int = 255) -> np.ndarray:
    """QNNPACK's Q31 requantization of int32 accumulators to uint8."""
    bits = _bits(scale)
    multiplier = ((bits & 0x007FFFFF) | 0x00800000) << 7
    shift = 127 + 31 - 32 - (bits >> 23)
    if not 0 <= shift < 32:
        raise ExecutionError(f"requantization scale {float(scale)!r} is outside QNNPACK's range (0, 1)")
    acc = np.asarray(acc, np.int64)
    q31 = (acc * multiplier + (1 << 30)) >> 31  # NOTE: floor shift of the rounded product: round half up
    mask = (1 << shift) - 1
    rem = (q31 & mask) - (q31 < 0)
    n = (q31 >> shift) + (rem > (mask >> 1))
    return np.clip(n + zero_point, qmin, qmax).astype(np.uint8)


def avgpool_requantize(acc: np.ndarray, scale: np.float32, zero_point: int, qmin: int = 0,
                       qmax: int = 255) -> np.ndarray:
    """QNNPACK's average-pool requantization: 24-bit multiplier, round half away from zero."""
    bits = _bits(scale)
    multiplier = (bits & 0x007FFFFF) | 0x00800000
    shift = 127 + 23 - (bits >> 23)
    acc = np.asarray(acc, np.int64)
    mag = (np.abs(acc) * multiplier + (1 << (shift - 1))) >> shift
    return np.clip(np.where(acc < 0, -mag, mag) + zero_point, qmin, qmax).astype(np.uint8)


def quantize_uint8(x: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """Caffe2's QuantizeUint8: zero point + round-half-even(x / scale), saturated to uint8."""
    q = np.rint(np.asarray(x, np.float32) / np.float32(scale))
    return np.clip(np.clip(q, -2.0**31, 2.0**31 - 1) + zero_point, 0, 255).astype(np.uint8)


def _int8(ctx, v, k: int = 0) -> Int8Tensor:
    if not isinstance(v, Int8Tensor):
        raise ExecutionError(f"{_where(ctx)}: input '{ctx.op.input[k]}' is not an Int8 tensor "
                             f"(got {type(v).__name__})")
    return v


def _where(ctx) -> str:
    return f"{ctx.net_name or 'net'}: op #{ctx.index} {ctx.op.type} '{ctx.op.name}'"


def _limits(relu: bool, scale: float, zero_point: int) -> tuple[int, int]:
    """Activation range: (zero point of 0.0, 255) for the Relu variants, else (0, 255)."""
    return (int(quantize_uint8(np.float32(0.0), scale, zero_point)), 255) if relu else (0, 255)


# ---- kernels ----

@kernel("Int8Quantize")
def int8_quantize(xp, x, *, Y_scale: float = 1.0, Y_zero_point: int = 0):
    return Int8Tensor(quantize_uint8(x, Y_scale, Y_zero_point), float(np.float32(Y_scale)), int(Y_zero_point))


@kernel("Int8Dequantize", needs_context=True)
def int8_dequantize(xp, x, *, ctx):
    return _int8(ctx, x).dequantized()


@kernel("Int8GivenTensorFill")
def int8_given_tensor_fill(xp, *, values=b"", shape: list = (), Y_scale: float = 1.0, Y_zero_point: int = 0):
    # NOTE: `values` is one string holding the uint8 bytes.
    if isinstance(values, np.ndarray):  # NOTE: the bytes view the mapped init file (engine.model.valueref)
        data = values.reshape(tuple(shape))
    else:
        raw = values.encode("latin-1") if isinstance(values, str) else bytes(values)
        data = np.frombuffer(raw, np.uint8).reshape(tuple(shape)).copy()
    return Int8Tensor(data, float(np.float32(Y_scale)), int(Y_zero_point))


@kernel("Int8GivenIntTensorFill")
def int8_given_int_tensor_fill(xp, *, values: list = (), shape: list = (), Y_scale: float = 1.0,
                               Y_zero_point: int = 0):
    data = np.array(values, np.int32).reshape(tuple(shape))
    return Int8Tensor(data, float(np.float32(Y_scale)), int(Y_zero_point))


def _conv_acc(x: np.ndarray, w: np.ndarray, x_zp: int, w_zp: int, group: int, k, s, pb, pe, d) -> np.ndarray:
    """int64 sums of (x - x_zp) * (w - w_zp) over each window, NHWC in and out.

    Padding is the input zero point (QNNPACK's zero buffer), so it adds nothing.  Grouped
    convs sum as float64 GEMMs (exact for these integer ranges, and BLAS-fast); depthwise ones
    accumulate their taps in int64."""
    n, _, _, c = x.shape
    m = w.shape[0]
    xz = np.pad(x.astype(np.int32) - x_zp, ((0, 0), (pb[0], pe[0]), (pb[1], pe[1]), (0, 0)))
    oh = (xz.shape[1] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (xz.shape[2] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    taps = [xz[:, i * d[0]:i * d[0] + s[0] * (oh - 1) + 1:s[0], j * d[1]:j * d[1] + s[1] * (ow - 1) + 1:s[1]]
            for i in range(k[0]) for j in range(k[1])]  # each (N, OH, OW, C)
    wz = w.astype(np.int64) - w_zp  # (M, KH, KW, C/g)
    cg, mg = c // group, m // group
    if group > 1 and cg == 1 and mg == 1:  # depthwise: one filter per channel
        acc = np.zeros((n, oh, ow, c), np.int64)
        for t, view in enumerate(taps):
            acc += view * wz[:, t // k[1], t % k[1], 0]
        return acc
    out = np.empty((n, oh, ow, m), np.float64)
    for g in range(group):
        # NOTE: sizes, not -1: an empty batch (N = 0, e.g. Mask R-CNN with no boxes) has no -1 to solve
        cols = np.stack([v[..., g * cg:(g + 1) * cg] for v in taps], axis=3).reshape(n * oh * ow, len(taps) * cg)
        wg = wz[g * mg:(g + 1) * mg].reshape(mg, -1).astype(np.float64)
        out[..., g * mg:(g + 1) * mg] = (cols.astype(np.float64) @ wg.T).reshape(n, oh, ow, mg)
    return np.rint(out).astype(np.int64)


def _conv_scale(ctx, x: Int8Tensor, w: Int8Tensor, y_scale: float) -> np.float32:
    scale = np.float32(np.float32(x.scale) * np.float32(w.scale)) / np.float32(y_scale)
    if not 0 < scale < 1:
        raise ExecutionError(f"{_where(ctx)}: x_scale * w_scale / Y_scale = {float(scale):.6g} must be in (0, 1) "
                             "(QNNPACK's requantization range)")
    return np.float32(scale)


@geometry_args
def _int8_conv(xp, x, w, b, *, ctx, relu: bool, group: int = 1, Y_scale: float = 1.0, Y_zero_point: int = 0, **g):
    x, w, b = _int8(ctx, x, 0), _int8(ctx, w, 1), _int8(ctx, b, 2)
    require_image(x.data)
    if g["order"] != "NHWC":
        raise ExecutionError(f"{_where(ctx)}: Int8Conv only supports NHWC order")
    if x.data.ndim != 4 or w.data.ndim != 4 or x.data.shape[3] != w.data.shape[3] * group:
        raise ExecutionError(f"{_where(ctx)}: input {x.shape} and filter {w.shape} do not fit group {group} (NHWC)")
    k, s, pb, pe, d = geometry(2, g, w.data.shape[1:3], x.data.shape[1:3])
    acc = _conv_acc(x.data, w.data, x.zero_point, w.zero_point, group, k, s, pb, pe, d)
    acc += b.data.reshape(-1).astype(np.int64)
    scale = _conv_scale(ctx, x, w, Y_scale)
    lo, hi = _limits(relu, Y_scale, Y_zero_point)
    return Int8Tensor(requantize(acc, scale, Y_zero_point, lo, hi), float(np.float32(Y_scale)), int(Y_zero_point))


kernel("Int8Conv", needs_context=True)(
    geometry_args(lambda xp, x, w, b, *, ctx, group=1, Y_scale=1.0, Y_zero_point=0, **g:
                  _int8_conv(xp, x, w, b, ctx=ctx, relu=False, group=group, Y_scale=Y_scale,
                             Y_zero_point=Y_zero_point, **g)))
kernel("Int8ConvRelu", needs_context=True)(
    geometry_args(lambda xp, x, w, b, *, ctx, group=1, Y_scale=1.0, Y_zero_point=0, **g:
                  _int8_conv(xp, x, w, b, ctx=ctx, relu=True, group=group, Y_scale=Y_scale,
                             Y_zero_point=Y_zero_point, **g)))


def _fc(ctx, x, w, b, y_scale: float, y_zp: int, relu: bool = False) -> Int8Tensor:
    x, w, b = _int8(ctx, x, 0), _int8(ctx, w, 1), _int8(ctx, b, 2)
    xs = flatten(np, x.data).astype(np.float64) - x.zero_point  # NOTE: flatten keeps an empty batch's (0, K)
    ws = flatten(np, w.data).astype(np.float64) - w.zero_point
    if xs.shape[1] != ws.shape[1]:
        raise ExecutionError(f"{_where(ctx)}: input {x.shape} has {xs.shape[1]} features, filter {w.shape} "
                             f"expects {ws.shape[1]}")
    acc = np.rint(xs @ ws.T).astype(np.int64) + b.data.reshape(-1).astype(np.int64)
    lo, hi = _limits(relu, y_scale, y_zp)
    return Int8Tensor(requantize(acc, _conv_scale(ctx, x, w, y_scale), y_zp, lo, hi), float(np.float32(y_scale)),
                      int(y_zp))


@kernel("Int8FC", needs_context=True)
def int8_fc(xp, x, w, b, *, ctx, Y_scale: float = 1.0, Y_zero_point: int = 0):
    return _fc(ctx, x, w, b, Y_scale, Y_zero_point)


def _add_multipliers(a_scale: float, b_scale: float, y_scale: float) -> tuple[int, int, int]:
    """QNNPACK add: 22-bit multipliers of a/y and b/y (from the larger scale's exponent) and the shift."""
    a_out = np.float32(np.float32(a_scale) / np.float32(y_scale))
    b_out = np.float32(np.float32(b_scale) / np.float32(y_scale))
    exponent = (_bits(max(a_out, b_out)) >> 23) - 127
    shift = 21 - exponent
    if not 13 <= shift < 32:
        raise ExecutionError(f"input/output scale ratio {float(max(a_out, b_out)):.6g} is outside QNNPACK's "
                             "add range [2**-10, 2**8)")
    mult = np.array(2.0 ** shift, np.float32)
    return int(np.rint(a_out * mult)), int(np.rint(b_out * mult)), shift


def _add(ctx, a, b, y_scale: float, y_zp: int, relu: bool) -> Int8Tensor:
    a, b = _int8(ctx, a, 0), _int8(ctx, b, 1)
    if a.shape != b.shape:
        raise ExecutionError(f"{_where(ctx)}: inputs {a.shape} and {b.shape} must have the same shape")
    am, bm, shift = _add_multipliers(a.scale, b.scale, y_scale)
    acc = (a.data.astype(np.int64) - a.zero_point) * am + (b.data.astype(np.int64) - b.zero_point) * bm
    acc = ((acc + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)  # NOTE: the kernel's int32 wrap-around
    mask = (1 << shift) - 1
    rem = (acc & mask) - (acc < 0)
    n = (acc >> shift) + (rem > (mask >> 1))
    lo, hi = _limits(relu, y_scale, y_zp)
    return Int8Tensor(np.clip(n + y_zp, lo, hi).astype(np.uint8), float(np.float32(y_scale)), int(y_zp))


@kernel("Int8Add", "Int8Sum", needs_context=True)
def int8_add(xp, a, b, *, ctx, Y_scale: float = 1.0, Y_zero_point: int = 0):
    return _add(ctx, a, b, Y_scale, Y_zero_point, ctx.op.type.endswith("Relu"))


kernel("Int8AddRelu", "Int8SumRelu", needs_context=True)(int8_add)


def _pool_windows(ctx, x: Int8Tensor, g: dict, pad_value: float):
    if g["order"] != "NHWC":
        raise ExecutionError(f"{_where(ctx)}: Int8 pooling only supports NHWC order")
    data = x.data
    require_image(data)
    sp = data.shape[1:3]
    if g["global_pooling"]:
        k, s, pb, pe, d = list(sp), [1, 1], [0, 0], [0, 0], [1, 1]
    else:
        k, s, pb, pe, d = geometry(2, g, (), sp)
    nchw = np.ascontiguousarray(data.transpose(0, 3, 1, 2)).astype(np.int64)
    return windows(np, nchw, k, s, pb, pe, d, pad_value=pad_value), int(np.prod(k))


@geometry_args
def int8_average_pool(xp, x, *, ctx, Y_scale: float = 1.0, Y_zero_point: int = 0, **g):
    """Window sums of (x - x_zp) (padding counts as zero and in the divisor), requantized."""
    x = _int8(ctx, x)
    win, size = _pool_windows(ctx, x, g, pad_value=x.zero_point)
    acc = win.sum(axis=(4, 5)) - size * x.zero_point  # (N, C, OH, OW)
    scale = np.float32(np.float32(x.scale) / np.float32(np.float32(Y_scale) * np.float32(size)))
    lo, hi = _limits(ctx.op.type.endswith("Relu"), Y_scale, Y_zero_point)
    y = avgpool_requantize(acc, scale, Y_zero_point, lo, hi)
    return Int8Tensor(np.ascontiguousarray(y.transpose(0, 2, 3, 1)), float(np.float32(Y_scale)), int(Y_zero_point))


kernel("Int8AveragePool", "Int8AveragePoolRelu", needs_context=True)(int8_average_pool)


@geometry_args
def int8_max_pool(xp, x, *, ctx, Y_scale: float = 1.0, Y_zero_point: int = 0, **g):
    x = _int8(ctx, x)
    if int(Y_zero_point) != x.zero_point or np.float32(Y_scale) != np.float32(x.scale):
        raise ExecutionError(f"{_where(ctx)}: Y_scale/Y_zero_point ({Y_scale}, {Y_zero_point}) must equal the "
                             f"input's ({x.scale}, {x.zero_point})")
    win, _ = _pool_windows(ctx, x, g, pad_value=0)
    lo, hi = _limits(ctx.op.type.endswith("Relu"), Y_scale, Y_zero_point)
    y = np.clip(win.max(axis=(4, 5)), lo, hi).astype(np.uint8)
    return Int8Tensor(np.ascontiguousarray(y.transpose(0, 2, 3, 1)), x.scale, x.zero_point)


kernel("Int8MaxPool", "Int8MaxPoolRelu", needs_context=True)(int8_max_pool)


@kernel("Int8Softmax", needs_context=True)
def int8_softmax(xp, x, *, ctx, Y_scale: float = 1.0 / 256, Y_zero_point: int = 0):
    """QNNPACK SoftArgMax: a 256-entry exp table scaled to 32 bits, normalised per row with rounding."""
    x = _int8(ctx, x)
    if Y_zero_point != 0 or np.float32(Y_scale) != np.float32(1.0 / 256):
        raise ExecutionError(f"{_where(ctx)}: Int8Softmax needs Y_scale 1/256 and Y_zero_point 0")
    rows = flatten(np, x.data).astype(np.int64)  # NOTE: an empty batch gives an empty output (Caffe2 1.10.2 dies)
    channels = rows.shape[1]
    qscale = min(float(2**32 - 1) / channels, 8388607.0)
    table = np.rint(qscale * np.exp((np.arange(256) - 255) * float(np.float32(x.scale)))).astype(np.int64)
    t = table[rows + 255 - rows.max(axis=1, keepdims=True)]
    total = t.sum(axis=1, keepdims=True) & 0xFFFFFFFF
    q = (((t << 8) + (total >> 1)) & 0xFFFFFFFF) // total
    return Int8Tensor(np.minimum(q, 255).astype(np.uint8).reshape(x.data.shape), float(np.float32(1.0 / 256)), 0)


@kernel("Int8ResizeNearest", needs_context=True)
def int8_resize_nearest(xp, x, *, ctx, width_scale: float = 1.0, height_scale: float = 1.0,
                        Y_scale: float = 1.0, Y_zero_point: int = 0, order: str = "NHWC"):
    # NOTE: out = int(in * scale); source = min(int(dst / scale), in - 1); values are copied unchanged.
    x = _int8(ctx, x)
    n, h, w, c = x.data.shape
    oh, ow = int(h * np.float32(height_scale)), int(w * np.float32(width_scale))
    iy = np.minimum((np.arange(oh) / np.float32(height_scale)).astype(np.int64), h - 1)
    ix = np.minimum((np.arange(ow) / np.float32(width_scale)).astype(np.int64), w - 1)
    return Int8Tensor(np.ascontiguousarray(x.data[:, iy][:, :, ix]), float(np.float32(Y_scale)), int(Y_zero_point))


@kernel("Int8Relu", needs_context=True)
def int8_relu(xp, x, *, ctx, Y_scale: float = 1.0, Y_zero_point: int = 0):
    x = _int8(ctx, x)
    return Int8Tensor(np.maximum(x.data, np.uint8(x.zero_point)), x.scale, x.zero_point)


@kernel("Int8Flatten", needs_context=True)
def int8_flatten(xp, x, *, ctx, axis: int = 1, Y_scale: float = 1.0, Y_zero_point: int = 0):
    x = _int8(ctx, x)
    return Int8Tensor(flatten(np, x.data, axis=axis).copy(), x.scale, x.zero_point)


def _requant_table(ctx, x: Int8Tensor, y_scale: float, y_zp: int, fn) -> Int8Tensor:
    """A 256-entry table op (QNNPACK's LUT ops): real = x_scale * (i - x_zp), y = fn(real),
    q = round-half-even(y / y_scale) + y_zp, saturated; then each input byte looks its value up."""
    real = np.float32(x.scale) * (np.arange(256, dtype=np.float32) - np.float32(x.zero_point))
    table = np.clip(np.rint(fn(real).astype(np.float32) / np.float32(y_scale)) + y_zp, 0, 255).astype(np.uint8)
    return Int8Tensor(table[x.data], float(np.float32(y_scale)), int(y_zp))


@kernel("Int8Sigmoid", needs_context=True)
def int8_sigmoid(xp, x, *, ctx, Y_scale: float = 1.0 / 256, Y_zero_point: int = 0):
    return _requant_table(ctx, _int8(ctx, x), Y_scale, Y_zero_point,
                          lambda r: np.float32(1) / (np.float32(1) + np.exp(-r)))


@kernel("Int8LeakyRelu", needs_context=True)
def int8_leaky_relu(xp, x, *, ctx, alpha: float = 0.01, Y_scale: float = 1.0, Y_zero_point: int = 0):
    """QNNPACK's table: t = (x_scale / Y_scale) * (i - x_zp), times alpha below 0, rounded half even."""
    x = _int8(ctx, x)
    t = np.float32(np.float32(x.scale) / np.float32(Y_scale)) * (np.arange(256, dtype=np.float32)
                                                                 - np.float32(x.zero_point))
    t = np.clip(np.where(t < 0, t * np.float32(alpha), t), -Y_zero_point, 255 - Y_zero_point)
    table = (np.rint(t) + Y_zero_point).astype(np.uint8)
    return Int8Tensor(table[x.data], float(np.float32(Y_scale)), int(Y_zero_point))


def _same_q(ctx, x: Int8Tensor, data: np.ndarray) -> Int8Tensor:
    return Int8Tensor(np.ascontiguousarray(data), x.scale, x.zero_point)


@kernel("Int8Reshape", needs_context=True)
def int8_reshape(xp, x, new_shape=None, *, ctx, shape: list | None = None, Y_scale: float = 1.0,
                 Y_zero_point: int = 0):
    from engine.runtime.ops.tensor import reshape  # noqa: PLC0415
    x = _int8(ctx, x)
    y, old = reshape(np, x.data, new_shape, shape=shape)
    return _same_q(ctx, x, y), old


@kernel("Int8Transpose", needs_context=True)
def int8_transpose(xp, x, *, ctx, axes: list | None = None, Y_scale: float = 1.0, Y_zero_point: int = 0):
    x = _int8(ctx, x)
    return _same_q(ctx, x, x.data.transpose(axes or None))


@kernel("Int8Slice", needs_context=True)
def int8_slice(xp, x, starts_in=None, ends_in=None, *, ctx, starts: list = (), ends: list = (),
               Y_scale: float = 1.0, Y_zero_point: int = 0):
    from engine.runtime.ops.tensor import slice_  # noqa: PLC0415
    x = _int8(ctx, x)
    return _same_q(ctx, x, slice_(np, x.data, starts_in, ends_in, starts=starts, ends=ends))


@kernel("Int8ChannelShuffle", needs_context=True)
def int8_channel_shuffle(xp, x, *, ctx, group: int = 1, kernel: int = 0, order: str = "NHWC", Y_scale: float = 1.0,
                         Y_zero_point: int = 0):
    # NOTE: Caffe2's Int8ChannelShuffle is a conv-pool op: it refuses to run without a `kernel` argument.
    if kernel <= 0:
        raise ExecutionError(f"{_where(ctx)}: kernel_[dim] > 0 (Int8ChannelShuffle needs a kernel argument)")
    x = _int8(ctx, x)
    c = x.data.shape[-1]
    if c == 0:
        raise ExecutionError(f"{_where(ctx)}: input {x.shape} has no channels (QNNPACK refuses C = 0)")
    d = x.data.reshape(x.data.shape[:-1] + (group, c // group))
    return _same_q(ctx, x, np.swapaxes(d, -1, -2).reshape(x.data.shape))


@kernel("Int8Concat", needs_context=True)
def int8_concat(xp, *xs, ctx, axis: int = 3, add_axis: int = 0, order: str = "NHWC", Y_scale: float = 1.0,
                Y_zero_point: int = 0):
    """Concatenation of integers; every input must share the output's scale and zero point."""
    qs = [_int8(ctx, x, k) for k, x in enumerate(xs)]
    for q in qs:
        if q.zero_point != int(Y_zero_point) or np.float32(q.scale) != np.float32(Y_scale):
            raise ExecutionError(f"{_where(ctx)}: every input needs Y_scale/Y_zero_point ({Y_scale}, {Y_zero_point})")
    datas = [q.data for q in qs]
    if add_axis:
        return (Int8Tensor(np.stack(datas, axis=axis), qs[0].scale, qs[0].zero_point),
                np.ones(len(datas), np.int32))
    return (Int8Tensor(np.concatenate(datas, axis=axis), qs[0].scale, qs[0].zero_point),
            np.array([d.shape[axis] for d in datas], np.int32))


@geometry_args
def _int8_conv_transpose(xp, x, w, b, *, ctx, group: int = 1, adj: int = 0, Y_scale: float = 1.0,
                         Y_zero_point: int = 0, **g):
    """Transposed conv: each input pixel's (x - x_zp) * (w - w_zp) scattered over its output window
    (NHWC, filters (C_in, KH, KW, C_out/group)), plus bias, requantized like Int8Conv."""
    x, w, b = _int8(ctx, x, 0), _int8(ctx, w, 1), _int8(ctx, b, 2)
    n, h, wd, c = x.data.shape
    k, s, pb, pe, _ = geometry(2, g, w.data.shape[1:3])
    cg, mg = c // group, w.data.shape[3]
    oh = (h - 1) * s[0] - pb[0] - pe[0] + k[0] + adj
    ow = (wd - 1) * s[1] - pb[1] - pe[1] + k[1] + adj
    full = np.zeros((n, (h - 1) * s[0] + k[0] + adj, (wd - 1) * s[1] + k[1] + adj, group * mg), np.float64)
    xz = x.data.astype(np.float64) - x.zero_point
    wz = w.data.astype(np.float64) - w.zero_point
    for gi in range(group):
        xg = xz[..., gi * cg:(gi + 1) * cg]
        for i in range(k[0]):
            for j in range(k[1]):
                full[:, i:i + s[0] * h:s[0], j:j + s[1] * wd:s[1], gi * mg:(gi + 1) * mg] += \
                    xg @ wz[gi * cg:(gi + 1) * cg, i, j, :]
    acc = np.rint(full[:, pb[0]:pb[0] + oh, pb[1]:pb[1] + ow]).astype(np.int64) + b.data.reshape(-1).astype(np.int64)
    y = requantize(acc, _conv_scale(ctx, x, w, Y_scale), Y_zero_point)
    return Int8Tensor(y, float(np.float32(Y_scale)), int(Y_zero_point))


kernel("Int8ConvTranspose", needs_context=True)(_int8_conv_transpose)


def _gemmlowp_multiplier(m: float) -> tuple[int, int]:
    """gemmlowp's QuantizeMultiplierSmallerThanOne: (Q31 multiplier, right shift) of 0 <= m < 1."""
    if m == 0:
        return 0, 0
    q, e = np.frexp(m)
    fixed, shift = int(np.rint(q * 2.0**31)), -int(e)
    if fixed == 2**31:
        fixed, shift = fixed // 2, shift - 1
    return fixed, shift


def _gemmlowp_scale(x: np.ndarray, multiplier: int, shift: int) -> np.ndarray:
    """RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(x, multiplier), shift) on int64 arrays."""
    prod = np.asarray(x, np.int64) * multiplier
    nudged = prod + np.where(prod >= 0, 1 << 30, 1 - (1 << 30))
    high = np.where(nudged >= 0, nudged >> 31, -((-nudged) >> 31))  # NOTE: C++ division truncates toward 0
    mask = (1 << shift) - 1
    return (high >> shift) + ((high & mask) > (mask >> 1) + (high < 0))


@kernel("Int8RoIAlign", needs_context=True)
def int8_roi_align(xp, x, rois, *, ctx, order: str = "NHWC", spatial_scale: float = 1.0, pooled_h: int = 1,
                   pooled_w: int = 1, sampling_ratio: int = -1, aligned: bool = False, Y_scale: float = 1.0,
                   Y_zero_point: int = 0):
    """RoIAlign in integers: bilinear weights rounded to 0..255, int32 sums of weight * (x - x_zp),
    one gemmlowp requantization by x_scale / (Y_scale * 255 * samples)."""
    from engine.runtime.ops.detection import _roi_samples  # noqa: PLC0415
    x, rois = _int8(ctx, x), np.asarray(rois, np.float32)
    if order != "NHWC":
        raise ExecutionError(f"{_where(ctx)}: Int8RoIAlign only supports NHWC order")
    n, h, w, c = x.data.shape
    out = np.zeros((rois.shape[0] if rois.size else 0, pooled_h, pooled_w, c), np.uint8)
    flat = x.data.reshape(n, h * w, c).astype(np.int64)
    samples = _roi_samples(rois.reshape(-1, rois.shape[-1] if rois.ndim == 2 else 5), h, w, spatial_scale,
                           pooled_h, pooled_w, sampling_ratio, aligned)
    for r, (b, pos, wts, count) in enumerate(samples):
        iw = [np.rint(wi * np.float32(255.0)).astype(np.int64) for wi in wts]  # (ph, pw, gh, gw)
        acc = sum(wi[..., None] * flat[b][p] for p, wi in zip(pos, iw)).sum(axis=(2, 3))
        acc -= int(count) * x.zero_point * 255
        mult, shift = _gemmlowp_multiplier(float(np.float32(x.scale)) / (float(np.float32(Y_scale)) * 255.0
                                                                          * float(count)))
        out[r] = np.clip(_gemmlowp_scale(acc, mult, shift) + Y_zero_point, 0, 255)
    return Int8Tensor(out, float(np.float32(Y_scale)), int(Y_zero_point))


@kernel("Int8GenQuantParams", needs_context=True)
def int8_gen_quant_params(xp, x, *rest, ctx, preserve_sparsity: bool = False, precision: int = 8):
    """Min/max quantisation parameters of float X: (scale, zero point) that cover [min(X, 0), max(X, 0)]."""
    lo, hi = min(float(np.min(x)), 0.0), max(float(np.max(x)), 0.0)
    scale = (hi - lo) / 255.0 or 1.0
    return np.array([scale, float(np.clip(np.rint(-lo / scale), 0, 255))], np.float32)


# ---- gradients ----
# NOTE: Caffe2 registers no gradient maker for any Int8 op; reaching one raises NoGradientMakerError.


# ---- shapes ----

shape("Int8Quantize")(lambda x, *_: TensorInfo(x.shape, UINT8))
shape("Int8Dequantize")(lambda x: TensorInfo(x.shape, FLOAT))
shape("Int8Conv", "Int8ConvRelu")(conv_shape)  # NOTE: NHWC filters (M, KH, KW, C/group), as NHWC Conv
shape("Int8AveragePool", "Int8AveragePoolRelu", "Int8MaxPool", "Int8MaxPoolRelu")(pool_shape)
shape("Int8Add", "Int8Sum", "Int8AddRelu", "Int8SumRelu", "Int8Softmax", "Int8Relu")(same_as(0))
shape("Int8FC")(lambda x, w, b: TensorInfo((dims(x)[0], dims(w)[0]), UINT8))


@shape("Int8ResizeNearest")
def int8_resize_nearest_shape(x, *, width_scale: float = 1.0, height_scale: float = 1.0):
    n, h, w, c = dims(x)
    scaled = [None if v is None else int(v * np.float32(f)) for v, f in ((h, height_scale), (w, width_scale))]
    return TensorInfo((n, *scaled, c), x.dtype)


def _uint8(rule):
    """The float op's rule with uint8 outputs (an Int8 op keeps the float op's geometry)."""
    def int8_rule(*ins, **kw):
        out = rule(*ins, **kw)
        return tuple(TensorInfo(o.shape, UINT8) for o in out) if isinstance(out, tuple) else TensorInfo(out.shape, UINT8)
    int8_rule.__signature__ = inspect.signature(rule)
    return int8_rule


def _nhwc(rule):
    """`rule` with ``order`` defaulting to NHWC, as every Int8 op of Caffe2 does."""
    sig = inspect.signature(rule)
    rule.__signature__ = sig.replace(parameters=[p.replace(default="NHWC") if p.name == "order" else p
                                                 for p in sig.parameters.values()])
    return rule


shape("Int8Sigmoid", "Int8LeakyRelu", "Int8ChannelShuffle")(same_as(0))
shape("Int8Flatten")(_uint8(flatten_shape))
shape("Int8Reshape")(lambda x, new_shape=None, *, shape=None: (TensorInfo(reshape_shape(x, new_shape, shape=shape)[0].shape, UINT8),
                                                          reshape_shape(x, new_shape, shape=shape)[1]))
shape("Int8Transpose")(_uint8(transpose_shape))
shape("Int8Slice")(_uint8(slice_shape))
shape("Int8Concat")(_nhwc(_uint8(concat_shape)))
shape("Int8RoIAlign")(_nhwc(_uint8(roi_align_shape)))
shape("Int8ConvTranspose")(_nhwc(_uint8(conv_transpose_shape)))
shape("Int8GivenTensorFill")(lambda *, shape=(): TensorInfo(tuple(shape), UINT8))
shape("Int8GivenIntTensorFill")(lambda *, shape=(): TensorInfo(tuple(shape), INT32))
shape("Int8GenQuantParams")(opaque)  # NOTE: Caffe2's output is a quantisation-parameters object, not a tensor

# NOTE: no kernels (FBGEMM/DNNLOWP packing): Caffe2's inference gives the packed blob the logical shape
# of the weights (transposed for FbGemmPackTranspose), and FbFCPacked FC's (N, M).
shape("FbGemmPack", "Int8FCPackWeight")(lambda w, *_, n_out: (TensorInfo(w.shape),) + (UNKNOWN,) * (n_out - 1))
shape("FbGemmPackTranspose")(lambda w: TensorInfo((dims(w)[1], dims(w)[0], *dims(w)[2:])))
shape("FbFCPacked")(lambda x, w, b=None, *, axis=1, axis_w=1: TensorInfo(
    (*dims(x)[:axis], dims(w)[0] if w.rank else None), x.dtype))


# ---- onnx ----
from engine.runtime.ops.conv import onnx_geometry  # noqa: E402
from engine.catalogue.registry import onnx_converter  # noqa: E402

# NOTE: Int8 blobs export as their uint8 values (NHWC, as Caffe2 keeps them), their scale and zero point
# known at export time.  Arithmetic is integer, bit for bit QNNPACK's: ConvInteger / MatMulInteger give
# the exact int32 sums, then requantize_onnx spells out its Q31 fixed-point rounding in int64 ops (ONNX's
# QLinearConv rounds a float product half to even, which differs in the last bit now and then).


def _i64(c, v):
    return c.const(np.array(v, np.int64), "q")


def _floor_div(c, a, d: int):
    """floor(a / d) for int64 `a` and a positive power of two `d` (ONNX Div truncates toward zero)."""
    return c.emit("Div", [c.emit("Sub", [a, c.emit("Mod", [a, _i64(c, d)], fmod=0)]), _i64(c, d)])


def requantize_onnx(c, acc, scale: np.float32, zero_point: int, lo: int, hi: int, k: int = 0) -> None:
    """Output `k` = :func:`requantize` of int64 `acc`: Q31 multiply rounding half up, then a rounding
    shift, the zero point added and clamped to [lo, hi], as uint8."""
    bits = _bits(scale)
    multiplier = ((bits & 0x007FFFFF) | 0x00800000) << 7
    shift = 127 + 31 - 32 - (bits >> 23)
    if not 0 <= shift < 32:
        raise c.refuse(f"requantization scale {float(scale)!r} is outside QNNPACK's range (0, 1)")
    q31 = _floor_div(c, c.emit("Add", [c.emit("Mul", [acc, _i64(c, multiplier)]), _i64(c, 1 << 30)]), 1 << 31)
    _shift_to_uint8(c, q31, shift, zero_point, lo, hi, k)


def _shift_to_uint8(c, v, shift: int, zero_point: int, lo: int, hi: int, k: int) -> None:
    """Output `k`: int64 `v` shifted right by `shift` rounding half up (QNNPACK's rounding shift),
    plus the zero point, clamped to [lo, hi], as uint8."""
    mask = (1 << shift) - 1
    rem = c.emit("Sub", [c.emit("Mod", [v, _i64(c, 1 << shift)], fmod=0),
                         c.emit("Cast", [c.emit("Less", [v, _i64(c, 0)])], to=7)])
    n = c.emit("Add", [_floor_div(c, v, 1 << shift), c.emit("Cast", [c.emit("Greater", [rem, _i64(c, mask >> 1)])], to=7)])
    y = c.emit("Clip", [c.emit("Add", [n, _i64(c, zero_point)]), _i64(c, lo), _i64(c, hi)])
    c.emit("Cast", [y], [c.y(k)], to=2)


@onnx_converter("Int8Add", "Int8Sum", "Int8AddRelu", "Int8SumRelu")
def int8_add_onnx(c):
    """QNNPACK's add: each input's (q - zero point) times its 22-bit multiplier, summed with int32
    wrap-around, then a rounding shift to the output's zero point."""
    if c.n_in != 2:
        raise c.refuse(f"{c.n_in} inputs (QNNPACK adds two)")
    (a_s, a_z), (b_s, b_z) = c.qparams(0), c.qparams(1)
    ys, yz = _int8_out(c)
    try:
        am, bm, shift = _add_multipliers(a_s, b_s, ys)
    except ExecutionError as e:
        raise c.refuse(str(e)) from None
    term = lambda i, zp, m: c.emit("Mul", [c.emit("Sub", [c.emit("Cast", [c.x(i)], to=7), _i64(c, zp)]), _i64(c, m)])  # noqa: E731
    acc = c.emit("Add", [term(0, a_z, am), term(1, b_z, bm)])
    acc = c.emit("Sub", [c.emit("Mod", [c.emit("Add", [acc, _i64(c, 1 << 31)]), _i64(c, 1 << 32)], fmod=0), _i64(c, 1 << 31)])
    lo, hi = _limits(c.op.type.endswith("Relu"), ys, yz)
    _shift_to_uint8(c, acc, shift, yz, lo, hi, 0)
    c.set_qparams(0, ys, yz)


@onnx_converter("Int8Quantize")
def int8_quantize_onnx(c):
    """QuantizeLinear: round half to even of x / scale plus the zero point, saturated to uint8 (Caffe2's)."""
    scale, zp = float(np.float32(c.arg("Y_scale", 1.0))), int(c.arg("Y_zero_point", 0))
    c.emit("QuantizeLinear", [c.x(0), c.const(np.float32(scale), "scale"), c.const(np.uint8(zp), "zero_point")],
           [c.y(0)])
    c.set_qparams(0, scale, zp)


@onnx_converter("Int8Dequantize")
def int8_dequantize_onnx(c):
    """DequantizeLinear: (q - zero point) * scale in float32."""
    scale, zp = c.qparams(0)
    c.emit("DequantizeLinear", [c.x(0), c.const(np.float32(scale), "scale"), c.const(np.uint8(zp), "zero_point")],
           [c.y(0)])


def _int8_out(c):
    return float(np.float32(c.arg("Y_scale", 1.0))), int(c.arg("Y_zero_point", 0))


@onnx_converter("Int8Conv", "Int8ConvRelu")
def int8_conv_onnx(c):
    """ConvInteger on the NHWC values transposed to NCHW (padding is the input zero point: adds
    nothing), plus the int32 bias, requantized as QNNPACK does; back to NHWC."""
    if c.arg("order", "NCHW") != "NHWC":
        raise c.refuse("Int8Conv only supports NHWC order")
    (xs, xz), (ws, wz), (_, _) = c.qparams(0), c.qparams(1), c.qparams(2)
    ys, yz = _int8_out(c)
    w = c.const_value(1)
    if w is None:
        raise c.refuse("computed weights")
    k, s, pb, pe, d = onnx_geometry(c, 2, c.shape(0)[1:3], w.shape[1:3])
    x = c.emit("Transpose", [c.x(0)], perm=[0, 3, 1, 2])
    acc = c.emit("ConvInteger", [x, c.const(np.ascontiguousarray(w.transpose(0, 3, 1, 2)), "w_nchw"),
                                 c.const(np.uint8(xz), "x_zp"), c.const(np.uint8(wz), "w_zp")],
                 kernel_shape=k, strides=s, pads=pb + pe, dilations=d, group=c.arg("group", 1))
    acc = c.emit("Cast", [c.emit("Transpose", [acc], perm=[0, 2, 3, 1])], to=7)
    acc = c.emit("Add", [acc, c.emit("Cast", [c.emit("Reshape", [c.x(2), c.ints([-1])])], to=7)])
    lo, hi = _limits(c.op.type.endswith("Relu"), ys, yz)
    requantize_onnx(c, acc, np.float32(np.float32(np.float32(xs) * np.float32(ws)) / np.float32(ys)), yz, lo, hi)
    c.set_qparams(0, ys, yz)


@onnx_converter("Int8FC")
def int8_fc_onnx(c):
    """MatMulInteger of the rows of X and of W (transposed), plus the int32 bias, requantized."""
    (xs, xz), (ws, wz), _ = c.qparams(0), c.qparams(1), c.qparams(2)
    ys, yz = _int8_out(c)
    w = c.const_value(1)
    if w is None:
        raise c.refuse("computed weights")
    x2 = c.emit("Flatten", [c.x(0)], axis=1)
    acc = c.emit("MatMulInteger", [x2, c.const(np.ascontiguousarray(w.reshape(w.shape[0], -1).T), "w_t"),
                                   c.const(np.uint8(xz), "x_zp"), c.const(np.uint8(wz), "w_zp")])
    acc = c.emit("Add", [c.emit("Cast", [acc], to=7), c.emit("Cast", [c.emit("Reshape", [c.x(2), c.ints([-1])])], to=7)])
    requantize_onnx(c, acc, np.float32(np.float32(np.float32(xs) * np.float32(ws)) / np.float32(ys)), yz, 0, 255)
    c.set_qparams(0, ys, yz)


@onnx_converter("Int8MaxPool", "Int8MaxPoolRelu")
def int8_max_pool_onnx(c):
    """MaxPool on the uint8 values (NHWC transposed); the Relu form clamps at the zero point."""
    xs, xz = c.qparams(0)
    k, s, pb, pe, _ = onnx_geometry(c, 2, c.shape(0)[1:3])
    if c.arg("global_pooling", 0):
        k, s, pb, pe = list(c.shape(0)[1:3]), [1, 1], [0, 0], [0, 0]
    x = c.emit("Transpose", [c.x(0)], perm=[0, 3, 1, 2])
    y = c.emit("Transpose", [c.emit("MaxPool", [x], kernel_shape=k, strides=s, pads=pb + pe)], perm=[0, 2, 3, 1])
    lo, _ = _limits(c.op.type.endswith("Relu"), xs, xz)
    c.emit("Max", [y, c.const(np.uint8(lo), "lo")], [c.y(0)])
    c.set_qparams(0, xs, xz)


@onnx_converter("Int8Relu")
def int8_relu_onnx(c):
    xs, xz = c.qparams(0)
    c.emit("Max", [c.x(0), c.const(np.uint8(xz), "zp")], [c.y(0)])
    c.set_qparams(0, xs, xz)


@onnx_converter("Int8ResizeNearest")
def int8_resize_nearest_onnx(c):
    """The uint8 values resized as ResizeNearest does (floor(i / scale), out = int(in * scale)), unchanged."""
    hs, ws = float(c.arg("height_scale", 1.0)), float(c.arg("width_scale", 1.0))
    x = c.emit("Transpose", [c.x(0)], perm=[0, 3, 1, 2])
    y = c.emit("Resize", [x, "", c.const(np.array([1.0, 1.0, hs, ws], np.float32), "scales")], mode="nearest",
               coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    c.emit("Transpose", [y], [c.y(0)], perm=[0, 2, 3, 1])
    c.set_qparams(0, *_int8_out(c))


@onnx_converter("Int8AveragePool", "Int8AveragePoolRelu")
def int8_average_pool_onnx(c):
    """Window sums of (x - zero point) as a depthwise ConvInteger with ones (the zero-point padding adds
    nothing, and counts in the divisor), then QNNPACK's 24-bit average-pool requantization, rounding
    half away from zero."""
    if c.arg("order", "NCHW") != "NHWC":
        raise c.refuse("Int8 pooling only supports NHWC order")
    xs, xz = c.qparams(0)
    ys, yz = _int8_out(c)
    n, h, w, ch = c.shape(0)
    if c.arg("global_pooling", 0):
        k, s, pb, pe = [h, w], [1, 1], [0, 0], [0, 0]
    else:
        k, s, pb, pe, _ = onnx_geometry(c, 2, (h, w))
    size = int(np.prod(k))
    x = c.emit("Transpose", [c.x(0)], perm=[0, 3, 1, 2])
    acc = c.emit("ConvInteger", [x, c.const(np.ones((ch, 1, *k), np.uint8), "ones"), c.const(np.uint8(xz), "x_zp")],
                 kernel_shape=k, strides=s, pads=pb + pe, group=ch)
    acc = c.emit("Cast", [c.emit("Transpose", [acc], perm=[0, 2, 3, 1])], to=7)
    bits = _bits(np.float32(np.float32(xs) / np.float32(np.float32(ys) * np.float32(size))))
    multiplier, shift = (bits & 0x007FFFFF) | 0x00800000, 127 + 23 - (bits >> 23)
    if not 0 < shift < 62:
        raise c.refuse("the scale ratio is outside QNNPACK's average-pool range")
    mag = c.emit("Div", [c.emit("Add", [c.emit("Mul", [c.emit("Abs", [acc]), _i64(c, multiplier)]),
                                        _i64(c, 1 << (shift - 1))]), _i64(c, 1 << shift)])
    signed = c.emit("Where", [c.emit("Less", [acc, _i64(c, 0)]), c.emit("Neg", [mag]), mag])
    lo, hi = _limits(c.op.type.endswith("Relu"), ys, yz)
    y = c.emit("Clip", [c.emit("Add", [signed, _i64(c, yz)]), _i64(c, lo), _i64(c, hi)])
    c.emit("Cast", [y], [c.y(0)], to=2)
    c.set_qparams(0, ys, yz)


@onnx_converter("Int8Softmax")
def int8_softmax_onnx(c):
    """QNNPACK's SoftArgMax: the same 256-entry exp table (fixed at export from X's scale), gathered at
    q + 255 - row max, normalised per row in 32-bit integer arithmetic with rounding."""
    xs, _ = c.qparams(0)
    if int(c.arg("Y_zero_point", 0)) != 0 or np.float32(c.arg("Y_scale", 1.0 / 256)) != np.float32(1.0 / 256):
        raise c.refuse("Y_scale must be 1/256 and Y_zero_point 0")
    channels = int(np.prod(c.shape(0)[1:]))
    qscale = min(float(2**32 - 1) / channels, 8388607.0)
    table = np.rint(qscale * np.exp((np.arange(256) - 255) * float(np.float32(xs)))).astype(np.int64)
    rows = c.emit("Reshape", [c.emit("Cast", [c.x(0)], to=7), c.ints([c.shape(0)[0], -1])])
    top = c.reduce("ReduceMax", rows, [1], 1)
    t = c.emit("Gather", [c.const(table, "exp_table"), c.emit("Sub", [c.emit("Add", [rows, _i64(c, 255)]), top])])
    total = c.emit("Mod", [c.reduce("ReduceSum", t, [1], 1), _i64(c, 1 << 32)], fmod=0)
    num = c.emit("Mod", [c.emit("Add", [c.emit("Mul", [t, _i64(c, 256)]), c.emit("Div", [total, _i64(c, 2)])]),
                         _i64(c, 1 << 32)], fmod=0)
    q = c.emit("Min", [c.emit("Div", [num, total]), _i64(c, 255)])
    c.emit("Reshape", [c.emit("Cast", [q], to=2), c.ints(list(c.shape(0)))], [c.y(0)])
    c.set_qparams(0, 1.0 / 256, 0)


from engine.runtime.ops.tensor import concat_onnx, flatten_onnx, reshape_onnx, slice_onnx, transpose_onnx  # noqa: E402

#: Int8 ops that only move uint8 values -> the float op's converter (Int8Concat's default layout is NHWC)
_INT8_MOVES = {"Int8Reshape": reshape_onnx, "Int8Flatten": flatten_onnx, "Int8Transpose": transpose_onnx,
               "Int8Slice": slice_onnx, "Int8Concat": lambda c: concat_onnx(c, order="NHWC")}


@onnx_converter(*_INT8_MOVES)
def int8_move_onnx(c):
    """The float op's ONNX form on the uint8 values, exact; the output keeps the input's scale and zero
    point (Int8Concat's inputs all share them)."""
    _INT8_MOVES[c.op.type](c)
    c.set_qparams(0, *c.qparams(0))
