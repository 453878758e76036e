"""Into a culprit control op: which op of its subnet makes the error (:mod:`engine.debugger.divergence`).

A control op (If, While, Do) is re-run whole by the localizer, so a culprit While says only that
something in its loop adds error.  :func:`descend` runs the subnet the op ran first (a While's
first ``loop_net`` iteration and its ``cond_net``, the If branch its condition chose, a Do's net with
its inner names bound) op by op, once in side A's setting and once in side B's, both from side A's
values at the control op, and localizes there: down to a plain op, through nested control ops.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from engine.debugger.divergence import Divergence, Trace, localize, record_ops
from engine.errors import ExecutionError, NetvizError
from engine.model.opdef import subnets_of
from engine.runtime import device as dev
from engine.runtime.ops.control import WorkspaceStack
from engine.runtime.workspace import Workspace
from proto import caffe2_pb2

__all__ = ["descend", "outer_names", "with_inside"]

#: the control ops whose subnets run in (a child of) the op's own workspace, once per run
DESCENDS = frozenset({"If", "While", "Do"})


def outer_names(op: caffe2_pb2.OperatorDef) -> dict[str, str]:
    """A Do op's inner blob name -> the parent blob it is bound to (``inner_blobs``/``outer_blobs_idx``)."""
    if op.type != "Do":
        return {}
    a = {x.name: x for x in op.arg}
    inner = [b.decode() for b in a["inner_blobs"].strings] if "inner_blobs" in a else []
    idx = list(a["outer_blobs_idx"].ints) if "outer_blobs_idx" in a else []
    outs = list(dict.fromkeys([*op.input, *op.output]))  # NOTE: indices run over inputs then new outputs
    return {n: outs[i] for n, i in zip(inner, idx) if 0 <= i < len(outs)}


def _first_runs(op: caffe2_pb2.OperatorDef, values: Mapping[str, Any]) -> list[tuple[str, caffe2_pb2.NetDef]]:
    """The subnets `op` ran first: an If's chosen branch, a While's loop and condition nets, a Do's net."""
    subs = dict(subnets_of(op))
    if op.type == "If":
        cond = values.get(op.input[0])
        arg = "then_net" if cond is not None and bool(np.asarray(cond).ravel()[:1].all()) else "else_net"
        return [(arg, subs[arg])] if arg in subs else []
    return [(arg, subs[arg]) for arg in ("loop_net", "cond_net", "net") if arg in subs]


def _sub_trace(t: Trace, op: caffe2_pb2.OperatorDef, net: caffe2_pb2.NetDef, values: Mapping[str, Any],
               rng_state: dict[str, Any] | None) -> Trace | None:
    """`net` run op by op in `t`'s setting from `values` (a Do's inner names bound); None if it fails."""
    start = {k: WorkspaceStack() if isinstance(v, WorkspaceStack) else v for k, v in values.items()}
    start.update({inner: start[outer] for inner, outer in outer_names(op).items() if outer in start})
    on = dev.CUDA if t.side.device == "gpu" else dev.CPU
    sub = Trace(t.side, net, start, {k: on for k in start}, [], t.bind_device)
    ws = Workspace("descend")
    for k, v in start.items():
        ws.values[k] = dev.to_device(v, dev.namespace(on)) if on != dev.CPU and isinstance(v, np.ndarray) else v
        ws.devices[k] = on
    rng = np.random.default_rng()
    if rng_state is not None:
        rng.bit_generator.state = rng_state
    try:
        record_ops(sub, ws, rng)
    except (ExecutionError, NetvizError, KeyError, IndexError):
        return None
    return sub


def descend(a: Trace, b: Trace, i: int, j: int, tol: float, depth: int = 4) -> list[str]:
    """The path into side A's control op #i (side B's #j) to the op whose own error exceeds `tol` in the
    subnet it ran first: one ``ARG: op #K Type 'name': own error E`` per level ([] for other ops)."""
    op_a, op_b = a.net.op[i], b.net.op[j]
    if op_a.type not in DESCENDS or op_b.type != op_a.type or depth <= 0:
        return []
    made = {n: a.before(n, i) for n in a.writes if a.made_before(n, i)}
    runs_b = dict(_first_runs(op_b, {**b.start, **made}))
    for arg, net_a in _first_runs(op_a, {**a.start, **made}):
        if arg not in runs_b:
            continue
        rng = a.rng_states[i] if i < len(a.rng_states) else None
        sa = _sub_trace(a, op_a, net_a, {**a.start, **made}, rng)
        sb = _sub_trace(b, op_b, runs_b[arg], {**b.start, **made}, rng)
        if sa is None or sb is None:
            continue
        c = localize(sa, sb, tol=tol).culprit
        if c is not None and c.index_b is not None:
            return [f"{arg}: op #{c.index} {c.op_type} '{c.name}': own error {c.own:.3g}",
                    *descend(sa, sb, c.index, c.index_b, tol, depth - 1)]
    return []


def with_inside(d: Divergence) -> Divergence:
    """`d` with its culprit control op's path into its subnets (:attr:`Divergence.inside`), when it has one."""
    c = d.culprit
    if c is None or c.index_b is None or len(d.traces) != 2:
        return d
    return replace(d, inside=tuple(descend(*d.traces, c.index, c.index_b, d.tol)))
