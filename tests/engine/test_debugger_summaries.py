"""Each op record's per-output summary (shape, dtype, NaN/Inf counts, norm) as a continue leaves it.

The NaN/Inf counts are made when the op runs (an isfinite pass, counted exactly when some element is
not finite); the float64 norm is
computed when first read, or when the debugger drops the value it keeps (budget, a later run of the
same op, restart), so no summary holds memory beyond the budget.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.caffe2.core import Net
from engine.debugger import Debugger, machine
from engine.debugger.records import Health
from engine.model.modelio import Model, load_model
from tests.engine.test_debugger_hunt import bn_relu_model

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def float64_norm(v: np.ndarray) -> float:
    """What the record showed before the norm was lazy: the float64 sum of squares, square-rooted."""
    return float(np.square(v.reshape(-1), dtype=np.float64).sum()) ** 0.5


def values_as_written(dbg: Debugger) -> dict[tuple, dict[str, np.ndarray]]:
    """Collect each op run's outputs (seq → {blob: value}) through the OpExecuted event."""
    seen: dict[int, dict[str, np.ndarray]] = {}

    def on(event) -> None:
        rec = getattr(event, "record", None)
        if rec is not None:
            seen[rec.seq] = {o.name: dbg.frames[-1].ws.values.get(o.name) for o in rec.outputs}
    dbg.listeners.append(on)
    return seen  # type: ignore[return-value]


def pending(dbg: Debugger) -> list[Health]:
    """The norms not computed yet (their Health still holds the value)."""
    return [o.health for r in dbg.records for o in r.outputs
            if isinstance(o.health, Health) and o.health.value is not None]


def test_norms_read_after_a_continue_are_the_float64_norms_of_each_version() -> None:
    dbg = Debugger(bn_relu_model())
    seen = values_as_written(dbg)
    dbg.continue_()
    assert pending(dbg), "norms wait until read"
    for rec in dbg.records:
        for o in rec.outputs:
            v = seen[rec.seq][o.name]
            assert o.shape == v.shape and o.dtype == str(v.dtype) and o.nan_count == o.inf_count == 0
            assert o.norm == float64_norm(v)  # the same float64 sum: equal, not approximately
    # the in-place Relu's version (conv1_bn@2) and SpatialBN's (conv1_bn@1) keep their own norms
    bn, relu = dbg.records[1].outputs[0], dbg.records[2].outputs[0]
    assert bn.norm != relu.norm and relu.norm == float64_norm(dbg.written_value(("op", 2), "conv1_bn"))
    assert not pending(dbg)


def test_a_dropped_value_gets_its_norm_first() -> None:
    dbg = Debugger(bn_relu_model(), keep_budget=1024)  # each value evicts the one before
    seen = values_as_written(dbg)
    dbg.continue_()
    assert dbg.kept_evicted > 0
    held = {id(k[1]) for k in dbg.kept.values()}
    assert all(id(n.value) in held for n in pending(dbg)), "a waiting norm holds only a kept value"
    for rec in dbg.records:
        for o in rec.outputs:
            assert o.norm == float64_norm(seen[rec.seq][o.name])


def test_restart_and_loop_iterations_drop_no_norm() -> None:
    dbg = Debugger(load_model(EXAMPLES / "while_net" / "predict_net.pb"))
    seen = values_as_written(dbg)
    dbg.continue_()
    runs = dbg.records
    again = [r for r in runs if r.label.startswith("iteration")]
    assert len({r.path for r in again}) < len(again), "ops of the loop body ran more than once"
    dbg.restart()  # the last run's norms: computed by idle_work (a UI's idle worker), else from the next move
    held = [o for r in runs for o in r.outputs if isinstance(o.health, Health) and o.health.value is not None]
    assert held, "computed when the UI is idle, not by the restart itself"
    dbg.idle_work(lambda: False)
    machine._helper().submit(lambda: None).result()  # one worker, in order: its own checks are done now
    assert not [o for r in runs for o in r.outputs if isinstance(o.health, Health) and o.health.value
                is not None], "the last run's values are not held after a restart and the idle work"
    for rec in runs:
        for o in rec.outputs:
            v = seen[rec.seq][o.name]
            if getattr(v, "dtype", None) is not None and v.dtype.kind == "f":
                assert o.norm == float64_norm(v)


def nan_model() -> Model:
    """x (a NaN and a -Inf) → Scale → Relu; z (finite) → Scale by 5e37: each element fits float32,
    their sum does not."""
    init, net = Net("init"), Net("nan")
    init.GivenTensorFill([], "x", shape=[2, 3], values=[float("nan"), float("-inf"), 1.0, 2.0, 3.0, 4.0])
    init.GivenTensorFill([], "z", shape=[4], values=[1.0, 2.0, 3.0, 4.0])
    net.Scale("x", "x1", scale=1.0)
    net.Relu("x1", "y")
    net.Scale("z", "big", scale=5e37)
    return Model(net.Proto(), init.Proto())


def test_nan_and_inf_counts_are_exact_and_an_overflowing_sum_is_no_inf() -> None:
    dbg = Debugger(nan_model())
    dbg.continue_()
    x1, relu, big = (r.outputs[0] for r in dbg.records)
    assert (x1.nan_count, x1.inf_count, x1.norm) == (1, 1, None)
    assert (relu.nan_count, relu.inf_count, relu.norm) == (1, 0, None)  # Relu(-inf) = 0, NaN stays
    value = dbg.written_value(("op", 2), "big")
    with np.errstate(over="ignore"):
        assert not np.isfinite(value.sum()) and np.isfinite(value).all()
    assert (big.nan_count, big.inf_count) == (0, 0) and big.norm == float64_norm(value)
    assert [r.seq for r in dbg.alerts()] == [0, 1]


def test_a_nan_written_mid_net_marks_that_op(zoo: Path) -> None:
    """DenseNet-121 with a NaN written into one conv's output: the record of that op says so."""
    model = load_model(zoo / "densenet121" / "predict_net.pbtxt")
    dbg = Debugger(model, synthesize_params=True)
    target = 40
    name = dbg.frames[0].net.op[target].output[0]
    dbg.run_to(("op", target + 1))
    value = dbg.written_value(("op", target), name).copy()
    value.reshape(-1)[7] = np.nan
    dbg.restart()
    dbg.run_to(("op", target))
    dbg.skip({name: value})  # the op "writes" one NaN
    stop = dbg.continue_()
    assert stop.reason == "end"
    bad = dbg.alerts()
    assert bad[0].path == ("op", target) and bad[0].outputs[0].nan_count == 1
    assert all(r.path[1] > target for r in bad[1:])


def test_an_op_without_kernel_fails_when_the_pc_reaches_it_not_when_ops_before_it_are_bound() -> None:
    """Ops are bound ahead of the pc (BIND_AHEAD at a time): one that cannot be bound stops the run
    only at its own turn, with its own error, after the ops before it ran."""
    init, net = Net("init"), Net("nokernel")
    init.GivenTensorFill([], "x", shape=[3], values=[1.0, -2.0, 3.0])
    net.Relu("x", "y")
    net.Relu("y", "z")
    net.Proto().op.add(type="NoSuchOp", input=["z"], output=["w"])
    net.Relu("z", "v")
    dbg = Debugger(Model(net.Proto(), init.Proto()))
    assert dbg.step().reason == "step" and dbg.pc.path == ("op", 1)
    stop = dbg.continue_()
    assert stop.reason == "error" and "NoSuchOp" in stop.detail and dbg.pc.path == ("op", 2)
    assert [r.path for r in dbg.records] == [("op", 0), ("op", 1)]


def test_restart_keeps_bound_ops_without_state_and_binds_the_others_afresh() -> None:
    dbg = Debugger(load_model(EXAMPLES / "while_net" / "predict_net.pb"))
    dbg.continue_()
    first = [(r.path, r.op_type) for r in dbg.records]
    before = dict(dbg.frames[0].bound)
    loop = next(i for i, b in before.items() if b.op.type == "While")
    dbg.restart()
    after = dbg.frames[0].bound
    assert loop not in after and before[loop].ctx is not None  # its context holds per-op state: bound again
    stateless = {i for i, b in before.items() if b.ctx is None and not b.plan}
    assert set(after) == stateless and all(after[i] is before[i] for i in after) and len(stateless) > 3
    dbg.continue_()
    assert dbg.frames[0].bound[loop] is not before[loop]
    assert dbg.finished and not dbg.error and [(r.path, r.op_type) for r in dbg.records] == first


def test_bind_ahead_binds_the_rest_between_moves_and_a_bad_op_still_fails_at_its_turn(monkeypatch) -> None:
    """A UI's idle worker binds the main net ahead (Machine.bind_ahead): the continue after it binds
    nothing, gives the same records, and an op that cannot be bound fails only when the pc gets there."""
    init, net = Net("init"), Net("nokernel")
    init.GivenTensorFill([], "x", shape=[3], values=[1.0, -2.0, 3.0])
    for k in range(150):  # more than BIND_AHEAD: the step binds only the first ones
        net.Relu("x" if k == 0 else f"y{k - 1}", f"y{k}")
    net.Proto().op.add(type="NoSuchOp", input=["y149"], output=["w"])
    net.Relu("y149", "v")
    dbg = Debugger(Model(net.Proto(), init.Proto()))
    assert dbg.step().reason == "step"
    assert len(dbg.frames[0].bound) < 150
    assert dbg.bind_ahead(lambda: True) == 0  # a queued move: nothing bound
    assert dbg.bind_ahead(lambda: False, chunk=16) == 152
    assert set(dbg.frames[0].bound) == set(range(152)) - {150}  # NoSuchOp left unbound, the op after it bound
    binds: list[int] = []
    bind = dbg._bind
    monkeypatch.setattr(dbg, "_bind", lambda f, i: binds.append(i) or bind(f, i))
    stop = dbg.continue_()
    assert stop.reason == "error" and "NoSuchOp" in stop.detail and dbg.pc.path == ("op", 150)
    assert [r.path for r in dbg.records] == [("op", i) for i in range(150)] and binds == [150]


def test_bind_ahead_after_a_restart_binds_the_new_main_frame() -> None:
    dbg = Debugger(load_model(EXAMPLES / "while_net" / "predict_net.pb"))
    dbg.continue_()
    first = [(r.path, r.op_type, [o.norm for o in r.outputs]) for r in dbg.records]
    dbg.restart()
    n = len(dbg.frames[0].net.op)
    assert len(dbg.frames[0].bound) < n  # the While (its context holds state) is bound afresh
    dbg.bind_ahead(lambda: False)
    assert set(dbg.frames[0].bound) == set(range(n))
    dbg.continue_()
    assert dbg.finished and [(r.path, r.op_type, [o.norm for o in r.outputs]) for r in dbg.records] == first


def test_a_move_after_a_restart_hands_the_last_runs_norms_to_the_helper_thread() -> None:
    """No idle work between a restart and the next move (a script, keys typed ahead): the move hands
    the norms left to the helper thread, and none is lost."""
    dbg = Debugger(load_model(EXAMPLES / "while_net" / "predict_net.pb"))
    seen = values_as_written(dbg)
    dbg.continue_()
    runs = dbg.records
    dbg.restart()
    dbg.step()
    machine._helper().submit(lambda: None).result()
    assert not [o for r in runs for o in r.outputs if isinstance(o.health, Health) and o.health.value is not None]
    for rec in runs:
        for o in rec.outputs:
            if o.norm is not None:
                assert o.norm == float64_norm(seen[rec.seq][o.name])
