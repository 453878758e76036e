"""Stepping a PlanDef: its execution steps are ops of a program, its net runs are frames.

A plan becomes a program (:func:`engine.runtime.plan_view.plan_program`): one ``ExecutionStep`` op per
top-level step, holding its nets (or, per substep, a one-op net of that substep's step op) as
net arguments, so views show the step tree like any control-flow op's subnets.  A step op is a
plan op for the frame machinery (:mod:`engine.runtime.plans`): entering it drives
:mod:`engine.runtime.plandef`'s RunPlan runner for that step and pushes one frame per net run (label
``train iteration 3 · net mlp_train``) and one per substep.  The runner is the same code
``workspace.RunPlan`` uses — only its ``run_net`` is left to the frames and its substeps become
frames — so ``num_iter``, ``should_stop_blob``/``only_once``, ``create_workspace``, report nets and
reporters, and concurrent substeps (run in order, labelled so) behave exactly as in a run.

Moves: ``s`` on a step op enters its first net run (or substep), ``n`` runs it whole, and inside a
net run ``f`` finishes that iteration, stopping at the start of the next one (:meth:`step_out`).
"""
from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.runtime import device as dev
from engine.runtime import executor
from engine.debugger.debugger import Debugger
from engine.debugger.machine import _Frame
from engine.debugger.records import Stopped
from engine.model.modelio import Model
from engine.runtime.plan_view import plan_program, step_op
from engine.runtime.plandef import PlanEvent, _Runner, walk_steps
from engine.runtime.plans import SubnetRun
from proto import caffe2_pb2

__all__ = ["PlanDebugger"]


class _Stepped:
    """A workspace as the RunPlan runner sees it under the debugger: every call goes to the real
    workspace except ``run_net`` (the debugger's frame has just run that net, op by op)."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def run_net(self, name: str, num_iter: int = 1, allow_fail: bool = False) -> bool:
        return True

    def child(self, name: str = "child") -> _Stepped:
        return _Stepped(self.real.child(name))


@dataclass(frozen=True)
class _Substep:
    """The runner reached substep `step` (in workspace `ws`, under step path `path`)."""

    step: caffe2_pb2.ExecutionStep
    ws: _Stepped
    path: tuple[str, ...]


class _StepRunner(_Runner):
    """RunPlan's runner whose substeps are not run inline but handed to the debugger as frames."""

    def step(self, step: caffe2_pb2.ExecutionStep, ws: Any, path: tuple[str, ...]) -> Generator[Any, None, None]:
        yield _Substep(step, ws, path)

    def run(self, step: caffe2_pb2.ExecutionStep, ws: Any, path: tuple[str, ...]) -> Generator[Any, None, None]:
        """The step itself, with RunPlan's semantics."""
        return _Runner.step(self, step, ws, path)


class PlanDebugger(Debugger):
    """A :class:`~engine.debugger.Debugger` over a whole PlanDef (see the module docstring).

    Parameters
    ----------
    plan : PlanDef
        The plan (:func:`engine.runtime.plandef.load_plan`).
    path : Path, optional
        Where it was loaded from (relative DB paths of its Load/Save ops resolve beside it).
    **kwargs
        As :class:`~engine.debugger.Debugger` (device, budgets, seed…).
    """

    #: a step is undone whole by ``u`` (its runner's net-run marks are not replayed: Machine._replay_units)
    replay_into_subnets = False

    def __init__(self, plan: caffe2_pb2.PlanDef, path: Path | None = None, **kwargs: Any) -> None:
        self.plan = plan
        self.program = plan_program(plan)
        self._concurrent = {p + (sub.name,) for p, s in walk_steps(plan)
                            if s.concurrent_substeps and len(s.substep) > 1 for sub in s.substep}
        # NOTE: init_path = the plan's path: relative DB paths of Load/Save resolve beside it
        model = Model(self.program, caffe2_pb2.NetDef(name=f"{plan.name}_init"), {}, path, path)
        super().__init__(model, **kwargs)
        # NOTE: a step frame's end is where its next substep or iteration starts: a move of its own
        self.skip_end_stops = False

    def restart(self) -> Stopped:
        """A fresh workspace and runner; the pc at the first step (the plan's nets are created
        as RunPlan creates them, when their step starts)."""
        self._runner = _StepRunner(self.plan)
        #: every net run entered so far: (step path, iteration, net, is a report net), RunPlan's order
        self.net_runs: list[tuple[tuple[str, ...], int, str, bool]] = []
        self._run_marks: list[tuple[int, str]] = []  # per net run: (records before it, its frame label)
        # the frames' nets that hold step ops: id → (net, [(step, workspace proxy or None, path)])
        self._steps: dict[int, tuple[caffe2_pb2.NetDef, list[tuple[Any, Any, tuple[str, ...]]]]] = {}
        stop = super().restart()
        self._register(self.frames[0].net, [(s, None, ()) for s in self.plan.execution_step])
        return stop

    def _register(self, net: caffe2_pb2.NetDef, steps: list[tuple[Any, Any, tuple[str, ...]]]) -> None:
        self._steps[id(net)] = (net, steps)

    def bind_ahead(self, stop: Any, chunk: int = 0) -> int:
        """Nothing: the main frame's ops are steps, bound as the runner reaches them (:meth:`_bound`)."""
        return 0

    def _bound(self, f: _Frame) -> executor.BoundOp:
        entry = self._steps.get(id(f.net))
        if entry is None or entry[0] is not f.net:
            return super()._bound(f)
        b = f.bound.get(f.pc)
        if b is None:
            step, ws, path = entry[1][f.pc]
            ws = ws if ws is not None else _Stepped(f.ws)
            b = f.bound[f.pc] = executor.BoundOp(
                f.pc, f.net.op[f.pc], f.net.name, lambda xp, s=step, w=ws, p=path: self._step_plan(s, w, p),
                np, {}, (), (), dev.CPU, (), (), False, None, True)
        return b

    def _step_plan(self, step: caffe2_pb2.ExecutionStep, ws: _Stepped,
                   path: tuple[str, ...]) -> Generator[SubnetRun, None, None]:
        """The step as a plan op: a frame per net run and per substep, in RunPlan's order."""
        for ev in self._runner.run(step, ws, path):
            if isinstance(ev, _Substep):
                net = caffe2_pb2.NetDef(name=ev.step.name, op=[step_op(ev.step, self._runner.net_defs)])
                self._register(net, [(ev.step, ev.ws, ev.path)])
                where = ev.path + (ev.step.name,)
                note = " (concurrent in Caffe2: run in order here)" if where in self._concurrent else ""
                kind = "reporter " if ev.step.HasField("run_every_ms") else ""
                yield SubnetRun(net, ev.ws.real, f"{kind}step {ev.step.name}{note}", ev.step.name)
            else:
                assert isinstance(ev, PlanEvent)
                what = "report net" if ev.report else f"{ev.step_path[-1]} iteration {ev.iteration} · net"
                self.net_runs.append((ev.step_path, ev.iteration, ev.net, ev.report))
                self._run_marks.append((len(self.records), f"{what} {ev.net}"))
                yield SubnetRun(self._runner.net_defs[ev.net], ev.workspace.real, f"{what} {ev.net}", ev.net)
        return None

    def step_back(self) -> Stopped:
        """Undo the last op (or, at the start of a net run, its whole step: a RunPlan step cannot
        be rewound part-way); :attr:`net_runs` forgets the runs undone."""
        stop = super().step_back()
        n, here = len(self.records), self.frames[-1].label if len(self.frames) > 1 else None
        keep = len(self._run_marks)
        while keep and not (self._run_marks[keep - 1][0] < n or self._run_marks[keep - 1] == (n, here)):
            keep -= 1
        del self.net_runs[keep:], self._run_marks[keep:]
        return stop

    def _in_net_run(self) -> bool:
        """Whether the innermost frame is a net run (or substep) that a step op pushed."""
        if len(self.frames) < 2:
            return False
        entry = self._steps.get(id(self.frames[-2].net))
        return entry is not None and entry[0] is self.frames[-2].net

    def step_out(self) -> Stopped:
        """Inside a net run of a step: finish this iteration (stop at the start of the step's next
        net run or substep, or after the step when it was the last); elsewhere as the debugger's."""
        if not self._in_net_run():
            return super().step_out()
        depth = len(self.frames)
        return self._run(lambda ev, d: d < depth or (d == depth and ev == "next"))
