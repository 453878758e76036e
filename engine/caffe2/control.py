"""Builders of If / While / Do ops, as Caffe2's ``control_ops_util`` and ``core.Net.Do`` make them.

Each branch or loop body runs inside a ``Do`` with its own child workspace: blobs of the outer
scope are bound (read and written through), every other blob stays local to the subnet.  The
outer inputs of a subnet are the blobs its SSA reads before writing; its outer outputs are the
blobs it writes that the outer scope knows.  Lists come out in first-appearance order (Caffe2
iterates sets there, so its order varies run to run).

Examples
--------
>>> from engine.caffe2.core import Net
>>> outer, then = Net("demo_if"), Net("demo_then")
>>> _ = then.Relu("X", "Y")
>>> If(outer, "cond", then, lexical_scope={"X", "Y", "cond"})
>>> [op.type for op in outer.Proto().op]
['CreateScope', 'If']
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from engine.caffe2.core import BlobReference, DataType, Net
from engine.model.ssa import get_ssa, get_undefined_blobs
from proto import caffe2_pb2

__all__ = ["get_external_blob_names", "If", "While", "Do"]


def _proto(net: Any) -> caffe2_pb2.NetDef:
    return net.Proto() if hasattr(net, "Proto") else net


def _scope(net: Any, lexical_scope: Iterable[str] | None) -> set[str]:
    """The given scope, or every blob `net` knows so far (external inputs and op outputs)."""
    if lexical_scope is not None:
        return {str(b) for b in lexical_scope}
    p = _proto(net)
    return set(p.external_input) | {o for op in p.op for o in op.output}


def get_external_blob_names(net: Any, lexical_scope: Iterable[str] | None = None
                            ) -> tuple[list[str], list[str]]:
    """``(inputs, outputs)`` of a subnet: blobs read before written, and written outer blobs.

    With ``lexical_scope=None`` every undefined input counts as outer (no check).

    Raises
    ------
    GraphError
        "Input blob X is undefined" when an input is not in `lexical_scope`.
    """
    from engine.errors import GraphError  # noqa: PLC0415

    p = _proto(net)
    undefined = get_undefined_blobs(get_ssa(p)[0])
    scope = None if lexical_scope is None else {str(b) for b in lexical_scope}
    inputs = list(dict.fromkeys(i for op in p.op for i in op.input if i in undefined))
    for i in inputs:
        if scope is not None and i not in scope:
            raise GraphError(f"net {p.name}: Input blob {i} is undefined")
    outputs = list(dict.fromkeys(o for op in p.op for o in op.output
                                 if scope is None or o in scope))
    return inputs, outputs


def _do_net(name: str, subnet: Any, inputs: list[str], outputs: list[str], ws_blob: str,
            **args: Any) -> caffe2_pb2.NetDef:
    """A one-op net running `subnet` in a Do bound identically to `inputs` + `outputs`."""
    wrapper = Net(name)
    ordered = inputs + outputs
    names = list(dict.fromkeys(ordered))
    wrapper.Do([*inputs, ws_blob], [*outputs, ws_blob], net=_proto(subnet), inner_blobs=names,
               outer_blobs_idx=[ordered.index(b) for b in names], **args)
    wrapper.AddExternalOutput(*[BlobReference(b) for b in [*outputs, ws_blob]])
    return wrapper.Proto()


def If(net: Net, cond: Any, then_net: Any, else_net: Any = None,
       lexical_scope: Iterable[str] | None = None) -> None:
    """Append ``CreateScope`` op(s) and an ``If`` running each branch in its own Do (``add_if_op``)."""
    scope = _scope(net, lexical_scope)
    branches = [("then", then_net)] + ([("else", else_net)] if else_net is not None else [])
    ins: dict[str, None] = {}
    outs: dict[str, None] = {}
    args, stacks = {}, []
    for which, sub in branches:
        b_in, b_out = get_external_blob_names(sub, scope | set(get_external_blob_names(sub)[0]))
        ins.update(dict.fromkeys(b_in))
        outs.update(dict.fromkeys(b_out))
        ws_blob = str(net.NextScopedBlob(f"{net.Name()}/workspace_if_{which}"))
        stacks.append(ws_blob)
        args[f"{which}_net"] = _do_net(f"do_{which}_net", sub, b_in, b_out, ws_blob)
    for ws_blob in stacks:
        net.CreateScope([], [ws_blob])
    outputs = [*outs, *stacks]
    net.If([str(cond), *ins, *stacks], outputs, **args)
    net.AddExternalOutput(*[BlobReference(b) for b in outputs])


def While(net: Net, cond: Any, loop_net: Any, cond_net: Any = None,
          lexical_scope: Iterable[str] | None = None) -> None:
    """Append a ``While`` whose body (and optional condition net) run in Do ops (``add_while_op``).

    The body Do copies its bound blobs after each iteration (``copy_external_blobs``), so the
    gradient sees every iteration's values; outputs are also inputs (the loop may not run).
    """
    scope = _scope(net, lexical_scope)
    b_in, b_out = get_external_blob_names(loop_net, scope | set(get_external_blob_names(loop_net)[0]))
    inputs = list(dict.fromkeys(b_in + b_out))
    body_ws = str(net.NextScopedBlob(f"{net.Name()}/workspace_loop_body"))
    args = {"loop_net": _do_net("do_loop_body_net", loop_net, inputs, b_out, body_ws, copy_external_blobs=True)}
    w_in, w_out, stacks = [str(cond), *inputs, body_ws], [*b_out, body_ws], [body_ws]
    if cond_net is not None:
        c_in, c_out = get_external_blob_names(cond_net, scope | set(get_external_blob_names(cond_net)[0]) | {str(cond)})
        if str(cond) not in c_out:
            from engine.errors import GraphError  # noqa: PLC0415

            raise GraphError(f"net {net.Name()}: Condition net does not write into condition blob")
        cond_ws = str(net.NextScopedBlob(f"{net.Name()}/workspace_loop_cond"))
        stacks.append(cond_ws)
        args["cond_net"] = _do_net("do_loop_condition_net", cond_net, c_in, c_out, cond_ws)
        w_in += [b for b in [*c_in, cond_ws] if b not in inputs]
        w_out += [b for b in [*c_out, cond_ws] if b not in b_out]
        if str(cond) not in scope:
            net.ConstantFill([], str(cond), dtype=DataType.BOOL, value=False)
    for ws_blob in stacks:
        net.CreateScope([], [ws_blob])
    net.While(w_in, w_out, **args)
    net.AddExternalOutput(*[BlobReference(b) for b in w_out])


def Do(net: Net, subnet: Any, inputs: Iterable[Any] | None = None, outputs: Iterable[Any] | None = None,
       bindings: dict[str, str] | None = None, reuse_workspace: bool = False,
       lexical_scope: Iterable[str] | None = None, ws_blob: str | None = None) -> str:
    """Append ``CreateScope`` (unless `ws_blob` is given) and a ``Do`` running `subnet`.

    `bindings` maps inner names to outer ones (default: identity over the subnet's outer
    inputs and outputs).  Returns the workspace-stack blob.
    """
    if bindings is None:
        scope = _scope(net, lexical_scope)
        b_in, b_out = get_external_blob_names(subnet, scope | set(get_external_blob_names(subnet)[0]))
        bindings = {b: b for b in dict.fromkeys(b_in + b_out)}
        inputs, outputs = (b_in, b_out) if inputs is None else (inputs, outputs)
    inputs, outputs = [str(b) for b in inputs or ()], [str(b) for b in outputs or ()]
    if ws_blob is None:
        ws_blob = str(net.NextScopedBlob(f"{net.Name()}/workspace_do"))
        net.CreateScope([], [ws_blob])
    ordered = inputs + outputs
    net.Do([*inputs, ws_blob], [*outputs, ws_blob], net=_proto(subnet), inner_blobs=list(bindings),
           outer_blobs_idx=[ordered.index(o) for o in bindings.values()],
           reuse_workspace=bool(reuse_workspace) or None)
    return ws_blob
