"""Pooling: MaxPool, AveragePool (and 1D/2D/3D), LpPool."""
from __future__ import annotations

import itertools
import os

import numpy as np

from engine.runtime import jit, parallel
from engine.runtime.ops.conv import from_nchw, geometry, geometry_args, require_image, to_nchw, windows
from engine.runtime.grad_makers import simple
from engine.catalogue.registry import gradient, kernel
from engine.catalogue.registry import shape
from engine.errors import ExecutionError, ShapeError
from engine.runtime.shapes import TensorInfo, dims, join_layout, same_as, spatial_out, split_layout

# ---- kernels ----

# NOTE: NETVIZ_PLAIN_CONV=1 (or FAST_POOL = False) also keeps AveragePool's reference reduction.
FAST_POOL = os.environ.get("NETVIZ_PLAIN_CONV", "") in ("", "0")

def _pool_geometry(x, g):
    require_image(x)
    nd = x.ndim - 2
    if g["global_pooling"]:
        # NOTE: the window is the whole image, so legacy_pad has nothing to recompute (its pads came
        # from a kernel list that global pooling leaves empty); Caffe2 refuses a given stride/pad.
        _, s, pb, pe, d = geometry(nd, g, tuple(x.shape[2:]))
        if any(v != 1 for v in s + d) or any(pb) or any(pe):
            raise ExecutionError(f"global pooling takes no stride, pad or dilation (strides {s}, "
                                 f"pads {pb + pe}, dilations {d}), as in Caffe2")
        return list(x.shape[2:]), [1] * nd, [0] * nd, [0] * nd, [1] * nd
    k, s, pb, pe, d = geometry(nd, g, (), x.shape[2:])
    if any(v != 1 for v in d):
        raise ExecutionError(f"pooling does not support dilation (dilations {d}), as in Caffe2")
    return k, s, pb, pe, d


def _counts(xp, x, k, s, pb, pe, d, include_pad):
    """Per-window element counts of AveragePool (pads excluded unless count_include_pad)."""
    if include_pad or not (any(pb) or any(pe)):
        return x.dtype.type(np.prod(k))
    ones = xp.ones((1, 1) + x.shape[2:], dtype=x.dtype)
    return windows(xp, ones, k, s, pb, pe, d).sum(axis=tuple(range(-len(k), 0)))


@kernel("MaxPool", "MaxPool1D", "MaxPool2D", "MaxPool3D")
@geometry_args
def max_pool(xp, x, **g):
    x = to_nchw(x, g["order"])
    k, s, pb, pe, d = _pool_geometry(x, g)
    kern = _jit_kernels(xp, x, k, s, pb, pe)
    if kern is not None:
        return from_nchw(_max_pool_jit(kern, x, k, s, pb, pe), g["order"])
    if _planes_fast(xp, x) and int(np.prod(k)) <= 64 and min(pb + pe) >= 0:
        return from_nchw(_max_pool_planes(x, k, s, pb, pe), g["order"])
    win = windows(xp, x, k, s, pb, pe, d, -np.inf)
    if int(np.prod(k)) > 64:  # global-style pools: one reduction
        return from_nchw(win.max(axis=tuple(range(-len(k), 0))), g["order"])
    return from_nchw(_fold_windows(xp, x, win, k, xp.maximum), g["order"])


def _fold_windows(xp, x, win, k, op):
    """`op` (maximum, add) folded over the prod(k) positions of the window view `win` of `x`.

    NOTE: one elementwise pass per kernel position over strided views, in row-major position order
    (a reduction over the window axes of the view walks memory in tiny runs and is several times
    slower); one block's passes stay in cache, blocks over both cores (engine.runtime.parallel)."""
    y = xp.empty(win.shape[:-len(k)], dtype=x.dtype)
    pos = list(itertools.product(*(range(v) for v in k)))

    def part(t):
        yb, wb = t(y), t(win)
        yb[...] = wb[(Ellipsis,) + pos[0]]
        for p in pos[1:]:
            op(yb, wb[(Ellipsis,) + p], out=yb)
    if xp is np:
        parallel.split(part, y.shape, x.nbytes)
    else:
        part(lambda a: a)
    return y


@kernel("AveragePool", "AveragePool1D", "AveragePool2D", "AveragePool3D")
@geometry_args
def average_pool(xp, x, *, count_include_pad: int = 0, **g):
    x = to_nchw(x, g["order"])
    k, s, pb, pe, d = _pool_geometry(x, g)
    win = windows(xp, x, k, s, pb, pe, d)
    counts = _counts(xp, x, k, s, pb, pe, d, count_include_pad)
    if FAST_POOL and x.dtype.kind == "f" and int(np.prod(k)) <= 64:
        total = _fold_windows(xp, x, win, k, xp.add)
        return from_nchw(xp.divide(total, counts, out=total), g["order"])
    total = win.sum(axis=tuple(range(-len(k), 0)))
    return from_nchw((total / counts).astype(x.dtype), g["order"])


@kernel("LpPool")
@geometry_args
def lp_pool(xp, x, *, p: float = 2.0, **g):
    # NOTE: (sum over the window of |x|^p)^(1/p); pads add nothing.
    xc = to_nchw(x, g["order"])
    k, s, pb, pe, d = _pool_geometry(xc, g)
    f = x.dtype.type
    total = windows(xp, xp.abs(xc) ** f(p), k, s, pb, pe, d).sum(axis=tuple(range(-len(k), 0)))
    return from_nchw((total ** f(1.0 / p)).astype(x.dtype), g["order"])


@kernel("LpPoolGradient")
@geometry_args
def lp_pool_gradient(xp, x, y, dy, *, p: float = 2.0, **g):
    # NOTE: dX = sum over windows of dY * x * |x|^(p-2) / y^(p-1).
    order, f = g["order"], x.dtype.type
    xc, yc, dyc = to_nchw(x, order), to_nchw(y, order), to_nchw(dy, order)
    scaled = dyc / yc ** f(p - 1)
    back = _pool_backward(xp, xc, g, dyc, lambda *_: scaled)
    return from_nchw((back * xc * xp.abs(xc) ** f(p - 2)).astype(x.dtype), order)


def _pool_backward(xp, x, g, dy, weight):
    """Scatter dY * weight(window slice, position) back over every kernel position."""
    k, s, pb, pe, d = _pool_geometry(x, g)
    padded = x.shape[:2] + tuple(x.shape[2 + i] + pb[i] + pe[i] for i in range(len(k)))
    dx = xp.zeros(padded, dtype=dy.dtype)
    out = dy.shape[2:]
    for pos in itertools.product(*(range(v) for v in k)):
        sl = (slice(None), slice(None)) + tuple(
            slice(p * d[i], p * d[i] + s[i] * (out[i] - 1) + 1, s[i]) for i, p in enumerate(pos))
        dx[sl] += weight(sl, k, s, pb, pe, d)
    return dx[(slice(None), slice(None)) + tuple(slice(pb[i], pb[i] + x.shape[2 + i]) for i in range(len(k)))]


@kernel("MaxPoolGradient", "MaxPool1DGradient", "MaxPool2DGradient", "MaxPool3DGradient")
@geometry_args
def max_pool_gradient(xp, x, y, dy, **g):
    # NOTE: like Caffe2's CPU kernel, every window element equal to the max gets the gradient.
    order = g["order"]
    x, y, dy = to_nchw(x, order), to_nchw(y, order), to_nchw(dy, order)
    k, s, pb, pe, _ = _pool_geometry(x, g)
    kern = _jit_kernels(xp, x, k, s, pb, pe, y, dy)
    if kern is not None:
        return from_nchw(_max_pool_gradient_jit(kern, x, y, dy, k, s, pb), order)
    if _planes_fast(xp, x, y, dy) and x.dtype == dy.dtype == y.dtype:
        return from_nchw(_max_pool_gradient_planes(x, y, dy, k, s, pb, pe), order)
    xpad = xp.pad(x, ((0, 0), (0, 0), *zip(pb, pe)), constant_values=-np.inf) if any(pb + pe) else x
    return from_nchw(_pool_backward(xp, x, g, dy, lambda sl, *_: dy * (xpad[sl] == y)), order)


PLANE_BLOCK = 1 << 19
"""Bytes of X per block of planes in MaxPool and its gradient: the block's padded X (and dX), Y and dY
stay in L2."""


def _planes_fast(xp, x, *more):
    """Whether MaxPool's plane-block path takes `x` (and `more`): big, C-contiguous float NumPy arrays."""
    return (xp is np and FAST_POOL and x.nbytes >= parallel.MIN_BYTES and x.dtype.kind == "f"
            and all(a.flags.c_contiguous for a in (x, *more)))


class _Planes:
    """The (N*C, *spatial) plane view of a pool's X, its padding and its kernel positions' strided slices
    (in row-major position order, as the plain paths walk them)."""

    def __init__(self, x, k, s, pb, pe):
        self.sp, nd = x.shape[2:], len(k)
        self.x3 = x.reshape((x.shape[0] * x.shape[1],) + self.sp)
        self.padded = tuple(self.sp[i] + pb[i] + pe[i] for i in range(nd))
        self.out = tuple((self.padded[i] - k[i]) // s[i] + 1 for i in range(nd))
        self.inner = (slice(None),) + tuple(slice(pb[i], pb[i] + self.sp[i]) for i in range(nd))
        self.taps = [(slice(None),) + tuple(slice(p, p + s[i] * (self.out[i] - 1) + 1, s[i]) for i, p in enumerate(pos))
                     for pos in itertools.product(*(range(v) for v in k))]

    def pad(self, xb, buf):
        """Block `xb` padded with -inf in `buf` (scratch), or `xb` itself where nothing pads."""
        if self.padded == self.sp:
            return xb
        buf.fill(-np.inf)
        buf[self.inner] = xb
        return buf

    def split(self, part):
        parallel.split(part, self.x3.shape, self.x3.nbytes, axis=0, block_bytes=PLANE_BLOCK)


def _max_pool_planes(x, k, s, pb, pe):
    """MaxPool on blocks of (N*C) image planes over both cores, each block padded in the thread's scratch
    (no padded copy of all of X), the max folded over the kernel positions in the plain path's order."""
    p = _Planes(x, k, s, pb, pe)
    y = np.empty(x.shape[:2] + p.out, x.dtype)
    y3 = y.reshape((p.x3.shape[0],) + p.out)

    def part(t):
        xb, yb = t(p.x3), t(y3)
        xpad = p.pad(xb, parallel.scratch((xb.shape[0],) + p.padded, x.dtype))
        yb[...] = xpad[p.taps[0]]
        for sl in p.taps[1:]:
            np.maximum(yb, xpad[sl], out=yb)
    p.split(part)
    return y


def _max_pool_gradient_planes(x, y, dy, k, s, pb, pe):
    """MaxPool's gradient on blocks of (N*C) image planes over both cores: each block pads its X and
    its dX in the thread's scratch (in cache) and adds dY * (window element == max) per kernel
    position, in the plain path's position order: the same sums in the same order, so the same values."""
    p = _Planes(x, k, s, pb, pe)
    y3, dy3 = (a.reshape((p.x3.shape[0],) + a.shape[2:]) for a in (y, dy))
    dx = np.empty(x.shape, dy.dtype)
    dx3 = dx.reshape(p.x3.shape)

    def part(t):
        xb, yb, dyb = t(p.x3), t(y3), t(dy3)
        buf = parallel.scratch((2, xb.shape[0]) + p.padded, x.dtype)
        xpad, dpad = p.pad(xb, buf[0]), buf[1]
        dpad.fill(0)
        for sl in p.taps:
            dpad[sl] += dyb * (xpad[sl] == yb)
        t(dx3)[...] = dpad[p.inner]
    p.split(part)
    return dx


JIT_MIN_ELEMENTS = 1 << 12
"""X's elements from which 2-D MaxPool and its gradient take the compiled kernels (below, the kernel call
costs more than NumPy's few passes, and a small pool never imports numba)."""


def _jit_kernels(xp, x, k, s, pb, pe, *more):
    """``pool_jit`` when its kernels take the 2-D NCHW float map `x` (C-contiguous or not: NHWC's view is
    copied) with pads >= 0 and `more` (Y, dY) of its dtype and of the pool's output shape; else None.
    NOTE: the compiled kernels never warn where NumPy warns (``inf * 0`` in the gradient's mask product)."""
    if (xp is not np or x.ndim != 4 or x.size < JIT_MIN_ELEMENTS or x.dtype not in (np.float32, np.float64)
            or min(pb + pe) < 0 or min(s) < 1 or jit.fp_raises()):
        return None
    out = _out(x, k, s, pb, pe)
    if min(out) < 1 or any(type(a) is not np.ndarray or a.dtype != x.dtype or a.shape != x.shape[:2] + out
                           for a in more):
        return None
    return jit.get("pool")


def _out(x, k, s, pb, pe):
    """A pool's output size over the spatial axes of NCHW `x`."""
    return tuple((x.shape[2 + i] + pb[i] + pe[i] - k[i]) // s[i] + 1 for i in range(len(k)))


def _plane_ranges(x, arrays, call):
    """`call(p0, p1)` over ranges of X's N*C planes on both cores (one range for a small map); `arrays` is how
    many bytes the kernel touches per byte of X (the ranges are sized on all of them)."""
    parallel.ranges(call, x.shape[0] * x.shape[1], int(x.nbytes * arrays), block_bytes=parallel.BLOCK_BYTES)


def _planes3(*maps):
    """C-contiguous (N*C, H, W) views of NCHW maps (NHWC's transposed views copied once)."""
    return [np.ascontiguousarray(a).reshape((-1,) + a.shape[2:]) for a in maps]


def _max_pool_jit(kern, x, k, s, pb, pe):
    """2-D MaxPool by ``pool_jit.max_pool`` over ranges of planes on both cores."""
    y = np.empty(x.shape[:2] + _out(x, k, s, pb, pe), x.dtype)
    (x3,), y3 = _planes3(x), y.reshape((-1,) + y.shape[2:])
    _plane_ranges(x, 1.25, lambda p0, p1: kern.max_pool(x3, y3, *k, *s, *pb, p0, p1))
    return y


def _max_pool_gradient_jit(kern, x, y, dy, k, s, pb):
    """MaxPool's 2-D gradient by ``pool_jit.max_pool_gradient`` over ranges of planes on both cores: the NumPy
    paths' values bit for bit (the same products summed in the same kernel-position order)."""
    dx = np.empty(x.shape, x.dtype)
    x3, y3, dy3 = _planes3(x, y, dy)
    dx3, one, zero = dx.reshape(x3.shape), x.dtype.type(1), x.dtype.type(0)
    _plane_ranges(x, 2.5, lambda p0, p1: kern.max_pool_gradient(x3, y3, dy3, dx3, *k, *s, *pb, one, zero, p0, p1))
    return dx


@kernel("AveragePoolGradient", "AveragePool1DGradient", "AveragePool2DGradient", "AveragePool3DGradient")
@geometry_args
def average_pool_gradient(xp, x, y, dy, *, count_include_pad: int = 0, **g):
    order = g["order"]
    x, dy = to_nchw(x, order), to_nchw(dy, order)
    k, s, pb, pe, d = _pool_geometry(x, g)
    scaled = dy / _counts(xp, x, k, s, pb, pe, d, count_include_pad)
    return from_nchw(_pool_backward(xp, x, g, dy, lambda *_: scaled).astype(dy.dtype), order)


jit.serves("pool", max_pool, max_pool_gradient)  # whole runs load pool_jit first (jit.load_for)

# ---- gradients ----
gradient("MaxPool", "MaxPool1D", "MaxPool2D", "MaxPool3D", "AveragePool", "AveragePool1D",
         "AveragePool2D", "AveragePool3D", "LpPool")(simple("{T}Gradient", "I0 O0 GO0", "GI0"))


# ---- shapes ----

@shape("MaxPool", "MaxPool1D", "MaxPool2D", "MaxPool3D", "AveragePool", "AveragePool1D", "AveragePool2D",
       "AveragePool3D", "LpPool")
@geometry_args
def pool_shape(x, **g):
    n, c, sp = split_layout(dims(x), g["order"])
    if g["global_pooling"]:
        return TensorInfo(join_layout(n, c, (1,) * len(sp), g["order"]), x.dtype)
    k, s, pb, pe, d = geometry(len(sp), g, (), sp)
    if not all(k):
        raise ShapeError("pooling needs a kernel size or global_pooling")
    return TensorInfo(join_layout(n, c, spatial_out(sp, k, s, pb, pe, d), g["order"]), x.dtype)


shape("MaxPoolGradient", "MaxPool1DGradient", "MaxPool2DGradient", "MaxPool3DGradient", "AveragePoolGradient",
      "AveragePool1DGradient", "AveragePool2DGradient", "AveragePool3DGradient",
      "LpPoolGradient")(same_as(0))  # [X, Y, dY] -> dX


# ---- onnx ----
from engine.runtime.ops.conv import onnx_geometry  # noqa: E402
from engine.catalogue.registry import onnx_converter  # noqa: E402


@onnx_converter("MaxPool", "MaxPool1D", "MaxPool2D", "MaxPool3D", "AveragePool", "AveragePool1D",
                "AveragePool2D", "AveragePool3D")
def pool_onnx(c):
    """ONNX Max/AveragePool with explicit pads (floor sizes, as Caffe2); AveragePool keeps Caffe2's
    count_include_pad; global_pooling becomes GlobalMax/GlobalAveragePool."""
    kind = "MaxPool" if c.op.type.startswith("MaxPool") else "AveragePool"
    r = c.rank(0)
    x, y = c.x_nchw(0), c.y_nchw(0)
    if c.arg("global_pooling", 0):
        c.emit(f"Global{kind}", [x], [y])
        return c.done_nchw(0, y, r)
    spatial = c.shape(0)[2:] if c.nchw else c.shape(0)[1:-1]
    k, s, pb, pe, d = onnx_geometry(c, r - 2, spatial)
    if any(v != 1 for v in d):
        raise c.refuse(f"dilations {d} (Caffe2 pools refuse them too)")
    extra = {"count_include_pad": int(c.arg("count_include_pad", 0))} if kind == "AveragePool" else {}
    if any(p >= kk for p, kk in zip(pb + pe, k + k)) and c.arg("legacy_pad", 0) == 3:
        # NOTE: old Caffe's ceil sizes grow the tail pad past the kernel, which ONNX Runtime refuses;
        # ceil_mode with the given pads has the same sizes (a window starting in the pad is dropped)
        _, _, pb, pe, _ = onnx_geometry(c, r - 2, None)
        extra["ceil_mode"] = 1
    if any(p >= kk for p, kk in zip(pb + pe, k + k)):  # NOTE: ONNX Runtime wants every pad below the kernel
        raise c.refuse(f"pads {pb + pe} not below kernel {k} (ONNX Runtime refuses such a pool)")
    c.emit(kind, [x], [y], kernel_shape=k, strides=s, pads=pb + pe, **extra)
    c.done_nchw(0, y, r)


@onnx_converter("LpPool")
def lp_pool_onnx(c):
    """ONNX LpPool ((sum of |x|^p over the window)^(1/p)); ONNX's p is an integer, so other p refused."""
    p = float(c.arg("p", 2.0))
    if p != int(p):
        raise c.refuse(f"p {p:g} is not an integer (ONNX LpPool's p is)")
    r = c.rank(0)
    x, y = c.x_nchw(0), c.y_nchw(0)
    if c.arg("global_pooling", 0):
        c.emit("GlobalLpPool", [x], [y], p=int(p))
        return c.done_nchw(0, y, r)
    spatial = c.shape(0)[2:] if c.nchw else c.shape(0)[1:-1]
    k, s, pb, pe, _ = onnx_geometry(c, r - 2, spatial)
    c.emit("LpPool", [x], [y], kernel_shape=k, strides=s, pads=pb + pe, p=int(p))
    c.done_nchw(0, y, r)
