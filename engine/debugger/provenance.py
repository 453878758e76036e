"""NaN/Inf provenance to the element: which input elements a bad output element was computed from,
and so back through the ops to a net input, a parameter, or the op that made NaN/Inf from finite inputs.

    y[1, 2] = nan ← Log(x[1, 2] = -1)

Why: a "NaN in op 7" alert leaves the user bisecting by hand; the recorded values already say which
element went bad first and what fed it.  Each op family has an index-map rule (the ``RULES`` table,
one line per op where possible): given an output index it names, per input, the region of elements
that output element reads.  The walker looks for a non-finite element in those regions and follows
the first one to the op that wrote it; it stops where every region is finite (this op made the
NaN/Inf) or at a blob no op wrote (an input or a parameter).  An op without a rule reads its whole
inputs (a superset: the walk stays right, only less precise).  The rules see the recorded values,
never re-run a kernel; :func:`explain_nonfinite` works on any list of ops with their outputs (the
ONNX diff's trace), :func:`explain_debugger` on a :class:`~engine.debugger.Debugger`'s records.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.model.opdef import arg_value, args_of, subnets_of
from proto import caffe2_pb2

Region = tuple[Any, ...]
"""Per input dim: an int, a slice, or a list of ints (the elements an output element reads)."""

ALL = slice(None)


@dataclass(frozen=True)
class Ctx:
    """What a rule sees: the op, its inputs' values and shapes, which output and which element."""

    op: caffe2_pb2.OperatorDef
    values: Sequence[Any]
    out: int
    idx: tuple[int, ...]
    out_shape: tuple[int, ...]

    def arg(self, name: str, default: Any = None) -> Any:
        return arg_value(self.op, name, default)

    def shape(self, i: int) -> tuple[int, ...] | None:
        v = self.values[i] if i < len(self.values) else None
        return tuple(np.shape(v)) if isinstance(v, (np.ndarray, np.generic)) else None

    def scalar(self, i: int, index: Region) -> int:
        return int(np.asarray(self.values[i])[tuple(index)])


# ---- index maps -------------------------------------------------------------------------

def _bcast(idx: tuple[int, ...], shape: tuple[int, ...] | None, axis: int | None = None) -> Region | None:
    """`idx` of a broadcast result in an input of `shape`: NumPy's right alignment, or Caffe2's
    legacy ``broadcast=1, axis=k`` (the input's dims start at output dim k); size-1 dims read 0."""
    if shape is None:
        return None
    start = len(idx) - len(shape) if axis is None or axis < 0 else axis
    if start < 0 or start + len(shape) > len(idx):
        return tuple(ALL for _ in shape)
    return tuple(0 if n == 1 else idx[start + k] for k, n in enumerate(shape))


def _whole(c: Ctx) -> list[Region | None]:
    return [None if (s := c.shape(i)) is None else tuple(ALL for _ in s) for i in range(len(c.values))]


def elementwise(c: Ctx) -> list[Region | None]:
    axis = c.arg("axis", -1) if c.arg("broadcast", 0) else None
    return [_bcast(c.idx, c.shape(i), axis if i else None) for i in range(len(c.values))]


def _keep_dims(c: Ctx, reduced: Sequence[int], keepdims: bool) -> list[Region | None]:
    """Input 0 read over the `reduced` dims at the output element's other coordinates."""
    r = len(c.shape(0) or ())
    red = {a % r for a in reduced} if r else set()
    it, reg = iter(c.idx), []
    for k in range(r):
        if k in red and keepdims:
            next(it)
        reg.append(ALL if k in red else next(it))
    return [tuple(reg)] + [None] * (len(c.values) - 1)


def reduce_axes(c: Ctx) -> list[Region | None]:
    r = len(c.shape(0) or ())
    axes = c.arg("axes") or list(range(r))
    return _keep_dims(c, axes, bool(c.arg("keepdims", 1)))


def reduce_front(c: Ctx) -> list[Region | None]:
    return _keep_dims(c, range(c.arg("num_reduce_dim", 1)), False)


def reduce_back(c: Ctx) -> list[Region | None]:
    r = len(c.shape(0) or ())
    return _keep_dims(c, range(r - c.arg("num_reduce_dim", 1), r), False)


def rows(c: Ctx) -> list[Region | None]:
    """Softmax-like: an output element reads its whole row (the dims from `axis` on) of every input
    shaped like input 0 (SoftmaxGradient's Y and dY)."""
    s0 = c.shape(0) or ()
    a = c.arg("axis", 1) % max(len(s0), 1)
    row = tuple(c.idx[:a]) + (ALL,) * (len(s0) - a)
    return [row if c.shape(i) == s0 else None for i in range(len(c.values))]


def _unravel(flat: int, dims: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(v) for v in np.unravel_index(flat, tuple(dims))) if dims else ()


def _ravel(idx: Sequence[int], dims: Sequence[int]) -> int:
    return int(np.ravel_multi_index(tuple(idx), tuple(dims))) if dims else 0


def fc(c: Ctx) -> list[Region | None]:
    """Y[n…, m] ← X[n…, :], W[m, :] (W[:, m] for FCTransposed), b[m]."""
    a, aw, m = c.arg("axis", 1), c.arg("axis_w", 1), c.idx[-1]
    xs, ws = c.shape(0) or (), c.shape(1) or ()
    w = (ALL,) * aw + _unravel(m, ws[aw:]) if c.op.type == "FCTransposed" else _unravel(m, ws[:aw]) + (ALL,) * (len(ws) - aw)
    return [tuple(c.idx[:a]) + (ALL,) * (len(xs) - a), w, (m,) if c.shape(2) else None][:len(c.values)]


def fc_gradient(c: Ctx) -> list[Region | None]:
    """FCGradient(X, W, dY) -> dW[m, k] ← X[:, k], dY[:, m]; db[m] ← dY[:, m]; dX[n, k] ← dY[n, :], W[:, k]."""
    a, aw = c.arg("axis", 1), c.arg("axis_w", 1)
    xs, ws = c.shape(0) or (), c.shape(1) or ()
    kind = ("dW", "db", "dX")[c.out] if len(c.op.output) == 3 else ("dW", "db")[c.out]
    if kind == "dX":
        k = _ravel(c.idx[a:], xs[a:])
        return [None, (ALL,) * aw + _unravel(k, ws[aw:]), tuple(c.idx[:a]) + (ALL,)]
    m = _ravel(c.idx[:aw], ws[:aw]) if kind == "dW" else c.idx[0]
    x = (ALL,) * a + _unravel(_ravel(c.idx[aw:], ws[aw:]), xs[a:]) if kind == "dW" else None
    return [x, None, (ALL,) * a + (m,)]


def matmul(c: Ctx) -> list[Region | None]:
    """Y[i, j] ← A[i, :], B[:, j] (transposes swap); BatchMatMul's leading dims broadcast."""
    a_s, b_s = c.shape(0), c.shape(1)
    # NOTE: Caffe2's MatMul flattens higher-rank inputs to 2-D at axis_a/axis_b: those read whole
    if a_s is None or b_s is None or len(a_s) < 2 or len(b_s) < 2 or c.op.type == "MatMul" and len(a_s) + len(b_s) > 4:
        return _whole(c)
    i, j, batch = c.idx[-2], c.idx[-1], c.idx[:-2]
    ra = (i, ALL) if not c.arg("trans_a", 0) else (ALL, i)
    rb = (ALL, j) if not c.arg("trans_b", 0) else (j, ALL)
    return [(_bcast(batch, a_s[:-2]) or ()) + ra, (_bcast(batch, b_s[:-2]) or ()) + rb]


def _geometry(c: Ctx, nd: int, sp: Sequence[int], kshape: Sequence[int] = ()) -> tuple[Any, ...]:
    from engine.runtime.ops.conv import GEOMETRY, geometry  # noqa: PLC0415 - the one reading of the args

    g = {**GEOMETRY, **{k: v for k, v in args_of(c.op).items() if k in GEOMETRY}}
    return geometry(nd, g, tuple(kshape), tuple(sp))


def _window(o: int, k: int, s: int, pb: int, d: int, size: int) -> list[int]:
    return [p for t in range(k) if 0 <= (p := o * s - pb + t * d) < size]


def _windows_over(x: int, k: int, s: int, pb: int, d: int, n_out: int) -> list[int]:
    """The output positions whose window covers input position `x` (a gradient's inverse window)."""
    return [o for o in range(n_out) if any(o * s - pb + t * d == x for t in range(k))]


def _layout(c: Ctx, i: int) -> tuple[int, list[int]]:
    """(channel dim, spatial dims) of input `i` under ``order``."""
    r = len(c.shape(i) or ())
    return (1, list(range(2, r))) if c.arg("order", "NCHW") == "NCHW" else (r - 1, list(range(1, r - 1)))


def conv(c: Ctx) -> list[Region | None]:
    """Y[n, m, oh, ow] ← X[n, m's group channels, window], W[m, …], b[m]."""
    xs, ws = c.shape(0), c.shape(1)
    ch, sp = _layout(c, 0)
    wch, wsp = _layout(c, 1)
    k, s, pb, _, d = _geometry(c, len(sp), [xs[a] for a in sp], [ws[a] for a in wsp])
    m = c.idx[ch]
    cg = ws[wch]
    g = m // (c.out_shape[ch] // max(c.arg("group", 1), 1))
    x = [c.idx[0]] + [ALL] * (len(xs) - 1)
    x[ch] = list(range(g * cg, (g + 1) * cg))
    for a, ka, sa, pa, da in zip(sp, k, s, pb, d):
        x[a] = _window(c.idx[a], ka, sa, pa, da, xs[a])
    w = [ALL] * len(ws)
    w[0] = m
    return [tuple(x), tuple(w), (m,) if c.shape(2) else None][:len(c.values)]


def pool(c: Ctx) -> list[Region | None]:
    """Y[n, c, oh, ow] ← X[n, c, window] (global pooling: the whole plane)."""
    xs = c.shape(0)
    ch, sp = _layout(c, 0)
    x = list(c.idx)
    if c.arg("global_pooling", 0) or c.op.type.startswith("Global"):
        return [tuple(ALL if a in sp else v for a, v in enumerate(x))]
    k, s, pb, _, d = _geometry(c, len(sp), [xs[a] for a in sp])
    for a, ka, sa, pa, da in zip(sp, k, s, pb, d):
        x[a] = _window(c.idx[a], ka, sa, pa, da, xs[a])
    return [tuple(x)]


def pool_gradient(c: Ctx) -> list[Region | None]:
    """dX[n, c, h, w] ← X, Y, dY over the windows that cover (h, w)."""
    xs, ys = c.shape(0), c.shape(1)
    ch, sp = _layout(c, 0)
    if c.arg("global_pooling", 0):
        plane = tuple(ALL if a in sp else v for a, v in enumerate(c.idx))
        return [tuple(c.idx), plane, plane]
    k, s, pb, _, d = _geometry(c, len(sp), [xs[a] for a in sp])
    y = list(c.idx)
    for a, ka, sa, pa, da in zip(sp, k, s, pb, d):
        y[a] = _windows_over(c.idx[a], ka, sa, pa, da, ys[a])
    return [tuple(c.idx), tuple(y), tuple(y)]


def conv_gradient(c: Ctx) -> list[Region | None]:
    """ConvGradient(X, W, dY) -> dW[m, c, k…] ← X[:, c's channel, every position tap k reads], dY[:, m];
    db[m] ← dY[:, m]; dX[n, c, h, w] ← W[c's group's filters, c], dY[n, those filters, windows over (h, w)]."""
    xs, ws, ys = c.shape(0), c.shape(1), c.shape(2)
    ch, sp = _layout(c, 0)
    wch, wsp = _layout(c, 1)
    k, s, pb, _, d = _geometry(c, len(sp), [xs[a] for a in sp], [ws[a] for a in wsp])
    kind = (("dW", "dX") if c.arg("no_bias", 0) else ("dW", "db", "dX"))[c.out]
    per = ws[0] // max(c.arg("group", 1), 1)
    if kind == "db":
        return [None, None, tuple(c.idx[0] if a == ch else ALL for a in range(len(ys)))]
    if kind == "dW":
        m = c.idx[0]
        x = [ALL] * len(xs)
        x[ch] = (m // per) * ws[wch] + c.idx[wch]
        for a, wa, sa, pa, da in zip(sp, wsp, s, pb, d):
            x[a] = [p for o in range(ys[a]) if 0 <= (p := o * sa - pa + c.idx[wa] * da) < xs[a]]
        return [tuple(x), None, tuple(m if a == ch else ALL for a in range(len(ys)))]
    g = c.idx[ch] // ws[wch]
    ms = list(range(g * per, (g + 1) * per))
    w = [ALL] * len(ws)
    w[0], w[wch] = ms, c.idx[ch] % ws[wch]
    y = list(c.idx)
    y[ch] = ms
    for a, ka, sa, pa, da in zip(sp, k, s, pb, d):
        y[a] = _windows_over(c.idx[a], ka, sa, pa, da, ys[a])
    return [None, tuple(w), tuple(y)]


def lrn(c: Ctx) -> list[Region | None]:
    """LRN: the `size` channels around the element's."""
    ch, _ = _layout(c, 0)
    n, half = c.shape(0)[ch], (c.arg("size", 1) - 1) // 2
    return [tuple(list(range(max(0, c.idx[ch] - half), min(n, c.idx[ch] + half + 1))) if a == ch else v
                  for a, v in enumerate(c.idx))]


def conv_transpose(c: Ctx) -> list[Region | None]:
    """Y[n, m, oh, ow] ← X[n, m's group's channels, the positions whose taps reach (oh, ow)], W[those, m], b[m]."""
    from engine.runtime.ops.conv import GEOMETRY, transpose_geometry  # noqa: PLC0415

    xs, ws = c.shape(0), c.shape(1)
    ch, sp = _layout(c, 0)
    wch, wsp = _layout(c, 1)
    g = {**GEOMETRY, **{k: v for k, v in args_of(c.op).items() if k in GEOMETRY}}
    k, s, pb, _, _ = transpose_geometry(g, [ws[a] for a in wsp], c.arg("adj", 0), c.arg("adjs"), c.arg("adj_h", 0),
                                        c.arg("adj_w", 0))
    m, per_out = c.idx[ch], ws[wch]
    per_in = xs[ch] // max(c.arg("group", 1), 1)
    cins = list(range((m // per_out) * per_in, (m // per_out + 1) * per_in))
    x = [c.idx[0]] + [ALL] * (len(xs) - 1)
    x[ch] = cins
    for a, ka, sa, pa in zip(sp, k, s, pb):
        x[a] = _windows_over(c.idx[a], ka, sa, pa, 1, xs[a])
    w = [ALL] * len(ws)
    w[0], w[wch] = cins, m % per_out
    return [tuple(x), tuple(w), (m,) if c.shape(2) else None][:len(c.values)]


def instance_norm(c: Ctx) -> list[Region | None]:
    """Y[n, c, …] (and the saved mean and inverse std[n, c]) ← X[n, c, the whole plane], scale[c], bias[c]."""
    ch, _ = _layout(c, 0)
    chan = c.idx[ch] if c.out == 0 else c.idx[1]
    x = tuple(c.idx[0] if a == 0 else chan if a == ch else ALL for a in range(len(c.shape(0))))
    return [x, (chan,), (chan,)]


def pad_image(c: Ctx) -> list[Region | None]:
    """PadImage: the element it copies (reflect, edge) or none (a constant pad)."""
    from engine.runtime.ops.image import _pad_index  # noqa: PLC0415 - the kernel's own index map

    xs = c.shape(0)
    _, sp = _layout(c, 0)
    _, _, pb, pe, _ = _geometry(c, 2, [xs[a] for a in sp])
    x = list(c.idx)
    for a, b, e in zip(sp, pb, pe):
        x[a] = int(_pad_index(xs[a], b, e, c.arg("mode", "constant"))[c.idx[a]])
    return [None if min(x) < 0 else tuple(x)]


def resize_nearest(c: Ctx) -> list[Region | None]:
    """ResizeNearest: source index floor(i / scale), clamped."""
    xs = c.shape(0)
    _, sp = _layout(c, 0)
    x = list(c.idx)
    for a, scale in zip(sp, (c.arg("height_scale", 1.0), c.arg("width_scale", 1.0))):
        x[a] = min(int(c.idx[a] / scale), xs[a] - 1)
    return [tuple(x)] + [None] * (len(c.values) - 1)


def spatial_bn(c: Ctx) -> list[Region | None]:
    """Y[n, c, …] ← X[n, c, …] and the channel's scale, bias, mean, var (training: the whole channel)."""
    ch, _ = _layout(c, 0)
    chan = (c.idx[ch],)
    x = tuple(c.idx) if c.arg("is_test", 0) else tuple(v if a == ch else ALL for a, v in enumerate(c.idx))
    return [x] + [chan] * (len(c.values) - 1)


def gather(c: Ctx, axis: int | None = None) -> list[Region | None]:
    """Y[…, i…, …] ← DATA[…, INDICES[i…], …], INDICES[i…]."""
    a = c.arg("axis", 0) if axis is None else axis
    ri = len(c.shape(1) or ())
    at = tuple(c.idx[a:a + ri])
    row = c.scalar(1, at)
    n = (c.shape(0) or (1,))[a]
    return [tuple(c.idx[:a]) + (row + n if row < 0 else row,) + tuple(c.idx[a + ri:]), at]


def lengths_reduce(c: Ctx) -> list[Region | None]:
    """Out[r, …] ← the rows of segment r: LengthsSum (DATA, LENGTHS); SparseLengths* read DATA through
    INDICES; Weighted: (DATA, WEIGHTS, INDICES, LENGTHS)."""
    n = len(c.values)
    r = c.idx[0]
    lengths = np.asarray(c.values[n - 1]).reshape(-1)
    seg = list(range(int(lengths[:r].sum()), int(lengths[:r + 1].sum())))
    rest = tuple(c.idx[1:])
    if n == 2:
        return [(seg,) + rest, (r,)]
    rows_ = [int(v) for v in np.asarray(c.values[n - 2]).reshape(-1)[seg]] if seg else []
    return [(rows_,) + rest] + ([(seg,)] if n == 4 else []) + [(seg,), (r,)]


def concat(c: Ctx) -> list[Region | None]:
    """Y[…, k, …] ← the input holding position k along the axis (add_axis: input k)."""
    if c.out:
        return [None] * len(c.values)
    r = len(c.out_shape)
    a = (c.arg("axis", 1 if c.arg("order", "NCHW") == "NCHW" else -1)) % r
    if c.arg("add_axis", 0):
        return [tuple(c.idx[:a] + c.idx[a + 1:]) if i == c.idx[a] else None for i in range(len(c.values))]
    out, off = [], 0
    for i in range(len(c.values)):
        n = (c.shape(i) or (0,) * r)[a]
        out.append(tuple(c.idx[:a]) + (c.idx[a] - off,) + tuple(c.idx[a + 1:]) if off <= c.idx[a] < off + n else None)
        off += n
    return out


def split(c: Ctx) -> list[Region | None]:
    """Y_j[…, k, …] ← X[…, offset_j + k, …]."""
    r = len(c.shape(0) or ())
    a = (c.arg("axis", 1 if c.arg("order", "NCHW") == "NCHW" else -1)) % r
    sizes = list(c.arg("split") or [])
    if len(c.values) > 1:
        sizes = [int(v) for v in np.asarray(c.values[1]).reshape(-1)]
    if not sizes:
        sizes = [c.shape(0)[a] // len(c.op.output)] * len(c.op.output)
    if c.arg("add_axis", 0):
        return [tuple(c.idx[:a]) + (c.out,) + tuple(c.idx[a:])] + [None] * (len(c.values) - 1)
    return [tuple(c.idx[:a]) + (sum(sizes[:c.out]) + c.idx[a],) + tuple(c.idx[a + 1:])] + [None] * (len(c.values) - 1)


def same_order(c: Ctx) -> list[Region | None]:
    """Reshape, Flatten, Squeeze, ExpandDims: the same element in row-major order."""
    xs = c.shape(0)
    return [_unravel(_ravel(c.idx, c.out_shape), xs) if xs else ()] + [None] * (len(c.values) - 1)


def transpose(c: Ctx) -> list[Region | None]:
    axes = c.arg("axes") or list(range(len(c.idx)))[::-1]
    x = [0] * len(c.idx)
    for k, a in enumerate(axes):
        x[a] = c.idx[k]
    return [tuple(x)]


def slice_(c: Ctx) -> list[Region | None]:
    xs = c.shape(0)
    starts = [int(v) for v in np.asarray(c.values[1]).reshape(-1)] if len(c.values) > 1 else list(c.arg("starts", []))
    starts += [0] * (len(xs) - len(starts))
    return [tuple(i + (s + n + 1 if s < 0 else s) for i, s, n in zip(c.idx, starts, xs))] + [None] * (len(c.values) - 1)


def label_cross_entropy(c: Ctx) -> list[Region | None]:
    """Y[n] ← X[n, label[n]], label[n]."""
    n = c.idx[0]
    return [(n, c.scalar(1, (n,))), (n,)]


def softmax_with_loss(c: Ctx) -> list[Region | None]:
    return rows(c) if c.out == 0 else _whole(c)


def prelu(c: Ctx) -> list[Region | None]:
    ch, _ = _layout(c, 0)
    return [tuple(c.idx), (0,) if (c.shape(1) or (1,))[0] == 1 else (c.idx[ch],)]


def sum_reduce_like(c: Ctx) -> list[Region | None]:
    """SumReduceLike(A, B) -> C of B's shape: C[j] ← A over every dim B broadcasts along."""
    a_s, b_s = c.shape(0) or (), c.shape(1) or ()
    axis = c.arg("axis", -1)
    start = len(a_s) - len(b_s) if axis < 0 else axis
    reg = [ALL] * len(a_s)
    for k, n in enumerate(b_s):
        if n != 1:
            reg[start + k] = c.idx[k]
    return [tuple(reg), None]


UNARY = ("Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Rsqrt", "Abs", "Negative", "Reciprocal", "Sqr",
         "Softplus", "Softsign", "Elu", "Selu", "LeakyRelu", "Swish", "Gelu", "Mish", "Sin", "Cos", "Tan",
         "Asin", "Acos", "Atan", "Sinh", "Cosh", "Cube", "Erf", "Clip", "Scale", "Cast", "Copy", "Alias",
         "StopGradient", "EnsureDense", "Ceil", "Floor", "Sign", "HardSigmoid", "ThresholdedRelu", "ReluN",
         "Logit", "Not", "Pow", "Log1p", "Expm1", "Dropout", "Int8Dequantize", "CopyCPUToGPU", "CopyGPUToCPU")
BINARY = ("Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean", "Where", "EQ", "NE", "LT", "LE", "GT", "GE",
          "And", "Or", "Xor")

#: op type -> index map; unlisted ops read their whole inputs (:func:`_whole`)
RULES: dict[str, Callable[[Ctx], list[Region | None]]] = {
    **{t: elementwise for t in UNARY + BINARY},
    **{f"{t}Gradient": elementwise for t in UNARY},   # ReluGradient(Y, dY), SigmoidGradient, …: same element
    "ElementwiseLinear": lambda c: [tuple(c.idx), (c.idx[-1],), (c.idx[-1],)],
    "WeightedSum": lambda c: [_bcast(c.idx, c.shape(i)) if i % 2 == 0 else (ALL,) * len(c.shape(i) or ())
                              for i in range(len(c.values))],
    **{t: reduce_axes for t in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL1", "ReduceL2")},
    **{t: reduce_front for t in ("ReduceFrontSum", "ReduceFrontMean", "ReduceFrontMax")},
    **{t: reduce_back for t in ("ReduceBackSum", "ReduceBackMean", "ReduceBackMax")},
    **{t: _whole for t in ("SumElements", "SumSqrElements", "AveragedLoss", "LpNorm")},
    "Softmax": rows, "SoftmaxGradient": rows, "SoftmaxWithLoss": softmax_with_loss, "LayerNorm": rows,
    "FC": fc, "FCTransposed": fc, "FCGradient": fc_gradient, "FCTransposedGradient": _whole,
    "MatMul": matmul, "BatchMatMul": matmul,
    **{t: conv for t in ("Conv", "Conv1D", "Conv2D", "Conv3D", "ConvRelu")},
    **{t: pool for t in ("MaxPool", "AveragePool", "LpPool", "MaxPool1D", "MaxPool2D", "MaxPool3D",
                         "AveragePool1D", "AveragePool2D", "AveragePool3D")},
    **{t: pool_gradient for t in ("MaxPoolGradient", "AveragePoolGradient", "MaxPool2DGradient",
                                  "AveragePool2DGradient")},
    **{t: conv_gradient for t in ("ConvGradient", "Conv1DGradient", "Conv2DGradient", "Conv3DGradient")},
    "ConvTranspose": conv_transpose, "InstanceNorm": instance_norm, "PadImage": pad_image,
    "ResizeNearest": resize_nearest,
    "SpatialBN": spatial_bn, "PRelu": prelu, "LabelCrossEntropy": label_cross_entropy, "LRN": lrn,
    "AveragedLossGradient": elementwise, "SumElementsGradient": elementwise,
    "Gather": gather, "BatchGather": lambda c: gather(c, 1),
    **{t: lengths_reduce for t in ("LengthsSum", "LengthsMean", "LengthsMax", "SparseLengthsSum",
                                   "SparseLengthsMean", "SparseLengthsWeightedSum")},
    "Concat": concat, "Split": split, "DepthSplit": split, "Transpose": transpose, "Slice": slice_,
    **{t: same_order for t in ("Reshape", "Flatten", "FlattenToVec", "Squeeze", "ExpandDims", "ReshapeLike")},
    "SumReduceLike": sum_reduce_like,
}


# ---- the walk ---------------------------------------------------------------------------

def _host(value: Any) -> Any:
    """A GPU array's host copy (a run with --device gpu keeps its values there); anything else as it is."""
    if hasattr(value, "__cuda_array_interface__"):
        from engine.runtime import device as dev  # noqa: PLC0415

        return dev.to_host(value)
    return value


def first_nonfinite(value: Any) -> tuple[int, ...] | None:
    """Index of the first NaN/Inf element (row-major) of a float array, or None."""
    value = _host(value)
    a = np.asarray(value) if isinstance(value, (np.ndarray, np.generic)) else None
    if a is None or a.dtype.kind not in "fc":
        return None
    bad = np.flatnonzero(~np.isfinite(a.reshape(-1)))
    return _unravel(int(bad[0]), a.shape) if bad.size else None


def _fmt(v: Any) -> str:
    v = v.item() if hasattr(v, "item") else v
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def _index_text(idx: Sequence[Any]) -> str:
    return "[" + ", ".join(map(str, idx)) + "]" if len(idx) else ""


def _arrays(region: Region, shape: tuple[int, ...]) -> list[np.ndarray]:
    out = []
    for r, n in zip(region, shape):
        if isinstance(r, slice):
            out.append(np.arange(n)[r])
        else:
            out.append(np.asarray([r] if np.ndim(r) == 0 else list(r), dtype=np.int64).reshape(-1) % max(n, 1))
    return out


def _dim_text(r: Any, n: int) -> str:
    if isinstance(r, slice):
        return ":" if r == ALL else f"{r.start or 0}:{n if r.stop is None else r.stop}"
    if np.ndim(r) == 0:
        return str(int(r))
    r = list(r)
    if len(r) == 1:
        return str(r[0])
    if len(r) == n and r == list(range(n)):
        return ":"
    if r and r == list(range(r[0], r[-1] + 1)):
        return f"{r[0]}:{r[-1] + 1}"
    return "[" + ", ".join(map(str, r)) + "]" if len(r) <= 4 else f"[{r[0]}, {r[1]}, …, {r[-1]}]"


#: the type of the pseudo-op a History holds for a value injected with ``i`` (no op made it)
INJECTED = "(injected)"


@dataclass
class History:
    """Ops in the order they ran, what each wrote, and the values no op wrote (inputs, parameters).

    `outputs[k]`: output blob -> value for op k (a value missing: dropped or not recorded).
    `labels[k]`: where op k is, as messages name it (``op #3``)."""

    ops: Sequence[caffe2_pb2.OperatorDef]
    outputs: Sequence[Mapping[str, Any]]
    initial: Callable[[str], Any]
    params: frozenset[str] = frozenset()
    labels: Sequence[str] | None = None

    def label(self, k: int) -> str:
        return self.labels[k] if self.labels else f"op #{k} {self.ops[k].type}"

    def producer(self, k: int, blob: str) -> tuple[int, int] | None:
        """(op, output slot) of the last op before op k that wrote `blob`."""
        for k2 in range(k - 1, -1, -1):
            if blob in self.ops[k2].output:
                return k2, list(self.ops[k2].output).index(blob)
        return None

    def read(self, k: int, blob: str) -> Any:
        """The value of `blob` op k read."""
        p = self.producer(k, blob)
        return _host(self.outputs[p[0]].get(blob) if p else self.initial(blob))


def _region_text(name: str, value: np.ndarray, region: Region, bad: tuple[int, ...] | None) -> str:
    dims = [_dim_text(r, n) for r, n in zip(region, value.shape)]
    head = f"{name}[{', '.join(dims)}]" if dims else name
    sub = value[np.ix_(*_arrays(region, value.shape))] if value.ndim else value
    if bad is not None and sub.size > 1:
        return f"{head} ∋ {name}{_index_text(bad)} = {_fmt(value[bad])}"
    if sub.size == 1:
        return f"{head} = {_fmt(sub.reshape(-1)[0])}"
    if sub.size <= 4:
        return f"{head} = [{', '.join(_fmt(v) for v in sub.reshape(-1))}]"
    if sub.dtype.kind in "biuf":
        return f"{head} in [{_fmt(sub.min())}, {_fmt(sub.max())}]"
    return head


def _step(h: History, k: int, j: int, idx: tuple[int, ...]) -> tuple[str, tuple[int, str, tuple[int, ...]] | None]:
    """One line for element `idx` of op k's output j, and the bad input element to follow (or None)."""
    op = h.ops[k]
    name = op.output[j]
    out = np.asarray(_host(h.outputs[k].get(name)))
    raw = [h.read(k, b) for b in op.input]
    values = [v if isinstance(v, (np.ndarray, np.generic)) else None for v in raw]
    unknown = [b for b, v in zip(op.input, raw) if v is None]  # NOTE: gone, not merely no tensor (a scope)
    ctx = Ctx(op, values, j, idx, tuple(out.shape))
    try:
        regions = RULES.get(op.type, _whole)(ctx)
    except Exception:  # NOTE: a rule that does not fit these arguments: the whole inputs are still right
        regions = _whole(ctx)
    parts, follow = [], None
    for i, (blob, v) in enumerate(zip(op.input, values)):
        region = regions[i] if i < len(regions) else None
        if v is None or region is None:
            continue
        a = np.asarray(v)
        if len(region) != a.ndim:
            region = tuple(ALL for _ in a.shape)
        arrs = _arrays(region, a.shape)
        sub = a[np.ix_(*arrs)] if a.ndim else a
        bad = first_nonfinite(sub)
        full = tuple(int(arr[p]) for arr, p in zip(arrs, bad)) if bad is not None else None
        if full is not None and follow is None:
            follow = (i, blob, full)
        parts.append(_region_text(blob, a, region, full))
    parts += [f"{b} = ?" for b in dict.fromkeys(unknown)]
    line = f"{h.label(k)}: {name}{_index_text(idx)} = {_fmt(out[idx])} ← {op.type}({', '.join(parts)})"
    return line, follow if follow is not None or not unknown else (-1, unknown[0], ())


def trace(h: History, k: int, j: int, idx: tuple[int, ...] | None = None, max_depth: int = 1000,
          max_lines: int = 10) -> list[str]:
    """The provenance lines of op k's output j at `idx` (its first NaN/Inf element when None); a walk
    longer than `max_lines` keeps its first and last lines (where the value is, and where it began)."""
    lines = _walk(h, k, j, idx, max_depth)
    if len(lines) <= max_lines:
        return lines
    head, tail = max_lines // 2 - 1, max_lines - max_lines // 2
    return lines[:head] + [f"… {len(lines) - head - tail} ops between …"] + lines[-tail:]


def _walk(h: History, k: int, j: int, idx: tuple[int, ...] | None, max_depth: int) -> list[str]:
    idx = idx if idx is not None else first_nonfinite(h.outputs[k].get(h.ops[k].output[j]))
    if idx is None:
        return [f"{h.label(k)}: '{h.ops[k].output[j]}' holds no NaN/Inf"]
    lines: list[str] = []
    for _ in range(max_depth):
        if h.ops[k].type == INJECTED:  # NOTE: no op made it: the user put it there with i
            name = h.ops[k].output[j]
            lines.append(f"origin: {name}{_index_text(idx)} = {_fmt(np.asarray(_host(h.outputs[k][name]))[idx])} "
                         "was injected (i), not made by an op")
            return lines
        line, follow = _step(h, k, j, idx)
        lines.append(line)
        if follow is None:
            bad = _fmt(np.asarray(_host(h.outputs[k][h.ops[k].output[j]]))[idx])
            lines.append(f"origin: {h.label(k)} made {bad} from finite inputs")
            return lines
        i, blob, idx = follow
        p = h.producer(k, blob)
        if i < 0:  # NOTE: an input whose value is gone: never claim the op made it from finite inputs
            lines.append(f"origin: not known: the value {h.label(p[0])} wrote to '{blob}' was not kept" if p else
                         f"origin: not known: the value of '{blob}' {h.label(k)} read was not kept")
            return lines
        if p is None:
            kind = "a parameter" if blob in h.params else "a net input"
            lines.append(f"origin: {blob}{_index_text(idx)} = {_fmt(np.asarray(h.read(k, blob))[idx])} "
                         f"is {kind} (no op wrote it)")
            return lines
        k, j = p
    lines.append(f"… (stopped after {max_depth} ops)")
    return lines


def _first_bad(h: History, start: int | None, blob: str | None) -> tuple[int, int] | None:
    ks = range(len(h.ops)) if start is None else [start]
    for k in ks:
        for j, name in enumerate(h.ops[k].output):
            if (blob is None or name == blob) and first_nonfinite(h.outputs[k].get(name)) is not None:
                return k, j
    return None


def explain_nonfinite(ops: Sequence[caffe2_pb2.OperatorDef], outputs: Sequence[Mapping[str, Any]],
                      initial: Mapping[str, Any], *, params: Sequence[str] = (), op_index: int | None = None,
                      blob: str | None = None, labels: Sequence[str] | None = None) -> list[str]:
    """Where the first NaN/Inf came from, one line per op back to its origin (empty when none).

    `ops` ran in order, op k writing ``outputs[k]`` (blob -> value); `initial`: the values no op wrote
    (inputs and parameters; `params` says which are parameters).  `op_index` / `blob`: explain that
    op's output (its first bad element) instead of the first op whose output holds NaN/Inf.  What
    ``netviz diff`` and the ONNX export's trace (``Source.trace``) call.

    >>> from engine.model.opdef import create_operator
    >>> x = np.array([[1.0, -1.0]], np.float32)
    >>> with np.errstate(invalid="ignore"):
    ...     y = np.log(x)
    >>> print("\\n".join(explain_nonfinite([create_operator("Log", ["x"], ["y"])], [{"y": y}], {"x": x})))
    op #0 Log: y[0, 1] = nan ← Log(x[0, 1] = -1)
    origin: op #0 Log made nan from finite inputs
    """
    h = History(ops, outputs, initial.get, frozenset(params), labels)
    at = _first_bad(h, op_index, blob)
    return trace(h, *at) if at else []


# ---- the debugger's records -------------------------------------------------------------

def op_at(net: caffe2_pb2.NetDef, path: Sequence[Any]) -> caffe2_pb2.OperatorDef | None:
    """The op at a debugger path (``("op", 2, "loop_net", 0)``) in `net`."""
    steps = list(path[1:]) if path and path[0] == "op" else list(path)
    while net is not None and steps:
        i = steps.pop(0)
        if not isinstance(i, int) or i >= len(net.op):
            return None
        if not steps:
            return net.op[i]
        net = dict(subnets_of(net.op[i])).get(steps.pop(0))
    return None


def debugger_history(dbg: Any) -> History:
    """The debugger's records as a :class:`History`: each op's kept outputs (a value the memory budget
    dropped, or of an earlier run of a loop's op, is missing), version 0 of the blobs no op wrote."""
    from engine.debugger.places import place  # noqa: PLC0415

    program = dbg._program()
    # NOTE: what each op wrote, from the undo history too: kept values are one per op path (a loop's
    # op keeps its last iteration's), the undo units hold every run's (within their memory budget)
    undone, injections = _op_and_inject_writes(dbg, program)
    ops, outs, labels = [], [], []

    def add_injected(seq: int) -> None:  # NOTE: a value put there with i reads as an op of its own
        for writes in injections.pop(seq, []):
            ops.append(caffe2_pb2.OperatorDef(type=INJECTED, output=list(writes)))
            outs.append(writes)
            labels.append("injected (i)")
    for rec in dbg.records:
        add_injected(rec.seq)
        op = op_at(program, rec.path)
        if op is None:
            continue
        got = {}
        for name in op.output:
            kept = dbg.kept.get((tuple(rec.path), name))
            value = kept[1] if kept is not None and kept[0] == rec.seq else undone.get(rec.seq, {}).get(name)
            if isinstance(value, (np.ndarray, np.generic)) or hasattr(value, "__cuda_array_interface__"):
                got[name] = value
        ops.append(op)
        outs.append(got)
        labels.append(place(program, rec.path, rec.frames).removeprefix("main › "))
    for seq in sorted(injections):  # after the last op run
        add_injected(seq)

    def initial(name: str) -> Any:
        try:
            return dbg.initial_value(name)
        except Exception:  # NOTE: dropped, or a subnet-local blob: the walk says it does not know
            return None
    # NOTE: a blob the init net makes but the user fed (an example's data) is an input, not a parameter
    fed = set(getattr(dbg, "given_feeds", ()))
    params = ({o for op in dbg.model.init.op for o in op.output} - fed) | set(getattr(dbg, "synthesized", ()))
    return History(ops, outs, initial, frozenset(params), labels)


def _op_and_inject_writes(dbg: Any, program: Any) -> tuple[dict[int, dict[str, Any]],
                                                            dict[int, list[dict[str, Any]]]]:
    """From the debugger's undo units: what the op of each record seq wrote, and the values injected
    (``i``) before the record of each seq.  An injection is an "op" unit too, pushed with the count of
    records then (the next op's seq): of the units with one seq, the op's is the last."""
    outputs = {rec.seq for rec in dbg.records if op_at(program, rec.path) is not None}
    by_seq: dict[int, list[Any]] = {}
    for u in getattr(dbg, "_undo", ()):
        if u.kind == "op":
            by_seq.setdefault(u.nrec, []).append(u)
    undone: dict[int, dict[str, Any]] = {}
    injections: dict[int, list[dict[str, Any]]] = {}
    for seq, units in by_seq.items():
        units.sort(key=lambda u: u.serial)
        if seq in outputs:  # NOTE: budget trimming drops the oldest first: an op's unit outlives its injections
            undone[seq] = {n: new for _, n, _, _, new in units.pop().writes}
        injections[seq] = [{n: new for _, n, _, _, new in u.writes} for u in units if u.writes]
    return undone, {seq: w for seq, w in injections.items() if w}


def explain_debugger(dbg: Any, blob: str | None = None) -> list[str]:
    """Provenance of the last recorded op that wrote NaN/Inf (`blob`: that output of it)."""
    h = debugger_history(dbg)
    for k in range(len(h.ops) - 1, -1, -1):
        at = _first_bad(h, k, blob)
        if at:
            return trace(h, *at)
    return []


def explain_trace(trace: Any) -> list[str]:
    """Provenance of the first NaN/Inf in one side of ``netviz diff`` (a
    :class:`engine.debugger.divergence.Trace`: its top-level ops, their outputs, the start values),
    each line headed by the side's label."""
    params = [o for op in trace.side.model.init.op for o in op.output]
    return [f"{trace.side.label}: {line}" for line in explain_nonfinite(trace.net.op, trace.outputs, trace.start,
                                                                       params=params)]
