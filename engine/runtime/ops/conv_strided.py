"""Strided 2-D float32 convolutions with a kernel much bigger than the stride (ResNet's 7x7/2 first
layer) in blocks of im2col columns built from the input's stride phases (issue 46).

A whole-batch im2col of the first layer is 59 MB at batch 8, freshly allocated (page-faulted) on
every call, then read by one skinny GEMM (K = 147); its gradient adds a second 59 MB of column
gradients, scatter-added back.  Here each block of output rows (:data:`BLOCK_BYTES`) gets its
columns in one thread's reused scratch memory, one GEMM per block, and the gradient's dW and dX
come from the same block while it is hot.  A stride-2 gather is slow, so the input is first split
into its stride phases (``phase[a, b] = xpad[..., a::sh, b::sw]``, one pass): each phase's kernel
taps are then an overlapping stride-1 window view, and a block's columns are one copy per phase.

Rows of the column block are ordered phase by phase, (c, tap row, tap col) inside a phase;
:func:`_plan` gives the matching permutation of the filter's columns.
"""
from __future__ import annotations

import itertools

import numpy as np

from engine.runtime import blas, parallel

# NOTE: a column block of about this many bytes (conv1 at 224x224: one image).  Smaller, L2-sized
# blocks gain nothing measurable on forward and dW, and the gradient with dX loses: its scatter is
# dozens of small NumPy adds per block, under the GIL (conv1 batch 8, load 2: 0.5 MB blocks 50.9 ms,
# 2 MB 35.8 ms, 8 MB 32.3 ms; forward 14.7 / 15.1 / 13.6 ms)
BLOCK_BYTES = 1 << 23


def applies(x, w, k, s, d) -> bool:
    """Whether this path runs: NumPy float32 2-D, some stride above 1, no dilation, and a kernel of at
    least 3x the stride's area (conv1's 7x7/2: its columns are 12x its input).  NOTE: ResNet's 3x3/2
    layers ran 2-2.7x slower in-net this way (their late, thin per-image GEMMs; a batch-folded GEMM wins)."""
    return (isinstance(x, np.ndarray) and len(k) == 2 and x.dtype == w.dtype == np.float32 and blas.available()
            and k[0] * k[1] >= 3 * s[0] * s[1] > 3 and all(v == 1 for v in d) and all(a >= b for a, b in zip(k, s)))


def _plan(c, k, s):
    """[(a, b, taps down, taps across, first column row)] per stride phase, and the filter-column
    permutation putting the filter's (C, kH, kW) columns in the block's row order."""
    groups, order, row = [], [], 0
    for a, b in itertools.product(range(s[0]), range(s[1])):
        ti, tj = len(range(a, k[0], s[0])), len(range(b, k[1], s[1]))
        groups.append((a, b, ti, tj, row))
        order += [(ci * k[0] + a + ii * s[0]) * k[1] + b + jj * s[1]
                  for ci, ii, jj in itertools.product(range(c), range(ti), range(tj))]
        row += c * ti * tj
    return groups, np.array(order)


def phase_geometry(xshape, k, s, pb, pe):
    """The output (Ho, Wo) of a strided 2-D conv of an NCHW `xshape`, and each stride phase's (hq, wq):
    the zero-padded input cut into ``phase[a, b] = xpad[..., a::sh, b::sw]`` (padded up to whole strides)."""
    (h, w), (sh, sw) = xshape[2:], s
    hp, wp = h + pb[0] + pe[0], w + pb[1] + pe[1]
    return ((hp - k[0]) // sh + 1, (wp - k[1]) // sw + 1), (-(-hp // sh), -(-wp // sw))


def _phases(x, k, s, pb, pe):
    """(N, sh, sw, C, hq, wq) stride phases of zero-padded NCHW `x`, and the output (Ho, Wo)."""
    (n, c, h, w), (sh, sw) = x.shape, s
    out, (hq, wq) = phase_geometry(x.shape, k, s, pb, pe)
    ph = np.empty((n, sh, sw, c, hq, wq), dtype=np.float32)

    def part(t):
        xpad = np.zeros((t(ph).shape[0], c, hq * sh, wq * sw), dtype=np.float32)
        xpad[:, :, pb[0]:pb[0] + h, pb[1]:pb[1] + w] = t(x)
        t(ph)[...] = xpad.reshape(-1, c, hq, sh, wq, sw).transpose(0, 3, 5, 1, 2, 4)
    parallel.split(part, ph.shape, ph.nbytes, axis=0)
    return ph, out


def _fill(buf, kk, ph_n, groups, c, r0, r1, wo):
    """The (K, (r1 - r0) * Wo) columns of output rows [r0, r1) of one image (phases `ph_n`,
    (sh, sw, C, hq, wq)), in the front of scratch `buf`."""
    cols = buf[:kk * (r1 - r0) * wo].reshape(kk, -1)
    for a, b, ti, tj, row in groups:
        base = ph_n[a, b, :, r0:]
        st = base.strides
        win = np.lib.stride_tricks.as_strided(base, (c, ti, tj, r1 - r0, wo), (st[0], st[1], st[2], st[1], st[2]))
        cols[row:row + c * ti * tj].reshape(c, ti, tj, r1 - r0, wo)[...] = win
    return cols


def _blocks(n, ho, rows):
    """Jobs of (image, [(r0, r1), ...]): row blocks of at most `rows`; a batch below the thread count
    cuts each image's rows over the threads too."""
    if n < parallel.THREADS:
        rows = min(rows, -(-ho // parallel.THREADS))
    spans = [(r, min(r + rows, ho)) for r in range(0, ho, rows)]
    per = len(spans) if n >= parallel.THREADS else -(-len(spans) // parallel.THREADS)
    return [(i, spans[j:j + per]) for i in range(n) for j in range(0, len(spans), per)]


def conv_strided(x, w, k, s, pb, pe):
    """Y (N, M, Ho, Wo) of a group=1 NCHW conv (see :func:`applies`), one GEMM per row block."""
    (n, c), m = x.shape[:2], w.shape[0]
    ph, (ho, wo) = _phases(x, k, s, pb, pe)
    groups, order = _plan(c, k, s)
    kk = order.size
    w2 = np.ascontiguousarray(w.reshape(m, -1)[:, order])
    y = np.empty((n, m, ho, wo), dtype=np.float32)
    rows = max(1, BLOCK_BYTES // (4 * kk * wo))

    def job(i, spans):
        buf = parallel.scratch((kk * rows * wo,), np.float32)
        for r0, r1 in spans:
            cols = _fill(buf, kk, ph[i], groups, c, r0, r1, wo)
            blas.sgemm(w2.ctypes.data, kk, cols.ctypes.data, cols.shape[1], y[i, :, r0].ctypes.data, ho * wo,
                       m, cols.shape[1], kk)
    parallel.blas_calls([lambda j=j: job(*j) for j in _blocks(n, ho, rows)])
    return y


def conv_strided_gradient(x, w, dy, k, s, pb, pe, need_dx):
    """(dW, dX or None) of :func:`conv_strided`'s conv: per row block, dW.T += cols @ dY_block.T and
    dcols = W.T @ dY_block scatter-added into dX's stride phases, while the block is in cache.
    dW sums one part per job.  The blocks' dX scatters overlap, so with dX each job owns whole images,
    and a batch below the thread count gives each (row-cut) job its own dX phases, summed at the end
    (one job would leave its GEMMs to OpenBLAS's spin-waiting threads: 1 ms calls took 20 ms at load 2)."""
    (n, c, h, wd), m = x.shape, w.shape[0]
    ph, (ho, wo) = _phases(x, k, s, pb, pe)
    groups, order = _plan(c, k, s)
    kk = order.size
    w2t = np.ascontiguousarray(w.reshape(m, -1)[:, order].T)  # (K, M)
    rows = max(1, BLOCK_BYTES // (4 * kk * wo))
    own = need_dx and n < parallel.THREADS  # NOTE: jobs with their own dX phases
    jobs = _blocks(n, ho, rows) if own or not need_dx else \
        [(i, [(r, min(r + rows, ho)) for r in range(0, ho, rows)]) for i in range(n)]
    parts = np.empty((len(jobs), kk, m), dtype=np.float32)  # dW.T: the longer side (K) as the GEMM's M
    dphs = np.zeros((len(jobs) if own else 1,) + ph.shape, dtype=np.float32) if need_dx else None
    p = ho * wo

    def job(j, i, spans):
        buf = parallel.scratch((2, kk * rows * wo), np.float32)
        for q, (r0, r1) in enumerate(spans):
            nc, dyb = (r1 - r0) * wo, dy[i, :, r0].ctypes.data
            cols = _fill(buf[0], kk, ph[i], groups, c, r0, r1, wo)
            blas.sgemm(cols.ctypes.data, nc, dyb, p, parts[j].ctypes.data, m, kk, m, nc,
                       beta=float(q > 0), trans_b=True)
            if dphs is None:
                continue
            dph = dphs[j if own else 0]
            dcols = buf[1, :kk * nc].reshape(kk, nc)
            blas.sgemm(w2t.ctypes.data, m, dyb, p, dcols.ctypes.data, nc, kk, nc, m)
            for a, b, ti, tj, row in groups:
                blk = dcols[row:row + c * ti * tj].reshape(c, ti, tj, r1 - r0, wo)
                for ii, jj in itertools.product(range(ti), range(tj)):
                    dph[i, a, b, :, r0 + ii:r1 + ii, jj:jj + wo] += blk[:, ii, jj]
    parallel.blas_calls([lambda j=j, job_=job_: job(j, *job_) for j, job_ in enumerate(jobs)])
    dw = np.empty((m, kk), dtype=np.float32)
    dw[:, order] = parts.sum(axis=0).T
    if dphs is None:
        return dw.reshape(w.shape), None
    dph = dphs.sum(axis=0) if own else dphs[0]
    dx = np.empty(x.shape, dtype=np.float32)
    full = dph.transpose(0, 3, 4, 1, 5, 2).reshape(n, c, dph.shape[4] * s[0], dph.shape[5] * s[1])
    parallel.split(lambda t: t(dx).__setitem__(Ellipsis, t(full)[:, :, pb[0]:pb[0] + h, pb[1]:pb[1] + wd]), dx.shape,
                   dx.nbytes, axis=0)
    return dw.reshape(w.shape), dx
