"""Kernel oracle cases of the runtime family (issue #20): queues, indexes, datasets.

Run from tests/oracle: ``../../.venv-caffe2/bin/python gen_kernels_runtime.py ../golden``.
Stateful objects (queues, cursors, indexes) are made by extra ops; the op's own inputs are fed
as plain arrays first (a stateful one is then replaced by its extra op), other tensors the ops
need come from GivenTensorFill extra ops.
"""
import numpy as np

from kernel_oracle import Case, record, rng_for

DUMMY = np.zeros(1, np.float32)
FIELDS = ["label", "feat:lengths", "feat:values:ids", "feat:values:w"]


def fill(name, a):
    a = np.asarray(a)
    kind = {"f": "GivenTensorFill", "i": "GivenTensorInt64Fill" if a.dtype == np.int64 else "GivenTensorIntFill"}
    return (kind[a.dtype.kind], [], [name], {"values": a.reshape(-1).tolist(), "shape": list(a.shape)})


def dataset(r):
    lengths = np.array([2, 0, 3, 1, 2], np.int32)
    n = int(lengths.sum())
    return {"label": r.randint(0, 5, 5).astype(np.int64), "lengths": lengths,
            "ids": r.randint(0, 100, n).astype(np.int64), "w": r.randn(n).astype(np.float32)}


def cases():
    r = rng_for("queue")
    x, y = r.randn(2, 3).astype("f4"), r.randn(2, 4).astype("f4")
    make = [fill("x", x), fill("y", y), fill("x2", x + 1), fill("y2", y - 1),
            ("CreateBlobsQueue", [], ["q"], {"capacity": 4, "num_blobs": 2}),
            ("EnqueueBlobs", ["q", "x", "y"], ["x", "y"], {}), ("EnqueueBlobs", ["q", "x2", "y2"], ["x2", "y2"], {})]
    yield Case("DequeueBlobs", "DequeueBlobs", {"q": DUMMY}, ["a", "b"], extra_ops=make)
    yield Case("SafeDequeueBlobs_two", "SafeDequeueBlobs", {"q": DUMMY}, ["a", "b", "status"], {"num_records": 2},
               extra_ops=make)
    yield Case("SafeDequeueBlobs_closed", "SafeDequeueBlobs", {"q": DUMMY}, ["a", "b", "status"],
               extra_ops=make + [("DequeueBlobs", ["q"], ["u", "v"], {}), ("DequeueBlobs", ["q"], ["u", "v"], {}),
                                 ("CloseBlobsQueue", ["q"], [], {}), fill("a", x), fill("b", y)])
    # NOTE: SafeEnqueueBlobs leaves its inputs uninitialized (swapped into the queue), which the
    # recorder cannot compare; tests/engine/test_runtime_ops.py checks it.
    r = rng_for("index")
    keys = np.array([7, 3, 7, 9, 3, 11], np.int64)
    mk = [("LongIndexCreate", [], ["h"], {"max_elements": 10})]
    yield Case("IndexGet", "IndexGet", {"h": DUMMY, "k": keys}, ["ids"], extra_ops=mk)
    yield Case("IndexGet_frozen", "IndexGet", {"h": DUMMY, "k": keys}, ["ids"],
               extra_ops=mk + [fill("k0", keys[:2]), ("IndexGet", ["h", "k0"], ["i0"], {}),
                               ("IndexFreeze", ["h"], ["h"], {})])
    yield Case("IndexSize", "IndexSize", {"h": DUMMY}, ["n"],
               extra_ops=mk + [fill("k0", keys), ("IndexGet", ["h", "k0"], ["i0"], {})])
    yield Case("IndexStore", "IndexStore", {"h": DUMMY}, ["items"],
               extra_ops=mk + [fill("k0", keys), ("IndexGet", ["h", "k0"], ["i0"], {})])
    yield Case("IndexLoad_skip_first", "IndexGet", {"h": DUMMY, "k": keys}, ["ids"],
               extra_ops=mk + [fill("items", np.array([0, 9, 3], np.int64)),
                               ("IndexLoad", ["h", "items"], ["h"], {"skip_first_entry": 1})])
    yield Case("IndexGet_full", "IndexGet", {"h": DUMMY, "k": keys}, ["ids"],
               extra_ops=[("LongIndexCreate", [], ["h"], {"max_elements": 3})])
    # datasets: nested fields read by a cursor
    r = rng_for("dataset")
    d = dataset(r)
    cur = [("CreateTreeCursor", [], ["c"], {"fields": FIELDS})]
    data = {"c": DUMMY, "label": d["label"], "lengths": d["lengths"], "ids": d["ids"], "w": d["w"]}
    outs = ["o_label", "o_lengths", "o_ids", "o_w"]
    yield Case("ReadNextBatch_first", "ReadNextBatch", dict(data), outs, {"batch_size": 2}, extra_ops=cur)
    yield Case("ReadNextBatch_second", "ReadNextBatch", dict(data), outs, {"batch_size": 2},
               extra_ops=cur + [("ReadNextBatch", ["c", "label", "lengths", "ids", "w"], ["a1", "a2", "a3", "a4"],
                                 {"batch_size": 2})])
    yield Case("ReadNextBatch_end", "ReadNextBatch", dict(data), outs, {"batch_size": 4},
               extra_ops=cur + [("ReadNextBatch", ["c", "label", "lengths", "ids", "w"], ["a1", "a2", "a3", "a4"],
                                 {"batch_size": 4})])
    yield Case("ReadNextBatch_enforce", "ReadNextBatch", dict(data), outs, {"batch_size": 4, "enforce_batch_size": 1},
               extra_ops=cur + [("ReadNextBatch", ["c", "label", "lengths", "ids", "w"], ["a1", "a2", "a3", "a4"],
                                 {"batch_size": 4})])
    yield Case("ComputeOffset", "ComputeOffset", dict(data), ["offsets"], extra_ops=cur)
    yield Case("GetCursorOffset", "GetCursorOffset", {"c": DUMMY}, ["off"],
               extra_ops=cur + [fill(k, v) for k, v in d.items()] +
               [("ReadNextBatch", ["c", "label", "lengths", "ids", "w"], ["a1", "a2", "a3", "a4"], {"batch_size": 3})])
    # NOTE: SortAndShuffle's shuffles use a fresh std::default_random_engine: the same order every run
    score = np.array([3, 1, 2, 1, 0, 5, 2], np.int32)
    flat = [("CreateTreeCursor", [], ["c"], {"fields": ["score", "v"]})]
    for bs, ss, by in ((1, 2, 0), (2, 2, -1), (1, 5, 0), (3, 1, -1)):
        yield Case(f"SortAndShuffle_b{bs}_s{ss}_by{by}", "SortAndShuffle",
                   {"c": DUMMY, "score": score, "v": np.arange(7, dtype=np.float32)}, ["order"],
                   {"sort_by_field_idx": by, "batch_size": bs, "shuffle_size": ss}, extra_ops=flat)
    rand = cur + [fill(k, v) for k, v in d.items()] + [fill("idx", np.array([4, 0, 2, 1, 3], np.int64)),
                                                      ("ComputeOffset", ["c", "label", "lengths", "ids", "w"],
                                                       ["offsets"], {})]
    read = ("ReadRandomBatch", ["c", "idx", "offsets", "label", "lengths", "ids", "w"], ["a1", "a2", "a3", "a4"])
    for name, args, before in (("second", {"batch_size": 2}, 1), ("enforce_full", {"batch_size": 2,
                               "enforce_batch_size": 1}, 1), ("loop_over", {"batch_size": 2, "loop_over": 1}, 3)):
        yield Case(f"ReadRandomBatch_{name}", "ReadRandomBatch",
                   {"c": DUMMY, "idx": DUMMY, "offsets": DUMMY, **{k: v for k, v in data.items() if k != "c"}},
                   outs, args, extra_ops=rand + [(*read, args)] * before)
    yield Case("Append", "Append", {"a": r.randn(2, 3).astype("f4"), "b": r.randn(3, 3).astype("f4")}, ["a"])
    yield Case("TrimDataset", "TrimDataset", {k: v for k, v in data.items() if k != "c"}, ["label", "lengths", "ids", "w"],
               {"fields": FIELDS, "multiple_of": 2})
    yield Case("CheckDatasetConsistency_bad", "CheckDatasetConsistency",
               {"label": d["label"], "lengths": d["lengths"], "ids": d["ids"][:-1], "w": d["w"]}, [],
               {"fields": FIELDS})


record("runtime", cases())
