"""Forward semantics of CreateScope / HasScope / Do / If / While, workspace bindings and stacks."""
from __future__ import annotations

import numpy as np
import pytest

from engine.caffe2 import control, core
from engine.errors import ExecutionError
from engine.runtime.executor import bind, call_kernel, run_net, run_op
from engine.model.opdef import create_operator as op
from engine.runtime.ops import control as control_ops
from engine.runtime.plans import SubnetRun
from engine.caffe2.workspace import Workspace
from proto import caffe2_pb2


def net(name, *ops):
    return caffe2_pb2.NetDef(name=name, op=list(ops))


def test_bound_child_sees_only_bound_names_and_writes_through():
    parent = Workspace("p")
    parent.feed_blob("X", np.ones(2, np.float32))
    parent.feed_blob("hidden", np.ones(1))
    child = Workspace("c", parent, {"x": "X"})
    assert child.has_blob("x") and not child.has_blob("hidden") and not child.has_blob("X")
    child.feed_blob("x", np.zeros(2))
    child.feed_blob("local", np.ones(1))
    assert parent.fetch_blob("X").tolist() == [0.0, 0.0] and not parent.has_blob("local")
    parent.feed_blob("X", np.full(2, 5.0))  # lazily resolved
    assert child.fetch_blob("x").tolist() == [5.0, 5.0]
    assert child.blobs() == ["local", "x"]


def test_add_blob_mapping_rules_and_copy_forwarded_tensors():
    parent = Workspace("p")
    for n in ("A", "B"):
        parent.feed_blob(n, np.ones(1))
    child = Workspace("c", parent, {})
    child.add_blob_mapping({"a": "A"})
    with pytest.raises(ExecutionError, match="Redefinition of blob a"):
        child.add_blob_mapping({"a": "B"})
    with pytest.raises(ExecutionError, match="Invalid parent workspace blob Z"):
        child.add_blob_mapping({"z": "Z"})
    child.feed_blob("l", np.ones(1))
    child.add_blob_mapping({"l": "B"}, skip_defined=True)
    assert child.bindings() == {"a": "A"}
    child.copy_forwarded_tensors(["a"])
    parent.feed_blob("A", np.zeros(1))
    assert child.fetch_blob("a").tolist() == [1.0] and child.bindings() == {}


def test_workspace_stack_push_pop_lifo_and_reuse():
    parent, st = Workspace("p"), control_ops.WorkspaceStack()
    parent.feed_blob("X", np.ones(1))
    w0, w1 = st.push_forward_workspace(parent, {"x": "X"}), st.push_forward_workspace(parent, {"x": "X"})
    assert len(st) == 2 and st.pop_gradient_workspace(parent, {}) is w1
    assert st.pop_gradient_workspace(parent, {}) is w0 and st.pop_gradient_workspace(parent, {}) is None
    assert st.push_forward_workspace(parent, {}) is w0  # recycled


def test_create_scope_resets_and_has_scope():
    ws = Workspace("s")
    run_op(op("CreateScope", [], "st"), ws)
    stack = ws.values["st"]
    stack.push_forward_workspace(ws, {})
    run_op(op("HasScope", "st", "h"), ws)
    assert ws.fetch_blob("h").tolist() == [True]
    run_op(op("CreateScope", [], "st"), ws)
    run_op(op("HasScope", "st", "h"), ws)
    assert ws.values["st"] is stack and ws.fetch_blob("h").tolist() == [False]


def _if_ws(cond):
    ws = Workspace("i")
    ws.feed_blob("c", np.array([cond]))
    ws.feed_blob("X", np.array([-1.0, 2.0], np.float32))
    return ws


@pytest.mark.parametrize("cond,expect", [(True, [0.0, 2.0]), (False, [-2.0, 4.0])])
def test_if_runs_the_taken_branch_in_the_same_workspace(cond, expect):
    ws = _if_ws(cond)
    run_op(op("If", ["c", "X"], ["Y"], then_net=net("t", op("Relu", "X", "Y")),
              else_net=net("e", op("Scale", "X", "Y", scale=2.0))), ws)
    assert ws.fetch_blob("Y").tolist() == expect


def test_if_without_else_and_bad_condition():
    ws = _if_ws(False)
    run_op(op("If", ["c", "X"], ["Y"], then_net=net("t", op("Relu", "X", "Y"))), ws)
    assert not ws.has_blob("Y")
    ws.feed_blob("c", np.array([True, False]))
    with pytest.raises(ExecutionError, match="single value expected"):
        run_op(op("If", ["c", "X"], ["Y"], then_net=net("t", op("Relu", "X", "Y"))), ws)


def test_plan_labels_for_the_debugger():
    ws = _if_ws(True)
    ws.feed_blob("n", np.array([0], np.int32))
    ws.feed_blob("one", np.array([1], np.int32))
    ws.feed_blob("three", np.array([3], np.int32))
    ws.feed_blob("c", np.array([True]))
    w = op("While", ["c", "n"], ["n", "c"], loop_net=net("body", op("Add", ["n", "one"], "n")),
           cond_net=net("cn", op("LT", ["n", "three"], "c")))
    b = bind(w, workspace=ws)
    plan, labels = call_kernel(b, ws), []
    try:
        step = next(plan)
        while True:
            assert isinstance(step, SubnetRun)
            labels.append(step.label)
            run_net(step.net, step.workspace)
            step = plan.send(None)
    except StopIteration:
        pass
    assert labels == ["cond_net", "iteration 0", "cond_net", "iteration 1", "cond_net", "iteration 2", "cond_net"]
    assert ws.fetch_blob("n").tolist() == [3]


def test_while_iteration_cap_stops_with_an_error(monkeypatch):
    ws = Workspace("w")
    ws.feed_blob("c", np.array([True]))
    ws.feed_blob("x", np.zeros(1, np.float32))
    loop = op("While", ["c", "x"], ["x"], loop_net=net("b", op("Relu", "x", "x")), max_iterations=10)
    with pytest.raises(ExecutionError, match="exceeded 10 iterations"):
        run_op(loop, ws)
    monkeypatch.setattr(control_ops, "MAX_WHILE_ITERATIONS", 5)
    with pytest.raises(ExecutionError, match="exceeded 5 iterations"):
        run_op(op("While", ["c", "x"], ["x"], loop_net=net("b", op("Relu", "x", "x"))), ws)


def test_do_binds_locals_stay_inside_and_stack_grows():
    n = core.Net("d")
    sub = core.Net("d_inner")
    sub.Relu(sub.Scale("x", "tmp", scale=-1.0), "y")
    n.AddExternalInput("X")
    st = control.Do(n, sub, ["X"], ["Y"], bindings={"x": "X", "y": "Y"})
    ws = Workspace("d")
    ws.feed_blob("X", np.array([1.0, -2.0], np.float32))
    run_net(n.Proto(), ws)
    assert ws.fetch_blob("Y").tolist() == [0.0, 2.0] and not ws.has_blob("tmp")
    stack = ws.values[st]
    assert len(stack) == 1 and stack.workspaces[0].fetch_blob("tmp").tolist() == [-1.0, 2.0]


def test_do_checks_bindings():
    ws = Workspace("d")
    run_op(op("CreateScope", [], "st"), ws)
    ws.feed_blob("X", np.ones(1))
    bad = op("Do", ["X", "st"], ["Y", "st"], net=net("n"), inner_blobs=["x"], outer_blobs_idx=[0])
    with pytest.raises(ExecutionError, match="Not all outer blob names are used"):
        run_op(bad, ws)


def test_gradient_do_on_an_empty_stack_fails():
    ws = Workspace("d")
    run_op(op("CreateScope", [], "st"), ws)
    ws.feed_blob("G", np.ones(1))
    g = op("Do", ["G", "st"], ["X_grad", "st"], net=net("n", op("Copy", "g", "xg")), inner_blobs=["g", "xg"],
           outer_blobs_idx=[0, 1])
    g.is_gradient_op = True
    with pytest.raises(ExecutionError, match="Failed to initialize Do op workspace"):
        run_op(g, ws)


def test_builders_compute_outer_inputs_and_outputs():
    outer, then = core.Net("b_if"), core.Net("b_then")
    then.Relu(then.FC(["X", "W", "b"], "h"), "Y")
    assert control.get_external_blob_names(then, {"X", "W", "b", "Y"}) == (["X", "W", "b"], ["Y"])
    control.If(outer, "cond", then, lexical_scope={"X", "W", "b", "Y", "cond"})
    if_op = outer.Proto().op[-1]
    assert list(if_op.input) == ["cond", "X", "W", "b", "b_if/workspace_if_then"]
    assert list(if_op.output) == ["Y", "b_if/workspace_if_then"]
