"""Lengths and segment utilities: conversions between lengths, offsets, ranges and segment ids;
LengthsGather/Pad/Split/Tile/TopK, GatherRanges(ToDense), Partition, LengthsPartition, GatherByKey
and SplitByLengths.

These are index bookkeeping ops that Caffe2 runs on the CPU; the kernels compute the index arrays
on the host with NumPy and gather the data with ``xp`` (so data may live on a GPU).
"""
from __future__ import annotations

from math import prod

import numpy as np

from engine.runtime import device as dev
from engine.runtime.grad_makers import (cc_maker, gradient_not_implemented_yet, no_gradient,
                                should_not_do_gradient, simple)
from engine.catalogue.registry import gradient, kernel, shape
from engine.runtime.shapes import FLOAT, INT32, TensorInfo, dim_op, dims

# ---- kernels ----


def host_lengths(lengths):
    """LENGTHS as a host int64 vector, refusing negative entries."""
    n = dev.to_host(lengths).astype(np.int64).reshape(-1)
    if (n < 0).any():
        raise ValueError(f"negative length {int(n.min())} in LENGTHS")
    return n


def int32_only(x, what="LENGTHS"):
    """Caffe2 registers many of these ops for int32 only and refuses int64 blobs."""
    if x.dtype != np.int32:
        raise TypeError(f"{what} must be int32, got {x.dtype}")
    return x


def offsets_of(n):
    """Exclusive prefix sums: where each segment starts."""
    return np.cumsum(n) - n


def _check_total(n, rows, what="DATA"):
    if int(n.sum()) != rows:
        raise ValueError(f"LENGTHS sum to {int(n.sum())} but {what} has {rows} rows")


def segment_rows(n):
    """Rows of every segment listed in order: (row positions, position inside the segment)."""
    seg = np.repeat(np.arange(n.size), n)
    return seg, np.arange(seg.size) - offsets_of(n)[seg]


@kernel("LengthsToOffsets")
def lengths_to_offsets(xp, lengths, *, include_last_offset: int = 0):
    n = host_lengths(int32_only(lengths))
    out = np.cumsum(np.concatenate(([0], n))) if include_last_offset else offsets_of(n)
    return xp.asarray(out.astype(lengths.dtype))


@kernel("LengthsToRanges")
def lengths_to_ranges(xp, lengths):
    n = host_lengths(lengths)
    return xp.asarray(np.stack([offsets_of(n), n], axis=1).reshape(-1, 2).astype(lengths.dtype))


@kernel("LengthsToSegmentIds")
def lengths_to_segment_ids(xp, lengths):
    n = host_lengths(lengths)
    return xp.asarray(np.repeat(np.arange(n.size), n).astype(np.int32))


@kernel("LengthsToShape")
def lengths_to_shape(xp, lengths):
    # NOTE: every length must be equal: the shape of the dense [len(X), X[0]] block.
    n = host_lengths(lengths)
    if n.size and (n != n[0]).any():
        raise ValueError("LengthsToShape needs equal lengths")
    return xp.asarray(np.array([n.size, n[0] if n.size else 0], dtype=np.int32))


@kernel("LengthsToWeights")
def lengths_to_weights(xp, lengths, *, power: float = 0.5):
    n = host_lengths(lengths)
    with np.errstate(divide="ignore"):
        w = (1.0 / np.power(np.maximum(n, 1).astype(np.float64), power)).astype(np.float32)
    return xp.asarray(np.repeat(w, n))


def _ids_to_lengths(ids, data):
    s = dev.to_host(ids).astype(np.int64).reshape(-1)
    if s.size and ((np.diff(s) < 0).any() or s[0] < 0):
        raise ValueError("segment ids must be sorted and non-negative")
    k = int(s[-1]) + 1 if s.size else 0
    if data is not None:
        if data.shape[0] < k:
            raise ValueError(f"data has {data.shape[0]} rows for {k} segments")
        k = data.shape[0]
    return np.bincount(s, minlength=k)


@kernel("SegmentIdsToLengths")
def segment_ids_to_lengths(xp, ids, data=None):
    return xp.asarray(_ids_to_lengths(ids, data).astype(np.int32))


@kernel("SegmentIdsToRanges")
def segment_ids_to_ranges(xp, ids, data=None):
    n = _ids_to_lengths(ids, data)
    s = dev.to_host(ids).reshape(-1)
    # NOTE: segments after the last id (only with DATA) get the range [0, 0].
    start = np.where(np.arange(n.size) > (s[-1] if s.size else -1), 0, offsets_of(n))
    return xp.asarray(np.stack([start, n], axis=1).reshape(-1, 2).astype(np.int32))


@kernel("LengthsGather")
def lengths_gather(xp, items, lengths, indices):
    n = host_lengths(lengths)
    _check_total(n, items.shape[0], "ITEMS")
    idx = dev.to_host(indices).astype(np.int64).reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= n.size):
        raise IndexError(f"index out of range [0, {n.size}) in INDICES")
    rows = np.repeat(offsets_of(n)[idx] - offsets_of(n[idx]), n[idx]) + np.arange(int(n[idx].sum()))
    return xp.take(items, xp.asarray(rows), axis=0)


@kernel("LengthsPad")
def lengths_pad(xp, data, lengths, *, padding_value: float = -1.0, target_length: int = -1):
    n = host_lengths(lengths)
    if target_length < 0:
        raise ValueError("LengthsPad needs target_length >= 0")
    if n.size and n.max() > target_length:
        raise ValueError(f"length {int(n.max())} exceeds target_length {target_length}")
    _check_total(n, data.shape[0])
    seg, pos = segment_rows(n)
    out = xp.full((n.size * target_length,) + data.shape[1:], padding_value, dtype=data.dtype)
    out[xp.asarray(seg * target_length + pos)] = data
    return out  # NOTE: rows stay flat: (len(LENGTHS) * target_length, ...)


@kernel("LengthsSplit")
def lengths_split(xp, lengths, n_split_in=None, *, n_split: int = 0):
    n = host_lengths(lengths)
    k = int(dev.to_host(n_split_in).reshape(-1)[0]) if n_split_in is not None else n_split
    if k <= 0:
        raise ValueError(f"n_split must be positive, got {k}")
    # NOTE: the first (length % n_split) pieces of a segment are one longer.
    out = n[:, None] // k + (np.arange(k)[None, :] < (n % k)[:, None])
    return xp.asarray(out.reshape(-1).astype(lengths.dtype))


@kernel("LengthsTile")
def lengths_tile(xp, data, lengths):
    n = host_lengths(lengths)
    if n.size != data.shape[0]:
        raise ValueError(f"{n.size} lengths for {data.shape[0]} rows")
    return xp.take(data, xp.asarray(np.repeat(np.arange(n.size), n)), axis=0)


@kernel("LengthsTopK")
def lengths_top_k(xp, data, lengths, *, k: int = -1):
    # NOTE: per segment its k largest values, descending (ties: lower index first); short
    # segments pad values with 0 and indices with -1.
    if k < 1:
        raise ValueError("LengthsTopK needs k >= 1")
    n = host_lengths(lengths)
    _check_total(n, data.shape[0])
    v = dev.to_host(data).reshape(-1)
    seg, pos = segment_rows(n)
    order = np.lexsort((pos, -v, seg))
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size) - offsets_of(n)[seg[order]]
    keep = rank < k
    vals = np.zeros((n.size, k), dtype=data.dtype)
    ids = np.full((n.size, k), -1, dtype=np.int32)
    vals[seg[keep], rank[keep]] = v[keep]
    ids[seg[keep], rank[keep]] = pos[keep]
    return xp.asarray(vals), xp.asarray(ids)


@kernel("LengthsTopKGradient")
def lengths_top_k_gradient(xp, lengths, indices, dy, *, k: int = -1):
    n = host_lengths(lengths)
    ids = dev.to_host(indices).astype(np.int64)
    seg, col = np.nonzero(ids >= 0)
    dx = xp.zeros(int(n.sum()), dtype=dy.dtype)
    dx[xp.asarray(offsets_of(n)[seg] + ids[seg, col])] = dy[xp.asarray(seg), xp.asarray(col)]
    return dx


def _range_rows(ranges, size):
    """Concatenated row numbers of every (start, length) range, and the lengths of each example."""
    r = dev.to_host(ranges).astype(np.int64).reshape(ranges.shape[0], -1, 2)
    start, count = r[..., 0].reshape(-1), r[..., 1].reshape(-1)
    if (start < 0).any() or (count < 0).any() or (start + count > size).any():
        raise IndexError(f"range out of bounds for data of {size} rows")
    rows = np.repeat(start - offsets_of(count), count) + np.arange(int(count.sum()))
    return rows, r[..., 1].sum(axis=1)


@kernel("GatherRanges")
def gather_ranges(xp, data, ranges):
    rows, lens = _range_rows(ranges, data.shape[0])
    return xp.take(data.reshape(data.shape[0], -1), xp.asarray(rows), axis=0).reshape(-1), \
        xp.asarray(lens.astype(np.int32))


@kernel("GatherRangesToDense", needs_context=True)
def gather_ranges_to_dense(xp, data, ranges, key=None, *, lengths=(), min_observation: int = 10000,
                           max_mismatched_ratio: float = 0.01, max_empty_ratio: float = 1.0, ctx=None):
    # NOTE: feature j of example i is range (i, j), of exactly lengths[j] values (ordered by KEY
    # when given). Empty ranges and ranges of another length give zeros; a run fails when their
    # count exceeds max(batch, min_observation) * the allowed ratio (Caffe2 also counts earlier
    # runs of the same op instance).
    if not lengths or min(lengths) <= 0 or min_observation <= 0:
        raise ValueError("GatherRangesToDense needs positive lengths and min_observation")
    if data.ndim != 1 or ranges.ndim != 3 or ranges.shape[2] != 2:
        raise ValueError("data must be 1-D and ranges (batch, features, 2)")
    r = dev.to_host(ranges).astype(np.int64)
    batch, nfeat = r.shape[0], r.shape[1]
    if nfeat != len(lengths) or nfeat != len(ctx.op.output):
        raise ValueError(f"{nfeat} ranges per example for {len(lengths)} lengths and {len(ctx.op.output)} outputs")
    if key is not None and key.dtype != np.int64:
        raise TypeError("Key has to be type int64_t")
    host, keys = dev.to_host(data), None if key is None else dev.to_host(key)
    allowed = max(batch, min_observation)
    outs = []
    for j, width in enumerate(lengths):   # NOTE: one gather per feature
        start, count = r[:, j, 0], r[:, j, 1]
        full = count == width
        empty, wrong = int((count == 0).sum()), int(((count != 0) & ~full).sum())
        if max_mismatched_ratio < 1.0 and allowed * max_mismatched_ratio < wrong:
            raise ValueError(f"Ratio of range length mismatch for feature at index {j} is {wrong / batch}")
        if max_empty_ratio < 1.0 and allowed * max_empty_ratio < empty:
            raise ValueError(f"Ratio of empty ranges for feature at index {j} is {empty / batch}")
        pos = start[full, None] + np.arange(width)[None, :]
        if keys is not None:
            pos = np.take_along_axis(pos, np.argsort(keys[pos], axis=1, kind="stable"), axis=1)
        out = np.zeros((batch, width), dtype=host.dtype)
        out[full] = host[pos]
        outs.append(xp.asarray(out))
    return tuple(outs)


def _partition_of(keys, parts):
    k = dev.to_host(keys).astype(np.int64).reshape(-1)
    return ((k % parts) + parts) % parts, k


def _partition(xp, ins, n_out, pack_first_input, lengths=None):
    """Split every input by its row's key (``keys % parts``); LENGTHS (if any) split per segment."""
    parts = n_out // (len(ins) + (lengths is not None))
    if parts * (len(ins) + (lengths is not None)) != n_out or parts < 1:
        raise ValueError(f"{n_out} outputs are not a multiple of {len(ins) + (lengths is not None)} inputs")
    p, k = _partition_of(ins[0], parts)
    for x in ins[1:]:
        if tuple(x.shape[:ins[0].ndim]) != tuple(ins[0].shape):
            raise ValueError(f"input of shape {tuple(x.shape)} does not start with the keys' shape")
    outs = []
    for q in range(parts):
        sel = np.flatnonzero(p == q)
        if lengths is not None:
            n = host_lengths(lengths)
            _check_total(n, k.size, "keys")
            seg = np.repeat(np.arange(n.size), n)
            outs.append(xp.asarray(np.bincount(seg[sel], minlength=n.size).astype(lengths.dtype)))
        for i, x in enumerate(ins):
            flat = x.reshape((k.size,) + x.shape[ins[0].ndim:])
            y = xp.take(flat, xp.asarray(sel), axis=0)
            if i == 0 and pack_first_input:
                y = (y // parts).astype(x.dtype)
            outs.append(y)
    return tuple(outs)


@kernel("Partition", needs_context=True)
def partition(xp, *ins, pack_first_input: int = 0, ctx=None):
    if not ins or ins[0].dtype.kind not in "iu":
        raise TypeError("Partition keys must be integers")
    return _partition(xp, ins, len(ctx.op.output), pack_first_input)


@kernel("LengthsPartition", needs_context=True)
def lengths_partition(xp, lengths, *ins, pack_first_input: int = 0, ctx=None):
    if not ins or ins[0].dtype.kind not in "iu" or ins[0].ndim != 1:
        raise TypeError("LengthsPartition keys must be a 1-D integer tensor")
    return _partition(xp, ins, len(ctx.op.output), pack_first_input, lengths)


@kernel("GatherByKey")
def gather_by_key(xp, keys, *shards):
    # NOTE: the inverse of Partition(keys, values): row i is the next unread row of shard keys[i] % P.
    parts = len(shards)
    p, k = _partition_of(keys, parts)
    order = np.argsort(p, kind="stable")
    counts = np.bincount(p, minlength=parts)
    for q, s in enumerate(shards):
        if s.shape[0] != counts[q]:
            raise ValueError(f"shard {q} has {s.shape[0]} rows, keys send {counts[q]}")
    flat = xp.concatenate([s.reshape((s.shape[0], int(np.prod(s.shape[1:])))) for s in shards], axis=0)
    rows = np.empty(k.size, dtype=np.int64)
    rows[order] = np.arange(k.size)
    out = xp.take(flat, xp.asarray(rows), axis=0)
    return out.reshape(tuple(keys.shape) + tuple(shards[0].shape[1:]))


@kernel("SplitByLengths", needs_context=True)
def split_by_lengths(xp, x, lengths, *, axis: int | None = None, order: str = "NCHW",
                     use_scaling_lengths: int = 0, ctx=None):
    # NOTE: without ``axis`` the split axis is the channel axis of ``order`` (1 for NCHW).
    n_out = len(ctx.op.output)
    if axis is None:
        axis = 1 if order == "NCHW" else 3
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis} out of range for rank {x.ndim}")
    n = host_lengths(lengths)
    if n.size % n_out:
        raise ValueError(f"{n.size} lengths do not split into {n_out} outputs")
    axis = axis % x.ndim if axis >= 0 else axis + x.ndim
    if use_scaling_lengths:
        total = int(n.sum())
        if total == 0 or x.shape[axis] % total:
            raise ValueError(f"axis of {x.shape[axis]} is not a multiple of the lengths' sum {total}")
        n = n * (x.shape[axis] // total)
    sizes = n.reshape(n_out, -1).sum(axis=1)
    if int(sizes.sum()) != x.shape[axis]:
        raise ValueError(f"lengths sum to {int(sizes.sum())}, input axis {axis} has {x.shape[axis]}")
    return tuple(xp.split(x, np.cumsum(sizes)[:-1].tolist(), axis=axis))


# ---- gradients ----

gradient("LengthsTile")(simple("LengthsSum", "GO0 I1", "GI0"))
gradient("LengthsTopK")(simple("LengthsTopKGradient", "I1 O1 GO0", "GI0"))


@gradient("GatherByKey")
@cc_maker
def gather_by_key_maker(g):
    """A ``Partition`` of the gradient by the same keys; the keys' partitions are dropped blobs."""
    outs = []
    for k in range(1, len(g.op.input)):
        outs += [f"_{g.GI(k)}_keys", g.GI(k)]
    return [g.op_("Partition", [g.I(0), g.GO(0)], outs, pack_first_input=0)]


@gradient("SplitByLengths")
@cc_maker
def split_by_lengths_maker(g):
    """A ``Concat`` of every output's gradient (its split sizes go to ``_<GI0>_dims``)."""
    return [g.op_("Concat", [g.GO(k) for k in range(len(g.op.output))], [g.GI(0), f"_{g.I(0)}_grad_dims"])]


no_gradient("LengthsPad", "LengthsPartition", "Partition", "GatherRangesToDense")
should_not_do_gradient("LengthsToSegmentIds", "LengthsToShape", "SegmentIdsToLengths", "SegmentIdsToRanges",
                       "LengthsGather")
gradient_not_implemented_yet("LengthsSplit")


# ---- shapes ----

shape("LengthsToRanges")(lambda lengths: TensorInfo((dims(lengths)[0], 2), lengths.dtype))
# NOTE: without DATA the number of segments is a value (the last id + 1).
shape("SegmentIdsToRanges")(lambda ids, data=None: TensorInfo((dims(data)[0] if data else None, 2), INT32))


@shape("LengthsToOffsets")
def lengths_to_offsets_shape(lengths, *, include_last_offset: int = 0):
    d = dims(lengths)[0]
    return TensorInfo((None if d is None else d + bool(include_last_offset),), lengths.dtype)


shape("LengthsToShape")(lambda lengths: TensorInfo((2,), INT32))
shape("LengthsToSegmentIds")(lambda lengths: TensorInfo((None,), INT32))
shape("LengthsTile")(lambda data, lengths: TensorInfo((None, *dims(data)[1:]), data.dtype))


@shape("LengthsPad")
def lengths_pad_shape(data, lengths, *, target_length: int = -1):
    n = dims(lengths)[0]
    return TensorInfo((None if n is None else n * target_length, *dims(data)[1:]), data.dtype)


@shape("LengthsTopK")
def lengths_top_k_shape(data, lengths, *, k: int = -1):
    return TensorInfo((dims(lengths)[0], k), data.dtype), TensorInfo((dims(lengths)[0], k), INT32)


shape("GatherByKey")(lambda keys, *shards: TensorInfo((*dims(keys), *dims(shards[0])[1:]), shards[0].dtype))
shape("SegmentIdsToLengths")(lambda ids, data=None: TensorInfo((dims(data)[0] if data else None,), INT32))
shape("LengthsGather")(lambda items, lengths, indices: TensorInfo((None, *dims(items)[1:]), items.dtype))
# NOTE: Caffe2's inference gives the values output DATA's element count (an upper bound; the run gives the
# summed range lengths).
shape("GatherRanges")(lambda data, ranges: (TensorInfo((dim_op(lambda *v: prod(v), *dims(data)),), data.dtype),
                                            TensorInfo(dims(ranges)[:1], INT32)))

shape("LengthsToWeights")(lambda lengths: TensorInfo((None,), FLOAT))


@shape("LengthsSplit")
def lengths_split_shape(lengths, n_split_in=None, *, n_split: int = 0):
    n = dims(lengths)[0]
    return TensorInfo((None if n is None or n_split_in is not None else n * n_split,), lengths.dtype)


@shape("GatherRangesToDense")
def gather_ranges_to_dense_shape(data, ranges, key=None, *, lengths=()):
    return tuple(TensorInfo((dims(ranges)[0], w), data.dtype) for w in lengths)


@shape("Partition")
def partition_shape(*ins, n_out):
    # NOTE: outputs go partition by partition, one per input; how many rows each gets is data-dependent.
    kr = len(dims(ins[0]))
    per = [TensorInfo((None, *dims(x)[kr:]), x.dtype) for x in ins]
    return tuple(per[k % len(ins)] for k in range(n_out))


@shape("LengthsPartition")
def lengths_partition_shape(lengths, *ins, n_out):
    per = [TensorInfo(dims(lengths), INT32), *(TensorInfo((None, *dims(x)[1:]), x.dtype) for x in ins)]
    return tuple(per[k % len(per)] for k in range(n_out))


@shape("SplitByLengths")
def split_by_lengths_shape(x, lengths, *, axis: int | None = None, order: str = "NCHW", n_out):
    xd = list(dims(x))
    xd[(1 if order == "NCHW" else 3) if axis is None else axis] = None
    return (TensorInfo(tuple(xd), x.dtype),) * n_out


# ---- onnx ----
from engine.catalogue.registry import onnx_converter  # noqa: E402


def onnx_segments(c, lengths):
    """The run-time segment structure of `lengths` (any integer dtype, any shape read flat):
    (lengths as int64, each segment's start, each position's segment id, the positions 0..total-1),
    all int64.  Position j's segment is how many segment ends lie at or before j."""
    n = c.emit("Cast", [c.emit("Reshape", [lengths, c.ints([-1])])], to=7)
    ends = c.emit("CumSum", [n, c.const(np.array(0, np.int64), "axis")])
    total = c.reduce("ReduceSum", n, None, 0)
    pos = c.emit("Range", [c.const(np.array(0, np.int64), "zero"), total, c.const(np.array(1, np.int64), "one")])
    ids = c.reduce("ReduceSum", c.emit("Cast", [c.emit("GreaterOrEqual", [
        c.emit("Unsqueeze", [pos, c.ints([0])]), c.emit("Unsqueeze", [ends, c.ints([1])])])], to=7), [0], 0)
    return n, c.emit("Sub", [ends, n]), ids, pos


@onnx_converter("LengthsToSegmentIds")
def lengths_to_segment_ids_onnx(c):
    """Each position's segment id (int32), from the lengths' running ends."""
    c.emit("Cast", [onnx_segments(c, c.x(0))[2]], [c.y(0)], to=6)


@onnx_converter("LengthsToWeights")
def lengths_to_weights_onnx(c):
    """Each position gets 1 / max(length, 1)^power of its segment, computed in float64 and rounded to
    float32 as the kernel does."""
    n, _, ids, _ = onnx_segments(c, c.x(0))
    w = c.emit("Reciprocal", [c.emit("Pow", [
        c.emit("Max", [c.emit("Cast", [n], to=11), c.const(np.array([1.0]), "one_d")]),
        c.const(np.array(float(c.arg("power", 0.5))), "power")])])
    c.emit("Cast", [c.emit("Gather", [w, ids], axis=0)], [c.y(0)], to=1)
