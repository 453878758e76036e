"""Kernels that run subnets say *which* subnet runs next instead of running it.

(PlanDefs — ``workspace.RunPlan``, execution steps — are :mod:`engine.runtime.plandef`; their builders,
``core.Plan``/``core.ExecutionStep``, are :mod:`engine.caffe2.plan_builder`.)

A control-flow kernel (If, While, Do, RecurrentNetwork and their gradients) is written as a
generator: it ``yield``s a :class:`SubnetRun` for every subnet execution it needs, in order,
and ``return``s its outputs (or None when its subnets wrote them).  One semantics, two drivers:

* the executor drives the generator to completion, running each subnet whole
  (:func:`drive`);
* the debugger drives the same generator one step at a time, pushing a frame per
  ``SubnetRun``, so a user can step into the taken If branch, While iteration k, the Do net
  or RNN timestep t — forward or gradient op alike — and see exactly what the kernel does.

Example::

    @kernel("If", needs_context=True)
    def if_(xp, cond, *rest, ctx, then_net, else_net=None):
        if bool(cond.reshape(-1)[0]):
            yield SubnetRun(then_net, ctx.workspace, "then_net", "then_net")
        elif else_net is not None:
            yield SubnetRun(else_net, ctx.workspace, "else_net", "else_net")

Two markers a kernel may return for an output live here too, below every op family:
:data:`UNCHANGED` and :data:`EMPTY`.
"""
from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from proto import caffe2_pb2


@dataclass(frozen=True, slots=True)
class SubnetRun:
    """One subnet execution asked for by a control-flow kernel.

    Attributes
    ----------
    net : NetDef
        The subnet to run.
    workspace : Workspace
        Where it runs (the op's own for If/While; a child for Do and RNN steps).
    label : str
        What a user sees in the program counter: ``"then_net"``, ``"iteration 3"``,
        ``"timestep 2"``, ``"cond_net"``.
    arg : str
        The op argument holding the net (``then_net``, ``loop_net``, ``step_net``…).
    """

    net: caffe2_pb2.NetDef
    workspace: Any
    label: str
    arg: str


Plan = Generator[SubnetRun, None, Any]

UNCHANGED = type("Unchanged", (), {"__repr__": lambda self: "UNCHANGED", "__slots__": ()})()
"""An output a kernel leaves as it is (a Load that did not find it, a dequeue from a closed queue):
the executor stores nothing, so another thread's write to that blob meanwhile is not undone."""

EMPTY = type("Empty", (), {"__repr__": lambda self: "EMPTY", "__slots__": ()})()
"""A created but never written blob (Caffe2's uninitialized blob): what a workspace holds after
``CreateBlob`` and what a kernel returns for an output it creates without a value."""


def drive(plan: Plan, run_subnet: Callable[[SubnetRun], None]) -> Any:
    """Run every subnet `plan` asks for with `run_subnet`; return the plan's return value."""
    try:
        step = next(plan)
        while True:
            run_subnet(step)
            step = plan.send(None)
    except StopIteration as stop:
        return stop.value
