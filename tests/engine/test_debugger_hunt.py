"""The debugger's hunting tools: values per SSA version, conditions over any blob, ignore counts,
run to the first NaN/Inf (into subnets), alerts, typed inject, skip op."""
from __future__ import annotations

import numpy as np
import pytest

from engine.caffe2.core import Net
from engine.debugger import ConditionError, Debugger, DebuggerError, parse_condition
from engine.debugger.conditions import EXAMPLES
from engine.debugger.machine import EvictedError
from engine.debugger.values import BadValueError, ShapeMismatch
from engine.model.modelio import Model
from tests.netviz.tui_nets import while_net


def bn_relu_model() -> Model:
    """Conv → SpatialBN (test mode) → Relu in place on the BN output, as ResNet's res_conv1_bn."""
    init, net = Net("init"), Net("bnrelu")
    rng = np.random.default_rng(3)
    for name, shape in [("data", (1, 3, 8, 8)), ("w", (4, 3, 3, 3)), ("b", (4,)), ("s", (4,)), ("bias", (4,)),
                        ("m", (4,))]:
        init.GivenTensorFill([], name, shape=list(shape), values=rng.standard_normal(shape).ravel().tolist())
    init.GivenTensorFill([], "v", shape=[4], values=[1.0, 2.0, 0.5, 1.5])
    net.Conv(["data", "w", "b"], "conv1", kernel=3, pad=1)
    net.SpatialBN(["conv1", "s", "bias", "m", "v"], "conv1_bn", is_test=1, epsilon=1e-5)
    net.Relu("conv1_bn", "conv1_bn")
    net.MaxPool("conv1_bn", "pool1", kernel=2, stride=2)
    return Model(net.Proto(), init.Proto())


def test_each_ssa_version_keeps_its_own_value_across_an_in_place_relu() -> None:
    dbg = Debugger(bn_relu_model())
    dbg.continue_()
    pre = dbg.written_value(("op", 1), "conv1_bn")    # conv1_bn@1: SpatialBN's output
    post = dbg.written_value(("op", 2), "conv1_bn")   # conv1_bn@2: after the in-place Relu
    assert pre.min() < 0 and np.count_nonzero(pre == 0) == 0
    assert post.min() == 0 and np.array_equal(post, np.maximum(pre, 0))
    assert dbg.initial_value("data").shape == (1, 3, 8, 8)
    dbg.step_back()  # MaxPool undone: its record and its version are gone
    with pytest.raises(DebuggerError, match="has not run"):
        dbg.written_value(("op", 3), "pool1")


def test_kept_values_beyond_the_budget_are_evicted_and_said_so() -> None:
    dbg = Debugger(bn_relu_model(), keep_budget=1024)  # room for about one small tensor
    dbg.continue_()
    with pytest.raises(EvictedError, match="dropped"):
        dbg.written_value(("op", 0), "conv1")
    assert dbg.kept_evicted > 0 and dbg.kept_bytes <= 1024 + dbg.written_value(("op", 3), "pool1").nbytes


@pytest.mark.parametrize("text", EXAMPLES)
def test_every_prompt_example_parses(text: str) -> None:
    assert parse_condition(text).text == text


def test_condition_typos_say_what_was_meant() -> None:
    with pytest.raises(ConditionError, match="did you mean max_abs"):
        parse_condition("max_ab(x) > 3")
    with pytest.raises(ConditionError, match="expected one of >"):
        parse_condition("loss 10")


def test_a_global_condition_sees_any_blob_and_the_step_count() -> None:
    dbg = Debugger(bn_relu_model())
    dbg.add_breakpoint("condition", condition="step >= 3")
    assert dbg.continue_().reason == "condition" and dbg.pc.path == ("op", 3)
    dbg.restart()
    dbg.breakpoints.clear()
    # a per-op condition over a blob the op does not read (the old one saw only its inputs)
    dbg.add_breakpoint("path", ("op", 3), condition="max(conv1) > 0")
    assert dbg.continue_().reason == "breakpoint" and dbg.pc.path == ("op", 3)


def test_ignore_count_lets_hits_pass() -> None:
    dbg = Debugger(Model(while_net(), Net("init").Proto()), feeds={"x": np.ones(1, np.float32)})
    bp = dbg.add_breakpoint("type", "Mul", ignore=2)
    assert dbg.continue_().reason == "breakpoint"
    assert dbg.pc.frames[-1].label == "iteration 2" and bp.hits == 3 and bp.ignore == 0


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_run_to_nan_goes_into_loop_iterations_and_alerts_list_them_in_order() -> None:
    # x = x * 2 three times in a While loop: 2e38 overflows to inf in the first iteration
    dbg = Debugger(Model(while_net(), Net("init").Proto()), feeds={"x": np.full(1, 2e38, np.float32)})
    stop = dbg.run_to_nan()
    assert stop.reason == "nan" and "x holds NaN/Inf" in stop.detail
    assert dbg.pc.frames[-1].label == "iteration 0" and dbg.pc.path[-1] == 1  # right after `double`
    dbg.continue_()
    alerts = dbg.alerts()
    assert [a.op_type for a in alerts][:2] == ["Mul", "Mul"] and alerts[0].seq < alerts[1].seq
    assert [a.label for a in alerts][:2] == ["iteration 0", "iteration 1"]


def test_inject_keeps_dtype_and_shape_and_marks_the_blob() -> None:
    dbg = Debugger(bn_relu_model())
    dbg.step()
    dbg.inject("conv1", np.float64("nan"))   # a scalar fills the blob's shape, in its dtype
    v = dbg.value("conv1")
    assert v.shape == (1, 4, 8, 8) and v.dtype == np.float32 and np.isnan(v).all()
    assert "conv1" in dbg.injected
    with pytest.raises(ShapeMismatch, match=r"shape \[2\]"):
        dbg.inject("conv1", np.zeros(2))
    dbg.step()  # SpatialBN reads conv1; conv1 stays injected until an op writes it
    assert "conv1" in dbg.injected and np.isnan(dbg.value("conv1_bn")).all()
    dbg.restart()
    dbg.step()
    assert "conv1" not in dbg.injected


def test_inject_refuses_nan_for_an_integer_blob() -> None:
    init, net = Net("init"), Net("ints")
    init.GivenTensorIntFill([], "k", shape=[3], values=[1, 2, 3])
    net.Cast("k", "kf", to=1)
    dbg = Debugger(Model(net.Proto(), init.Proto()))
    with pytest.raises(BadValueError, match="int32"):
        dbg.inject("k", np.float32("nan"))


def test_skip_gives_an_ops_outputs_and_is_recorded_and_undoable() -> None:
    dbg = Debugger(bn_relu_model())
    dbg.step()
    with pytest.raises(DebuggerError, match="give a value for conv1_bn"):
        dbg.skip({})
    dbg.skip({"conv1_bn": np.ones((1, 4, 8, 8), np.float32)})
    assert dbg.records[-1].skipped and dbg.pc.path == ("op", 2)
    assert np.array_equal(dbg.written_value(("op", 1), "conv1_bn"), np.ones((1, 4, 8, 8)))
    dbg.continue_()
    assert dbg.value("pool1").shape == (1, 4, 4, 4) and (dbg.value("pool1") == 1).all()
    dbg.restart()
    dbg.step()
    dbg.skip({"conv1_bn": np.zeros((1, 4, 8, 8), np.float32)})
    dbg.step_back()
    assert dbg.pc.path == ("op", 1) and "conv1_bn" not in dbg.ws.values
