"""Memory-bound elementwise passes through oneDNN's JIT kernels: one builder (:func:`apply`), a binary
primitive with a chain of binary post-ops, each operand a scalar, a per-channel vector or a full tensor.

Why: SpatialBN and ReluGradient are bandwidth-bound chains of 2-3 ufuncs; oneDNN's JIT kernel runs a chain
in one pass at the memory's speed (benchmarks/README.md, round 4).  Relu and Sum alone, one ufunc each, tie
with NumPy's threaded block passes there, so they stay NumPy's; the fused Sum + Relu is one chain
(:func:`sum_relu`: 1.5x NumPy's block pass, session 10).  The NumPy
kernels stay the reference: each caller falls back to them when :func:`fits` or :func:`apply` says no
(library absent, ``NETVIZ_ONEDNN=0``, a reference-only implementation, an odd layout, a small array).

NaN and infinities, NumPy's exactly (this is a NaN-hunting debugger).  oneDNN's eltwise ReLU (alpha 0) is
``vmaxps(x, 0)``, which turns NaN into 0 where NumPy's ``maximum`` keeps it, and its backward ReLU passes
dY where Y is NaN (NumPy: ``dY * False``); so neither runs where a NaN can reach it.  SpatialBN + Relu's
one pass ends in ELU with alpha 0 instead (:data:`RELU_KEEPS_NAN`), which keeps NaN.
:func:`relu_inplace` is ``max(max(x, 0), x)``: x86 MAX returns its second operand when one is NaN, so NaN
comes back and -inf still gives 0.
:func:`relu_gradient` is ``(max(Y, -inf) > 0) * dY``: the MAX turns a NaN Y into -inf (its second operand),
so the comparison (unordered in oneDNN: NaN > 0 is true there) gives 1.0 exactly where NumPy's ``Y > 0``
does, then NumPy's product (``inf * 0`` is NaN in both).
"""
from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numpy as np

from engine.runtime import onednn
from engine.runtime.onednn import OneDNNError, _P, check, lib

_BINARY = {"add": 0x1fff0, "mul": 0x1fff1, "max": 0x1fff2, "gt": 0x1fff7}  # dnnl_binary_* (3.2-3.13)
_COMPARE = frozenset({"gt"})
_ARG_SRC_1 = 2  # DNNL_ARG_SRC_1
_ELTWISE = {"relu": 0x20, "elu": 0x22}  # dnnl_eltwise_* (3.2-3.13), as post-ops with alpha = beta = 0

MIN_BYTES = 1 << 22
"""Arrays below this many bytes stay on NumPy for a one-ufunc pass (Relu, Sum): a oneDNN call's fixed cost
(ctypes handles, execute, stream wait: ~15 us) and its thread wake-up outweigh what it saves (measured:
benchmarks/README.md, round 4); a chain that replaces several NumPy passes (SpatialBN) passes its own."""

SERIAL_BYTES = 1 << 21
"""Below this a pass runs on one OpenMP thread (waking the second costs more than it saves; measured)."""

ONE_PASS_RELU_MIN_BYTES = SERIAL_BYTES
"""Maps from which SpatialBN + Relu runs as one NaN-keeping chain (:data:`RELU_KEEPS_NAN`) rather than two
passes: its exp is compute-bound, so it wins only where both cores run it (measured: benchmarks/README.md,
session 10: 8x64x56x56 0.79 vs 0.93 ms, 8x256x14x14 0.28 vs 0.27)."""

ENABLED = True  # NOTE: False keeps the elementwise ops on NumPy while the convs stay on oneDNN (A/B runs)
Operand = tuple[str, "np.ndarray | None"]  # a binary post-op and its operand, or (an _ELTWISE name, None)
_ZERO, _NEG_INF = np.zeros(1, np.float32), np.full(1, -np.inf, np.float32)
RELU_KEEPS_NAN: tuple[Operand, ...] = (("elu", None), ("add", _ZERO))
"""A post-op chain giving NumPy's ``maximum(t, 0)`` bit for bit, NaN included: ELU with alpha 0 is t where
t > 0, else ``0 * (exp(t) - 1)``: -0.0 for a negative t or -inf (the ``+ 0`` makes it 0.0), NaN for a NaN t
(the comparison is false, and the NaN goes through exp and the product).  Used only where
:func:`relu_keeps_nan` found it so on this library and CPU."""
_KEEPS_NAN: list[bool] = []


def _post_arg(i: int) -> int:
    """DNNL_ARG_ATTR_MULTIPLE_POST_OP(i) | DNNL_ARG_SRC_1: the operand of binary post-op `i`."""
    return 32768 * (i + 1) | _ARG_SRC_1


def fits(x: np.ndarray, *more: np.ndarray, min_bytes: int | None = None) -> bool:
    """Whether oneDNN takes an elementwise pass over `x` (and `more`, full-size operands): big enough
    (checked first: the one cheap check a tiny op pays), the library here and on, float32 arrays of one
    shape, strides and dense memory order with positive strides, and no NumPy errstate set to raise (oneDNN
    reports no floating-point exceptions; the executor's fp-exception mode needs NumPy's)."""
    return (x.nbytes >= (MIN_BYTES if min_bytes is None else min_bytes) and ENABLED and type(x) is np.ndarray
            and x.dtype == np.float32 and x.size > 0 and onednn.available()
            and all(type(a) is np.ndarray and a.dtype == np.float32 and a.shape == x.shape and a.strides == x.strides
                    for a in more)
            and min(x.strides) > 0 and onednn._dense(x)
            and "raise" not in np.geterr().values())  # NOTE: --caffe2_operator_throw_if_fp_exceptions: NumPy raises


def _kind(v: np.ndarray | None, x: np.ndarray) -> str:
    """Operand `v`'s broadcast against `x`: "s" a scalar (one value), "c" a per-channel vector (along
    axis 1), "f" a full tensor of `x`'s shape and strides."""
    if v.size == 1:
        return "s"
    return "c" if v.ndim == 1 and x.ndim >= 2 and v.size == x.shape[1] else "f"


def _nc_s(x: np.ndarray) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(dims, strides in elements) of `x` as (N, C, S), its spatial dims folded into S, or (N, C) when it has
    one pixel.  NOTE: oneDNN 3.2 broadcasts a per-channel post-op operand wrongly over (N, C, 1, 1) maps
    (measured: 0.5 off), right over (N, C); one spatial dim is also one cache key for every map shape."""
    st = onednn._estrides(x)
    sp = [(n, t) for n, t in zip(x.shape[2:], st[2:]) if n > 1]
    if any(t != t2 * n2 for (_, t), (n2, t2) in zip(sp, sp[1:])):
        raise OneDNNError(f"spatial dims of strides {x.strides} do not fold into one")
    if not sp:
        return x.shape[:2], st[:2]
    return x.shape[:2] + (int(np.prod([n for n, _ in sp])),), st[:2] + (sp[-1][1],)


def _mds(x: np.ndarray, flat: bool) -> dict[str, _P]:
    """Descriptors per operand kind (:func:`_kind`): 1-D over the whole buffer when `flat` (no per-channel
    operand, so the layout does not matter), else X as (N, C[, S]) (:func:`_nc_s`), (1, C[, 1]), (1, 1[, 1])."""
    if flat:
        return {"f": onednn._md((x.size,), (1,)), "s": onednn._md((1,), (1,))}
    dims, st = _nc_s(x)
    ones = (1,) * (len(dims) - 2)
    return {"f": onednn._md(dims, st), "c": onednn._md((1, dims[1]) + ones, (dims[1], 1) + ones),
            "s": onednn._md((1,) * len(dims), (1,) * len(dims))}


def _attr(post: Sequence[Operand], mds: dict[str, _P], x: np.ndarray) -> _P:
    """A primitive attribute: user scratchpad and the post-op chain (binary ops on a full or per-channel
    operand, or ``("relu", None)``)."""
    L, attr, po = lib(), _P(), _P()
    check(L.primitive_attr_create(ctypes.byref(attr)), "dnnl_primitive_attr_create")
    check(L.primitive_attr_set_scratchpad_mode(attr, onednn._SCRATCHPAD_USER), "dnnl_primitive_attr_set_scratchpad_mode")
    check(L.post_ops_create(ctypes.byref(po)), "dnnl_post_ops_create")
    try:
        for name, v in post:
            if v is None:  # NOTE: oneDNN's ReLU turns NaN into 0: only where no NaN can reach it (see affine)
                check(L.post_ops_append_eltwise(po, _ELTWISE[name], 0.0, 0.0), "dnnl_post_ops_append_eltwise")
            elif name in _COMPARE and _kind(v, x) != "s":
                # NOTE: oneDNN 3.2's JIT fails on a comparison post-op with a tensor operand over a map whose
                # size leaves a tail (status 5), and the failure stays in the thread's code generator: every
                # later primitive it builds fails too (measured); so it is never asked for
                raise OneDNNError(f"a {name} post-op takes a scalar operand only")
            else:
                check(L.post_ops_append_binary(po, _BINARY[name], mds[_kind(v, x)]), "dnnl_post_ops_append_binary")
        check(L.primitive_attr_set_post_ops(attr, po), "dnnl_primitive_attr_set_post_ops")
    finally:
        L.post_ops_destroy(po)
    return attr


def _build(alg: str, x: np.ndarray, src1: np.ndarray, post: Sequence[Operand], flat: bool) -> onednn._Primitive:
    """The binary primitive of :func:`apply`, its post-op chain in its attribute."""
    L, pd = lib(), _P()
    mds = _mds(x, flat)
    md, smd, attr = mds["f"], mds[_kind(src1, x)], _attr(post, mds, x)
    try:
        check(L.binary_primitive_desc_create(ctypes.byref(pd), L.engine, _BINARY[alg], md, smd, md, attr),
              "dnnl_binary_primitive_desc_create")
    finally:
        L.primitive_attr_destroy(attr)
    args = {onednn.ARG_SRC: (md, 0), _ARG_SRC_1: (smd, 0), onednn.ARG_DST: (md, 0)}
    args.update({_post_arg(i): (mds[_kind(v, x)], 0) for i, (_, v) in enumerate(post) if v is not None})
    return onednn._Primitive(onednn._fast(pd), args)


def _buffer(a: np.ndarray, flat: bool) -> np.ndarray:
    """`a` as the primitive reads it: contiguous per-channel vectors; full tensors as they are (a dense
    permuted array's data pointer is its lowest address, so its 1-D view is the same memory)."""
    return np.ascontiguousarray(a, np.float32).reshape(-1) if a.size == 1 or a.ndim == 1 and not flat else a


def apply(alg: str, dst: np.ndarray, x: np.ndarray, src1: np.ndarray, post: Sequence[Operand] = ()) -> bool:
    """Write ``alg(x, src1)`` then each post-op of `post` in turn into `dst` (of `x`'s shape and strides);
    False where oneDNN refuses (the caller runs NumPy).  The caller checked :func:`fits`.

    `alg` and each post-op's name: a key of :data:`_BINARY` (a comparison gives 1.0 or 0.0); each operand,
    `src1` included, a scalar, a per-channel vector along axis 1 or a full tensor (:func:`_kind`); a post-op
    ``(name, None)`` is oneDNN's eltwise `name` (:data:`_ELTWISE`) with alpha 0: ``"relu"`` turns NaN into 0,
    ``"elu"`` is :data:`RELU_KEEPS_NAN`'s first half."""
    operands = (src1, *(v for _, v in post if v is not None))
    flat = all(_kind(v, x) != "c" for v in operands)
    sig = tuple((name, v is not None and _kind(v, x)) for name, v in ((alg, src1), *post))
    bufs = {onednn.ARG_SRC: x, _ARG_SRC_1: _buffer(src1, flat), onednn.ARG_DST: dst}
    bufs.update({_post_arg(i): _buffer(v, flat) for i, (_, v) in enumerate(post) if v is not None})
    layout = (x.size,) if flat else (x.shape, x.strides)
    try:
        with onednn._run_lock:
            team = onednn._team_size(0.0 if x.nbytes < SERIAL_BYTES else 1e18)
            (prim,) = onednn._cached(("elt", sig, team, layout), lambda: (_build(alg, x, src1, post, flat),))
            prim.run(bufs)
    except OneDNNError:
        return False
    onednn.CALLS["eltwise"] += 1
    return True


def relu_inplace(y: np.ndarray) -> bool:
    """``y = max(y, 0)`` in place with NumPy's NaN, on an array this process just made (never an input
    blob: kernels do not write their inputs)."""
    return apply("max", y, y, _ZERO, post=(("max", y),))


def relu_keeps_nan() -> bool:
    """Whether :data:`RELU_KEEPS_NAN` gives ``np.maximum(t, 0)`` bit for bit here: checked once a process on
    NaN, +-inf, +-0, denormals and ordinary values, through both descriptor kinds (flat and per-channel) and
    a vector tail, since the ELU's NaN path is this oneDNN build's and ISA's, not a documented promise."""
    if not _KEEPS_NAN:
        vals = np.float32([np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-45, -1e-45, 1e-38, -1e-38, 3e38, -3e38,
                           -1.5, 2.5, -88.5, 89.0, -104.0])
        t = np.resize(vals, (1, 3, 19))
        want = np.maximum(t, 0)
        got = np.empty_like(t), np.empty_like(t)
        ok = (apply("add", got[0], t, _ZERO, post=RELU_KEEPS_NAN)
              and apply("mul", got[1], t, np.ones(3, np.float32), post=(("add", np.zeros(3, np.float32)),) + RELU_KEEPS_NAN))
        _KEEPS_NAN.append(bool(ok) and all(np.array_equal(g.view(np.uint32), want.view(np.uint32)) for g in got))
    return _KEEPS_NAN[0]


def relu_gradient(y: np.ndarray, dy: np.ndarray, min_bytes: int | None = None) -> np.ndarray | None:
    """ReluGradient's ``dY * (Y > 0)`` as NumPy gives it (see the module docstring), in `y`'s memory order;
    None where oneDNN does not take them (:func:`fits`, from `min_bytes`) or refuses."""
    if not fits(y, dy, min_bytes=min_bytes):
        return None
    g = onednn.empty_as(y, y.shape)
    return g if apply("max", g, y, _NEG_INF, post=(("gt", _ZERO), ("mul", dy))) else None


def sum_relu(xs: Sequence[np.ndarray]) -> np.ndarray | None:
    """``maximum(x0 + x1 + ..., 0)`` in one pass (NumPy's additions in its order, then
    :data:`RELU_KEEPS_NAN`), in `x0`'s memory order; None where oneDNN does not take the arrays (two or more of
    one shape, strides and dtype float32, from :data:`ONE_PASS_RELU_MIN_BYTES`) or refuses."""
    if len(xs) < 2 or not fits(*xs, min_bytes=ONE_PASS_RELU_MIN_BYTES) or not relu_keeps_nan():
        return None
    y = onednn.empty_as(xs[0], xs[0].shape)
    post = tuple(("add", x) for x in xs[2:]) + RELU_KEEPS_NAN
    return y if apply("add", y, xs[0], xs[1], post=post) else None


def affine(x: np.ndarray, scale: np.ndarray, shift: np.ndarray, relu: bool = False, min_bytes: int | None = None,
           x_finite_if_finite: bool = False) -> np.ndarray | None:
    """``x * scale + shift`` with per-channel (axis 1) vectors, NumPy's two roundings, then ``max(., 0)``
    when `relu`; in `x`'s memory order; None where oneDNN does not take `x` or refuses.

    The ReLU is oneDNN's own post-op (the cheapest) only when no NaN can reach it: `x_finite_if_finite` (the
    caller knows X is finite when `scale` and `shift` are, as training SpatialBN's, computed from X's own sums)
    and both vectors finite; ``x * scale + shift`` is then finite or +-inf.  Otherwise, on a map of at least
    :data:`ONE_PASS_RELU_MIN_BYTES`, the NaN-keeping chain :data:`RELU_KEEPS_NAN` in the same pass; on a
    smaller one a second, NaN-keeping pass in place (:func:`relu_inplace`)."""
    if x.ndim < 2 or not fits(x, min_bytes=min_bytes):
        return None
    finite = relu and x_finite_if_finite and bool(np.isfinite(scale).all() and np.isfinite(shift).all())
    keeps_nan = relu and not finite and x.nbytes >= ONE_PASS_RELU_MIN_BYTES and relu_keeps_nan()
    y = onednn.empty_as(x, x.shape)
    post = (("add", shift.reshape(-1)),) + ((("relu", None),) if finite else RELU_KEEPS_NAN if keeps_nan else ())
    ok = apply("mul", y, x, scale.reshape(-1), post=post)
    return y if ok and (finite or keeps_nan or not relu or relu_inplace(y)) else None
