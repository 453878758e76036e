"""Sparse ops: Gather, SparseToDense, BatchGather, SparseLengthsSum and the Lengths reducer family."""
from __future__ import annotations

import numpy as np

from engine.runtime import device as dev
from engine.runtime.grad_makers import GradientMakerError, cc_maker, gradient_not_implemented_yet, simple
from engine.catalogue.registry import gradient, kernel
from engine.catalogue.registry import shape
from engine.runtime.shapes import TensorInfo, dims, norm_axis, same_as
from proto import caffe2_pb2

# ---- kernels ----

def _outer_rows(xp, data, indices, axis):
    """match_outer: (data as (outer, n, rest), row index per outer row, indices as (outer, k))."""
    axis %= data.ndim
    if tuple(indices.shape[:axis]) != tuple(data.shape[:axis]):
        raise ValueError(f"match_outer: INDICES {indices.shape} must start with DATA's outer dims {data.shape[:axis]}")
    outer = int(np.prod(data.shape[:axis]))
    d3 = data.reshape((outer, data.shape[axis]) + data.shape[axis + 1:])
    rows = indices.astype(np.int64).reshape(outer, int(np.prod(indices.shape[axis:])))  # NOTE: no -1: outer may be 0
    return d3, xp.arange(outer).reshape(-1, 1), rows, axis


def rows_of(data, indices):
    """``take(data, indices, axis=0)`` by fancy indexing: an embedding table viewing its init file
    (unaligned, engine.model.valueref) is read row by row, where ``take`` first copies it whole."""
    return data[indices.astype(np.int64)]


def require_rows(data, indices) -> None:
    """Caffe2's embedding lookup (the SparseLengths reducers) refuses rows of no values (DATA (5, 0),
    (5, 2, 0)) once there is an index to look up."""
    if data.ndim > 1 and indices.size and not int(np.prod(data.shape[1:])):
        raise ValueError(f"DATA {tuple(data.shape)} has rows of no values to look up")


def embedding_rows(data, indices):
    """The rows of `data` that `indices` pick, checked as Caffe2's embedding lookup checks them."""
    require_rows(data, indices)
    return rows_of(data, indices)


@kernel("Gather")
def gather(xp, data, indices, *, axis: int = 0, match_outer: int = 0):
    # NOTE: match_outer: the dims of INDICES before `axis` are DATA's, gathered row by row.
    if not match_outer:
        return rows_of(data, indices) if axis == 0 else xp.take(data, indices.astype(np.int64), axis=axis)
    d3, rows, idx, axis = _outer_rows(xp, data, indices, axis)
    return d3[rows, idx].reshape(data.shape[:axis] + indices.shape[axis:] + data.shape[axis + 1:])


@kernel("BatchGather")
def batch_gather(xp, data, indices, *, match_outer: int = 0):
    # NOTE: Gather along axis 1 (match_outer: INDICES' first dim is DATA's batch, gathered per row).
    return gather(xp, data, indices, axis=1, match_outer=match_outer)


@kernel("BatchGatherGradient")
def batch_gather_gradient(xp, data, indices, dy, *, axis: int = 1, match_outer: int = 0):
    if match_outer:
        d3, rows, idx, _ = _outer_rows(xp, data, indices, axis)
        dx3 = xp.zeros_like(d3)
        xp.add.at(dx3, (rows, idx), dy.reshape(idx.shape + d3.shape[2:]))
        return dx3.reshape(data.shape)
    # NOTE: dY is DATA's dims before `axis`, then INDICES' dims, then DATA's after `axis`.
    axis %= data.ndim
    outer = int(np.prod(data.shape[:axis]))
    dx3 = xp.zeros((outer, data.shape[axis], int(np.prod(data.shape[axis + 1:]))), data.dtype)
    xp.add.at(dx3.transpose(1, 0, 2), indices.reshape(-1).astype(np.int64),
              dy.reshape(outer, indices.size, -1).transpose(1, 0, 2))
    return dx3.reshape(data.shape)


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
    # NOTE: float16 tables are summed and returned in float32, as Caffe2's SparseLengths* kernels do.
    if rows.dtype == np.float16:
        rows = rows.astype(np.float32)
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
    return _segment_sum(xp, embedding_rows(data, indices), lengths)


@kernel("SparseLengthsMean")
def sparse_lengths_mean(xp, data, indices, lengths):
    return _segment_sum(xp, embedding_rows(data, indices), lengths, mean=True)


@kernel("SparseLengthsWeightedSum")
def sparse_lengths_weighted_sum(xp, data, weights, indices, lengths):
    rows = embedding_rows(data, indices)
    return _segment_sum(xp, rows * weights.reshape((-1,) + (1,) * (rows.ndim - 1)), lengths)


@kernel("LengthsSumGradient", "SparseLengthsSumGradient")
def lengths_sum_gradient(xp, dy, lengths, *_indices):
    # NOTE: one row of dY per index: the values of the GradientSlice over the forward INDICES.
    return xp.take(dy, _segments(xp, lengths)[0], axis=0)


@kernel("SparseLengthsIndicesInGradientSumGradient", "LengthsIndicesInGradientSumGradient")
def sparse_lengths_sum_gradient(xp, dy, lengths, indices):
    return xp.take(dy, _segments(xp, lengths)[0], axis=0)


@kernel("SparseLengthsIndicesInGradientMeanGradient", "LengthsMeanGradient",
        "LengthsIndicesInGradientMeanGradient", "SparseLengthsMeanGradient")
def sparse_lengths_mean_gradient(xp, dy, lengths, *_indices):
    seg, n = _segments(xp, lengths)
    scale = xp.asarray((1 / np.maximum(n, 1)).astype(dy.dtype))
    return xp.take(dy * scale.reshape((-1,) + (1,) * (dy.ndim - 1)), seg, axis=0)


@kernel("SparseLengthsIndicesInGradientWeightedSumGradient")
def sparse_lengths_weighted_sum_gradient(xp, weights, dy, lengths, indices):
    # NOTE: the values of DATA's GradientSlice over INDICES: dY of the row's segment times its weight.
    rows = xp.take(dy, _segments(xp, lengths)[0], axis=0)
    return rows * weights.reshape((-1,) + (1,) * (rows.ndim - 1))


@kernel("LengthsMax")
def lengths_max(xp, data, lengths):
    seg, n = _segments(xp, lengths)
    out = xp.full((n.size,) + data.shape[1:], -np.inf, dtype=data.dtype)
    xp.maximum.at(out, seg, data)
    return xp.where(xp.isneginf(out), xp.zeros_like(out), out)  # NOTE: an empty segment gives 0


@kernel("LengthsMaxWithMainInputAndForwardOutputGradient")
def lengths_max_gradient(xp, y, dy, lengths, data):
    # NOTE: Caffe2's MaxReducerGradient: every row equal to its segment's max gets dY (ties too).
    seg = _segments(xp, lengths)[0]
    return xp.where(data == xp.take(y, seg, axis=0), xp.take(dy, seg, axis=0), xp.zeros_like(data))


@kernel("ScatterWeightedSum")
def scatter_weighted_sum(xp, x, w0, indices, *slices_weights):
    # NOTE: X[idx] = w0 * X[idx] + sum_k w_k * slice_k  (output is X itself in Caffe2); a row indexed
    # n times is scaled by w0 n times, before any slice is added (as Caffe2's CPU kernel).
    idx = indices.reshape(-1).astype(np.int64)
    times = xp.bincount(idx, minlength=x.shape[0])
    out = x * (w0.reshape(()) ** times).astype(x.dtype).reshape((-1,) + (1,) * (x.ndim - 1))
    for s, w in zip(slices_weights[0::2], slices_weights[1::2]):
        xp.add.at(out, idx, s.reshape((idx.size,) + x.shape[1:]) * w.reshape(()))
    return out


@kernel("ScatterAssign")
def scatter_assign(xp, data, indices, slices):
    out = data.copy()
    out[indices.reshape(-1).astype(np.int64)] = slices.reshape((indices.size,) + data.shape[1:])
    return out


# ---- gradients ----

@gradient("Gather")
@cc_maker
def gather_gradient(g):
    """Axis 0: a GradientSlice (INDICES, GO0) and no op, unless ``dense_gradient``."""
    axis, dense = g.arg("axis", 0), bool(g.arg("dense_gradient", 0))
    if axis == 0 and dense:
        return [g.op_("SparseToDense", [g.I(1), g.GO(0), g.I(0)], [g.GI(0)])]
    if axis == 0:
        g.set_sparse(0, g.I(1), g.GO(0))
        return []
    if g.arg("dense_gradient") is not None and not dense:
        raise GradientMakerError("Gather with axis > 0 must use dense_gradient")
    return [g.op_("BatchGatherGradient", [g.I(0), g.I(1), g.GO(0)], [g.GI(0)], axis=axis)]


gradient("BatchGather")(simple("BatchGatherGradient", "I0 I1 GO0", "GI0"))
gradient("SparseToDense")(simple("Gather", "GO0 I0", "GI1"))
gradient("LengthsSum")(simple("LengthsIndicesInGradientSumGradient", "GO0 I1 I0", "GI0"))
gradient("LengthsMean")(simple("LengthsIndicesInGradientMeanGradient", "GO0 I1 I0", "GI0"))
gradient("LengthsMax")(simple("LengthsMaxWithMainInputAndForwardOutputGradient", "O0 GO0 I1 I0", "GI0"))
gradient_not_implemented_yet("LengthsSplit")


def _sparse_lengths(reducer, ins):
    """Fused Sparse reducers: values only, declared as a slice over the forward INDICES."""
    def make(g):
        if reducer == "WeightedSum" and g.arg("grad_on_weights", 0):
            # NOTE: the WithMainInput op also reads DATA and gives SCALARS' gradient.
            ops = [g.op_("SparseLengthsIndicesInGradientWeightedSumWithMainInputGradient",
                         [g.I(1), g.GO(0), g.I(3), g.I(0), g.I(2)], [g.GI_V(0), g.GI(1)])]
            g.set_sparse(0, g.I(2), g.g_input[0][1])
            return ops
        ops = [g.op_(f"SparseLengthsIndicesInGradient{reducer}Gradient", [_tok(g, t) for t in ins.split()],
                     [g.GI_V(0)])]
        g.set_sparse(0, g.I(len(g.op.input) - 2), g.g_input[0][1])
        return ops
    return cc_maker(make)


def _tok(g, t):
    return g.GO(0) if t == "GO0" else g.I(int(t[1:]))


gradient("SparseLengthsSum")(_sparse_lengths("Sum", "GO0 I2 I1"))
gradient("SparseLengthsMean")(_sparse_lengths("Mean", "GO0 I2 I1"))
gradient("SparseLengthsWeightedSum")(_sparse_lengths("WeightedSum", "I1 GO0 I3 I2"))


# ---- shapes ----

@shape("Gather")
def gather_shape(data, indices, *, axis: int = 0, match_outer: int = 0):
    dd = dims(data)
    axis = norm_axis(axis, len(dd))
    return TensorInfo((*dd[:axis], *dims(indices)[axis if match_outer else 0:], *dd[axis + 1:]), data.dtype)


shape("BatchGather")(lambda data, idx, *, match_outer=0: TensorInfo(
    (*dims(data)[:1], *dims(idx)[1 if match_outer else 0:], *dims(data)[2:]), data.dtype))
shape("BatchGatherGradient", "ScatterWeightedSum", "ScatterAssign")(same_as(0))


def _segments_shape(data, lengths):
    return TensorInfo((*dims(lengths)[:1], *dims(data)[1:]), data.dtype)


shape("LengthsSum", "LengthsMean", "LengthsMax")(_segments_shape)
def _sparse_lengths_shape(data, lengths):
    """SparseLengths*: float16 tables give float32 sums."""
    out = _segments_shape(data, lengths)
    return TensorInfo(out.shape, caffe2_pb2.TensorProto.FLOAT) if data.dtype == caffe2_pb2.TensorProto.FLOAT16 else out


shape("SparseLengthsSum", "SparseLengthsMean")(lambda data, indices, lengths: _sparse_lengths_shape(data, lengths))
shape("SparseLengthsWeightedSum")(lambda data, w, indices, lengths: _sparse_lengths_shape(data, lengths))


@shape("SparseToDense")
def sparse_to_dense_shape(indices, values, like=None):
    # NOTE: without `like` the first dim is max(indices) + 1, a value.
    return TensorInfo((dims(like)[0], *dims(values)[1:]), values.dtype) if like is not None else None


# NOTE: the values of a gradient over the forward INDICES: one row per index, dY's row shape.
shape("LengthsSumGradient", "SparseLengthsSumGradient", "LengthsMeanGradient")(
    lambda dy, lengths, *idx: TensorInfo((idx[0] and dims(idx[0])[0] if idx else None, *dims(dy)[1:]), dy.dtype))
shape("SparseLengthsIndicesInGradientSumGradient", "LengthsIndicesInGradientSumGradient",
      "SparseLengthsIndicesInGradientMeanGradient", "LengthsIndicesInGradientMeanGradient")(
    lambda dy, lengths, indices: TensorInfo((dims(indices)[0], *dims(dy)[1:]), dy.dtype))
shape("SparseLengthsIndicesInGradientWeightedSumGradient")(
    lambda w, dy, lengths, indices: TensorInfo((dims(indices)[0], *dims(dy)[1:]), dy.dtype))
shape("LengthsMaxWithMainInputAndForwardOutputGradient")(lambda y, dy, lengths, data: data)


# ---- onnx ----
from engine.catalogue.registry import onnx_converter  # noqa: E402


@onnx_converter("Gather", "BatchGather")
def gather_onnx(c):
    """ONNX Gather along `axis` (BatchGather: 1); negative indices wrap in both; match_outer refused."""
    if c.arg("match_outer", 0):
        raise c.refuse("match_outer=1")
    c.emit("Gather", [c.x(0), c.x(1)], [c.y(0)], axis=1 if c.op.type == "BatchGather" else c.arg("axis", 0))


def _onnx_segment_sum(c, rows, lengths, mean=False):
    """Sum (mean: over max(length, 1)) of consecutive `rows` per segment of `lengths`: a 0/1 segment
    matrix built from the lengths' running ends, times the rows flattened to 2-D (a GEMM)."""
    n = c.emit("Cast", [lengths], to=7)
    ends = c.emit("Reshape", [c.emit("CumSum", [n, c.const(np.array(0, np.int64), "axis")]), c.ints([-1, 1])])
    starts = c.emit("Sub", [ends, c.emit("Reshape", [n, c.ints([-1, 1])])])
    total = c.emit("Gather", [c.shape_of(rows), c.const(np.array(0, np.int64), "dim0")])
    pos = c.emit("Reshape", [c.emit("Range", [c.const(np.array(0, np.int64), "zero"), total,
                                              c.const(np.array(1, np.int64), "one")]), c.ints([1, -1])])
    inside = c.emit("And", [c.emit("GreaterOrEqual", [pos, starts]), c.emit("Less", [pos, ends])])
    flat = c.emit("Flatten", [rows], axis=1)
    out = c.emit("MatMul", [c.emit("Cast", [inside], to=1), flat])
    if mean:
        count = c.emit("Cast", [c.emit("Max", [c.emit("Reshape", [n, c.ints([-1, 1])]), c.ints([1])])], to=1)
        out = c.emit("Div", [out, count])
    tail = c.emit("Slice", [c.shape_of(rows), c.ints([1]), c.ints([np.iinfo(np.int64).max])])
    return c.emit("Reshape", [out, c.emit("Concat", [c.ints([-1]), tail], axis=0)])


@onnx_converter("SparseLengthsSum", "SparseLengthsMean", "SparseLengthsWeightedSum")
def sparse_lengths_onnx(c):
    """Gather the indexed rows (weighted: scaled per index), then sum (mean) each run of `lengths`
    rows: float32 tables only (float16 is summed in float32 by Caffe2)."""
    if c.np_dtype(0) != np.float32:
        raise c.refuse(f"a {c.np_dtype(0)} table")
    weighted = c.op.type == "SparseLengthsWeightedSum"
    rows = c.emit("Gather", [c.x(0), c.x(2 if weighted else 1)], axis=0)
    if weighted:
        w = c.emit("Reshape", [c.x(1), c.ints([-1] + [1] * (c.rank(0) - 1))])
        rows = c.emit("Mul", [rows, w])
    out = _onnx_segment_sum(c, rows, c.x(3 if weighted else 2), mean=c.op.type == "SparseLengthsMean")
    c.emit("Identity", [out], [c.y(0)])


@onnx_converter("ScatterAssign")
def scatter_assign_onnx(c):
    """ONNX ScatterND with the indices as (K, 1) row numbers and the slices reshaped to (K, *DATA's
    row): DATA[INDICES[k]] = SLICES[k]; int32 and int64 indices alike.  A repeated index keeps its last
    slice in both (ONNX leaves that to the runtime; ONNX Runtime's CPU kernel writes in order)."""
    idx = c.emit("Reshape", [c.emit("Cast", [c.x(1)], to=7), c.ints([-1, 1])])
    tail = c.emit("Slice", [c.shape_of(c.x(0)), c.ints([1]), c.ints([np.iinfo(np.int64).max])])
    rows = c.emit("Reshape", [c.x(2), c.emit("Concat", [c.ints([-1]), tail], axis=0)])
    c.emit("ScatterND", [c.x(0), idx, rows], [c.y(0)])


@onnx_converter("LengthsSum", "LengthsMean")
def lengths_sum_onnx(c):
    if c.np_dtype(0) != np.float32:
        raise c.refuse(f"a {c.np_dtype(0)} input")
    c.emit("Identity", [_onnx_segment_sum(c, c.x(0), c.x(1), mean=c.op.type == "LengthsMean")], [c.y(0)])
