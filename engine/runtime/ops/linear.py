"""Dense products and row-wise distances: FC, FCTransposed, MatMul, BatchMatMul (1-D operands too), DotProduct,
DotProductWithPadding, CosineSimilarity, L1Distance, ElementwiseLinear, TT, ConcatBatchMatMulBatchGatherOp."""
from __future__ import annotations

import numpy as np

from engine.runtime import parallel
from engine.runtime.grad_makers import GradientMakerError, cc_maker, gradient_not_implemented_yet, simple
from engine.catalogue.registry import gradient, kernel
from engine.catalogue.registry import shape
from math import prod
from engine.errors import ShapeError
from engine.runtime.shapes import (UNKNOWN, TensorInfo, broadcast as broadcast_dims, dim_op, dims, merge, norm_axis,
                           same_as)

# ---- kernels ----

def _flat(a, axis):
    """`a` as 2-D, split at `axis` (Caffe2's canonical-axis flattening)."""
    axis %= max(a.ndim, 1)
    return a.reshape(int(np.prod(a.shape[:axis])), int(np.prod(a.shape[axis:])))  # NOTE: no -1: N may be 0


def _fc_operands(x, w, axis, axis_w, transposed):
    """X and W flattened to 2-D, checked in FC's terms (NumPy's matmul would say "gufunc signature …")."""
    x2, w2 = _flat(x, axis), _flat(w, axis_w)
    wk = w2.shape[0] if transposed else w2.shape[1]
    if x2.shape[1] != wk:
        raise ShapeError(f"X has {x2.shape[1]} columns (flattened at axis {axis}) but W has {wk} "
                         f"(flattened at axis_w {axis_w})")
    return x2, w2


@kernel("FC")
def fc(xp, x, w, b=None, *, axis: int = 1, axis_w: int = 1):
    x2, w2 = _fc_operands(x, w, axis, axis_w, False)
    y = parallel.gemm(x2, w2.T)  # NOTE: no OpenBLAS worker left spinning (parallel.gemm)
    if b is not None:
        y += b
    return y.reshape(x.shape[:axis % x.ndim] + (y.shape[1],))


@kernel("FCTransposed")
def fc_transposed(xp, x, w, b=None, *, axis: int = 1, axis_w: int = 1):
    # NOTE: W is stored (K, N) here, not (N, K).
    x2, w2 = _fc_operands(x, w, axis, axis_w, True)
    y = parallel.gemm(x2, w2)
    if b is not None:
        y += b
    return y.reshape(x.shape[:axis % x.ndim] + (y.shape[1],))


def _fc_grad(xp, x, w, dy, axis, axis_w, transposed, n_out):
    x2, w2 = _flat(x, axis), _flat(w, axis_w)
    dy2 = dy.reshape(x2.shape[0], dy.shape[-1])  # NOTE: not -1, N may be 0
    dw = parallel.gemm(x2.T, dy2) if transposed else parallel.gemm(dy2.T, x2)
    res = (dw.reshape(w.shape), dy2.sum(axis=0))
    if n_out > 2:
        res += (parallel.gemm(dy2, w2.T if transposed else w2).reshape(x.shape),)
    return res


@kernel("FCGradient", needs_context=True)
def fc_gradient(xp, x, w, dy, *, ctx, axis: int = 1, axis_w: int = 1):
    # NOTE: outputs are ordered [dW, db, dX]; dX only when a third output is declared.
    return _fc_grad(xp, x, w, dy, axis, axis_w, False, len(ctx.op.output))


@kernel("FCTransposedGradient", needs_context=True)
def fc_transposed_gradient(xp, x, w, dy, *, ctx, axis: int = 1, axis_w: int = 1):
    return _fc_grad(xp, x, w, dy, axis, axis_w, True, len(ctx.op.output))


@kernel("MatMul")
def matmul(xp, a, b, *_shape_like, axis_a: int = 1, axis_b: int = 1, trans_a: int = 0, trans_b: int = 0):
    # NOTE: the optional 3rd input (gradient ops) only tells the output shape: that of the 3rd input.
    a2, b2 = _flat(a, axis_a), _flat(b, axis_b)
    y = (a2.T if trans_a else a2) @ (b2.T if trans_b else b2)
    return y.reshape(_shape_like[0].shape) if _shape_like else y


@kernel("BatchMatMul")
def batch_matmul(xp, a, b, *, trans_a: int = 0, trans_b: int = 0, broadcast: int = 0):
    # NOTE: numpy's 1-D rules (a 1-D operand gets a dim that is dropped again), but 1-D x 1-D gives
    # shape (1,), not a scalar; trans_* apply only to operands with at least 2 dims.
    if not broadcast and a.ndim > 2 and b.ndim > 2 and a.shape[:-2] != b.shape[:-2]:
        raise ValueError(f"batch dims {a.shape[:-2]} and {b.shape[:-2]} differ (broadcast=0)")
    a = xp.swapaxes(a, -1, -2) if trans_a and a.ndim > 1 else a
    b = xp.swapaxes(b, -1, -2) if trans_b and b.ndim > 1 else b
    y = xp.matmul(a, b)
    return y.reshape(1) if y.ndim == 0 else y


def _rows2(x, keep_rows: bool = False):
    """(N, D) view of a 1-D or 2-D (or higher) tensor: rows are the first dim, 1-D is N rows of 1.

    NOTE: an empty tensor is (0, 0) for DotProduct (Caffe2 takes N = 0 when X has no values), but
    CosineSimilarity and L1Distance keep its N rows (`keep_rows`): (4, 0) gives 4 results."""
    if x.size == 0 and not keep_rows:
        return x.reshape(0, 0)
    return x.reshape(x.shape[0] if x.ndim else 1, int(np.prod(x.shape[1:])))


def _same_shape(x, y, what):
    if x.shape != y.shape:
        raise ValueError(f"{what}: X {x.shape} and Y {y.shape} must have one shape")


@kernel("DotProduct")
def dot_product(xp, x, y):
    # NOTE: a 1-D input is N rows of one element: Z = X * Y elementwise.
    _same_shape(x, y, "DotProduct")
    return (_rows2(x) * _rows2(y)).sum(axis=1).astype(x.dtype, copy=False)


@kernel("DotProductGradient")
def dot_product_gradient(xp, x, y, dz):
    g = dz.reshape((-1,) + (1,) * (x.ndim - 1))
    return (g * y).astype(x.dtype, copy=False), (g * x).astype(x.dtype, copy=False)


def _pad_split(x, y):
    """Rows of X and Y, and which is longer: (x2, y2, x_longer)."""
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"DotProductWithPadding: X and Y have {x.shape[0]} and {y.shape[0]} rows")
    x2, y2 = _rows2(x, keep_rows=True), _rows2(y, keep_rows=True)
    return x2, y2, x2.shape[1] > y2.shape[1]


@kernel("DotProductWithPadding")
def dot_product_with_padding(xp, x, y, *, pad_value: float = 0.0, replicate: int = 0):
    # NOTE: the shorter row is padded with pad_value, or (replicate) repeated to the longer length.
    if x.size == 0:  # NOTE: Caffe2 takes N = 0 when X has no values, whatever its first dim
        return xp.zeros(0, x.dtype)
    x2, y2, x_long = _pad_split(x, y)
    lo, sh = (x2, y2) if x_long else (y2, x2)
    if replicate:
        reps = lo.shape[1] // max(sh.shape[1], 1)
        z = (lo[:, :reps * sh.shape[1]].reshape(lo.shape[0], reps, sh.shape[1]) * sh[:, None, :]).sum(axis=(1, 2))
    else:
        d = sh.shape[1]
        z = (lo[:, :d] * sh).sum(axis=1) + lo[:, d:].sum(axis=1) * x.dtype.type(pad_value)
    return z.astype(x.dtype, copy=False)


@kernel("DotProductWithPaddingGradient")
def dot_product_with_padding_gradient(xp, x, y, dz, *, pad_value: float = 0.0, replicate: int = 0):
    x2, y2, x_long = _pad_split(x, y)
    lo, sh = (x2, y2) if x_long else (y2, x2)
    g = dz.reshape(-1, 1)
    if replicate:
        reps = lo.shape[1] // max(sh.shape[1], 1)
        d_lo = xp.zeros_like(lo)
        d_lo[:, :reps * sh.shape[1]] = xp.tile(sh, (1, reps)) * g
        d_sh = lo[:, :reps * sh.shape[1]].reshape(lo.shape[0], reps, -1).sum(axis=1) * g
    else:
        d = sh.shape[1]
        d_lo = xp.concatenate([sh * g, xp.broadcast_to(g * x.dtype.type(pad_value), (lo.shape[0], lo.shape[1] - d))],
                              axis=1)
        d_sh = lo[:, :d] * g
    dx, dy = (d_lo, d_sh) if x_long else (d_sh, d_lo)
    return dx.reshape(x.shape).astype(x.dtype), dy.reshape(y.shape).astype(y.dtype)


_COS_EPS = 1e-12  # Caffe2 clips both squared norms below at this


@kernel("CosineSimilarity")
def cosine_similarity(xp, x, y):
    _same_shape(x, y, "CosineSimilarity")
    x2, y2 = _rows2(x, keep_rows=True), _rows2(y, keep_rows=True)
    xx, yy = xp.maximum((x2 * x2).sum(axis=1), _COS_EPS), xp.maximum((y2 * y2).sum(axis=1), _COS_EPS)
    return ((x2 * y2).sum(axis=1) / xp.sqrt(xx * yy)).astype(x.dtype, copy=False)


@kernel("CosineSimilarityGradient")
def cosine_similarity_gradient(xp, x, y, dz):
    x2, y2 = _rows2(x), _rows2(y)
    xn = xp.sqrt(xp.maximum((x2 * x2).sum(axis=1, keepdims=True), _COS_EPS))
    yn = xp.sqrt(xp.maximum((y2 * y2).sum(axis=1, keepdims=True), _COS_EPS))
    xy, g = (x2 * y2).sum(axis=1, keepdims=True), dz.reshape(-1, 1)
    dx = g / (xn * yn) * y2 - g * xy / (xn * xn * xn * yn) * x2
    dy = g / (xn * yn) * x2 - g * xy / (yn * yn * xn * yn) * y2
    return dx.reshape(x.shape).astype(x.dtype), dy.reshape(y.shape).astype(y.dtype)


@kernel("L1Distance")
def l1_distance(xp, x, y):
    _same_shape(x, y, "L1Distance")
    return xp.abs(_rows2(x, keep_rows=True) - _rows2(y, keep_rows=True)).sum(axis=1).astype(x.dtype, copy=False)


@kernel("L1DistanceGradient")
def l1_distance_gradient(xp, x, y, dz):
    # NOTE: differences within 1e-12 of 0 get no gradient.
    diff = _rows2(x) - _rows2(y)
    s = ((diff > 1e-12).astype(x.dtype) - (diff < -1e-12).astype(x.dtype)) * dz.reshape(-1, 1)
    return s.reshape(x.shape), (-s).reshape(y.shape)


def _elementwise_linear_rows(x, w, axis):
    a = axis % max(x.ndim, 1)
    x2 = x.reshape(int(np.prod(x.shape[:a])), int(np.prod(x.shape[a:])))  # NOTE: no -1: N may be 0
    if w.size != x2.shape[1]:
        raise ValueError(f"ElementwiseLinear: w has {w.size} entries, X has {x2.shape[1]} per row at axis {axis}")
    return x2


@kernel("ElementwiseLinear")
def elementwise_linear(xp, x, w, b, *, axis: int = 1):
    x2 = _elementwise_linear_rows(x, w, axis)
    return (x2 * w.reshape(1, -1) + b.reshape(1, -1)).reshape(x.shape).astype(x.dtype, copy=False)


@kernel("ElementwiseLinearGradient")
def elementwise_linear_gradient(xp, dy, x, w, *, axis: int = 1):
    x2 = _elementwise_linear_rows(x, w, axis)
    dy2 = dy.reshape(x2.shape)
    return ((dy2 * w.reshape(1, -1)).reshape(x.shape).astype(x.dtype), (dy2 * x2).sum(axis=0).astype(x.dtype),
            dy2.sum(axis=0).astype(x.dtype))


@kernel("TT")
def tt(xp, x, b, cores, *, inp_sizes: list = (), out_sizes: list = (), tt_ranks: list = ()):
    # NOTE: tensor-train layer, core by core from the last, with Caffe2's (column-major) reorderings.
    if x.ndim < 2 or b.ndim != 1 or cores.ndim != 1 or len(inp_sizes) != len(out_sizes):
        raise ValueError("TT: X needs >= 2 dims, b and cores 1 dim, inp_sizes and out_sizes one length")
    batch, buf, at = x.shape[0], x.reshape(-1), 0
    for i in reversed(range(len(inp_sizes))):
        rows, cols = inp_sizes[i] * tt_ranks[i + 1], tt_ranks[i] * out_sizes[i]
        if buf.size % rows or at + rows * cols > cores.size:
            raise ValueError(f"TT: core {i} ({rows}x{cols}) does not fit the input or the cores")
        y = buf.reshape(-1, rows) @ cores[at:at + rows * cols].reshape(rows, cols)
        buf = y.reshape(-1, out_sizes[i]).T.reshape(-1)
        at += rows * cols
    y = buf.reshape(batch, -1).T.reshape(batch, -1)
    if y.shape[1] != int(np.prod(out_sizes)):
        raise ValueError(f"TT: output has {y.shape[1]} columns, out_sizes give {int(np.prod(out_sizes))}")
    return (y + b.reshape(1, -1)).astype(x.dtype, copy=False)


@kernel("TTLinearGradient")
def tt_linear_gradient(xp, *_inputs):
    # NOTE: Caffe2 1.10.2 registers TTLinearGradient as an unfinished stub whose run always fails, whatever
    # its inputs (TT itself is GRADIENT_NOT_IMPLEMENTED_YET, so no maker emits it); netviz fails the same way.
    raise ValueError("TTLinearGradient is not implemented in Caffe2 1.10.2 (its kernel is a stub that always "
                     "fails); TT has no gradient")


@kernel("ConcatBatchMatMulBatchGatherOp")
def concat_bmm_batch_gather(xp, indices, *xs):
    # NOTE: per batch row b: S = rows X_i[b] stacked (n x embed), G = S S^T, out[b] = G.flat[indices].
    if indices.dtype != np.int32 or any(x.dtype != np.float32 for x in xs):
        raise TypeError("ConcatBatchMatMulBatchGatherOp takes int32 indices and float32 inputs")
    s = xp.stack([x.reshape(x.shape[0], -1) for x in xs], axis=1)
    g = xp.matmul(s, xp.swapaxes(s, 1, 2)).reshape(s.shape[0], -1)
    return g[:, indices.reshape(-1)].reshape((s.shape[0],) + indices.shape)


# ---- gradients ----
gradient("FC", "FCTransposed")(simple("{T}Gradient", "I0 I1 GO0", "GI1 GI2 GI0"))  # NOTE: dW, db, dX.

# MatMul: (transA, transB) -> (dA inputs, dA args, dB inputs, dB args).
# NOTE: Caffe2 1.10.2 always passes axis_a/axis_b = 1, whatever the forward op's axes.
_MATMUL = {(0, 0): ("G I1 I0", dict(trans_b=1, axis_b="b"), "I0 G I1", dict(trans_a=1, axis_a="a")),
           (0, 1): ("G I1 I0", dict(axis_b="b"), "G I0 I1", dict(trans_a=1, axis_b="a")),
           (1, 0): ("I1 G I0", dict(trans_b=1, axis_a="b"), "I0 G I1", dict(axis_a="a")),
           (1, 1): ("I1 G I0", dict(trans_a=1, trans_b=1, axis_a="b"), "G I0 I1", dict(trans_a=1, trans_b=1, axis_b="a"))}
_BATCH_MATMUL = {(0, 0): ("G I1", dict(trans_b=1), "I0 G", dict(trans_a=1)),
                 (0, 1): ("G I1", {}, "G I0", dict(trans_a=1)),
                 (1, 0): ("I1 G", dict(trans_b=1), "I0 G", {}),
                 (1, 1): ("I1 G", dict(trans_a=1, trans_b=1), "G I0", dict(trans_a=1, trans_b=1))}


def _matmul_maker(table):
    def make(g):
        if g.type == "BatchMatMul" and g.arg("broadcast", 0):
            raise GradientMakerError("Gradient is currently not supported with broadcast=1 for BatchMatMul.")
        a_ins, a_args, b_ins, b_args = table[(int(bool(g.arg("trans_a", 0))), int(bool(g.arg("trans_b", 0))))]
        ref = {"G": g.GO(0), "I0": g.I(0), "I1": g.I(1), "a": 1, "b": 1}
        return [g.op_(g.type, [ref[t] for t in a_ins.split()], [g.GI(0)], **{k: ref.get(v, v) for k, v in a_args.items()}),
                g.op_(g.type, [ref[t] for t in b_ins.split()], [g.GI(1)], **{k: ref.get(v, v) for k, v in b_args.items()})]
    return cc_maker(make, copy_args=False)


gradient("MatMul")(_matmul_maker(_MATMUL))
gradient("BatchMatMul")(_matmul_maker(_BATCH_MATMUL))
gradient("DotProduct", "CosineSimilarity", "L1Distance")(simple("{T}Gradient", "I0 I1 GO0", "GI0 GI1"))
gradient("ElementwiseLinear")(simple("ElementwiseLinearGradient", "GO0 I0 I1", "GI0 GI1 GI2"))
gradient_not_implemented_yet("TT")


@gradient("DotProductWithPadding")
@cc_maker
def dot_product_with_padding_gradient_maker(g):
    """The maker writes pad_value and replicate itself, then the forward args follow."""
    return [g.op_("DotProductWithPaddingGradient", [g.I(0), g.I(1), g.GO(0)], [g.GI(0), g.GI(1)],
                  pad_value=float(g.arg("pad_value", 0.0)), replicate=int(bool(g.arg("replicate", 0))))]


# ---- shapes ----

def _flat2(d, axis):
    """``(prod(d[:axis]), prod(d[axis:]))`` with unknown dims."""
    axis = norm_axis(axis, len(d) + 1) if axis != len(d) else axis
    return dim_op(lambda *v: prod(v), *d[:axis]), dim_op(lambda *v: prod(v), *d[axis:])


def _fc(x, w, b, axis, axis_w, transposed):
    xd, wd = dims(x), w.shape
    axis = norm_axis(axis, len(xd))
    k = _flat2(xd, axis)[1]
    if wd is None:
        n = b.shape[0] if b is not None and b.shape else None
    else:
        n, wk = _flat2(wd, axis_w)
        n, wk = (wk, n) if transposed else (n, wk)
        if None not in (k, wk) and k != wk:
            raise ShapeError(f"X has {k} features per row, W expects {wk}")
    return TensorInfo((*xd[:axis], n), x.dtype)


@shape("FC")
def fc_shape(x, w, b=None, *, axis: int = 1, axis_w: int = 1):
    return _fc(x, w, b, axis, axis_w, False)


@shape("FCTransposed")
def fc_transposed_shape(x, w, b=None, *, axis: int = 1, axis_w: int = 1):
    return _fc(x, w, b, axis, axis_w, True)


@shape("FCGradient", "FCTransposedGradient")
def fc_gradient_shape(x, w, dy, *, axis_w: int = 1, n_out):
    # NOTE: outputs dW, db, then dX when asked for; db has one entry per output feature.
    db = TensorInfo((dy.shape[-1],), w.dtype) if dy.shape is not None and dy.shape else UNKNOWN
    return w, db, x


@shape("MatMul")
def matmul_shape(a, b, *_, axis_a: int = 1, axis_b: int = 1, trans_a: int = 0, trans_b: int = 0):
    m, k = _flat2(dims(a), axis_a)
    k2, n = _flat2(dims(b), axis_b)
    (m, k), (k2, n) = ((k, m) if trans_a else (m, k)), ((n, k2) if trans_b else (k2, n))
    if None not in (k, k2) and k != k2:
        raise ShapeError(f"inner dims {k} and {k2} differ")
    return TensorInfo((m, n), a.dtype)


@shape("BatchMatMul")
def batch_matmul_shape(a, b, *, trans_a: int = 0, trans_b: int = 0, broadcast: int = 0):
    # NOTE: a 1-D operand gets a dim that is dropped again (numpy), 1-D x 1-D gives (1,).
    ad, bd = dims(a), dims(b)
    if len(ad) == 1 and len(bd) == 1:
        if None not in (ad[0], bd[0]) and ad[0] != bd[0]:
            raise ShapeError(f"inner dims {ad[0]} and {bd[0]} differ")
        return TensorInfo((1,), a.dtype)
    a2 = (1, *ad) if len(ad) == 1 else ad
    b2 = (*bd, 1) if len(bd) == 1 else bd
    m, k = a2[-2:][::-1] if trans_a and len(ad) > 1 else a2[-2:]
    k2, n = b2[-2:][::-1] if trans_b and len(bd) > 1 else b2[-2:]
    if None not in (k, k2) and k != k2:
        raise ShapeError(f"inner dims {k} and {k2} differ")
    batch = broadcast_dims(a2[:-2], b2[:-2]) if broadcast or len(ad) < 3 or len(bd) < 3 else merge(a2[:-2], b2[:-2])
    return TensorInfo((*batch, *((m,) if len(ad) > 1 else ()), *((n,) if len(bd) > 1 else ())), a.dtype)


@shape("DotProduct", "DotProductWithPadding", "CosineSimilarity", "L1Distance")
def row_reduction_shape(x, y, **_):
    xd = dims(x)
    return TensorInfo((xd[0] if xd else 1,), x.dtype)


shape("DotProductGradient", "DotProductWithPaddingGradient", "CosineSimilarityGradient", "L1DistanceGradient")(
    same_as(0, 1))
shape("ElementwiseLinear")(same_as(0))
shape("ElementwiseLinearGradient")(same_as(1, 2, 2))  # [dY, X, w] -> dX, dw, db


@shape("TT")
def tt_shape(x, b, cores, *, inp_sizes: list = (), out_sizes: list = (), tt_ranks: list = ()):
    return TensorInfo((dims(x)[0], prod(out_sizes)), x.dtype)


@shape("ConcatBatchMatMulBatchGatherOp")
def concat_bmm_batch_gather_shape(indices, x0, *xs):
    return TensorInfo((dims(x0)[0], *dims(indices)), x0.dtype)


# ---- onnx ----
from engine.catalogue.registry import onnx_converter  # noqa: E402


@onnx_converter("FC", "FCTransposed")
def fc_onnx(c):
    """Gemm on Caffe2's 2-D views: X flattened at `axis`, W at `axis_w` (N x K; FCTransposed K x N),
    and the result reshaped to X's leading dims + N when `axis` is not 1."""
    r = c.rank(0)
    axis, axis_w = c.arg("axis", 1) % r, c.arg("axis_w", 1) % c.rank(1)
    w = c.rows(c.x(1), axis_w, c.rank(1))
    transposed = c.op.type == "FCTransposed"
    n = int(np.prod(c.shape(1)[axis_w:] if transposed else c.shape(1)[:axis_w]))
    ins = [c.rows(c.x(0), axis, r), w] + ([c.x(2)] if c.n_in > 2 else [])
    if axis == 1:
        return c.emit("Gemm", ins, [c.y(0)], transB=0 if transposed else 1)
    y2 = c.emit("Gemm", ins, transB=0 if transposed else 1)
    head = c.emit("Slice", [c.shape_of(c.x(0)), c.ints([0]), c.ints([axis])])
    c.emit("Reshape", [y2, c.emit("Concat", [head, c.ints([n])], axis=0)], [c.y(0)])


@onnx_converter("MatMul")
def matmul_onnx(c):
    """Caffe2's MatMul is 2-D on the views split at axis_a / axis_b, optionally transposed."""
    if c.n_in > 2:
        raise c.refuse("the shape-like third input (a gradient op's form)")
    a = c.rows(c.x(0), c.arg("axis_a", 1) % c.rank(0), c.rank(0))
    b = c.rows(c.x(1), c.arg("axis_b", 1) % c.rank(1), c.rank(1))
    c.emit("Gemm", [a, b], [c.y(0)], transA=int(c.arg("trans_a", 0)), transB=int(c.arg("trans_b", 0)))


@onnx_converter("BatchMatMul")
def batch_matmul_onnx(c):
    """numpy matmul, trans_* swapping the last two dims; 1-D x 1-D gives (1,) in Caffe2."""
    ra, rb = c.rank(0), c.rank(1)
    if ra < 2 and rb < 2:
        raise c.refuse("1-D x 1-D (Caffe2 gives shape (1,), ONNX a scalar)")
    if not c.arg("broadcast", 0) and ra > 2 and rb > 2 and c.shape(0)[:-2] != c.shape(1)[:-2]:
        raise c.refuse("batch dims differ without broadcast (Caffe2 refuses it)")

    def side(i, r, flag):
        return c.emit("Transpose", [c.x(i)], perm=[*range(r - 2), r - 1, r - 2]) if c.arg(flag, 0) and r > 1 else c.x(i)
    c.emit("MatMul", [side(0, ra, "trans_a"), side(1, rb, "trans_b")], [c.y(0)])


@onnx_converter("ElementwiseLinear")
def elementwise_linear_onnx(c):
    """Y = X * w + b on the 2-D view split at `axis` (w, b one value per column)."""
    r = c.rank(0)
    x2 = c.rows(c.x(0), c.arg("axis", 1) % r, r)
    y2 = c.emit("Add", [c.emit("Mul", [x2, c.x(1)]), c.x(2)])
    c.emit("Reshape", [y2, c.shape_of(c.x(0))], [c.y(0)])


@onnx_converter("DotProduct")
def dot_product_onnx(c):
    """Row-wise dot products of equal-shaped X and Y (a 1-D input: N rows of one element)."""
    prod = c.emit("Mul", [c.x(0), c.x(1)])
    if c.rank(0) == 1:
        return c.emit("Identity", [prod], [c.y(0)])
    c.reduce("ReduceSum", c.emit("Flatten", [prod], axis=1), [1], 0, [c.y(0)])


@onnx_converter("L1Distance")
def l1_distance_onnx(c):
    """Row sums of |X - Y| (a 1-D input: N rows of one element)."""
    d = c.emit("Abs", [c.emit("Sub", [c.x(0), c.x(1)])])
    if c.rank(0) == 1:
        return c.emit("Identity", [d], [c.y(0)])
    c.reduce("ReduceSum", c.emit("Flatten", [d], axis=1), [1], 0, [c.y(0)])
