"""Control flow: CreateScope, HasScope, Do, If, While, ONNXWhile (kernels that yield their subnet runs).

Every subnet execution is a ``yield SubnetRun(...)`` (:mod:`engine.runtime.plans`): the executor runs
each whole, the debugger steps into it.  Gradients are :mod:`engine.runtime.control_ops_grad`.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from engine.runtime.device import to_host
from engine.runtime.control_ops_grad import (carried_names, do_bindings, gen_do_gradient, gen_if_gradient,
                                     gen_while_gradient, snapshot_name)
from engine.errors import ExecutionError
from engine.runtime.plans import SubnetRun
from engine.catalogue.registry import gradient, kernel, shape
from engine.runtime.shapes import BOOL, OPAQUE, UNKNOWN, TensorInfo, Unknown, opaque

MAX_WHILE_ITERATIONS = 1_000_000
"""A While stops with an ExecutionError after this many iterations (op arg ``max_iterations`` overrides)."""


def _where(ctx) -> str:
    return f"{ctx.net_name or 'net'}: op #{ctx.index} {ctx.op.type} '{ctx.op.name}'"


def _condition(ctx, value) -> bool:
    """A one-element tensor read as bool (Caffe2: "Invalid condition in If operator: ...")."""
    if not hasattr(value, "shape"):
        raise ExecutionError(f"{_where(ctx)}: Invalid condition in {ctx.op.type} operator: tensor expected")
    if value.size != 1:
        raise ExecutionError(f"{_where(ctx)}: Invalid condition in {ctx.op.type} operator: single value expected")
    return bool(np.asarray(value).reshape(-1)[0])


class WorkspaceStack:
    """Child workspaces of ``Do`` ops, pushed by forward runs and popped by gradient runs.

    The value of a ``CreateScope`` blob.  Workspaces above the top are kept for reuse, as in
    Caffe2, so a net run twice does not grow the list.  It holds the runtime's workspaces (this family
    sits below :mod:`engine.runtime.workspace`, so it makes them through the parent's own methods).

    Examples
    --------
    >>> from engine.runtime.workspace import Workspace
    >>> parent = Workspace("p"); parent.feed_blob("x", np.ones(1))
    True
    >>> st = WorkspaceStack(); w = st.push_forward_workspace(parent, {"a": "x"})
    >>> w.fetch_blob("a").tolist(), st.empty()
    ([1.0], False)
    >>> st.pop_gradient_workspace(parent, {}) is w, st.empty()
    (True, True)
    """

    def __init__(self) -> None:
        self.workspaces: list[Any] = []
        self.top = -1

    def clear(self) -> None:
        """Empty the stack (``CreateScope`` run again); spare workspaces stay for reuse."""
        self.top = -1

    def snapshot(self) -> int:
        """The state the debugger saves before a control-flow op (undo restores it)."""
        return self.top

    def restore(self, state: int) -> None:
        """Undo pushes and pops since :meth:`snapshot` (popped workspaces keep their blobs)."""
        self.top = state

    def empty(self) -> bool:
        return self.top < 0

    def __len__(self) -> int:
        return self.top + 1

    def push_forward_workspace(self, parent: Any, bindings: dict[str, str]) -> Any:
        """A fresh (or recycled, emptied) child of `parent` with `bindings`, now on top."""
        self.top += 1
        name = f"{parent.name}/do_{self.top}"
        if self.top == len(self.workspaces):
            self.workspaces.append(parent.child(name, {}))
        w = self.workspaces[self.top]
        # NOTE: Caffe2 keeps a recycled workspace's locals; we empty it (same results, no stale blobs).
        w.rebind(parent, name)
        w.add_blob_mapping(bindings)
        return w

    def pop_gradient_workspace(self, parent: Any, grad_bindings: dict[str, str]) -> Any | None:
        """The top workspace with `grad_bindings` added (names defined there keep their local
        meaning), popped; None when empty."""
        if self.top < 0:
            return None
        w = self.workspaces[self.top]
        self.top -= 1
        w.add_blob_mapping(grad_bindings, skip_defined=True)
        return w

    def reuse_last_forward_workspace(self, parent: Any, bindings: dict[str, str]) -> Any:
        """The top workspace with `bindings` added (``reuse_workspace``), not pushed."""
        w = self.workspaces[self.top]
        w.add_blob_mapping(bindings, skip_defined=True)
        return w


# ---- kernels ----

@kernel("CreateScope", needs_context=True)
def create_scope(xp, *, ctx):
    # NOTE: re-running empties the stack but keeps its workspaces for reuse, as Caffe2 does.
    old = ctx.workspace.values.get(ctx.op.output[0]) if ctx.op.output else None
    if isinstance(old, WorkspaceStack):
        old.clear()
        return old
    return WorkspaceStack()


@kernel("HasScope")
def has_scope(xp, stack):
    return np.array([not stack.empty()], dtype=np.bool_)


@kernel("Do", needs_context=True)
def do(xp, *ins, ctx, net=None, reuse_workspace: int = 0, copy_external_blobs: int = 0):
    """Run `net` in a child workspace of the stack (pushed; popped for a gradient Do)."""
    op, ws = ctx.op, ctx.workspace
    try:
        bindings, _ = do_bindings(op)
    except ValueError as e:
        raise ExecutionError(f"{_where(ctx)}: {e}") from None
    stack = ins[-1]
    if not isinstance(stack, WorkspaceStack):
        raise ExecutionError(f"{_where(ctx)}: last input '{op.input[-1]}' is not a workspace stack (CreateScope)")
    for outer in op.output[:-1]:
        ws.create_blob(outer)  # NOTE: Caffe2 creates op outputs when it builds the op.
    if op.is_gradient_op:
        if reuse_workspace:
            raise ExecutionError(f"{_where(ctx)}: gradient Do cannot reuse workspace")
        child = stack.pop_gradient_workspace(ws, bindings)
        if child is None:
            raise ExecutionError(f"{_where(ctx)}: Failed to initialize Do op workspace")
    elif reuse_workspace and not stack.empty():
        child = stack.reuse_last_forward_workspace(ws, bindings)
    else:
        child = stack.push_forward_workspace(ws, bindings)
    if not op.is_gradient_op:
        for name in carried_names(net, bindings):  # netviz: the input value the gradient needs
            v = child.values[name]
            child.values.local[snapshot_name(name)] = v.copy() if hasattr(v, "copy") else v
            child.devices.local[snapshot_name(name)] = child.devices[name]
    yield SubnetRun(net, child, "net", "net")
    if copy_external_blobs and not op.is_gradient_op:
        child.copy_forwarded_tensors(list(bindings))


@kernel("If", needs_context=True)
def if_(xp, cond, *rest, ctx, then_net=None, else_net=None):
    """Run then_net or else_net in the op's own workspace."""
    if then_net is None:
        raise ExecutionError(f"{_where(ctx)}: then_net must be specified in If operator")
    if _condition(ctx, cond):
        yield SubnetRun(then_net, ctx.workspace, "then_net", "then_net")
    elif else_net is not None:
        yield SubnetRun(else_net, ctx.workspace, "else_net", "else_net")


@kernel("While", needs_context=True)
def while_(xp, cond, *rest, ctx, loop_net=None, cond_net=None, max_iterations: int = 0):
    """cond_net (if any), then loop_net while input 0 is true; at most ``max_iterations`` runs."""
    if loop_net is None:
        raise ExecutionError(f"{_where(ctx)}: loop_net must be specified in While operator")
    ws, name, cap = ctx.workspace, ctx.op.input[0], max_iterations or MAX_WHILE_ITERATIONS
    k = 0
    while True:
        if cond_net is not None:
            yield SubnetRun(cond_net, ws, "cond_net", "cond_net")
        if not _condition(ctx, ws.values[name]):
            return None
        if k >= cap:
            raise ExecutionError(f"{_where(ctx)}: While loop exceeded {cap} iterations "
                                 "(op arg max_iterations or engine.runtime.ops.control.MAX_WHILE_ITERATIONS)")
        yield SubnetRun(loop_net, ws, f"iteration {k}", "loop_net")
        k += 1


@kernel("ONNXWhile", needs_context=True)
def onnx_while(xp, max_trip_count, first_condition, *carried_in, ctx, body=None, has_trip_count: int = 0,
               has_cond: int = 0, save_scopes: int = 0, disable_scopes: int = 0, num_loop_carried_deps: int = -1):
    """ONNX Loop: `body` runs while the trip count and the condition allow.

    Body inputs are [iteration (0-d int64), condition (1 element), carried...], its outputs
    [condition, carried..., scan...]; the op gives the last carried values, then each scan output
    over the iterations (:func:`_scan_output`).  The body runs in a child
    workspace that sees no outer blob (``disable_scopes``: the op's own; ``save_scopes``: a new one
    per iteration, as Caffe2 keeps them)."""
    if body is None:
        raise ExecutionError(f"{_where(ctx)}: body net must be specified in ONNXWhile operator")
    if disable_scopes and save_scopes:
        raise ExecutionError(f"{_where(ctx)}: Cannot save scopes when disable_scopes=True")
    n = len(carried_in) if num_loop_carried_deps == -1 else num_loop_carried_deps
    ins, outs = list(body.external_input), list(body.external_output)
    n_scan = len(outs) - n - 1
    if n_scan < 0 or len(ins) < n + 2:
        raise ExecutionError(f"{_where(ctx)}: body needs inputs [iteration, condition, {n} carried] and outputs "
                             f"[condition, {n} carried, scan...]; it has {len(ins)} and {len(outs)}")
    parent = ctx.workspace
    trips = int(to_host(max_trip_count).reshape(-1)[0])  # NOTE: host scalars (the inputs may be on a GPU)
    cond_dtype = to_host(first_condition).dtype
    cond = bool(to_host(first_condition).reshape(-1)[0])

    def scope():
        return parent if disable_scopes else parent.child(f"{parent.name}/onnx_while", {})

    ws, carried, scans, i = scope(), [x.copy() for x in carried_in[:n]], [[] for _ in range(n_scan)], 0
    while (not has_trip_count or i < trips) and (not has_cond or cond):
        if i >= MAX_WHILE_ITERATIONS:
            raise ExecutionError(f"{_where(ctx)}: ONNXWhile exceeded {MAX_WHILE_ITERATIONS} iterations")
        for name, v in zip(ins[2:], carried):
            ws.values[name] = v
        ws.values[ins[0]] = xp.asarray(np.array(i, np.int64))
        ws.values[ins[1]] = xp.asarray(np.array([cond], cond_dtype))
        yield SubnetRun(body, ws, f"iteration {i}", "body")
        cond = bool(to_host(ws.values[outs[0]]).reshape(-1)[0])
        carried = [ws.values[o].copy() for o in outs[1:1 + n]]
        for k, o in enumerate(outs[1 + n:]):
            step = ws.values[o].copy()
            if scans[k] and step.shape != scans[k][0].shape:
                raise ExecutionError(f"{_where(ctx)}: Size of scan output changed across iterations")
            scans[k].append(step)
        if save_scopes:
            ws = scope()
        i += 1
    return (*carried, *(_scan_output(ctx, xp, steps) for steps in scans))


def _scan_output(ctx, xp, steps: list) -> Any:
    """A scan output as Caffe2 1.10 builds it: the first step's tensor, its dim 0 grown by one per
    later step while the steps' data are laid end to end (so (1,) steps stack to (n,), but (2,) steps
    give (n + 1,) holding the first n + 1 values); no step gives an int32 (0,) tensor."""
    if not steps:
        return xp.zeros(0, np.int32)
    if len(steps) == 1:
        return steps[0]
    first = steps[0]
    if first.ndim == 0:
        raise ExecutionError(f"{_where(ctx)}: a scan output of rank 0 cannot grow (Caffe2's Extend needs a dim)")
    shape = (first.shape[0] + len(steps) - 1, *first.shape[1:])
    return xp.concatenate([t.reshape(-1) for t in steps])[:int(np.prod(shape))].reshape(shape)


# ---- gradients ----

# NOTE: Python-registered in Caffe2 (control_ops_grad); CreateScope/HasScope: should_not_do (ops/util).
gradient("Do")(gen_do_gradient)
gradient("If")(gen_if_gradient)
gradient("While")(gen_while_gradient)

# ---- shapes ----

# NOTE: If/While outputs are what their subnets leave, which the shape driver infers by running them
# on the outer blobs (engine.runtime.inference._shared_subnets); the op itself adds nothing.
shape("If", "While")(lambda *ins, n_out: (UNKNOWN,) * n_out)
shape("CreateScope")(opaque)  # NOTE: a workspace stack
shape("HasScope")(lambda stack: TensorInfo((1,), BOOL))
shape("ONNXWhile")(opaque)  # NOTE: loop-carried and scan outputs follow the body and the trip count at run time


@shape("Do")
def do_shape(*ins, net=None, inner_blobs=(), outer_blobs_idx=(), in_names, out_names, infer_net):
    """The Do's net inferred (by the driver's `infer_net`) on its inner names bound to the outer inputs;
    each outer output gets its inner blob's final info; the workspace stack (last output) is opaque."""
    if net is None:
        raise Unknown
    name = lambda v: v.decode() if isinstance(v, bytes) else v  # noqa: E731
    outer = list(in_names[:-1]) + list(out_names[:-1])
    inner_of = {outer[i]: name(b) for b, i in zip(inner_blobs, outer_blobs_idx) if 0 <= i < len(outer)}
    given = {inner_of[n]: info for n, info in zip(in_names[:-1], ins) if n in inner_of}
    final = dict(given)
    for (blob, _v), info in sorted(infer_net(net, given)[()].items(), key=lambda kv: kv[0][1]):
        final[blob] = info
    return (*(final.get(inner_of.get(o), UNKNOWN) for o in out_names[:-1]), OPAQUE)


# ---- onnx ----
from engine.catalogue.registry import onnx_converter  # noqa: E402
from engine.model.opdef import subnets_of  # noqa: E402
from engine.model.optypes import SHARED_WORKSPACE  # noqa: E402
from engine.runtime.shapes import TensorInfo  # noqa: E402
from proto import caffe2_pb2  # noqa: E402


@onnx_converter("CreateScope")
def create_scope_onnx(c):
    """A workspace stack is no tensor: it has no ONNX value (Do's scoping is inlined)."""
    c.opaque(0)


def _scoped_outputs(c):
    """Indices of the op's tensor outputs (its workspace-stack outputs are marked opaque)."""
    keep = []
    for k, b in enumerate(c.op.output):
        if c.g.is_opaque(b):
            c.opaque(k)
        else:
            keep.append(k)
    return keep


@onnx_converter("Do")
def do_onnx(c):
    """A Do is scoping only: its net is converted inline, inner blob names bound to the outer ones
    (inner_blobs / outer_blobs_idx); the bound outputs get the inner net's final values."""
    if c.op.is_gradient_op:
        raise c.refuse("a gradient Do")
    try:
        bindings, _ = do_bindings(c.op)
    except ValueError as e:
        raise c.refuse(str(e)) from None
    scope = c.inline(c.arg("net"), bindings)
    inner_of = {outer: inner for inner, outer in bindings.items()}
    for k in _scoped_outputs(c):
        inner = inner_of.get(c.op.output[k])
        name = scope.current.get(inner) if inner is not None else None
        if name is None:
            raise c.refuse(f"output '{c.op.output[k]}' is not written by the Do's net")
        c.emit("Identity", [name], [c.y(k)])
        c.known_info(k, scope.info(name))


def _subnet_writes(nets) -> list[str]:
    """Blobs the ops of `nets` write, in first-write order, those of nested If/While subnets included
    (SHARED_WORKSPACE: a Do's or a step net's inner names are not the outer ones)."""
    seen: dict[str, None] = {}
    for net in nets:
        for op in net.op if net is not None else ():
            seen.update(dict.fromkeys(op.output))
            if op.type in SHARED_WORKSPACE:
                seen.update(dict.fromkeys(_subnet_writes([n for _, n in subnets_of(op)])))
    return list(seen)


def _unlisted_writes(c, nets, listed, scope) -> list[str]:
    """Blobs `nets` overwrite that had a value before the op but are not among its `listed` outputs.
    Caffe2 runs If/While subnets in the op's own workspace, so a hand-written op that lists no outputs
    still changes them: the ONNX If/Loop must return (carry) them too, or the loop never sees its
    counter move and runs forever in ONNX Runtime, and later ops read the values from before the op."""
    return [b for b in _subnet_writes(nets) if b not in listed and scope.lookup(b) is not None
            and not scope.is_opaque(b)]


def _onnx_condition(c, name):
    """Caffe2 reads any one-element tensor as the condition; ONNX wants a bool scalar."""
    return c.emit("Reshape", [c.emit("Cast", [name], to=9), c.const(np.zeros(0, np.int64), "scalar")])


@onnx_converter("If")
def if_onnx(c):
    """ONNX If: each branch returns the final value of every blob the op lists as written (a branch
    that leaves one alone passes its current value through; no else_net is such a branch)."""
    keep = _scoped_outputs(c)
    blobs = [c.op.output[k] for k in keep]
    infos = [c.out_info(k) for k in keep]
    else_net = c.arg("else_net")
    implicit = _unlisted_writes(c, [c.arg("then_net"), else_net], blobs, c.g)
    blobs += implicit
    infos += [c.g.info(c.g.lookup(b)) for b in implicit]
    then_g = c.subgraph([c.arg("then_net")], blobs, out_infos=infos)
    else_g = c.subgraph([else_net] if else_net is not None else [], blobs, out_infos=infos)
    outs = [c.y(k) for k in keep] + [c.g.define(b, i) for b, i in zip(implicit, infos[len(keep):])]
    c.emit("If", [_onnx_condition(c, c.x(0))], outs, then_branch=then_g, else_branch=else_g)


@onnx_converter("While")
def while_onnx(c):
    """ONNX Loop: cond_net runs once before it (Caffe2 tests the condition first), then each
    iteration runs loop_net and cond_net and continues while input 0 holds; every blob the op
    lists as written is carried (it must have a value before the loop); max_iterations caps it."""
    keep = _scoped_outputs(c)
    cond_blob = c.op.input[0]
    carried = [c.op.output[k] for k in keep]
    cond_net, loop_net = c.arg("cond_net"), c.arg("loop_net")
    first = c.inline(cond_net, {}) if cond_net is not None else c.g
    carried += _unlisted_writes(c, [loop_net, cond_net], carried + [cond_blob], first)
    if cond_blob not in carried:
        carried.append(cond_blob)
    starts = {b: first.lookup(b) for b in carried}
    unset = [b for b, n in starts.items() if n is None]
    if unset:
        raise c.refuse(f"loop-carried {', '.join(unset)} has no value before the loop")
    infos = [first.info(starts[b]) for b in carried]
    body_in = [("", c.tmp("iteration"), TensorInfo((), caffe2_pb2.TensorProto.INT64)),
               ("", c.tmp("cond_in"), TensorInfo((), caffe2_pb2.TensorProto.BOOL))]
    body_in += [(b, c.tmp(f"{b}/in"), i) for b, i in zip(carried, infos)]
    body = c.subgraph([loop_net] + ([cond_net] if cond_net is not None else []), carried,
                      inputs=body_in, out_infos=infos, cond=cond_blob)
    cap = c.arg("max_iterations", 0)
    trip = c.const(np.array(cap, np.int64), "max_iterations") if cap else ""
    outs = [c.y(k) for k in keep]
    for k in keep:
        c.known_info(k, infos[carried.index(c.op.output[k])])
    # NOTE: carried blobs the op does not list (and its condition) hold their final values after it, as in Caffe2
    outs += [c.g.define(b, i) for b, i in zip(carried[len(keep):], infos[len(keep):])]
    c.emit("Loop", [trip, _onnx_condition(c, starts[cond_blob])] + [starts[b] for b in carried], outs, body=body)
