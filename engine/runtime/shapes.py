"""Static shape and dtype inference: abstract values through a NetDef, nothing runs.

A :class:`TensorInfo` is a shape (a tuple whose dims may be ``None`` = unknown, or ``None``
for an unknown rank) and a ``TensorProto.DataType`` (or ``None``).  Rules live beside the
kernels (``# ---- shapes ----`` in ``engine/runtime/ops/*.py``), registered with
:func:`engine.catalogue.registry.shape`; each is a pure function ``rule(*input_infos, **declared_args)``
returning one :class:`TensorInfo` or a tuple of them.  A rule reads only the keyword-only
arguments it declares (as kernels do); one declaring ``n_out`` also gets the op's output count,
one declaring ``in_names`` / ``out_names`` the op's input / output names (RecurrentNetwork maps its
aliases, Do its inner blobs, by name).
Unknown stays unknown: a rule that needs an unknown value calls :func:`dims` / :func:`known`,
which abandon the op (its outputs become unknown); it never guesses.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from math import prod
from typing import Any

from engine.errors import ShapeError
from engine.model.opdef import args_of, subnets_of
from engine.model.optypes import SHARED_WORKSPACE
from engine.catalogue.registry import SHAPES
from engine.model.ssa import VersionedBlob, get_ssa
from proto import caffe2_pb2

__all__ = ["TensorInfo", "UNKNOWN", "OPAQUE", "Unknown", "same_as", "opaque", "dims", "known", "dim_op", "broadcast", "merge",
           "norm_axis", "spatial_out", "split_layout", "join_layout",
           "infer_op", "infer_shapes", "infer_net_shapes", "infer_model_shapes", "annotate_graph",
           "FLOAT", "INT32", "BOOL", "INT64", "UINT8"]

FLOAT, INT32, UINT8, BOOL, INT64 = (caffe2_pb2.TensorProto.FLOAT, caffe2_pb2.TensorProto.INT32,
                                    caffe2_pb2.TensorProto.UINT8, caffe2_pb2.TensorProto.BOOL,
                                    caffe2_pb2.TensorProto.INT64)
Dim = int | None
NetPath = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """Abstract value of a blob: ``shape`` (dims may be None; None = rank unknown) and ``dtype``.

    Examples
    --------
    >>> TensorInfo((1, None, 7), FLOAT).rank, TensorInfo((2, 3)).size
    (3, 6)
    """

    shape: tuple[Dim, ...] | None = None
    dtype: int | None = None
    #: A declared unknown: the blob is not a tensor (a queue, DB, reader, mutex, map, …) or a tensor
    #: whose shape only the data decides (what a queue or DB hands out); Caffe2's inference knows
    #: nothing there either, so it reads ``opaque``, never ``?`` (which means "could be known").
    opaque: bool = field(default=False, repr=False)

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def size(self) -> int | None:
        """Number of elements, or None when any dim is unknown."""
        return prod(self.shape) if self.is_known else None

    @property
    def is_known(self) -> bool:
        return self.shape is not None and None not in self.shape

    def __str__(self) -> str:
        if self.opaque:
            return "opaque"
        s = "?" if self.shape is None else "×".join("?" if d is None else str(d) for d in self.shape) or "scalar"
        return s if self.dtype is None else f"{s} {_DTYPE_NAME.get(self.dtype, self.dtype)}"


UNKNOWN = TensorInfo()
OPAQUE = TensorInfo(opaque=True)
_DTYPE_NAME = {FLOAT: "float32", INT32: "int32", UINT8: "uint8", BOOL: "bool", INT64: "int64",
               caffe2_pb2.TensorProto.DOUBLE: "float64", caffe2_pb2.TensorProto.FLOAT16: "float16"}


class Unknown(Exception):
    """Raised inside a rule when a value it needs is unknown: the op's outputs become unknown."""


def dims(x: TensorInfo) -> tuple[Dim, ...]:
    """The shape of `x` (dims may be None); :class:`Unknown` when its rank is unknown."""
    if x.shape is None:
        raise Unknown
    return x.shape


def known(x: TensorInfo) -> tuple[int, ...]:
    """The fully known shape of `x`; :class:`Unknown` otherwise."""
    if not x.is_known:
        raise Unknown
    return x.shape  # type: ignore[return-value]


def dim_op(fn: Callable[..., int], *ds: Dim) -> Dim:
    """``fn(*ds)``, or None when any dim is unknown."""
    return None if any(d is None for d in ds) else fn(*ds)


def norm_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ShapeError(f"axis {axis} out of range for rank {rank}")
    return axis % rank


def broadcast(a: Sequence[Dim], b: Sequence[Dim]) -> tuple[Dim, ...]:
    """Numpy broadcast of two shapes with unknown dims (unknown unless the other dim decides)."""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    out: list[Dim] = []
    for x, y in zip(a, b):
        if x is not None and y is not None and x != y and 1 not in (x, y):
            raise ShapeError(f"shapes {tuple(a)} and {tuple(b)} do not broadcast")
        out.append(x if y == 1 else y if x == 1 else x if x is not None else y if y not in (None, 1) else None)
    return tuple(out)


def merge(a: Sequence[Dim], b: Sequence[Dim]) -> tuple[Dim, ...]:
    """Two views of one shape, unknown dims filled from the other; ShapeError on a clash."""
    if len(a) != len(b) or any(x is not None and y is not None and x != y for x, y in zip(a, b)):
        raise ShapeError(f"shapes {tuple(a)} and {tuple(b)} must be equal")
    return tuple(x if x is not None else y for x, y in zip(a, b))


def same_as(*indices: int) -> Callable[..., tuple[TensorInfo, ...]]:
    """Rule: output k is input ``indices[k]`` (``same_as(0)``: elementwise ops, ``XGradient``)."""
    def rule(*ins: TensorInfo) -> tuple[TensorInfo, ...]:
        return tuple(ins[i] if i < len(ins) else UNKNOWN for i in indices)
    return rule


def opaque(*_: TensorInfo, n_out: int) -> tuple[TensorInfo, ...]:
    """Rule: every output is :data:`OPAQUE` (queue, DB, reader and communication ops: what they
    make is an object or whatever the data holds, which no static rule can know)."""
    return (OPAQUE,) * n_out


def with_dtype(x: TensorInfo, dtype: int | None) -> TensorInfo:
    return TensorInfo(x.shape, dtype)


def spatial_out(sp: Sequence[Dim], k: Sequence[Dim], s: Sequence[int], pb: Sequence[int], pe: Sequence[int],
                d: Sequence[int]) -> tuple[Dim, ...]:
    """Output dims of a window op: ``(in + pads - (d*(k-1)+1)) // s + 1`` per spatial dim (floor)."""
    return tuple(dim_op(lambda i, kk: (i + pb[j] + pe[j] - (d[j] * (kk - 1) + 1)) // s[j] + 1, v, k[j])
                 for j, v in enumerate(sp))


def split_layout(xd: Sequence[Dim], order: str) -> tuple[Dim, Dim, tuple[Dim, ...]]:
    """``(N, C, spatial dims)`` of an NCHW or NHWC shape."""
    xd = tuple(xd)
    if len(xd) < 2:
        raise ShapeError(f"an input of rank {len(xd)} where an {order} tensor (N, C, …) is needed")
    return (xd[0], xd[1], xd[2:]) if order == "NCHW" else (xd[0], xd[-1], xd[1:-1])


def join_layout(n: Dim, c: Dim, sp: Sequence[Dim], order: str) -> tuple[Dim, ...]:
    """Inverse of :func:`split_layout`."""
    return (n, c, *sp) if order == "NCHW" else (n, *sp, c)


# ---- the driver ----

_SIGNATURES: dict[Callable[..., Any], tuple[dict[str, Any], bool, bool, bool]] = {}


#: Op types whose rule gives Caffe2's shape inference where Caffe2's own kernel writes something else
#: (docs/fidelity.md, "Shape inference that differs from Caffe2's own kernels"): LearningRate infers
#: the iteration's shape (the kernel writes 0-d), TopK int32 indices (the kernel int64), GatherRanges
#: DATA's size for the values, LastNWindowCollector num_to_collect rows before the window fills.
INFERENCE_NOT_RUN = frozenset({"LearningRate", "TopK", "GatherRanges", "LastNWindowCollector"})


def inference_is_not_run(op: caffe2_pb2.OperatorDef) -> bool:
    """True where :func:`infer_op` gives Caffe2's inference for `op` rather than what its kernel
    writes: the types above, and a Concat with ``add_axis`` but no ``axis`` (the kernel ignores
    add_axis there, the inference adds the axis)."""
    if op.type in INFERENCE_NOT_RUN:
        return True
    args = args_of(op)
    return op.type == "Concat" and bool(args.get("add_axis", 0)) and "axis" not in args


_BOUND: dict[Callable[..., Any], inspect.Signature] = {}


def _bound(rule: Callable[..., Any]) -> inspect.Signature:
    if rule not in _BOUND:
        _BOUND[rule] = inspect.signature(rule)
    return _BOUND[rule]


def _declared(rule: Callable[..., Any]) -> tuple[dict[str, Any], bool, bool, bool]:
    if rule not in _SIGNATURES:
        ps = inspect.signature(rule).parameters.values()
        kw = {p.name: (None if p.default is p.empty else p.default) for p in ps if p.kind is p.KEYWORD_ONLY}
        _SIGNATURES[rule] = ({k: v for k, v in kw.items() if k not in ("n_out", "in_names", "out_names")},
                             "n_out" in kw, "out_names" in kw, "in_names" in kw)
    return _SIGNATURES[rule]


def infer_op(op: caffe2_pb2.OperatorDef, ins: Sequence[TensorInfo], where: str = "") -> list[TensorInfo]:
    """Output infos of one op from its input infos; unknown for ops without a rule.

    Raises
    ------
    ShapeError
        When the inputs are known to be incompatible, naming `where` and the op.

    Examples
    --------
    >>> from engine.model.opdef import create_operator
    >>> infer_op(create_operator("FC", ["X", "W", "b"], "Y"), [TensorInfo((2, 5), FLOAT),
    ...          TensorInfo((3, 5), FLOAT), TensorInfo((3,), FLOAT)])
    [TensorInfo(shape=(2, 3), dtype=1)]
    """
    import engine.runtime.ops  # noqa: F401, PLC0415  (fills SHAPES)

    n = len(op.output)
    rule = SHAPES.get(op.type)
    if rule is None:
        return [UNKNOWN] * n
    declared, wants_n, wants_names, wants_in_names = _declared(rule)
    values = args_of(op)
    kwargs = {k: values.get(k, d) for k, d in declared.items()}
    if wants_n:
        kwargs["n_out"] = n
    if wants_names:
        kwargs["out_names"] = tuple(op.output)
    if wants_in_names:
        kwargs["in_names"] = tuple(op.input)
    try:
        _bound(rule).bind(*ins, **kwargs)
    except TypeError:  # NOTE: an input count its rule does not take; schema checks report the count
        return [UNKNOWN] * n
    try:
        out = rule(*ins, **kwargs)
    except Unknown:
        return [OPAQUE if any(i.opaque for i in ins) else UNKNOWN] * n
    except Exception as e:  # noqa: BLE001 - every rule failure is reported as one ShapeError line
        # NOTE: a rule indexing a dim the input lacks (rank 2 where it reads 4) must not leak Python's text.
        msg = str(e) if isinstance(e, ShapeError) else "its inputs' ranks or shapes do not fit what it reads"
        raise ShapeError(f"{where or '<op>'}: op {op.type} '{op.name}': {msg}; inputs "
                         f"{', '.join(map(str, ins))}") from e
    out = list(out) if isinstance(out, (tuple, list)) else [out]
    return [(o or UNKNOWN) for o in out[:n]] + [UNKNOWN] * (n - len(out))


def _as_info(v: Any) -> TensorInfo:
    if isinstance(v, TensorInfo):
        return v
    if hasattr(v, "data_type"):  # modelio.InputInfo
        return TensorInfo(tuple(v.shape), v.data_type)
    return TensorInfo(tuple(int(d) for d in getattr(v, "shape", v)), None)


def _run(net: caffe2_pb2.NetDef, env: dict[str, TensorInfo], path: NetPath,
         out: dict[NetPath, dict[VersionedBlob, TensorInfo]], problems: list[str] | None = None) -> None:
    """Infer `net` starting from `env` (name → info, updated to the final values); with a
    `problems` list an op whose inputs do not fit is noted there and its outputs left unknown."""
    ssa, _ = get_ssa(net)
    table = out.setdefault(path, {})
    for name in net.external_input:
        table[(name, 0)] = env.get(name, UNKNOWN)
    for i, (op, (ins, outs)) in enumerate(zip(net.op, ssa)):
        infos = [table.setdefault(b, env.get(b[0], UNKNOWN) if b[1] == 0 else UNKNOWN) for b in ins]
        try:
            results = infer_op(op, infos, f"{net.name or '<net>'}: op #{i}")
        except ShapeError as e:
            if problems is None:
                raise
            problems.append(str(e))
            results = [UNKNOWN] * len(op.output)
        subs = subnets_of(op)
        if subs and op.type in SHARED_WORKSPACE:
            op_path = ("op", i) if not path else (*path, i)
            results = _shared_subnets(op, subs, env, op_path, out, results, problems)
        for b, info in zip(outs, results):
            table[b] = info
            env[b[0]] = info


def _shared_subnets(op: caffe2_pb2.OperatorDef, subs: list[tuple[str, caffe2_pb2.NetDef]],
                    env: dict[str, TensorInfo], path: NetPath,
                    out: dict[NetPath, dict[VersionedBlob, TensorInfo]], results: list[TensorInfo],
                    problems: list[str] | None = None) -> list[TensorInfo]:
    """If/While: subnets see the outer blobs; an outer blob keeps an info all branches agree on."""
    finals = []
    for arg, sub in subs:
        inner = dict(env)
        _run(sub, inner, path + (arg,), out, problems)
        finals.append(inner)
    if op.type != "While" and len(finals) == 1:
        finals.append(dict(env))  # NOTE: If without else_net leaves the outer blobs as they were.
    agreed = {k: v for k, v in finals[0].items() if all(f.get(k) == v for f in finals[1:])}
    if op.type == "While":
        agreed = {k: v for k, v in agreed.items() if env.get(k, v) == v}  # zero iterations possible
    written = set().union(*finals) - set(env) | {k for k in env if any(f.get(k) != env[k] for f in finals)}
    for k in written:
        env[k] = agreed.get(k, UNKNOWN)
    return [agreed.get(name, r) if r == UNKNOWN else r for name, r in zip(op.output, results)]


def infer_net_shapes(net: caffe2_pb2.NetDef, inputs: Mapping[str, Any] | None = None,
                     init_net: caffe2_pb2.NetDef | None = None, problems: list[str] | None = None
                     ) -> dict[NetPath, dict[VersionedBlob, TensorInfo]]:
    """Infos of every blob version of `net` and of the subnets of If/While ops, by net path.

    Parameters
    ----------
    net : NetDef
    inputs : dict, optional
        Name → :class:`TensorInfo`, ``modelio.InputInfo`` or a shape (``value_info``, ``--input``).
    init_net : NetDef, optional
        Its fill ops give parameter infos (inferred with the same rules).
    problems : list, optional
        When given, an op whose known inputs do not fit is noted here (one line each) and its
        outputs are left unknown instead of raising: a viewer shows the rest of the net.

    Returns
    -------
    dict
        Net path (``()`` top, ``("op", i, "then_net")``… as :mod:`engine.graph`) →
        ``{(name, version): TensorInfo}``.

    Raises
    ------
    ShapeError
        When known inputs of an op are incompatible.
    """
    env: dict[str, TensorInfo] = {}
    if init_net is not None and len(init_net.op):
        init_env: dict[str, TensorInfo] = {}
        _run(init_net, init_env, ("init",), {}, problems)
        env.update(init_env)
    env.update({k: _as_info(v) for k, v in (inputs or {}).items()})
    for name in net.external_input:
        env.setdefault(name, UNKNOWN)
    out: dict[NetPath, dict[VersionedBlob, TensorInfo]] = {}
    _run(net, env, (), out, problems)
    return out


def infer_shapes(net: caffe2_pb2.NetDef, inputs: Mapping[str, Any] | None = None,
                 init_net: caffe2_pb2.NetDef | None = None) -> dict[VersionedBlob, TensorInfo]:
    """``{(name, version): TensorInfo}`` for the top net; see :func:`infer_net_shapes`.

    Examples
    --------
    >>> from engine.model.opdef import create_operator as op
    >>> net = caffe2_pb2.NetDef(op=[op("FC", ["X", "W", "b"], "Y"), op("Relu", "Y", "Y")])
    >>> str(infer_shapes(net, {"X": (4, 5), "W": (3, 5), "b": (3,)})[("Y", 2)])
    '4×3'
    """
    return infer_net_shapes(net, inputs, init_net)[()]


def infer_model_shapes(model: Any, inputs: Mapping[str, Any] | None = None, problems: list[str] | None = None
                       ) -> dict[NetPath, dict[VersionedBlob, TensorInfo]]:
    """:func:`infer_net_shapes` of a ``modelio.Model``: init net fills, value_info, then `inputs`."""
    return infer_net_shapes(model.predict, {**model.value_info, **(inputs or {})}, model.init, problems)


def annotate_graph(G: Any, shapes: Mapping[NetPath, Mapping[VersionedBlob, TensorInfo]]) -> Any:
    """Fill ``shape``/``dtype`` of the blob nodes of an SSA graph from :func:`infer_net_shapes`.

    Works in place on `G` (an :func:`engine.graph.from_netdef` graph, ``ssa=True``) and returns
    it; a node keeps its attributes where the info is unknown.  Unknown dims stay ``None``.
    """
    for node, data in G.nodes(data=True):
        if data.get("kind") != "blob" or data.get("version") is None:
            continue
        info = shapes.get(tuple(data["net"]), {}).get((data["name"], data["version"]))
        if info is not None and info.shape is not None:
            data["shape"] = info.shape
        if info is not None and info.dtype is not None:
            data["dtype"] = info.dtype
    return G
