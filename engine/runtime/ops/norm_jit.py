"""Compiled kernels (numba) of SpatialBN and its gradient over NCHW float32 maps, alone and fused with the
ops around them at a residual block's end (Sum, Relu, ReluGradient: ``executor.TRIPLES``).

Imported only through :func:`engine.runtime.jit.load` (``jit.load("norm")``); ``norm.py`` holds the ops and
their NumPy paths, which these kernels must equal (tests/engine/test_norm_jit.py, test_residual_fusion.py).
Each kernel takes the whole maps viewed as (N, C, R) and a range of channels ``c0..c1``
(:func:`parallel.ranges` hands the ranges to both cores): per channel it reads the channel's N rows for the
statistics, then writes the output rows while they are still in the core's cache, where NumPy needs a pass
per term over the whole map.

Why the values are NumPy's: the elementwise steps (ReluGradient's ``dY * (Y > 0)``, ``X * alpha + beta``,
``dY * alpha + (X * beta + gamma)``, Sum's ``A + B`` in its input order) are the NumPy path's float32
operations in its order, compiled without fast-math (no fused multiply-add): the same bits for the same
per-channel scalars.  Only the sums differ: here float64 accumulators in any order (``reassoc``, so they
vectorise), there float32 row sums merged in float64; both are within float32 rounding of the exact sums
(this one the closer).
"""
from __future__ import annotations

import numba as nb
import numpy as np

_SUMS = {"nogil": True, "cache": True, "fastmath": {"reassoc", "contract"}}  # NOTE: no nnan/ninf/nsz: NaN
_EXACT = {"nogil": True, "cache": True}                                     # and -0.0 stay IEEE's


@nb.njit(**_SUMS)
def _sum_and_squares(r):
    s = 0.0
    q = 0.0
    for i in range(r.shape[0]):
        v = np.float64(r[i])
        s += v
        q += v * v
    return s, q


@nb.njit(**_SUMS)
def _sum_and_dot(a, b):
    s = 0.0
    q = 0.0
    for i in range(a.shape[0]):
        v = np.float64(a[i])
        s += v
        q += v * np.float64(b[i])
    return s, q


@nb.njit(**_EXACT)
def _relu_gradient_row(y, dy, g):
    one, zero = np.float32(1.0), np.float32(0.0)
    for i in range(y.shape[0]):
        g[i] = dy[i] * (one if y[i] > 0 else zero)  # NOTE: NumPy's dY * float32(Y > 0): NaN * 0 is NaN


@nb.njit(**_EXACT)
def _affine_row(x, a, c, y, relu):
    zero = np.float32(0.0)
    for i in range(x.shape[0]):
        v = x[i] * a
        v = v + c
        if relu and v < zero:  # NOTE: np.maximum(v, 0): NaN and -0.0 stay
            v = zero
        y[i] = v


@nb.njit(**_EXACT)
def _dx_row(x, g, a, b, c, dx):
    for i in range(x.shape[0]):
        d = x[i] * b
        d = d + c
        dx[i] = g[i] * a + d


@nb.njit(**_EXACT)
def _moments(x, c, scale, bias, eps):
    """Channel `c` of the (N, C, R) map `x`: batch mean and biased variance (float64, E[X^2] - mean^2 clamped
    at 0), inverse std, alpha and beta, the last three with the NumPy path's float32 roundings."""
    s = 0.0
    q = 0.0
    for i in range(x.shape[0]):
        a, b = _sum_and_squares(x[i, c])
        s += a
        q += b
    cnt = x.shape[0] * x.shape[2]
    mean = s / cnt
    var = max(q / cnt - mean * mean, 0.0)
    iv = np.float32(1.0) / np.sqrt(np.float32(var) + eps)
    alpha = scale[c] * iv
    return mean, var, iv, alpha, bias[c] - alpha * np.float32(mean)


@nb.njit(**_EXACT)
def train(x, scale, bias, eps, relu, y, bm, bv, inv, c0, c1):
    """Training SpatialBN on channels c0..c1 of the (N, C, R) map `x`: batch mean `bm` and biased variance
    `bv` (float64, E[X^2] - mean^2 clamped at 0), saved inverse std `inv` and Y = X * alpha + beta (then
    max(Y, 0) when `relu`), with the NumPy path's float32 roundings of inv, alpha and beta."""
    for c in range(c0, c1):
        mean, var, iv, alpha, beta = _moments(x, c, scale, bias, eps)
        for i in range(x.shape[0]):
            _affine_row(x[i, c], alpha, beta, y[i, c], relu)
        bm[c], bv[c], inv[c] = mean, var, iv


@nb.njit(**_EXACT)
def affine(x, a, b, relu, y, c0, c1):
    """Inference SpatialBN's Y = X * a + b (per-channel float32 `a`, `b`), then max(Y, 0) when `relu`, on
    channels c0..c1 of the (N, C, R) map `x`."""
    for c in range(c0, c1):
        for i in range(x.shape[0]):
            _affine_row(x[i, c], a[c], b[c], y[i, c], relu)


@nb.njit(**_EXACT)
def _affine_sum_relu_row(x, a, c, y, r, y_first, s):
    zero = np.float32(0.0)
    for i in range(x.shape[0]):
        v = x[i] * a
        v = v + c
        y[i] = v
        t = v + r[i] if y_first else r[i] + v  # NOTE: Sum's order: a NaN's payload is its first operand's
        if t < zero:  # NOTE: np.maximum(t, 0): NaN and -0.0 stay
            t = zero
        s[i] = t


@nb.njit(**_EXACT)
def train_sum_relu(x, scale, bias, eps, r, y_first, y, s, bm, bv, inv, c0, c1):
    """:func:`train` (no ReLU) and then, while each row of Y is in cache, the residual Sum(Y, R) (Sum(R, Y)
    unless `y_first`) and its in-place Relu into `s`: SpatialBN -> Sum -> Relu as ResNet's blocks end."""
    for c in range(c0, c1):
        mean, var, iv, alpha, beta = _moments(x, c, scale, bias, eps)
        bm[c], bv[c], inv[c] = mean, var, iv
        for i in range(x.shape[0]):
            _affine_sum_relu_row(x[i, c], alpha, beta, y[i, c], r[i, c], y_first, s[i, c])


@nb.njit(**_EXACT)
def affine_sum_relu(x, a, b, r, y_first, y, s, c0, c1):
    """Inference SpatialBN's Y = X * a + b (per-channel float32 `a`, `b`) then Sum(Y, R) and Relu into `s`,
    as :func:`train_sum_relu`, on channels c0..c1."""
    for c in range(c0, c1):
        for i in range(x.shape[0]):
            _affine_sum_relu_row(x[i, c], a[c], b[c], y[i, c], r[i, c], y_first, s[i, c])


@nb.njit(**_EXACT)
def _sum_relu_gradient_row(a, b, y, g):
    one, zero = np.float32(1.0), np.float32(0.0)
    for i in range(y.shape[0]):
        v = a[i] + b[i]
        g[i] = v * (one if y[i] > 0 else zero)


@nb.njit(**_EXACT)
def _dx_channel(x, g, scale, mean, inv, s, q, dx, dscale, dbias, c):
    """dX of channel `c` from its sums `s` (of G) and `q` (of G X), and dscale, dbias (see :func:`gradient`)."""
    m = x.shape[0] * x.shape[2]
    mu, iv = np.float64(mean[c]), np.float64(inv[c])
    ds = (q - mu * s) * iv
    alpha = np.float64(scale[c]) * iv
    beta = -alpha * iv * ds / m
    gamma = -beta * mu - alpha * s / m
    a32, b32, g32 = np.float32(alpha), np.float32(beta), np.float32(gamma)
    for i in range(x.shape[0]):
        _dx_row(x[i, c], g[i, c], a32, b32, g32, dx[i, c])
    dscale[c] = ds
    dbias[c] = s


@nb.njit(**_EXACT)
def gradient(x, g, scale, mean, inv, y, dy, relu_grad, dx, dscale, dbias, c0, c1):
    """Training SpatialBNGradient on channels c0..c1 of (N, C, R) maps: dbias = sum G, dscale = inv_std *
    (sum G X - mean * dbias) (float64, written to `dscale`, `dbias`) and dX = G * alpha + (X * beta + gamma)
    with the NumPy row path's per-channel scalars.  `relu_grad`: G is first written from ReluGradient's
    (Y, dY) row by row (the fused ReluGradient -> SpatialBNGradient); else `g` is dY and `y`, `dy` unused."""
    for c in range(c0, c1):
        s = 0.0
        q = 0.0
        for i in range(x.shape[0]):
            if relu_grad:
                _relu_gradient_row(y[i, c], dy[i, c], g[i, c])
            a, b = _sum_and_dot(g[i, c], x[i, c])
            s += a
            q += b
        _dx_channel(x, g, scale, mean, inv, s, q, dx, dscale, dbias, c)


@nb.njit(**_EXACT)
def sum_relu_gradient(x, da, db, scale, mean, inv, y, g, dx, dscale, dbias, c0, c1):
    """:func:`gradient` whose G is ReluGradient(Y, dA + dB) (a Sum of two gradients, then ReluGradient in
    place on it), written row by row while the statistics read it: Sum -> ReluGradient -> SpatialBNGradient
    as ResNet's backward pass has them at each block's end."""
    for c in range(c0, c1):
        s = 0.0
        q = 0.0
        for i in range(x.shape[0]):
            _sum_relu_gradient_row(da[i, c], db[i, c], y[i, c], g[i, c])
            a, b = _sum_and_dot(g[i, c], x[i, c])
            s += a
            q += b
        _dx_channel(x, g, scale, mean, inv, s, q, dx, dscale, dbias, c)


def warm() -> None:
    """Compile (or load from numba's disk cache) every kernel with the argument types the ops pass, on tiny
    maps: :func:`engine.runtime.jit.load` calls it once, so a numba that cannot compile here turns the
    kernels off instead of failing an op, and no op pays a compilation mid-run on a pool thread."""
    x = np.ones((2, 2, 3), np.float32)
    v, f = np.ones(2, np.float32), np.empty(2)
    for relu in (False, True):
        train(x, v, v, np.float32(1e-5), relu, np.empty_like(x), f, f.copy(), np.empty(2, np.float32), 0, 2)
        gradient(x, np.ones_like(x) if not relu else np.empty_like(x), v, v, v, x, x, relu, np.empty_like(x), f,
                 f.copy(), 0, 2)
    e, i32 = np.empty_like, np.empty(2, np.float32)
    affine(x, v, v, True, e(x), 0, 2)
    train_sum_relu(x, v, v, np.float32(1e-5), x, True, e(x), e(x), f, f.copy(), i32, 0, 2)
    affine_sum_relu(x, v, v, x, True, e(x), e(x), 0, 2)
    sum_relu_gradient(x, x, x, v, v, v, x, e(x), e(x), f, f.copy(), 0, 2)
