"""Sparse ops: Gather, SparseToDense, BatchGather, SparseLengthsSum and the Lengths reducer family."""
from __future__ import annotations

import numpy as np

from engine import device as dev
from engine.registry import kernel

# ---- kernels ----

@kernel("Gather")
def gather(xp, data, indices, *, axis: int = 0):
    return xp.take(data, indices.astype(np.int64), axis=axis)


@kernel("BatchGather")
def batch_gather(xp, data, indices):
    return xp.take(data, indices.astype(np.int64), axis=1)


@kernel("BatchGatherGradient")
def batch_gather_gradient(xp, data, indices, dy, *, axis: int = 1):
    dx = xp.zeros_like(data)
    moved = xp.moveaxis(dx, axis, 0)  # a view: writes land in dx
    xp.add.at(moved, indices.reshape(-1).astype(np.int64),
              xp.moveaxis(dy, axis, 0).reshape((indices.size,) + moved.shape[1:]))
    return dx


@kernel("SparseToDense")
def sparse_to_dense(xp, indices, values, like=None):
    # NOTE: dim 0 comes from the 3rd input when given, else max(index) + 1; duplicates add up.
    idx = indices.astype(np.int64)
    n = like.shape[0] if like is not None else int(idx.max()) + 1 if idx.size else 0
    out = xp.zeros((n,) + values.shape[1:], dtype=values.dtype)
    xp.add.at(out, idx, values)
    return out


def _segments(xp, lengths):
    n = dev.to_host(lengths).astype(np.int64)
    return xp.asarray(np.repeat(np.arange(n.size), n)), n


def _segment_sum(xp, rows, lengths, mean=False):
    seg, n = _segments(xp, lengths)
    out = xp.zeros((n.size,) + rows.shape[1:], dtype=rows.dtype)
    xp.add.at(out, seg, rows)
    if mean:
        out /= xp.asarray(np.maximum(n, 1).astype(rows.dtype)).reshape((-1,) + (1,) * (rows.ndim - 1))
    return out


@kernel("LengthsSum")
def lengths_sum(xp, data, lengths):
    return _segment_sum(xp, data, lengths)


@kernel("LengthsMean")
def lengths_mean(xp, data, lengths):
    return _segment_sum(xp, data, lengths, mean=True)


@kernel("SparseLengthsSum")
def sparse_lengths_sum(xp, data, indices, lengths):
    return _segment_sum(xp, xp.take(data, indices.astype(np.int64), axis=0), lengths)


@kernel("SparseLengthsMean")
def sparse_lengths_mean(xp, data, indices, lengths):
    return _segment_sum(xp, xp.take(data, indices.astype(np.int64), axis=0), lengths, mean=True)


@kernel("SparseLengthsWeightedSum")
def sparse_lengths_weighted_sum(xp, data, weights, indices, lengths):
    rows = xp.take(data, indices.astype(np.int64), axis=0)
    return _segment_sum(xp, rows * weights.reshape((-1,) + (1,) * (rows.ndim - 1)), lengths)


@kernel("LengthsSumGradient", "SparseLengthsSumGradient")
def lengths_sum_gradient(xp, dy, lengths, *_indices):
    # NOTE: one row of dY per index: the values of the GradientSlice over the forward INDICES.
    return xp.take(dy, _segments(xp, lengths)[0], axis=0)


@kernel("SparseLengthsIndicesInGradientSumGradient", "LengthsIndicesInGradientSumGradient")
def sparse_lengths_sum_gradient(xp, dy, lengths, indices):
    return xp.take(dy, _segments(xp, lengths)[0], axis=0)


@kernel("SparseLengthsIndicesInGradientMeanGradient", "LengthsMeanGradient")
def sparse_lengths_mean_gradient(xp, dy, lengths, *_indices):
    seg, n = _segments(xp, lengths)
    scale = xp.asarray((1 / np.maximum(n, 1)).astype(dy.dtype))
    return xp.take(dy * scale.reshape((-1,) + (1,) * (dy.ndim - 1)), seg, axis=0)


@kernel("ScatterWeightedSum")
def scatter_weighted_sum(xp, x, w0, indices, *slices_weights):
    # NOTE: X[idx] = w0 * X[idx] + sum_k w_k * slice_k  (output is X itself in Caffe2).
    idx = indices.reshape(-1).astype(np.int64)
    out = x.copy()
    out[idx] *= w0.reshape(())
    for s, w in zip(slices_weights[0::2], slices_weights[1::2]):
        xp.add.at(out, idx, s.reshape((idx.size,) + x.shape[1:]) * w.reshape(()))
    return out


@kernel("ScatterAssign")
def scatter_assign(xp, data, indices, slices):
    out = data.copy()
    out[indices.reshape(-1).astype(np.int64)] = slices.reshape((indices.size,) + data.shape[1:])
    return out


# ---- gradients ----

# ---- shapes ----
