"""Convolutions (im2col + GEMM): Conv, Conv1D/2D/3D, ConvTranspose."""
from __future__ import annotations

import inspect
import itertools

import numpy as np

from engine.grad_makers import cc_maker
from engine.registry import gradient, kernel
from engine.registry import shape
from engine.errors import ShapeError
from engine.shapes import UNKNOWN, TensorInfo, dims, join_layout, spatial_out, split_layout

# ---- kernels ----

GEOMETRY = dict(kernel=0, kernels=None, kernel_h=0, kernel_w=0, stride=1, strides=None, stride_h=0, stride_w=0,
                pad=0, pads=None, pad_t=0, pad_l=0, pad_b=0, pad_r=0, dilation=1, dilations=None,
                dilation_h=0, dilation_w=0, order="NCHW", global_pooling=0)


def geometry_args(fn):
    """Give `fn` (declared with ``**g``) the conv/pool geometry args as keyword-only parameters."""
    sig = inspect.signature(fn)
    ps = [p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD]
    ps += [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=v) for k, v in GEOMETRY.items()]
    fn.__signature__ = sig.replace(parameters=ps)
    return fn


def geometry(nd, g, kshape=()):
    """(kernel, stride, pad_begin, pad_end, dilation) per spatial dim from Caffe2's many arg spellings."""
    def pick(one, many, hw, default):
        if g[many]:
            return [int(v) for v in g[many]]
        if nd == 2 and any(g[k] for k in hw):
            return [int(g[k] or default) for k in hw]
        return [int(g[one] or default)] * nd
    k = pick("kernel", "kernels", ("kernel_h", "kernel_w"), 0)
    if not any(k):
        k = list(kshape)
    s = pick("stride", "strides", ("stride_h", "stride_w"), 1)
    d = pick("dilation", "dilations", ("dilation_h", "dilation_w"), 1)
    if g["pads"]:
        p = [int(v) for v in g["pads"]]
    elif nd == 2 and any(g[k_] for k_ in ("pad_t", "pad_l", "pad_b", "pad_r")):
        p = [g["pad_t"], g["pad_l"], g["pad_b"], g["pad_r"]]
    else:
        p = [int(g["pad"])] * (2 * nd)
    return k, s, p[:nd], p[nd:], d


def to_nchw(x, order):
    return x if order == "NCHW" else x.transpose(0, x.ndim - 1, *range(1, x.ndim - 1))


def from_nchw(x, order):
    return x if order == "NCHW" else x.transpose(0, *range(2, x.ndim), 1)


def windows(xp, x, k, s, pb, pe, d, pad_value=0.0):
    """View (N, C, *out, *k) of NCHW `x`, padded, one entry per window position (no copy beyond the pad)."""
    if any(pb) or any(pe):
        x = xp.pad(x, ((0, 0), (0, 0), *zip(pb, pe)), constant_values=pad_value)
    nd = len(k)
    out = tuple((x.shape[2 + i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(nd))
    st = x.strides
    return xp.lib.stride_tricks.as_strided(
        x, x.shape[:2] + out + tuple(k),
        st[:2] + tuple(st[2 + i] * s[i] for i in range(nd)) + tuple(st[2 + i] * d[i] for i in range(nd)))


def bmm(xp, a, b):
    """Batched, broadcasting matmul; on NumPy one BLAS GEMM per batch entry (np.matmul's
    broadcasting path bypasses BLAS and is several times slower)."""
    if xp is not np:
        return xp.matmul(a, b)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a, b = np.broadcast_to(a, batch + a.shape[-2:]), np.broadcast_to(b, batch + b.shape[-2:])
    out = np.empty(batch + (a.shape[-2], b.shape[-1]), dtype=np.result_type(a, b))
    for i in np.ndindex(batch):
        np.matmul(a[i], b[i], out=out[i])
    return out


def im2col(xp, x, k, s, pb, pe, d, group):
    """(N, G, C/G * prod(k), P) columns of NCHW `x`, and the output spatial shape."""
    n, c = x.shape[:2]
    if all(v == 1 for v in (*k, *s)) and not any(pb) and not any(pe):
        return x.reshape(n, group, c // group, -1), x.shape[2:]  # NOTE: 1x1 stride-1 conv is a plain GEMM.
    win = windows(xp, x, k, s, pb, pe, d)
    nd = len(k)
    out = win.shape[2:2 + nd]
    cols = win.transpose(0, 1, *range(2 + nd, 2 + 2 * nd), *range(2, 2 + nd))
    return cols.reshape(n, group, (c // group) * int(np.prod(k)), -1), out


def col2im(xp, cols, xshape, k, s, pb, pe, d, out):
    """Adjoint of im2col: scatter-add (N, C, *k, *out) columns into an NCHW array of `xshape`."""
    nd = len(k)
    padded = xshape[:2] + tuple(xshape[2 + i] + pb[i] + pe[i] for i in range(nd))
    dx = xp.zeros(padded, dtype=cols.dtype)
    for pos in itertools.product(*(range(v) for v in k)):
        sl = tuple(slice(p * d[i], p * d[i] + s[i] * (out[i] - 1) + 1, s[i]) for i, p in enumerate(pos))
        dx[(slice(None), slice(None)) + sl] += cols[(slice(None), slice(None)) + pos]
    return dx[(slice(None), slice(None)) + tuple(slice(pb[i], pb[i] + xshape[2 + i]) for i in range(nd))]


@kernel("Conv", "Conv1D", "Conv2D", "Conv3D")
@geometry_args
def conv(xp, x, w, b=None, *, group: int = 1, **g):
    x, w = to_nchw(x, g["order"]), to_nchw(w, g["order"])
    k, s, pb, pe, d = geometry(x.ndim - 2, g, w.shape[2:])
    cols, out = im2col(xp, x, k, s, pb, pe, d, group)
    m = w.shape[0]
    y = bmm(xp, w.reshape(group, m // group, -1), cols).reshape((x.shape[0], m) + tuple(out))
    if b is not None:
        y += b.reshape((m,) + (1,) * len(out))
    return from_nchw(y, g["order"])


@kernel("ConvGradient", "Conv1DGradient", "Conv2DGradient", "Conv3DGradient", needs_context=True)
@geometry_args
def conv_gradient(xp, x, w, dy, *, ctx, group: int = 1, no_bias: int = 0, **g):
    # NOTE: outputs are [dW, db, dX] (or [dW, dX] with no_bias=1), dX omitted when not asked for.
    order = g["order"]
    x, w, dy = to_nchw(x, order), to_nchw(w, order), to_nchw(dy, order)
    k, s, pb, pe, d = geometry(x.ndim - 2, g, w.shape[2:])
    cols, out = im2col(xp, x, k, s, pb, pe, d, group)
    n, m = dy.shape[:2]
    dy3 = dy.reshape(n, group, m // group, -1)
    dw = bmm(xp, dy3, cols.transpose(0, 1, 3, 2)).sum(axis=0).reshape(w.shape)
    res = [from_nchw(dw, order)] + ([] if no_bias else [dy.sum(axis=tuple(i for i in range(dy.ndim) if i != 1))])
    if len(ctx.op.output) > len(res):
        dcols = bmm(xp, w.reshape(group, m // group, -1).transpose(0, 2, 1), dy3)
        dcols = dcols.reshape((n, x.shape[1]) + tuple(k) + tuple(out))
        if dcols.shape[2:2 + len(k)] == (1,) * len(k) and all(v == 1 for v in s) and not any(pb + pe):
            dx = dcols.reshape(x.shape)
        else:
            dx = col2im(xp, dcols, x.shape, k, s, pb, pe, d, out)
        res.append(from_nchw(xp.ascontiguousarray(dx), order))
    return tuple(res)


# ---- gradients ----

@gradient("Conv", "Conv1D", "Conv2D", "Conv3D", "ConvTranspose")
@cc_maker
def conv_gradient(g):
    """[I0, I1, GO0] -> [GI1, (GI2), (GI0)]; 2 inputs add ``no_bias=1``; ``no_gradient_to_input`` drops GI0."""
    ins, outs = [g.I(0), g.I(1), g.GO(0)], [g.GI(1)] + ([g.GI(2)] if len(g.op.input) == 3 else [])
    if not g.arg("no_gradient_to_input", 0):
        outs.append(g.GI(0))
    return [g.op_(g.type + "Gradient", ins, outs, **({"no_bias": 1} if len(g.op.input) == 2 else {}))]


# ---- shapes ----

@shape("Conv", "Conv1D", "Conv2D", "Conv3D")
@geometry_args
def conv_shape(x, w, b=None, *, group: int = 1, **g):
    n, c, sp = split_layout(dims(x), g["order"])
    wd = w.shape
    m, wc, kshape = split_layout(wd, g["order"]) if wd is not None else (None, None, (None,) * len(sp))
    if m is None and b is not None and b.shape is not None:
        m = b.shape[0]
    if None not in (c, wc) and c != wc * group:
        raise ShapeError(f"input has {c} channels, filter expects {wc} x group {group}")
    k, s, pb, pe, d = geometry(len(sp), g, kshape)
    return TensorInfo(join_layout(n, m, spatial_out(sp, k, s, pb, pe, d), g["order"]), x.dtype)


@shape("ConvGradient", "Conv1DGradient", "Conv2DGradient", "Conv3DGradient")
def conv_gradient_shape(x, w, dy, *, no_bias: int = 0, order: str = "NCHW", n_out):
    # NOTE: outputs are dW, db (unless no_bias), then dX when asked for.
    db = TensorInfo((split_layout(w.shape, order)[0],), w.dtype) if w.shape is not None else UNKNOWN
    return ((w,) if no_bias else (w, db)) + (x,)
