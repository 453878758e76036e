"""The ``ATen`` op: a PyTorch ATen function named by its ``operator`` argument (caffe2/contrib/aten).

torch's ONNX exporter (``OperatorExportTypes.ONNX_ATEN_FALLBACK``, the path to Caffe2 in torch 1.x) writes
an ``ATen`` node for what ONNX cannot express (``embedding_bag``, ``layer_norm``, ``cumsum`` in opset 9,
``index_put``, ``index_fill``, ``index_copy``, ``gather``/``scatter`` in opset 11, ``unfold``,
``transpose`` of unknown rank, ``type_as``) and Caffe2's ONNX backend turns it into this op; a
``graph.at(...)`` symbolic or a whole ``ONNX_ATEN`` export writes any other name.  netviz runs the
common ones below with torch's semantics, one small NumPy function each: the inputs are the
function's tensor arguments in order (``self`` first), its other arguments are the op's arguments by
their torch names.  Caffe2 picks an overload by name, argument names and input count and refuses a
combination it did not build; netviz refuses an argument a function here does not know, and an
``operator`` it does not have, naming both.  NOTE: configurations the exporter writes that Caffe2's
own op cannot run (``embedding_bag`` with ``include_last_offset``; ``index_put`` with ``accumulate``
as a trailing input; opset-11 ``gather``/``scatter`` with ``dim`` as an input) run here with torch's
semantics (docs/fidelity.md).
"""
from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from engine.runtime import device as dev
from engine.catalogue.registry import kernel, shape
from engine.runtime.shapes import opaque

# ---- kernels ----

F32, I64 = np.float32, np.int64
_erf = np.frompyfunc(math.erf, 1, 1)


def _ax(d: Any, ndim: int) -> int:
    return int(d) % max(ndim, 1)


def _axes(dims: Any, ndim: int) -> tuple[int, ...] | None:
    return None if dims is None else tuple(_ax(d, ndim) for d in np.atleast_1d(dims))


def _floaty(a: np.ndarray) -> np.ndarray:
    """torch's true division / float functions: integer and bool tensors give float32."""
    return a if a.dtype.kind in "fc" else a.astype(F32)


def _unary(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[..., tuple]:
    return lambda xp, x: (fn(_floaty(x)).astype(_floaty(x).dtype, copy=False),)


def _reduce(np_fn: Callable[..., np.ndarray]) -> Callable[..., tuple]:
    """sum / mean / prod over `dim` (all dims when absent), as torch gives them (int sums are int64)."""
    def run(xp, x, *, dim=None, keepdim=0):
        out = np_fn(x, axis=_axes(dim, x.ndim), keepdims=bool(keepdim))
        kind = "int64" if x.dtype.kind in "biu" and np_fn is not np.mean else x.dtype
        return (np.asarray(out).astype(kind),)
    return run


def _softmax(x: np.ndarray, dim: int) -> np.ndarray:
    if x.size == 0:  # NOTE: nothing to normalise (an empty dim has no max)
        return x.copy()
    e = np.exp(x - x.max(axis=dim, keepdims=True))
    return e / e.sum(axis=dim, keepdims=True)


def _index_tuple(indices: tuple) -> tuple:
    """ATen's `index`/`index_put` index list: bool and (deprecated) uint8 masks, or int64 positions."""
    return tuple(i.astype(bool) if i.dtype in (np.uint8, np.bool_) else i.astype(I64) for i in indices)


def _index_put(xp, x, *rest, accumulate=0):
    # NOTE: the exporter passes accumulate as a trailing 0-d bool input: (self, *indices, values, accumulate).
    if len(rest) >= 3 and rest[-1].dtype == np.bool_ and rest[-1].ndim == 0:
        accumulate, rest = bool(rest[-1]), rest[:-1]
    *indices, values = rest
    out, idx = x.copy(), _index_tuple(tuple(indices))
    if accumulate:
        np.add.at(out, idx, values)
    else:
        out[idx] = values
    return (out,)


def _index_fill(xp, x, index, *value, dim, value_=None):
    out = x.copy()
    sl = [slice(None)] * x.ndim
    sl[_ax(dim, x.ndim)] = index.astype(I64).reshape(-1)
    out[tuple(sl)] = value[0] if value else value_
    return (out,)


def _index_copy(xp, x, index, source, *, dim):
    out, sl = x.copy(), [slice(None)] * x.ndim
    sl[_ax(dim, x.ndim)] = index.astype(I64).reshape(-1)
    out[tuple(sl)] = source
    return (out,)


def _gather(xp, x, *rest, dim=None, sparse_grad=0):
    # NOTE: opset 11 passes dim and sparse_grad as inputs: (self, dim, index, sparse_grad).
    if len(rest) == 3:
        dim, index = int(rest[0]), rest[1]
    else:
        index = rest[0]
    return (np.take_along_axis(x, index.astype(I64), axis=_ax(dim, x.ndim)),)


def _scatter(xp, x, *rest, dim=None):
    # NOTE: opset 11 passes dim as an input: (self, dim, index, src).
    index, src = rest[-2:]
    dim = int(rest[0]) if len(rest) == 3 else dim
    out = x.copy()
    d, index = _ax(dim, x.ndim), index.astype(I64)
    cells = np.indices(index.shape)
    target = list(cells)
    target[d] = index
    out[tuple(target)] = src[tuple(cells)]
    return (out,)


def _unfold(xp, x, *, dimension, size, step):
    d = _ax(dimension, x.ndim)
    win = np.lib.stride_tricks.sliding_window_view(x, int(size), axis=d)
    sl = [slice(None)] * win.ndim
    sl[d] = slice(None, None, int(step))
    return (np.ascontiguousarray(win[tuple(sl)]),)


def _layer_norm(xp, x, weight=None, bias=None, *, normalized_shape, eps=1e-5, cudnn_enable=1):
    axes = tuple(range(x.ndim - len(np.atleast_1d(normalized_shape)), x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(np.square(x - mean).mean(axis=axes, keepdims=True) + x.dtype.type(eps))
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return (y.astype(x.dtype),)


def _embedding_bag(xp, weight, indices, offsets, *, scale_grad_by_freq=0, mode=0, sparse=0,
                   include_last_offset=0):
    """(output, offset2bag, bag_size, max_indices) as torch 1.10's CPU kernel gives them: the sum mode's fast
    path leaves offset2bag empty and bag_size zero; max_indices is bag_size except in the max mode."""
    idx, offs = indices.astype(I64).reshape(-1), offsets.astype(I64).reshape(-1)
    ends = np.append(offs[1:], idx.size) if not include_last_offset else offs[1:]
    starts = offs[:ends.size]
    out = np.zeros((ends.size, weight.shape[1]), weight.dtype)
    sizes = (ends - starts).astype(I64)
    max_idx = np.zeros((ends.size, weight.shape[1]), I64)
    for b, (s, e) in enumerate(zip(starts, ends)):
        if e <= s:
            continue
        rows = weight[idx[s:e]]
        if mode == 2:
            arg = rows.argmax(axis=0)
            out[b], max_idx[b] = rows[arg, np.arange(rows.shape[1])], idx[s:e][arg]
        else:
            out[b] = rows.sum(axis=0) / (e - s if mode == 1 else 1)
    bag_of = np.clip(np.searchsorted(starts, np.arange(idx.size), side="right") - 1, 0, max(ends.size - 1, 0))
    offset2bag = bag_of.astype(offsets.dtype) if mode != 0 else np.zeros(0, offsets.dtype)
    bag_size = sizes if mode != 0 else np.zeros(ends.size, I64)
    return out, offset2bag, bag_size, (max_idx if mode == 2 else bag_size.copy())


def _sort(xp, x, *, dim=-1, descending=0):
    d = _ax(dim, x.ndim)
    order = np.argsort(-x if descending else x, axis=d, kind="stable")
    return np.take_along_axis(x, order, axis=d), order.astype(I64)


def _topk(xp, x, *, k, dim=-1, largest=1, sorted=1):
    if not 0 <= int(k) <= (x.shape[_ax(dim, x.ndim)] if x.ndim else 1):
        raise ValueError(f"ATen topk: k = {k} is past dim {dim} of size {x.shape[_ax(dim, x.ndim)] if x.ndim else 1}")
    vals, order = _sort(xp, x, dim=dim, descending=largest)
    sl = [slice(None)] * x.ndim
    sl[_ax(dim, x.ndim)] = slice(0, int(k))
    return np.ascontiguousarray(vals[tuple(sl)]), np.ascontiguousarray(order[tuple(sl)])


def _extreme(fn: Callable[..., np.ndarray], arg: Callable[..., np.ndarray]) -> Callable[..., tuple]:
    def run(xp, x, *other, dim=None, keepdim=0):
        if other:
            return (np.maximum(x, other[0]) if fn is np.max else np.minimum(x, other[0]),)
        if dim is None:
            return (np.asarray(fn(x)),)
        d = _ax(dim, x.ndim)
        return fn(x, axis=d, keepdims=bool(keepdim)), np.asarray(arg(x, axis=d, keepdims=bool(keepdim))).astype(I64)
    return run


def _unique(xp, x, *, sorted=1, return_inverse=0):
    vals, inverse = np.unique(x, return_inverse=True)
    return vals, (inverse.reshape(x.shape).astype(I64) if return_inverse else np.zeros(0, I64))


def _compare(op: Callable[[Any, Any], np.ndarray]) -> Callable[..., tuple]:
    return lambda xp, x, *other, other_=None: (op(x, other[0] if other else other_),)


def _expand(xp, x, *, size, implicit=0):
    size = [int(s) for s in size]
    lead = len(size) - x.ndim
    shape = [x.shape[i - lead] if s == -1 else s for i, s in enumerate(size)]
    return (np.ascontiguousarray(np.broadcast_to(x, shape)),)


def _repeat(xp, x, *, repeats):
    reps = [int(r) for r in repeats]
    return (np.tile(x.reshape((1,) * (len(reps) - x.ndim) + x.shape), reps),)


def _split_sizes(n: int, size: int) -> list[int]:
    return [min(size, n - s) for s in range(0, n, size)] or [0]


def _chunk(xp, x, *, chunks, dim=0):
    d = _ax(dim, x.ndim)
    return tuple(_split(x, d, _split_sizes(x.shape[d], -(-x.shape[d] // int(chunks)))))


def _split_op(xp, x, *, split_size, dim=0):
    d = _ax(dim, x.ndim)
    return tuple(_split(x, d, _split_sizes(x.shape[d], int(split_size))))


def _split(x: np.ndarray, d: int, sizes: list[int]) -> list[np.ndarray]:
    return [np.ascontiguousarray(p) for p in np.split(x, np.cumsum(sizes)[:-1], axis=d)]


def _flatten(xp, x, *, start_dim=0, end_dim=-1):
    if x.ndim == 0:
        return (x.reshape(1),)
    s, e = _ax(start_dim, x.ndim), _ax(end_dim, x.ndim)
    return (x.reshape(x.shape[:s] + (int(np.prod(x.shape[s:e + 1])),) + x.shape[e + 1:]),)


def _squeeze(xp, x, *, dim=None):
    if dim is None:
        return (np.squeeze(x),)
    d = _ax(dim, x.ndim)
    return (np.squeeze(x, axis=d) if x.shape[d] == 1 else x.copy(),)


def _narrow(xp, x, *, dim, start, length):
    d, s = _ax(dim, x.ndim), int(start) % x.shape[_ax(dim, x.ndim)]
    return (np.ascontiguousarray(np.take(x, np.arange(s, s + int(length)), axis=d)),)


def _constant_pad_nd(xp, x, *, pad, value=0.0):
    pad = [int(p) for p in pad]
    widths = [(0, 0)] * x.ndim
    for k in range(len(pad) // 2):
        widths[x.ndim - 1 - k] = (pad[2 * k], pad[2 * k + 1])
    return (np.pad(x, widths, constant_values=value),)


def _pooled_image(x, what: str) -> None:
    """ATen's 2-D pools take (C, H, W) or (N, C, H, W) with no empty dim but N (as torch 1.10)."""
    if x.ndim not in (3, 4) or 0 in x.shape[x.ndim - 3:]:
        raise ValueError(f"ATen {what}: input {tuple(x.shape)} must be (C, H, W) or (N, C, H, W) with C, H, W > 0")


def _max_pool2d(xp, x, *, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode=0):
    _pooled_image(x, "max_pool2d")
    if ceil_mode:
        raise ValueError("ATen max_pool2d: ceil_mode=1 is not supported by netviz")
    k = _pair(kernel_size)
    s, p, dl = _pair(stride) if len(stride) else k, _pair(padding), _pair(dilation)
    xpad = np.pad(x, [(0, 0)] * (x.ndim - 2) + [(p[0], p[0]), (p[1], p[1])], constant_values=-np.inf)
    oh = (xpad.shape[-2] - dl[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (xpad.shape[-1] - dl[1] * (k[1] - 1) - 1) // s[1] + 1
    out = np.full(x.shape[:-2] + (oh, ow), -np.inf, x.dtype)
    for i in range(k[0]):
        for j in range(k[1]):
            win = xpad[..., i * dl[0]:i * dl[0] + s[0] * (oh - 1) + 1:s[0], j * dl[1]:j * dl[1] + s[1] * (ow - 1) + 1:s[1]]
            out = np.maximum(out, win)
    return (out,)


def _pair(v: Any) -> tuple[int, int]:
    v = [int(t) for t in np.atleast_1d(v)]
    return (v[0], v[-1])


def _adaptive_avg_pool2d(xp, x, *, output_size):
    _pooled_image(x, "adaptive_avg_pool2d")
    oh, ow = _pair(output_size)
    h, w = x.shape[-2:]
    out = np.empty(x.shape[:-2] + (oh, ow), x.dtype)
    for i in range(oh):
        for j in range(ow):
            hs, he = (i * h) // oh, -(-((i + 1) * h) // oh)
            ws, we = (j * w) // ow, -(-((j + 1) * w) // ow)
            out[..., i, j] = x[..., hs:he, ws:we].mean(axis=(-2, -1))
    return (out,)


def _upsample_nearest2d(xp, x, *, output_size, scales_h=None, scales_w=None):
    oh, ow = _pair(output_size)
    h, w = x.shape[-2:]
    rows = np.minimum((np.arange(oh) * F32(h / oh)).astype(I64), h - 1)
    cols = np.minimum((np.arange(ow) * F32(w / ow)).astype(I64), w - 1)
    return (np.ascontiguousarray(x[..., rows[:, None], cols[None, :]]),)


def _cast(dtype: Any) -> Callable[..., tuple]:
    return lambda xp, x, *, non_blocking=0: (x.astype(dtype),)


def _softplus(xp, x, *, beta=1.0, threshold=20.0):
    bx = x * x.dtype.type(beta)
    return (np.where(bx > threshold, x, np.log1p(np.exp(bx)) / x.dtype.type(beta)).astype(x.dtype),)


def _elu(xp, x, *, alpha=1.0, scale=1.0, input_scale=1.0):
    neg = alpha * (np.exp(x * x.dtype.type(input_scale)) - 1)
    return ((np.where(x > 0, x, neg) * scale).astype(x.dtype),)


def _gelu(xp, x):
    return ((x * 0.5 * (1.0 + _erf(x.astype(np.float64) / math.sqrt(2.0)).astype(np.float64))).astype(x.dtype),)


def _div(xp, a, b):
    return (np.true_divide(_floaty(a), b).astype(np.result_type(_floaty(a), b)),)


def _pow(xp, x, *other, exponent=None):
    e = other[0] if other else x.dtype.type(exponent) if x.dtype.kind == "f" else exponent
    return (np.power(x, e),)


#: operator -> fn(xp, *tensor inputs, **torch arguments) -> tuple of outputs
ATEN: dict[str, Callable[..., tuple]] = {
    "add": lambda xp, a, b, *, alpha=1: (a + b if alpha == 1 else a + b * alpha,),
    "sub": lambda xp, a, b, *, alpha=1: (a - b if alpha == 1 else a - b * alpha,),
    "rsub": lambda xp, a, b, *, alpha=1: (b - a if alpha == 1 else b - a * alpha,),
    "mul": lambda xp, a, b: (a * b,),
    "div": _div,
    "pow": _pow,
    "sum": _reduce(np.sum), "mean": _reduce(np.mean), "prod": _reduce(np.prod),
    "max": _extreme(np.max, np.argmax), "min": _extreme(np.min, np.argmin),
    "sort": _sort, "topk": _topk, "_unique": _unique,
    "index": lambda xp, x, *indices: (x[_index_tuple(indices)],),
    "index_put": _index_put,
    "index_fill": lambda xp, x, index, *v, dim, value=None: _index_fill(xp, x, index, *v, dim=dim, value_=value),
    "index_copy": _index_copy,
    "index_select": lambda xp, x, index, *, dim: (np.take(x, index.astype(I64).reshape(-1), axis=_ax(dim, x.ndim)),),
    "gather": _gather, "scatter": _scatter,
    "cumsum": lambda xp, x, *, dim: (np.cumsum(x, axis=_ax(dim, x.ndim), dtype=I64 if x.dtype.kind in "biu" else x.dtype),),
    "transpose": lambda xp, x, *, dim0, dim1: (np.ascontiguousarray(np.swapaxes(x, _ax(dim0, x.ndim), _ax(dim1, x.ndim))),),
    "t": lambda xp, x: (np.ascontiguousarray(x.T),),
    "permute": lambda xp, x, *, dims: (np.ascontiguousarray(np.transpose(x, _axes(dims, x.ndim))),),
    "type_as": lambda xp, x, other: (x.astype(other.dtype),),
    "unfold": _unfold, "layer_norm": _layer_norm, "embedding_bag": _embedding_bag,
    "embedding": lambda xp, w, i, *, padding_idx=-1, scale_grad_by_freq=0, sparse=0: (w[i.astype(I64)],),
    "relu": lambda xp, x: (np.maximum(x, 0).astype(x.dtype),),
    "sigmoid": _unary(lambda x: 1 / (1 + np.exp(-x))), "tanh": _unary(np.tanh), "exp": _unary(np.exp),
    "log": _unary(np.log), "sqrt": _unary(np.sqrt), "rsqrt": _unary(lambda x: 1 / np.sqrt(x)),
    "reciprocal": _unary(lambda x: 1 / x), "erf": _unary(lambda x: _erf(x).astype(x.dtype)),
    "abs": lambda xp, x: (np.abs(x),), "neg": lambda xp, x: (-x,), "sign": lambda xp, x: (np.sign(x),),
    "floor": lambda xp, x: (np.floor(x),), "ceil": lambda xp, x: (np.ceil(x),), "round": lambda xp, x: (np.round(x),),
    "softmax": lambda xp, x, *, dim: (_softmax(x, _ax(dim, x.ndim)).astype(x.dtype),),
    "log_softmax": lambda xp, x, *, dim: (np.log(_softmax(x, _ax(dim, x.ndim))).astype(x.dtype),),
    "leaky_relu": lambda xp, x, *, negative_slope=0.01: (np.where(x > 0, x, x * x.dtype.type(negative_slope)),),
    "elu": _elu, "gelu": _gelu, "softplus": _softplus,
    "hardtanh": lambda xp, x, *, min_val=-1.0, max_val=1.0: (np.clip(x, min_val, max_val).astype(x.dtype),),
    "matmul": lambda xp, a, b: (np.matmul(a, b),), "mm": lambda xp, a, b: (a @ b,), "bmm": lambda xp, a, b: (a @ b,),
    "addmm": lambda xp, c, a, b, *, beta=1.0, alpha=1.0: ((c * beta + (a @ b) * alpha).astype(a.dtype),),
    "linear": lambda xp, x, w, *b: (x @ w.T + b[0] if b else x @ w.T,),
    "flatten": _flatten, "squeeze": _squeeze,
    "reshape": lambda xp, x, *, shape: (x.reshape([int(s) for s in shape]),),
    "view": lambda xp, x, *, size: (x.reshape([int(s) for s in size]),),
    "unsqueeze": lambda xp, x, *, dim: (np.expand_dims(x, _ax(dim, x.ndim + 1)),),
    "expand": _expand, "repeat": _repeat, "narrow": _narrow,
    "select": lambda xp, x, *, dim, index: (np.ascontiguousarray(np.take(x, int(index), axis=_ax(dim, x.ndim))),),
    "cat": lambda xp, *xs, dim=0: (np.concatenate(xs, axis=_ax(dim, xs[0].ndim)),),
    "stack": lambda xp, *xs, dim=0: (np.stack(xs, axis=_ax(dim, xs[0].ndim + 1)),),
    "chunk": _chunk, "split": _split_op,
    "flip": lambda xp, x, *, dims: (np.ascontiguousarray(np.flip(x, _axes(dims, x.ndim))),),
    "where": lambda xp, c, a, b: (np.where(c.astype(bool), a, b),),
    "masked_fill": lambda xp, x, mask, *v, value=None: (np.where(mask.astype(bool), v[0] if v else value, x).astype(x.dtype),),
    "eq": _compare(np.equal), "ne": _compare(np.not_equal), "gt": _compare(np.greater), "ge": _compare(np.greater_equal),
    "lt": _compare(np.less), "le": _compare(np.less_equal),
    "clone": lambda xp, x: (x.copy(),), "contiguous": lambda xp, x: (x.copy(),),
    "_cast_Long": _cast(I64), "_cast_Int": _cast(np.int32), "_cast_Float": _cast(F32), "_cast_Double": _cast(np.float64),
    "_cast_Byte": _cast(np.uint8), "_cast_Char": _cast(np.int8), "_cast_Short": _cast(np.int16),
    "_cast_Half": _cast(np.float16),
    "nonzero": lambda xp, x: (np.argwhere(x).astype(I64),),
    "constant_pad_nd": _constant_pad_nd, "max_pool2d": _max_pool2d,
    "adaptive_avg_pool2d": _adaptive_avg_pool2d, "upsample_nearest2d": _upsample_nearest2d,
}
#: argument names that are Python keywords or clash with an input in the table above
_RENAMED = {("eq", "other"): "other_", ("ne", "other"): "other_", ("gt", "other"): "other_",
            ("ge", "other"): "other_", ("lt", "other"): "other_", ("le", "other"): "other_"}


def _arg(a: Any) -> Any:
    for f in ("f", "i", "s"):
        if a.HasField(f):
            v = getattr(a, f)
            return v.decode() if isinstance(v, bytes) else v
    return list(a.ints) or list(a.floats)


@kernel("ATen", needs_context=True)
def aten(xp, *inputs, ctx):
    op = ctx.op
    args = {a.name: _arg(a) for a in op.arg}
    name = args.pop("operator", "")
    args.pop("overload_name", None)
    fn = ATEN.get(name)
    if fn is None:
        raise ValueError(f"ATen operator '{name}' is not supported by netviz (it runs {len(ATEN)} common "
                         "ones, see docs/fidelity.md)")
    args = {_RENAMED.get((name, k), k): v for k, v in args.items()}
    known = {p.name for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY}
    unknown = sorted(set(args) - known)
    if unknown:
        raise ValueError(f"ATen operator '{name}' with argument(s) {', '.join(unknown)} is not supported "
                         "(Caffe2 builds no such configuration either)")
    outs = fn(np, *[dev.to_host(x) for x in inputs], **args)
    if len(outs) < len(op.output):
        raise ValueError(f"ATen operator '{name}' gives {len(outs)} output(s), the op declares {len(op.output)}")
    return tuple(xp.asarray(np.asarray(o)) for o in outs[:len(op.output)])


# ---- gradients ----
# NOTE: Caffe2 registers no gradient maker for ATen (asking for one is an error), and neither does netviz.

# ---- shapes ----
shape("ATen")(opaque)  # NOTE: what it returns follows the torch function named by `operator`; Caffe2 infers nothing
