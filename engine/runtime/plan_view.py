"""PlanDefs for the debugger, ``netviz info`` and ``netviz run``, on top of :mod:`engine.runtime.plandef`.

A plan file opens as a tree of its execution steps (substeps, ``num_iter``, ``should_stop_blob``,
report nets, concurrent substeps, which netviz runs in order) and runs with Caffe2's ``RunPlan``
semantics (:func:`engine.runtime.plandef.events`).  The TUI and debugger see a plan as a net of its steps
(:func:`plan_program`: one ``ExecutionStep`` op per step, its nets as net arguments), which
:mod:`engine.debugger.plan` steps with RunPlan's semantics, a frame per net run.  :func:`plan_model`
is the one-net view: the net run most often (the training net) as the predict net, the nets
running once before it (the init nets) as its init net.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import ModelError
from engine.model.modelio import Model
from proto import caffe2_pb2

__all__ = ["is_plan_file", "plan_lines", "plan_model", "plan_program", "plan_shapes", "step_op", "step_summary",
           "STEP_OP", "PlanRun", "run_plan_steps"]

STEP_OP = "ExecutionStep"
"""Type of the ops of :func:`plan_program` (not a Caffe2 op: only the plan debugger runs them)."""


def is_plan_file(path: str | Path) -> bool:
    """Whether `path` holds a PlanDef: text that parses as one with execution steps, or a binary
    file whose name says ``plan`` (binary NetDefs also parse as PlanDefs)."""
    p = Path(path)
    if not p.is_file():
        return False
    text = p.suffix in (".pbtxt", ".txt", ".prototxt")
    if not text and "plan" not in p.name.lower():
        return False
    # NOTE: a text file's execution steps are written ``execution_step`` (and one read as binary, which
    # load_plan tries first, has a tag 0x1A, or a longer one ending in 0x00): a net's text file has none,
    # and opening it needs neither the plan runner nor a second parse
    if text:
        try:
            data = p.read_bytes()
        except OSError:
            return False
        if all(token not in data for token in (b"execution_step", b"\x1a", b"\x00")):
            return False
    from engine.runtime.plandef import load_plan  # noqa: PLC0415 (the TUI opens a net without the plan runner)
    try:
        plan = load_plan(p)
    except ModelError:
        return False
    return bool(len(plan.execution_step))


def _step_lines(step: caffe2_pb2.ExecutionStep, depth: int) -> Iterator[str]:
    pad = "  " * depth
    how = []
    if step.HasField("num_iter"):
        how.append(f"num_iter={step.num_iter}")
    if step.HasField("should_stop_blob"):
        how.append(f"until {step.should_stop_blob}" + (" (only once)" if step.only_once else ""))
    if step.HasField("create_workspace") and step.create_workspace:
        how.append("own workspace")
    if step.HasField("run_every_ms"):
        how.append(f"reporter every {step.run_every_ms} ms")
    if step.concurrent_substeps and len(step.substep) > 1:
        how.append("concurrent substeps: run in order here")
    if step.num_concurrent_instances > 1:
        how.append(f"{step.num_concurrent_instances} concurrent instances: run one after another here")
    yield f"{pad}step {step.name!r}" + (f" ({', '.join(how)})" if how else "")
    for net in step.network:
        yield f"{pad}  net {net}"
    if step.HasField("report_net"):
        yield f"{pad}  report net {step.report_net} every {step.report_interval} s"
    for sub in step.substep:
        yield from _step_lines(sub, depth + 1)


def plan_lines(plan: caffe2_pb2.PlanDef) -> list[str]:
    """The plan as indented text: its nets (op counts) and its steps as a tree.

    Examples
    --------
    >>> p = caffe2_pb2.PlanDef(name="p", network=[caffe2_pb2.NetDef(name="train")])
    >>> _ = p.execution_step.add(name="loop", network=["train"], num_iter=3)
    >>> plan_lines(p)
    ["plan 'p': 1 nets, 1 steps", "  net 'train': 0 ops", "step 'loop' (num_iter=3)", '  net train']
    """
    out = [f"plan {plan.name!r}: {len(plan.network)} nets, {len(plan.execution_step)} steps"]
    out += [f"  net {n.name!r}: {len(n.op)} ops" for n in plan.network]
    for step in plan.execution_step:
        out.extend(_step_lines(step, 0))
    return out


def _runs(step: caffe2_pb2.ExecutionStep, times: int, out: list[tuple[str, int]]) -> None:
    """(net, how many times it runs) in plan order; a should_stop loop counts as many."""
    n = step.num_iter if step.HasField("num_iter") else (2 if step.HasField("should_stop_blob") else 1)
    for net in step.network:
        out.append((net, times * n))
    for sub in step.substep:
        _runs(sub, times * n, out)


def plan_model(plan: caffe2_pb2.PlanDef, path: Path | None = None) -> Model:
    """A model to step: the first net that runs more than once (else the last), as the predict net;
    the nets running once before it, merged, as its init net.

    Raises
    ------
    ModelError
        The plan runs no net.
    """
    runs: list[tuple[str, int]] = []
    for step in plan.execution_step:
        _runs(step, 1, runs)
    if not runs:
        raise ModelError(f"plan {plan.name!r}: no execution step runs a net")
    nets = {n.name: n for n in plan.network}
    main = next((k for k, (_, n) in enumerate(runs) if n > 1), len(runs) - 1)
    name = runs[main][0]
    if name not in nets:
        raise ModelError(f"plan {plan.name!r}: step uses undefined net {name}")
    init = caffe2_pb2.NetDef(name=f"{plan.name}_init")
    for before, _ in runs[:main]:
        if before in nets:
            init.op.extend(nets[before].op)
    return Model(nets[name], init, {}, path, None)


def step_op(step: caffe2_pb2.ExecutionStep, nets: dict[str, caffe2_pb2.NetDef]) -> caffe2_pb2.OperatorDef:
    """A step as an op of a plan program: its nets (report net included) or, per substep, a one-op
    net of that substep's step op, as net arguments; how it repeats as plain arguments."""
    op = caffe2_pb2.OperatorDef(type=STEP_OP, name=step.name)
    for field in ("num_iter", "report_interval", "run_every_ms", "num_concurrent_instances"):
        if step.HasField(field):
            op.arg.add(name=field, i=getattr(step, field))
    for field in ("should_stop_blob", "report_net"):
        if step.HasField(field):
            op.arg.add(name=field, s=getattr(step, field).encode())
    if step.concurrent_substeps:
        op.arg.add(name="concurrent_substeps", i=1)
    held = dict.fromkeys([*step.network, *([step.report_net] if step.HasField("report_net") else [])])
    for name in held:
        if name in nets:
            op.arg.add(name=name, n=nets[name])
    for sub in step.substep:
        op.arg.add(name=sub.name, n=caffe2_pb2.NetDef(name=sub.name, op=[step_op(sub, nets)]))
    return op


def step_summary(op: caffe2_pb2.OperatorDef) -> str:
    """How a step op (:func:`step_op`) repeats, for its row: ``×20``, ``until stop``,
    ``concurrent: run in order``, ``every 100 ms``; empty for a step run once."""
    args = {a.name: a for a in op.arg}
    parts = [f"×{args['num_iter'].i}"] if "num_iter" in args and args["num_iter"].i != 1 else []
    if "should_stop_blob" in args:
        parts.append(f"until {args['should_stop_blob'].s.decode()}")
    if "concurrent_substeps" in args or args.get("num_concurrent_instances", caffe2_pb2.Argument(i=1)).i > 1:
        parts.append("concurrent: run in order")
    if "run_every_ms" in args:
        parts.append(f"every {args['run_every_ms'].i} ms")
    return " · ".join(parts)


def plan_program(plan: caffe2_pb2.PlanDef) -> caffe2_pb2.NetDef:
    """The plan as a net of step ops (:func:`step_op`), one per top-level execution step: what the
    plan debugger (:mod:`engine.debugger.plan`) steps through and the TUI shows as the step tree."""
    nets = {n.name: n for n in plan.network}
    return caffe2_pb2.NetDef(name=plan.name or "plan", op=[step_op(s, nets) for s in plan.execution_step])


def plan_shapes(plan: caffe2_pb2.PlanDef, inputs: dict[str, Any] | None = None) -> dict[tuple[Any, ...], dict]:
    """Shape infos of every net of `plan` (:func:`engine.runtime.inference.infer_net_shapes`), keyed by its net
    path in :func:`plan_program` (``("op", 1, "mlp_train")``); each net sees the last versions the
    nets before it (in step order, each once) made.  A net whose inference fails is left out."""
    from engine.errors import NetvizError
    from engine.runtime.inference import infer_net_shapes

    nets = {n.name: n for n in plan.network}
    env: dict[str, Any] = dict(inputs or {})
    table: dict[tuple[Any, ...], dict] = {}

    def visit(step: caffe2_pb2.ExecutionStep, prefix: tuple[Any, ...], index: int) -> None:
        held = [*step.network, *([step.report_net] if step.HasField("report_net") else [])]
        for name in dict.fromkeys(held):
            key = (*prefix, index, name)
            if name not in nets or key in table:
                continue
            try:
                found = infer_net_shapes(nets[name], env)
            except NetvizError:
                continue
            for sub, infos in found.items():
                table[(*key, *sub[1:]) if sub else key] = infos
            env.update({blob: info for (blob, _), info in sorted(found.get((), {}).items(), key=lambda kv: kv[0][1])})
        for sub in step.substep:
            visit(sub, (*prefix, index, sub.name), 0)

    for i, step in enumerate(plan.execution_step):
        visit(step, ("op",), i)
    return table


@dataclass(frozen=True, slots=True)
class PlanRun:
    """One net run of a plan: where (step path, iteration), which net, how long it took."""

    step_path: tuple[str, ...]
    iteration: int
    net: str
    wall_s: float
    report: bool = False


def run_plan_steps(plan: caffe2_pb2.PlanDef, ws: object) -> Iterator[PlanRun]:
    """Run `plan` in `ws` with Caffe2's RunPlan semantics, yielding each net run once it is done."""
    from engine.runtime.plandef import events  # noqa: PLC0415

    gen = events(plan, ws)
    prev, start = None, 0.0
    for ev in gen:
        now = time.perf_counter()
        if prev is not None:
            yield PlanRun(prev.step_path, prev.iteration, prev.net, now - start, prev.report)
        prev, start = ev, now
    if prev is not None:
        yield PlanRun(prev.step_path, prev.iteration, prev.net, time.perf_counter() - start, prev.report)
