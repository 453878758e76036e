"""Caffe2's plan builders (``core.Plan``, ``core.ExecutionStep``, ``core.execution_step``…).

They build a ``PlanDef`` the way ``caffe2.python.core`` does — same step names (``step``,
``step_1``…), same "a used step cannot change" and "nets or substeps, not both" assertions, nets
copied into the plan in the order steps use them — and :mod:`engine.runtime.plandef` runs the result.
Re-exported by :mod:`engine.caffe2.core`.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any

from engine.caffe2.core import BlobReference, Net, ScopedName
from proto import caffe2_pb2

__all__ = ["ExecutionStep", "Plan", "execution_step", "scoped_execution_step", "to_execution_step",
           "add_nets_in_order"]


def _net_name(net: Any) -> str:
    return net.Name() if isinstance(net, Net) else net.name if isinstance(net, caffe2_pb2.NetDef) else str(net)


def _add_net(nets: "OrderedDict[str, Any]", net: Any) -> bool:
    """Add `net` under its name; False when that exact net is there, AssertionError for another."""
    name = _net_name(net)
    if name in nets:
        assert nets[name] is net, f"Different nets with same name: {name}"
        return False
    nets[name] = net
    return True


class ExecutionStep:
    """One ``caffe2_pb2.ExecutionStep`` under construction, with the ``Net`` objects it uses."""

    _step_names_used: set[str] = set()

    @staticmethod
    def _get_next_step_name(basename: str) -> str:
        name, k = basename, 1
        while name in ExecutionStep._step_names_used:
            name, k = f"{basename}_{k}", k + 1
        ExecutionStep._step_names_used.add(name)
        return name

    def __init__(self, name: str | None, nets: Any = None, num_iter: int | None = None) -> None:
        self._step = caffe2_pb2.ExecutionStep(name=name or ExecutionStep._get_next_step_name("step"))
        self._net_dict: OrderedDict[str, Any] = OrderedDict()
        self._is_used = False
        self._substeps: list[ExecutionStep] = []
        for net in ([nets] if isinstance(nets, Net) else nets or []):
            if _add_net(self._net_dict, net):
                self._step.network.append(_net_name(net))
        if num_iter is not None:
            self._step.num_iter = num_iter

    def get_net(self, name: str) -> Any:
        return self._net_dict[name]

    def Name(self) -> str:
        return self._step.name

    __str__ = Name

    def _assert_can_mutate(self) -> None:
        assert not self._is_used, "Cannot mutate a step that has already been added to a plan/step."

    def _notify_is_used(self) -> None:
        self._is_used = True

    def Proto(self) -> caffe2_pb2.ExecutionStep:
        return self._step

    def HasNets(self) -> bool:
        return len(self._step.network) > 0

    def HasSubsteps(self) -> bool:
        return len(self._step.substep) > 0

    def Nets(self) -> list[Any]:
        return list(self._net_dict.values())

    def Substeps(self) -> list["ExecutionStep"]:
        return self._substeps

    def _set(self, field: str, value: Any) -> None:
        self._assert_can_mutate()
        setattr(self._step, field, value)

    def SetIter(self, num_iter: int) -> None:
        self._set("num_iter", num_iter)

    def SetCreateWorkspace(self, create_workspace: bool) -> None:
        self._set("create_workspace", create_workspace)

    def SetNumConcurrentInstances(self, n: int) -> None:
        self._set("num_concurrent_instances", n)

    def SetOnlyOnce(self, only_once: bool) -> None:
        self._set("only_once", only_once)

    def SetShouldStopBlob(self, should_stop_blob: BlobReference) -> None:
        assert isinstance(should_stop_blob, BlobReference), \
            f"expects BlobReference here, got {type(should_stop_blob)}"
        self._set("should_stop_blob", str(should_stop_blob))

    def RunEveryMillis(self, interval: int) -> None:
        """Run this (sub)step every `interval` ms while its siblings run (engine.runtime.plandef: in order)."""
        self._step.run_every_ms = interval

    def SetReportNet(self, report_net: Any, report_interval: int) -> None:
        self._assert_can_mutate()
        _add_net(self._net_dict, report_net)
        self._step.report_net, self._step.report_interval = _net_name(report_net), report_interval

    def AddSubstep(self, substep: Any) -> "ExecutionStep":
        self._assert_can_mutate()
        assert not self.HasNets(), "Cannot have both network and substeps."
        if isinstance(substep, ExecutionStep):
            substep._notify_is_used()
            if not substep.HasNets() and not substep.HasSubsteps():
                return self
            for net in substep.Nets():
                _add_net(self._net_dict, net)
            self._substeps.append(substep)
            substep = substep.Proto()
        self._step.substep.add().CopyFrom(substep)
        return self

    def SetConcurrentSubsteps(self, concurrent_substeps: bool) -> None:
        assert not self.HasNets(), "Cannot have both network and substeps."
        self._set("concurrent_substeps", concurrent_substeps)

    def AddNet(self, net: Net) -> "ExecutionStep":
        self._assert_can_mutate()
        assert not self.HasSubsteps(), "Cannot have both network and substeps."
        assert isinstance(net, Net)
        _add_net(self._net_dict, net)
        self._step.network.append(_net_name(net))
        return self

    def get_all_attributes(self, name: str) -> list[Any]:
        return [a for net in self._net_dict.values() for a in net.get_attributes(name)]

    @classmethod
    def create_from_proto(cls, step_proto: caffe2_pb2.ExecutionStep, net_obj_dict: dict,
                          net_proto_dict: dict) -> "ExecutionStep":
        """Rebuild a step (recursively) from its proto, making ``Net`` objects from `net_proto_dict`."""
        assert isinstance(step_proto, caffe2_pb2.ExecutionStep)
        assert bool(len(step_proto.network)) != bool(len(step_proto.substep))
        if len(step_proto.substep):
            children: list[Any] = [cls.create_from_proto(s, net_obj_dict, net_proto_dict) for s in step_proto.substep]
        else:
            children = []
            for name in step_proto.network:
                if name not in net_obj_dict:
                    assert name in net_proto_dict
                    net_obj_dict[name] = Net(net_proto_dict[name])
                children.append(net_obj_dict[name])
        opt = {f: getattr(step_proto, f) if step_proto.HasField(f) else None
               for f in ("num_iter", "concurrent_substeps", "only_once", "num_concurrent_instances",
                         "create_workspace", "run_every_ms")}
        stop = BlobReference(step_proto.should_stop_blob) if step_proto.HasField("should_stop_blob") else None
        return execution_step(step_proto.name, children, should_stop_blob=stop, **opt)


def add_nets_in_order(step: ExecutionStep, net_list: list[str]) -> None:
    """Append to `net_list` the names of the nets `step` uses, substeps first, each once."""
    for sub in step.Substeps():
        add_nets_in_order(sub, net_list)
    proto = step.Proto()
    for name in [*proto.network, *([proto.report_net] if proto.report_net else [])]:
        if name not in net_list:
            net_list.append(name)


class Plan:
    """A ``PlanDef`` under construction: steps, and a copy of every net they use."""

    def __init__(self, name_or_step: Any) -> None:
        self._plan = caffe2_pb2.PlanDef()
        self._net_dict: OrderedDict[str, Any] = OrderedDict()
        self._steps: list[ExecutionStep] = []
        if isinstance(name_or_step, ExecutionStep):
            self._plan.name = name_or_step.Name()
            self.AddStep(name_or_step)
        elif isinstance(name_or_step, str):
            self._plan.name = name_or_step
        else:
            raise ValueError("name_or_step must be a string or ExecutionStep")

    def __str__(self) -> str:
        return self._plan.name

    def Proto(self) -> caffe2_pb2.PlanDef:
        return self._plan

    def AddNets(self, nets: list[Any]) -> None:
        for net in nets:
            if _add_net(self._net_dict, net):
                assert isinstance(net, Net)
                self._plan.network.add().CopyFrom(net.Proto())

    def Nets(self) -> list[Any]:
        return list(self._net_dict.values())

    def AddStep(self, step: ExecutionStep) -> None:
        assert isinstance(step, ExecutionStep)
        step._notify_is_used()
        if not step.HasNets() and not step.HasSubsteps():
            return
        self._plan.execution_step.add().CopyFrom(step.Proto())
        self._steps.append(step)
        names: list[str] = []
        add_nets_in_order(step, names)
        self.AddNets([step.get_net(n) for n in names])

    def Steps(self) -> list[ExecutionStep]:
        return self._steps

    def get_all_attributes(self, name: str) -> list[Any]:
        return [a for net in self._net_dict.values() for a in net.get_attributes(name)]

    @classmethod
    def create_from_proto(cls, plan_proto: caffe2_pb2.PlanDef) -> "Plan":
        assert isinstance(plan_proto, caffe2_pb2.PlanDef)
        plan = Plan(plan_proto.name)
        plan._plan.CopyFrom(plan_proto)
        del plan._plan.network[:], plan._plan.execution_step[:]
        protos: dict[str, caffe2_pb2.NetDef] = {}
        for n in plan_proto.network:
            assert n.name not in protos
            protos[n.name] = n
        objs: dict[str, Net] = {}
        for s in plan_proto.execution_step:
            plan.AddStep(ExecutionStep.create_from_proto(s, objs, protos))
        return plan


def to_execution_step(step_or_nets: Any, default_name: str | None = None) -> ExecutionStep:
    """A step as is; a NetBuilder (anything with ``get()`` and ``_stop_blob``), net(s) or steps wrapped."""
    if isinstance(step_or_nets, ExecutionStep):
        return step_or_nets
    stop = None
    if not default_name and hasattr(step_or_nets, "name"):
        default_name = step_or_nets.name
    if hasattr(step_or_nets, "_stop_blob") and hasattr(step_or_nets, "get"):
        stop, step_or_nets = step_or_nets._stop_blob, step_or_nets.get()
    return execution_step(default_name, step_or_nets, should_stop_blob=stop)


def execution_step(default_name: str | None, steps_or_nets: Any, num_iter: int | None = None,
                   report_net: Any = None, report_interval: int | None = None,
                   concurrent_substeps: bool | None = None, should_stop_blob: Any = None,
                   only_once: bool | None = None, num_concurrent_instances: int | None = None,
                   create_workspace: bool = False, run_every_ms: int | None = None) -> ExecutionStep:
    """A step over a net, a step, or a list of nets or of steps; ``num_iter`` defaults to 1
    unless a ``should_stop_blob`` (checked after every net/substep) is given."""
    assert should_stop_blob is None or num_iter is None, "Cannot set both should_stop_blob and num_iter."
    if should_stop_blob is None and num_iter is None:
        num_iter = 1
    step = ExecutionStep(default_name)
    if should_stop_blob is not None:
        step.SetShouldStopBlob(should_stop_blob)
    if num_iter is not None:
        step.SetIter(num_iter)
    if only_once is not None:
        step.SetOnlyOnce(only_once)
    if concurrent_substeps is not None:
        step.SetConcurrentSubsteps(concurrent_substeps)
    if report_net is not None:
        assert report_interval is not None
        step.SetReportNet(report_net, report_interval)
    if num_concurrent_instances is not None:
        step.SetNumConcurrentInstances(num_concurrent_instances)
    if create_workspace:
        step.SetCreateWorkspace(True)
    if run_every_ms:
        step.RunEveryMillis(run_every_ms)
    if isinstance(steps_or_nets, ExecutionStep):
        step.AddSubstep(steps_or_nets)
    elif isinstance(steps_or_nets, Net):
        step.AddNet(steps_or_nets)
    elif isinstance(steps_or_nets, list):
        if all(isinstance(x, Net) for x in steps_or_nets):
            for x in steps_or_nets:
                step.AddNet(x)
        else:
            for x in steps_or_nets:
                step.AddSubstep(to_execution_step(x))
    elif steps_or_nets:
        raise ValueError("steps_or_nets must be a step, a net, or a list of nets or steps.")
    return step


def scoped_execution_step(name: str | None, *args: Any, **kwargs: Any) -> ExecutionStep:
    """:func:`execution_step` with the step name in the current name scope."""
    return execution_step(ScopedName(name) if name else name, *args, **kwargs)
