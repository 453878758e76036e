"""Convolutions (implicit GEMM for stride-1 KxK, im2col + GEMM else): Conv, Conv1D/2D/3D, ConvTranspose."""
from __future__ import annotations

import inspect
import itertools
import os

import numpy as np

from engine.runtime import blas, onednn, parallel
from engine.runtime.ops import conv_strided as strided
from engine.runtime.grad_makers import cc_maker
from engine.catalogue.registry import gradient, kernel
from engine.catalogue.registry import shape
from engine.errors import ExecutionError, ShapeError
from engine.runtime.shapes import UNKNOWN, TensorInfo, dim_op, dims, join_layout, spatial_out, split_layout

# ---- kernels ----

# NOTE: the per-side spellings default to None (absent): Caffe2 uses them only as complete sets.
GEOMETRY = dict(kernel=0, kernels=None, kernel_h=None, kernel_w=None, stride=1, strides=None, stride_h=None,
                stride_w=None, pad=0, pads=None, pad_t=None, pad_l=None, pad_b=None, pad_r=None, dilation=1,
                dilations=None, dilation_h=None, dilation_w=None, order="NCHW", global_pooling=0, legacy_pad=0)


def geometry_args(fn):
    """Give `fn` (declared with ``**g``) the conv/pool geometry args as keyword-only parameters."""
    sig = inspect.signature(fn)
    ps = [p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD]
    ps += [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=v) for k, v in GEOMETRY.items()]
    fn.__signature__ = sig.replace(parameters=ps)
    return fn


def require_image(x) -> None:
    """Caffe2's conv/pool base refuses an input whose C x H x W is empty (``inner_size > 0``); N may be 0."""
    shape = tuple(getattr(x, "shape", ()))
    if len(shape) > 1 and int(np.prod(shape[1:])) == 0:
        raise ValueError(f"input {shape} has no values per image (C x H x W is 0); Caffe2 refuses it")


def geometry(nd, g, kshape=(), sp=None):
    """(kernel, stride, pad_begin, pad_end, dilation) per spatial dim from Caffe2's many arg spellings;
    with the input's spatial dims `sp`, ``legacy_pad`` 1-3 (VALID, SAME, CAFFE_LEGACY_POOLING) recomputes the pads."""
    k, s, pb, pe, d = _geometry(nd, g, kshape)
    if sp is not None and g["legacy_pad"]:
        pb, pe = zip(*(legacy_pads(g["legacy_pad"], *v) for v in zip(sp, k, s, pb, d)))
    return k, s, list(pb), list(pe), d


def legacy_pads(mode, size, k, s, pad, d):
    """(pad_head, pad_tail) of one spatial dim under Caffe2's LegacyPadding `mode`.

    VALID: no pads.  SAME: the pads that give ``ceil(size / stride)`` outputs, the smaller half first.
    CAFFE_LEGACY_POOLING: old Caffe's ceil output size (its last window must start inside image + pad_head),
    the tail pad grown by one stride per extra output.  Unknown sizes (shape inference) keep the pads."""
    if mode == 1 or not isinstance(size, (int, np.integer)):
        return (0, 0) if mode == 1 else (pad, pad)
    if mode == 2:
        need = ((size + s - 1) // s - 1) * s + k - size
        return need // 2, need - need // 2
    out = int(np.ceil((size + 2 * pad - k) / s + 1))
    if pad > 0 and (out - 1) * s >= size + pad:
        out -= 1
    return pad, pad + s * (out - int((size + 2 * pad - k) / s + 1))


def _geometry(nd, g, kshape):
    def given(names):  # NOTE: Caffe2 reads _h/_w (and pad_t/l/b/r) only when the whole set is given
        return nd == 2 and all(g[k] is not None for k in names)

    def pick(one, many, hw, default):
        if g[many]:
            return [int(v) for v in g[many]]
        if given(hw):
            return [int(g[k]) for k in hw]
        return [int(g[one] or default)] * nd
    k = pick("kernel", "kernels", ("kernel_h", "kernel_w"), 0)
    if not any(k):
        k = list(kshape)
    s = pick("stride", "strides", ("stride_h", "stride_w"), 1)
    d = pick("dilation", "dilations", ("dilation_h", "dilation_w"), 1)
    if g["pads"]:
        p = [int(v) for v in g["pads"]]
    elif given(("pad_t", "pad_l", "pad_b", "pad_r")):
        p = [int(g[k_]) for k_ in ("pad_t", "pad_l", "pad_b", "pad_r")]
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

    def scatter(t):  # NOTE: NumPy: images over the threads (a ResNet 3x3/2 dX: 15 ms single-threaded)
        dxt, ct = t(dx), t(cols)
        for pos in itertools.product(*(range(v) for v in k)):
            sl = tuple(slice(p * d[i], p * d[i] + s[i] * (out[i] - 1) + 1, s[i]) for i, p in enumerate(pos))
            dxt[(slice(None), slice(None)) + sl] += ct[(slice(None), slice(None)) + pos]
    if xp is np and FAST_CONV:
        parallel.split(scatter, dx.shape, dx.nbytes, axis=0)
    else:
        scatter(lambda a: a)
    return dx[(slice(None), slice(None)) + tuple(slice(pb[i], pb[i] + xshape[2 + i]) for i in range(nd))]


_PER_IMAGE = 1024  # output pixels per image above which one GEMM per image beats one big GEMM


def cols_cm(xp, x, k, s, pb, pe, d):
    """Channel-major im2col: contiguous (C * prod(k), N * P) columns of NCHW `x` (NumPy: in the
    thread's scratch buffer, valid until the next call), and the output spatial shape.  One copy whose innermost run is a whole output row, and a column order that
    lets ONE GEMM cover the batch (the BLAS-friendly layout for the small late-stage maps)."""
    if xp is np and len(k) == 2 and k[0] * k[1] >= 3 * s[0] * s[1] > 3 and all(v == 1 for v in d):
        return _cols_strided(x, k, s, pb, pe)
    win = windows(xp, x, k, s, pb, pe, d)  # (N, C, *out, *k) view
    nd = len(k)
    out = win.shape[2:2 + nd]
    view = win.transpose(1, *range(2 + nd, 2 + 2 * nd), 0, *range(2, 2 + nd))
    cols = parallel.scratch(view.shape, x.dtype) if xp is np else xp.empty(view.shape, dtype=x.dtype)
    if xp is np:  # NOTE: a single-threaded copy is ~1/3 of a 3x3 conv; both cores copy (engine.runtime.parallel).
        parallel.split(lambda t: t(cols).__setitem__(Ellipsis, t(view)), view.shape, cols.nbytes)
    else:
        cols[...] = view
    return cols.reshape(x.shape[1] * int(np.prod(k)), -1), out


def _cols_strided(x, k, s, pb, pe):
    """:func:`cols_cm` of a strided 2-D conv from the input's stride phases (``phase[a, b] =
    x[..., a::sh, b::sw]``, one pass over the input): each kernel position's rows are then a
    stride-1 window whose runs are whole output rows (a stride-2 gather copies ~2.5x slower; the
    phase copy pays off when the columns are many times the input: conv1's 7x7/2, not a 3x3/2)."""
    (n, c, h, w), (sh, sw) = x.shape, s
    out, (hq, wq) = strided.phase_geometry(x.shape, k, s, pb, pe)
    xpad = np.zeros((n, c, hq * sh, wq * sw), dtype=x.dtype)
    xpad[:, :, pb[0]:pb[0] + h, pb[1]:pb[1] + w] = x
    ph = np.ascontiguousarray(xpad.reshape(n, c, hq, sh, wq, sw).transpose(3, 5, 1, 0, 2, 4))  # (sh, sw, C, N, hq, wq)
    cols = parallel.scratch((c, k[0] * k[1], n) + out, x.dtype)
    pos = np.arange(k[0] * k[1])

    def part(t):
        for q in t(pos):
            i, j = divmod(int(q), k[1])
            cols[:, q] = ph[i % sh, j % sw, :, :, i // sh:i // sh + out[0], j // sw:j // sw + out[1]]
    parallel.split(part, (pos.size, 1), cols.nbytes)
    return cols.reshape(c * k[0] * k[1], -1), out


def _col2im_strided(dcols, xshape, k, s, pb, pe, out):
    """:func:`col2im` of a strided 2-D conv (the adjoint of :func:`_cols_strided`): the adds go into
    the input's stride phases, whole output rows at a time, images over both cores; then one
    interleaving copy back to NCHW (conv1's 7x7/2: 31 -> 17 ms single-threaded; a 3x3/2 is slower so)."""
    (n, c, h, w), (sh, sw) = xshape, s
    _, (hq, wq) = strided.phase_geometry(xshape, k, s, pb, pe)
    dph = np.zeros((n, sh, sw, c, hq, wq), dtype=dcols.dtype)

    def part(t):
        dp, dc = t(dph), t(dcols)
        for i, j in itertools.product(range(k[0]), range(k[1])):
            dp[:, i % sh, j % sw, :, i // sh:i // sh + out[0], j // sw:j // sw + out[1]] += dc[:, :, i, j]
    parallel.split(part, dph.shape, dph.nbytes, axis=0)
    dx = dph.transpose(0, 3, 4, 1, 5, 2).reshape(n, c, hq * sh, wq * sw)
    return np.ascontiguousarray(dx[:, :, pb[0]:pb[0] + h, pb[1]:pb[1] + w])


def _plain(k, s, pb, pe, d):
    return all(v == 1 for v in (*k, *d)) and not any(pb) and not any(pe)


# NOTE: NETVIZ_PLAIN_CONV=1 (or FAST_CONV = False) forces the im2col reference path everywhere.
FAST_CONV = os.environ.get("NETVIZ_PLAIN_CONV", "") in ("", "0")
# NOTE: where the implicit GEMM wins (quiet machine, batch 8, vs im2col): 56x56x64 0.68x, 28x28x128 0.80x,
# 16 channels 0.61x; even at 14x14x256 (1.03x) and 28x28x512 (1.07x); loses with 3 input channels (1.66x)
# and on 7x7 maps (2x), where one GEMM over the whole batch is the better shape.
_IMPLICIT_MIN_PIXELS, _IMPLICIT_MIN_CHANNELS, _IMPLICIT_WIDE = 256, 8, 256
# NOTE: an output grid above _GRID_FLOATS (~1 MB: no longer cache-resident) is done in blocks of
# columns, all taps per block, (M + C) x cols ~ _CHUNK_FLOATS (224x224x64, batch 2: 265-272 -> 76-178 ms
# in one run at load 4.8, even in a quieter one).
_GRID_FLOATS, _CHUNK_FLOATS, _MIN_CHUNK = 1 << 18, 1 << 17, 256
_IMPLICIT_DW_MIN_PIXELS = 576  # the same for dW (measured: 56x56 and 28x28 win 10-20 %, 14x14 loses 20-40 %)


def implicit_ok(xp, x, w, k, s, pb, pe, d) -> bool:
    """Whether :func:`conv_implicit` runs this conv: NumPy float32 2-D stride-1 with a kernel bigger
    than 1x1, at least :data:`_IMPLICIT_MIN_CHANNELS` input channels, maps of at least
    :data:`_IMPLICIT_MIN_PIXELS` outputs (32x32 when over :data:`_IMPLICIT_WIDE` channels), and
    NumPy's OpenBLAS at hand."""
    if not (FAST_CONV and xp is np and len(k) == 2 and x.dtype == w.dtype == np.float32 and blas.available()):
        return False
    ho, wo = (x.shape[2 + i] + pb[i] + pe[i] - d[i] * (k[i] - 1) for i in range(2))
    least = _IMPLICIT_MIN_PIXELS if x.shape[1] <= _IMPLICIT_WIDE else _PER_IMAGE
    return s[0] == s[1] == 1 and k[0] * k[1] > 1 and min(ho, wo) > 0 and ho * wo >= least \
        and x.shape[1] >= _IMPLICIT_MIN_CHANNELS


def _padded_flat(x, pb, pe):
    """(N, C, (H + pads + 1) * Wp) zero-padded copy of NCHW float32 `x` (one spare zero row, so the
    last shifted view of the implicit GEMM stays inside its image), and Wp."""
    n, c, h, w = x.shape
    hp, wp = h + pb[0] + pe[0] + 1, w + pb[1] + pe[1]
    xp = np.empty((n, c, hp, wp), dtype=np.float32)
    xp[:, :, :pb[0]] = 0
    xp[:, :, pb[0] + h:] = 0
    xp[:, :, pb[0]:pb[0] + h, :pb[1]] = 0
    xp[:, :, pb[0]:pb[0] + h, pb[1] + w:] = 0
    parallel.split(lambda t: t(xp)[:, :, pb[0]:pb[0] + h, pb[1]:pb[1] + w].__setitem__(Ellipsis, t(x)), x.shape,
                   xp.nbytes)
    return xp.reshape(n, c, hp * wp), wp


def _jobs(n, m):
    """(image, rows lo, rows hi) jobs: one per image, or the output channels cut over the threads
    when the batch is smaller than the thread count."""
    if n >= parallel.THREADS or m < 2 * parallel.THREADS:
        return [(i, 0, m) for i in range(n)]
    cuts = [m * j // parallel.THREADS for j in range(parallel.THREADS + 1)]
    return [(i, lo, hi) for i in range(n) for lo, hi in zip(cuts, cuts[1:])]


def conv_implicit(x, w, k, pb, pe, d, b=None):
    """Stride-1 2-D float32 NCHW convolution (+ bias `b`) without an im2col buffer: an implicit GEMM.

    With the padded image flattened to (C, Hp * Wp), output pixel ``(r, col)`` reads input
    ``r * Wp + col + off`` for kernel tap offset ``off = i * dh * Wp + j * dw``: each tap is ONE GEMM
    ``W[:, :, i, j] (M x C) @ X[:, off:off + Ho * Wp]`` on a shifted view (no copy), all taps
    accumulated in place (BLAS beta = 1) into an (M, Ho, Wp) grid whose last Wp - Wo columns are
    junk; one pass drops them (and adds the bias).  Images (or channel halves) on both cores."""
    n, c = x.shape[:2]
    m = w.shape[0]
    xf, wp = _padded_flat(x, pb, pe)
    ho = x.shape[2] + pb[0] + pe[0] - d[0] * (k[0] - 1)
    wo = wp - d[1] * (k[1] - 1)
    L, ld = ho * wp, xf.shape[2]
    taps = np.ascontiguousarray(w.transpose(2, 3, 0, 1).reshape(k[0] * k[1], m, c))  # (taps, M, C)
    t = np.empty((n, m, L), dtype=np.float32)
    offs = [(i * d[0] * wp + j * d[1]) * 4 for i in range(k[0]) for j in range(k[1])]

    step = L if m * L <= _GRID_FLOATS else max(_MIN_CHUNK, _CHUNK_FLOATS // (m + c))

    def job(i, lo, hi):
        xb, tb, wb = xf[i].ctypes.data, t[i, lo].ctypes.data, taps[:, lo].ctypes.data
        for col in range(0, L, step):
            cols = min(step, L - col)
            for q, off in enumerate(offs):
                blas.sgemm(wb + q * m * c * 4, c, xb + off + 4 * col, ld, tb + 4 * col, L, hi - lo, cols, c,
                           beta=float(q > 0))
    parallel.blas_calls([lambda j=j: job(*j) for j in _jobs(n, m)])
    y = np.empty((n, m, ho, wo), dtype=np.float32)
    tv = t.reshape(n, m, ho, wp)[..., :wo]
    if b is None:
        parallel.split(lambda tk: tk(y).__setitem__(Ellipsis, tk(tv)), y.shape, y.nbytes)
    else:
        bb = np.asarray(b, dtype=np.float32).reshape(1, m, 1, 1)  # NOTE: 4-D: split may cut the channel axis
        parallel.split(lambda tk: np.add(tk(tv), tk(bb), out=tk(y)), y.shape, y.nbytes)
    return y


def conv_implicit_dw(x, dy, k, pb, pe, d):
    """dW of a :func:`conv_implicit` conv by the same shifted views: tap (i, j)'s (M, C) slice is
    ``dY' @ X[:, off:off + Ho * Wp].T`` summed over images, with dY' = dY on the (M, Ho, Wp) grid
    (zeros in its junk columns).  Each thread sums its images in place (beta = 1); the threads'
    partial sums are added once at the end."""
    n, c = x.shape[:2]
    m, (ho, wo) = dy.shape[1], dy.shape[2:]
    xf, wp = _padded_flat(x, pb, pe)
    L, ld, taps = ho * wp, xf.shape[2], k[0] * k[1]
    dyp = np.zeros((n, m, ho, wp), dtype=np.float32)
    dyp[..., :wo] = dy
    chunks = [range(j, n, parallel.THREADS) for j in range(min(n, parallel.THREADS))]
    if DW_BLOCKED:
        return _blocked_dw(xf, dyp, k, d, wp)
    offs = [(i * d[0] * wp + j * d[1]) * 4 for i in range(k[0]) for j in range(k[1])]
    parts = np.empty((len(chunks), taps, m, c), dtype=np.float32)

    def job(j):
        for first, i in enumerate(chunks[j]):
            xb, db_ = xf[i].ctypes.data, dyp[i].ctypes.data
            for q, off in enumerate(offs):
                blas.sgemm(db_, L, xb + off, ld, parts[j, q].ctypes.data, c, m, c, L, beta=float(first > 0),
                           trans_b=True)
    parallel.blas_calls([lambda j=j: job(j) for j in range(len(chunks))])
    return parts.sum(axis=0).reshape(k[0], k[1], m, c).transpose(2, 3, 0, 1)


DW_BLOCKED = True  # NOTE: False keeps conv_implicit_dw's per-tap GEMMs (the tests' and A/B runs' other side)
# NOTE: bytes of one block of im2col rows in :func:`_blocked_dw`: it and its dY block stay in the 2 MB L2
_DW_BLOCK_BYTES = 1 << 20


def _tap_block(buf, xf_i, offs, col, cols):
    """The (C * taps, cols) im2col block of grid columns [col, col + cols) of one padded flat image
    `xf_i` (C, len), rows in the filter's (c, i, j) order, built in scratch `buf`: one copy per tap.

    NOTE: the forward pass gains nothing from such blocks (one K = C * taps GEMM per block instead of
    one K = C GEMM per tap: 56x56x64 17.2 -> 21.8 ms, 28x28x128 15.1 -> 19.0 ms CPU time, batch 8: the
    copies cost more than the bigger GEMM saves); dW does (:func:`_blocked_dw`)."""
    c = xf_i.shape[0]
    blk = buf[:c * len(offs) * cols].reshape(c, len(offs), cols)
    for q, off in enumerate(offs):
        blk[:, q] = xf_i[:, off + col:off + col + cols]
    return blk.reshape(-1, cols)


def _blocked_dw(xf, dyp, k, d, wp):
    """dW (M, C, kH, kW) from the padded flat images `xf` and dY on the junk-column grid `dyp`, by
    im2col blocks that never leave the cache: a block of grid columns gets all C * taps rows (one
    copy per tap from the shifted views), then ONE GEMM with the C * taps rows as its M side
    accumulates ``dW.T += cols @ dY_block.T`` in place.  One big GEMM per block instead of one
    skinny (M x C) GEMM per tap: OpenBLAS runs those at ~60 % of its rate (64 x 64: 86 vs 126 GFLOP/s
    single-threaded as (576 x 64)).  Each job sums every THREADS-th image into its own part; a batch
    below the thread count cuts the grid's columns over the jobs instead (one job would leave the
    GEMMs to OpenBLAS's own threads, which spin-wait: 1 ms calls took 20-400 ms at load 2)."""
    n, c, ld = xf.shape
    m, ho = dyp.shape[1:3]
    L, taps = ho * wp, k[0] * k[1]
    kk = c * taps
    offs = [i * d[0] * wp + j * d[1] for i in range(k[0]) for j in range(k[1])]
    nb = min(L, max(_MIN_CHUNK, _DW_BLOCK_BYTES // (4 * kk)))
    if n >= parallel.THREADS:
        jobs = [(range(j, n, parallel.THREADS), 0, L) for j in range(parallel.THREADS)]
    else:
        cuts = [L * j // parallel.THREADS for j in range(parallel.THREADS + 1)]
        jobs = [(range(n), lo, hi) for lo, hi in zip(cuts, cuts[1:]) if hi > lo]
    parts = np.empty((len(jobs), kk, m), dtype=np.float32)

    def job(j):
        images, lo, hi = jobs[j]
        buf = parallel.scratch((kk * nb,), np.float32)
        first = True
        for i in images:
            for col in range(lo, hi, nb):
                cols = min(nb, hi - col)
                blk = _tap_block(buf, xf[i], offs, col, cols)
                blas.sgemm(blk.ctypes.data, cols, dyp[i].ctypes.data + 4 * col, L, parts[j].ctypes.data, m, kk, m, cols,
                           beta=float(not first), trans_b=True)
                first = False
    parallel.blas_calls([lambda j=j: job(j) for j in range(len(jobs))])
    return parts.sum(axis=0).T.reshape(m, c, k[0], k[1])


def _batch_gemm(w2, cols, n, out):
    """Y (N, M, *out) of ONE GEMM ``W (M x K) @ cols (K x N * P)`` over the whole batch (cut over the
    threads), then one copy from its (M, N, P) order: on small maps the per-image GEMMs are too thin
    (ResNet's 7x7 1x1 convs, batch 8: N = 49 per image, 392 folded)."""
    m = w2.shape[0]
    t = np.empty((m, cols.shape[1]), dtype=cols.dtype)
    parallel.matmuls(parallel.gemm_jobs(w2, cols, t))
    y, tv = np.empty((n, m) + tuple(out), dtype=cols.dtype), np.moveaxis(t.reshape((m, n) + tuple(out)), 0, 1)
    parallel.split(lambda tk: tk(y).__setitem__(Ellipsis, tk(tv)), y.shape, y.nbytes)
    return y


def conv_gemm(xp, x, w, k, s, pb, pe, d):
    """group=1 NCHW convolution as float32 GEMMs: a 1x1 conv multiplies the image itself (no
    im2col); a stride-1 KxK conv on a big enough map is an implicit GEMM (:func:`conv_implicit`);
    else channel-major columns, one GEMM per image for big maps, one for the batch else."""
    n, m = x.shape[0], w.shape[0]
    w2 = w.reshape(m, -1)
    if implicit_ok(xp, x, w, k, s, pb, pe, d):
        return conv_implicit(x, w, k, pb, pe, d)
    if _plain(k, s, pb, pe, d):
        if any(v != 1 for v in s):
            x = xp.ascontiguousarray(x[(slice(None), slice(None)) + tuple(slice(None, None, v) for v in s)])
        if xp is np and FAST_CONV and 1 < n and int(np.prod(x.shape[2:])) < _CHAIN_MIN_PIXELS:
            cols = np.ascontiguousarray(x.reshape(n, x.shape[1], -1).transpose(1, 0, 2)).reshape(x.shape[1], -1)
            return _batch_gemm(w2, cols, n, x.shape[2:])
        y = xp.empty((n, m) + x.shape[2:], dtype=x.dtype)
        jobs = list(zip(itertools.repeat(w2), x.reshape(n, x.shape[1], -1), y.reshape(n, m, -1)))
        if xp is not np:
            for a, b, o in jobs:
                xp.matmul(a, b, out=o)
        else:  # NOTE: images on both cores, each GEMM single-threaded (engine.runtime.parallel.matmuls)
            parallel.matmuls(jobs if n >= parallel.THREADS else parallel.gemm_jobs(*jobs[0]))
        return y
    if FAST_CONV and strided.applies(x, w, k, s, d):
        return strided.conv_strided(x, w, k, s, pb, pe)
    cols, out = cols_cm(xp, x, k, s, pb, pe, d)
    p = int(np.prod(out))
    if xp is not np:
        return xp.ascontiguousarray(xp.moveaxis((w2 @ cols).reshape((m, n) + tuple(out)), 0, 1))
    if p < _PER_IMAGE or n < parallel.THREADS:
        return _batch_gemm(w2, cols, n, out)
    y = xp.empty((n, m) + tuple(out), dtype=x.dtype)
    c3 = cols.reshape(cols.shape[0], n, p)
    parallel.matmuls([(w2, c3[:, i], y[i].reshape(m, p)) for i in range(n)])
    return y


def _onednn_forward(x, w, b, s, pb, pe, d, group):
    """Conv through oneDNN (:mod:`engine.runtime.onednn`) when it is installed and takes the problem, else None."""
    geo = onednn.Geometry(s, pb, pe, d, group)
    if not onednn.fits(geo, x, w, b) or not onednn.wanted(w.shape[2:], geo.out(x.shape[2:], w.shape[2:]), forward=True):
        return None
    return onednn.forward(x, w, b, geo)


def _onednn_backward(x, w, dy, s, pb, pe, d, group, need_dx, no_bias):
    """ConvGradient's outputs [dW, db, dX] (db left out with `no_bias`, dX unless `need_dx`) through
    oneDNN, or None (not installed, not taken: the NumPy paths below run)."""
    geo = onednn.Geometry(s, pb, pe, d, group)
    if not onednn.fits(geo, x, w, dy) or not onednn.wanted(w.shape[2:], dy.shape[2:]):
        return None
    got = onednn.backward(x, w, dy, geo, need_db=not no_bias, need_dx=need_dx)
    return None if got is None else [v for v in got if v is not None]


@kernel("Conv", "Conv1D", "Conv2D", "Conv3D", needs_context=True)
@geometry_args
def conv(xp, x, w, b=None, *, group: int = 1, activation: str = "identity", ctx=None, **g):
    # NOTE: only the NNPACK engine reads `activation` (FuseNNPACKConvRelu writes it); others ignore it.
    if activation == "Relu" and ctx is not None and ctx.op.engine == "NNPACK":
        return xp.maximum(conv(xp, x, w, b, group=group, **g), 0)
    require_image(x)
    x, w = to_nchw(x, g["order"]), to_nchw(w, g["order"])
    k, s, pb, pe, d = geometry(x.ndim - 2, g, w.shape[2:], x.shape[2:])
    m = w.shape[0]
    if x.shape[0] == 0:  # NOTE: an empty batch (legal in Caffe2): no GEMM to run, only the output shape
        return from_nchw(xp.zeros((0, m) + spatial_out(x.shape[2:], k, s, pb, pe, d), dtype=x.dtype), g["order"])
    if FAST_CONV and xp is np and (y := _onednn_forward(x, w, b, s, pb, pe, d, group)) is not None:
        return from_nchw(y, g["order"])
    if group == 1 and b is not None and implicit_ok(xp, x, w, k, s, pb, pe, d):
        return from_nchw(conv_implicit(x, w, k, pb, pe, d, b), g["order"])  # NOTE: bias added in its last pass
    if group == 1 and x.dtype == w.dtype:
        y, out = conv_gemm(xp, x, w, k, s, pb, pe, d), None
    else:
        cols, out = im2col(xp, x, k, s, pb, pe, d, group)
        y = bmm(xp, w.reshape(group, m // group, -1), cols).reshape((x.shape[0], m) + tuple(out))
    if b is not None:
        y += b.reshape((m,) + (1,) * (y.ndim - 2))
    return from_nchw(y, g["order"])


@kernel("ConvRelu")
@geometry_args
def conv_relu(xp, x, w, b=None, *, group: int = 1, **g):
    """Conv then Relu in one op (no gradient maker in Caffe2)."""
    return xp.maximum(conv(xp, x, w, b, group=group, **g), 0)


def _lc_columns(xp, x, k, s, pb, pe, d):
    """(N, P, C * prod(k)) columns of NCHW `x`: one row of window values per output position."""
    win = windows(xp, x, k, s, pb, pe, d)  # (N, C, *out, *k)
    nd = len(k)
    out = win.shape[2:2 + nd]
    cols = win.transpose(0, *range(2, 2 + nd), 1, *range(2 + nd, 2 + 2 * nd))
    return cols.reshape(x.shape[0], int(np.prod(out)), int(np.prod(cols.shape[1 + nd:]))), out  # NOTE: N may be 0


def _lc_filter(w, order, nd):
    """(P, M, C * prod(k)) view of an LC filter ((*out, M, C, *k); NHWC: (*out, M, *k, C))."""
    p, m = int(np.prod(w.shape[:nd])), w.shape[nd]
    if order == "NCHW":
        return w.reshape(p, m, -1)
    return w.reshape((p, m) + w.shape[nd + 1:]).transpose(0, 1, w.ndim - nd, *range(2, w.ndim - nd)).reshape(p, m, -1)


@kernel("LC", "LC1D", "LC2D", "LC3D")
@geometry_args
def locally_connected(xp, x, w, b=None, *, group: int = 1, **g):
    # NOTE: a convolution with its own filter per output position: Y[n, m, p] = W[p, m] . cols[n, p] + b[p, m].
    if group != 1:
        raise ExecutionError("netviz runs LC with group = 1 only")
    order, nd = g["order"], x.ndim - 2
    xc = to_nchw(x, order)
    kshape = w.shape[nd + 2:] if order == "NCHW" else w.shape[nd + 1:nd + 1 + nd]
    k, s, pb, pe, d = geometry(nd, g, kshape, xc.shape[2:])
    cols, out = _lc_columns(xp, xc, k, s, pb, pe, d)
    if tuple(out) != tuple(w.shape[:nd]):
        raise ExecutionError(f"LC filter is for outputs {tuple(w.shape[:nd])}, the input gives {tuple(out)}")
    y = xp.einsum("npk,pmk->nmp", cols, _lc_filter(w, order, nd))
    if b is not None:
        y = y + b.reshape(-1, w.shape[nd]).T[None]
    return from_nchw(xp.ascontiguousarray(y.reshape((x.shape[0], w.shape[nd]) + tuple(out))), order)


@kernel("LCGradient", "LC1DGradient", "LC2DGradient", "LC3DGradient", needs_context=True)
@geometry_args
def locally_connected_gradient(xp, x, w, dy, *, ctx, group: int = 1, no_bias: int = 0, **g):
    # NOTE: outputs [dW, db, dX] (no_bias: [dW, dX]), dX only when asked for, as ConvGradient.
    order, nd = g["order"], x.ndim - 2
    xc, dyc = to_nchw(x, order), to_nchw(dy, order)
    kshape = w.shape[nd + 2:] if order == "NCHW" else w.shape[nd + 1:nd + 1 + nd]
    k, s, pb, pe, d = geometry(nd, g, kshape, xc.shape[2:])
    cols, out = _lc_columns(xp, xc, k, s, pb, pe, d)
    n, m = dyc.shape[:2]
    dy3 = dyc.reshape(n, m, -1)
    dw = xp.einsum("nmp,npk->pmk", dy3, cols)
    if order == "NCHW":
        dw = dw.reshape(w.shape)
    else:
        dw = dw.reshape((dw.shape[0], m, xc.shape[1]) + tuple(k)).transpose(0, 1, *range(3, 3 + nd), 2).reshape(w.shape)
    res = [dw.astype(w.dtype)] + ([] if no_bias else [dy3.sum(axis=0).T.reshape(w.shape[:nd] + (m,))])
    if len(ctx.op.output) > len(res):
        dcols = xp.einsum("nmp,pmk->npk", dy3, _lc_filter(w, order, nd))  # (N, P, C*prod(k))
        dcols = dcols.reshape((n,) + tuple(out) + (xc.shape[1],) + tuple(k))
        dcols = dcols.transpose(0, nd + 1, *range(nd + 2, 2 * nd + 2), *range(1, nd + 1))
        res.append(from_nchw(xp.ascontiguousarray(col2im(xp, dcols, xc.shape, k, s, pb, pe, d, out)), order))
    return tuple(res)


# NOTE: a 1x1 conv's gradient as one chain of per-image GEMMs per thread needs maps of at least this many
# pixels; below (ResNet's 7x7), the per-image GEMMs are too thin and one batch-folded GEMM wins (measured
# batch 8, load 2: 28x28 and 14x14 1.2-1.8x faster chained, 7x7 1.2x slower).
_CHAIN_MIN_PIXELS = 128


def _chain_ok(x, dy):
    """Whether :func:`gemm_1x1_gradient` runs: NumPy float32, OpenBLAS, a batch to spread over the
    threads and maps of at least :data:`_CHAIN_MIN_PIXELS`."""
    return (FAST_CONV and isinstance(x, np.ndarray) and x.dtype == dy.dtype == np.float32 and blas.available()
            and x.shape[0] >= parallel.THREADS and int(np.prod(dy.shape[2:])) >= _CHAIN_MIN_PIXELS)


def gemm_1x1_gradient(x, w, dy, need_dx):
    """(dW (M, C), db, dX (N, C, P) or None) of a 1x1 stride-1 unpadded conv of contiguous NCHW float32 `x`.

    Each thread takes every THREADS-th image and, while that image's dY is in cache, accumulates its
    dW part in place (BLAS beta = 1; the bigger of C and M as the GEMM's M side, where OpenBLAS is
    faster), adds its db and writes its dX = W.T @ dY straight into the output: no transposing copies,
    no per-image dW parts, one sum of THREADS parts at the end."""
    n, c = x.shape[:2]
    m, p = dy.shape[1], int(np.prod(dy.shape[2:]))
    chunks = [range(j, n, parallel.THREADS) for j in range(min(n, parallel.THREADS))]
    big = c >= m  # NOTE: parts hold dW.T (C, M) when C is the bigger side
    parts = np.empty((len(chunks),) + ((c, m) if big else (m, c)), dtype=np.float32)
    dbs = np.empty((len(chunks), m), dtype=np.float32)
    wt = np.ascontiguousarray(w.reshape(m, c).T) if need_dx else None
    dx = np.empty((n, c, p), dtype=np.float32) if need_dx else None

    def job(j):
        for q, i in enumerate(chunks[j]):
            xa, da, pa = x[i].ctypes.data, dy[i].ctypes.data, parts[j].ctypes.data
            if big:
                blas.sgemm(xa, p, da, p, pa, m, c, m, p, beta=float(q > 0), trans_b=True)
            else:
                blas.sgemm(da, p, xa, p, pa, c, m, c, p, beta=float(q > 0), trans_b=True)
            if need_dx:
                blas.sgemm(wt.ctypes.data, m, da, p, dx[i].ctypes.data, p, c, p, m)
            row = dy[i].reshape(m, p).sum(axis=1)
            dbs[j] = row if q == 0 else dbs[j] + row
    parallel.blas_calls([lambda j=j: job(j) for j in range(len(chunks))])
    dw = parts.sum(axis=0)
    return (dw.T if big else dw), dbs.sum(axis=0), dx


def conv_gemm_gradient(xp, x, w, dy, k, s, pb, pe, d, need_dx):
    """(dW, db, dX or None) of a group=1 NCHW conv by GEMMs in the layouts of :func:`conv_gemm`."""
    n, m = dy.shape[:2]
    out, c = dy.shape[2:], x.shape[1]
    w2, p, plain = w.reshape(m, -1), int(np.prod(dy.shape[2:])), _plain(k, s, pb, pe, d)
    tb, te = [d_ * (k_ - 1) - v for d_, k_, v in zip(d, k, pb)], [d_ * (k_ - 1) - v for d_, k_, v in zip(d, k, pe)]
    if not need_dx and p >= _IMPLICIT_DW_MIN_PIXELS and dy.dtype == np.float32 \
            and implicit_ok(xp, x, w, k, s, pb, pe, d):
        dw = np.ascontiguousarray(conv_implicit_dw(x, dy, k, pb, pe, d))
        return dw, dy.reshape(n, m, p).sum(axis=2).sum(axis=0), None
    if FAST_CONV and dy.dtype == np.float32 and strided.applies(x, w, k, s, d):
        dw, dx = strided.conv_strided_gradient(x, w, np.ascontiguousarray(dy), k, s, pb, pe, need_dx)
        return dw, dy.reshape(n, m, p).sum(axis=2).sum(axis=0), dx
    if need_dx and not plain and all(v == 1 for v in s) and min(tb + te) >= 0:
        # NOTE: a stride-1 conv's dX is the "full" conv of dY with the flipped, transposed filter:
        # one im2col + GEMM instead of prod(k) scatter-adds (col2im).
        wt = xp.ascontiguousarray(w.swapaxes(0, 1)[(slice(None), slice(None)) + (slice(None, None, -1),) * len(k)])
        dw, db, _ = conv_gemm_gradient(xp, x, w, dy, k, s, pb, pe, d, False)
        return dw, db, conv_gemm(xp, dy, wt, k, s, tb, te, d)
    if plain and any(v != 1 for v in s):
        xs = xp.ascontiguousarray(x[(slice(None), slice(None)) + tuple(slice(None, None, v) for v in s)])
    else:
        xs = x
    if plain and _chain_ok(xs, dy):
        dw, db, dxs = gemm_1x1_gradient(np.ascontiguousarray(xs), w, np.ascontiguousarray(dy), need_dx)
        if dxs is None or all(v == 1 for v in s):
            return dw.reshape(w.shape), db, None if dxs is None else dxs.reshape(x.shape)
        # NOTE: a strided 1x1 conv reads (and so feeds back to) every s-th pixel only
        dx = np.zeros(x.shape, dtype=np.float32)
        dx[(slice(None), slice(None)) + tuple(slice(None, None, v) for v in s)] = dxs.reshape(xs.shape)
        return dw.reshape(w.shape), db, dx
    if p >= _PER_IMAGE and xp is np:  # big maps: one GEMM per image, no transposing copies
        dy3 = dy.reshape(n, m, p)
        cols = xs.reshape(n, c, p) if plain else cols_cm(xp, x, k, s, pb, pe, d)[0].reshape(-1, n, p)
        parts = np.empty((n,) + w2.shape, dtype=dy.dtype)  # per-image dW, summed after: images on both cores
        parallel.matmuls([(dy3[i], (cols[i] if plain else cols[:, i]).T, parts[i]) for i in range(n)])
        dw = parts.sum(axis=0)
        db = dy3.sum(axis=2).sum(axis=0)
        dcols = None
        if need_dx:
            dcols = np.empty((n, w2.shape[1], p), dtype=dy.dtype)
            parallel.matmuls([(w2.T, dy3[i], dcols[i]) for i in range(n)])
            dcols = dcols.reshape((n, c) + tuple(k) + tuple(out))
    else:
        dyt = xp.ascontiguousarray(xp.moveaxis(dy.reshape(n, m, p), 0, 1)).reshape(m, -1)
        cols = xp.moveaxis(xs.reshape(n, c, p), 0, 1).reshape(c, -1) if plain else \
            cols_cm(xp, x, k, s, pb, pe, d)[0]
        if xp is np:
            dw, db = np.empty((m, cols.shape[0]), dtype=dy.dtype), dyt.sum(axis=1)
            parallel.matmuls(parallel.gemm_jobs(dyt, cols.T, dw))
            wdy = None
            if need_dx:
                # NOTE: a fresh buffer, not parallel.scratch: for a 1x1 stride-1 conv of one image the
                # moveaxis below is a no-op and ascontiguousarray hands this very buffer back as dX, which
                # the next kernel's scratch then overwrote (ShuffleNet v2's builder net trained wrong)
                wdy = np.empty((w2.shape[1], dyt.shape[1]), dy.dtype)
                parallel.matmuls(parallel.gemm_jobs(w2.T, dyt, wdy))
        else:
            dw, db = dyt @ cols.T, dyt.sum(axis=1)
            wdy = w2.T @ dyt if need_dx else None
        dcols = xp.moveaxis(wdy.reshape((c,) + tuple(k) + (n,) + tuple(out)), len(k) + 1, 0) \
            if need_dx else None
    if dcols is None:
        return dw.reshape(w.shape), db, None
    if plain and all(v == 1 for v in s):
        return dw.reshape(w.shape), db, xp.ascontiguousarray(dcols.reshape(x.shape))
    if xp is np and len(k) == 2 and k[0] * k[1] >= 3 * s[0] * s[1] > 3 and all(v == 1 for v in d):
        return dw.reshape(w.shape), db, _col2im_strided(dcols, x.shape, k, s, pb, pe, out)
    return dw.reshape(w.shape), db, xp.ascontiguousarray(col2im(xp, dcols, x.shape, k, s, pb, pe, d, out))


@kernel("ConvGradient", "Conv1DGradient", "Conv2DGradient", "Conv3DGradient", needs_context=True)
@geometry_args
def conv_gradient(xp, x, w, dy, *, ctx, group: int = 1, no_bias: int = 0, **g):
    # NOTE: outputs are [dW, db, dX] (or [dW, dX] with no_bias=1), dX omitted when not asked for.
    order = g["order"]
    x, w, dy = to_nchw(x, order), to_nchw(w, order), to_nchw(dy, order)
    k, s, pb, pe, d = geometry(x.ndim - 2, g, w.shape[2:], x.shape[2:])
    if x.shape[0] == 0:  # NOTE: an empty batch: zero dW and db, an empty dX
        res = [from_nchw(xp.zeros(w.shape, dtype=w.dtype), order)] + ([] if no_bias else [
            xp.zeros(w.shape[0], dtype=w.dtype)])
        return tuple(res + [from_nchw(xp.zeros(x.shape, dtype=x.dtype), order)][:len(ctx.op.output) - len(res)])
    need_dx = len(ctx.op.output) > 2 - bool(no_bias)
    if FAST_CONV and xp is np and (got := _onednn_backward(x, w, dy, s, pb, pe, d, group, need_dx, no_bias)):
        return tuple(from_nchw(v, order) if v.ndim > 1 else v for v in got)
    if group == 1 and x.dtype == w.dtype == dy.dtype:
        dw, db, dx = conv_gemm_gradient(xp, x, w, dy, k, s, pb, pe, d, need_dx)
        res = [from_nchw(dw, order)] + ([] if no_bias else [db]) + ([] if dx is None else [from_nchw(dx, order)])
        return tuple(res)
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


def transpose_geometry(g, kshape, adj, adjs, adj_h, adj_w):
    """(kernel, stride, pad_begin, pad_end, adj) of a 2-D ConvTranspose; legacy VALID/SAME pads are 0."""
    k, s, pb, pe, _ = geometry(2, g, kshape)
    a = [int(v) for v in adjs] if adjs else [int(adj_h), int(adj_w)] if adj_h or adj_w else [int(adj)] * 2
    return (k, s, [0, 0], [0, 0], a) if g["legacy_pad"] in (1, 2) else (k, s, pb, pe, a)


def transpose_out(sp, k, s, pb, pe, a):
    """ConvTranspose output dims: ``(in - 1) * stride + kernel + adj - pad_begin - pad_end``."""
    return tuple(dim_op(lambda i, kk: (i - 1) * s[j] + kk + a[j] - pb[j] - pe[j], v, k[j]) for j, v in enumerate(sp))


@kernel("ConvTranspose")
@geometry_args
def conv_transpose(xp, x, w, b=None, *, group: int = 1, adj: int = 0, adjs=None, adj_h: int = 0, adj_w: int = 0, **g):
    # NOTE: W is (C_in, C_out/group, kH, kW) (NHWC: (C_in, kH, kW, C_out/group)); Y = col2im(W^T X) per group.
    require_image(x)
    x, w = to_nchw(x, g["order"]), to_nchw(w, g["order"])
    k, s, pb, pe, a = transpose_geometry(g, w.shape[2:], adj, adjs, adj_h, adj_w)
    (n, m), sp, c = x.shape[:2], x.shape[2:], w.shape[1] * group
    p = int(np.prod(sp))  # NOTE: explicit sizes, not -1: an empty batch (N = 0) is legal
    cols = bmm(xp, w.reshape(group, m // group, -1).transpose(0, 2, 1), x.reshape(n, group, m // group, p))
    y = col2im(xp, cols.reshape((n, c) + tuple(k) + sp), (n, c) + transpose_out(sp, k, s, pb, pe, a),
               k, s, pb, pe, (1, 1), sp)
    y = xp.ascontiguousarray(y) if b is None else y + b.reshape(c, 1, 1)
    return from_nchw(y, g["order"])


@kernel("ConvTransposeGradient", needs_context=True)
@geometry_args
def conv_transpose_gradient(xp, x, w, dy, *, ctx, group: int = 1, no_bias: int = 0, adj: int = 0, adjs=None,
                            adj_h: int = 0, adj_w: int = 0, **g):
    # NOTE: outputs [dW, db, dX] (no_bias=1: [dW, dX]), dX only when asked for; X's pixels are dY's windows.
    order = g["order"]
    x, w, dy = to_nchw(x, order), to_nchw(w, order), to_nchw(dy, order)
    k, s, pb, pe, _ = transpose_geometry(g, w.shape[2:], adj, adjs, adj_h, adj_w)
    (n, m), (h, wd) = x.shape[:2], x.shape[2:]
    win = windows(xp, dy, k, s, pb, pe, (1, 1))[:, :, :h, :wd]  # (N, C, H, W, kH, kW); adj == stride adds a row
    cols = win.transpose(0, 1, 4, 5, 2, 3).reshape(n, group, dy.shape[1] // group * k[0] * k[1], h * wd)
    dw = bmm(xp, x.reshape(n, group, m // group, h * wd), cols.transpose(0, 1, 3, 2)).sum(axis=0).reshape(w.shape)
    res = [from_nchw(dw, order)] + ([] if no_bias else [dy.sum(axis=(0, 2, 3))])
    if len(ctx.op.output) > len(res):
        dx = bmm(xp, w.reshape(group, m // group, -1), cols).reshape(x.shape)
        res.append(from_nchw(xp.ascontiguousarray(dx), order))
    return tuple(res)


# ---- gradients ----

@gradient("Conv", "Conv1D", "Conv2D", "Conv3D", "ConvTranspose", "LC", "LC1D", "LC2D", "LC3D")
@cc_maker
def conv_gradient(g):
    """[I0, I1, GO0] -> [GI1, (GI2), (GI0)]; 2 inputs add ``no_bias=1``; ``no_gradient_to_input`` drops GI0."""
    ins, outs = [g.I(0), g.I(1), g.GO(0)], [g.GI(1)] + ([g.GI(2)] if len(g.op.input) == 3 else [])
    if not g.arg("no_gradient_to_input", 0):
        outs.append(g.GI(0))
    return [g.op_(g.type + "Gradient", ins, outs, **({"no_bias": 1} if len(g.op.input) == 2 else {}))]


# ---- shapes ----

@shape("Conv", "Conv1D", "Conv2D", "Conv3D", "ConvRelu")
@geometry_args
def conv_shape(x, w, b=None, *, group: int = 1, **g):
    n, c, sp = split_layout(dims(x), g["order"])
    wd = w.shape
    m, wc, kshape = split_layout(wd, g["order"]) if wd is not None else (None, None, (None,) * len(sp))
    if m is None and b is not None and b.shape is not None:
        m = b.shape[0]
    if None not in (c, wc) and c != wc * group:
        raise ShapeError(f"input has {c} channels, filter expects {wc} x group {group}")
    k, s, pb, pe, d = geometry(len(sp), g, kshape, sp)
    return TensorInfo(join_layout(n, m, spatial_out(sp, k, s, pb, pe, d), g["order"]), x.dtype)


@shape("ConvGradient", "Conv1DGradient", "Conv2DGradient", "Conv3DGradient")
def conv_gradient_shape(x, w, dy, *, no_bias: int = 0, order: str = "NCHW", n_out):
    # NOTE: outputs are dW, db (unless no_bias), then dX when asked for.
    db = TensorInfo((split_layout(w.shape, order)[0],), w.dtype) if w.shape is not None else UNKNOWN
    return ((w,) if no_bias else (w, db)) + (x,)


@shape("ConvTranspose")
@geometry_args
def conv_transpose_shape(x, w, b=None, *, group: int = 1, adj: int = 0, adjs=None, adj_h: int = 0, adj_w: int = 0, **g):
    n, _, sp = split_layout(dims(x), g["order"])
    cg, kshape = split_layout(w.shape, g["order"])[1:] if w.shape is not None else (None, (None,) * len(sp))
    c = cg * group if cg is not None else b.shape[0] if b is not None and b.shape is not None else None
    k, s, pb, pe, a = transpose_geometry(g, kshape, adj, adjs, adj_h, adj_w)
    return TensorInfo(join_layout(n, c, transpose_out(sp, k, s, pb, pe, a), g["order"]), x.dtype)


@shape("ConvTransposeGradient")
def conv_transpose_gradient_shape(x, w, dy, *, group: int = 1, no_bias: int = 0, order: str = "NCHW", n_out):
    # NOTE: db has C_out = W's dim 1 (NHWC: last) x group entries.
    cg = split_layout(w.shape, order)[1] if w.shape is not None else None
    db = TensorInfo((cg * group,), w.dtype) if cg is not None else UNKNOWN
    return ((w,) if no_bias else (w, db)) + (x,)


@shape("LC", "LC1D", "LC2D", "LC3D")
@geometry_args
def lc_shape(x, w, b=None, *, group: int = 1, **g):
    # NOTE: the filter's leading dims are the output's spatial dims, then M.
    n, _, sp = split_layout(dims(x), g["order"])
    if w.shape is None:
        return TensorInfo(join_layout(n, None, (None,) * len(sp), g["order"]), x.dtype)
    return TensorInfo(join_layout(n, w.shape[len(sp)], w.shape[:len(sp)], g["order"]), x.dtype)


@shape("LCGradient", "LC1DGradient", "LC2DGradient", "LC3DGradient")
def lc_gradient_shape(x, w, dy, *, no_bias: int = 0, n_out):
    nd = len(dims(x)) - 2
    db = TensorInfo(tuple(w.shape[:nd + 1]), w.dtype) if w.shape is not None else UNKNOWN
    return ((w,) if no_bias else (w, db)) + (x,)


# ---- onnx ----
from engine.catalogue.registry import onnx_converter  # noqa: E402


def onnx_geometry(c, nd, spatial, kshape=()):
    """(kernel, stride, pad_begin, pad_end, dilation) of op `c.op` with every Caffe2 spelling read
    and ``legacy_pad`` resolved on the known input size, for ONNX's explicit attributes."""
    g = {k: c.arg(k, v) for k, v in GEOMETRY.items()}
    return geometry(nd, g, kshape, spatial)


@onnx_converter("Conv", "Conv1D", "Conv2D", "Conv3D")
def conv_onnx(c):
    """ONNX Conv with explicit pads (legacy_pad resolved); NHWC transposed around it (weights too)."""
    r = c.rank(0)
    nd = r - 2
    x, w = c.x_nchw(0), c.x(1)
    if not c.nchw:
        w = c.emit("Transpose", [w], perm=[0, r - 1, *range(1, r - 1)])
    spatial = c.shape(0)[1:-1] if not c.nchw else c.shape(0)[2:]
    kshape = c.shape(1)[1:-1] if not c.nchw else c.shape(1)[2:]
    k, s, pb, pe, d = onnx_geometry(c, nd, spatial, kshape)
    y = c.y_nchw(0)
    c.emit("Conv", [x, w] + ([c.x(2)] if c.n_in > 2 else []), [y], kernel_shape=k, strides=s, pads=pb + pe,
           dilations=d, group=c.arg("group", 1))
    c.done_nchw(0, y, r)


@onnx_converter("ConvTranspose")
def conv_transpose_onnx(c):
    """ONNX ConvTranspose: the same (C_in, C_out / group, k...) weights and output size
    (in - 1) * stride + kernel + adj - pads, adj as output_padding (2-D, as Caffe2's kernel)."""
    r = c.rank(0)
    if r != 4:
        raise c.refuse("not 2-D")
    g = {k: c.arg(k, v) for k, v in GEOMETRY.items()}
    x, w = c.x_nchw(0), c.x(1)
    if not c.nchw:
        w = c.emit("Transpose", [w], perm=[0, 3, 1, 2])
    kshape = c.shape(1)[2:] if c.nchw else c.shape(1)[1:3]
    k, s, pb, pe, a = transpose_geometry(g, kshape, c.arg("adj", 0), c.arg("adjs"), c.arg("adj_h", 0), c.arg("adj_w", 0))
    y = c.y_nchw(0)
    c.emit("ConvTranspose", [x, w] + ([c.x(2)] if c.n_in > 2 else []), [y], kernel_shape=k, strides=s,
           pads=pb + pe, output_padding=a, group=c.arg("group", 1))
    c.done_nchw(0, y, r)
