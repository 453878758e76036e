"""Dense/sparse conversion and feature ops of sparse ranking nets: Batch(Sparse|Dense)To(Dense|Sparse),
SparseToDenseMask, one-hot and bucket ops, the Merge*FeatureTensors family, maps, KeySplit, IndexHash,
NGramFromCategorical, id-list ops, FindDuplicateElements, RemoveDataBlocks, UnsafeCoalesce,
ViterbiPath, SwapBestPath and APMeter.

Most of these are CPU index bookkeeping in Caffe2: kernels work on host NumPy arrays and hand the
results back through ``xp``.
"""
from __future__ import annotations

import numpy as np

from engine.runtime import device as dev
from engine.runtime.grad_makers import cc_maker, no_gradient, should_not_do_gradient, simple
from engine.runtime.ops.lengths import host_lengths, offsets_of
from engine.runtime.ops.stateful import UnorderedMap
from engine.catalogue.registry import gradient, kernel, shape
from engine.runtime.shapes import BOOL, FLOAT, INT32, INT64, TensorInfo, dims, opaque

# ---- kernels ----


def _h(x):
    return dev.to_host(x)


def _example_rows(lengths, indices):
    n = host_lengths(lengths)
    if int(n.sum()) != indices.size:
        raise ValueError(f"LENGTHS sum to {int(n.sum())} but there are {indices.size} indices")
    return np.repeat(np.arange(n.size), n), n


@kernel("BatchSparseToDense")
def batch_sparse_to_dense(xp, lengths, indices, values, like=None, *, dense_last_dim: int = -1,
                          default_value: float = 0.0):
    idx = _h(indices).astype(np.int64).reshape(-1)
    seg, n = _example_rows(lengths, idx)
    width = like.shape[-1] if like is not None else dense_last_dim
    if width < 0:
        raise ValueError("BatchSparseToDense needs dense_last_dim or a 4th input")
    if idx.size and (idx.min() < 0 or idx.max() >= width):
        raise IndexError(f"index out of range [0, {width}) in INDICES")
    out = np.full((n.size, width), default_value, dtype=values.dtype)
    out[seg, idx] = _h(values).reshape(-1)  # NOTE: a repeated index keeps its last value
    return xp.asarray(out)


@kernel("BatchDenseToSparse")
def batch_dense_to_sparse(xp, lengths, indices, dense):
    idx = _h(indices).astype(np.int64).reshape(-1)
    seg, n = _example_rows(lengths, idx)
    if dense.shape[0] != n.size:
        raise ValueError(f"dense has {dense.shape[0]} rows for {n.size} lengths")
    if idx.size and (idx.min() < 0 or idx.max() >= dense.shape[1]):
        raise IndexError(f"index out of range [0, {dense.shape[1]}) in INDICES")
    return dense[xp.asarray(seg), xp.asarray(idx)]


def _mask_positions(mask, ids):
    """Position of every id in the ``mask`` argument, -1 for ids not in it."""
    m = np.asarray(mask, np.int64)
    order = np.argsort(m, kind="stable")
    at = np.searchsorted(m[order], ids)
    at = np.minimum(at, max(m.size - 1, 0))
    hit = (m.size > 0) & (m[order][at] == ids) if m.size else np.zeros(ids.shape, bool)
    return np.where(hit, order[at] if m.size else 0, -1)


@kernel("SparseToDenseMask", needs_context=True)
def sparse_to_dense_mask(xp, indices, values, default, lengths=None, *, mask=(), return_presence_mask: int = 0,
                         max_skipped_indices: int = 50, ctx=None):
    # NOTE: row i, column mask.index(id) gets the value of id; ids not in the mask are skipped
    # (Caffe2 logs beyond max_skipped_indices of them), a repeated id keeps its LAST value.
    ids = _h(indices).astype(np.int64).reshape(-1)
    tail = tuple(values.shape[1:])
    if default.size != int(np.prod(tail)):
        raise ValueError(f"default_value of shape {tuple(default.shape)} for values of rows {tail}")
    default = default.reshape(tail)
    if values.shape[0] != ids.size:
        raise ValueError(f"{values.shape[0]} values for {ids.size} indices")
    if lengths is None:
        seg, rows = np.zeros(ids.size, np.int64), 1
    else:
        seg, n = _example_rows(lengths, ids)
        rows = n.size
    col = _mask_positions(mask, ids)
    # NOTE: an index < 0 or >= its type's max is skipped; the op instance counts the rows holding one over
    # its runs (ctx.state) and fails when that count reaches max_skipped_indices.
    invalid = (ids < 0) | (ids >= np.iinfo(_h(indices).dtype).max)
    if invalid.any():
        bad_rows = int(np.unique(seg[invalid]).size)
        skipped = ctx.state.get("skipped_rows", 0) + bad_rows if ctx is not None else bad_rows
        if ctx is not None:
            ctx.state["skipped_rows"] = skipped
        if skipped >= max_skipped_indices:
            raise ValueError(f"enforce fail: Too many rows with invalid sparse indices skipped ({skipped} vs "
                             f"max_skipped_indices {max_skipped_indices})")
    keep = np.flatnonzero(col >= 0)
    out = xp.broadcast_to(default.astype(values.dtype), (rows, len(mask)) + tail).copy()
    out[xp.asarray(seg[keep]), xp.asarray(col[keep])] = values[xp.asarray(keep)]
    present = np.zeros((rows, len(mask)), bool)
    present[seg[keep], col[keep]] = True
    if lengths is None:
        out, present = out[0], present[0]
    return out, xp.asarray(present)


@kernel("SparseToDenseMaskGradient")
def sparse_to_dense_mask_gradient(xp, indices, dy, lengths=None, *, mask=(), return_presence_mask: int = 0,
                                  max_skipped_indices: int = 50):
    ids = _h(indices).astype(np.int64).reshape(-1)
    seg = np.zeros(ids.size, np.int64) if lengths is None else _example_rows(lengths, ids)[0]
    col = _mask_positions(mask, ids)
    g = dy.reshape((-1, len(mask)) + tuple(dy.shape[1 if lengths is None else 2:]))
    out = xp.zeros((ids.size,) + tuple(g.shape[2:]), dtype=dy.dtype)
    keep = np.flatnonzero(col >= 0)
    flat = seg[keep] * len(mask) + col[keep]
    _, last = np.unique(flat[::-1], return_index=True)
    keep = keep[::-1][last]      # NOTE: only the value that won the forward gets the gradient
    out[xp.asarray(keep)] = g[xp.asarray(seg[keep]), xp.asarray(col[keep])]
    return out


@kernel("BatchOneHot")
def batch_one_hot(xp, data, lengths, values):
    if data.dtype not in (np.int32, np.int64):
        raise TypeError(f"BatchOneHot needs int32 or int64 data, got {data.dtype}")
    n = host_lengths(lengths)
    if data.ndim != 2 or data.shape[1] != n.size:
        raise ValueError(f"data of shape {tuple(data.shape)} for {n.size} lengths (expected (N, {n.size}))")
    v = _h(values).reshape(-1)
    if int(n.sum()) != v.size:
        raise ValueError(f"LENGTHS sum to {int(n.sum())} but there are {v.size} values")
    col = np.repeat(np.arange(n.size), n)
    return xp.asarray((_h(data)[:, col] == v[None, :]).astype(data.dtype))


@kernel("BatchBucketOneHot")
def batch_bucket_one_hot(xp, data, lengths, boundaries):
    # NOTE: feature d has lengths[d] boundaries and lengths[d] + 1 buckets; a value goes to the
    # bucket of the first boundary >= it, or midway between the first and last equal boundaries
    # when it equals repeated ones.
    n = host_lengths(lengths)
    if data.ndim != 2 or data.shape[1] != n.size:
        raise ValueError(f"data of shape {tuple(data.shape)} for {n.size} lengths (expected (N, {n.size}))")
    b = _h(boundaries).reshape(-1)
    if int(n.sum()) != b.size:
        raise ValueError(f"LENGTHS sum to {int(n.sum())} but there are {b.size} boundaries")
    out = np.zeros((data.shape[0], int((n + 1).sum())), dtype=data.dtype)
    starts, ostarts = offsets_of(n), offsets_of(n + 1)
    h = _h(data)
    for d in range(n.size):   # NOTE: one searchsorted per feature column
        bd = b[starts[d]:starts[d] + n[d]]
        k = (np.searchsorted(bd, h[:, d], side="left") + np.searchsorted(bd, h[:, d], side="right")) // 2
        out[np.arange(h.shape[0]), ostarts[d] + k] = 1
    return xp.asarray(out)


@kernel("SegmentOneHot")
def segment_one_hot(xp, lengths, indices, index_size):
    idx = _h(indices).astype(np.int64).reshape(-1)
    seg, n = _example_rows(lengths, idx)
    size = int(_h(index_size).reshape(-1)[0])
    if idx.size and (idx.min() < 0 or idx.max() >= size):
        raise IndexError(f"index out of range [0, {size}) in INDICES")
    out = np.zeros((n.size, size), np.float32)
    out[seg, idx] = 1
    return xp.asarray(out)


@kernel("Bucketize")
def bucketize(xp, data, *, boundaries=()):
    b = np.asarray(boundaries, np.float32)
    if (np.diff(b) < 0).any():
        raise ValueError("boundaries must be sorted")
    return xp.asarray(np.searchsorted(b, _h(data), side="left").astype(np.int32))


@kernel("BatchBucketize")
def batch_bucketize(xp, features, indices, boundaries, lengths):
    # NOTE: Caffe2 reads BOUNDARIES as input 2 and LENGTHS as input 3 (its schema lists them swapped).
    n = host_lengths(lengths)
    idx = _h(indices).astype(np.int64).reshape(-1)
    b = _h(boundaries).reshape(-1)
    if idx.size != n.size or int(n.sum()) != b.size:
        raise ValueError("indices, lengths and boundaries do not match")
    h = _h(features)
    out = np.zeros((h.shape[0], idx.size), np.int32)
    starts = offsets_of(n)
    for k, col in enumerate(idx):   # NOTE: one searchsorted per bucketised feature
        out[:, k] = np.searchsorted(b[starts[k]:starts[k] + n[k]], h[:, col], side="left")
    return xp.asarray(out)


# -- feature maps: every example's features concatenated input by input --

def _interleave(n_per_input):
    """Order that lists, example by example, the rows of each input's example in input order.

    `n_per_input[k][e]` is how many rows input k has for example e; the result indexes the rows of
    all inputs concatenated (input 0's rows first).
    """
    n = np.stack(n_per_input)                      # (K, E)
    base = np.concatenate(([0], np.cumsum(n.sum(axis=1))[:-1]))
    starts = base[:, None] + np.concatenate([np.zeros((n.shape[0], 1), np.int64),
                                              np.cumsum(n, axis=1)[:, :-1]], axis=1)
    blocks = starts.T.reshape(-1), n.T.reshape(-1)  # example-major, input-minor blocks
    return np.repeat(blocks[0] - offsets_of(blocks[1]), blocks[1]) + np.arange(int(blocks[1].sum()))


def _cat(xs):
    return np.concatenate([np.asarray(x).reshape((len(x),) + np.asarray(x).shape[1:]) for x in xs]) \
        if xs else np.zeros(0)


def _present(p):
    return _h(p).astype(bool).reshape(-1)


@kernel("MergeDenseFeatureTensors")
def merge_dense_feature_tensors(xp, values, presence, *, feature_ids=()):
    v, p = _h(values), _h(presence).astype(bool)
    keys = np.broadcast_to(np.asarray(feature_ids, np.int64), p.shape)
    return (xp.asarray(p.sum(axis=1).astype(np.int32)), xp.asarray(keys[p]), xp.asarray(v[p]))


@kernel("MergeSingleScalarFeatureTensors")
def merge_single_scalar_feature_tensors(xp, *ins, feature_ids=()):
    vals, pres = ins[0::2], [_present(p) for p in ins[1::2]]
    p = np.stack(pres, axis=1)                              # (N, K)
    v = np.stack([_h(x).reshape(-1) for x in vals], axis=1)
    keys = np.broadcast_to(np.asarray(feature_ids, np.int64), p.shape)
    return xp.asarray(p.sum(axis=1).astype(np.int32)), xp.asarray(keys[p]), xp.asarray(v[p])


def _gradient_buffer(g, shape):
    """(g, a zero buffer for it); string "gradients" become bytes with b"" as their zero, as Caffe2."""
    if g.dtype.kind in "OSU":
        g = np.array([v if isinstance(v, bytes) else str(v).encode() for v in g.ravel()], dtype=object).reshape(g.shape)
        return g, np.full(shape, b"", dtype=object)
    return g, np.zeros(shape, g.dtype)


@kernel("MergeSingleScalarFeatureTensorsGradient")
def merge_single_scalar_feature_tensors_gradient(xp, *ins):
    pres, g = [_present(p) for p in ins[:-1]], _h(ins[-1])
    p = np.stack(pres, axis=1)
    g, out = _gradient_buffer(g, p.shape)
    out[p] = g
    return tuple(xp.asarray(out[:, k].copy()) for k in range(p.shape[1]))


def _single_lists(groups, width):
    """(present matrix, per-feature value lengths masked by presence) of Single*FeatureTensors."""
    p = np.stack([_present(gr[width - 1]) for gr in groups], axis=1)
    lens = [host_lengths(gr[0]) for gr in groups]
    return p, lens


@kernel("MergeSingleListFeatureTensors")
def merge_single_list_feature_tensors(xp, *ins, feature_ids=()):
    groups = [ins[i:i + 3] for i in range(0, len(ins), 3)]
    p, lens = _single_lists(groups, 3)
    keys = np.broadcast_to(np.asarray(feature_ids, np.int64), p.shape)
    kept = [np.where(p[:, k], lens[k], 0) for k in range(len(groups))]
    vals = [_h(gr[1])[np.repeat(p[:, k], lens[k])] for k, gr in enumerate(groups)]
    order = _interleave(kept)
    out_vl = np.stack(lens, axis=1)[p]
    return (xp.asarray(p.sum(axis=1).astype(np.int32)), xp.asarray(keys[p]), xp.asarray(out_vl.astype(np.int32)),
            xp.asarray(_cat(vals)[order]))


@kernel("MergeSingleListFeatureTensorsGradient", "MergeSingleMapFeatureTensorsGradient")
def merge_single_list_feature_tensors_gradient(xp, *ins):
    pairs, g = [ins[i:i + 2] for i in range(0, len(ins) - 1, 2)], _h(ins[-1])
    p = np.stack([_present(pr) for _, pr in pairs], axis=1)
    lens = [host_lengths(n) for n, _ in pairs]
    kept = [np.where(p[:, k], lens[k], 0) for k in range(len(pairs))]
    order = _interleave(kept)
    flat = np.empty_like(g)
    flat[order] = g
    # NOTE: values of absent examples get 0; Caffe2 returns only the present examples' values,
    # a gradient shorter than the input when an absent example has values (docs/fidelity.md).
    outs, at = [], 0
    for k in range(len(pairs)):
        g, full = _gradient_buffer(g, (int(lens[k].sum()),) + g.shape[1:])
        take = int(kept[k].sum())
        full[np.repeat(p[:, k], lens[k])] = flat[at:at + take]
        at += take
        outs.append(xp.asarray(full))
    return tuple(outs)


@kernel("MergeSingleMapFeatureTensors")
def merge_single_map_feature_tensors(xp, *ins, feature_ids=()):
    groups = [ins[i:i + 4] for i in range(0, len(ins), 4)]
    p, lens = _single_lists(groups, 4)
    keys = np.broadcast_to(np.asarray(feature_ids, np.int64), p.shape)
    kept = [np.where(p[:, k], lens[k], 0) for k in range(len(groups))]
    order = _interleave(kept)
    sel = [np.repeat(p[:, k], lens[k]) for k in range(len(groups))]
    vkeys = _cat([_h(gr[1])[s] for gr, s in zip(groups, sel)])[order]
    vvals = _cat([_h(gr[2])[s] for gr, s in zip(groups, sel)])[order]
    return (xp.asarray(p.sum(axis=1).astype(np.int32)), xp.asarray(keys[p]),
            xp.asarray(np.stack(lens, axis=1)[p].astype(np.int32)), xp.asarray(vkeys), xp.asarray(vvals))


@kernel("MergeMultiScalarFeatureTensors")
def merge_multi_scalar_feature_tensors(xp, *ins):
    groups = [ins[i:i + 3] for i in range(0, len(ins), 3)]
    lens = [host_lengths(gr[0]) for gr in groups]
    order = _interleave(lens)
    return (xp.asarray(np.sum(lens, axis=0).astype(np.int32)), xp.asarray(_cat([_h(gr[1]) for gr in groups])[order]),
            xp.asarray(_cat([_h(gr[2]) for gr in groups])[order]))


def _split_back(order, g, sizes):
    flat = np.empty_like(g)
    flat[order] = g
    return tuple(np.split(flat, np.cumsum(sizes)[:-1]))


@kernel("MergeMultiScalarFeatureTensorsGradient")
def merge_multi_scalar_feature_tensors_gradient(xp, *ins):
    lens, g = [host_lengths(n) for n in ins[:-1]], _h(ins[-1])
    parts = _split_back(_interleave(lens), g, [int(n.sum()) for n in lens])
    return tuple(xp.asarray(x) for x in parts)


def _multi_values(lens, vlens):
    """Per input, how many values each example has (sums of its features' value lengths)."""
    out = []
    for n, vl in zip(lens, vlens):
        seg = np.repeat(np.arange(n.size), n)
        out.append(np.bincount(seg, weights=vl, minlength=n.size).astype(np.int64))
    return out


def _merge_multi_nested(xp, ins, width):
    """Multi List (width 4) and Map (width 5) merges: lengths, keys, value lengths, then every
    per-value input (values, or keys and values) interleaved example by example."""
    groups = [ins[i:i + width] for i in range(0, len(ins), width)]
    lens = [host_lengths(gr[0]) for gr in groups]
    vlens = [host_lengths(gr[2]) for gr in groups]
    order = _interleave(lens)
    vorder = _interleave(_multi_values(lens, vlens))
    return (xp.asarray(np.sum(lens, axis=0).astype(np.int32)), xp.asarray(_cat([_h(gr[1]) for gr in groups])[order]),
            xp.asarray(_cat(vlens)[order].astype(np.int32)),
            *(xp.asarray(_cat([_h(gr[k]) for gr in groups])[vorder]) for k in range(3, width)))


kernel("MergeMultiListFeatureTensors")(lambda xp, *ins: _merge_multi_nested(xp, ins, 4))
kernel("MergeMultiMapFeatureTensors")(lambda xp, *ins: _merge_multi_nested(xp, ins, 5))


@kernel("MergeMultiListFeatureTensorsGradient", "MergeMultiMapFeatureTensorsGradient")
def merge_multi_list_feature_tensors_gradient(xp, *ins):
    pairs, g = [ins[i:i + 2] for i in range(0, len(ins) - 1, 2)], _h(ins[-1])
    lens = [host_lengths(n) for n, _ in pairs]
    vlens = [host_lengths(v) for _, v in pairs]
    per = _multi_values(lens, vlens)
    parts = _split_back(_interleave(per), g, [int(p.sum()) for p in per])
    return tuple(xp.asarray(x) for x in parts)


# -- maps (Caffe2's std::unordered_map blobs: engine.runtime.ops.stateful.UnorderedMap, with its order) --

@kernel("CreateMap")
def create_map(xp, *, key_dtype: int = 2, value_dtype: int = 2):
    return UnorderedMap(_map_dtype(key_dtype), _map_dtype(value_dtype))


def _map_dtype(data_type: int) -> np.dtype:
    if data_type not in (2, 10):  # NOTE: TensorProto INT32 / INT64, the types Caffe2 builds maps of
        raise TypeError(f"maps hold int32 or int64, not TensorProto data type {data_type}")
    return np.dtype(np.int32 if data_type == 2 else np.int64)


@kernel("KeyValueToMap")
def key_value_to_map(xp, keys, values):
    k, v = _h(keys).reshape(-1), _h(values).reshape(-1)
    if k.size != v.size:
        raise ValueError(f"{k.size} keys for {v.size} values")
    m = UnorderedMap(_map_dtype(10 if k.dtype == np.int64 else 2), _map_dtype(10 if v.dtype == np.int64 else 2))
    for key, val in zip(k.tolist(), v.tolist()):
        m.emplace(key, val)    # NOTE: a repeated key keeps its first value (map emplace)
    return m


@kernel("MapToKeyValue")
def map_to_key_value(xp, m):
    if not isinstance(m, UnorderedMap):
        raise TypeError("MapToKeyValue needs a map blob")
    return tuple(xp.asarray(a) for a in m.arrays())


@kernel("KeySplit", needs_context=True)
def key_split(xp, keys, *, categorical_limit: int = 0, ctx=None):
    if keys.dtype != np.int64:
        raise TypeError(f"KeySplit needs int64 keys, got {keys.dtype}")
    k = _h(keys).astype(np.int64).reshape(-1)
    n_out = len(ctx.op.output)
    if categorical_limit != n_out:
        raise ValueError(f"categorical_limit {categorical_limit} for {n_out} outputs")
    if k.size and (k.min() < 0 or k.max() >= n_out):
        raise IndexError(f"key out of range [0, {n_out})")
    return tuple(xp.asarray(np.flatnonzero(k == q).astype(np.int32)) for q in range(n_out))


@kernel("IndexHash")
def index_hash(xp, indices, *, seed: int = 0, modulo: int = 0):
    # NOTE: hashed = seed * 0xDEADBEEF, then hashed = hashed * 65537 + byte for every (signed)
    # byte of the index, all in the index's own integer type (wrapping), then a positive modulo.
    if modulo <= 0:
        raise ValueError("IndexHash needs modulo > 0")
    x = np.ascontiguousarray(_h(indices))
    t = x.dtype
    if t not in (np.int32, np.int64):
        raise TypeError(f"IndexHash needs int32 or int64 indices, got {t}")
    ut = np.uint32 if t == np.int32 else np.uint64
    with np.errstate(over="ignore"):
        h = np.full(x.shape, np.array(np.int64(seed) * 0xDEADBEEF).astype(t).astype(ut).item(), dtype=ut)
        for byte in np.moveaxis(x.reshape(x.shape + (1,)).view(np.int8), -1, 0):
            h = h * ut(65537) + byte.astype(t).astype(ut)
    out = h.view(t) % t.type(modulo)     # NOTE: NumPy's % is already non-negative for modulo > 0
    return xp.asarray(out.astype(t))


@kernel("NGramFromCategorical")
def ngram_from_categorical(xp, floats, *, col_ids=(), categorical_limits=(), vals=()):
    # NOTE: row value = sum_k base_k * (position of round(x[col_ids[k]]) among the k-th vocabulary,
    # 0 when absent), base_k the product of the earlier categorical limits.
    lim = np.asarray(categorical_limits, np.int64)
    v = np.asarray(vals, np.int64)
    if len(col_ids) != lim.size or int(lim.sum()) != v.size:
        raise ValueError("col_ids, categorical_limits and vals do not match")
    h = _h(floats)
    out = np.zeros(h.shape[0], np.int64)
    base, start = 1, 0
    for k, col in enumerate(col_ids):
        vocab = v[start:start + lim[k]]
        x = np.round(h[:, col]).astype(np.int64)
        hit = vocab[None, :] == x[:, None]
        out += base * np.where(hit.any(axis=1), hit.argmax(axis=1), 0)
        base *= int(lim[k])
        start += int(lim[k])
    return xp.asarray(out)


@kernel("DenseVectorToIdList")
def dense_vector_to_id_list(xp, values):
    h = _h(values)
    if h.ndim != 2:
        raise ValueError("DenseVectorToIdList needs a 2-D input")
    nz = h > 0  # NOTE: only positive entries count as ids
    return xp.asarray(nz.sum(axis=1).astype(np.int32)), xp.asarray(np.nonzero(nz)[1].astype(np.int32))


@kernel("MergeIdLists")
def merge_id_lists(xp, *ins):
    # NOTE: per example the sorted union of its ids over all inputs.
    lens = [host_lengths(n) for n in ins[0::2]]
    vals = [_h(v).reshape(-1) for v in ins[1::2]]
    seg = np.concatenate([np.repeat(np.arange(n.size), n) for n in lens])
    ids = np.concatenate(vals)
    pairs = np.unique(np.stack([seg, ids.astype(np.int64)], axis=1), axis=0) if ids.size else np.zeros((0, 2), int)
    return (xp.asarray(np.bincount(pairs[:, 0], minlength=lens[0].size).astype(np.int32)),
            xp.asarray(pairs[:, 1].astype(vals[0].dtype)))


@kernel("FindDuplicateElements")
def find_duplicate_elements(xp, data):
    h = _h(data).reshape(-1)
    _, first = np.unique(h, return_index=True)
    dup = np.ones(h.size, bool)
    dup[first] = False
    return xp.asarray(np.flatnonzero(dup).astype(np.int64))


@kernel("RemoveDataBlocks")
def remove_data_blocks(xp, data, indices):
    idx = np.unique(_h(indices).astype(np.int64).reshape(-1))
    if idx.size and (idx.min() < 0 or idx.max() >= data.shape[0]):
        raise IndexError(f"index out of range [0, {data.shape[0]}) in indices")
    keep = np.setdiff1d(np.arange(data.shape[0]), idx)
    return xp.take(data, xp.asarray(keep), axis=0)


class SharedBuffer(np.ndarray):
    """UnsafeCoalesce's flat buffer: the other outputs are views of it, and FeedBlob of the same shape
    and type writes into it (``shared_buffer``), so those blobs see the new values as in Caffe2."""

    shared_buffer = True


@kernel("UnsafeCoalesce")
def unsafe_coalesce(xp, *ins):
    # NOTE: the last output is one flat buffer of all inputs (bytes when they differ in type); outputs
    # 0..n-1 are the inputs again, as views into it (on the host), so they share its memory.
    dtypes = {x.dtype for x in ins}
    flat = [x.reshape(-1) for x in ins] if len(dtypes) == 1 else [x.reshape(-1).view(np.uint8) for x in ins]
    buf = xp.concatenate(flat) if flat else xp.zeros(0, np.uint8)
    if xp is not np:
        return (*ins, buf)
    buf = buf.view(SharedBuffer)
    ends = np.cumsum([f.size for f in flat])
    views = [buf[e - f.size:e].view(np.ndarray).view(x.dtype).reshape(x.shape) for f, e, x in zip(flat, ends, ins)]
    return (*views, buf)


@kernel("ViterbiPath")
def viterbi_path(xp, predictions, transitions):
    p, t = _h(predictions).astype(np.float32), _h(transitions).astype(np.float32)
    if p.ndim != 2 or t.shape != (p.shape[1], p.shape[1]):
        raise ValueError(f"predictions {p.shape} and transitions {t.shape} do not match")
    steps = p.shape[0]
    back = np.zeros(p.shape, np.int64)
    score = p[0].copy() if steps else np.zeros(0, np.float32)
    for i in range(1, steps):   # NOTE: the recursion is sequential over time steps
        cand = score[:, None] + t
        back[i] = cand.argmax(axis=0)
        score = cand.max(axis=0) + p[i]
    path = np.zeros(steps, np.int32)
    if steps:
        path[-1] = score.argmax()
        for i in range(steps - 1, 0, -1):
            path[i - 1] = back[i, path[i]]
    return xp.asarray(path)


@kernel("SwapBestPath")
def swap_best_path(xp, predictions, best_path):
    # NOTE: in every row the entry at the best path's label is swapped with the row's maximum.
    p = _h(predictions).copy()
    b = _h(best_path).astype(np.int64).reshape(-1)
    if b.size != p.shape[0]:
        raise ValueError(f"best path of {b.size} steps for {p.shape[0]} rows")
    rows = np.arange(p.shape[0])
    top = p.argmax(axis=1)
    a, m = p[rows, b].copy(), p[rows, top].copy()
    p[rows, top] = a
    p[rows, b] = m
    return xp.asarray(p)


@kernel("APMeter")
def ap_meter(xp, predictions, labels, *, buffer_size: int = 1000):
    # NOTE: one run's average precision per class over the last buffer_size rows (Caffe2 keeps the
    # buffer across runs of the same op; a fresh op, as RunOperatorOnce makes, sees one batch).
    p, lab = _h(predictions).astype(np.float32), _h(labels)
    if p.shape != lab.shape or p.ndim != 2:
        raise ValueError(f"predictions {p.shape} and labels {lab.shape} must be the same 2-D shape")
    p, lab = p[-buffer_size:], lab[-buffer_size:]
    order = np.argsort(-p, axis=0, kind="stable")
    truth = np.take_along_axis(lab, order, axis=0).astype(np.float32)
    prec = np.cumsum(truth, axis=0) / np.arange(1, p.shape[0] + 1, dtype=np.float32)[:, None]
    ap = (prec * truth).sum(axis=0) / np.maximum(truth.sum(axis=0), 1)
    return xp.asarray(ap.astype(np.float32))


# ---- gradients ----

gradient("BatchSparseToDense")(simple("BatchDenseToSparse", "I0 I1 GO0", "GI2"))
gradient("BatchDenseToSparse")(simple("BatchSparseToDense", "I0 I1 GO0 I2", "GI2"))


@gradient("SparseToDenseMask")
@cc_maker
def sparse_to_dense_mask_maker(g):
    """[INDICES, dY, (LENGTHS)] -> d(VALUES)."""
    ins = [g.I(0), g.GO(0)] + ([g.I(3)] if len(g.op.input) > 3 else [])
    return [g.op_("SparseToDenseMaskGradient", ins, [g.GI(1)])]


def _merge_maker(width, value_slot, read_slots, out_slot):
    """Merge*FeatureTensorsGradient: per input group the inputs at `read_slots`, then the gradient
    of output `out_slot`; gives the gradient of each group's `value_slot`."""
    def make(g):
        groups = range(len(g.op.input) // width)
        ins = [g.I(k * width + s) for k in groups for s in read_slots]
        ins.append(g.GO(out_slot))
        return [g.op_(f"{g.type}Gradient", ins, [g.GI(k * width + value_slot) for k in groups])]
    return cc_maker(make)


gradient("MergeSingleScalarFeatureTensors")(_merge_maker(2, 0, (1,), 2))
gradient("MergeSingleListFeatureTensors")(_merge_maker(3, 1, (0, 2), 3))
gradient("MergeSingleMapFeatureTensors")(_merge_maker(4, 2, (0, 3), 4))
gradient("MergeMultiScalarFeatureTensors")(_merge_maker(3, 2, (0,), 2))
gradient("MergeMultiListFeatureTensors")(_merge_maker(4, 3, (0, 2), 3))
gradient("MergeMultiMapFeatureTensors")(_merge_maker(5, 4, (0, 2), 4))

no_gradient("BatchOneHot", "SegmentOneHot", "BatchBucketize", "NGramFromCategorical", "DenseVectorToIdList",
            "MergeIdLists", "ViterbiPath", "SwapBestPath")
should_not_do_gradient("IndexHash", "FindDuplicateElements", "RemoveDataBlocks", "APMeter")


# ---- shapes ----

@shape("BatchSparseToDense")
def batch_sparse_to_dense_shape(lengths, indices, values, like=None, *, dense_last_dim: int = -1):
    width = dims(like)[-1] if like is not None else (dense_last_dim if dense_last_dim >= 0 else None)
    return TensorInfo((dims(lengths)[0], width), values.dtype)


shape("BatchDenseToSparse")(lambda lengths, indices, dense: TensorInfo(dims(indices), dense.dtype))
shape("BatchOneHot")(lambda data, lengths, values: TensorInfo((dims(data)[0], *dims(values)), data.dtype))
shape("Bucketize")(lambda data: TensorInfo(dims(data), INT32))
shape("BatchBucketize")(lambda f, indices, b, lengths: TensorInfo((dims(f)[0], *dims(indices)), INT32))
shape("ViterbiPath")(lambda p, t: TensorInfo(dims(p)[:1], INT32))
shape("SwapBestPath")(lambda p, b: p)
shape("APMeter")(lambda p, lab: TensorInfo(dims(p)[1:], p.dtype))
shape("IndexHash")(lambda x: x)



@shape("SparseToDenseMask")
def sparse_to_dense_mask_shape(indices, values, default, lengths=None, *, mask=()):
    lead = (len(mask),) if lengths is None else (dims(lengths)[0], len(mask))
    return TensorInfo((*lead, *dims(values)[1:]), values.dtype), TensorInfo(lead, BOOL)


@shape("BatchBucketOneHot")
def batch_bucket_one_hot_shape(data, lengths, boundaries):
    # NOTE: sum(lengths + 1) columns = len(BOUNDARIES) + len(LENGTHS).
    nb, nl = dims(boundaries)[0], dims(lengths)[0]
    return TensorInfo((dims(data)[0], None if nb is None or nl is None else nb + nl), data.dtype)
shape("SegmentOneHot")(lambda lengths, idx, size: TensorInfo((dims(lengths)[0], None), FLOAT))
shape("DenseVectorToIdList")(lambda v: (TensorInfo(dims(v)[:1], INT32), TensorInfo((None,), INT32)))
shape("FindDuplicateElements")(lambda x: TensorInfo((None,), INT64))
shape("RemoveDataBlocks")(lambda data, idx: TensorInfo((None, *dims(data)[1:]), data.dtype))
shape("NGramFromCategorical")(lambda x: TensorInfo(dims(x)[:1], INT64))
shape("MergeIdLists")(lambda *ins: (TensorInfo(dims(ins[0]), INT32), TensorInfo((None,), ins[1].dtype)))
shape("UnsafeCoalesce")(lambda *ins: (*ins, TensorInfo((None,), ins[0].dtype if ins else None)))
shape("MergeDenseFeatureTensors")(
    lambda v, p: (TensorInfo(dims(v)[:1], INT32), TensorInfo((None,), INT64), TensorInfo((None,), v.dtype)))
shape("MergeSingleScalarFeatureTensors")(
    lambda *ins: (TensorInfo(dims(ins[0])[:1], INT32), TensorInfo((None,), INT64), TensorInfo((None,), ins[0].dtype)))
shape("MergeSingleScalarFeatureTensorsGradient")(
    lambda *ins: tuple(TensorInfo(dims(p), ins[-1].dtype) for p in ins[:-1]))
shape("MergeMultiScalarFeatureTensorsGradient")(
    lambda *ins: tuple(TensorInfo((None,), ins[-1].dtype) for _ in ins[:-1]))

shape("CreateMap", "KeyValueToMap")(opaque)  # NOTE: a map object, not a tensor
shape("MapToKeyValue")(lambda m: (TensorInfo((None,), None), TensorInfo((None,), None)))
shape("KeySplit")(lambda keys, *, n_out: tuple(TensorInfo((None,), INT32) for _ in range(n_out)))


def _merged(ins: tuple[TensorInfo, ...], *dtypes: int | None) -> tuple[TensorInfo, ...]:
    """Merged feature tensors: one length per example (the first input's rows), the rest data-dependent."""
    return (TensorInfo((dims(ins[0])[0],), INT32), *(TensorInfo((None,), d) for d in dtypes))


shape("MergeMultiScalarFeatureTensors")(lambda *ins: _merged(ins, INT64, ins[2].dtype))
shape("MergeSingleListFeatureTensors")(lambda *ins: _merged(ins, INT64, INT32, ins[1].dtype))
shape("MergeMultiListFeatureTensors")(lambda *ins: _merged(ins, INT64, INT32, ins[3].dtype))
shape("MergeSingleMapFeatureTensors")(lambda *ins: _merged(ins, INT64, INT32, ins[1].dtype, ins[2].dtype))
shape("MergeMultiMapFeatureTensors")(lambda *ins: _merged(ins, INT64, INT32, ins[3].dtype, ins[4].dtype))


# ---- onnx ----
from engine.catalogue.registry import onnx_converter  # noqa: E402


@onnx_converter("IndexHash")
def index_hash_onnx(c):
    """Caffe2's hash in unsigned integers that wrap: h = seed * 0xDEADBEEF, then h = h * 65537 + b for
    each little-endian byte b of the index, sign-extended; the result read signed, modulo `modulo`
    (non-negative)."""
    t = c.np_dtype(0)
    if t not in (np.int32, np.int64) or int(c.arg("modulo", 0)) <= 0:
        raise c.refuse(f"{t} indices or modulo {c.arg('modulo', 0)}")
    ut, bits = (np.uint32, 32) if t == np.int32 else (np.uint64, 64)
    u = {np.uint32: 12, np.uint64: 13}[ut]  # ONNX element types
    with np.errstate(over="ignore"):
        start = np.array(np.int64(c.arg("seed", 0)) * 0xDEADBEEF).astype(t).astype(ut)
    x = c.emit("Cast", [c.x(0)], to=u)
    h = c.emit("Expand", [c.const(start, "seed"), c.shape_of(c.x(0))])
    for k in range(bits // 8):
        byte = c.emit("Mod", [c.emit("BitShift", [x, c.const(ut(8 * k), "shift")], direction="RIGHT"),
                              c.const(ut(256), "b256")], fmod=0)
        negative = c.emit("Cast", [c.emit("GreaterOrEqual", [byte, c.const(ut(128), "b128")])], to=u)
        byte = c.emit("Add", [byte, c.emit("Mul", [negative, c.const(ut(2**bits - 256), "sign")])])
        h = c.emit("Add", [c.emit("Mul", [h, c.const(ut(65537), "k")]), byte])
    c.emit("Mod", [c.emit("Cast", [h], to=6 if t == np.int32 else 7), c.const(t.type(c.arg("modulo", 0)), "modulo")],
           [c.y(0)], fmod=0)


@onnx_converter("MergeIdLists")
def merge_id_lists_onnx(c):
    """Per example the sorted union of its ids: every (example, id) pair of all the lists as an int64
    row, ONNX Unique over rows (sorted=1 orders them as the lexicographic pairs), then each example's
    count of pairs as its length (int32); integer ids only."""
    from engine.runtime.ops.lengths import onnx_segments  # noqa: PLC0415

    if c.n_in % 2 or any(c.np_dtype(i).kind not in "iu" for i in range(1, c.n_in, 2)):
        raise c.refuse("ids that are not integers, or an odd number of inputs")
    pairs = []
    for i in range(0, c.n_in, 2):
        ids = onnx_segments(c, c.x(i))[2]
        vals = c.emit("Cast", [c.emit("Reshape", [c.x(i + 1), c.ints([-1])])], to=7)
        pairs.append(c.emit("Concat", [c.emit("Unsqueeze", [v, c.ints([1])]) for v in (ids, vals)], axis=1))
    both = c.emit("Unique", [c.emit("Concat", pairs, axis=0)], axis=0, sorted=1)
    seg, vals = (c.emit("Gather", [both, c.const(np.array(k, np.int64), "col")], axis=1) for k in (0, 1))
    examples = c.emit("Range", [c.const(np.array(0, np.int64), "zero"),
                                c.emit("Size", [c.x(0)]), c.const(np.array(1, np.int64), "one")])
    hit = c.emit("Equal", [c.emit("Unsqueeze", [examples, c.ints([1])]), c.emit("Unsqueeze", [seg, c.ints([0])])])
    counts = c.reduce("ReduceSum", c.emit("Cast", [hit], to=7), [1], 0)
    c.emit("Cast", [counts], [c.y(0)], to=6)
    c.emit("Cast", [vals], [c.y(1)], to=c.dtype(c.np_dtype(1)))
