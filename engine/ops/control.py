"""Control flow: CreateScope, HasScope, Do, If, While (kernels that yield their subnet runs).

Every subnet execution is a ``yield SubnetRun(...)`` (:mod:`engine.plans`): the executor runs
each whole, the debugger steps into it.  Gradients are :mod:`engine.control_ops_grad`.
"""
from __future__ import annotations

import numpy as np

from engine.control_ops_grad import (carried_names, do_bindings, gen_do_gradient, gen_if_gradient,
                                     gen_while_gradient, snapshot_name)
from engine.errors import ExecutionError
from engine.plans import SubnetRun
from engine.registry import gradient, kernel
from engine.workspace import WorkspaceStack

MAX_WHILE_ITERATIONS = 1_000_000
"""A While stops with an ExecutionError after this many iterations (op arg ``max_iterations`` overrides)."""


def _where(ctx) -> str:
    return f"{ctx.net_name or '<op>'}: op #{ctx.index} {ctx.op.type} '{ctx.op.name}'"


def _condition(ctx, value) -> bool:
    """A one-element tensor read as bool (Caffe2: "Invalid condition in If operator: ...")."""
    if not hasattr(value, "shape"):
        raise ExecutionError(f"{_where(ctx)}: Invalid condition in {ctx.op.type} operator: tensor expected")
    if value.size != 1:
        raise ExecutionError(f"{_where(ctx)}: Invalid condition in {ctx.op.type} operator: single value expected")
    return bool(np.asarray(value).reshape(-1)[0])


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
                                 "(op arg max_iterations or engine.ops.control.MAX_WHILE_ITERATIONS)")
        yield SubnetRun(loop_net, ws, f"iteration {k}", "loop_net")
        k += 1


# ---- gradients ----

# NOTE: Python-registered in Caffe2 (control_ops_grad); CreateScope/HasScope: should_not_do (ops/util).
gradient("Do")(gen_do_gradient)
gradient("If")(gen_if_gradient)
gradient("While")(gen_while_gradient)

# ---- shapes ----
