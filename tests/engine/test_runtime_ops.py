"""Runtime ops (issue #20): mutexes, atomics, counters, stats/timers, workspace ops, and training
nets built by Caffe2's optimizer builders running in netviz with Caffe2's losses."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.errors import ExecutionError
from engine.runtime.executor import run_op
from engine.runtime.workspace import eval_op
from engine.model.opdef import create_operator, make_argument
from engine.caffe2.workspace import Workspace
from proto import caffe2_pb2

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "runtime"


def _run(ws: Workspace, t: str, ins: list[str], outs: list[str], **args) -> None:
    run_op(create_operator(t, ins, outs, **args), ws)


def test_atomic_fetch_add_returns_sum_and_old_value_as_scalars():
    ws = Workspace("t")
    ws.feed_blob("a", np.array(5, np.int32))
    ws.feed_blob("b", np.array(2, np.int32))
    _run(ws, "CreateMutex", [], ["m"])
    _run(ws, "AtomicFetchAdd", ["m", "a", "b"], ["a", "old"])
    assert ws.values["a"].dtype == np.int32 and ws.values["a"].shape == () and int(ws.values["a"]) == 7
    assert int(ws.values["old"]) == 5


def test_counter_counts_down_past_zero_as_caffe2():
    ws = Workspace("t")
    _run(ws, "CreateCounter", [], ["c"], init_count=2)
    done = []
    for _ in range(3):
        _run(ws, "CountDown", ["c"], ["d"])
        done.append(bool(ws.values["d"]))
    assert done == [False, False, True]  # measured on Caffe2 1.10.2
    _run(ws, "RetrieveCount", ["c"], ["n"])
    _run(ws, "CountUp", ["c"], ["up"])
    _run(ws, "ResetCounter", ["c"], ["prev"], init_count=7)
    assert (int(ws.values["n"]), int(ws.values["up"]), int(ws.values["prev"])) == (-1, -1, 0)
    _run(ws, "CheckCounterDone", ["c"], ["done"])
    assert not bool(ws.values["done"])


def test_atomic_bool_and_stat_registry():
    ws = Workspace("t")
    _run(ws, "CreateAtomicBool", [], ["f"])
    ws.feed_blob("yes", np.array(True))
    _run(ws, "ConditionalSetAtomicBool", ["f", "yes"], [])
    _run(ws, "CheckAtomicBool", ["f"], ["v"])
    assert ws.values["v"].tolist() == [True]
    _run(ws, "StatRegistryCreate", [], ["reg"])
    ws.feed_blob("k", np.array([b"k1", b"k2"], dtype=object))
    ws.feed_blob("v", np.array([3, 4], np.int64))
    for _ in range(2):
        _run(ws, "StatRegistryUpdate", ["k", "v", "reg"], [])
    _run(ws, "StatRegistryExport", ["reg"], ["ek", "ev", "et"])
    assert dict(zip(ws.values["ek"].tolist(), ws.values["ev"].tolist())) == {b"k1": 6, b"k2": 8}
    _run(ws, "StatRegistryExport", ["reg"], ["ek", "ev", "et"])  # reset=True by default
    assert ws.values["ev"].tolist() == [0, 0]


def test_timer_and_workspace_ops():
    ws = Workspace("t")
    _run(ws, "TimerBegin", [], ["t"], counter_name="tt")
    _run(ws, "TimerGetAndEnd", ["t"], ["ns"])
    assert ws.values["ns"].shape == (1,) and ws.values["ns"][0] >= 0
    _run(ws, "FeedBlob", [], ["s"], value="hello")
    assert ws.fetch_blob("s") == b"hello"
    _run(ws, "GetAllBlobNames", [], ["names"])
    assert set(ws.values["names"].tolist()) == {b"t", b"ns", b"s"}
    with pytest.raises(ExecutionError, match="argument name"):
        eval_op("AliasWithName", np.ones(2))
    op = create_operator("AliasWithName", ["s"], ["s2"])
    op.arg.add().CopyFrom(make_argument("name", "s"))  # `name=` would name the op itself
    run_op(op, ws)
    assert ws.values["s2"] == b"hello"
    with pytest.raises(ExecutionError, match="ThrowException stops the net"):
        eval_op("ThrowException", n_out=0)


def _net(path: Path) -> caffe2_pb2.NetDef:
    return caffe2_pb2.NetDef.FromString(path.read_bytes())


@pytest.mark.parametrize("name", ["sgd", "sgd_momentum", "adam", "adagrad", "db_sgd", "dpm_sgd"])
def test_caffe2_built_training_net_matches_caffe2_losses(name, monkeypatch):
    """init net (CreateMutex, CreateDB…) then 5 train iterations: every loss equals Caffe2's."""
    d = GOLDEN / name
    want = json.loads((d / "losses.json").read_text())
    data = np.load(d / "data.npz")
    monkeypatch.chdir(d)  # CreateDB's path is relative, as when Caffe2 wrote the golden
    ws = Workspace("train")
    for k in want["feeds"]:
        ws.feed_blob(k, data[k])
    ws.run_net_once(_net(d / "init_net.pb"))
    for k in data.files:  # Caffe2's random initial weights (its RNG cannot be replayed)
        if k.startswith("init/"):
            ws.feed_blob(k[5:], data[k])
    train = _net(d / "train_net.pb")
    ws.create_net(train)
    losses = []
    for _ in range(want["iters"]):
        ws.run_net(train.name)
        losses.append(float(ws.fetch_blob(want["loss"])))
    np.testing.assert_allclose(losses, want["losses"], rtol=1e-5, atol=1e-6)


def test_queue_swaps_blobs_in_and_safe_ops_report_status():
    ws = Workspace("t")
    _run(ws, "CreateBlobsQueue", [], ["q"], capacity=1, num_blobs=1)
    ws.feed_blob("x", np.arange(3, dtype=np.float32))
    _run(ws, "SafeEnqueueBlobs", ["q", "x"], ["x", "ok"])
    assert ws.values["ok"].tolist() is False and b"uninitialized" in ws.fetch_blob("x")
    ws.feed_blob("x", np.ones(2, np.float32))
    with pytest.raises(ExecutionError, match="wait forever"):
        _run(ws, "EnqueueBlobs", ["q", "x"], ["x"])  # full and open: Caffe2 would block
    _run(ws, "DequeueBlobs", ["q"], ["y"])
    assert ws.values["y"].tolist() == [0.0, 1.0, 2.0]
    _run(ws, "CloseBlobsQueue", ["q"], [])
    _run(ws, "SafeDequeueBlobs", ["q"], ["y", "done"])
    assert ws.values["done"].tolist() is True


def test_rebatching_queue_regroups_rows():
    ws = Workspace("t")
    _run(ws, "CreateRebatchingQueue", [], ["q"], capacity=10, num_blobs=1)
    ws.feed_blob("x", np.arange(6, dtype=np.float32).reshape(3, 2))
    _run(ws, "EnqueueRebatchingQueue", ["q", "x"], [], enqueue_batch=1)
    _run(ws, "DequeueRebatchingQueue", ["q"], ["y"], num_elements=2)
    assert ws.values["y"].tolist() == [[0.0, 1.0], [2.0, 3.0]]


def test_world_of_one_store_and_text_reader(tmp_path):
    ws = Workspace("t")
    _run(ws, "CreateCommonWorld", [], ["comm"], size=1)
    ws.feed_blob("g", np.array([1.5, 2.0], np.float32))
    _run(ws, "Allreduce", ["comm", "g"], ["g"])
    assert ws.values["g"].tolist() == [1.5, 2.0]
    with pytest.raises(ExecutionError, match="size 2 needs 2 processes"):
        _run(ws, "CreateCommonWorld", [], ["comm2"], size=2)
    _run(ws, "FileStoreHandlerCreate", [], ["store"], path=str(tmp_path))
    _run(ws, "StoreSet", ["store", "g"], [], blob_name="k")
    _run(ws, "StoreGet", ["store"], ["g2"], blob_name="k")
    _run(ws, "StoreAdd", ["store"], ["n"], blob_name="count", add_value=3)
    assert ws.values["g2"].tolist() == [1.5, 2.0] and int(ws.values["n"]) == 3
    (tmp_path / "data.tsv").write_text("a\t1.5\nb\t2\n")
    _run(ws, "CreateTextFileReader", [], ["r"], filename=str(tmp_path / "data.tsv"), num_passes=1,
         field_types=[4, 1])
    _run(ws, "TextFileReaderRead", ["r"], ["s", "f"], batch_size=5)
    assert ws.values["s"].tolist() == [b"a", b"b"] and ws.values["f"].tolist() == [1.5, 2.0]


def test_stat_puts_name_truncate_and_bound_as_caffe2():
    """Measured on Caffe2 1.10.2: keys <stat_name or input>/stat_value, int64-truncated values."""
    from engine.runtime.ops.stateful import GLOBAL_STATS

    GLOBAL_STATS.stats.clear()
    ws = Workspace("t")
    for v in (2.5, 4.0, 7.0):
        for b in ("a", "s", "i"):
            ws.feed_blob(b, np.array(v, np.float32))
        _run(ws, "AveragePut", ["a"], [], magnitude_expand=10)
        _run(ws, "StdDevPut", ["s"], [], stat_name="sd")
        _run(ws, "IncrementPut", ["i"], [], bound=1, default_value=1.0)
    ws.feed_blob("big", np.array(1e30, np.float32))
    _run(ws, "IncrementPut", ["big"], [], bound=1)
    assert GLOBAL_STATS.stats == {
        "a/stat_value/sum": 135, "a/stat_value/count": 3, "sd/stat_value/sum": 13, "sd/stat_value/count": 3,
        "sd/stat_value/sumoffset": 0, "sd/stat_value/sumsqoffset": 0, "i/stat_value": 13,
        "big/stat_value": 2**63 - 1}
