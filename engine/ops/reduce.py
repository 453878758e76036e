"""Reductions: ReduceSum/Mean/Max/Min, SumElements, ArgMax/ArgMin."""
from __future__ import annotations

import numpy as np

from engine.grad_makers import should_not_do_gradient, simple
from engine.registry import gradient, kernel
from engine.registry import shape
from engine.shapes import INT64, TensorInfo, dims, norm_axis, same_as

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


@kernel("ReduceFrontSum", "ReduceFrontMean", "ReduceBackSum", "ReduceBackMean", needs_context=True)
def reduce_front_back(xp, x, *, ctx, num_reduce_dim: int = 1):
    t = ctx.op.type
    ax = tuple(range(num_reduce_dim)) if "Front" in t else tuple(range(x.ndim - num_reduce_dim, x.ndim))
    return (x.mean(axis=ax) if t.endswith("Mean") else x.sum(axis=ax)).astype(x.dtype)


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


@shape("ReduceFrontSum", "ReduceFrontMean")
def reduce_front_shape(x, *, num_reduce_dim: int = 1):
    return TensorInfo(dims(x)[num_reduce_dim:], x.dtype)


@shape("ReduceBackSum", "ReduceBackMean")
def reduce_back_shape(x, *, num_reduce_dim: int = 1):
    xd = dims(x)
    return TensorInfo(xd[:len(xd) - num_reduce_dim], x.dtype)


shape("SumElements", "SumSqrElements")(lambda x: TensorInfo((), x.dtype))
shape("SumElementsGradient")(same_as(0))


@shape("ArgMax", "ArgMin")
def arg_max_shape(x, *, axis: int = -1, keepdims: int = 1):
    xd = dims(x)
    return TensorInfo(_reduced(xd, {norm_axis(axis, len(xd))}, keepdims), INT64)
