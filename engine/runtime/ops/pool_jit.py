"""Compiled kernels (numba) of 2-D MaxPool and MaxPoolGradient over NCHW float maps.

Imported only through :func:`engine.runtime.jit.load` (``jit.load("pool")``); ``pool.py`` holds the ops and
their NumPy paths, which these kernels must equal bit for bit (tests/engine/test_pool_jit.py).  The maps come
as (P, H, W) planes (P = N * C) and each kernel does the planes ``p0..p1`` (:func:`parallel.ranges` hands the
ranges to both cores): one plane's rows stay in the core's cache while every kernel position visits them,
where NumPy makes three passes (compare, multiply, add) per kernel position over the whole map.

Why the values are NumPy's: the plain path adds, for each kernel position in row-major order, the window's
``dY * float(X == Y)`` into dX.  Here each dX row is zeroed and, kernel position by kernel position in that
same order, gets the same float products added (each position adds at most one term to a dX element), so
every element is the same sum in the same order; compiled without fast-math, a NaN or inf in dY turns
``dY * 0`` into NaN as there, and a NaN in X or Y never compares equal.  Pad positions are skipped: the plain
path pads X with -inf and then crops those dX elements away, so they cannot change what is kept.
"""
from __future__ import annotations

import numba as nb
import numpy as np

_EXACT = {"nogil": True, "cache": True, "error_model": "numpy"}
"""No fast-math: NaN, inf and the float roundings stay IEEE's (strides are >= 1: no division by zero to check)."""
U = np.uint64
"""Indices are cast to unsigned: numba then drops its negative-index wraparound test, which kept the inner loops
from vectorising (the gradient on ResNet-50's stem map, one thread: 26 ms strided, 14 unsigned, 8.5 split into
column phases)."""


@nb.njit(**_EXACT)
def _span(n_out, stride, offset, size):
    """The outputs ``o`` in ``0..n_out`` whose input index ``o * stride + offset`` lies in ``0..size``."""
    lo = 0 if offset >= 0 else (-offset + stride - 1) // stride
    hi = min(n_out, (size - offset + stride - 1) // stride) if size > offset else 0
    return lo, max(lo, hi)


@nb.njit(**_EXACT)
def _columns(kw, sw, pl, ow_n, w, ncol):
    """Per kernel column pw: the window columns ``lo..hi`` that read inside X (column ow * sw + pw - pl), and
    where in a phase-split row (:func:`_split`) window column ow's element lies: at ``base + ow``."""
    lo, hi, base = np.empty(kw, np.int64), np.empty(kw, np.int64), np.empty(kw, np.int64)
    for pw in range(kw):
        d = pw - pl
        lo[pw], hi[pw] = _span(ow_n, sw, d, w)
        r = d % sw
        base[pw] = r * ncol + (d - r) // sw
    return lo, hi, base


@nb.njit(**_EXACT)
def _split(xr, sw, ncol, out, at):
    """Row `xr` split into its `sw` column phases at ``out[at:]``: column ``j * sw + r`` to ``r * ncol + j``,
    so a kernel column's strided walk over X becomes a unit-stride one (it vectorises; a strided one does
    not)."""
    w = xr.shape[0]
    for r in range(sw):
        b = at + r * ncol
        for j in range((w - r + sw - 1) // sw):
            out[U(b + j)] = xr[U(j * sw + r)]


@nb.njit(**_EXACT)
def max_pool_gradient(x, y, dy, dx, kh, kw, sh, sw, pt, pl, one, zero, p0, p1):
    """dX of 2-D MaxPool on planes p0..p1: X, dX (P, H, W); Y, dY (P, OH, OW); kernel (kh, kw), strides
    (sh, sw), top / left pads (pt, pl).  Every element of a window equal to its max gets the window's dY
    (Caffe2's rule, ties included), added in the NumPy path's kernel-position order; `one` and `zero` are
    of the maps' dtype (NumPy multiplies by the mask cast to it).

    Per dX row: the X row is split into its column phases, each kernel position's terms are added at unit
    stride into an accumulator row split the same way, which is merged back into the dX row at the end."""
    h, w = x.shape[1], x.shape[2]
    oh_n, ow_n = y.shape[1], y.shape[2]
    ncol = (w + sw - 1) // sw
    xq, acc = np.empty(sw * ncol, x.dtype), np.empty(sw * ncol, dx.dtype)
    lo, hi, base = _columns(kw, sw, pl, ow_n, w, ncol)
    for p in range(p0, p1):
        for i in range(h):
            _split(x[p, i], sw, ncol, xq, 0)
            for j in range(sw * ncol):
                acc[U(j)] = zero
            for ph in range(kh):
                t = i + pt - ph
                if t < 0:
                    break
                oh = t // sh
                if t - oh * sh != 0 or oh >= oh_n:
                    continue
                yr, dr = y[p, oh], dy[p, oh]
                for pw in range(kw):
                    b = base[pw]
                    for ow in range(lo[pw], hi[pw]):
                        o, j = U(ow), U(b + ow)
                        acc[j] += dr[o] * (one if xq[j] == yr[o] else zero)
            row = dx[p, i]
            for r in range(sw):
                for j in range((w - r + sw - 1) // sw):
                    row[U(j * sw + r)] = acc[U(r * ncol + j)]


@nb.njit(**_EXACT)
def max_pool(x, y, kh, kw, sh, sw, pt, pl, p0, p1):
    """2-D MaxPool on planes p0..p1: X (P, H, W) -> Y (P, OH, OW), kernel (kh, kw), strides (sh, sw), top /
    left pads (pt, pl) (pads are -inf: a window all pad gives -inf).  np.maximum's NaN rule: a NaN anywhere
    in the window gives NaN; of tied +0.0 and -0.0 the first in kernel-position order is kept (equal values:
    the gradient's X == Y does not tell them apart).  Each plane of X is first split into its column phases,
    row by row (as in :func:`max_pool_gradient`), so the max runs at unit stride."""
    h, w = x.shape[1], x.shape[2]
    oh_n, ow_n = y.shape[1], y.shape[2]
    ncol = (w + sw - 1) // sw
    xq = np.empty(h * sw * ncol, x.dtype)
    lo, hi, base = _columns(kw, sw, pl, ow_n, w, ncol)
    for p in range(p0, p1):
        for i in range(h):
            _split(x[p, i], sw, ncol, xq, i * sw * ncol)
        for oh in range(oh_n):
            yr = y[p, oh]
            for ow in range(ow_n):
                yr[U(ow)] = -np.inf
            for ph in range(kh):
                i = oh * sh + ph - pt
                if i < 0 or i >= h:
                    continue
                for pw in range(kw):
                    b = i * sw * ncol + base[pw]
                    for ow in range(lo[pw], hi[pw]):
                        v, m = xq[U(b + ow)], yr[U(ow)]
                        yr[U(ow)] = v if (v > m or v != v) else m


def warm() -> None:
    """Compile (or load from numba's disk cache) both kernels for float32 and float64 maps with the argument
    types the ops pass, on tiny maps: :func:`engine.runtime.jit.load` calls it once, so a numba that cannot
    compile here turns the kernels off instead of failing an op mid-run on a pool thread."""
    for dt in (np.float32, np.float64):
        x = np.zeros((1, 3, 3), dt)
        y = np.empty((1, 2, 2), dt)
        max_pool(x, y, 2, 2, 2, 2, 1, 1, 0, 1)
        max_pool_gradient(x, y, y.copy(), np.empty_like(x), 2, 2, 2, 2, 1, 1, dt(1), dt(0), 0, 1)
