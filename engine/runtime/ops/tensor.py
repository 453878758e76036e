"""Shape and data movement: Concat, Split, Reshape, Transpose, Flatten, FlattenToVec, ExpandDims, Squeeze, Slice, Cast,
Alias, ResizeNearest, NCHW2NHWC, NHWC2NCHW, ResizeLike, Shape, Size, Tile, NumpyTile, Expand, TopK, FlexibleTopK,
MergeDim, PrependDim, Find, Unique, IsMemberOf, Scatter, CopyRowsToTensor."""
from __future__ import annotations

import numpy as np

from engine.runtime import device as dev
from engine.runtime.grad_makers import (
    GradientMakerError, cc_maker, no_gradient, pass_through, should_not_do_gradient, simple)
from engine.catalogue.registry import gradient, kernel
from engine.catalogue.registry import shape
import functools
from math import prod
from engine.errors import ShapeError
from engine.runtime.shapes import (INT32, INT64, TensorInfo, Unknown, dim_op, dims as dims_of, join_layout, merge,
                           norm_axis, same_as, split_layout)

from engine.model.opdef import make_argument
from proto import caffe2_pb2

# ---- kernels ----

# TensorProto.DataType → numpy dtype (Cast, ConstantFill, GivenTensorFill share it).
DTYPES = {1: np.float32, 2: np.int32, 3: np.uint8, 4: object, 5: np.bool_, 6: np.uint8, 7: np.int8,
          8: np.uint16, 9: np.int16, 10: np.int64, 12: np.float16, 13: np.float64}
DTYPE_NAMES = {"FLOAT": 1, "INT32": 2, "BYTE": 3, "STRING": 4, "BOOL": 5, "UINT8": 6, "INT8": 7,
               "UINT16": 8, "INT16": 9, "INT64": 10, "FLOAT16": 12, "DOUBLE": 13}


def np_dtype(to):
    """numpy dtype of a Caffe2 DataType given as int or name ("FLOAT", "float")."""
    return DTYPES[DTYPE_NAMES[to.upper()] if isinstance(to, str) else int(to)]


def _concat_axis(axis, order):
    """Concat/Split's axis: `axis` when given, else the channel dim of `order` (NHWC: 3, whatever the rank)."""
    return axis if axis is not None else (1 if order == "NCHW" else 3)


def _in_range(axis: int, ndim: int) -> int:
    """`axis` made non-negative; out of range is an error (Caffe2: axis_index < ndims), not a wrap."""
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for {ndim} dims")
    return axis % ndim


@kernel("Concat")
def concat(xp, *xs, axis: int | None = None, order: str = "NCHW", add_axis: int = 0):
    # NOTE: 2nd output split_info holds each input's size along `axis` (int32), for the Split gradient.
    # NOTE: with no `axis` (order only) Caffe2's kernel ignores add_axis; its shape inference does not.
    add_axis, axis = add_axis and axis is not None, _concat_axis(axis, order)
    if add_axis:
        axis = _in_range(axis, xs[0].ndim + 1)
        return xp.stack(xs, axis=axis), np.ones(len(xs), dtype=np.int32)
    axis = _in_range(axis, xs[0].ndim)
    return xp.concatenate(xs, axis=axis), np.array([x.shape[axis] for x in xs], dtype=np.int32)


@kernel("Split", "DepthSplit", needs_context=True)
def split(xp, x, sizes=None, *, ctx, axis: int | None = None, split: list | None = None, order: str = "NCHW",
          add_axis: int = 0):
    add_axis, axis = add_axis and axis is not None, _in_range(_concat_axis(axis, order), x.ndim)  # NOTE: order only
    n, given = len(ctx.op.output), bool(split) or sizes is not None
    sizes = [int(v) for v in (np.asarray(sizes.get() if hasattr(sizes, "get") else sizes)
                              if sizes is not None else split or [x.shape[axis] // n] * n)]
    if sum(sizes) != x.shape[axis] or len(sizes) != n:  # NOTE: "enforce fail", as Caffe2's text (core_test)
        raise ValueError(f"enforce fail: split sizes {sizes} do not cover dim {x.shape[axis]} in {n} outputs"
                         + ("" if given else f" ({x.shape[axis]} is not divisible by {n})"))
    parts = xp.split(x, np.cumsum(sizes)[:-1].tolist(), axis=axis)
    return tuple(xp.squeeze(p, axis=axis) if add_axis else p.copy() for p in parts)


@kernel("Reshape")
def reshape(xp, x, new_shape=None, *, shape: list | None = None):
    # NOTE: 0 copies the input's dim, -1 is inferred; 2nd output old_shape (int64) drives the gradient.
    dims = [int(v) for v in (dev.to_host(new_shape).tolist() if new_shape is not None else shape)]
    if x.size:
        dims = [x.shape[i] if d == 0 and i < x.ndim else d for i, d in enumerate(dims)]
    elif -1 in dims:  # NOTE: an empty input: 0 is a literal 0 (no copy) and the -1 dim is 0
        dims[dims.index(-1)] = 0
    known = prod(d for d in dims if d != -1)
    if dims.count(-1) > 1 or (known != x.size if -1 not in dims else known == 0 or x.size % known):
        given = dev.to_host(new_shape).tolist() if new_shape is not None else list(shape)
        read = f" (read as {tuple(dims)}: 0 copies the input's dim)" if dims != given else ""
        raise ValueError(f"shape {given}{read} cannot hold the input's {x.size} values {tuple(x.shape)}")
    return x.reshape(dims), np.array(x.shape, dtype=np.int64)


@kernel("Transpose")
def transpose(xp, x, *, axes: list | None = None):
    return xp.ascontiguousarray(x.transpose(axes or None))


@kernel("Flatten")
def flatten(xp, x, *, axis: int = 1):
    # NOTE: both sides as products (not -1): an empty input (N = 0) flattens to 0×rest.
    return x.reshape(prod(x.shape[:axis]), prod(x.shape[axis:]))


@kernel("FlattenToVec")
def flatten_to_vec(xp, x):
    return x.reshape(-1)


@kernel("ExpandDims")
def expand_dims(xp, x, *, dims: list = ()):
    for d in sorted(set(dims)):  # NOTE: a repeated dim counts once (Caffe2 warns and dedups)
        x = xp.expand_dims(x, d)
    return x


@kernel("Squeeze")
def squeeze(xp, x, *, dims: list = ()):
    return x.reshape([n for i, n in enumerate(x.shape) if i not in set(dims)])


def _slices(x, starts, ends):
    # NOTE: a negative index i means dim + 1 + i, so end -1 is "to the end".
    sl = []
    for i, n in enumerate(x.shape):
        s, e = (int(starts[i]), int(ends[i])) if i < len(starts) else (0, n)
        sl.append(slice(s + n + 1 if s < 0 else s, e + n + 1 if e < 0 else e))
    return tuple(sl)


@kernel("Slice")
def slice_(xp, x, starts_in=None, ends_in=None, *, starts: list = (), ends: list = ()):
    if starts_in is not None:
        starts, ends = dev.to_host(starts_in).tolist(), dev.to_host(ends_in).tolist()
    return x[_slices(x, starts, ends)].copy()


@kernel("SliceGradient")
def slice_gradient(xp, x, *rest, starts: list = (), ends: list = ()):
    if len(rest) == 3:
        starts, ends = dev.to_host(rest[0]).tolist(), dev.to_host(rest[1]).tolist()
    dx = xp.zeros_like(rest[-1], shape=x.shape)
    dx[_slices(x, starts, ends)] = rest[-1]
    return dx


@kernel("Cast")
def cast(xp, x, *, to: int = 1):
    t = np_dtype(to)
    if t is object:  # NOTE: to STRING: C++ std::to_string of each value ("%f" for floats), as bytes
        h = dev.to_host(x)
        text = np.char.mod("%f" if h.dtype.kind == "f" else "%d", h.astype(np.int64) if h.dtype == bool else h)
        return np.char.encode(text, "ascii").astype(object)
    return x.astype(t)


@kernel("Alias", "StopGradient", "EnsureDense")
def alias(xp, x):
    return x


def _nearest(n_in, n_out, scale):
    # NOTE: in float32, as Caffe2 (out / scale in double can land just under an integer float32 reaches).
    return np.minimum((np.arange(n_out, dtype=np.float32) / np.float32(scale)).astype(np.int64), n_in - 1)


def _scaled(n: int, scale: float) -> int:
    """Caffe2's output size int(n * scale), the product in float32."""
    return int(np.float32(n) * np.float32(scale))


@kernel("ResizeNearest")
def resize_nearest(xp, x, scales=None, *, width_scale: float = 1.0, height_scale: float = 1.0,
                   order: str = "NCHW"):
    if scales is not None:
        height_scale, width_scale = (float(v) for v in dev.to_host(scales).reshape(-1)[:2])
    h_axis = 2 if order == "NCHW" else 1
    h, w = x.shape[h_axis], x.shape[h_axis + 1]
    iy = xp.asarray(_nearest(h, _scaled(h, height_scale), height_scale))
    ix = xp.asarray(_nearest(w, _scaled(w, width_scale), width_scale))
    return xp.take(xp.take(x, iy, axis=h_axis), ix, axis=h_axis + 1)


@kernel("ResizeNearestGradient")
def resize_nearest_gradient(xp, dy, x, scales=None, *, width_scale: float = 1.0, height_scale: float = 1.0,
                            order: str = "NCHW"):
    # NOTE: the scatter-add is a product with one-hot row/column selection matrices (BLAS, no loops).
    if scales is not None:
        height_scale, width_scale = (float(v) for v in dev.to_host(scales).reshape(-1)[:2])
    g = dy if order == "NCHW" else dy.transpose(0, 3, 1, 2)
    h, w = x.shape[2:] if order == "NCHW" else x.shape[1:3]
    ry = xp.asarray((_nearest(h, g.shape[2], height_scale)[:, None] == np.arange(h)).astype(dy.dtype))
    rx = xp.asarray((_nearest(w, g.shape[3], width_scale)[:, None] == np.arange(w)).astype(dy.dtype))
    dx = xp.matmul(xp.matmul(ry.T, g), rx)
    return dx if order == "NCHW" else xp.ascontiguousarray(dx.transpose(0, 2, 3, 1))


@kernel("NCHW2NHWC")
def nchw2nhwc(xp, x):
    return xp.ascontiguousarray(xp.moveaxis(x, 1, -1))


@kernel("NHWC2NCHW")
def nhwc2nchw(xp, x):
    return xp.ascontiguousarray(xp.moveaxis(x, -1, 1))


@kernel("ResizeLike")
def resize_like(xp, x, like):
    return x.reshape(like.shape)


@kernel("Shape")
def shape_(xp, x, *, axes: list | None = None):
    dims = np.array(x.shape, dtype=np.int64)
    return dims[list(axes)] if axes else dims


@kernel("Size")
def size(xp, x):
    return np.array(x.size, dtype=np.int64)


def _tile_args(tiles_in, axis_in, tiles, axis):
    if axis is None and axis_in is None:
        raise ValueError("Tile: argument 'axis' is missing and was not given as input 2")
    if tiles_in is not None:
        tiles = int(dev.to_host(tiles_in).reshape(-1)[0])
    if axis_in is not None:
        axis = int(dev.to_host(axis_in).reshape(-1)[0])
    return tiles, axis


@kernel("Tile")
def tile(xp, x, tiles_in=None, axis_in=None, *, tiles: int = 1, axis: int | None = None):
    # NOTE: tiles and axis may come as inputs 1 and 2 (one value each) instead of arguments.
    tiles, axis = _tile_args(tiles_in, axis_in, tiles, axis)
    axis %= x.ndim
    reps = [1] * x.ndim
    reps[axis] = tiles
    return xp.tile(x, reps)


@kernel("TileGradient")
def tile_gradient(xp, dy, tiles_in=None, axis_in=None, *, tiles: int = 1, axis: int | None = None):
    tiles, axis = _tile_args(tiles_in, axis_in, tiles, axis)
    axis %= dy.ndim
    shape = dy.shape[:axis] + (tiles, dy.shape[axis] // tiles) + dy.shape[axis + 1:]
    return dy.reshape(shape).sum(axis=axis).astype(dy.dtype, copy=False)


@kernel("NumpyTile")
def numpy_tile(xp, x, repeats):
    reps = [int(v) for v in dev.to_host(repeats).reshape(-1)]
    if len(reps) != x.ndim:
        raise ValueError(f"NumpyTile: {len(reps)} repeats for {x.ndim} dims")
    return xp.tile(x, reps)


@kernel("Expand")
def expand(xp, x, shape_in):
    # NOTE: bidirectional broadcast, Caffe2's way: each output dim is max(X's, shape's), so a 0 or 1 in
    # the shape keeps X's dim (a negative one counts as its absolute value); X's dims must be 1 or that.
    # Caffe2 refuses an empty X (any 0 dim), whatever the shape.
    s = [abs(int(v)) for v in dev.to_host(shape_in).reshape(-1)]
    if x.size == 0:
        raise ValueError(f"Expand: input {tuple(x.shape)} is empty; Caffe2 refuses it")
    rank = max(x.ndim, len(s))
    xd, sd = (1,) * (rank - x.ndim) + tuple(x.shape), [1] * (rank - len(s)) + s
    target = tuple(max(a, b) for a, b in zip(xd, sd))
    if any(a not in (1, y) for a, y in zip(xd, target)):
        raise ValueError(f"Expand: input {tuple(x.shape)} does not broadcast to {target} (shape {s})")
    return xp.ascontiguousarray(xp.broadcast_to(x, target))


@kernel("ExpandGradient")
def expand_gradient(xp, dy, x):
    lead = dy.ndim - x.ndim
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(x.shape) if n == 1 and dy.shape[lead + i] != 1)
    return dy.sum(axis=axes).reshape(x.shape).astype(dy.dtype, copy=False)


def _top_k_order(xp, x, k, axis):
    """Indices of the k largest along `axis`, largest first, ties by lower index."""
    order = xp.argsort(-x if x.dtype.kind != "u" else x.max() - x, axis=axis, kind="stable")
    return xp.take(order, xp.arange(k), axis=axis)


@kernel("TopK")
def top_k(xp, x, k_in=None, *, k: int = -1, axis: int = -1):
    # NOTE: 3rd output (optional): indices into the flattened X, for the values in row-major order.
    if k_in is not None:
        k = int(dev.to_host(k_in).reshape(-1)[0])
    axis %= x.ndim
    if k < 1:
        raise ValueError(f"TopK: k = {k} must be positive")
    n = x.shape[axis]
    idx = _top_k_order(xp, x, min(k, n), axis)
    vals = xp.take_along_axis(x, idx, axis=axis)
    grid = xp.indices(idx.shape)
    flat = xp.ravel_multi_index(tuple(idx if d == axis else grid[d] for d in range(x.ndim)), x.shape)
    if k > n:  # NOTE: Caffe2 pads the missing places: value 0, index -1 (flattened index: not written)
        pad = [(0, 0)] * x.ndim
        pad[axis] = (0, k - n)
        vals, idx = xp.pad(vals, pad), xp.pad(idx, pad, constant_values=-1)
        flat = xp.pad(flat, pad, constant_values=-1)
    return vals, idx.astype(np.int64), flat.reshape(-1).astype(np.int64)


@kernel("TopKGradient")
def top_k_gradient(xp, dvals, idx, x, *, k: int = -1, axis: int = -1):
    dx = xp.zeros(x.shape, dvals.dtype)
    axis %= x.ndim
    n = idx.shape[axis] if (idx >= 0).all() else int((idx >= 0).sum(axis=axis).max())  # NOTE: -1 = padding
    keep = xp.take(idx, xp.arange(n), axis=axis)
    dx[_scatter_index(xp, keep, axis)] = xp.take(dvals, xp.arange(n), axis=axis)
    return dx


@kernel("FlexibleTopK")
def flexible_top_k(xp, x, k):
    # NOTE: row r (over the last dim) keeps its k[r] largest; values and indices are concatenated.
    x2, ks = x.reshape(-1, x.shape[-1]), dev.to_host(k).reshape(-1).astype(np.int64)
    if ks.size != x2.shape[0] or (ks < 1).any() or (ks > x2.shape[1]).any():
        raise ValueError(f"FlexibleTopK: k {ks.tolist()} must have one value in 1..{x2.shape[1]} per row")
    order = _top_k_order(xp, x2, x2.shape[1], 1)
    keep = xp.asarray(np.arange(x2.shape[1]) < ks[:, None])
    idx = order[keep]
    return xp.take_along_axis(x2, order, axis=1)[keep], idx.astype(np.int64)


@kernel("FlexibleTopKGradient")
def flexible_top_k_gradient(xp, x, k, dvals, idx):
    ks = dev.to_host(k).reshape(-1).astype(np.int64)
    rows = xp.asarray(np.repeat(np.arange(ks.size), ks))
    dx = xp.zeros((ks.size, x.shape[-1]), dvals.dtype)
    dx[rows, idx] = dvals
    return dx.reshape(x.shape)


@kernel("MergeDim")
def merge_dim(xp, x):
    return x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:])


@kernel("PrependDim")
def prepend_dim(xp, x, *, dim_size: int = 0):
    if dim_size <= 0 or x.shape[0] % dim_size:
        raise ValueError(f"PrependDim: dim_size {dim_size} does not divide the first dim {x.shape[0]}")
    return x.reshape((dim_size, x.shape[0] // dim_size) + x.shape[1:])


@kernel("Find")
def find(xp, index, query, *, missing_value: int = -1):
    # NOTE: each query gets the LAST position holding it in `index`, else missing_value.
    if index.dtype != query.dtype:
        raise TypeError(f"Find: index is {index.dtype}, query {query.dtype}")
    order = xp.argsort(index, kind="stable")
    srt = index[order]
    pos = xp.searchsorted(srt, query, side="right") - 1
    safe = xp.maximum(pos, 0)
    hit = (pos >= 0) & (srt[safe] == query) if index.size else xp.zeros(query.shape, bool)
    return xp.where(hit, order[safe] if index.size else 0, missing_value).astype(index.dtype)


@kernel("Unique")
def unique(xp, x):
    # NOTE: sorted unique values; the optional 2nd output maps each input to its unique's position.
    u, inv = xp.unique(x.reshape(-1), return_inverse=True)
    return u, inv.reshape(-1).astype(np.int32)


@kernel("IsMemberOf")
def is_member_of(xp, x, *, value: list = (), dtype: int | None = None):
    return xp.isin(x, xp.asarray(list(value), dtype=x.dtype))


def _scatter_index(xp, indices, axis):
    """Index tuple writing element i of `indices` into position indices[i] along `axis`."""
    k = indices.ndim
    return tuple(indices if d == axis else xp.arange(n).reshape((1,) * d + (n,) + (1,) * (k - d - 1))
                 for d, n in enumerate(indices.shape))


@kernel("Scatter")
def scatter(xp, data, indices, updates, *, axis: int = 1):
    # NOTE: ONNX ScatterElements: out[..., indices[i, j], ...] = updates[i, j] along `axis`.
    if indices.shape != updates.shape:
        raise ValueError(f"Scatter: indices {indices.shape} and updates {updates.shape} differ")
    out = data.copy()
    out[_scatter_index(xp, indices.astype(np.int64), axis % data.ndim)] = updates
    return out


@kernel("CopyRowsToTensor")
def copy_rows_to_tensor(xp, x, indices, row):
    if indices.dtype != np.int64:
        raise TypeError(f"CopyRowsToTensor: indices must be int64, got {indices.dtype}")
    if row.size != int(np.prod(x.shape[1:])):
        raise ValueError(f"CopyRowsToTensor: width of input tensor should match lengths of row: row has {row.size} "
                         f"values, rows of X have {int(np.prod(x.shape[1:]))}")
    out = x.copy()
    out[indices.reshape(-1)] = row.reshape(x.shape[1:])
    return out


@kernel("CopyRowsToTensorGradient")
def copy_rows_to_tensor_gradient(xp, dy):
    return dy.copy()


# ---- gradients ----

@gradient("Concat")
@cc_maker
def concat_gradient(g):
    if not g.has_go(0):
        return []
    return [g.op_("Split", [g.GO(0), g.O(1)], [g.GI(k) for k in range(len(g.op.input))])]


@gradient("Split", "DepthSplit")
@cc_maker
def split_gradient(g):
    """Outputs without a gradient are skipped (Caffe2's known shape limitation)."""
    grads = [g.GO(k) for k in range(len(g.op.output)) if g.has_go(k)]
    if not grads:
        return []
    return [g.op_("Concat", grads, [g.GI(0), "_" + g.GI(0) + "_dims"])]


@gradient("EnsureDense")
@cc_maker
def ensure_dense_gradient(g):
    """A dense GO passes through unchanged (no op); a sparse one is densified like the input."""
    if not g.is_sparse_go(0):
        g.set_dense(0, g.GO(0))
        return []
    return [g.op_("SparseToDense", [g.GO_I(0), g.GO_V(0), g.I(0)], [g.GI(0)])]


@gradient("Reshape")
@cc_maker(copy_args=False)
def reshape_gradient(g):
    """The recorded old shape O1 drives the backward reshape."""
    return [g.op_("Reshape", [g.GO(0), g.O(1)], [g.GI(0), "_" + g.GI(0) + "_dims"])]


@gradient("Transpose")
@cc_maker(copy_args=False)
def transpose_gradient(g):
    """Forward args copied, then ``axes`` replaced in place by its inverse permutation."""
    op = g.op_("Transpose", [g.GO(0)], [g.GI(0)])
    op.arg.extend(g.op.arg)
    for a in op.arg:
        if a.name == "axes":
            old = list(a.ints)
            a.ints[:] = sorted(range(len(old)), key=old.__getitem__)
            break
    return [op]


@gradient("Slice")
@cc_maker
def slice_gradient(g):
    ins = [g.I(0), g.I(1), g.I(2)] if len(g.op.input) > 1 else [g.I(0)]
    return [g.op_("SliceGradient", ins + [g.GO(0)], [g.GI(0)])]


@gradient("Cast")
@cc_maker(copy_args=False)
def cast_gradient(g):
    """Casts back: ``to`` <- forward ``from_type`` and ``from_type`` <- forward ``to``."""
    op = g.op_("Cast", [g.GO(0)], [g.GI(0)])
    to = _cast_type(g.arg("to", 1))
    if not isinstance(g.arg("from_type"), (int, str)) or isinstance(g.arg("from_type"), bool):
        raise GradientMakerError("Argument 'from_type' of type int or string is required to get the "
                                 "gradient of CastOp")
    op.arg.extend([make_argument("to", _cast_type(g.arg("from_type"))), make_argument("from_type", to)])
    return [op]


def _cast_type(v):
    return caffe2_pb2.TensorProto.DataType.Value(v.upper()) if isinstance(v, str) else int(v)


@gradient("ResizeNearest", "ResizeNearest3D")
@cc_maker
def resize_nearest_gradient(g):
    ins = [g.GO(0), g.I(0)] + ([g.I(1)] if len(g.op.input) == 2 else [])
    return [g.op_(g.type + "Gradient", ins, [g.GI(0)])]


gradient("Flatten", "FlattenToVec")(simple("ResizeLike", "GO0 I0", "GI0"))
gradient("ExpandDims")(simple("Squeeze", "GO0", "GI0"))
gradient("Squeeze")(simple("ExpandDims", "GO0", "GI0"))
gradient("NCHW2NHWC")(simple("NHWC2NCHW", "GO0", "GI0"))
gradient("NHWC2NCHW")(simple("NCHW2NHWC", "GO0", "GI0"))
gradient("Alias")(pass_through)
should_not_do_gradient("ResizeLike", "Shape")
no_gradient("Size")


@gradient("Tile")
@cc_maker
def tile_gradient_maker(g):
    """tiles / axis given as inputs are passed on, after dY."""
    return [g.op_("TileGradient", [g.GO(0), *g.op.input[1:]], [g.GI(0)])]


gradient("Expand")(simple("ExpandGradient", "GO0 I0", "GI0"))
gradient("TopK")(simple("TopKGradient", "GO0 O1 I0", "GI0"))
gradient("FlexibleTopK")(simple("FlexibleTopKGradient", "I0 I1 GO0 O1", "GI0"))
gradient("PrependDim")(cc_maker(lambda g: [g.op_("MergeDim", [g.GO(0)], [g.GI(0)])], copy_args=False))
gradient("CopyRowsToTensor")(simple("CopyRowsToTensorGradient", "GO0", "GI0"))
should_not_do_gradient("Unique", "IsMemberOf", "Scatter")


# ---- shapes ----

@shape("Concat")
def concat_shape(*xs, axis: int | None = None, order: str = "NCHW", add_axis: int = 0):
    # NOTE: 2nd output split_info holds each input's size along `axis`, for the Split gradient.
    ranked = [dims_of(x) for x in xs]
    rank = len(ranked[0]) + bool(add_axis)
    axis = norm_axis(_concat_axis(axis, order), rank)
    split_info = TensorInfo((len(xs),), INT32)
    if add_axis:
        return TensorInfo((*functools.reduce(merge, ranked)[:axis], len(xs), *ranked[0][axis:]), xs[0].dtype), split_info
    rest = functools.reduce(merge, [d[:axis] + d[axis + 1:] for d in ranked])
    total = dim_op(lambda *v: sum(v), *(d[axis] for d in ranked))
    return TensorInfo((*rest[:axis], total, *rest[axis:]), xs[0].dtype), split_info


@shape("Split", "DepthSplit")
def split_shape(x, sizes=None, *, axis: int | None = None, split: list | None = None, order: str = "NCHW",
                add_axis: int = 0, n_out):
    xd = dims_of(x)
    add_axis = add_axis and axis is not None  # NOTE: order only: Caffe2 ignores add_axis
    axis = norm_axis(_concat_axis(axis, order), len(xd))
    if sizes is not None:
        raise Unknown  # NOTE: sizes given as a tensor are values, not shapes.
    parts = list(split) if split else [dim_op(lambda d: d // n_out, xd[axis])] * n_out
    if split and xd[axis] is not None and sum(parts) != xd[axis]:
        raise ShapeError(f"split {parts} does not cover dim {xd[axis]}")
    return tuple(TensorInfo(xd[:axis] + (() if add_axis else (p,)) + xd[axis + 1:], x.dtype) for p in parts)


@shape("Reshape")
def reshape_shape(x, new_shape=None, *, shape: list | None = None):
    # NOTE: 0 copies the input's dim, -1 takes what is left; 2nd output old_shape is int64.
    xd = dims_of(x)
    old = TensorInfo((len(xd),), INT64)
    if new_shape is not None:
        return TensorInfo(None, x.dtype), old  # the target comes as values
    empty = x.is_known and prod(xd) == 0  # NOTE: an empty input: 0 is a literal 0, not a copy
    out = [xd[i] if d == 0 and not empty and i < len(xd) else d for i, d in enumerate(shape or ())]
    if out.count(-1) > 1:
        raise ShapeError(f"more than one -1 in shape {shape}")
    if -1 in out:
        rest = dim_op(lambda *v: prod(v), *(d for d in out if d != -1))
        total = dim_op(lambda *v: prod(v), *xd)
        out[out.index(-1)] = dim_op(lambda t, r: 0 if t == 0 else t // r if r and t % r == 0 else _bad(xd, shape),
                                    total, rest)  # NOTE: an empty input: the -1 dim is 0
    elif None not in out and x.is_known and prod(out) != prod(xd):
        _bad(xd, shape)
    return TensorInfo(tuple(out), x.dtype), old


def _bad(xd, shape):
    raise ShapeError(f"cannot reshape {xd} to {shape}")


@shape("Transpose")
def transpose_shape(x, *, axes: list | None = None):
    xd = dims_of(x)
    axes = list(axes) if axes else list(range(len(xd)))[::-1]
    if sorted(axes) != list(range(len(xd))):
        raise ShapeError(f"axes {axes} are not a permutation of {len(xd)} dims")
    return TensorInfo(tuple(xd[a] for a in axes), x.dtype)


@shape("Flatten")
def flatten_shape(x, *, axis: int = 1):
    xd = dims_of(x)
    return TensorInfo(tuple(dim_op(lambda *v: prod(v), *p) for p in (xd[:axis], xd[axis:])), x.dtype)


shape("FlattenToVec")(lambda x: TensorInfo((dim_op(lambda *v: prod(v), *dims_of(x)),), x.dtype))


@shape("ExpandDims")
def expand_dims_shape(x, *, dims: list = ()):
    out = list(dims_of(x))
    for d in sorted(set(dims)):
        out.insert(d, 1)
    return TensorInfo(tuple(out), x.dtype)


@shape("Squeeze")
def squeeze_shape(x, *, dims: list = ()):
    return TensorInfo(tuple(n for i, n in enumerate(dims_of(x)) if i not in set(dims)), x.dtype)


@shape("Slice")
def slice_shape(x, starts_in=None, ends_in=None, *, starts: list = (), ends: list = ()):
    # NOTE: a negative index i means dim + 1 + i, so end -1 is "to the end".
    xd = dims_of(x)
    if starts_in is not None:
        raise Unknown
    def length(i, n):
        if i >= len(starts):
            return n
        s, e = (int(starts[i]) + n + 1 if starts[i] < 0 else int(starts[i]),
                int(ends[i]) + n + 1 if ends[i] < 0 else int(ends[i]))
        return len(range(*slice(s, e).indices(n)))
    return TensorInfo(tuple(dim_op(functools.partial(length, i), n) for i, n in enumerate(xd)), x.dtype)


shape("SliceGradient")(same_as(0))


@shape("Cast")
def cast_shape(x, *, to: int = 1):
    return TensorInfo(x.shape, DTYPE_NAMES[to.upper()] if isinstance(to, str) else int(to))


shape("Alias", "StopGradient", "EnsureDense")(same_as(0))


@shape("ResizeNearest")
def resize_nearest_shape(x, scales=None, *, width_scale: float = 1.0, height_scale: float = 1.0,
                         order: str = "NCHW"):
    n, c, (h, w) = split_layout(dims_of(x), order)
    if scales is not None:
        raise Unknown  # NOTE: scales given as a tensor are values.
    return TensorInfo(join_layout(n, c, (dim_op(lambda v: _scaled(v, height_scale), h),
                                         dim_op(lambda v: _scaled(v, width_scale), w)), order), x.dtype)


shape("ResizeNearestGradient")(same_as(1))  # [dY, X] -> dX
shape("NCHW2NHWC")(lambda x: TensorInfo((d := dims_of(x))[:1] + d[2:] + d[1:2], x.dtype))
shape("NHWC2NCHW")(lambda x: TensorInfo((d := dims_of(x))[:1] + d[-1:] + d[1:-1], x.dtype))
shape("ResizeLike")(lambda x, like: TensorInfo(like.shape, x.dtype))


@shape("Shape")
def shape_shape(x, *, axes: list | None = None):
    return TensorInfo((len(axes) if axes else len(dims_of(x)),), INT64)


shape("Size")(lambda x: TensorInfo((), INT64))


@shape("Tile")
def tile_shape(x, tiles_in=None, axis_in=None, *, tiles: int = 1, axis: int | None = None):
    if tiles_in is not None or axis_in is not None or axis is None:
        raise Unknown  # NOTE: given as values
    xd = list(dims_of(x))
    a = norm_axis(axis, len(xd))
    xd[a] = dim_op(lambda v: v * tiles, xd[a])
    return TensorInfo(tuple(xd), x.dtype)


shape("TileGradient", "CopyRowsToTensorGradient")(same_as(0))  # NOTE: TileGradient's own shape needs tiles
shape("ExpandGradient")(same_as(1))
shape("TopKGradient")(same_as(2))
shape("FlexibleTopKGradient")(same_as(0))
shape("CopyRowsToTensor", "Scatter")(same_as(0))
@shape("Unique")
def unique_shape(x):
    # NOTE: how many values are unique is data-dependent, except for 0 or 1 elements (Caffe2's inference).
    n = dim_op(lambda *v: prod(v), *dims_of(x))
    return TensorInfo((n if n is not None and n <= 1 else None,), x.dtype), TensorInfo((n,), INT32)
shape("IsMemberOf")(lambda x, **_: TensorInfo(x.shape, caffe2_pb2.TensorProto.BOOL))
shape("Find")(lambda index, query, **_: TensorInfo(query.shape, index.dtype))
shape("MergeDim")(lambda x: TensorInfo((dim_op(lambda a, b: a * b, *dims_of(x)[:2]), *dims_of(x)[2:]), x.dtype))


shape("NumpyTile")(lambda x, repeats: TensorInfo((None,) * len(dims_of(x)), x.dtype))  # dims are values
shape("Expand")(lambda x, shape_in: TensorInfo(None, x.dtype))  # rank and dims are values
shape("FlexibleTopK")(lambda x, k: (TensorInfo((None,), x.dtype), TensorInfo((None,), INT64)))


@shape("PrependDim")
def prepend_dim_shape(x, *, dim_size: int = 0):
    d = dims_of(x)
    return TensorInfo((dim_size, dim_op(lambda v: v // dim_size, d[0]), *d[1:]), x.dtype)


@shape("TopK")
def top_k_shape(x, k_in=None, *, k: int = -1, axis: int = -1):
    if k_in is not None:
        raise Unknown
    xd = list(dims_of(x))
    xd[norm_axis(axis, len(xd))] = k
    # NOTE: Caffe2's inference types the indices INT32 (its kernel writes int64; docs/fidelity.md), and
    # layer builders take their record types from it.
    return (TensorInfo(tuple(xd), x.dtype), TensorInfo(tuple(xd), INT32),
            TensorInfo((dim_op(lambda *v: prod(v), *xd),), INT32))


# ---- onnx ----
from engine.catalogue.registry import onnx_converter  # noqa: E402


def _onnx_ints(c, i, what):
    """A shape-like input's values when the model fixes them (weights, fills), else a refusal."""
    v = c.const_value(i)
    if v is None:
        raise c.refuse(f"{what} come from a computed blob '{c.op.input[i]}' (only fixed values export)")
    return [int(t) for t in np.asarray(v).reshape(-1)]


@onnx_converter("Concat")
def concat_onnx(c, order: str = "NCHW"):
    """ONNX Concat (add_axis: each input unsqueezed first); split_info, the sizes along the axis
    (int32), from the static shapes or, where unknown, from Shape at run time.  `order`: the op's
    default layout (Int8Concat's is NHWC)."""
    add = c.arg("add_axis", 0) and c.has("axis")
    r = c.rank(0) + (1 if add else 0)
    axis = _in_range(_concat_axis(c.arg("axis"), c.arg("order", order)), r)
    xs = [c.emit("Unsqueeze", [c.x(i), c.ints([axis])]) if add else c.x(i) for i in range(c.n_in)]
    c.emit("Concat", xs, [c.y(0)], axis=axis)
    if c.n_out > 1:
        if add:
            return c.constant(1, np.ones(c.n_in, np.int32))
        try:
            c.constant(1, np.array([c.shape(i)[axis] for i in range(c.n_in)], np.int32))
        except Exception:  # NOTE: unknown static sizes: read them at run time
            dims = [c.emit("Gather", [c.shape_of(c.x(i)), c.ints([axis])]) for i in range(c.n_in)]
            c.emit("Cast", [c.emit("Concat", dims, axis=0)], [c.y(1)], to=6)


@onnx_converter("Split", "DepthSplit")
def split_onnx(c):
    """ONNX Split with explicit sizes (the `split` arg, a fixed input, or equal parts); add_axis squeezes."""
    add = c.arg("add_axis", 0) and c.has("axis")
    r = c.rank(0)
    axis = _in_range(_concat_axis(c.arg("axis"), c.arg("order", "NCHW")), r)
    sizes = _onnx_ints(c, 1, "split sizes") if c.n_in > 1 else c.arg("split")
    if not sizes:
        sizes = [c.shape(0)[axis] // c.n_out] * c.n_out
    outs = [c.y(k) if not add else c.tmp("part") for k in range(c.n_out)]
    c.emit("Split", [c.x(0), c.ints(sizes)], outs, axis=axis)
    if add:
        for k, o in enumerate(outs):
            c.emit("Squeeze", [o, c.ints([axis])], [c.y(k)])


@onnx_converter("Reshape")
def reshape_onnx(c):
    """ONNX Reshape reads 0 as "copy the input's dim" and -1 as inferred, as Caffe2 does (allowzero 0);
    a shape computed in the net is read at run time (cast to int64); the second output, the old
    shape, is Shape(X)."""
    if c.n_in > 1 and c.const_value(1) is None:  # NOTE: no no-op Cast: ORT 1.2x's Reshape fusion mistypes it
        dims = c.x(1) if c.np_dtype(1) == np.int64 else c.emit("Cast", [c.x(1)], to=7)
        dims = dims if c.info(1).shape is not None and len(c.info(1).shape) == 1 else c.emit("Reshape", [dims, c.ints([-1])])
    else:
        dims = c.ints(_onnx_ints(c, 1, "the new shape") if c.n_in > 1 else list(c.arg("shape") or []))
    c.emit("Reshape", [c.x(0), dims], [c.y(0)])
    if c.n_out > 1:
        c.emit("Shape", [c.x(0)], [c.y(1)])


@onnx_converter("Unique")
def unique_onnx(c):
    """ONNX Unique, sorted, of the flattened input; the second output, each input's position among the
    uniques, as int32."""
    outs = c.emit("Unique", [c.emit("Reshape", [c.x(0), c.ints([-1])])], [c.y(0), c.tmp("indices"), c.tmp("inverse")],
                  sorted=1)
    if c.n_out > 1:
        c.emit("Cast", [outs[2]], [c.y(1)], to=6)


@onnx_converter("Scatter")
def scatter_onnx(c):
    """ONNX ScatterElements along `axis` (negative indices count from the end in both); a repeated
    index keeps its last update in both."""
    c.emit("ScatterElements", [c.x(0), c.emit("Cast", [c.x(1)], to=7), c.x(2)], [c.y(0)],
           axis=_in_range(c.arg("axis", 1), c.rank(0)))


@onnx_converter("Transpose")
def transpose_onnx(c):
    axes = c.arg("axes")
    c.emit("Transpose", [c.x(0)], [c.y(0)], perm=list(axes) if axes else list(range(c.rank(0)))[::-1])


@onnx_converter("Flatten")
def flatten_onnx(c):
    c.emit("Flatten", [c.x(0)], [c.y(0)], axis=c.arg("axis", 1))


@onnx_converter("FlattenToVec")
def flatten_to_vec_onnx(c):
    c.emit("Reshape", [c.x(0), c.ints([-1])], [c.y(0)])


@onnx_converter("ExpandDims")
def expand_dims_onnx(c):
    """Unsqueeze: both read the dims as positions in the output (sorted, repeats once)."""
    c.emit("Unsqueeze", [c.x(0), c.ints(sorted(set(c.arg("dims", []))))], [c.y(0)])


@onnx_converter("Squeeze")
def squeeze_onnx(c):
    c.emit("Squeeze", [c.x(0), c.ints(sorted(set(c.arg("dims", []))))], [c.y(0)])


@onnx_converter("Slice")
def slice_onnx(c):
    """Caffe2 reads a negative start/end i as dim + 1 + i (end -1 is "to the end"): resolved on the
    static shape into ONNX's plain indices."""
    if c.n_in > 1 and (c.const_value(1) is None or c.const_value(2) is None):
        return _slice_at_run_time(c)
    if c.n_in > 1:
        starts, ends = _onnx_ints(c, 1, "starts"), _onnx_ints(c, 2, "ends")
    else:
        starts, ends = list(c.arg("starts", [])), list(c.arg("ends", []))
    shape = c.shape(0)
    fix = [(s + n + 1 if s < 0 else s, e + n + 1 if e < 0 else e) for s, e, n in zip(starts, ends, shape)]
    c.emit("Slice", [c.x(0), c.ints([s for s, _ in fix]), c.ints([e for _, e in fix]), c.ints(range(len(fix)))],
           [c.y(0)])


def _slice_at_run_time(c):
    """Slice with starts/ends computed in the net: the same dim + 1 + i reading of negative values,
    done at run time against X's shape; how many leading dims are sliced comes from the starts' or
    ends' known length."""
    sizes = [v.size for v in (c.const_value(1), c.const_value(2)) if v is not None]
    sizes += [int(np.prod(c.info(i).shape)) for i in (1, 2)
              if c.info(i).shape is not None and all(isinstance(d, int) for d in c.info(i).shape)]
    if not sizes:
        raise c.refuse(f"neither the length of '{c.op.input[1]}' nor of '{c.op.input[2]}' is known")
    dims = c.emit("Slice", [c.shape_of(c.x(0)), c.ints([0]), c.ints([sizes[0]])])
    fixed = []
    for i in (1, 2):
        v = c.emit("Cast", [c.emit("Reshape", [c.x(i), c.ints([-1])])], to=7)
        neg = c.emit("Less", [v, c.ints([0])])
        fixed.append(c.emit("Where", [neg, c.emit("Add", [c.emit("Add", [v, dims]), c.ints([1])]), v]))
    c.emit("Slice", [c.x(0), *fixed, c.ints(range(sizes[0]))], [c.y(0)])


@onnx_converter("Cast")
def cast_onnx(c):
    t = np_dtype(c.arg("to", 1))
    if t is object:
        raise c.refuse("Cast to STRING (C++ to_string text)")
    c.emit("Cast", [c.x(0)], [c.y(0)], to=c.dtype(t))


@onnx_converter("Alias", "StopGradient", "EnsureDense")
def alias_onnx(c):
    c.emit("Identity", [c.x(0)], [c.y(0)])


@onnx_converter("ResizeNearest")
def resize_nearest_onnx(c):
    """ONNX Resize, nearest, asymmetric coordinates, floor: source index floor(i / scale) clamped,
    output size floor(n * scale), as Caffe2 (the scales given, not sizes: ONNX Runtime would map
    through out/in instead)."""
    hs, ws = float(c.arg("height_scale", 1.0)), float(c.arg("width_scale", 1.0))
    scales = c.const(np.array([1.0, 1.0, hs, ws], np.float32), "scales")
    if c.n_in > 1:  # NOTE: [height_scale, width_scale] read at run time, as Caffe2 reads its input
        hw = c.emit("Slice", [c.emit("Reshape", [c.emit("Cast", [c.x(1)], to=1), c.ints([-1])]), c.ints([0]), c.ints([2])])
        scales = c.emit("Concat", [c.const(np.ones(2, np.float32), "ones"), hw], axis=0)
    r = c.rank(0)
    y = c.y_nchw(0)
    c.emit("Resize", [c.x_nchw(0), "", scales], [y], mode="nearest",
           coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    c.done_nchw(0, y, r)


@onnx_converter("NCHW2NHWC", "NHWC2NCHW")
def layout_onnx(c):
    r = c.rank(0)
    perm = [0, *range(2, r), 1] if c.op.type == "NCHW2NHWC" else [0, r - 1, *range(1, r - 1)]
    c.emit("Transpose", [c.x(0)], [c.y(0)], perm=perm)


@onnx_converter("Shape")
def shape_onnx(c):
    axes = c.arg("axes")
    if not axes:
        return c.emit("Shape", [c.x(0)], [c.y(0)])
    c.emit("Gather", [c.shape_of(c.x(0)), c.ints(axes)], [c.y(0)])


@onnx_converter("Size")
def size_onnx(c):
    c.emit("Size", [c.x(0)], [c.y(0)])


@onnx_converter("Tile")
def tile_onnx(c):
    tiles, axis = c.arg("tiles", 1), c.arg("axis")
    if c.n_in > 1:
        tiles = _onnx_ints(c, 1, "tiles")[0]
    if c.n_in > 2:
        axis = _onnx_ints(c, 2, "axis")[0]
    if axis is None:
        raise c.refuse("no axis")
    reps = [1] * c.rank(0)
    reps[axis % c.rank(0)] = tiles
    c.emit("Tile", [c.x(0), c.ints(reps)], [c.y(0)])


@onnx_converter("MergeDim")
def merge_dim_onnx(c):
    c.emit("Reshape", [c.x(0), c.ints([-1, *c.shape(0)[2:]])], [c.y(0)])


@onnx_converter("PrependDim")
def prepend_dim_onnx(c):
    k = int(c.arg("dim_size", 0))
    c.emit("Reshape", [c.x(0), c.ints([k, c.shape(0)[0] // max(k, 1), *c.shape(0)[1:]])], [c.y(0)])


@onnx_converter("Expand")
def expand_onnx(c):
    """Bidirectional broadcast to the shape input, a negative dim read as its absolute value (-1: keep)."""
    c.emit("Expand", [c.x(0), c.ints([abs(d) for d in _onnx_ints(c, 1, "the shape")])], [c.y(0)])


@onnx_converter("NumpyTile")
def numpy_tile_onnx(c):
    c.emit("Tile", [c.x(0), c.ints(_onnx_ints(c, 1, "the repeats"))], [c.y(0)])


@onnx_converter("TopK")
def top_k_onnx(c):
    """ONNX TopK (largest, sorted; equal values keep the lower index first, as Caffe2's order); the
    optional third output, indices into the flattened X, is refused, as is k beyond the axis size."""
    if c.n_out > 2:
        raise c.refuse("the flattened-indices output")
    k = _onnx_ints(c, 1, "k")[0] if c.n_in > 1 else int(c.arg("k", -1))
    if c.arg("axis", -1) == -1 and (c.info(0).shape is None or not isinstance(c.info(0).shape[-1], int)):
        return _top_k_last_axis_at_run_time(c, k)
    axis = c.arg("axis", -1) % c.rank(0)
    if not 0 < k <= c.shape(0)[axis]:
        raise c.refuse(f"k {k} outside 1..{c.shape(0)[axis]} (Caffe2 pads with 0 / -1)")
    c.emit("TopK", [c.x(0), c.ints([k])], [c.y(0), c.y(1) if c.n_out > 1 else c.tmp("indices")], axis=axis,
           largest=1, sorted=1)


def _top_k_last_axis_at_run_time(c, k):
    """TopK over the last axis of an X whose size there is known only at run time (a step net's
    slice): ONNX TopK of min(k, size), then Caffe2's padding of the missing places (value 0,
    index -1) with a run-time Pad at the end of the last axis."""
    if k < 1:
        raise c.refuse(f"k {k} (Caffe2 asks for k >= 1)")
    shape = c.shape_of(c.x(0))
    size = c.emit("Slice", [shape, c.ints([-1]), c.ints([np.iinfo(np.int64).max])])
    kk = c.emit("Min", [size, c.ints([k])])
    vals, idx = c.emit("TopK", [c.x(0), kk], 2, axis=-1, largest=1, sorted=1)
    lead = c.emit("ConstantOfShape", [c.emit("Sub", [c.emit("Mul", [c.emit("Size", [shape]), c.ints([2])]),
                                                     c.ints([1])])], value=c.tensor(np.array([0], np.int64)))
    pads = c.emit("Concat", [lead, c.emit("Sub", [c.ints([k]), kk])], axis=0)
    c.emit("Pad", [vals, pads, c.const(np.array(0, c.np_dtype(0)), "zero")], [c.y(0)])
    if c.n_out > 1:
        c.emit("Pad", [idx, pads, c.const(np.array(-1, np.int64), "minus_one")], [c.y(1)])
    if c.info(0).shape is not None:  # NOTE: the outputs' last dim is k whatever X's size there
        out = (*c.info(0).shape[:-1], k)
        for j, dtype in enumerate((c.info(0).dtype, INT64)[:c.n_out]):
            c.known_info(j, TensorInfo(out, dtype))
