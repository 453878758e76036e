"""Stepping a PlanDef in the debugger (engine.debugger.plan) against engine.runtime.plandef's RunPlan run.

A plan stepped to its end must run the same nets in the same order (step path, iteration, net)
and leave the same blob values as ``plandef.run_plan``; moves go into a step, into one iteration
of a net, over an iteration, and through substeps.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from engine.caffe2 import core
from engine.runtime import executor, plandef
from engine.debugger.plan import PlanDebugger
from engine.caffe2.workspace import Workspace
from proto import caffe2_pb2

MLP_PLAN = Path(__file__).resolve().parents[2] / "examples" / "mlp" / "plan.pbtxt"


def _init_net() -> core.Net:
    init = core.Net("init")
    for name, value in (("n", 0), ("m", 0), ("one", 1), ("limit", 3)):
        init.ConstantFill([], name, shape=[1], value=value, dtype=core.DataType.INT32)
    init.ConstantFill([], "stop", shape=[], value=False, dtype=core.DataType.BOOL)
    return init


def _nested_plan() -> caffe2_pb2.PlanDef:
    """init; a loop until n >= 3 of (count, then a num_iter=2 substep); concurrent substeps; a
    report net (its interval long, so it runs once at the end of its step)."""
    count = core.Net("count")
    count.Add(["n", "one"], "n")
    count.GE(["n", "limit"], "stop")
    inner = core.Net("inner")
    inner.Add(["m", "one"], "m")
    left, right = core.Net("left"), core.Net("right")
    left.Mul(["m", "one"], "m_left")
    right.Add(["n", "m"], "n_plus_m")
    report = core.Net("report")
    report.Copy(["n"], "reported")
    loop = core.execution_step("loop", [core.execution_step("count", count),
                                        core.execution_step("inner", inner, num_iter=2)],
                               should_stop_blob=core.BlobReference("stop"))
    both = core.execution_step("both", [core.execution_step("left", left), core.execution_step("right", right)],
                               concurrent_substeps=True)
    plan = core.Plan("nested")
    plan.AddStep(core.execution_step("init", _init_net()))
    plan.AddStep(loop)
    plan.AddStep(both)
    proto = plan.Proto()
    proto.network.add().CopyFrom(report.Proto())
    step = proto.execution_step[2]
    step.report_net, step.report_interval = report.Name(), 100000
    return _plain_names(proto)


def _plain_names(plan: caffe2_pb2.PlanDef) -> caffe2_pb2.PlanDef:
    """Nets named as written (core.Net appends ``_1``… to a name already used in this process)."""
    plain = {n.name: re.sub(r"_\d+$", "", n.name) for n in plan.network}
    for n in plan.network:
        n.name = plain[n.name]
    for _, step in plandef.walk_steps(plan):
        step.network[:] = [plain.get(x, x) for x in step.network]
        if step.HasField("report_net"):
            step.report_net = plain.get(step.report_net, step.report_net)
    return plan


def _workspace_plan() -> caffe2_pb2.PlanDef:
    """A step in its own workspace, an only_once loop, num_concurrent_instances and a reporter
    substep (its interval long: it runs once, when its step ends)."""
    count = core.Net("count")
    count.Add(["n", "one"], "n")
    count.GE(["n", "limit"], "stop")
    local = core.Net("local")
    local.ConstantFill([], "scratch", shape=[2], value=7.0)
    local.Add(["m", "one"], "m")
    watch = core.Net("watch")
    watch.Copy(["n"], "watched")
    body = core.execution_step("body", [
        core.execution_step("once", count, should_stop_blob=core.BlobReference("stop"), only_once=True),
        core.execution_step("own", local, create_workspace=True),
        core.execution_step("twice", [core.execution_step("again", count)], num_concurrent_instances=2),
        core.execution_step("watcher", watch, run_every_ms=10 ** 8)])
    plan = core.Plan("workspaces")
    plan.AddStep(core.execution_step("init", _init_net()))
    plan.AddStep(body)
    return _plain_names(plan.Proto())


def _reference(plan: caffe2_pb2.PlanDef, seed: int = 0) -> tuple[Workspace, list[tuple]]:
    ws = Workspace("reference")
    with executor.random_source(np.random.default_rng(seed)):
        runs = [(e.step_path, e.iteration, e.net, e.report) for e in plandef.events(plan, ws)]
    return ws, runs


def _same_values(a: Workspace, b: Workspace) -> None:
    names = [n for n in a.values if hasattr(a.values[n], "shape")]
    assert names
    for n in names:
        np.testing.assert_array_equal(np.asarray(b.values[n]), np.asarray(a.values[n]), err_msg=n)


@pytest.mark.parametrize("plan", [plandef.load_plan(MLP_PLAN), _nested_plan(), _workspace_plan()],
                         ids=["mlp", "nested", "workspaces"])
def test_stepping_to_the_end_matches_run_plan(plan: caffe2_pb2.PlanDef) -> None:
    ref_ws, ref_runs = _reference(plan)
    d = PlanDebugger(plan)
    stop = d.continue_()
    assert stop.reason == "end", stop.detail
    assert d.net_runs == ref_runs
    _same_values(ref_ws, d.ws)
    if plan.name == "workspaces":  # the instances run one after another, the reporter once at the end
        assert [r[0] for r in ref_runs[-3:]] == [("body", "twice", "again")] * 2 + [("body", "watcher")]


def test_op_by_op_equals_run_plan_on_the_nested_plan() -> None:
    plan = _nested_plan()
    ref_ws, ref_runs = _reference(plan)
    d = PlanDebugger(plan)
    while d.step_into().reason != "end":
        pass
    assert d.net_runs == ref_runs
    # the stop blob is checked after each substep: loop iteration 2 ends after count
    assert ref_ws.fetch_blob("n").tolist() == [3] and d.ws.fetch_blob("m").tolist() == [4]
    _same_values(ref_ws, d.ws)


def test_into_a_step_an_iteration_and_over_it() -> None:
    d = PlanDebugger(plandef.load_plan(MLP_PLAN))
    assert [op.type for op in d.program.op] == ["ExecutionStep", "ExecutionStep"]
    d.step()                                   # the init step runs whole
    assert d.pc.path == ("op", 1) and d.net_runs == [(("init",), 0, "mlp_init", False)]
    d.step_into()                              # into step train: iteration 0 of mlp_train
    assert d.pc.path == ("op", 1, "mlp_train", 0)
    assert d.pc.frames[-1].label == "train iteration 0 · net mlp_train"
    assert "train iteration 0 · net mlp_train" in d.pc.text()
    d.step()
    assert d.pc.path == ("op", 1, "mlp_train", 1) and d.ws.fetch_blob("ITER").tolist() == [0]
    d.step_out()                               # over the rest of iteration 0: at the start of 1
    assert d.pc.frames[-1].label == "train iteration 1 · net mlp_train" and d.pc.path[-1] == 0
    assert d.ws.fetch_blob("ITER").tolist() == [1]
    for _ in range(len(d.plan.network[1].op)):  # across the iteration boundary op by op
        d.step()
    assert d.pc.frames[-1].op_type == ""        # end of iteration 1's net
    d.step()
    assert d.pc.frames[-1].label == "train iteration 2 · net mlp_train" and d.pc.path[-1] == 0
    d.step()
    d.step_back()                              # one op back: still in iteration 2
    assert d.pc.frames[-1].label == "train iteration 2 · net mlp_train" and d.pc.path[-1] == 0
    assert d.net_runs[-1] == (("train",), 2, "mlp_train", False) and len(d.net_runs) == 4
    d.step_back()                              # a plan step cannot be rewound part-way: whole step undone
    assert d.pc.path == ("op", 1) and d.ws.fetch_blob("ITER").tolist() == [0]
    assert d.net_runs == [(("init",), 0, "mlp_init", False)]
    d.continue_()                              # and it runs again to the same end
    ref_ws, ref_runs = _reference(d.plan)
    assert d.net_runs == ref_runs and d.ws.fetch_blob("ITER").tolist() == [20]


def test_substeps_are_frames_and_concurrent_ones_are_labelled() -> None:
    d = PlanDebugger(_nested_plan())
    d.step()                                   # init
    d.step_into()                              # step loop → its substep count
    assert d.pc.frames[-1].label == "step count" and d.pc.frames[-1].op_type == "ExecutionStep"
    d.step_into()                              # → count's net
    assert d.pc.frames[-1].label == "count iteration 0 · net count"
    assert d.pc.path == ("op", 1, "count", 0, "count", 0)
    d.step_out()                               # count has one iteration: back in substep frame, at its end
    d.step()                                   # → the next substep (inner)
    assert d.pc.frames[-1].label == "step inner"
    d.step()                                   # inner runs whole (num_iter=2)
    assert d.ws.fetch_blob("m").tolist() == [2]
    d.step()                                   # loop iteration 1: count again
    assert d.pc.frames[-1].label == "step count"
    d.continue_()
    d.restart()
    d.step()
    d.step()                                   # the whole loop
    d.step_into()
    assert d.pc.frames[-1].label == "step left (concurrent in Caffe2: run in order here)"


def test_cli_run_break_on_nan_steps_the_plan_to_the_iteration_that_overflows(tmp_path: Path, capsys) -> None:
    """``netviz run plan --break-on-nan`` steps the plan in the plan debugger and names the step
    and iteration where the first NaN/Inf appears (exit 1)."""
    from google.protobuf import text_format

    from netviz.cli import main

    init = core.Net("init")
    init.ConstantFill([], "x", shape=[2], value=1.0)
    grow = core.Net("grow")
    grow.Scale(["x"], "x", scale=1e30)
    plan = core.Plan("blowup")
    plan.AddStep(core.execution_step("init", init))
    plan.AddStep(core.execution_step("grow", grow, num_iter=5))
    path = tmp_path / "plan.pbtxt"
    path.write_text(text_format.MessageToString(_plain_names(plan.Proto())))
    with np.errstate(over="ignore"):
        assert main(["run", str(path), "--break-on-nan"]) == 1
    out = capsys.readouterr().out
    assert "3 net runs" in out and "grow iteration 1 · net grow" in out
    assert main(["run", str(MLP_PLAN), "--break-on-nan"]) == 0


def test_plan_shapes_infer_each_net_after_the_nets_before_it() -> None:
    """The TUI's shapes of a plan's nets: the train net sees what the init step's fills make."""
    from engine.runtime.plan_view import plan_shapes

    table = plan_shapes(plandef.load_plan(MLP_PLAN))
    assert set(table) == {("op", 0, "mlp_init"), ("op", 1, "mlp_train")}
    train = table[("op", 1, "mlp_train")]
    assert train[("fc1", 1)].shape == (16, 16) and train[("fc2_w_grad", 1)].shape == (4, 16)
    nested = plan_shapes(_nested_plan())
    assert nested[("op", 1, "count", 0, "count")][("stop", 1)].shape == (1,)


def test_step_rows_say_how_a_step_repeats() -> None:
    from engine.runtime.plan_view import plan_program, step_summary

    program = plan_program(_nested_plan())
    assert [step_summary(op) for op in program.op] == ["", "until stop", "concurrent: run in order"]
    assert step_summary(program.op[1].arg[-1].n.op[0]) == "×2"  # the loop's substep inner
