"""PlanDefs: load, walk and run with Caffe2's RunPlan semantics (engine.runtime.plandef, engine.caffe2.plan_builder).

The same semantics are checked against real Caffe2 by ``make conformance`` (control_test.py,
net_builder_test.py, workspace_test.py run plans); these tests pin each rule on its own.
"""
from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format

from engine.caffe2 import core
from engine.runtime import plandef
from engine.caffe2.workspace import Workspace
from proto import caffe2_pb2


def counter_net(name: str, stop_at: int | None = None) -> core.Net:
    """``n += 1`` each run; with `stop_at`, also ``stop = n >= stop_at``."""
    net = core.Net(name)
    net.Add(["n", "one"], "n")
    if stop_at is not None:
        net.GE(["n", "limit"], "stop")
    return net


@pytest.fixture
def ws() -> Workspace:
    w = Workspace("plans")
    for name, value in (("n", 0), ("one", 1), ("limit", 3)):
        w.feed_blob(name, np.array([value], np.int32))
    w.feed_blob("stop", np.array(False))
    return w


def run(plan: core.Plan, ws: Workspace) -> list[plandef.PlanEvent]:
    return list(plandef.events(plan.Proto(), ws))


def test_num_iter_repeats_the_nets(ws: Workspace) -> None:
    events = run(core.Plan(core.execution_step("s", counter_net("c"), num_iter=4)), ws)
    assert ws.fetch_blob("n").tolist() == [4] and [e.iteration for e in events] == [0, 1, 2, 3]


def test_should_stop_blob_is_checked_after_every_net(ws: Workspace) -> None:
    step = core.execution_step("s", counter_net("c", stop_at=3), should_stop_blob=core.BlobReference("stop"))
    run(core.Plan(step), ws)
    assert ws.fetch_blob("n").tolist() == [3]


def test_only_once_runs_one_iteration_even_without_stop(ws: Workspace) -> None:
    step = core.execution_step("s", counter_net("c"), should_stop_blob=core.BlobReference("stop"), only_once=True)
    run(core.Plan(step), ws)
    assert ws.fetch_blob("n").tolist() == [1]


def test_substeps_run_in_order_and_the_parent_repeats_them(ws: Workspace) -> None:
    a, b = core.Net("a"), core.Net("b")
    a.Add(["n", "one"], "n")
    b.Mul(["n", "limit"], "n")
    run(core.Plan(core.execution_step("top", [core.execution_step("sa", a), core.execution_step("sb", b)],
                                      num_iter=2)), ws)
    assert ws.fetch_blob("n").tolist() == [((0 + 1) * 3 + 1) * 3]


def test_create_workspace_keeps_new_blobs_local_and_writes_existing_ones_through(ws: Workspace) -> None:
    net = core.Net("local")
    net.Add(["n", "one"], "n")
    net.ConstantFill([], "fresh", shape=[1], value=7.0)
    run(core.Plan(core.execution_step("s", net, create_workspace=True)), ws)
    assert ws.fetch_blob("n").tolist() == [1] and not ws.has_blob("fresh")


def test_concurrent_instances_run_each_substep_that_many_times(ws: Workspace) -> None:
    step = core.execution_step("par", [core.execution_step("inc", counter_net("c"))], num_concurrent_instances=3)
    run(core.Plan(step), ws)
    assert ws.fetch_blob("n").tolist() == [3]


def test_report_net_runs_at_least_once_when_its_step_ends(ws: Workspace) -> None:
    report = core.Net("report")
    report.Copy("n", "seen")
    step = core.execution_step("s", counter_net("c"), num_iter=2, report_net=report, report_interval=3600)
    events = run(core.Plan(step), ws)
    assert ws.fetch_blob("seen").tolist() == [2] and events[-1].report


@pytest.mark.parametrize("edit, message", [
    (lambda s: s.network.append("nope"), "uses undefined net nope"),
    (lambda s: s.substep.add(name="x", network=["c"]), "either have substep or networks"),
    (lambda s: setattr(s, "should_stop_blob", "missing"), "blob missing does not exist"),
])
def test_malformed_steps_fail_with_caffe2s_reason(ws: Workspace, edit, message: str) -> None:
    plan = core.Plan(core.execution_step("s", counter_net("c"))).Proto()
    edit(plan.execution_step[0])
    with pytest.raises(RuntimeError, match=message):
        plandef.run_plan(plan, ws)


def test_load_plan_reads_text_and_binary_and_walk_steps_lists_every_step(tmp_path) -> None:
    plan = core.Plan(core.execution_step("top", [core.execution_step("inner", counter_net("c"))])).Proto()
    (tmp_path / "p.pb").write_bytes(plan.SerializeToString())
    (tmp_path / "p.pbtxt").write_text(text_format.MessageToString(plan))
    for path in ("p.pb", "p.pbtxt"):
        loaded = plandef.load_plan(tmp_path / path)
        assert [path_ for path_, _ in plandef.walk_steps(loaded)] == [("top",), ("top", "inner")]
    (tmp_path / "bad.pbtxt").write_text("not a plan {")
    with pytest.raises(RuntimeError, match="not a PlanDef"):
        plandef.load_plan(tmp_path / "bad.pbtxt")


def test_builder_proto_has_caffe2s_shape() -> None:
    net = core.Net("builder_net")
    step = core.execution_step("b_step", net)
    assert text_format.MessageToString(step.Proto()) == 'name: "b_step"\nnetwork: "builder_net"\nnum_iter: 1\n'
    with pytest.raises(AssertionError, match="Cannot set both"):
        core.execution_step("x", net, num_iter=2, should_stop_blob=core.BlobReference("s"))
    plan = core.Plan(step)
    assert [n.name for n in plan.Proto().network] == ["builder_net"]
    with pytest.raises(AssertionError, match="already been added"):
        step.SetIter(3)
    again = core.Plan.create_from_proto(plan.Proto())  # nets are rebuilt as Net objects (renamed, as Caffe2)
    assert [s.Proto().num_iter for s in again.Steps()] == [1] and len(again.Proto().network) == 1


def test_background_plan(ws: Workspace) -> None:
    bg = plandef.BackgroundPlan(core.Plan(core.execution_step("s", counter_net("c"), num_iter=5)).Proto(), ws)
    assert bg.is_succeeded() and bg.is_done() and ws.fetch_blob("n").tolist() == [5]
