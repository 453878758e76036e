"""PlanDefs: load them and run them with Caffe2's ``RunPlan`` semantics.

A plan holds nets and a list of execution steps.  A step either runs nets or substeps (never
both), ``num_iter`` times (default once), or — with ``should_stop_blob`` — until that scalar bool
blob is true (checked after every net or substep; ``only_once`` runs one iteration).  A step with
``create_workspace`` runs in a fresh child workspace; ``report_net`` (every ``report_interval``
seconds) and substeps with ``run_every_ms`` are reporters.

One semantics, two drivers: :func:`events` is a generator that yields a :class:`PlanEvent` before
every net it runs (the debugger and ``netviz info`` walk it), :func:`run_plan` drives it to the end
(``workspace.RunPlan``).

``run_plan`` runs ``concurrent_substeps`` (and ``num_concurrent_instances`` copies) on threads,
as Caffe2 does: producers and consumers of a blobs queue meet there (queue ops block, see
:mod:`engine.runtime.blocking`); the first failure stops the other substeps at their next iteration and
is raised once all have ended.  :func:`events` (the debugger, ``netviz info``/``run``) runs them in
order on one thread, labelled so, so its steps are deterministic.  Where netviz differs
(docs/fidelity.md): reporters run on the plan's thread, each when its interval has passed between
iterations and once when its step ends (Caffe2 runs them on timer threads, at least once).

Example::

    plan = load_plan("train_plan.pbtxt")
    for ev in events(plan, ws):          # or: run_plan(plan, ws)
        print(ev.step_path, ev.iteration, ev.net)
"""
from __future__ import annotations

import threading
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import text_format

from engine.runtime import blocking
from engine.errors import ExecutionError, ModelError
from proto import caffe2_pb2

__all__ = ["PlanEvent", "load_plan", "as_plan", "walk_steps", "events", "run_plan", "BackgroundPlan"]


@dataclass(frozen=True)
class PlanEvent:
    """About to run net `net` (a name in the plan) in iteration `iteration` of the innermost step.

    ``step_path`` is the names of the steps from the plan's top step down; ``workspace`` is where
    the net runs (a child one under a ``create_workspace`` step); ``report`` is True for a
    report net or a ``run_every_ms`` substep's net.
    """

    step_path: tuple[str, ...]
    iteration: int
    net: str
    workspace: Any
    report: bool = False


def load_plan(path: str | Path) -> caffe2_pb2.PlanDef:
    """A PlanDef from a binary ``.pb`` or a text ``.pbtxt`` file (whichever parses).

    Raises
    ------
    ModelError
        The file is missing or holds no PlanDef.
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise ModelError(f"{p}: cannot read plan ({e.strerror})") from None
    plan = caffe2_pb2.PlanDef()
    try:
        plan.ParseFromString(data)
        if plan.name or len(plan.network) or len(plan.execution_step):
            return plan
    except Exception:  # noqa: BLE001 - fall back to text format
        pass
    try:
        return text_format.Parse(data.decode("utf-8"), caffe2_pb2.PlanDef())
    except (UnicodeDecodeError, text_format.ParseError) as e:
        raise ModelError(f"{p}: not a PlanDef ({str(e).splitlines()[0]})") from None


def as_plan(obj: Any) -> caffe2_pb2.PlanDef:
    """A PlanDef from a PlanDef, a ``core.Plan``, an ExecutionStep proto or bytes.

    A ``core.ExecutionStep`` builder (whose nets a plan must carry) becomes a plan in
    :func:`engine.caffe2.workspace.RunPlan`, where the builders live."""
    if isinstance(obj, bytes):
        return caffe2_pb2.PlanDef.FromString(obj)
    proto = obj.Proto() if hasattr(obj, "Proto") else obj
    if isinstance(proto, caffe2_pb2.ExecutionStep):
        return caffe2_pb2.PlanDef(name=proto.name, execution_step=[proto])
    if not isinstance(proto, caffe2_pb2.PlanDef):
        raise TypeError(f"not a plan: {type(obj).__name__}")
    return proto


def walk_steps(plan: caffe2_pb2.PlanDef) -> Iterator[tuple[tuple[str, ...], caffe2_pb2.ExecutionStep]]:
    """Every step of `plan`, depth first, with its path of step names (for ``netviz info``)."""
    def visit(step: caffe2_pb2.ExecutionStep, path: tuple[str, ...]) -> Iterator:
        yield path + (step.name,), step
        for sub in step.substep:
            yield from visit(sub, path + (step.name,))
    for step in plan.execution_step:
        yield from visit(step, ())


def _should_stop(ws: Any, name: str | None) -> bool:
    """The step's stop blob: False when absent or never written, else its scalar bool value."""
    if name is None or not ws.has_blob(name):
        return False
    v = ws.values[name]
    if not hasattr(v, "shape"):
        return False
    import numpy as np  # noqa: PLC0415 (only a running plan reads values: the TUI opens one without numpy)

    arr = np.asarray(v)
    if arr.dtype != np.bool_ or arr.size != 1:
        raise ExecutionError(f"should_stop_blob {name}: expects a scalar boolean")
    return bool(arr.reshape(-1)[0])


class _Runner:
    """The state of one RunPlan: the plan's nets and which existing nets must be recreated once."""

    def __init__(self, plan: caffe2_pb2.PlanDef, threads: bool = False) -> None:
        self.plan, self.threads = plan, threads
        self.failed = threading.Event()  # a concurrent substep failed: the others stop
        self.net_defs: dict[str, caffe2_pb2.NetDef] = {}
        for n in plan.network:
            if n.name in self.net_defs:
                raise ExecutionError(f"plan {plan.name}: Your plan contains networks of the same name "
                                     f"\"{n.name}\", which should not happen.")
            self.net_defs[n.name] = n
        self.override: set[str] = set()

    def net(self, ws: Any, step: caffe2_pb2.ExecutionStep, name: str) -> str:
        if name not in self.net_defs:
            raise ExecutionError(f"plan {self.plan.name}: ExecutionStep {step.name} uses undefined net {name}")
        if name in self.override or name not in ws.nets:
            ws.create_net(self.net_defs[name], True)
            self.override.discard(name)
        return name

    def precreate(self, step: caffe2_pb2.ExecutionStep, ws: Any) -> None:
        """Create the nets of substeps that share `ws`, as Caffe2 compiles them with their parent
        (so blobs their nets write exist before a ``should_stop_blob`` is looked up)."""
        for sub in step.substep:
            if not sub.create_workspace:
                for n in [*sub.network, *([sub.report_net] if sub.HasField("report_net") else [])]:
                    self.net(ws, sub, n)
                self.precreate(sub, ws)

    def step(self, step: caffe2_pb2.ExecutionStep, ws: Any, path: tuple[str, ...]) -> Generator[PlanEvent, None, None]:
        path = path + (step.name,)
        if step.create_workspace:
            ws = ws.child(step.name)
        if len(step.substep) and len(step.network):
            raise ExecutionError(f"step {step.name}: An ExecutionStep should either have substep or networks "
                                 "but not both.")
        nets = [self.net(ws, step, n) for n in step.network]
        self.precreate(step, ws)
        stop = step.should_stop_blob if step.HasField("should_stop_blob") else None
        if stop is not None and not ws.has_blob(stop):
            raise ExecutionError(f"step {step.name}: blob {stop} does not exist")
        if stop is not None and step.HasField("num_iter"):
            raise ExecutionError(f"step {step.name}: Must not specify num_iter if should_stop_blob is set")
        if stop is None and step.HasField("only_once"):
            raise ExecutionError(f"step {step.name}: only_once without should_stop_blob is not supported")
        if step.HasField("report_net") and not step.HasField("report_interval"):
            raise ExecutionError(f"step {step.name}: A report_interval must be provided if report_net is set.")
        report = self.net(ws, step, step.report_net) if step.HasField("report_net") else None
        reporters = [s for s in step.substep if s.HasField("run_every_ms")]
        substeps = [s for s in step.substep if not s.HasField("run_every_ms")]
        copies = step.num_concurrent_instances if step.num_concurrent_instances > 1 else 1
        concurrent = copies > 1 or (step.concurrent_substeps and len(substeps) > 1)
        if stop is not None:
            iterations = 1 if step.only_once else None
        else:
            iterations = step.num_iter if step.HasField("num_iter") else 1
        intervals = [step.report_interval * 1e3] * (report is not None) + [s.run_every_ms for s in reporters]
        last = time.monotonic()

        def reports(final: bool) -> Generator[PlanEvent, None, None]:
            nonlocal last
            if not intervals or not (final or (time.monotonic() - last) * 1e3 >= min(intervals)):
                return
            last = time.monotonic()
            if report is not None:
                yield PlanEvent(path, 0, report, ws, report=True)
                ws.run_net(report)
            for sub in reporters:
                yield from self.step(sub, ws, path)

        it = 0
        while (iterations is None or it < iterations) and not self.failed.is_set():
            if nets:
                for name in nets:
                    yield PlanEvent(path, it, name, ws)
                    ws.run_net(name)
                    if _should_stop(ws, stop):
                        yield from reports(True)
                        return
            elif concurrent and self.threads:
                self.concurrently(substeps * copies, ws, path)
                if _should_stop(ws, stop):
                    yield from reports(True)
                    return
            else:
                for _ in range(copies):
                    for sub in substeps:
                        yield from self.step(sub, ws, path)
                        if not concurrent and _should_stop(ws, stop):
                            yield from reports(True)
                            return
                if _should_stop(ws, stop):
                    yield from reports(True)
                    return
            it += 1
            yield from reports(False)
        yield from reports(True)


    def concurrently(self, steps: list[caffe2_pb2.ExecutionStep], ws: Any, path: tuple[str, ...]) -> None:
        """Run `steps` on one thread each and wait for all; re-raise the first failure."""
        errors: list[BaseException] = []

        def work(sub: caffe2_pb2.ExecutionStep) -> None:
            try:
                for _ in self.step(sub, ws, path):
                    pass
            except BaseException as e:  # noqa: BLE001 - handed to the plan's thread
                errors.append(e)
                self.failed.set()

        threads = [threading.Thread(target=work, args=(sub,), name=f"plan step {sub.name}", daemon=True)
                   for sub in steps]
        for t in threads:
            t.start()
        blocking.join_all(threads)
        if errors:
            raise errors[0]


def events(plan: caffe2_pb2.PlanDef, ws: Any, *, threads: bool = False) -> Generator[PlanEvent, None, None]:
    """Run `plan` in workspace `ws`, yielding a :class:`PlanEvent` before each net runs (with
    `threads`, concurrent substeps run on threads and their nets yield no events).

    Raises
    ------
    ExecutionError
        A malformed step (undefined net, missing stop blob, both nets and substeps, …) or a failing op.
    """
    runner = _Runner(plan, threads)
    runner.override = {n for n in runner.net_defs if n in ws.nets}
    for step in plan.execution_step:
        yield from runner.step(step, ws, ())


def run_plan(plan: caffe2_pb2.PlanDef, ws: Any) -> bool:
    """Caffe2's ``RunPlan``: run every step of `plan` in `ws` (concurrent substeps on threads);
    True, or raises on a failing op."""
    for _ in events(plan, ws, threads=True):
        pass
    return True


class BackgroundPlan:
    """``workspace.RunPlanInBackground``: the plan runs on a thread; poll ``is_done()``."""

    def __init__(self, plan: caffe2_pb2.PlanDef, ws: Any) -> None:
        self._ok: bool | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(plan, ws), daemon=True)
        self._thread.start()

    def _run(self, plan: caffe2_pb2.PlanDef, ws: Any) -> None:
        try:
            self._ok = run_plan(plan, ws)
        except Exception as e:  # noqa: BLE001 - reported through is_succeeded()
            self.error, self._ok = e, False

    def is_done(self) -> bool:
        return not self._thread.is_alive()

    def is_succeeded(self) -> bool:
        blocking.join_all([self._thread])
        return bool(self._ok)
