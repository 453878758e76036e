"""The debugger as a state machine: moves, undo, breakpoints, watchpoints, inspection, inject."""
from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from engine.caffe2.core import Net
from engine.debugger import ConditionError, Debugger, DebuggerError, OpExecuted, Stopped
from engine.debugger.diff import device_diff
from engine.runtime.device import use_fake_cuda
from engine.model.modelio import Model, load_model
from proto import caffe2_pb2

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture()
def mlp() -> Model:
    return load_model(EXAMPLES / "mlp" / "predict_net.pb")


def forward_model(loss: bool = True) -> Model:
    """FC → Relu (in place) → FC → Softmax…, with data and params in the init net."""
    init, net = Net("init"), Net("fwd")
    rng = np.random.default_rng(1)
    for name, shape in [("X", (4, 3)), ("W1", (5, 3)), ("b1", (5,)), ("W2", (2, 5)), ("b2", (2,))]:
        init.GivenTensorFill([], name, shape=list(shape), values=rng.standard_normal(shape).ravel().tolist())
    init.GivenTensorIntFill([], "label", shape=[4], values=[0, 1, 1, 0])
    h = net.FC(["X", "W1", "b1"], "h")
    net.Relu(h, "h")
    y = net.FC([h, "W2", "b2"], "y")
    if loss:
        net.SoftmaxWithLoss([y, "label"], ["p", "loss"])
    return Model(net.Proto(), init.Proto())


def test_step_runs_one_op_and_moves_the_pc(mlp: Model) -> None:
    dbg = Debugger(mlp)
    assert dbg.pc.text() == "main › op#0 FC"
    stop = dbg.step()
    assert isinstance(stop, Stopped) and stop.reason == "step"
    assert dbg.pc.path == ("op", 1) and dbg.records[-1].op_type == "FC"
    assert dbg.inspect("fc1").shape == (16, 16)


def test_continue_runs_to_the_end_and_records_every_op(mlp: Model) -> None:
    dbg = Debugger(mlp)
    assert dbg.continue_().reason == "end"
    assert len(dbg.records) == len(mlp.predict.op) and dbg.finished
    assert dbg.continue_().reason == "end"


def test_step_back_restores_exact_values(mlp: Model) -> None:
    dbg = Debugger(mlp)
    dbg.run_to(("op", 14))          # the last WeightedSum overwrites fc2_b in place
    before = {n: np.array(dbg.value(n)) for n in ("fc2_b", "fc2_b_grad", "ITER")}
    dbg.step()
    assert not np.array_equal(dbg.value("fc2_b"), before["fc2_b"])
    dbg.step_back()
    assert dbg.pc.path == ("op", 14)
    for n, v in before.items():
        assert np.array_equal(dbg.value(n), v)
    for _ in range(14):
        dbg.step_back()
    assert dbg.pc.path == ("op", 0) and not dbg.records and "fc1" not in dbg.ws.values
    with pytest.raises(DebuggerError, match="nothing to step back"):
        dbg.step_back()


def test_restart_replays_the_same_numbers(mlp: Model) -> None:
    dbg = Debugger(mlp)
    dbg.continue_()
    first = float(dbg.value("loss"))
    dbg.restart()
    assert dbg.pc.path == ("op", 0) and not dbg.records
    dbg.continue_()
    assert float(dbg.value("loss")) == first


def test_backward_appends_gradient_ops_paired_with_forward_ops() -> None:
    dbg = Debugger(forward_model(), loss="loss")
    dbg.continue_()
    assert dbg.finished
    n = dbg.backward()
    assert n > 0 and not dbg.finished and dbg.pc.path == ("op", dbg.num_forward)
    dbg.continue_()
    grads = {r.op_type: r for r in dbg.records if r.backward}
    assert grads["FCGradient"].forward_index in (0, 2) and grads["FCGradient"].grad_norm > 0
    assert dbg.value("W1_grad").shape == (5, 3)


def test_guess_loss_prefers_a_loss_named_output() -> None:
    assert Debugger(forward_model()).guess_loss() == "loss"


def test_breakpoint_on_type_stops_before_each_match(mlp: Model) -> None:
    dbg = Debugger(mlp)
    dbg.add_breakpoint("type", "FCGradient")
    stop = dbg.continue_()
    assert stop.reason == "breakpoint" and dbg.current_op().type == "FCGradient"
    first = dbg.pc.path
    assert dbg.continue_().reason == "breakpoint" and dbg.pc.path != first
    assert dbg.continue_().reason == "end"


def test_breakpoint_on_path_and_name_regex(mlp: Model) -> None:
    dbg = Debugger(mlp)
    dbg.add_breakpoint("path", ("op", 3))
    assert dbg.continue_().reason == "breakpoint" and dbg.pc.path == ("op", 3)
    dbg.restart()
    dbg.breakpoints.clear()
    dbg.add_breakpoint("name", r"^relu1$")
    assert dbg.continue_().reason == "breakpoint" and dbg.current_op().type == "Relu"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_conditional_breakpoint_on_nan() -> None:
    init, net = Net("init"), Net("nan")
    init.GivenTensorFill([], "X", shape=[3], values=[1.0, -1.0, 2.0])
    net.Log("X", "logx")
    net.Scale("logx", "y", scale=2.0)
    dbg = Debugger(Model(net.Proto(), init.Proto()))
    dbg.add_breakpoint("condition", condition="has_inf_or_nan")
    stop = dbg.continue_()
    assert stop.reason == "condition" and dbg.pc.path == ("op", 1)   # stopped right after Log
    assert dbg.inspect("logx").nan_count == 1


def test_condition_on_statistics_and_bad_condition(mlp: Model) -> None:
    dbg = Debugger(mlp)
    dbg.add_breakpoint("condition", condition="max_abs(fc1) > 0")
    assert dbg.continue_().reason == "condition" and dbg.pc.path == ("op", 1)
    with pytest.raises(ConditionError, match="column"):
        dbg.add_breakpoint("condition", condition="max_abs(fc1) >> 3")


def test_watchpoint_on_an_in_place_blob() -> None:
    dbg = Debugger(forward_model())
    dbg.add_watchpoint("h", on="write")
    assert dbg.continue_().reason == "watchpoint" and dbg.pc.path == ("op", 1)  # FC wrote h
    assert dbg.continue_().reason == "watchpoint" and dbg.pc.path == ("op", 2)  # Relu rewrote h
    assert dbg.versions["h"] == 2
    assert np.all(dbg.value("h") >= 0) and np.any(dbg.value("h", version=1) < 0)


def test_watchpoint_on_read() -> None:
    dbg = Debugger(forward_model())
    dbg.add_watchpoint("W2", on="read")
    assert dbg.continue_().reason == "watchpoint" and dbg.current_op().type == "FC"
    assert dbg.pc.path == ("op", 2)


def test_inject_overrides_and_marks_later_records_stale() -> None:
    dbg = Debugger(forward_model())
    dbg.continue_()
    dbg.restart()
    dbg.step()
    stale = dbg.inject("h", np.zeros((4, 5)))
    assert stale == {("op", 1), ("op", 2), ("op", 3)}
    dbg.continue_()
    assert np.allclose(dbg.value("y"), np.broadcast_to(dbg.value("b2"), (4, 2)))
    assert not dbg.stale


def test_execution_error_stops_with_a_message_and_keeps_the_workspace() -> None:
    init, net = Net("init"), Net("bad")
    init.GivenTensorFill([], "A", shape=[2, 3], values=[1.0] * 6)
    init.GivenTensorFill([], "B", shape=[4, 5], values=[1.0] * 20)
    net.Relu("A", "A2")
    net.Add(["A2", "B"], "C")
    dbg = Debugger(Model(net.Proto(), init.Proto()))
    stop = dbg.continue_()
    assert stop.reason == "error" and "op #1 Add" in stop.detail and "\n" not in stop.detail
    assert dbg.pc.path == ("op", 1) and "A2" in dbg.ws.values and "C" not in dbg.ws.values
    dbg.inject("B", np.ones((2, 3), np.float32), reshape=True)  # a new shape must be asked for
    assert dbg.continue_().reason == "end"


def test_cancel_from_another_thread_stops_between_ops() -> None:
    net, init = Net("long"), Net("init")
    init.ConstantFill([], "x", shape=[8], value=1.0)
    for _ in range(20000):
        net.Scale("x", "x", scale=1.0)
    dbg = Debugger(Model(net.Proto(), init.Proto()), record_stats=False)
    seen = threading.Event()
    dbg.listeners.append(lambda ev: seen.set() if isinstance(ev, OpExecuted) and ev.record.seq == 100 else None)
    result: list[Stopped] = []
    worker = threading.Thread(target=lambda: result.append(dbg.continue_()))
    worker.start()
    assert seen.wait(10)
    dbg.cancel()
    worker.join(10)
    assert result[0].reason == "cancelled" and 100 <= len(dbg.records) < 20000


def test_events_are_sent_for_ops_and_stops(mlp: Model) -> None:
    dbg = Debugger(mlp)
    events: list[object] = []
    dbg.listeners.append(events.append)
    dbg.step()
    assert [type(e).__name__ for e in events] == ["OpExecuted", "Stopped"]


def test_memory_budget_bounds_the_undo_history(mlp: Model) -> None:
    dbg = Debugger(mlp, budget_bytes=256)
    dbg.continue_()
    assert dbg.undo_truncated
    with pytest.raises(DebuggerError, match="budget"):
        for _ in range(len(mlp.predict.op) + 1):
            dbg.step_back()


def test_slice_and_save(mlp: Model, tmp_path: Path) -> None:
    dbg = Debugger(mlp)
    dbg.step()
    part, truncated = dbg.slice("fc1", "[0, :5]")
    assert part.shape == (5,) and not truncated
    path = dbg.save("fc1", str(tmp_path / "fc1.npy"))
    assert np.array_equal(np.load(path), dbg.value("fc1"))


def test_device_diff_with_the_stand_in_gpu(mlp: Model) -> None:
    with use_fake_cuda():
        report = device_diff(mlp)
    diffs = report.diffs
    assert {d.name for d in diffs} >= {"fc1", "loss", "fc1_w_grad"}
    assert max(d.max_abs for d in diffs) < 1e-5
    assert report.first_over(1e-5) is None and report.order.index("fc1") < report.order.index("loss")


def test_gpu_device_without_a_gpu_is_a_clear_error(mlp: Model) -> None:
    from engine.runtime.device import has_gpu
    if has_gpu():
        pytest.skip("a GPU is present")
    with pytest.raises(Exception, match="(?i)cuda|gpu"):
        Debugger(mlp, device="gpu")


RUNNABLE_ZOO = ["bvlc_alexnet", "inception_v2", "resnet50", "vgg19", "zfnet512"]


@pytest.mark.parametrize("name", RUNNABLE_ZOO)
def test_weightless_zoo_nets_run_with_synthesized_params(zoo: Path, name: str) -> None:
    model = load_model(zoo / name / "predict_net.pbtxt")
    dbg = Debugger(model, synthesize_params=True, param_width=4, record_stats=False)
    assert dbg.synthesized and all(p not in model.value_info for p in dbg.synthesized)
    assert dbg.continue_().reason == "end"
    final = model.predict.external_output[-1]
    assert dbg.value(final).shape == (1, 1000)
    assert np.allclose(dbg.value(final).sum(), 1.0, atol=1e-4)   # softmax output


def test_without_synthesis_a_weightless_net_stops_on_the_first_missing_param(zoo: Path) -> None:
    dbg = Debugger(load_model(zoo / "resnet50" / "predict_net.pbtxt"))
    stop = dbg.step()
    assert stop.reason == "error" and "gpu_0/conv1_w" in stop.detail


GOLDEN_MODELS = Path(__file__).resolve().parents[1] / "golden" / "models"


@pytest.mark.parametrize("name", ["do_net", "if_net", "lstm", "mlp_sgd", "while_grad_net", "while_net"])
def test_oracle_models_run_to_the_end_and_step_back(name: str) -> None:
    dbg = Debugger(load_model(GOLDEN_MODELS / name / "predict_net.pb"))
    assert dbg.continue_().reason == "end"
    n = len(dbg.records)
    dbg.step_back()
    assert len(dbg.records) < n and not dbg.finished
    assert dbg.continue_().reason == "end"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_caffe2_built_resnet50_forward_and_backward_without_nans() -> None:
    dbg = Debugger(load_model(GOLDEN_MODELS / "resnet50_train" / "predict_net.pb"), record_stats=False)
    assert dbg.backward() > 100
    assert dbg.continue_().reason == "end"
    grads = [n for n in dbg.ws.values if n.endswith("_grad") and hasattr(dbg.ws.values[n], "dtype")]
    assert len(grads) > 150
    for n in grads:
        assert np.all(np.isfinite(dbg.value(n))), n
