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

_EXACT = {"nogil": True, "cache": True, "error_model": "numpy"}  # NOTE: no fast-math: NaN, inf and the float
U = np.uint64  # roundings stay IEEE's.  Indices as unsigned: numba then drops its negative-index wraparound
#                test, which kept the inner loops from vectorising (measured 26 -> 9 ms on ResNet's map)


@nb.njit(**_EXACT)
def _span(n_out, stride, offset, size):
    """The outputs ``o`` in ``0..n_out`` whose input index ``o * stride + offset`` lies in ``0..size``."""
    lo = 0 if offset >= 0 else (-offset + stride - 1) // stride
    hi = min(n_out, (size - offset + stride - 1) // stride) if size > offset else 0
    return lo, max(lo, hi)


@nb.njit(**_EXACT)
def _split(xr, sw, xq):
    """Row `xr` split into its `sw` column phases: ``xq[r, j] = xr[j * sw + r]``."""
    w = xr.shape[0]
    for r in range(sw):
        for j in range((w - r + sw - 1) // sw):
            xq[r, U(j)] = xr[U(j * sw + r)]


@nb.njit(**_EXACT)
def max_pool_gradient(x, y, dy, dx, kh, kw, sh, sw, pt, pl, one, zero, p0, p1):
    """dX of 2-D MaxPool on planes p0..p1: X, dX (P, H, W); Y, dY (P, OH, OW); kernel (kh, kw), strides
    (sh, sw), top / left pads (pt, pl).  Every element of a window equal to its max gets the window's dY
    (Caffe2's rule, ties included), added in the NumPy path's kernel-position order; `one` and `zero` are
    of the maps' dtype (NumPy multiplies by the mask cast to it).

    Per dX row: the X row is split into its `sw` column phases (columns c = j * sw + r in phase r), so that
    each kernel column's terms read X and add into the row's phase-r accumulator at unit stride (a strided
    add does not vectorise); the accumulators are merged back into the dX row at the end."""
    h, w = x.shape[1], x.shape[2]
    oh_n, ow_n = y.shape[1], y.shape[2]
    ncol = (w + sw - 1) // sw
    xq = np.empty((sw, ncol), x.dtype)
    acc = np.empty((sw, ncol), dx.dtype)
    for p in range(p0, p1):
        for i in range(h):
            _split(x[p, i], sw, xq)
            for r in range(sw):
                for j in range(ncol):
                    acc[r, U(j)] = zero
            for ph in range(kh):
                t = i + pt - ph
                if t < 0:
                    break
                oh = t // sh
                if t - oh * sh != 0 or oh >= oh_n:
                    continue
                yr, dr = y[p, oh], dy[p, oh]
                for pw in range(kw):
                    d = pw - pl  # window column ow reads X column ow * sw + d: phase r, index ow + off
                    lo, hi = _span(ow_n, sw, d, w)
                    r = d % sw
                    off = (d - r) // sw
                    aq, xs = acc[r], xq[r]
                    for ow in range(lo, hi):
                        o, j = U(ow), U(ow + off)
                        aq[j] += dr[o] * (one if xs[j] == yr[o] else zero)
            row = dx[p, i]
            for r in range(sw):
                for j in range((w - r + sw - 1) // sw):
                    row[U(j * sw + r)] = acc[r, U(j)]


@nb.njit(**_EXACT)
def max_pool(x, y, kh, kw, sh, sw, pt, pl, p0, p1):
    """2-D MaxPool on planes p0..p1: X (P, H, W) -> Y (P, OH, OW), kernel (kh, kw), strides (sh, sw), top /
    left pads (pt, pl) (pads are -inf: a window all pad gives -inf).  np.maximum's NaN rule: a NaN anywhere
    in the window gives NaN.  Each plane of X is first split into its column phases (as in
    :func:`max_pool_gradient`), so the max runs over unit-stride rows."""
    h, w = x.shape[1], x.shape[2]
    oh_n, ow_n = y.shape[1], y.shape[2]
    xq = np.empty((h, sw, (w + sw - 1) // sw), x.dtype)
    for p in range(p0, p1):
        for i in range(h):
            _split(x[p, i], sw, xq[i])
        for oh in range(oh_n):
            yr = y[p, oh]
            for ow in range(ow_n):
                yr[U(ow)] = -np.inf
            for ph in range(kh):
                i = oh * sh + ph - pt
                if i < 0 or i >= h:
                    continue
                for pw in range(kw):
                    d = pw - pl
                    lo, hi = _span(ow_n, sw, d, w)
                    r = d % sw
                    xs = xq[i, r]
                    off = (d - r) // sw
                    for ow in range(lo, hi):
                        v, m = xs[U(ow + off)], yr[U(ow)]
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
