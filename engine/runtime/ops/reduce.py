"""Reductions and statistics: ReduceSum/Mean/Max/Min/L1/L2, ReduceFront/Back{Sum,Mean,Max} (with lengths),
Colwise/RowwiseMax, SumElements(Int), SumInt, ArgMax/ArgMin, Moments, BatchMoments, LpNorm, Normalize(L1),
Summarize."""
from __future__ import annotations

import numpy as np

from engine.runtime import device as dev
from engine.runtime.grad_makers import cc_maker, should_not_do_gradient, simple
from engine.catalogue.registry import gradient, kernel
from engine.catalogue.registry import shape
from engine.runtime.shapes import INT64, TensorInfo, dims, norm_axis, same_as, split_layout

# ---- kernels ----

def _axes(x, axes):
    return tuple(range(x.ndim)) if axes is None else tuple(a % x.ndim for a in axes)


def _reducer(method):
    def run(xp, x, *, axes: list | None = None, keepdims: int = 1):
        return getattr(x, method)(axis=_axes(x, axes), keepdims=bool(keepdims)).astype(x.dtype, copy=False)
    return run


for _t, _m in {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min"}.items():
    kernel(_t)(_reducer(_m))


def _expand(dy, x, axes):
    return dy.reshape([1 if i in axes else n for i, n in enumerate(x.shape)])


@kernel("ReduceSumGradient")
def reduce_sum_gradient(xp, dy, x, y, *, axes: list | None = None, keepdims: int = 1):
    ax = _axes(x, axes)
    return xp.broadcast_to(_expand(dy, x, ax), x.shape).copy()


@kernel("ReduceMeanGradient")
def reduce_mean_gradient(xp, dy, x, y, *, axes: list | None = None, keepdims: int = 1):
    ax = _axes(x, axes)
    n = int(np.prod([x.shape[a] for a in ax]))
    return (xp.broadcast_to(_expand(dy, x, ax), x.shape) / x.dtype.type(n)).astype(x.dtype)


@kernel("ReduceMaxGradient", "ReduceMinGradient")
def reduce_max_gradient(xp, dy, x, y, *, axes: list | None = None, keepdims: int = 1):
    # NOTE: every element equal to the extremum gets the gradient (Caffe2's CPU kernel does the same).
    ax = _axes(x, axes)
    return (_expand(dy, x, ax) * (x == _expand(y, x, ax))).astype(x.dtype)


def _dims2(shape, num, front):
    """(kept, reduced) sizes: ReduceFront* reduce the first `num` dims, ReduceBack* the last."""
    k = num if front else len(shape) - num
    a, b = int(np.prod(shape[:k])), int(np.prod(shape[k:]))
    return (b, a) if front else (a, b)


def _rows(x, num, front):
    """`x` as (kept, reduced) 2-D (no -1: sizes may be 0)."""
    kept, red = _dims2(x.shape, num, front)
    return x.reshape(red, kept).T if front else x.reshape(kept, red)


def _lengths_mask(xp, kept, red, lengths):
    """Which of each kept row's reduced entries count: the first lengths[row] (all without lengths)."""
    if lengths is None:
        return None
    if lengths.size != kept:
        raise ValueError(f"lengths has {lengths.size} entries, expected one per kept row ({kept})")
    return xp.arange(red) < lengths.reshape(-1, 1)


def _front_back(kind, front):
    def run(xp, x, lengths=None, *, num_reduce_dim: int = 1):
        if lengths is not None and num_reduce_dim != 1:
            raise ValueError(f"with a lengths input num_reduce_dim must be 1, got {num_reduce_dim}")
        x2 = _rows(x, num_reduce_dim, front)
        mask = _lengths_mask(xp, *x2.shape, lengths)
        out_shape = x.shape[num_reduce_dim:] if front else x.shape[:x.ndim - num_reduce_dim]
        if x2.shape[1] == 0:  # NOTE: Caffe2 gives 0 for an empty reduction (Max and Mean too, not -inf or NaN)
            return xp.zeros(out_shape, x.dtype)
        if kind == "Max":
            y = (x2 if mask is None else xp.where(mask, x2, x.dtype.type(-np.inf))).max(axis=1, initial=-np.inf)
        else:
            y = (x2 if mask is None else xp.where(mask, x2, 0)).sum(axis=1)
            if kind == "Mean":
                y = y / (x2.shape[1] if lengths is None else lengths.reshape(-1))
        return y.astype(x.dtype).reshape(out_shape)
    return run


def _front_back_grad(kind, front):
    # NOTE: [dY, X(, Y)(, lengths)]: Sum/Mean read X only for its shape and also take the shape itself
    # (a 1-D int64 tensor) in its place; Max reads X's values and Y.
    def run(xp, dy, x, *rest, num_reduce_dim: int = 1):
        y, lengths = (rest[0], rest[1] if len(rest) > 1 else None) if kind == "Max" else \
            (None, rest[0] if rest else None)
        as_shape = kind != "Max" and x.ndim == 1 and x.dtype == np.int64
        shape = tuple(int(v) for v in dev.to_host(x)) if as_shape else x.shape
        kept, red = _dims2(shape, num_reduce_dim, front)
        mask = _lengths_mask(xp, kept, red, lengths)
        g = dy.reshape(kept, 1)
        if kind == "Mean":
            g = g / (red if lengths is None else lengths.reshape(-1, 1))
        if kind == "Max":
            x2 = _rows(x, num_reduce_dim, front)
            mask = (x2 == y.reshape(-1, 1)) if mask is None else mask & (x2 == y.reshape(-1, 1))
        d2 = xp.broadcast_to(g, (kept, red)) if mask is None else xp.where(mask, g, 0)
        return xp.ascontiguousarray((d2.T if front else d2).astype(dy.dtype)).reshape(shape)
    return run


for _k in ("Sum", "Mean", "Max"):
    for _front in (True, False):
        _t = f"Reduce{'Front' if _front else 'Back'}{_k}"
        kernel(_t)(_front_back(_k, _front))
        kernel(_t + "Gradient")(_front_back_grad(_k, _front))


@kernel("ReduceL1")
def reduce_l1(xp, x, *, axes: list | None = None, keepdims: int = 1):
    return xp.abs(x).sum(axis=_axes(x, axes), keepdims=bool(keepdims)).astype(x.dtype, copy=False)


@kernel("ReduceL2")
def reduce_l2(xp, x, *, axes: list | None = None, keepdims: int = 1):
    return xp.sqrt((x * x).sum(axis=_axes(x, axes), keepdims=bool(keepdims))).astype(x.dtype, copy=False)


@kernel("ReduceL1Gradient")
def reduce_l1_gradient(xp, dy, x, y, *, axes: list | None = None, keepdims: int = 1):
    return (_expand(dy, x, _axes(x, axes)) * xp.sign(x)).astype(x.dtype)


@kernel("ReduceL2Gradient")
def reduce_l2_gradient(xp, dy, x, y, *, axes: list | None = None, keepdims: int = 1):
    # NOTE: dX = dY * X / Y, and 0 where the norm Y is 0.
    ax = _axes(x, axes)
    yy = _expand(y, x, ax)
    return xp.where(yy == 0, 0, _expand(dy, x, ax) * x / xp.where(yy == 0, 1, yy)).astype(x.dtype)


@kernel("ColwiseMax")
def colwise_max(xp, x):
    return x.max(axis=1)  # (B, M, N) -> (B, N)


@kernel("RowwiseMax")
def rowwise_max(xp, x):
    return x.max(axis=2)  # (B, M, N) -> (B, M)


@kernel("ColwiseMaxGradient")
def colwise_max_gradient(xp, x, y, dy):
    return (xp.expand_dims(dy, 1) * (x == xp.expand_dims(y, 1))).astype(x.dtype)


@kernel("RowwiseMaxGradient")
def rowwise_max_gradient(xp, x, y, dy):
    return (xp.expand_dims(dy, 2) * (x == xp.expand_dims(y, 2))).astype(x.dtype)


@kernel("SumInt")
def sum_int(xp, *xs):
    if xs[0].dtype != np.int32:
        raise TypeError(f"SumInt takes int32 inputs, got {xs[0].dtype}")
    y = xs[0].copy()
    for x in xs[1:]:
        y += x
    return y


@kernel("SumElementsInt")
def sum_elements_int(xp, x):
    if x.dtype != np.int32:
        raise TypeError(f"SumElementsInt takes int32, got {x.dtype}")
    return xp.asarray(x.sum(), dtype=np.int32)  # a 0-d sum, as Caffe2 (checked on the oracle)


@kernel("Moments")
def moments(xp, x, *, axes: list | None = None, keepdims: int = 1):
    # NOTE: the variance is the biased one (divided by the count, not count - 1).
    ax = _axes(x, axes)
    if x.size == 0:  # NOTE: Caffe2's moments of nothing are 0, not NumPy's NaN
        m = v = xp.zeros(tuple(1 if i in ax else n for i, n in enumerate(x.shape)), x.dtype)
    else:
        m = x.mean(axis=ax, keepdims=True)
        v = xp.square(x - m).mean(axis=ax, keepdims=True)
    shape = tuple(n for i, n in enumerate(m.shape) if keepdims or i not in ax)
    return m.astype(x.dtype).reshape(shape), v.astype(x.dtype).reshape(shape)


@kernel("MomentsGradient")
def moments_gradient(xp, dmean, dvar, x, mean, *, axes: list | None = None, keepdims: int = 1):
    ax = _axes(x, axes)
    n = x.dtype.type(int(np.prod([x.shape[a] for a in ax])))
    dm, dv, m = (_expand(t, x, ax) for t in (dmean, dvar, mean))
    return ((dm + 2 * dv * (x - m)) / n).astype(x.dtype)


def _channels(x, order):
    return (0,) + tuple(range(2, x.ndim)) if order == "NCHW" else tuple(range(x.ndim - 1))


@kernel("BatchMoments")
def batch_moments(xp, x, *, order: str = "NCHW"):
    # NOTE: the 2nd output is the mean of X squared, E[X^2], not the variance.
    ax = _channels(x, order)
    count = x.dtype.type(x.size // max(x.shape[1 if order == "NCHW" else -1], 1) if x.ndim > 1 else x.size)
    with np.errstate(invalid="ignore"):  # NOTE: no values per channel: 0 / 0 = NaN, as in Caffe2
        return (x.sum(axis=ax) / count).astype(x.dtype), ((x * x).sum(axis=ax) / count).astype(x.dtype)


@kernel("BatchMomentsGradient")
def batch_moments_gradient(xp, dmu, dvar, x, *, order: str = "NCHW"):
    n = x.dtype.type(x.size // max(x.shape[1 if order == "NCHW" else -1], 1))
    bshape = [1] * x.ndim
    bshape[1 if order == "NCHW" else -1] = -1
    return ((dmu.reshape(bshape) + 2 * x * dvar.reshape(bshape)) / n).astype(x.dtype)


@kernel("LpNorm")
def lp_norm(xp, x, *, p: int = 2, average: int = 0):
    # NOTE: p = 2 gives the SUM OF SQUARES (no square root); shape (1,).
    if p not in (1, 2):
        raise ValueError(f"LpNorm: p must be 1 or 2, got {p}")
    if average and x.size == 0:
        raise ValueError("LpNorm with average needs a non-empty input (Caffe2 refuses size 0)")
    s = xp.abs(x).sum() if p == 1 else (x * x).sum()
    return (s / (x.size if average else 1)).astype(x.dtype).reshape(1)


@kernel("LpNormGradient")
def lp_norm_gradient(xp, x, dy, *, p: int = 2, average: int = 0):
    d = xp.sign(x) * dy.reshape(()) if p == 1 else 2 * x * dy.reshape(())
    return (d / (x.size if average else 1)).astype(x.dtype)


_NORMALIZE_EPS = 1e-12  # Caffe2's kEps: the norm is clipped below at this


@kernel("Normalize")
def normalize(xp, x, *, axis: int = -1):
    n = xp.sqrt((x * x).sum(axis=axis % x.ndim, keepdims=True))
    return (x / xp.maximum(n, x.dtype.type(_NORMALIZE_EPS))).astype(x.dtype)


@kernel("NormalizeGradient")
def normalize_gradient(xp, x, dy, *, axis: int = -1):
    ax = axis % x.ndim
    n = xp.maximum(xp.sqrt((x * x).sum(axis=ax, keepdims=True)), x.dtype.type(_NORMALIZE_EPS))
    return (dy / n - x / n ** 3 * (x * dy).sum(axis=ax, keepdims=True)).astype(x.dtype)


@kernel("NormalizeL1")
def normalize_l1(xp, x, *, axis: int = -1):
    n = xp.abs(x).sum(axis=axis % x.ndim, keepdims=True)
    return (x / xp.where(n == 0, 1, n)).astype(x.dtype)


@kernel("Summarize")
def summarize(xp, x, *, to_file: int = 0):
    # NOTE: [min, max, mean, sample std (n - 1)]; float32 only. Nothing is written to a file.
    if x.dtype != np.float32:
        raise TypeError(f"Summarize takes float32, got {x.dtype}")
    if x.size == 0:
        raise ValueError("Summarize: the input is empty")
    xd = x.astype(np.float64)
    std = float(xd.std(ddof=1)) if x.size > 1 else 0.0
    return xp.asarray([float(xd.min()), float(xd.max()), float(xd.mean()), std], dtype=np.float32)


@kernel("SumElements")
def sum_elements(xp, x, *, average: int = 0):
    return xp.asarray(x.mean() if average else x.sum(), dtype=x.dtype)


@kernel("SumElementsGradient")
def sum_elements_gradient(xp, x, dy, *, average: int = 0):
    g = dy.reshape(()) / (x.size if average else 1)
    return xp.full(x.shape, g, dtype=x.dtype)


@kernel("SumSqrElements")
def sum_sqr_elements(xp, x, *, average: int = 0):
    return xp.asarray((x * x).mean() if average else (x * x).sum(), dtype=x.dtype)


@kernel("ArgMax")
def arg_max(xp, x, *, axis: int = -1, keepdims: int = 1):
    return xp.argmax(x, axis=axis, keepdims=bool(keepdims)).astype(np.int64)


@kernel("ArgMin")
def arg_min(xp, x, *, axis: int = -1, keepdims: int = 1):
    return xp.argmin(x, axis=axis, keepdims=bool(keepdims)).astype(np.int64)


# ---- gradients ----
gradient("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin")(simple("{T}Gradient", "GO0 I0 O0", "GI0"))
gradient("SumElements")(simple("SumElementsGradient", "I0 GO0", "GI0"))
gradient("ReduceL1", "ReduceL2")(simple("{T}Gradient", "GO0 I0 O0", "GI0"))
gradient("ColwiseMax", "RowwiseMax")(simple("{T}Gradient", "I0 O0 GO0", "GI0"))
gradient("Moments")(simple("MomentsGradient", "GO0 GO1 I0 O0", "GI0"))
gradient("BatchMoments")(simple("BatchMomentsGradient", "GO0 GO1 I0", "GI0"))
gradient("LpNorm", "Normalize")(simple("{T}Gradient", "I0 GO0", "GI0"))
should_not_do_gradient("SumElementsInt", "Summarize")


@gradient("ReduceFrontSum", "ReduceFrontMean", "ReduceBackSum", "ReduceBackMean", "ReduceFrontMax",
          "ReduceBackMax")
@cc_maker
def reduce_front_back_gradient(g):
    """[dY, X(, Y for Max)(, lengths)] -> dX."""
    ins = [g.GO(0), g.I(0)] + ([g.O(0)] if g.type.endswith("Max") else []) + g.op.input[1:]
    return [g.op_(g.type + "Gradient", ins, [g.GI(0)])]
should_not_do_gradient("ArgMax", "ArgMin")


# ---- shapes ----

def _reduced(xd, axes, keepdims):
    return tuple(1 if i in axes else d for i, d in enumerate(xd) if keepdims or i not in axes)


@shape("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin")
def reduce_shape(x, *, axes: list | None = None, keepdims: int = 1):
    xd = dims(x)
    axes = set(range(len(xd))) if axes is None else {norm_axis(a, len(xd)) for a in axes}
    return TensorInfo(_reduced(xd, axes, keepdims), x.dtype)


shape("ReduceSumGradient", "ReduceMeanGradient", "ReduceMaxGradient", "ReduceMinGradient")(same_as(1))


@shape("ReduceL1", "ReduceL2")
def reduce_l_shape(x, *, axes: list | None = None, keepdims: int = 1):
    return reduce_shape(x, axes=axes, keepdims=keepdims)


@shape("ReduceFrontSum", "ReduceFrontMean", "ReduceFrontMax")
def reduce_front_shape(x, lengths=None, *, num_reduce_dim: int = 1):
    return TensorInfo(dims(x)[num_reduce_dim:], x.dtype)


@shape("ReduceBackSum", "ReduceBackMean", "ReduceBackMax")
def reduce_back_shape(x, lengths=None, *, num_reduce_dim: int = 1):
    xd = dims(x)
    return TensorInfo(xd[:len(xd) - num_reduce_dim], x.dtype)


shape(*(f"Reduce{s}{k}Gradient" for s in ("Front", "Back") for k in ("Sum", "Mean", "Max")), "ReduceL1Gradient",
      "ReduceL2Gradient", "NormalizeGradient")(same_as(1))
shape("ColwiseMaxGradient", "RowwiseMaxGradient")(same_as(0))  # [X, Y, dY] -> dX
shape("LpNormGradient")(same_as(0))  # [X, dY (1,)] -> dX of X's shape
shape("MomentsGradient", "BatchMomentsGradient")(same_as(2))  # [dmean, dvar, X, …] -> dX
shape("ColwiseMax")(lambda x: TensorInfo((d := dims(x))[:1] + d[2:], x.dtype))
shape("RowwiseMax")(lambda x: TensorInfo(dims(x)[:2], x.dtype))
shape("SumInt", "Normalize", "NormalizeL1")(same_as(0))
shape("SumElementsInt")(lambda x: TensorInfo((), x.dtype))
shape("LpNorm")(lambda x: TensorInfo((1,), x.dtype))
shape("Summarize")(lambda x: TensorInfo((4,), x.dtype))


@shape("Moments")
def moments_shape(x, *, axes: list | None = None, keepdims: int = 1):
    m = reduce_shape(x, axes=axes, keepdims=keepdims)
    return m, m


@shape("BatchMoments")
def batch_moments_shape(x, *, order: str = "NCHW"):
    c = TensorInfo((split_layout(dims(x), order)[1],), x.dtype)
    return c, c


shape("SumElements", "SumSqrElements")(lambda x: TensorInfo((), x.dtype))
shape("SumElementsGradient")(same_as(0))


@shape("ArgMax", "ArgMin")
def arg_max_shape(x, *, axis: int = -1, keepdims: int = 1):
    xd = dims(x)
    return TensorInfo(_reduced(xd, {norm_axis(axis, len(xd))}, keepdims), INT64)


# ---- onnx ----
from engine.catalogue.registry import onnx_converter  # noqa: E402


@onnx_converter("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL1", "ReduceL2")
def reduce_onnx(c):
    """The same-named ONNX reduction over `axes` (all when absent), keepdims default 1 in both."""
    axes = c.arg("axes")
    axes = list(axes) if axes is not None else list(range(c.rank(0)))
    c.reduce(c.op.type, c.x(0), axes, int(c.arg("keepdims", 1)), [c.y(0)])


@onnx_converter("ReduceFrontSum", "ReduceFrontMean", "ReduceFrontMax", "ReduceBackSum", "ReduceBackMean",
                "ReduceBackMax")
def reduce_front_back_onnx(c):
    """Reduce the first (Front) or last (Back) `num_reduce_dim` dims, dropping them; the lengths
    input (a ragged reduction) is refused."""
    if c.n_in > 1:
        raise c.refuse("the lengths input")
    n, r = int(c.arg("num_reduce_dim", 1)), c.rank(0)
    axes = list(range(n)) if "Front" in c.op.type else list(range(r - n, r))
    c.reduce("Reduce" + c.op.type[len("ReduceFront"):], c.x(0), axes, 0, [c.y(0)])


@onnx_converter("ArgMax", "ArgMin")
def arg_onnx(c):
    """First index of the extreme value (select_last_index 0), int64, as Caffe2."""
    c.emit(c.op.type, [c.x(0)], [c.y(0)], axis=c.arg("axis", -1), keepdims=int(c.arg("keepdims", 1)))


@onnx_converter("SumElements")
def sum_elements_onnx(c):
    """The sum (average) of every element, 0-d."""
    kind = "ReduceMean" if c.arg("average", 0) else "ReduceSum"
    c.emit(kind, [c.x(0)], [c.y(0)], keepdims=0)


@onnx_converter("LpNorm")
def lp_norm_onnx(c):
    """p = 1: the sum of |x|; p = 2: the sum of squares (no root, as Caffe2); average divides by the
    size; shape (1,)."""
    p = int(c.arg("p", 2))
    if p not in (1, 2):
        raise c.refuse(f"p {p}")
    t = c.emit("Abs", [c.x(0)]) if p == 1 else c.emit("Mul", [c.x(0), c.x(0)])
    s = c.reduce("ReduceMean" if c.arg("average", 0) else "ReduceSum", t, None, 0)
    c.emit("Reshape", [s, c.ints([1])], [c.y(0)])
