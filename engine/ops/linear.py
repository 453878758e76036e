"""Dense products: FC, FCTransposed, MatMul, BatchMatMul."""
from __future__ import annotations

import numpy as np

from engine.grad_makers import GradientMakerError, cc_maker, simple
from engine.registry import gradient, kernel
from engine.registry import shape
from math import prod
from engine.errors import ShapeError
from engine.shapes import (UNKNOWN, TensorInfo, Unknown, broadcast as broadcast_dims, dim_op, dims, merge,
                           norm_axis)

# ---- kernels ----

def _flat(a, axis):
    """`a` as 2-D, split at `axis` (Caffe2's canonical-axis flattening)."""
    axis %= max(a.ndim, 1)
    return a.reshape(int(np.prod(a.shape[:axis])), -1)


@kernel("FC")
def fc(xp, x, w, b=None, *, axis: int = 1, axis_w: int = 1):
    y = _flat(x, axis) @ _flat(w, axis_w).T
    if b is not None:
        y += b
    return y.reshape(x.shape[:axis % x.ndim] + (y.shape[1],))


@kernel("FCTransposed")
def fc_transposed(xp, x, w, b=None, *, axis: int = 1, axis_w: int = 1):
    # NOTE: W is stored (K, N) here, not (N, K).
    w2 = _flat(w, axis_w)
    y = _flat(x, axis) @ w2
    if b is not None:
        y += b
    return y.reshape(x.shape[:axis % x.ndim] + (y.shape[1],))


def _fc_grad(xp, x, w, dy, axis, axis_w, transposed, n_out):
    x2, w2 = _flat(x, axis), _flat(w, axis_w)
    dy2 = dy.reshape(x2.shape[0], -1)
    dw = (x2.T @ dy2) if transposed else (dy2.T @ x2)
    res = (dw.reshape(w.shape), dy2.sum(axis=0))
    if n_out > 2:
        res += ((dy2 @ (w2.T if transposed else w2)).reshape(x.shape),)
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
    if a.ndim == 1:
        a = a.reshape(1, -1)
    if b.ndim == 1:
        b = b.reshape(-1, 1)
    return xp.matmul(xp.swapaxes(a, -1, -2) if trans_a else a, xp.swapaxes(b, -1, -2) if trans_b else b)


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
    ad, bd = dims(a), dims(b)
    if len(ad) < 2 or len(bd) < 2:
        raise Unknown  # NOTE: 1-D operands follow numpy's promote-and-drop rules; not modelled.
    m, k = ad[-2:][::-1] if trans_a else ad[-2:]
    k2, n = bd[-2:][::-1] if trans_b else bd[-2:]
    if None not in (k, k2) and k != k2:
        raise ShapeError(f"inner dims {k} and {k2} differ")
    batch = broadcast_dims(ad[:-2], bd[:-2]) if broadcast else merge(ad[:-2], bd[:-2])
    return TensorInfo((*batch, m, n), a.dtype)
