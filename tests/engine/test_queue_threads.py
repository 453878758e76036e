"""Blob queues block and threads meet at them, as in Caffe2 (issue #16): RunPlan's concurrent
substeps run on threads, Python threads feed queues, closing wakes waiters, DequeueBlobs times
out, AtomicIter under its mutex, and a wait no other thread can end is a one-line error (the
debugger and single-threaded runs) instead of a hang.

Every thread here is joined with a timeout and checked, so a regression fails instead of hanging.
"""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from engine.runtime import blocking
from engine.caffe2 import core
from engine.errors import ExecutionError
from engine.runtime.executor import run_op
from engine.model.opdef import create_operator
from engine.runtime.plandef import events, run_plan
from engine.caffe2.workspace import Workspace

JOIN_S = 20.0


def _op(ws: Workspace, t: str, ins: list[str], outs: list[str], **args) -> None:
    run_op(create_operator(t, ins, outs, **args), ws)


def _in_thread(fn) -> tuple[threading.Thread, list]:
    """Run `fn` on a daemon thread; the list gets its result or its exception."""
    box: list = []

    def work():
        try:
            box.append(fn())
        except BaseException as e:  # noqa: BLE001 - checked by the test
            box.append(e)
    t = threading.Thread(target=work, daemon=True)
    t.start()
    return t, box


def _joined(t: threading.Thread) -> None:
    with blocking.waiting((t,)):  # a joining test thread fills no queue: deadlocks are still seen
        t.join(JOIN_S)
    assert not t.is_alive(), "thread still blocked"


def test_dequeue_waits_for_a_python_producer_thread():
    ws = Workspace("t")
    _op(ws, "CreateBlobsQueue", [], ["q"], capacity=2, num_blobs=1)

    def produce():
        for i in range(5):
            time.sleep(0.01)
            ws.feed_blob(f"x{i}", np.full(3, i, np.float32))
            _op(ws, "EnqueueBlobs", ["q", f"x{i}"], [f"x{i}"])  # blocks while the queue is full
    t, box = _in_thread(produce)
    got = []
    for _ in range(5):
        _op(ws, "DequeueBlobs", ["q"], ["y"])
        got.append(float(ws.values["y"][0]))
    _joined(t)
    assert box == [None] and got == [0, 1, 2, 3, 4]


def test_a_wait_nobody_can_end_is_a_one_line_error_not_a_hang():
    ws = Workspace("t")
    _op(ws, "CreateBlobsQueue", [], ["q"], capacity=1, num_blobs=1)
    start = time.monotonic()
    with pytest.raises(ExecutionError, match="queue 'q' is empty and open.*would wait forever") as e:
        _op(ws, "DequeueBlobs", ["q"], ["y"])
    assert "\n" not in str(e.value) and time.monotonic() - start < 5
    ws.feed_blob("x", np.ones(1, np.float32))
    _op(ws, "EnqueueBlobs", ["q", "x"], ["x"])
    ws.feed_blob("x", np.ones(1, np.float32))
    with pytest.raises(ExecutionError, match="is full .*would wait forever"):
        _op(ws, "EnqueueBlobs", ["q", "x"], ["x"])
    with blocking.single_threaded():  # the debugger's mode: even with other threads alive, no wait
        t, _ = _in_thread(lambda: time.sleep(0.5))
        _op(ws, "DequeueBlobs", ["q"], ["y"])  # a record is there: fine
        with pytest.raises(ExecutionError, match="would wait forever"):
            _op(ws, "DequeueBlobs", ["q"], ["y"])
        _joined(t)


def test_dequeue_timeout_waits_then_raises_runtime_error():
    ws = Workspace("t")
    _op(ws, "CreateBlobsQueue", [], ["q"], capacity=5, num_blobs=1)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="timed out"):
        _op(ws, "DequeueBlobs", ["q"], ["y"], timeout_secs=0.2)
    assert time.monotonic() - start >= 0.19


def test_close_wakes_a_blocked_safe_dequeue_with_status_true():
    ws = Workspace("t")
    _op(ws, "CreateBlobsQueue", [], ["q"], capacity=1, num_blobs=1)
    ws.feed_blob("y", np.array([7.0], np.float32))
    t, box = _in_thread(lambda: _op(ws, "SafeDequeueBlobs", ["q"], ["y", "status"]))
    time.sleep(0.1)
    assert t.is_alive()  # blocked: the main thread could still enqueue
    _op(ws, "CloseBlobsQueue", ["q"], [])
    _joined(t)
    assert box == [None] and bool(ws.values["status"]) and ws.values["y"].tolist() == [7.0]  # y kept


def _safe_queue_plan(num_producers: int, num_consumers: int, capacity: int):
    """Caffe2's test_safe_blobs_queue: producers (concurrent) then a close; consumers (concurrent)
    count records until their SafeDequeueBlobs status says closed."""
    init = core.Net("init")
    queue = init.CreateBlobsQueue([], "queue", capacity=capacity, num_blobs=1)
    one = init.ConstantFill([], "one", value=1.0, shape=[1])
    producers, truth = [], 0
    for i in range(num_producers):
        net = core.Net(f"producer_{i}")
        blob = net.ConstantFill([], f"p{i}", value=1.0, shape=[1])
        net.SafeEnqueueBlobs([queue, blob], [blob, f"p{i}_status"])
        producers.append(core.execution_step(f"producer_{i}", net, num_iter=(i + 1) * 10))
        truth += (i + 1) * 10
    close = core.Net("close")
    close.CloseBlobsQueue([queue], 0)
    producer = core.execution_step("producer", [core.execution_step("producers", producers, concurrent_substeps=True),
                                                core.execution_step("close", close)])
    consumers, counters = [], []
    for i in range(num_consumers):
        take, count = core.Net(f"consumer_{i}"), core.Net(f"count_{i}")
        status = take.SafeDequeueBlobs([queue], [f"c{i}", f"c{i}_status"])[-1]
        counters.append(init.ConstantFill([], f"counter_{i}", value=0.0, shape=[1]))
        count.Add([counters[-1], one], counters[-1])
        consumers.append(core.execution_step(f"consumer_{i}", [take, count], should_stop_blob=status))
    plan = core.Plan("plan")
    plan.AddStep(core.execution_step("init", init))
    plan.AddStep(core.execution_step("worker", [core.execution_step("consumer", consumers, concurrent_substeps=True),
                                                producer], concurrent_substeps=True))
    return plan.Proto(), counters, truth


@pytest.mark.parametrize("producers, consumers, capacity", [(1, 1, 1), (3, 2, 1), (2, 4, 3)])
def test_run_plan_runs_concurrent_producers_and_consumers_on_threads(producers, consumers, capacity):
    plan, counters, truth = _safe_queue_plan(producers, consumers, capacity)
    ws = Workspace("t")
    t, box = _in_thread(lambda: run_plan(plan, ws))
    _joined(t)
    assert box == [True]
    assert sum(float(ws.values[str(c)][0]) for c in counters) == truth  # every record counted once


def test_in_order_runs_of_a_concurrent_plan_stop_with_the_error_instead_of_hanging():
    """events() (the debugger, `netviz run`) runs concurrent substeps in order: the first consumer
    finds the queue empty, and no other thread can fill it."""
    plan, _, _ = _safe_queue_plan(1, 1, 1)
    ws = Workspace("t")

    def walk():
        for _ in events(plan, ws):
            pass
    t, box = _in_thread(walk)
    _joined(t)
    assert isinstance(box[0], ExecutionError) and "would wait forever" in str(box[0])


def test_a_failing_substep_fails_the_plan_and_blocked_siblings_do_not_hang_it():
    init = core.Net("init")
    init.CreateBlobsQueue([], "queue", capacity=1, num_blobs=1)
    consume, fail = core.Net("consume"), core.Net("fail")
    consume.DequeueBlobs(["queue"], ["x"])
    fail.Reshape(["missing_blob"], ["r", "old_shape"], shape=[2])
    plan = core.Plan("plan")
    plan.AddStep(core.execution_step("init", init))
    plan.AddStep(core.execution_step("both", [core.execution_step("consume", consume),
                                              core.execution_step("fail", fail)], concurrent_substeps=True))
    t, box = _in_thread(lambda: run_plan(plan.Proto(), Workspace("t")))
    _joined(t)
    assert isinstance(box[0], ExecutionError)


def test_atomic_iter_counts_every_increment_of_concurrent_substeps():
    ws = Workspace("t")
    init = core.Net("init")
    init.CreateMutex([], ["mutex"])
    ws.feed_blob("iter", np.array([5], np.int64))
    run_plan(core.Plan(core.execution_step("init", init)).Proto(), ws)
    step = core.ExecutionStep("concurrent", num_iter=60)
    for i in range(4):
        net = core.Net(f"net_{i}")
        net.AtomicIter(["mutex", "iter"], ["iter"])
        step.AddSubstep(core.ExecutionStep(f"step_{i}", [net]))
    step.SetConcurrentSubsteps(True)
    _op(ws, "StatRegistryExport", [], ["k0", "v0", "t0"])  # reset the process-wide stats
    t, box = _in_thread(lambda: run_plan(core.Plan(step).Proto(), ws))
    _joined(t)
    assert box == [True] and ws.values["iter"].tolist() == [5 + 60 * 4]
    _op(ws, "StatRegistryExport", [], ["k", "v", "ts"])
    stats = dict(zip(ws.values["k"].tolist(), ws.values["v"].tolist()))
    assert stats[b"atomic_iter/stats/iter/num_iter"] == 240


def test_weighted_sample_dequeue_status_and_table_index():
    ws = Workspace("t")
    for q in ("q0", "q1"):
        _op(ws, "CreateBlobsQueue", [], [q], capacity=2, num_blobs=2)
    ws.feed_blob("a", np.array([1.0], np.float32))
    ws.feed_blob("b", np.array([2.0], np.float32))
    _op(ws, "EnqueueBlobs", ["q1", "a", "b"], ["a", "b"])
    _op(ws, "CloseBlobsQueue", ["q0"], [])
    _op(ws, "CloseBlobsQueue", ["q1"], [])
    # weight 0 on q0: q1 is always picked; output 0 becomes the picked table's index
    _op(ws, "WeightedSampleDequeueBlobs", ["q0", "q1"], ["idx", "y", "status"], weights=[0.0, 1.0], table_idx_blob=0)
    assert ws.values["idx"].tolist() == [1] and ws.values["y"].tolist() == [2.0] and not bool(ws.values["status"])
    _op(ws, "WeightedSampleDequeueBlobs", ["q0", "q1"], ["idx", "y", "status"], weights=[0.0, 1.0], table_idx_blob=0)
    assert bool(ws.values["status"]) and ws.values["y"].tolist() == [2.0]  # closed and empty: y kept


def test_rebatching_queue_splits_a_batch_bigger_than_its_capacity_across_a_consumer():
    ws = Workspace("t")
    _op(ws, "CreateRebatchingQueue", [], ["q"], capacity=2, num_blobs=1)
    ws.feed_blob("x", np.arange(10, dtype=np.int32).reshape(5, 2))
    t, box = _in_thread(lambda: _op(ws, "EnqueueRebatchingQueue", ["q", "x"], [], enqueue_batch=True))
    rows = []
    for _ in range(2):
        _op(ws, "DequeueRebatchingQueue", ["q"], ["y"], num_elements=2)
        rows += ws.values["y"].tolist()
    _joined(t)
    _op(ws, "CloseRebatchingQueue", ["q"], [])
    _op(ws, "DequeueRebatchingQueue", ["q"], ["y"], num_elements=2)  # closed: the one row left
    assert box == [None] and rows + ws.values["y"].tolist() == np.arange(10).reshape(5, 2).tolist()
    with pytest.raises(ExecutionError, match="closed and empty"):
        _op(ws, "DequeueRebatchingQueue", ["q"], ["y"], num_elements=2)


def test_store_get_waits_for_another_thread_to_set_the_key():
    ws = Workspace("t")
    _op(ws, "FileStoreHandlerCreate", [], ["h"], path="/tmp/netviz-test-store", prefix="threads")
    with pytest.raises(ExecutionError, match=r"keys \['never'\] are not in the store.*would wait forever"):
        _op(ws, "StoreGet", ["h"], ["v"], blob_name="never")
    t, box = _in_thread(lambda: _op(ws, "StoreGet", ["h"], ["v"], blob_name="late"))
    time.sleep(0.1)
    ws.feed_blob("x", np.array([3], np.int32))
    _op(ws, "StoreSet", ["h", "x"], [], blob_name="late")
    _joined(t)
    assert box == [None] and ws.values["v"].tolist() == [3]


def test_cancel_from_another_thread_stops_a_net_blocked_on_its_queue():
    ws = Workspace("t")
    _op(ws, "CreateBlobsQueue", [], ["q"], capacity=2, num_blobs=1)
    net = core.Net("wait")
    net.SafeDequeueBlobs(["q"], ["y", "status"])
    handle = ws.create_net(net)
    assert handle and handle.name == "wait"
    canceller, _ = _in_thread(lambda: (time.sleep(0.2), handle.cancel()))
    with pytest.raises(ExecutionError, match="cancelled"):
        handle.run()
    _joined(canceller)


def test_idle_threads_do_not_hide_a_deadlock():
    """An idle thread-pool worker, a thread in an untimed Event wait and one joining it fill no
    queue: the dequeue still stops with the error (it used to wait for them forever)."""
    import concurrent.futures
    ws = Workspace("t")
    _op(ws, "CreateBlobsQueue", [], ["q"], capacity=1, num_blobs=1)
    done = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(int).result()
        sleeper = threading.Thread(target=done.wait, daemon=True)
        sleeper.start()
        joiner = threading.Thread(target=sleeper.join, daemon=True)
        joiner.start()
        t, box = _in_thread(lambda: _op(ws, "DequeueBlobs", ["q"], ["y"]))
        _joined(t)
        done.set()
    assert isinstance(box[0], ExecutionError) and "would wait forever" in str(box[0])
