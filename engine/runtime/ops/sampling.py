"""Sampling ops: WeightedSample, WeightedMultiSampling, ReservoirSampling, LastNWindowCollector,
Sparse(Itemwise)DropoutWithReplacement, UniqueUniformFill and SampleAs (with its gradient).

Random kernels draw from the op's generator (``ctx.rng``: the op's ``random_seed`` when set), so a
seeded op gives the same numbers on every run; the distributions are Caffe2's, the exact stream is
not (Caffe2 uses its own engine), so oracle cases for them compare shapes and dtypes only.
"""
from __future__ import annotations

import copy

import numpy as np

from engine.runtime import device as dev
from engine.runtime.grad_makers import no_gradient, should_not_do_gradient, simple
from engine.runtime.ops.lengths import host_lengths
from engine.runtime.ops.stateful import UnorderedMap
from engine.catalogue.registry import gradient, kernel, shape
from engine.runtime.shapes import INT32, INT64, UNKNOWN, TensorInfo, dims
from proto import caffe2_pb2

# ---- kernels ----


@kernel("WeightedSample", needs_context=True)
def weighted_sample(xp, weights, values=None, *, ctx=None):
    # NOTE: one index per row, drawn with probability proportional to the row's weights.
    w = dev.to_host(weights).astype(np.float64)
    if w.ndim != 2:
        raise ValueError("sampling_weights must be 2-D (batch, weights)")
    if values is not None and tuple(values.shape) != w.shape:
        raise ValueError(f"sampling_values of shape {tuple(values.shape)} for weights {w.shape}")
    if w.size == 0:   # NOTE: no rows or no weights: empty outputs, as Caffe2
        empty = [xp.zeros(0, np.int32)] + ([xp.zeros(0, values.dtype)] if values is not None else [])
        return tuple(empty)
    cdf = np.cumsum(w, axis=1)
    u = ctx.rng.random(w.shape[0]) * (cdf[:, -1] if w.shape[1] else 0)
    idx = np.minimum((cdf <= u[:, None]).sum(axis=1), max(w.shape[1] - 1, 0)).astype(np.int32)
    out = [xp.asarray(idx.reshape(-1, 1))]   # NOTE: (batch, 1), as Caffe2 shapes it
    if values is not None:
        out.append(xp.asarray(dev.to_host(values)[np.arange(w.shape[0]), idx].reshape(-1, 1)))
    return tuple(out)


@kernel("WeightedMultiSampling", needs_context=True)
def weighted_multi_sampling(xp, cdf, like=None, *, num_samples: int = 0, ctx=None):
    # NOTE: indices drawn from a CUMULATIVE weight vector; the 2nd input gives the output shape.
    c = dev.to_host(cdf).astype(np.float64).reshape(-1)
    shape_ = tuple(like.shape) if like is not None else (num_samples,)
    n = int(np.prod(shape_))
    if c.size == 0:
        return xp.zeros(0, np.int32)   # NOTE: an empty cdf samples nothing, whatever the count
    u = ctx.rng.random(n) * c[-1]
    return xp.asarray(np.searchsorted(c, u, side="right").clip(0, c.size - 1).astype(np.int32).reshape(shape_))


@kernel("ReservoirSampling", needs_context=True)
def reservoir_sampling(xp, reservoir, num_visited, data, _mutex, *rest, num_to_collect: int = -1, ctx=None):
    # NOTE: Caffe2's reservoir: an empty (or null) reservoir (re)starts the count and the bookkeeping; rows
    # are appended until num_to_collect, then the row seen as number k replaces slot uniform[0, k]
    # when that is a slot.  With OBJECT_ID only the first row of an object not in the map is
    # collected (later rows and kept objects are skipped, uncounted), and writing slot p erases the
    # map entry of pos_to_object[p], 0 for a fresh slot: Caffe2 then drops object 0 from the map.
    if num_to_collect <= 0:
        raise ValueError("ReservoirSampling needs num_to_collect > 0")
    res, d = dev.to_host(reservoir), dev.to_host(data)
    fresh = res.size == 0 or (res.dtype == object and res.reshape(-1)[0] is None)  # NOTE: a loaded pack is null
    seen = 0 if fresh else int(dev.to_host(num_visited).reshape(-1)[0])
    rows = [] if fresh else list(res.reshape((res.shape[0],) + d.shape[1:]))
    ids = dev.to_host(rest[0]).reshape(-1).tolist() if rest else None
    omap = pos_to_obj = None
    if ids is not None:
        kept = rest[1] if isinstance(rest[1], UnorderedMap) and not fresh else None
        omap = copy.deepcopy(kept) if kept is not None else UnorderedMap(np.dtype(np.int64), np.dtype(np.int32))
        pos_to_obj = [] if fresh else dev.to_host(rest[2]).reshape(-1).tolist()
    eligible = {i for i in ids if i not in omap.values} if ids is not None else None
    new = len(eligible) if ids is not None else d.shape[0]
    target = min(num_to_collect, len(rows) + min(new, num_to_collect))
    rows += [np.zeros(d.shape[1:], d.dtype)] * (target - len(rows))
    if pos_to_obj is not None:
        pos_to_obj += [0] * (target - len(pos_to_obj))
    rng = ctx.rng  # NOTE: once: each ctx.rng is a fresh generator of the op's seed
    for k in range(d.shape[0]):   # NOTE: sequential by definition (each step changes the odds)
        if eligible is not None:
            if ids[k] not in eligible:
                continue
            eligible.discard(ids[k])
        pos = seen if seen < num_to_collect else int(rng.integers(0, seen + 1))
        if pos < num_to_collect:
            rows[pos] = d[k]
            if ids is not None:
                omap.erase(pos_to_obj[pos])
                omap.emplace(ids[k], pos)
                pos_to_obj[pos] = ids[k]
        seen += 1
    if fresh and d.shape[0] == 0:
        out = d.copy()  # NOTE: an empty batch into an empty reservoir gives it the batch's shape
    else:
        out = np.empty((len(rows),) + d.shape[1:], d.dtype)
        for i, row in enumerate(rows):  # NOTE: not np.stack: an object row (PackRecords' record) is one element
            out[i] = row
    outs = [xp.asarray(out), xp.asarray(np.full(dev.to_host(num_visited).shape, seen, np.int64))]
    if ids is not None:
        outs += [omap, xp.asarray(np.array(pos_to_obj, np.int64))]
    return tuple(outs)


def _window_started(buf) -> bool:
    """Whether Caffe2 1.10 counts a LastNWindowCollector buffer as written: non-empty and its first 8
    bytes, read as a pointer, not null (so a float buffer starting with two zeros counts as unwritten)."""
    if not hasattr(buf, "shape") or buf.size == 0:
        return False
    h = np.ascontiguousarray(dev.to_host(buf))
    return h.reshape(-1)[0] is not None if h.dtype == object else bool(np.frombuffer(h.tobytes()[:8], np.uint8).any())


@kernel("LastNWindowCollector")
def last_n_window_collector(xp, buffer, cursor, data, *rest, num_to_collect: int = -1):
    # NOTE: a ring buffer of the last num_to_collect rows; the cursor is the next slot to write. An unwritten
    # buffer (_window_started) starts over: empty, cursor 0, NUM_VISITED 0. More rows than the window: the
    # last num_to_collect fill it from slot 0 and the cursor is 0. The optional NUM_VISITED output (its input
    # follows the mutex) adds the rows of this run.
    if num_to_collect <= 0:
        raise ValueError("LastNWindowCollector needs num_to_collect > 0")
    if cursor.ndim != 0:
        raise ValueError(f"the cursor must be a scalar, got shape {tuple(cursor.shape)}")
    d = dev.to_host(data)
    started = _window_started(buffer)
    buf = dev.to_host(buffer) if started else np.zeros((0,) + d.shape[1:], d.dtype)
    cur = int(dev.to_host(cursor)) if started else 0
    rows = buf.reshape((buf.shape[0],) + d.shape[1:])
    n = d.shape[0]
    if n > num_to_collect:
        out, new_cur = d[n - num_to_collect:].copy(), 0
    else:
        size = min(rows.shape[0] + n, num_to_collect) if rows.shape[0] < num_to_collect else num_to_collect
        out = np.zeros((size,) + d.shape[1:], d.dtype)
        out[:rows.shape[0]] = rows[:size]
        out[(cur + np.arange(n)) % num_to_collect] = d
        new_cur = (cur + n) % num_to_collect
    outs = [xp.asarray(out), xp.asarray(np.array(new_cur, dtype=cursor.dtype))]
    if len(rest) > 1:
        before = int(dev.to_host(rest[1]).reshape(-1)[0]) if started else 0
        outs.append(xp.asarray(np.array([before + n], np.int64)))
    return tuple(outs)


def _dropout_inputs(x, lengths, ratio):
    """(values, lengths) on the host, checked."""
    if not 0 <= ratio <= 1:
        raise ValueError(f"ratio {ratio} not in [0, 1]")
    v = dev.to_host(x).reshape(-1)
    n = host_lengths(lengths)
    if int(n.sum()) != v.size:
        raise ValueError(f"Lengths sum to {int(n.sum())} but X has {v.size} values")
    return v, n


def _dropped(ctx, n, ratio):
    return ctx.rng.random(n) < ratio


@kernel("SparseDropoutWithReplacement", needs_context=True)
def sparse_dropout_with_replacement(xp, x, lengths, *, ratio: float = 0.0, replacement_value: int = 0, ctx=None):
    # NOTE: each example is dropped with probability `ratio` and becomes [replacement_value].
    v, n = _dropout_inputs(x, lengths, ratio)
    drop = _dropped(ctx, n.size, ratio)
    seg = np.repeat(np.arange(n.size), n)
    new_n = np.where(drop, 1, n)
    out = np.empty(int(new_n.sum()), v.dtype)
    starts = np.cumsum(new_n) - new_n
    out[starts[drop]] = replacement_value
    keep = ~drop[seg]
    out[np.repeat(starts[~drop], n[~drop]) + (np.arange(v.size) - (np.cumsum(n) - n)[seg])[keep]] = v[keep]
    return xp.asarray(out), xp.asarray(new_n.astype(lengths.dtype))


@kernel("SparseItemwiseDropoutWithReplacement", needs_context=True)
def sparse_itemwise_dropout_with_replacement(xp, x, lengths, *, ratio: float = 0.0, replacement_value: int = 0,
                                             ctx=None):
    # NOTE: each value is replaced by replacement_value with probability `ratio`; lengths stay.
    v, n = _dropout_inputs(x, lengths, ratio)
    out = np.where(_dropped(ctx, v.size, ratio), v.dtype.type(replacement_value), v)
    return xp.asarray(out), xp.asarray(n.astype(lengths.dtype))


_INT_TYPES = {caffe2_pb2.TensorProto.INT32: np.int32, caffe2_pb2.TensorProto.INT64: np.int64}


@kernel("UniqueUniformFill", needs_context=True)
def unique_uniform_fill(xp, like=None, avoid=None, *, min: int = 0, max: int = 0,  # noqa: A002 - Caffe2's names
                        dtype: int = caffe2_pb2.TensorProto.INT32, shape=(), extra_shape=(), input_as_shape: int = 0,
                        ctx=None):
    # NOTE: distinct integers drawn uniformly from [min, max], none of them in `avoid`.
    if dtype not in _INT_TYPES:
        raise TypeError("UniqueUniformFill supports int32 and int64 only")
    if not min < max:
        raise ValueError(f"max {max} must be greater than min {min}")
    if like is not None:
        out_shape = tuple(int(v) for v in dev.to_host(like).reshape(-1)) if input_as_shape else tuple(like.shape)
    else:
        out_shape = tuple(shape)
    out_shape += tuple(extra_shape)
    n = int(np.prod(out_shape))
    banned = set(dev.to_host(avoid).reshape(-1).tolist()) if avoid is not None else set()
    pool = max - min + 1 - len({b for b in banned if min <= b <= max})
    if n > pool:
        raise ValueError(f"cannot draw {n} unique values from [{min}, {max}] avoiding {len(banned)}")
    cand = np.arange(min, max + 1, dtype=np.int64)
    if banned:
        cand = cand[~np.isin(cand, np.fromiter(banned, np.int64))]
    picked = ctx.rng.choice(cand, size=n, replace=False) if n else np.zeros(0, np.int64)
    return xp.asarray(picked.astype(_INT_TYPES[dtype]).reshape(out_shape))


@kernel("SampleAs")
def sample_as(xp, x, labels):
    # NOTE: the rows of X whose label is > 0.
    lab = dev.to_host(labels).reshape(-1)
    if lab.size != x.shape[0]:
        raise ValueError(f"{lab.size} labels for {x.shape[0]} rows")
    return xp.take(x, xp.asarray(np.flatnonzero(lab > 0)), axis=0)


@kernel("SampleAsGradient")
def sample_as_gradient(xp, x, labels, dy):
    lab = dev.to_host(labels).reshape(-1)
    dx = xp.zeros(x.shape, dtype=dy.dtype)
    dx[xp.asarray(np.flatnonzero(lab > 0))] = dy
    return dx


# ---- gradients ----

gradient("SampleAs")(simple("SampleAsGradient", "I0 I1 GO0", "GI0"))
should_not_do_gradient("WeightedSample", "ReservoirSampling", "LastNWindowCollector")
no_gradient("SparseDropoutWithReplacement", "SparseItemwiseDropoutWithReplacement")


# ---- shapes ----

shape("WeightedSample")(lambda w, v=None: (TensorInfo((*dims(w)[:1], 1), INT32),
                                            TensorInfo((*dims(w)[:1], 1), v.dtype if v else None)))
shape("SampleAsGradient")(lambda x, labels, dy: TensorInfo(dims(x), dy.dtype))
shape("SampleAs")(lambda x, labels: TensorInfo((None, *dims(x)[1:]), x.dtype))

shape("WeightedMultiSampling")(lambda cdf, like=None, *, num_samples=0:
                               TensorInfo(dims(like) if like is not None else (num_samples,), INT32))
shape("SparseItemwiseDropoutWithReplacement")(lambda x, lengths: (x, lengths))
shape("SparseDropoutWithReplacement")(lambda x, lengths: (TensorInfo((None,), x.dtype), lengths))


@shape("LastNWindowCollector")
def last_n_window_collector_shape(buffer, cursor, data, *rest, num_to_collect: int = -1):
    # NOTE: Caffe2's inference: a full window (num_to_collect rows) even before it has filled up.
    return TensorInfo((num_to_collect, *dims(data)[1:]), data.dtype), cursor, TensorInfo((1,), INT64)


@shape("UniqueUniformFill")
def unique_uniform_fill_shape(like=None, avoid=None, *, dtype: int = INT32, shape=(), extra_shape=(),
                              input_as_shape: int = 0):
    # NOTE: like the fills: the `like` input's shape, its values with input_as_shape, else `shape`.
    if like is None:
        base = tuple(shape)
    elif input_as_shape:
        base = (None,) * dims(like)[0] if like.rank == 1 and dims(like)[0] is not None else None
    else:
        base = dims(like)
    return TensorInfo(None if base is None else (*base, *extra_shape), dtype)


@shape("ReservoirSampling")
def reservoir_sampling_shape(reservoir, num_visited, data, *rest, n_out):
    # NOTE: how many rows are kept so far is data-dependent (at most num_to_collect); the object-id
    # bookkeeping outputs are a map and its positions.
    return (TensorInfo((None, *dims(data)[1:]), data.dtype), TensorInfo((1,), INT64), *(UNKNOWN,) * (n_out - 2))
