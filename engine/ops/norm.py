"""Normalisation and regularisation: SpatialBN, LRN, LayerNorm, Dropout, ChannelShuffle."""
from __future__ import annotations

import numpy as np

from engine import parallel
from engine.grad_makers import cc_maker, simple
from engine.registry import gradient, kernel
from engine.registry import shape
from engine.shapes import BOOL, TensorInfo, dims, norm_axis, same_as, split_layout

# ---- kernels ----

def _channel_view(x, order):
    """(reduce axes, broadcast shape) for per-channel statistics of an NCHW/NHWC tensor."""
    c_axis = 1 if order == "NCHW" else x.ndim - 1
    shape = [1] * x.ndim
    shape[c_axis] = x.shape[c_axis]
    return tuple(a for a in range(x.ndim) if a != c_axis), tuple(shape)


def _channel_sum(xp, t, axes, order):
    """Per-channel sum; NCHW as (N, C, HW) rows so NumPy sums each contiguous row pairwise."""
    if order == "NCHW" and t.ndim > 2 and t.flags.c_contiguous:
        return t.reshape(t.shape[0], t.shape[1], -1).sum(axis=2).sum(axis=0)
    return t.sum(axis=axes)


@kernel("SpatialBN")
def spatial_bn(xp, x, scale, bias, mean, var, *, is_test: int = 0, epsilon: float = 1e-5,
               momentum: float = 0.9, order: str = "NCHW"):
    axes, bshape = _channel_view(x, order)
    if is_test:  # NOTE: y = x * a + c with per-channel a, c: two passes over x, no temporaries.
        a = (scale / xp.sqrt(var + x.dtype.type(epsilon))).astype(x.dtype)
        a, c = a.reshape(bshape), (bias - mean * a).astype(x.dtype).reshape(bshape)
        if xp is not np or x.nbytes < parallel.MIN_BYTES:
            y = xp.multiply(x, a, dtype=x.dtype)
            return xp.add(y, c, out=y)
        y = np.empty(x.shape, x.dtype)

        def part(t):  # both passes on one cache-sized block, blocks over both cores
            np.multiply(t(x), t(a), out=t(y), dtype=x.dtype)
            np.add(t(y), t(c), out=t(y))
        parallel.split(part, x.shape, x.nbytes)
        return y
    # NOTE: the 5th output is the batch's inverse std (biased variance); the running variance is
    # updated with the UNBIASED batch variance (checked against Caffe2 1.10.2).
    if xp is np and order == "NCHW" and x.ndim > 2 and x.flags.c_contiguous and x.nbytes >= parallel.MIN_BYTES:
        return _spatial_bn_train_blocks(x, scale, bias, mean, var, epsilon, momentum)
    bm = _channel_sum(xp, x, axes, order) / x.dtype.type(x.size // x.shape[1 if order == "NCHW" else -1])
    y = xp.subtract(x, bm.reshape(bshape), dtype=x.dtype)  # centred x, turned into y in place below
    bv = _channel_sum(xp, xp.square(y), axes, order) / x.dtype.type(x.size // bm.size)
    inv = (1 / xp.sqrt(bv + epsilon)).astype(x.dtype)
    xp.multiply(y, (inv * scale).astype(x.dtype).reshape(bshape), out=y)
    xp.add(y, bias.astype(x.dtype).reshape(bshape), out=y)
    m, n = x.dtype.type(momentum), x.size // bm.size
    unbiased = bv * (n / max(n - 1, 1))
    return (y, (mean * m + bm * (1 - m)).astype(x.dtype),
            (var * m + unbiased * (1 - m)).astype(x.dtype), bm.astype(x.dtype), inv)


def _spatial_bn_train_blocks(x, scale, bias, mean, var, epsilon, momentum):
    """Training SpatialBN on blocks of channels over both cores (engine.parallel): each block owns
    its channels' statistics, computed exactly as the single-call path does (same sums, same order)."""
    (n, c), dt = x.shape[:2], x.dtype
    cnt = x.size // c
    y, bm, bv = np.empty(x.shape, dt), np.empty((1, c), dt), np.empty((1, c), dt)
    sc, bi = scale.reshape(1, c), bias.reshape(1, c)

    def part(t):
        xb, yb = t(x), t(y)
        cb, bsh = xb.shape[1], (1, xb.shape[1]) + (1,) * (x.ndim - 2)
        m = xb.reshape(n, cb, -1).sum(axis=2).sum(axis=0) / dt.type(cnt)
        np.subtract(xb, m.reshape(bsh), out=yb, dtype=dt)
        v = np.square(yb).reshape(n, cb, -1).sum(axis=2).sum(axis=0) / dt.type(cnt)
        inv = (1 / np.sqrt(v + epsilon)).astype(dt)
        np.multiply(yb, (inv * t(sc)[0]).astype(dt).reshape(bsh), out=yb)
        np.add(yb, t(bi)[0].astype(dt).reshape(bsh), out=yb)
        t(bm)[0], t(bv)[0] = m, v
    parallel.split(part, x.shape, x.nbytes, axis=1)
    bm, bv = bm[0], bv[0]
    inv = (1 / np.sqrt(bv + epsilon)).astype(dt)
    mo = dt.type(momentum)
    unbiased = bv * (cnt / max(cnt - 1, 1))
    return (y, (mean * mo + bm * (1 - mo)).astype(dt), (var * mo + unbiased * (1 - mo)).astype(dt), bm.astype(dt), inv)


@kernel("SpatialBNGradient")
def spatial_bn_gradient(xp, x, scale, dy, mean, inv_std, *_pre, is_test: int = 0, epsilon: float = 1e-5,
                        order: str = "NCHW"):
    axes, bshape = _channel_view(x, order)
    if is_test:  # NOTE: inputs 3/4 are the running mean and VARIANCE here; stats are constants.
        inv_std = 1 / xp.sqrt(inv_std + x.dtype.type(epsilon))
    dt = x.dtype
    if xp is np and not is_test and order == "NCHW" and x.ndim > 2 and x.flags.c_contiguous \
            and dy.flags.c_contiguous and x.nbytes >= parallel.MIN_BYTES:
        return _spatial_bn_gradient_blocks(x, scale, dy, mean, inv_std)
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


def _spatial_bn_gradient_blocks(x, scale, dy, mean, inv_std):
    """Training SpatialBNGradient on blocks of channels over both cores, same passes as the single call."""
    (n, c), dt = x.shape[:2], x.dtype
    cnt = x.size // c
    dx, ds, db = np.empty(x.shape, dt), np.empty((1, c), dt), np.empty((1, c), dt)
    per = [a.reshape(1, c) for a in (scale, mean, inv_std)]

    def part(t):
        xb, dyb, xhat = t(x), t(dy), t(dx)
        cb = xb.shape[1]
        bsh = (1, cb) + (1,) * (x.ndim - 2)
        sc, mu, inv = (t(a)[0] for a in per)
        np.subtract(xb, mu.reshape(bsh), out=xhat, dtype=dt)
        np.multiply(xhat, inv.astype(dt).reshape(bsh), out=xhat)
        dbias = dyb.reshape(n, cb, -1).sum(axis=2).sum(axis=0)
        dscale = (dyb * xhat).reshape(n, cb, -1).sum(axis=2).sum(axis=0)
        k = (sc * inv).astype(dt)
        np.multiply(xhat, (dscale / cnt).astype(dt).reshape(bsh), out=xhat)
        np.add(xhat, (dbias / cnt).astype(dt).reshape(bsh), out=xhat)
        np.subtract(dyb, xhat, out=xhat, dtype=dt)
        np.multiply(xhat, k.reshape(bsh), out=xhat)
        t(ds)[0], t(db)[0] = dscale, dbias
    parallel.split(part, x.shape, x.nbytes, axis=1)
    return dx, ds[0].astype(dt), db[0].astype(dt)


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


@kernel("LayerNorm")
def layer_norm(xp, x, *, axis: int = 1, epsilon: float = 1e-5):
    axis %= x.ndim
    x2 = x.reshape(int(np.prod(x.shape[:axis])), -1)
    mean = x2.mean(axis=1, keepdims=True)
    std = xp.sqrt(x2.var(axis=1, keepdims=True) + epsilon)
    shape = x.shape[:axis] + (1,)
    return ((x2 - mean) / std).reshape(x.shape).astype(x.dtype), mean.reshape(shape), std.reshape(shape)


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
def layer_norm_gradient(g):
    """With ``elementwise_affine`` the gamma input is read and gamma/beta get gradients."""
    if len(g.op.input) == 3:
        return [g.op_("LayerNormGradient", [g.GO(0), g.O(0), g.O(1), g.O(2), g.I(0), g.I(1)],
                      [g.GI(0), g.GI(1), g.GI(2)])]
    return [g.op_("LayerNormGradient", [g.GO(0), g.O(0), g.O(1), g.O(2), g.I(0)], [g.GI(0)])]


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
def layer_norm_shape(x, *, axis: int = 1):
    xd = dims(x)
    stats = TensorInfo((*xd[:norm_axis(axis, len(xd))], 1), x.dtype)
    return x, stats, stats
