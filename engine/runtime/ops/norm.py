"""Normalisation and regularisation: SpatialBN (5 or 7 inputs, NCHW/NHWC), LRN, LayerNorm (with gamma/beta),
InstanceNorm, GroupNorm, RMSNorm, AffineChannel, ChannelStats, ChannelBackpropStats, NormalizePlanarYUV,
Dropout, ChannelShuffle."""
from __future__ import annotations

import numpy as np

from engine.runtime import jit, onednn, onednn_eltwise, parallel
from engine.runtime.grad_makers import cc_maker, should_not_do_gradient, simple
from engine.runtime.fidelity import fixes_enabled
from engine.catalogue.registry import gradient, kernel
from engine.catalogue.registry import shape
from engine.runtime.shapes import BOOL, TensorInfo, dims, norm_axis, same_as, split_layout

# ---- kernels ----

def _channel_view(x, order):
    """(reduce axes, broadcast shape) for per-channel statistics of an NCHW/NHWC tensor."""
    c_axis = 1 if order == "NCHW" else x.ndim - 1
    shape = [1] * x.ndim
    shape[c_axis] = x.shape[c_axis]
    return tuple(a for a in range(x.ndim) if a != c_axis), tuple(shape)


def _channel_sum(xp, t, axes, order):
    """Per-channel sum; NCHW as (N, C, HW) rows so NumPy sums each contiguous row pairwise."""
    if order == "NCHW" and t.ndim > 2 and t.flags.c_contiguous and t.size:
        return t.reshape(t.shape[0], t.shape[1], -1).sum(axis=2).sum(axis=0)
    return t.sum(axis=axes)


@kernel("SpatialBN")
def spatial_bn(xp, x, scale, bias, mean, var, sums=None, sumsq=None, *, is_test: int = 0, epsilon: float = 1e-5,
               momentum: float = 0.9, order: str = "NCHW", num_batches: int = 1):
    return _spatial_bn(xp, False, x, scale, bias, mean, var, sums, sumsq, is_test=is_test, epsilon=epsilon,
                       momentum=momentum, order=order, num_batches=num_batches)


def spatial_bn_relu(xp, *ins, **args):
    """SpatialBN whose Y an in-place Relu overwrites at once: the executor's run_compiled runs the pair as
    this one call (nothing can read the BN's Y in between).  Y is ``max(Y, 0)`` of the very Y SpatialBN
    computes, so the values are those of the two ops apart; the fast paths apply it in the block pass
    that writes Y (one pass over Y less)."""
    return _spatial_bn(xp, True, *ins, **args)


def _relu_y(xp, out, relu):
    """`out` (Y or Y and the statistics) with Y replaced by max(Y, 0) in place when `relu`."""
    if relu:
        y = out[0] if isinstance(out, tuple) else out
        xp.maximum(y, 0, out=y)
    return out


def _spatial_bn(xp, relu, x, scale, bias, mean, var, sums=None, sumsq=None, *, is_test, epsilon, momentum, order,
                num_batches):
    """The SpatialBN kernel; `relu` (the fused SpatialBN + Relu) clamps Y at 0."""
    axes, bshape = _channel_view(x, order)
    if x.ndim > 1 and x.shape[1 if order == "NCHW" else -1] == 0:
        raise ValueError(f"input {tuple(x.shape)} has no channels; Caffe2 refuses C = 0")
    if not is_test and x.size == 0 and x.shape[0] == 0:  # NOTE: an empty batch leaves the running stats;
        z = xp.zeros_like(mean)                            # saved stats are 0
        return _relu_y(xp, (x.copy(), mean.copy(), var.copy(), z, z.copy()), relu)
    if not is_test and x.size == 0 and num_batches == 1:  # NOTE: images of no pixels: batch mean and var are 0
        m = mean.dtype.type(momentum)
        inv_std = xp.full_like(mean, 1 / np.sqrt(mean.dtype.type(epsilon)))
        return _relu_y(xp, (x.copy(), (mean * m).astype(mean.dtype), (var * m).astype(var.dtype),
                            xp.zeros_like(mean), inv_std), relu)
    if not is_test and num_batches > 1:
        return _relu_y(xp, _spatial_bn_from_sums(xp, x, scale, bias, mean, var, sums, sumsq, epsilon, momentum,
                                                 order, num_batches), relu)
    if is_test:  # NOTE: y = x * a + c with per-channel a, c: two passes over x, no temporaries.
        a, c = (v.reshape(bshape) for v in _test_affine(xp, x, scale, bias, mean, var, epsilon))
        y = _relu_affine_jit(xp, x, a, c, order) if relu else None
        y = y if y is not None else _affine_onednn(xp, x, a, c, relu, order)
        if y is not None:
            return y
        if _rows_fast(xp, x, order):
            n, rows = x.shape[0], x.shape[0] * x.shape[1]
            y = np.empty(x.shape, x.dtype)
            _affine_rows(x.reshape(rows, -1), _per_row(a, n), _per_row(c, n), y.reshape(rows, -1), relu)
            return y
        if xp is not np or x.nbytes < parallel.MIN_BYTES:
            y = xp.multiply(x, a, dtype=x.dtype)
            return _relu_y(xp, xp.add(y, c, out=y), relu)
        y = np.empty(x.shape, x.dtype)

        def part(t):  # both passes on one cache-sized block, blocks over both cores
            np.multiply(t(x), t(a), out=t(y), dtype=x.dtype)
            np.add(t(y), t(c), out=t(y))
        parallel.split(part, x.shape, x.nbytes)
        return _relu_y(xp, y, relu)
    # NOTE: the 5th output is the batch's inverse std (biased variance); the running variance is
    # updated with the UNBIASED batch variance (checked against Caffe2 1.10.2).
    fast = _spatial_bn_train_onednn(xp, x, scale, bias, mean, var, epsilon, momentum, order)
    if fast is not None:
        return _relu_y(xp, fast, relu)
    fast = _spatial_bn_train_jit(xp, x, scale, bias, mean, var, epsilon, momentum, order, relu)
    if fast is not None:
        return fast
    if _rows_fast(xp, x, order):
        return _spatial_bn_train_rows(x, scale, bias, mean, var, epsilon, momentum, relu)
    bm = _channel_sum(xp, x, axes, order) / x.dtype.type(x.size // x.shape[1 if order == "NCHW" else -1])
    y = xp.subtract(x, bm.reshape(bshape), dtype=x.dtype)  # centred x, turned into y in place below
    bv = _channel_sum(xp, xp.square(y), axes, order) / x.dtype.type(x.size // bm.size)
    inv = (1 / xp.sqrt(bv + epsilon)).astype(x.dtype)
    xp.multiply(y, (inv * scale).astype(x.dtype).reshape(bshape), out=y)
    xp.add(y, bias.astype(x.dtype).reshape(bshape), out=y)
    return _relu_y(xp, (y, *_running(mean, var, bm, bv, x.size // bm.size, momentum, x.dtype),
                        bm.astype(x.dtype), inv), relu)


def _test_affine(xp, x, scale, bias, mean, var, epsilon):
    """Inference SpatialBN's per-channel (a, c) of ``Y = X * a + c`` in X's dtype, from the running stats."""
    with np.errstate(invalid="ignore"):  # NOTE: a negative running variance gives NaN, as in Caffe2
        a = (scale / xp.sqrt(var + x.dtype.type(epsilon))).astype(x.dtype)
    return a, (bias - mean * a).astype(x.dtype)


def _relu_affine_jit(xp, x, a, c, order):
    """Inference SpatialBN + Relu's ``Y = max(X * a + c, 0)`` from ``norm_jit.affine`` (one pass per channel),
    or None where the kernels do not take X.  Only with the ReLU: there oneDNN needs its NaN-keeping exp chain
    or a second pass, and the kernel is 1.05-1.8x faster over ResNet-50's maps; without it they tie and oneDNN
    wins on small maps (measured: benchmarks/README.md, session 11)."""
    k = _jit_kernels(xp, order, x)
    if k is None or a.size != x.shape[1] or a.dtype != x.dtype or c.dtype != x.dtype:
        return None
    sh, y = (x.shape[0], x.shape[1], -1), np.empty(x.shape, x.dtype)
    a, c = np.ascontiguousarray(a).reshape(-1), np.ascontiguousarray(c).reshape(-1)
    _by_channels(x, 2, lambda c0, c1: k.affine(x.reshape(sh), a, c, True, y.reshape(sh), c0, c1))
    return y


def spatial_bn_then_sum_relu(x, scale, bias, mean, var, *more, residual, y_first, is_test: int = 0,
                             epsilon: float = 1e-5, momentum: float = 0.9, order: str = "NCHW",
                             num_batches: int = 1):
    """SpatialBN(X) -> Y, then Sum(Y, R) (Sum(R, Y) unless `y_first`) and an in-place Relu on it, as each
    residual block of ResNet ends (executor.TRIPLES): the compiled kernels write Y and, while its rows are
    in cache, S = max(Y + R, 0) (one read of Y less).  Returns (SpatialBN's outputs, S), the values of the
    three ops apart, or None where the kernels do not take them (run them apart)."""
    if more or num_batches != 1 or residual.shape != x.shape or not x.size:  # NOTE: no pixels, no channels:
        return None                                                              # the op's own errors and cases
    if not is_test:
        got = _spatial_bn_train_jit(np, x, scale, bias, mean, var, epsilon, momentum, order, False,
                                    (residual, y_first))
        return got and (got[:5], got[5])
    k = _jit_kernels(np, order, x, residual)
    a, c = _test_affine(np, x, scale, bias, mean, var, epsilon) if k is not None else (x, x)
    if k is None or not a.shape == c.shape == (x.shape[1],):
        return None
    (n, ch), sh = x.shape[:2], (x.shape[0], x.shape[1], -1)
    y, s = np.empty(x.shape, x.dtype), np.empty(x.shape, x.dtype)
    _by_channels(x, 4, lambda c0, c1: k.affine_sum_relu(x.reshape(sh), a, c, residual.reshape(sh), y_first,
                                                        y.reshape(sh), s.reshape(sh), c0, c1))
    return y, s


def _running(mean, var, bm, bv, count, momentum, dt):
    """The running mean and variance after a training batch of `count` values per channel with mean `bm` and
    BIASED variance `bv`: Caffe2 updates the running variance with the UNBIASED one."""
    m = dt.type(momentum)
    unbiased = bv * (count / max(count - 1, 1))
    return (mean * m + bm * (1 - m)).astype(dt), (var * m + unbiased * (1 - m)).astype(dt)


def _spatial_bn_from_sums(xp, x, scale, bias, mean, var, sums, sumsq, epsilon, momentum, order, num_batches):
    """Training SpatialBN over `num_batches` batches: the statistics come from inputs 5/6, the sums of X
    and of X^2 over all of them (count = num_batches * N * HW); var = E[X^2] - mean^2."""
    if sums is None or sumsq is None:
        raise ValueError("SpatialBN with num_batches > 1 needs the sums and sumsq inputs (7 inputs)")
    _, bshape = _channel_view(x, order)
    dt, cnt = x.dtype, num_batches * (x.size // max(scale.size, 1))
    with np.errstate(divide="ignore", invalid="ignore"):  # NOTE: no pixels (count 0): inf and NaN, as in Caffe2
        bm = (sums / dt.type(cnt)).astype(dt)
        bv = (sumsq / dt.type(cnt) - bm * bm).astype(dt)
        inv = (1 / xp.sqrt(bv + dt.type(epsilon))).astype(dt)
    y = ((x - bm.reshape(bshape)) * (inv * scale).reshape(bshape) + bias.reshape(bshape)).astype(dt)
    return (y, *_running(mean, var, bm, bv, cnt, momentum, dt), bm, inv)


ONEDNN_MIN_ELEMENTS = 1 << 15
"""X's size below which SpatialBN stays on NumPy: a oneDNN call's fixed cost (~50 us) loses on tiny maps
(ties at 25k elements, measured: benchmarks/README.md, round 3b)."""


def _onednn_views(xp, order, x, *more):
    """NCHW views of NHWC `x` (and `more`) when oneDNN takes them, else None.  Only NHWC: there oneDNN
    runs its JIT kernel, 2-5x this module's NumPy path; on NCHW it has only a generic kernel, slower than
    the row passes below (measured: benchmarks/README.md, round 3b)."""
    if xp is not np or order != "NHWC" or x.ndim != 4 or x.size < ONEDNN_MIN_ELEMENTS:
        return None
    views = tuple(a.transpose(0, 3, 1, 2) for a in (x, *more))
    return views if onednn.bn_fits(*views) else None


def _spatial_bn_train_onednn(xp, x, scale, bias, mean, var, epsilon, momentum, order):
    """Training SpatialBN's five outputs through oneDNN (:func:`_onednn_views`), or None.  oneDNN gives the
    batch's biased variance: Caffe2's saved inverse std and unbiased running update are made from it here."""
    views = _onednn_views(xp, order, x)
    got = views and onednn.bn_forward(views[0], scale, bias, epsilon)
    if not got:
        return None
    y, bm, bv = got
    dt, cnt = x.dtype, x.size // x.shape[-1]
    inv = (1 / np.sqrt(bv + dt.type(epsilon))).astype(dt)
    return (y.transpose(0, 2, 3, 1), *_running(mean, var, bm, bv, cnt, momentum, dt), bm, inv)


def _spatial_bn_gradient_onednn(xp, x, scale, dy, mean, inv_std, epsilon, order):
    """Training SpatialBNGradient's (dX, dscale, dbias) through oneDNN (:func:`_onednn_views`), or None.
    oneDNN takes the biased variance, ``1/inv_std^2 - eps``; an inverse std that gives a variance below 0
    beyond rounding (not one a forward pass saved) stays on NumPy, which uses it as it is."""
    views = _onednn_views(xp, order, x, dy)
    if views is None:
        return None
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        bv = 1 / np.square(inv_std.astype(np.float64)) - epsilon
    if not np.all(bv > -1e-6 * epsilon):  # NOTE: NaN fails too
        return None
    got = onednn.bn_backward(views[0], scale, views[1], mean, np.maximum(bv, 0).astype(np.float32), epsilon)
    return got and (got[0].transpose(0, 2, 3, 1), got[1], got[2])


JIT_MIN_ELEMENTS = 1 << 12
"""X's size from which SpatialBN's NCHW float32 paths (training, its gradient, the fused pairs and triples,
inference with a ReLU) take the compiled kernels of ``norm_jit`` when numba is installed: below it a map
costs NumPy's passes little and the kernels' call more than they save."""


def _jit_kernels(xp, order, x, *more):
    """``norm_jit`` when its kernels take the NCHW float32 map `x` (and `more` like it), else None."""
    if (xp is not np or order != "NCHW" or x.ndim < 3 or x.size < JIT_MIN_ELEMENTS or x.dtype != np.float32
            or not all(a.shape == x.shape and a.dtype == x.dtype and a.flags.c_contiguous for a in (x, *more))
            or jit.fp_raises()):
        return None
    return jit.get("norm")


def _by_channels(x, arrays, call):
    """`call(c0, c1)` over channel ranges of NCHW `x` on both cores (one range for a small map); `arrays`
    is how many maps of x's size a channel's pass touches (the blocks are sized on all of them)."""
    parallel.ranges(call, x.shape[1], x.nbytes * arrays, block_bytes=parallel.BLOCK_BYTES)


def _spatial_bn_train_jit(xp, x, scale, bias, mean, var, epsilon, momentum, order, relu, residual=None):
    """Training SpatialBN's five outputs (Y clamped at 0 when `relu`) from ``norm_jit.train``: one read of
    each channel for its moments and one for Y while it is in cache; None where the kernels do not take X.
    `residual` = (R, y_first): then a sixth, S = max(Y + R, 0) (:func:`spatial_bn_then_sum_relu`)."""
    k = _jit_kernels(xp, order, x, *residual[:1] if residual else ())
    if k is None:
        return None
    (n, c), dt = x.shape[:2], x.dtype
    sh, y, eps = (n, c, -1), np.empty(x.shape, dt), dt.type(epsilon)
    bm, bv, inv = np.empty(c), np.empty(c), np.empty(c, dt)
    sc, bi = np.ascontiguousarray(scale, dt).reshape(-1), np.ascontiguousarray(bias, dt).reshape(-1)
    if residual is None:
        s = ()
        _by_channels(x, 2, lambda c0, c1: k.train(x.reshape(sh), sc, bi, eps, relu, y.reshape(sh), bm, bv, inv,
                                                  c0, c1))
    else:
        s, (r, y_first) = (np.empty(x.shape, dt),), residual
        _by_channels(x, 4, lambda c0, c1: k.train_sum_relu(x.reshape(sh), sc, bi, eps, r.reshape(sh), y_first,
                                                           y.reshape(sh), s[0].reshape(sh), bm, bv, inv, c0, c1))
    bm, bv = bm.astype(dt), bv.astype(dt)
    return (y, *_running(mean, var, bm, bv, x.size // c, momentum, dt), bm, inv, *s)


def _spatial_bn_gradient_jit(xp, x, scale, g, mean, inv_std, order, relu_grad=None):
    """Training SpatialBNGradient's (dX, dscale, dbias) from ``norm_jit.gradient``, or None where the
    kernels do not take the maps.  `relu_grad` = (Y, dY): `g` is an empty map that the kernel first fills
    with ReluGradient's dY * (Y > 0) (the fused pair: G is written and summed in one read); (Y, dA, dB):
    with (dA + dB) * (Y > 0) (``norm_jit.sum_relu_gradient``, :func:`sum_relu_gradient_then_spatial_bn_gradient`)."""
    k = _jit_kernels(xp, order, x, g, *(relu_grad or ()))
    if k is None:
        return None
    (n, c), dt = x.shape[:2], x.dtype
    sh = (n, c, -1)
    x3, g3, dx = x.reshape(sh), g.reshape(sh), np.empty(x.shape, dt)
    y3, dy3, *db3 = (a.reshape(sh) for a in relu_grad) if relu_grad else (g3, g3)
    ds, dbias = np.empty(c), np.empty(c)
    sc, mu, iv = (np.ascontiguousarray(v, dt).reshape(-1) for v in (scale, mean, inv_std))
    if db3:
        _by_channels(x, 6, lambda c0, c1: k.sum_relu_gradient(x3, dy3, db3[0], sc, mu, iv, y3, g3, dx.reshape(sh),
                                                              ds, dbias, c0, c1))
    else:
        _by_channels(x, 5 if relu_grad else 3, lambda c0, c1: k.gradient(
            x3, g3, sc, mu, iv, y3, dy3, relu_grad is not None, dx.reshape(sh), ds, dbias, c0, c1))
    return dx, ds.astype(dt), dbias.astype(dt)


ONEDNN_AFFINE_MIN_BYTES = 1 << 20
"""X's bytes from which SpatialBN's ``Y = X * a + c`` pass runs as one oneDNN binary chain (mul, add) instead
of NumPy's two block passes (measured: benchmarks/README.md, round 4)."""


def _affine_onednn(xp, x, a, c, relu, order, from_x=False):
    """``x * a + c`` with per-channel `a`, `c` (then ReLU when `relu`) through oneDNN, NCHW or NHWC (viewed
    as NCHW), with NumPy's values; None where it does not take `x`.  `from_x`: `a` and `c` come from X's
    own sums (training), so finite ones mean a finite X (:func:`onednn_eltwise.affine`'s one pass)."""
    if xp is not np or x.nbytes < ONEDNN_AFFINE_MIN_BYTES or order not in ("NCHW", "NHWC"):
        return None
    y = onednn_eltwise.affine(x if order == "NCHW" else _channels_first(x), a, c, relu, ONEDNN_AFFINE_MIN_BYTES,
                              from_x)
    return y if y is None or order == "NCHW" else np.moveaxis(y, 1, -1)


ROW_BLOCK = 1 << 20
"""Bytes per block of rows for the row-wise SpatialBN passes: the block of X, its centred scratch copy
(and dY, dX in the gradient) all stay in one core's L2 (measured best of 128 KB .. 2 MB)."""


def _rows_fast(xp, x, order, *more):
    """Whether the row-wise SpatialBN fast path takes `x` (and `more`): big, C-contiguous NCHW NumPy."""
    return (xp is np and order == "NCHW" and x.ndim > 2 and x.size > 0 and x.nbytes >= parallel.MIN_BYTES
            and all(a.flags.c_contiguous for a in (x, *more)))


def _per_row(v, n):
    """A per-channel vector repeated for each of `n` images: one entry per row of the (N*C, HW) view."""
    return np.ascontiguousarray(np.broadcast_to(v.reshape(-1), (n, v.size))).reshape(-1, 1)


def _affine_rows(x2, a, c, y2, relu=False):
    """``y2 = x2 * a + c`` (then ``max(y2, 0)`` when `relu`) with one (a, c) pair per row, block by block
    over both cores (the passes of a block in cache)."""
    def part(t):
        np.multiply(t(x2), t(a), out=t(y2))
        np.add(t(y2), t(c), out=t(y2))
        if relu:
            np.maximum(t(y2), 0, out=t(y2))
    parallel.split(part, x2.shape, x2.nbytes, axis=0, block_bytes=ROW_BLOCK)


def _row_sums(a2, b2, relu_grad=None):
    """Per row, in float64: (sum of `a2`, sum of `a2` * `b2`); one read of each from memory (a block's
    second pass finds it in cache), blocks over both cores.  `relu_grad` = (dY, Y) fills `a2` first,
    block by block, with ReluGradient's values dY * (Y > 0).  NOTE: float32 row sums, merged per channel
    in float64: Caffe2 sums in float32 too."""
    s, q = np.empty(a2.shape[0], a2.dtype), np.empty(a2.shape[0], a2.dtype)

    def part(t):
        ab = t(a2)
        if relu_grad is not None:  # NOTE: ReluGradient's dY * (Y > 0) with the mask as float32 1.0 / 0.0
            np.greater(t(relu_grad[1]), 0, out=ab, casting="unsafe")  # (what NumPy casts the bool to): same
            np.multiply(t(relu_grad[0]), ab, out=ab)                   # values, no bool-to-float cast loop
        ab.sum(axis=1, out=t(s))
        np.einsum("ij,ij->i", ab, t(b2), out=t(q))
    parallel.split(part, a2.shape, a2.nbytes, axis=0, block_bytes=ROW_BLOCK)
    return s.astype(np.float64), q.astype(np.float64)


def _spatial_bn_train_rows(x, scale, bias, mean, var, epsilon, momentum, relu=False):
    """Training SpatialBN over the (N*C, HW) rows of an NCHW X, as Caffe2's CPU kernel computes it: one
    pass for the moments (var = E[X^2] - mean^2, per-row float32 sums merged in float64), one for
    ``Y = X * alpha + beta`` with per-channel alpha = scale * inv_std, beta = bias - alpha * mean."""
    (n, c), dt = x.shape[:2], x.dtype
    x2, cnt = x.reshape(n * c, -1), x.size // c
    s, q = _row_sums(x2, x2)
    bm = s.reshape(n, c).sum(axis=0) / cnt
    bv = np.maximum(q.reshape(n, c).sum(axis=0) / cnt - bm * bm, 0)
    inv = (1 / np.sqrt(bv.astype(dt) + dt.type(epsilon))).astype(dt)
    alpha = (scale * inv).astype(dt)
    beta = (bias - alpha * bm.astype(dt)).astype(dt)
    y = _affine_onednn(np, x, alpha, beta, relu, "NCHW", from_x=True)
    if y is None:
        y = np.empty(x.shape, dt)
        _affine_rows(x2, _per_row(alpha, n), _per_row(beta, n), y.reshape(n * c, -1), relu)
    bm, bv = bm.astype(dt), bv.astype(dt)
    return (y, *_running(mean, var, bm, bv, cnt, momentum, dt), bm, inv)


@kernel("SpatialBNGradient")
def spatial_bn_gradient(xp, x, scale, dy, mean, inv_std, *agg, is_test: int = 0, epsilon: float = 1e-5,
                        order: str = "NCHW", num_batches: int = 1):
    if x.ndim < 3 and not fixes_enabled():
        # NOTE: the forward op takes N x C (BatchNorm1d through ONNX), Caffe2's gradient kernel
        # enforces ndim >= 3 (docs/fidelity.md, SpatialBNGradient in test mode)
        raise ValueError(f"SpatialBNGradient: X has {x.ndim} dimensions; Caffe2 needs >= 3 "
                         "(--fix-caffe2 computes the gradient)")
    axes, bshape = _channel_view(x, order)
    if x.size == 0:  # NOTE: an empty batch: no gradient for scale and bias
        return xp.zeros_like(x), xp.zeros_like(scale), xp.zeros_like(scale)
    if agg and not is_test and num_batches > 1:
        # NOTE: 7 inputs: dscale / dbias are the aggregated ones (inputs 5/6) over num_batches.
        dt, m = x.dtype, x.size // max(scale.size, 1)
        dscale, dbias = (agg[0] / dt.type(num_batches)).astype(dt), (agg[1] / dt.type(num_batches)).astype(dt)
        xhat = (x - mean.reshape(bshape)) * inv_std.reshape(bshape)
        dx = (scale * inv_std).reshape(bshape) * (dy - (dbias.reshape(bshape) + xhat * dscale.reshape(bshape)) / m)
        return dx.astype(dt), dscale, dbias
    if is_test and not fixes_enabled():
        is_test = 0  # NOTE: Caffe2 ignores is_test: the running variance is read as a saved inverse std
    if is_test:  # NOTE: inputs 3/4 are the running mean and VARIANCE here; stats are constants.
        inv_std = 1 / xp.sqrt(inv_std + x.dtype.type(epsilon))
    dt = x.dtype
    fast = None if is_test else (_spatial_bn_gradient_onednn(xp, x, scale, dy, mean, inv_std, epsilon, order)
                                 or _spatial_bn_gradient_jit(xp, x, scale, dy, mean, inv_std, order))
    if fast:
        return fast
    if not is_test and _rows_fast(xp, x, order, dy) and x.shape == dy.shape:
        return _spatial_bn_gradient_rows(x, scale, dy, mean, inv_std)
    xhat = xp.subtract(x, mean.reshape(bshape), dtype=dt)
    xp.multiply(xhat, inv_std.astype(dt).reshape(bshape), out=xhat)
    dbias, dscale = _channel_sum(xp, dy, axes, order), _channel_sum(xp, dy * xhat, axes, order)
    if is_test:
        return (dy * (scale * inv_std).reshape(bshape)).astype(dt), dscale, dbias
    m = x.size // x.shape[1 if order == "NCHW" else -1]
    # NOTE: dx = k * (dy - (dbias + xhat * dscale) / m), k = scale * inv_std, per channel; in place
    # on the xhat buffer: no float64 and one temporary.
    k = (scale * inv_std).astype(dt)
    xp.multiply(xhat, (dscale / m).astype(dt).reshape(bshape), out=xhat)
    xp.add(xhat, (dbias / m).astype(dt).reshape(bshape), out=xhat)
    xp.subtract(dy, xhat, out=xhat, dtype=dt)
    xp.multiply(xhat, k.reshape(bshape), out=xhat)
    return xhat, dscale.astype(dt), dbias.astype(dt)


def _spatial_bn_gradient_rows(x, scale, dy, mean, inv_std, relu_grad=None):
    """Training SpatialBNGradient over the (N*C, HW) rows of NCHW X and dY, as Caffe2's CPU kernel: one
    pass for dbias = sum dY and dscale = inv_std * (sum dY X - mean * dbias), one for ``dX = alpha dY +
    beta X + gamma`` with per-channel alpha = scale * inv_std, beta = -alpha * inv_std * dscale / m,
    gamma = -beta * mean - alpha * dbias / m (the plain path's formula, expanded).  `relu_grad`: see
    :func:`relu_gradient_then_spatial_bn_gradient`."""
    (n, ch), dt = x.shape[:2], x.dtype
    rows, m = n * ch, x.size // ch
    x2, dy2 = x.reshape(rows, -1), dy.reshape(rows, -1)
    sdy, sdx = _row_sums(dy2, x2, relu_grad and tuple(a.reshape(rows, -1) for a in relu_grad))
    mu, inv = mean.astype(np.float64), inv_std.astype(np.float64)
    dbias = sdy.reshape(n, ch).sum(axis=0)
    dscale = (sdx.reshape(n, ch).sum(axis=0) - mu * dbias) * inv
    alpha = scale * inv
    beta = -alpha * inv * dscale / m
    gamma = -beta * mu - alpha * dbias / m
    dx = _bn_dx_onednn(x, dy, *(v.astype(dt) for v in (alpha, beta, gamma)))
    if dx is not None:
        return dx, dscale.astype(dt), dbias.astype(dt)
    ar, br, gr = (_per_row(v.astype(dt), n) for v in (alpha, beta, gamma))
    dx = np.empty(x.shape, dt)
    dx2 = dx.reshape(rows, -1)

    def part(t):
        d = parallel.scratch(t(x2).shape, dt)
        np.multiply(t(x2), t(br), out=d)
        np.add(d, t(gr), out=d)
        np.multiply(t(dy2), t(ar), out=t(dx2))
        np.add(t(dx2), d, out=t(dx2))
    parallel.split(part, x2.shape, x2.nbytes, axis=0, block_bytes=ROW_BLOCK)
    return dx, dscale.astype(dt), dbias.astype(dt)


def _bn_dx_onednn(x, dy, alpha, beta, gamma):
    """The row pass's ``dX = dY * alpha + (X * beta + gamma)`` (per-channel vectors, the same roundings in
    the same order) as two oneDNN passes, the second in place; None where oneDNN does not take them."""
    if not onednn_eltwise.fits(x, dy, min_bytes=ONEDNN_AFFINE_MIN_BYTES):
        return None
    d = onednn_eltwise.affine(x, beta, gamma, min_bytes=ONEDNN_AFFINE_MIN_BYTES)
    return d if d is not None and onednn_eltwise.apply("mul", d, dy, alpha, post=(("add", d),)) else None


def relu_gradient_then_spatial_bn_gradient(y, dy, x, scale, mean, inv_std, *, is_test: int = 0,
                                           epsilon: float = 1e-5, order: str = "NCHW", num_batches: int = 1):
    """ReluGradient(Y, dY) -> G, then training SpatialBNGradient(X, scale, G, mean, inv_std), as ResNet's
    backward pass has them (executor.fuse_pairs): G is written block by block in the BN's statistics
    pass, which reads it while it is in cache (one pass over G less).  Returns (G, (dX, dscale, dbias)),
    the values of the two ops apart, or None where the fast path does not take them (run them apart)."""
    if is_test or num_batches != 1 or not x.size or not y.shape == dy.shape == x.shape \
            or not y.dtype == dy.dtype == x.dtype:
        return None
    g = np.empty(dy.shape, dy.dtype)
    got = _spatial_bn_gradient_jit(np, x, scale, g, mean, inv_std, order, relu_grad=(y, dy))
    if got is not None:
        return g, got
    if not _rows_fast(np, x, order, y, dy):
        return None
    og = onednn_eltwise.relu_gradient(y, dy, ONEDNN_RELU_GRAD_MIN_BYTES)
    if og is not None:  # NOTE: G from oneDNN's one pass over both cores, then the statistics read it back
        return og, _spatial_bn_gradient_rows(x, scale, og, mean, inv_std)
    return g, _spatial_bn_gradient_rows(x, scale, g, mean, inv_std, relu_grad=(dy, y))


def sum_relu_gradient_then_spatial_bn_gradient(da, db, y, x, scale, mean, inv_std, *, is_test: int = 0,
                                               epsilon: float = 1e-5, order: str = "NCHW", num_batches: int = 1):
    """Sum(dA, dB) -> S, ReluGradient(Y, S) -> S in place, then training SpatialBNGradient(X, scale, S, mean,
    inv_std), as ResNet's backward pass has them where a block's two gradients meet (executor.TRIPLES): one
    compiled pass writes G = (dA + dB) * (Y > 0) while the statistics read it (the Sum's own output, which
    the in-place ReluGradient overwrites at once, is never made).  Returns (G, (dX, dscale, dbias)), the
    values of the three ops apart, or None where the kernels do not take the maps (run them apart)."""
    if is_test or num_batches != 1 or not x.size or not da.shape == db.shape == y.shape == x.shape:
        return None
    g = np.empty(x.shape, x.dtype)
    got = _spatial_bn_gradient_jit(np, x, scale, g, mean, inv_std, order, relu_grad=(y, da, db))
    return got and (g, got)


ONEDNN_RELU_GRAD_MIN_BYTES = 1 << 21
"""Maps from which the fused ReluGradient -> SpatialBNGradient makes G in one oneDNN pass (both cores) before
the statistics pass rather than block by block inside it: NumPy's ``dY * (Y > 0)`` costs more than the
statistics' second read of G (measured: benchmarks/README.md, session 10, round 7: 8x256x56x56 7.3 vs 8.3 ms,
8x2048x7x7 1.70 vs 1.88; 8x1024x7x7, 1.6 MB, lost: 1.32 vs 1.15)."""


def _window_sum(xp, sq, size, c_axis):
    """Sum over a centred window of `size` channels (zero padded), via a cumulative sum."""
    pre = (size - 1) // 2
    pad = [(0, 0)] * sq.ndim
    pad[c_axis] = (pre + 1, size - pre - 1)
    cs = xp.cumsum(xp.pad(sq, pad), axis=c_axis)
    n = sq.shape[c_axis]
    return xp.take(cs, xp.arange(size, size + n), axis=c_axis) - xp.take(cs, xp.arange(0, n), axis=c_axis)


@kernel("LRN")
def lrn(xp, x, *, size: int = 1, alpha: float = 0.0, beta: float = 0.0, bias: float = 1.0, order: str = "NCHW"):
    # NOTE: scale = bias + alpha/size * window_sum(x^2); Y = X * scale^-beta; 2nd output is scale.
    c_axis = 1 if order == "NCHW" else x.ndim - 1
    s = (bias + alpha / size * _window_sum(xp, x * x, size, c_axis)).astype(x.dtype)
    return (x * s ** x.dtype.type(-beta)).astype(x.dtype), s


@kernel("LRNGradient")
def lrn_gradient(xp, x, y, dy, *, size: int = 1, alpha: float = 0.0, beta: float = 0.0, bias: float = 1.0,
                 order: str = "NCHW"):
    c_axis = 1 if order == "NCHW" else x.ndim - 1
    s = bias + alpha / size * _window_sum(xp, x * x, size, c_axis)
    # the window is symmetric for odd size; for even size the adjoint window is mirrored.
    acc = _window_sum(xp, dy * y / s, size, c_axis) if size % 2 else \
        xp.flip(_window_sum(xp, xp.flip(dy * y / s, axis=c_axis), size, c_axis), axis=c_axis)
    return (dy * s ** -beta - 2 * alpha * beta / size * x * acc).astype(x.dtype)


@kernel("Dropout", needs_context=True)
def dropout(xp, x, *, ctx, ratio: float = 0.5, is_test: int = 0):
    if is_test or ratio == 0:
        return x.copy(), xp.ones(x.shape, dtype=bool)
    mask = xp.asarray(ctx.rng.random(x.shape) >= ratio)
    return (x * mask * x.dtype.type(1 / (1 - ratio))).astype(x.dtype), mask


@kernel("DropoutGrad")
def dropout_grad(xp, dy, mask=None, *, ratio: float = 0.5, is_test: int = 0):
    if is_test or mask is None:
        return dy.copy()
    return (dy * mask * dy.dtype.type(1 / (1 - ratio))).astype(dy.dtype)


def _rowwise(x, axis):
    """`x` as (rows, cols) split at the canonical `axis`."""
    return x.reshape(int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:])))  # NOTE: no -1: N may be 0


def _normalize_rows(xp, x2, eps):
    """(xhat, mean, std) of each row, with std = sqrt(biased var + eps)."""
    if x2.shape[1] == 0:  # NOTE: Caffe2's statistics of an empty row are mean 0, std sqrt(eps) (not NaN)
        mean = xp.zeros((x2.shape[0], 1), x2.dtype)
        return x2, mean, xp.sqrt(mean + x2.dtype.type(eps))
    mean = x2.mean(axis=1, keepdims=True)
    std = xp.sqrt(xp.square(x2 - mean).mean(axis=1, keepdims=True) + x2.dtype.type(eps))
    return (x2 - mean) / std, mean, std


def _normalize_rows_grad(xp, g, xhat, std):
    """dX of xhat = (x - mean) / std per row, given g = dL/dxhat."""
    return (g - g.mean(axis=1, keepdims=True) - xhat * (g * xhat).mean(axis=1, keepdims=True)) / std


@kernel("LayerNorm", "C10LayerNorm_DontUseThisOpYet")  # NOTE: the c10 port: same inputs, args and values
def layer_norm(xp, x, gamma=None, beta=None, *, axis: int = 1, epsilon: float = 1e-5, elementwise_affine: int = 0):
    # NOTE: gamma / beta (elementwise_affine) have the shape of X's dims from `axis` on.
    axis %= x.ndim
    xhat, mean, std = _normalize_rows(xp, _rowwise(x, axis), epsilon)
    if elementwise_affine:
        if gamma is None or beta is None:
            raise ValueError("LayerNorm with elementwise_affine needs the gamma and beta inputs")
        xhat = xhat * gamma.reshape(1, -1) + beta.reshape(1, -1)
    shape = x.shape[:axis] + (1,)
    return xhat.reshape(x.shape).astype(x.dtype), mean.reshape(shape).astype(x.dtype), std.reshape(shape).astype(x.dtype)


@kernel("LayerNormGradient")
def layer_norm_gradient(xp, dy, y, mean, std, x, gamma=None, *, axis: int = 1, epsilon: float = 1e-5,
                        elementwise_affine: int = 0):
    axis %= x.ndim
    x2, dy2 = _rowwise(x, axis), _rowwise(dy, axis)
    m, s = mean.reshape(-1, 1), std.reshape(-1, 1)
    xhat = (x2 - m) / s
    g = dy2 * gamma.reshape(1, -1) if gamma is not None else dy2
    dx = _normalize_rows_grad(xp, g, xhat, s).reshape(x.shape).astype(x.dtype)
    if gamma is None:
        return dx
    return dx, (dy2 * xhat).sum(axis=0).reshape(gamma.shape).astype(x.dtype), dy2.sum(axis=0).reshape(gamma.shape).astype(x.dtype)


def _per_channel(v, x, order):
    """A per-channel vector shaped to broadcast against NCHW / NHWC `x`."""
    shape = [1] * x.ndim
    shape[1 if order == "NCHW" else -1] = -1
    return v.reshape(shape)


def _channels_first(x):
    """An NHWC array viewed as NCHW (array method: NumPy and CuPy alike)."""
    return x.transpose((0, x.ndim - 1) + tuple(range(1, x.ndim - 1)))


def _instance_rows(x, order):
    """(N*C, HW) rows of per-image, per-channel values (a copy for NHWC)."""
    if order == "NCHW":
        return x.reshape(x.shape[0] * x.shape[1], int(np.prod(x.shape[2:])))
    return _channels_first(x).reshape(x.shape[0] * x.shape[-1], int(np.prod(x.shape[1:-1])))


def _from_instance_rows(xp, r, x, order):
    if order == "NCHW":
        return r.reshape(x.shape)
    return xp.ascontiguousarray(xp.moveaxis(r.reshape((x.shape[0], x.shape[-1]) + x.shape[1:-1]), 1, -1))


@kernel("InstanceNorm")
def instance_norm(xp, x, scale, bias, *, epsilon: float = 1e-5, order: str = "NCHW"):
    # NOTE: outputs Y, then (optional) the saved mean and INVERSE std, shape (N, C).
    c = x.shape[1 if order == "NCHW" else -1]
    if scale.size != c or bias.size != c:
        raise ValueError(f"InstanceNorm: scale/bias have {scale.size}/{bias.size} entries for {c} channels")
    xhat, mean, std = _normalize_rows(xp, _instance_rows(x, order), epsilon)
    y = _from_instance_rows(xp, xhat, x, order) * _per_channel(scale, x, order) + _per_channel(bias, x, order)
    n = x.shape[0]
    return y.astype(x.dtype), mean.reshape(n, c).astype(x.dtype), (1 / std).reshape(n, c).astype(x.dtype)


@kernel("InstanceNormGradient")
def instance_norm_gradient(xp, x, scale, bias, dy, mean=None, inv_std=None, *, epsilon: float = 1e-5,
                           order: str = "NCHW"):
    # NOTE: without the saved statistics (a 1-output forward) they are recomputed from X.
    x2, dy2 = _instance_rows(x, order), _instance_rows(dy, order)
    if mean is None:
        xhat, _, std = _normalize_rows(xp, x2, epsilon)
    else:
        std = 1 / inv_std.reshape(-1, 1)
        xhat = (x2 - mean.reshape(-1, 1)) / std
    n, c = x.shape[0], scale.size
    g = dy2 * xp.tile(scale, n).reshape(-1, 1)
    dx = _from_instance_rows(xp, _normalize_rows_grad(xp, g, xhat, std), x, order)
    dscale = (dy2 * xhat).sum(axis=1).reshape(n, c).sum(axis=0)
    dbias = dy2.sum(axis=1).reshape(n, c).sum(axis=0)
    return dx.astype(x.dtype), dscale.astype(x.dtype), dbias.astype(x.dtype)


def _group_rows(x, group, order):
    """(N*G, C/G*HW) rows: one per image and channel group."""
    if order == "NCHW":
        return x.reshape(x.shape[0] * group, x[:1].size // group)
    return _channels_first(x).reshape(x.shape[0] * group, x[:1].size // group)


@kernel("GroupNorm")
def group_norm(xp, x, gamma, beta, *, group: int = 32, epsilon: float = 1e-5, order: str = "NCHW"):
    # NOTE: the argument is `group`; outputs Y, the mean and the INVERSE std, shape (N, G).
    c = x.shape[1 if order == "NCHW" else -1]
    if c % group:
        raise ValueError(f"GroupNorm: {c} channels do not split into {group} groups")
    xhat, mean, std = _normalize_rows(xp, _group_rows(x, group, order), epsilon)
    y = _from_instance_rows(xp, xhat, x, order) * _per_channel(gamma, x, order) + _per_channel(beta, x, order)
    n = x.shape[0]
    return y.astype(x.dtype), mean.reshape(n, group).astype(x.dtype), (1 / std).reshape(n, group).astype(x.dtype)


@kernel("GroupNormGradient")
def group_norm_gradient(xp, dy, x, gamma, beta, mean, inv_std, *, group: int = 32, epsilon: float = 1e-5,
                        order: str = "NCHW"):
    x2, dy2 = _group_rows(x, group, order), _group_rows(dy, group, order)
    s = 1 / inv_std.reshape(-1, 1)
    xhat = (x2 - mean.reshape(-1, 1)) / s
    n, c = x.shape[0], gamma.size
    gam = xp.tile(xp.repeat(gamma, dy2.shape[1] // (c // group)), n).reshape(dy2.shape) if order == "NCHW" else \
        _group_rows(xp.broadcast_to(_per_channel(gamma, x, order), x.shape), group, order)
    dx = _from_instance_rows(xp, _normalize_rows_grad(xp, dy2 * gam, xhat, s), x, order)
    xh = _from_instance_rows(xp, xhat, x, order)
    axes = tuple(a for a in range(x.ndim) if a != (1 if order == "NCHW" else x.ndim - 1))
    return dx.astype(x.dtype), (dy * xh).sum(axis=axes).astype(x.dtype), dy.sum(axis=axes).astype(x.dtype)


@kernel("RMSNorm")
def rms_norm(xp, x, gamma, beta, *, axis: int = 1, eps: float = 0.0):
    # NOTE: Y = X * rrms * gamma + beta, rrms = 1 / sqrt(mean(X^2) + eps) per row (2nd output).
    axis %= x.ndim
    x2 = _rowwise(x, axis)
    # NOTE: the argument read is `eps` (default 0), not the `epsilon` the schema documents.
    rrms = 1 / xp.sqrt((x2 * x2).mean(axis=1, keepdims=True) + x.dtype.type(eps))
    y = x2 * rrms * gamma.reshape(1, -1) + beta.reshape(1, -1)
    return y.reshape(x.shape).astype(x.dtype), rrms.reshape(x.shape[:axis]).astype(x.dtype)


@kernel("RMSNormGradient")
def rms_norm_gradient(xp, dy, x, gamma, rrms, *, axis: int = 1):
    axis %= x.ndim
    x2, dy2, r = _rowwise(x, axis), _rowwise(dy, axis), rrms.reshape(-1, 1)
    g = dy2 * gamma.reshape(1, -1)
    dx = r * (g - x2 * r * r * (g * x2).mean(axis=1, keepdims=True))
    return (dx.reshape(x.shape).astype(x.dtype), (dy2 * x2 * r).sum(axis=0).reshape(gamma.shape).astype(x.dtype),
            dy2.sum(axis=0).reshape(gamma.shape).astype(x.dtype))


@kernel("AffineChannel")
def affine_channel(xp, x, scale, bias, *, order: str = "NCHW", is_learnable: int = 0):
    return (x * _per_channel(scale, x, order) + _per_channel(bias, x, order)).astype(x.dtype)


@kernel("AffineChannelGradient")
def affine_channel_gradient(xp, dy, *rest, order: str = "NCHW", is_learnable: int = 0):
    # NOTE: [dY, scale] -> dX; learnable: [dY, X, scale] -> dX, dscale, dbias.
    scale = rest[-1]
    dx = (dy * _per_channel(scale, dy, order)).astype(dy.dtype)
    if not is_learnable:
        return dx
    axes = tuple(a for a in range(dy.ndim) if a != (1 if order == "NCHW" else dy.ndim - 1))
    return dx, (dy * rest[0]).sum(axis=axes).astype(dy.dtype), dy.sum(axis=axes).astype(dy.dtype)


@kernel("ChannelStats")
def channel_stats(xp, x, *, order: str = "NCHW"):
    axes, _ = _channel_view(x, order)
    return _channel_sum(xp, x, axes, order).astype(x.dtype), _channel_sum(xp, x * x, axes, order).astype(x.dtype)


@kernel("ChannelBackpropStats")
def channel_backprop_stats(xp, x, mean, inv_std, dy, *, order: str = "NCHW"):
    # NOTE: dscale = sum dY * (X - mean) * inv_std, dbias = sum dY, per channel.
    axes, bshape = _channel_view(x, order)
    xhat = (x - mean.reshape(bshape)) * inv_std.reshape(bshape)
    return _channel_sum(xp, dy * xhat, axes, order).astype(x.dtype), _channel_sum(xp, dy, axes, order).astype(x.dtype)


@kernel("NormalizePlanarYUV")
def normalize_planar_yuv(xp, x, mean, std):
    # NOTE: NCHW; mean and std hold one value per channel, shape (1, C).
    return ((x - _per_channel(mean, x, "NCHW")) / _per_channel(std, x, "NCHW")).astype(x.dtype)


@kernel("ChannelShuffle")
def channel_shuffle(xp, x, *, group: int = 1, order: str = "NCHW"):
    c_axis = 1 if order == "NCHW" else x.ndim - 1
    c = x.shape[c_axis]
    s = x.reshape(x.shape[:c_axis] + (group, c // group) + x.shape[c_axis + 1:])
    return xp.swapaxes(s, c_axis, c_axis + 1).reshape(x.shape)


@kernel("ChannelShuffleGradient")
def channel_shuffle_gradient(xp, dy, *, group: int = 1, order: str = "NCHW"):
    c = dy.shape[1 if order == "NCHW" else -1]
    return channel_shuffle(xp, dy, group=c // group, order=order)


jit.serves("norm", spatial_bn, spatial_bn_gradient)  # whole runs load norm_jit first (jit.load_for)

# ---- gradients ----

@gradient("SpatialBN")
@cc_maker
def spatial_bn_gradient_maker(g):
    """Training reads saved mean / inv-var (O3, O4); ``is_test`` reads the running stats (I3, I4)."""
    outs = [g.GI(0), g.GI(1), g.GI(2)]
    if g.arg("is_test", 0):
        ins = [g.I(0), g.I(1), g.GO(0), g.I(3), g.I(4)]
    elif g.arg("num_batches", 1) > 1:
        ins = [g.I(0), g.I(1), g.GO(0), g.O(3), g.O(4), outs[1], outs[2]]
    else:
        ins = [g.I(0), g.I(1), g.GO(0), g.O(3), g.O(4)]
    return [g.op_("SpatialBNGradient", ins, outs)]


@gradient("Dropout")
@cc_maker
def dropout_gradient(g):
    """Named ``DropoutGrad``; training reads the mask O1."""
    ins = [g.GO(0)] if g.arg("is_test", 0) else [g.GO(0), g.O(1)]
    return [g.op_("DropoutGrad", ins, [g.GI(0)])]


gradient("LRN")(simple("LRNGradient", "I0 O0 GO0", "GI0"))
gradient("ChannelShuffle")(simple("ChannelShuffleGradient", "GO0", "GI0"))


@gradient("LayerNorm")
@cc_maker
def layer_norm_gradient_maker(g):
    """With ``elementwise_affine`` the gamma input is read and gamma/beta get gradients (the argument
    decides, not the input count)."""
    if g.arg("elementwise_affine", 0):
        return [g.op_("LayerNormGradient", [g.GO(0), g.O(0), g.O(1), g.O(2), g.I(0), g.I(1)],
                      [g.GI(0), g.GI(1), g.GI(2)])]
    return [g.op_("LayerNormGradient", [g.GO(0), g.O(0), g.O(1), g.O(2), g.I(0)], [g.GI(0)])]


@gradient("InstanceNorm")
@cc_maker
def instance_norm_gradient_maker(g):
    """The saved mean / inverse std are read when the forward op wrote them."""
    saved = [g.O(1), g.O(2)] if len(g.op.output) == 3 else []
    return [g.op_("InstanceNormGradient", [g.I(0), g.I(1), g.I(2), g.GO(0), *saved], [g.GI(0), g.GI(1), g.GI(2)])]


@gradient("AffineChannel")
@cc_maker
def affine_channel_gradient_maker(g):
    if g.arg("is_learnable", 0):
        return [g.op_("AffineChannelGradient", [g.GO(0), g.I(0), g.I(1)], [g.GI(0), g.GI(1), g.GI(2)])]
    return [g.op_("AffineChannelGradient", [g.GO(0), g.I(1)], [g.GI(0)])]


gradient("GroupNorm")(simple("GroupNormGradient", "GO0 I0 I1 I2 O1 O2", "GI0 GI1 GI2"))
gradient("RMSNorm")(simple("RMSNormGradient", "GO0 I0 I1 O1", "GI0 GI1 GI2"))
should_not_do_gradient("ChannelStats", "ChannelBackpropStats")


# ---- shapes ----

@shape("SpatialBN")
def spatial_bn_shape(x, scale, *_, order: str = "NCHW"):
    # NOTE: training mode adds running mean/var, saved mean and saved inverse std, one per channel.
    c = split_layout(x.shape, order)[1] if x.shape is not None else scale.shape[0] if scale.shape else None
    per_channel = TensorInfo((c,), x.dtype)
    return x, per_channel, per_channel, per_channel, per_channel


shape("SpatialBNGradient")(same_as(0, 1, 1))  # [X, scale, dY, …] -> dX, dscale, dbias
shape("LRN")(same_as(0, 0))  # Y and the scale
shape("LRNGradient", "ChannelShuffle", "ChannelShuffleGradient", "DropoutGrad")(same_as(0))


@shape("Dropout")
def dropout_shape(x):
    return x, TensorInfo(x.shape, BOOL)


@shape("LayerNorm")
def layer_norm_shape(x, *_, axis: int = 1):
    xd = dims(x)
    stats = TensorInfo((*xd[:norm_axis(axis, len(xd))], 1), x.dtype)
    return x, stats, stats


@shape("LayerNormGradient")
def layer_norm_gradient_shape(dy, y, mean, std, x, gamma=None):
    return (x,) if gamma is None else (x, gamma, gamma)


@shape("InstanceNorm")
def instance_norm_shape(x, scale, bias, *, order: str = "NCHW"):
    n, c, _ = split_layout(dims(x), order)
    return x, TensorInfo((n, c), x.dtype), TensorInfo((n, c), x.dtype)


@shape("GroupNorm")
def group_norm_shape(x, gamma, beta, *, group: int = 32, order: str = "NCHW"):
    stats = TensorInfo((dims(x)[0], group), x.dtype)
    return x, stats, stats


@shape("RMSNorm")
def rms_norm_shape(x, gamma, beta, *, axis: int = 1):
    xd = dims(x)
    return x, TensorInfo(xd[:norm_axis(axis, len(xd))], x.dtype)


shape("InstanceNormGradient")(same_as(0, 1, 2))  # [X, scale, bias, dY, …] -> dX, dscale, dbias
shape("GroupNormGradient", "RMSNormGradient")(same_as(1, 2, 2))  # [dY, X, gamma, …]
shape("AffineChannel", "NormalizePlanarYUV")(same_as(0))
shape("ChannelStats")(lambda x, *, order="NCHW": (TensorInfo((split_layout(dims(x), order)[1],), x.dtype),) * 2)
shape("ChannelBackpropStats")(same_as(1, 1))  # per-channel, like the mean input


@shape("AffineChannelGradient")
def affine_channel_gradient_shape(dy, *rest, is_learnable: int = 0):
    return (dy, rest[-1], rest[-1]) if is_learnable else (dy,)


# ---- onnx ----
from engine.catalogue.registry import onnx_converter  # noqa: E402


@onnx_converter("SpatialBN")
def spatial_bn_onnx(c):
    """Test-mode SpatialBN is ONNX BatchNormalization with Caffe2's epsilon (momentum only moves the
    running statistics, which test mode leaves); training mode updates them: refused."""
    if not c.arg("is_test", 0) or c.n_out > 1:
        return _spatial_bn_train_onnx(c)
    r = c.rank(0)
    y = c.y_nchw(0)
    c.emit("BatchNormalization", [c.x_nchw(0)] + [c.x(i) for i in range(1, 5)], [y],
           epsilon=float(c.arg("epsilon", 1e-5)))
    c.done_nchw(0, y, r)


def _spatial_bn_train_onnx(c):
    """Training SpatialBN spelled out: the batch's per-channel mean and biased variance normalise X;
    the running mean and variance move by `momentum` towards the batch's mean and UNBIASED variance
    (as Caffe2 1.10.2); outputs 4 and 5 are the batch mean and inverse std.  The multi-batch form
    (num_batches > 1, from running sums) is refused."""
    if c.arg("num_batches", 1) > 1 or c.n_in > 5:
        raise c.refuse("num_batches > 1 (statistics from summed inputs)")
    r, x = c.rank(0), c.x_nchw(0)
    shape = c.shape(0) if c.nchw else (c.shape(0)[0], c.shape(0)[-1], *c.shape(0)[1:-1])
    if int(np.prod(shape)) == 0:
        raise c.refuse("an empty batch")
    axes, per = [0, *range(2, r)], c.ints([1, -1] + [1] * (r - 2))
    mean = c.reduce("ReduceMean", x, axes)
    centred = c.emit("Sub", [x, mean])
    var = c.reduce("ReduceMean", c.emit("Mul", [centred, centred]), axes)
    inv = c.emit("Reciprocal", [c.emit("Sqrt", [c.emit("Add", [var, c.const(np.float32(c.arg("epsilon", 1e-5)), "eps")])])])
    y = c.y_nchw(0)
    scaled = c.emit("Mul", [centred, c.emit("Mul", [inv, c.emit("Reshape", [c.x(1), per])])])
    c.emit("Add", [scaled, c.emit("Reshape", [c.x(2), per])], [y])
    c.done_nchw(0, y, r)
    m = float(c.arg("momentum", 0.9))
    cnt = int(np.prod(shape)) // shape[1]
    flat = lambda v: c.emit("Reshape", [v, c.ints([-1])])  # noqa: E731
    unbiased = c.emit("Mul", [flat(var), c.const(np.float32(cnt / max(cnt - 1, 1)), "unbias")])
    for k, (run, batch) in enumerate(((c.x(3), flat(mean)), (c.x(4), unbiased)), start=1):
        if k < c.n_out:
            c.emit("Add", [c.emit("Mul", [run, c.const(np.float32(m), "momentum")]),
                           c.emit("Mul", [batch, c.const(np.float32(1 - m), "rest")])], [c.y(k)])
    if c.n_out > 3:
        c.emit("Identity", [flat(mean)], [c.y(3)])
    if c.n_out > 4:
        c.emit("Identity", [flat(inv)], [c.y(4)])


@onnx_converter("LRN")
def lrn_onnx(c):
    """ONNX LRN has Caffe2's formula (centred window, alpha / size); Caffe2's second output, the
    scale, is rebuilt as bias + alpha / size * (window sum of X², a ones-kernel Conv over channels)."""
    size = int(c.arg("size", 1))
    r = c.rank(0)
    x = c.x_nchw(0)
    args = dict(size=size, alpha=float(c.arg("alpha", 0.0)), beta=float(c.arg("beta", 0.0)), bias=float(c.arg("bias", 1.0)))
    if size % 2 == 0:
        raise c.refuse(f"even size {size} (ONNX LRN centres its window differently)")
    y = c.y_nchw(0)
    c.emit("LRN", [x], [y], **args)
    c.done_nchw(0, y, r)
    if c.n_out > 1:
        n, ch = c.shape(0)[0], c.shape(0)[1 if c.nchw else -1]
        sq = c.emit("Mul", [x, x])
        col = c.emit("Reshape", [sq, c.ints([n, 1, ch, -1])])
        pre = (size - 1) // 2
        win = c.emit("Conv", [col, c.const(np.ones((1, 1, size, 1), np.float32), "ones")], kernel_shape=[size, 1],
                     pads=[pre, 0, size - 1 - pre, 0])
        s = c.emit("Reshape", [win, c.shape_of(x)])
        s = c.emit("Mul", [s, c.const(np.float32(args["alpha"] / size), "alpha")])
        s2 = c.y_nchw(1)
        c.emit("Add", [s, c.const(np.float32(args["bias"]), "bias")], [s2])
        c.done_nchw(1, s2, r)


@onnx_converter("Dropout")
def dropout_onnx(c):
    """Test-mode Dropout passes X through; its mask output is all true (as Caffe2's)."""
    if not c.arg("is_test", 0) and c.arg("ratio", 0.5) != 0:
        raise c.refuse("training mode (is_test 0) draws a random mask; export the test net")
    c.emit("Identity", [c.x(0)], [c.y(0)])
    if c.n_out > 1:
        c.emit("ConstantOfShape", [c.shape_of(c.x(0))], [c.y(1)], value=c.tensor(np.array([True])))


@onnx_converter("AffineChannel")
def affine_channel_onnx(c):
    """Y = X * scale + bias per channel: the vectors reshaped to broadcast over NCHW (or NHWC) dims."""
    r = c.rank(0)
    per = [-1] + [1] * (r - 2) if c.nchw else [-1]
    s = c.emit("Reshape", [c.x(1), c.ints(per)])
    b = c.emit("Reshape", [c.x(2), c.ints(per)])
    c.emit("Add", [c.emit("Mul", [c.x(0), s]), b], [c.y(0)])


@onnx_converter("ChannelShuffle")
def channel_shuffle_onnx(c):
    """Reshape to (N, group, C / group, ...), swap the two, reshape back (NCHW; NHWC transposed)."""
    g = int(c.arg("group", 1))
    x = c.x_nchw(0)
    s = list(c.shape(0)) if c.nchw else [c.shape(0)[0], c.shape(0)[-1], *c.shape(0)[1:-1]]
    t = c.emit("Reshape", [x, c.ints([s[0], g, s[1] // g, *s[2:]])])
    t = c.emit("Transpose", [t], perm=[0, 2, 1, *range(3, len(s) + 1)])
    y = c.y_nchw(0)
    c.emit("Reshape", [t, c.ints(s)], [y])
    c.done_nchw(0, y, len(s))


@onnx_converter("LayerNorm")
def layer_norm_onnx(c):
    """Rows split at `axis` normalised with the biased variance: mean and std = sqrt(var + eps)
    (Caffe2's second and third outputs, shape X.shape[:axis] + (1,)), then gamma / beta."""
    r = c.rank(0)
    axis = c.arg("axis", 1) % r
    x2 = c.rows(c.x(0), axis, r)
    mean = c.reduce("ReduceMean", x2, [1])
    centred = c.emit("Sub", [x2, mean])
    var = c.reduce("ReduceMean", c.emit("Mul", [centred, centred]), [1])
    std = c.emit("Sqrt", [c.emit("Add", [var, c.const(np.array(c.arg("epsilon", 1e-5), c.np_dtype(0)), "eps")])])
    y = c.emit("Div", [centred, std])
    if c.arg("elementwise_affine", 0):
        y = c.emit("Add", [c.emit("Mul", [y, c.emit("Reshape", [c.x(1), c.ints([1, -1])])]),
                           c.emit("Reshape", [c.x(2), c.ints([1, -1])])])
    c.emit("Reshape", [y, c.shape_of(c.x(0))], [c.y(0)])
    stats = c.ints(list(c.shape(0)[:axis]) + [1])
    if c.n_out > 1:
        c.emit("Reshape", [mean, stats], [c.y(1)])
    if c.n_out > 2:
        c.emit("Reshape", [std, stats], [c.y(2)])


@onnx_converter("InstanceNorm")
def instance_norm_onnx(c):
    """ONNX InstanceNormalization (biased variance, epsilon); Caffe2's optional mean and inverse-std
    outputs (N x C) recomputed beside it."""
    r = c.rank(0)
    x = c.x_nchw(0)
    y = c.y_nchw(0)
    eps = float(c.arg("epsilon", 1e-5))
    c.emit("InstanceNormalization", [x, c.x(1), c.x(2)], [y], epsilon=eps)
    c.done_nchw(0, y, r)
    if c.n_out > 1:
        n, ch = (c.shape(0)[0], c.shape(0)[1 if c.nchw else -1])
        rows = c.emit("Reshape", [x, c.ints([n * ch, -1])])
        mean = c.reduce("ReduceMean", rows, [1])
        c.emit("Reshape", [mean, c.ints([n, ch])], [c.y(1)])
        if c.n_out > 2:
            centred = c.emit("Sub", [rows, mean])
            var = c.reduce("ReduceMean", c.emit("Mul", [centred, centred]), [1])
            inv = c.emit("Reciprocal", [c.emit("Sqrt", [c.emit("Add", [var, c.const(np.float32(eps), "eps")])])])
            c.emit("Reshape", [inv, c.ints([n, ch])], [c.y(2)])
