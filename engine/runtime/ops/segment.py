"""Segment reductions: SortedSegment*, SortedSegmentRange*, UnsortedSegment*, their Sparse forms,
LengthsWeightedSum, ReduceFrontWeightedSum, SparseLengthsPositionalWeightedSum and their gradients.

Every reduction is one scatter over a per-row segment id (``seg``) into ``K`` output rows, so the
sorted, unsorted, lengths and sparse forms share :func:`_reduce`; the forms differ only in how the
ids and ``K`` come from the op's inputs (:func:`_sorted_ids`, :func:`_unsorted_ids`, :func:`lengths_ids`).
"""
from __future__ import annotations

import numpy as np

from engine.runtime import device as dev
from engine.runtime.grad_makers import GradientMakerError, cc_maker, simple
from engine.catalogue.registry import gradient, kernel, shape
from engine.runtime.shapes import INT64, TensorInfo, dims

# ---- kernels ----


def lengths_ids(xp, lengths):
    """(segment id of every row, lengths on the host) from a LENGTHS blob."""
    n = dev.to_host(lengths).astype(np.int64).reshape(-1)
    if (n < 0).any():
        raise ValueError(f"negative length {int(n.min())} in LENGTHS")
    return xp.asarray(np.repeat(np.arange(n.size), n)), n


def _ids32(ids):
    """SEGMENT_IDS on the host; Caffe2 registers these ops for int32 ids only."""
    if ids.dtype != np.int32:
        raise TypeError(f"SEGMENT_IDS must be int32, got {ids.dtype}")
    return dev.to_host(ids).astype(np.int64).reshape(-1)


def _sorted_ids(ids):
    """Sorted SEGMENT_IDS: they start at 0 and step by 0 or 1 (no gaps); K is the last id + 1."""
    s = _ids32(ids)
    if s.size and (s[0] != 0 or not np.isin(np.diff(s), (0, 1)).all()):
        raise ValueError("SEGMENT_IDS must be sorted, start at 0 and not have gaps")
    return s, int(s[-1]) + 1 if s.size else 0


def _unsorted_ids(ids, num_segments):
    """Unsorted SEGMENT_IDS: K is ``num_segments`` when given (> 0), else the max id + 1."""
    s = _ids32(ids)
    if s.size and s.min() < 0:
        raise ValueError(f"negative segment id {int(s.min())}")
    if num_segments > 0:
        if s.size and s.max() >= num_segments:
            raise ValueError(f"segment id {int(s.max())} out of range for num_segments={num_segments}")
        return s, num_segments
    return s, int(s.max()) + 1 if s.size else 0


def _col(v, ndim):
    """A per-row vector shaped to broadcast over rows of rank `ndim`."""
    return v.reshape((-1,) + (1,) * (ndim - 1))


def _counts(seg, k):
    return np.bincount(seg, minlength=k)[:k]


def _reduce(xp, rows, seg, k, kind="Sum", weights=None):
    """Reduce `rows` into `k` segments by host ids `seg`; segments without rows stay 0."""
    shape, dtype = (k,) + rows.shape[1:], rows.dtype
    if rows.shape[0] != seg.size:
        raise ValueError(f"{seg.size} segment ids for {rows.shape[0]} rows")
    dseg = xp.asarray(seg)
    if kind in ("Max", "LogSumExp", "LogMeanExp"):
        top = xp.full(shape, -np.inf, dtype=dtype)
        xp.maximum.at(top, dseg, rows)
        top = xp.where(xp.isneginf(top), xp.zeros_like(top), top)
        if kind == "Max":
            return top
        acc = xp.zeros(shape, dtype=dtype)
        xp.add.at(acc, dseg, xp.exp(rows - top[dseg]))
        if kind == "LogMeanExp":
            acc = acc / _col(xp.asarray(np.maximum(_counts(seg, k), 1).astype(dtype)), rows.ndim)
        with np.errstate(divide="ignore"):
            out = xp.log(acc) + top
        return xp.where(acc == 0, xp.zeros_like(out), out)
    if weights is not None:
        if weights.size != seg.size:
            raise ValueError(f"SCALARS has {weights.size} weights for {seg.size} rows")
        rows = rows * _col(weights.astype(dtype), rows.ndim)
    out = xp.zeros(shape, dtype=dtype)
    xp.add.at(out, dseg, rows)
    if kind == "Mean":
        out = out / _col(xp.asarray(np.maximum(_counts(seg, k), 1).astype(dtype)), rows.ndim)
    return out


def _spread(xp, dy, seg, k, kind="Sum", weights=None):
    """Gradient of a Sum/Mean/WeightedSum reduction: each row gets its segment's dY (scaled)."""
    g = dy[xp.asarray(seg)]
    if kind == "Mean":
        g = g / _col(xp.asarray(np.maximum(_counts(seg, k), 1)[seg].astype(dy.dtype)), dy.ndim)
    if weights is not None:
        g = g * _col(weights.astype(dy.dtype), dy.ndim)
    return g


def _take(xp, data, indices):
    idx = indices.reshape(-1).astype(np.int64)
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= data.shape[0]):
        raise IndexError(f"index out of range [0, {data.shape[0]}) in INDICES")
    return xp.take(data, idx, axis=0)


for _kind in ("Sum", "Mean"):
    def _make(kind):
        def sorted_(xp, data, ids):
            s, k = _sorted_ids(ids)
            return _reduce(xp, data, s, k, kind)

        def sparse_sorted(xp, data, indices, ids):
            s, k = _sorted_ids(ids)
            return _reduce(xp, _take(xp, data, indices), s, k, kind)

        def unsorted(xp, data, ids, *, num_segments: int = -1):
            s, k = _unsorted_ids(ids, num_segments)
            return _reduce(xp, data, s, k, kind)

        def sparse_unsorted(xp, data, indices, ids, *, num_segments: int = -1):
            s, k = _unsorted_ids(ids, num_segments)
            return _reduce(xp, _take(xp, data, indices), s, k, kind)

        def sorted_grad(xp, dy, ids):
            s, _ = _sorted_ids(ids)
            return _spread(xp, dy, s, dy.shape[0], kind)

        def unsorted_grad(xp, dy, ids, *, num_segments: int = -1):
            return _spread(xp, dy, _ids32(ids), dy.shape[0], kind)

        kernel(f"SortedSegment{kind}")(sorted_)
        kernel(f"SparseSortedSegment{kind}")(sparse_sorted)
        kernel(f"UnsortedSegment{kind}")(unsorted)
        kernel(f"SparseUnsortedSegment{kind}")(sparse_unsorted)
        # NOTE: the Sparse* gradient ops are the plain ones: they give the rows of the GradientSlice over INDICES.
        kernel(f"SortedSegment{kind}Gradient", f"SparseSortedSegment{kind}Gradient")(sorted_grad)
        kernel(f"UnsortedSegment{kind}Gradient", f"SparseUnsortedSegment{kind}Gradient")(unsorted_grad)
    _make(_kind)


@kernel("SortedSegmentWeightedSum")
def sorted_segment_weighted_sum(xp, data, weights, ids, *, grad_on_weights: int = 0):
    s, k = _sorted_ids(ids)
    return _reduce(xp, data, s, k, weights=weights)


@kernel("SparseSortedSegmentWeightedSum")
def sparse_sorted_segment_weighted_sum(xp, data, weights, indices, ids, *, grad_on_weights: int = 0):
    s, k = _sorted_ids(ids)
    return _reduce(xp, _take(xp, data, indices), s, k, weights=weights)


@kernel("UnsortedSegmentWeightedSum")
def unsorted_segment_weighted_sum(xp, data, weights, ids, *, num_segments: int = -1, grad_on_weights: int = 0):
    s, k = _unsorted_ids(ids, num_segments)
    return _reduce(xp, data, s, k, weights=weights)


@kernel("SparseUnsortedSegmentWeightedSum")
def sparse_unsorted_segment_weighted_sum(xp, data, weights, indices, ids, *, num_segments: int = -1,
                                         grad_on_weights: int = 0):
    s, k = _unsorted_ids(ids, num_segments)
    return _reduce(xp, _take(xp, data, indices), s, k, weights=weights)


@kernel("LengthsWeightedSum")
def lengths_weighted_sum(xp, data, weights, lengths, *, grad_on_weights: int = 0):
    s, n = lengths_ids(xp, lengths)
    return _reduce(xp, data, dev.to_host(s), n.size, weights=weights)


@kernel("SparseLengthsPositionalWeightedSum")
def sparse_lengths_positional_weighted_sum(xp, data, weights, indices, lengths):
    # NOTE: the weight of a row is WEIGHT[position of the row inside its segment].
    s, n = lengths_ids(xp, lengths)
    pos = np.arange(s.size) - np.repeat(np.cumsum(n) - n, n)
    if pos.size and pos.max() >= weights.size:
        raise IndexError(f"segment of length {int(n.max())} longer than WEIGHT ({weights.size})")
    from engine.runtime.ops.sparse import require_rows  # noqa: PLC0415  (the check of Caffe2's lookup)
    require_rows(data, indices)
    return _reduce(xp, _take(xp, data, indices), dev.to_host(s), n.size,
                   weights=xp.take(weights.reshape(-1), xp.asarray(pos)))


@kernel("SortedSegmentWeightedSumGradient", "SparseSortedSegmentWeightedSumGradient")
def sorted_segment_weighted_sum_gradient(xp, weights, dy, ids, *, grad_on_weights: int = 0):
    s, _ = _sorted_ids(ids)
    return _spread(xp, dy, s, dy.shape[0], weights=weights)


@kernel("UnsortedSegmentWeightedSumGradient", "SparseUnsortedSegmentWeightedSumGradient")
def unsorted_segment_weighted_sum_gradient(xp, weights, dy, ids, *, num_segments: int = -1,
                                           grad_on_weights: int = 0):
    return _spread(xp, dy, _ids32(ids), dy.shape[0], weights=weights)


@kernel("LengthsWeightedSumGradient", "SparseLengthsWeightedSumGradient")
def lengths_weighted_sum_gradient(xp, weights, dy, lengths, *, grad_on_weights: int = 0):
    s, _ = lengths_ids(xp, lengths)
    return _spread(xp, dy, dev.to_host(s), dy.shape[0], weights=weights)


def _weight_grad(xp, dy_rows, rows):
    """d(weight) of a weighted sum: the dot of each row with its segment's dY."""
    return (dy_rows * rows).reshape(rows.shape[0], -1).sum(axis=1)


@kernel("LengthsWeightedSumWithMainInputGradient")
def lengths_weighted_sum_main_gradient(xp, weights, dy, lengths, data, *, grad_on_weights: int = 0):
    s, _ = lengths_ids(xp, lengths)
    g = dy[s]
    return g * _col(weights.astype(dy.dtype), dy.ndim), _weight_grad(xp, g, data).astype(weights.dtype)


@kernel("SparseLengthsIndicesInGradientWeightedSumWithMainInputGradient", "SparseLengthsWeightedSumWithMainInputGradient")
def sparse_lengths_weighted_sum_main_gradient(xp, weights, dy, lengths, data, indices, *,
                                              grad_on_weights: int = 0):
    s, _ = lengths_ids(xp, lengths)
    g = dy[s]
    return (g * _col(weights.astype(dy.dtype), dy.ndim),
            _weight_grad(xp, g, _take(xp, data, indices)).astype(weights.dtype))


@kernel("ReduceFrontWeightedSum")
def reduce_front_weighted_sum(xp, data, weights, *, num_reduce_dim: int = 1, grad_on_weights: int = 0):
    lead = int(np.prod(data.shape[:num_reduce_dim]))
    rows = data.reshape((lead,) + data.shape[num_reduce_dim:])
    return (rows * _col(weights.reshape(-1).astype(data.dtype), rows.ndim)).sum(axis=0)


@kernel("ReduceFrontWeightedSumGradient")
def reduce_front_weighted_sum_gradient(xp, weights, dy, shape_, *, num_reduce_dim: int = 1,
                                       grad_on_weights: int = 0):
    full = tuple(int(d) for d in dev.to_host(shape_).reshape(-1))
    w = weights.reshape(-1).astype(dy.dtype)
    return (_col(w, dy.ndim + 1) * dy[None]).reshape(full)


def _tt_subs(indices, factor_i):
    """Row index -> (i0, i1, i2) of the three tensor-train cores (i0 varies fastest)."""
    idx = dev.to_host(indices).astype(np.int64).reshape(-1)
    f = np.asarray(factor_i, np.int64)
    return np.stack([idx % f[0], (idx // f[0]) % f[1], idx // (f[0] * f[1])], axis=1)


@kernel("TTSparseLengthsSum")
def tt_sparse_lengths_sum(xp, core0, core1, core2, indices, lengths, *, factor_i=(1, 1, 1), factor_j=(1, 1, 1),
                          ranks=(1, 1, 1, 1), emb_size: int = 64):
    # NOTE: the embedding of row (i0, i1, i2) is core0[i0] @ core1[i1] @ core2[i2], each core k
    # of shape (factor_i[k], ranks[k], factor_j[k], ranks[k+1]) read as (r_k, j_k * r_{k+1});
    # the partial products (bs, j0, r1) and (bs, j0*j1, r2) are outputs 1 and 2 (for the gradient).
    if indices.dtype != np.int64:
        raise TypeError(f"TTSparseLengthsSum needs int64 indices, got {indices.dtype}")
    sub = _tt_subs(indices, factor_i)
    s, n = lengths_ids(xp, lengths)
    j, r = list(factor_j), list(ranks)
    bs = sub.shape[0]
    y0 = core0.reshape(core0.shape[0], -1)[xp.asarray(sub[:, 0])].reshape(bs, j[0], r[1])
    y1 = xp.matmul(y0, core1.reshape(core1.shape[0], r[1], -1)[xp.asarray(sub[:, 1])]).reshape(bs, j[0] * j[1], r[2])
    y2 = xp.matmul(y1, core2.reshape(core2.shape[0], r[2], -1)[xp.asarray(sub[:, 2])]).reshape(bs, -1)
    out = _reduce(xp, y2[:, :emb_size], dev.to_host(s), n.size)
    return out, y0, y1, xp.asarray(sub)


@kernel("TTSparseLengthsSumGradient")
def tt_sparse_lengths_sum_gradient(xp, core0, core1, core2, lengths, y0, y1, sub, dy):
    s, _ = lengths_ids(xp, lengths)
    i = dev.to_host(sub).astype(np.int64)
    g2 = dy[s].reshape(i.shape[0], y1.shape[1], -1)              # (bs, j0*j1, j2*r3)
    c2 = core2.reshape(core2.shape[0], core2.shape[1], -1)[xp.asarray(i[:, 2])]
    c1 = core1.reshape(core1.shape[0], core1.shape[1], -1)[xp.asarray(i[:, 1])]
    d2 = xp.matmul(xp.swapaxes(y1, 1, 2), g2)                     # (bs, r2, j2*r3)
    g1 = xp.matmul(g2, xp.swapaxes(c2, 1, 2)).reshape(i.shape[0], y0.shape[1], -1)   # (bs, j0, j1*r2)
    d1 = xp.matmul(xp.swapaxes(y0, 1, 2), g1)                     # (bs, r1, j1*r2)
    d0 = xp.matmul(g1, xp.swapaxes(c1, 1, 2))                     # (bs, j0, r1)
    grads = []
    for core, d, k in ((core0, d0, 0), (core1, d1, 1), (core2, d2, 2)):
        g = xp.zeros((core.shape[0], int(np.prod(core.shape[1:]))), dtype=core.dtype)
        xp.add.at(g, xp.asarray(i[:, k]), d.reshape(i.shape[0], -1))
        grads.append(g.reshape(core.shape))
    return tuple(grads)


_RANGE = ("Sum", "Mean", "Max", "LogSumExp", "LogMeanExp")


def _make_range(kind):
    def fwd(xp, data, ids):
        s, k = _sorted_ids(ids)
        return _reduce(xp, data, s, k, kind)

    def grad(xp, data, y, dy, ids):
        # NOTE: Y and dY are read as (segments, block) whatever their rank (a recurrent step feeds
        # them with an extra unit dim); dX has DATA's shape.
        s, k = _sorted_ids(ids)
        d = xp.asarray(s)
        rows = data.reshape(data.shape[0], int(np.prod(data.shape[1:])))
        y2, dy2 = (v.reshape(v.shape[0], int(np.prod(v.shape[1:]))) for v in (y, dy))
        if kind in ("Sum", "Mean"):
            g = _spread(xp, dy2, s, k, kind)
        elif kind == "Max":
            g = xp.where(rows == y2[d], dy2[d], xp.zeros_like(rows))  # NOTE: ties all get dY
        else:
            g = dy2[d] * xp.exp(rows - y2[d])
            if kind == "LogMeanExp":
                g = g / _col(xp.asarray(np.maximum(_counts(s, k), 1)[s].astype(dy.dtype)), 2)
        return g.reshape(data.shape)
    kernel(f"SortedSegmentRange{kind}")(fwd)
    kernel(f"SortedSegmentRange{kind}Gradient")(grad)


for _kind in _RANGE:
    _make_range(_kind)


# ---- gradients ----

def _segment_maker(grad_type, tokens, sparse_indices=None, num_args=False):
    """Caffe2's SegmentOpGetGradient: one ``<grad_type>`` op; aux inputs get no gradient.

    `sparse_indices` (the INDICES input) makes DATA's gradient a slice over INDICES.
    ``grad_on_weights`` is refused for the segment forms (Caffe2 has no WithMainInput variant).
    """
    def make(g):
        if g.arg("grad_on_weights", 0):
            raise GradientMakerError("grads on aux inputs are not yet implemented for Segment operators.")
        ins = [g.GO(0) if t == "GO0" else g.I(int(t[1:])) for t in tokens.split()]
        if sparse_indices is None:
            return [g.op_(grad_type, ins, [g.GI(0)])]
        ops = [g.op_(grad_type, ins, [g.GI_V(0)])]
        g.set_sparse(0, g.I(sparse_indices), g.g_input[0][1])
        return ops
    return cc_maker(make)


for _kind in ("Sum", "Mean"):
    gradient(f"SortedSegment{_kind}")(_segment_maker(f"SortedSegment{_kind}Gradient", "GO0 I1"))
    gradient(f"UnsortedSegment{_kind}")(_segment_maker(f"UnsortedSegment{_kind}Gradient", "GO0 I1"))
    gradient(f"SparseSortedSegment{_kind}")(_segment_maker(f"SortedSegment{_kind}Gradient", "GO0 I2", 1))
    gradient(f"SparseUnsortedSegment{_kind}")(_segment_maker(f"UnsortedSegment{_kind}Gradient", "GO0 I2", 1))
gradient("SortedSegmentWeightedSum")(_segment_maker("SortedSegmentWeightedSumGradient", "I1 GO0 I2"))
gradient("UnsortedSegmentWeightedSum")(_segment_maker("UnsortedSegmentWeightedSumGradient", "I1 GO0 I2"))
gradient("SparseSortedSegmentWeightedSum")(_segment_maker("SortedSegmentWeightedSumGradient", "I1 GO0 I3", 2))
gradient("SparseUnsortedSegmentWeightedSum")(_segment_maker("UnsortedSegmentWeightedSumGradient", "I1 GO0 I3", 2))
for _kind in _RANGE:
    gradient(f"SortedSegmentRange{_kind}")(simple(f"SortedSegmentRange{_kind}Gradient", "I0 O0 GO0 I1", "GI0"))


@gradient("LengthsWeightedSum")
@cc_maker
def lengths_weighted_sum_maker(g):
    """``grad_on_weights`` switches to the WithMainInput op, which also gives SCALARS' gradient."""
    if g.arg("grad_on_weights", 0):
        return [g.op_("LengthsWeightedSumWithMainInputGradient", [g.I(1), g.GO(0), g.I(2), g.I(0)],
                      [g.GI(0), g.GI(1)])]
    return [g.op_("LengthsWeightedSumGradient", [g.I(1), g.GO(0), g.I(2)], [g.GI(0)])]


@gradient("ReduceFrontWeightedSum")
@cc_maker
def reduce_front_weighted_sum_maker(g):
    """The data's shape travels as a ``Shape`` output named ``_<O0>_dims``."""
    dims_ = f"_{g.O(0)}_dims"
    return [g.op_("Shape", [g.I(0)], [dims_]),
            g.op_("ReduceFrontWeightedSumGradient", [g.I(1), g.GO(0), dims_], [g.GI(0)])]


gradient("TTSparseLengthsSum")(simple("TTSparseLengthsSumGradient", "I0 I1 I2 I4 O1 O2 O3 GO0", "GI0 GI1 GI2"))
# NOTE: SparseLengthsPositionalWeightedSum has no maker in Caffe2 (asking for one is an error).


# ---- shapes ----

@shape("LengthsWeightedSum")
def lengths_weighted_sum_shape(data, weights, lengths):
    return TensorInfo((*dims(lengths)[:1], *dims(data)[1:]), data.dtype)


@shape("SparseLengthsPositionalWeightedSum")
def positional_shape(data, weights, indices, lengths):
    return TensorInfo((*dims(lengths)[:1], *dims(data)[1:]), data.dtype)


@shape("TTSparseLengthsSum")
def tt_sparse_lengths_sum_shape(c0, c1, c2, indices, lengths, *, factor_j=(1, 1, 1), ranks=(1, 1, 1, 1),
                                emb_size: int = 64):
    bs = dims(indices)[0]
    return (TensorInfo((dims(lengths)[0], emb_size), c0.dtype), TensorInfo((bs, factor_j[0], ranks[1]), c0.dtype),
            TensorInfo((bs, factor_j[0] * factor_j[1], ranks[2]), c0.dtype), TensorInfo((bs, 3), INT64))


@shape("ReduceFrontWeightedSum")
def reduce_front_weighted_sum_shape(data, weights, *, num_reduce_dim: int = 1):
    return TensorInfo(dims(data)[num_reduce_dim:], data.dtype)


for _t in ("SortedSegment", "UnsortedSegment", "SparseSortedSegment", "SparseUnsortedSegment"):
    # NOTE: the segment count is a value (the last or largest id), so only rank and dtype are known.
    shape(*(f"{_t}{k}" for k in ("Sum", "Mean", "WeightedSum")))(
        lambda data, *rest: TensorInfo((None, *dims(data)[1:]), data.dtype))
shape(*(f"SortedSegmentRange{k}" for k in _RANGE))(lambda data, ids: TensorInfo((None, *dims(data)[1:]), data.dtype))


def _rows_of(ids, dy):
    """Gradient of a reduction: one row per segment id (or weight), dY's row shape."""
    return TensorInfo((*dims(ids)[:1], *dims(dy)[1:]), dy.dtype)


shape(*(f"{f}Segment{k}Gradient" for f in ("Sorted", "Unsorted") for k in ("Sum", "Mean")))(
    lambda dy, ids: _rows_of(ids, dy))
shape("SortedSegmentWeightedSumGradient", "UnsortedSegmentWeightedSumGradient")(lambda w, dy, ids: _rows_of(w, dy))
shape("LengthsWeightedSumGradient")(lambda w, dy, lengths: _rows_of(w, dy))
shape("LengthsWeightedSumWithMainInputGradient")(lambda w, dy, lengths, data: (_rows_of(w, dy), w))
shape("SparseLengthsIndicesInGradientWeightedSumWithMainInputGradient")(
    lambda w, dy, lengths, data, indices: (_rows_of(w, dy), w))
shape(*(f"SortedSegmentRange{k}Gradient" for k in _RANGE))(lambda data, y, dy, ids: data)
shape("TTSparseLengthsSumGradient")(lambda c0, c1, c2, *rest: (c0, c1, c2))


# ---- onnx ----
from engine.catalogue.registry import onnx_converter  # noqa: E402


def _onnx_segment_mask(c, ids):
    """(K, N) bool: row j of the data belongs to segment i; K is the last sorted id + 1 (0 when
    there are no ids), taken as the max of ids + 1 and a 0 so that an empty list reduces too."""
    s = c.emit("Cast", [c.emit("Reshape", [c.x(ids), c.ints([-1])])], to=7)
    k = c.reduce("ReduceMax", c.emit("Concat", [c.emit("Add", [s, c.ints([1])]), c.ints([0])], axis=0), None, 0)
    seg = c.emit("Range", [c.const(np.array(0, np.int64), "zero"), k, c.const(np.array(1, np.int64), "one")])
    return s, c.emit("Equal", [c.emit("Unsqueeze", [seg, c.ints([1])]), c.emit("Unsqueeze", [s, c.ints([0])])])


@onnx_converter(*(f"SortedSegmentRange{k}" for k in _RANGE))
def sorted_segment_range_onnx(c):
    """A (segments, rows) 0/1 matrix from the sorted ids: Sum/Mean are its product with the rows
    (Mean over the run length); Max the masked ReduceMax (-inf outside); LogSumExp/LogMeanExp
    Caffe2's max-shifted form log(sum exp(x - max)) + max, a -inf max read as 0 and a zero sum
    giving 0, as the kernel.  float32 data only."""
    if c.np_dtype(0) != np.float32:
        raise c.refuse(f"a {c.np_dtype(0)} input")
    kind = c.op.type[len("SortedSegmentRange"):]
    s, mask = _onnx_segment_mask(c, 1)
    flat = c.emit("Flatten", [c.x(0)], axis=1)
    maskf = c.emit("Cast", [mask], to=1)
    count = c.emit("Max", [c.reduce("ReduceSum", maskf, [1], 1), c.const(np.array([1.0], np.float32), "one_f")])
    if kind in ("Sum", "Mean"):
        out = c.emit("MatMul", [maskf, flat])
        if kind == "Mean":
            out = c.emit("Div", [out, count])
    else:
        ninf = c.const(np.array(-np.inf, np.float32), "ninf")
        spread = c.emit("Where", [c.emit("Unsqueeze", [mask, c.ints([2])]), c.emit("Unsqueeze", [flat, c.ints([0])]),
                                  ninf])
        top = c.reduce("ReduceMax", spread, [1], 0)
        top = c.emit("Where", [c.emit("IsInf", [top], detect_positive=0),
                               c.const(np.array(0.0, np.float32), "zero_f"), top])
        out = top
        if kind != "Max":
            acc = c.emit("MatMul", [maskf, c.emit("Exp", [c.emit("Sub", [flat, c.emit("Gather", [top, s], axis=0)])])])
            if kind == "LogMeanExp":
                acc = c.emit("Div", [acc, count])
            logged = c.emit("Add", [c.emit("Log", [acc]), top])
            zero = c.const(np.array(0.0, np.float32), "zero_f")
            out = c.emit("Where", [c.emit("Equal", [acc, zero]), zero, logged])
    tail = c.emit("Slice", [c.shape_of(c.x(0)), c.ints([1]), c.ints([np.iinfo(np.int64).max])])
    c.emit("Reshape", [out, c.emit("Concat", [c.ints([-1]), tail], axis=0)], [c.y(0)])
