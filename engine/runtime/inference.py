"""Static shape and dtype inference: abstract values through a NetDef, nothing runs.

The driver over the shape rules the op families register (:mod:`engine.runtime.shapes` is the
vocabulary they are written in; this module sits above the families and loads them all).  A rule
reads only the keyword-only arguments it declares; besides the op's arguments it may declare
``n_out`` (the output count), ``in_names`` / ``out_names`` (the op's blob names) and ``infer_net``
(:func:`infer_net_shapes`, for a rule that infers its op's subnet, as Do's does).
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import engine.runtime.ops  # noqa: F401  (fills SHAPES)
from engine.catalogue.registry import SHAPES
from engine.errors import ShapeError
from engine.model.opdef import args_of, subnets_of
from engine.model.optypes import SHARED_WORKSPACE
from engine.model.ssa import VersionedBlob, get_ssa
from engine.runtime.shapes import OPAQUE, UNKNOWN, NetPath, TensorInfo, Unknown
from proto import caffe2_pb2

__all__ = ["infer_op", "infer_shapes", "infer_net_shapes", "infer_model_shapes", "annotate_graph"]

_SIGNATURES: dict[Callable[..., Any], tuple[dict[str, Any], tuple[str, ...]]] = {}

_GIVEN: dict[str, Callable[[caffe2_pb2.OperatorDef], Any]] = {
    "n_out": lambda op: len(op.output),
    "in_names": lambda op: tuple(op.input),
    "out_names": lambda op: tuple(op.output),
    "infer_net": lambda op: infer_net_shapes,  # NOTE: lent to rules below this driver (Do's)
}
"""What the driver gives a rule that declares the name, besides the op's own arguments."""


_BOUND: dict[Callable[..., Any], inspect.Signature] = {}


def _bound(rule: Callable[..., Any]) -> inspect.Signature:
    if rule not in _BOUND:
        _BOUND[rule] = inspect.signature(rule)
    return _BOUND[rule]


def _declared(rule: Callable[..., Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The op arguments a rule reads (with defaults) and the :data:`_GIVEN` names it declares."""
    if rule not in _SIGNATURES:
        ps = inspect.signature(rule).parameters.values()
        kw = {p.name: (None if p.default is p.empty else p.default) for p in ps if p.kind is p.KEYWORD_ONLY}
        _SIGNATURES[rule] = ({k: v for k, v in kw.items() if k not in _GIVEN}, tuple(k for k in kw if k in _GIVEN))
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
    >>> from engine.runtime.shapes import FLOAT
    >>> infer_op(create_operator("FC", ["X", "W", "b"], "Y"), [TensorInfo((2, 5), FLOAT),
    ...          TensorInfo((3, 5), FLOAT), TensorInfo((3,), FLOAT)])
    [TensorInfo(shape=(2, 3), dtype=1)]
    """
    n = len(op.output)
    rule = SHAPES.get(op.type)
    if rule is None:
        return [UNKNOWN] * n
    declared, given = _declared(rule)
    values = args_of(op)
    kwargs = {k: values.get(k, d) for k, d in declared.items()}
    kwargs.update((k, _GIVEN[k](op)) for k in given)
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
        raise ShapeError(f"{where or 'net'}: op {op.type} '{op.name}': {msg}; inputs "
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
