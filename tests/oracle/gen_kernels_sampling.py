"""Oracle cases for sampling and string ops (engine/runtime/ops/sampling.py, engine/runtime/ops/strings.py).

Random ops are recorded with values=False (shapes and dtypes) except where the draw cannot
matter (ratio 0 or 1, a single non-zero weight, a pool exactly as large as the request).
"""
from __future__ import annotations

import numpy as np

import kernel_oracle
from kernel_oracle import Case, record, rng_for

I32, I64, F32 = np.int32, np.int64, np.float32
RANDOM_OPS = {"WeightedSample", "WeightedMultiSampling", "ReservoirSampling", "SparseDropoutWithReplacement",
              "SparseItemwiseDropoutWithReplacement", "UniqueUniformFill"}


def cases():
    w = rng_for("ws").rand(4, 3).astype(F32)
    yield Case("WeightedSample", "WeightedSample", {"W": w}, ["I"], values=False)
    yield Case("WeightedSample_values", "WeightedSample", {"W": w, "V": rng_for("wv").rand(4, 3).astype(F32)},
               ["I", "V2"], values=False)
    onehot = np.array([[0, 1, 0], [0, 0, 2], [5, 0, 0]], F32)
    yield Case("WeightedSample_onehot", "WeightedSample", {"W": onehot, "V": onehot * 10}, ["I", "V2"])
    yield Case("WeightedMultiSampling", "WeightedMultiSampling", {"C": np.array([0.1, 0.5, 0.7, 1.0], F32)}, ["Y"],
               args={"num_samples": 6}, values=False)
    yield Case("WeightedMultiSampling_shape", "WeightedMultiSampling",
               {"C": np.array([0.1, 0.5, 0.7, 1.0], F32), "S": np.zeros((2, 3), I64)}, ["Y"], values=False)
    yield Case("WeightedMultiSampling_single", "WeightedMultiSampling",
               {"C": np.array([0.0, 0.0, 2.0, 2.0], F32)}, ["Y"], args={"num_samples": 5})
    mutex = [("CreateMutex", [], ["mu"], {})]
    yield Case("ReservoirSampling_fill", "ReservoirSampling",
               {"R": np.zeros((0, 2), F32), "N": np.array([0], I64), "D": rng_for("rs").rand(3, 2).astype(F32),
                "mu": np.zeros(1, I32)}, ["R", "N"], args={"num_to_collect": 5}, extra_ops=mutex)
    yield Case("ReservoirSampling_over", "ReservoirSampling",
               {"R": np.zeros((0, 2), F32), "N": np.array([0], I64), "D": rng_for("rs").rand(9, 2).astype(F32),
                "mu": np.zeros(1, I32)}, ["R", "N"], args={"num_to_collect": 4}, extra_ops=mutex, values=False)
    lw = [("CreateMutex", [], ["mu"], {})]
    d = np.arange(10, dtype=F32).reshape(5, 2)
    yield Case("LastNWindowCollector", "LastNWindowCollector",
               {"B": np.zeros((0, 2), F32), "C": np.array(0, I32), "D": d}, ["B", "C"], args={"num_to_collect": 3})
    yield Case("LastNWindowCollector_short", "LastNWindowCollector",
               {"B": np.zeros((0, 2), F32), "C": np.array(0, I32), "D": d[:2]}, ["B", "C"], args={"num_to_collect": 4})
    yield Case("LastNWindowCollector_wrap", "LastNWindowCollector",
               {"B": np.arange(6, dtype=F32).reshape(3, 2) + 100, "C": np.array(2, I32), "D": d[:2]}, ["B", "C"],
               args={"num_to_collect": 3})
    yield Case("LastNWindowCollector_grow", "LastNWindowCollector",
               {"B": np.arange(4, dtype=F32).reshape(2, 2) + 100, "C": np.array(2, I32), "D": d[:3]}, ["B", "C"],
               args={"num_to_collect": 4})
    yield Case("LastNWindowCollector_visited", "LastNWindowCollector",
               {"B": np.zeros((0, 2), F32), "C": np.array(0, I32), "D": d, "mu": np.zeros(1, I32),
                "NV": np.array([7], I64)}, ["B", "C", "NV"], args={"num_to_collect": 3}, extra_ops=lw)
    # a written window adds to NUM_VISITED; one whose first 8 bytes are zero counts as unwritten (Caffe2 reads
    # them as a pointer) and starts over (cursor 0, NUM_VISITED 0); more rows than the window: slot 0, cursor 0
    for tag, buf, cur, rows in (("visited_adds", np.arange(6, dtype=F32).reshape(3, 2) + 100, 1, 2),
                                ("zero_start", np.array([[0, 0], [5, 6], [7, 8]], F32), 1, 2),
                                ("overflow_cursor1", np.arange(6, dtype=F32).reshape(3, 2) + 100, 1, 5),
                                ("empty_cursor2", np.zeros((0, 2), F32), 2, 2)):
        yield Case("LastNWindowCollector_" + tag, "LastNWindowCollector",
                   {"B": buf, "C": np.array(cur, I32), "D": d[:rows], "mu": np.zeros(1, I32),
                    "NV": np.array([7], I64)}, ["B", "C", "NV"], args={"num_to_collect": 3}, extra_ops=lw)
    ids = np.array([1, 2, 3, 4, 5, 6], I64)
    L = np.array([2, 0, 3, 1], I32)
    for r in (0.0, 1.0):
        for t in ("SparseDropoutWithReplacement", "SparseItemwiseDropoutWithReplacement"):
            yield Case(f"{t}_{r}", t, {"X": ids, "L": L}, ["Y", "LY"], args={"ratio": r, "replacement_value": -7})
    yield Case("SparseItemwiseDropoutWithReplacement_0.5", "SparseItemwiseDropoutWithReplacement",
               {"X": ids, "L": L}, ["Y", "LY"], args={"ratio": 0.5, "replacement_value": -7}, values=False)
    yield Case("UniqueUniformFill", "UniqueUniformFill", {}, ["Y"], args={"min": 1, "max": 20, "shape": [3, 2]},
               values=False)
    yield Case("UniqueUniformFill_all", "UniqueUniformFill", {}, ["Y"], args={"min": 3, "max": 3, "shape": [1]})
    yield Case("UniqueUniformFill_avoid", "UniqueUniformFill",
               {"X": np.zeros((2, 2), F32), "A": np.array([2, 4], I32)}, ["Y"], args={"min": 1, "max": 8},
               values=False)
    yield Case("UniqueUniformFill_i64", "UniqueUniformFill", {}, ["Y"],
               args={"min": 0, "max": 9, "shape": [4], "dtype": 10}, values=False)
    s = np.array([b"hello", b"world", b"", b"hell"], dtype="S")
    yield Case("StringPrefix", "StringPrefix", {"S": s}, ["Y"], args={"length": 3})
    yield Case("StringSuffix", "StringSuffix", {"S": s}, ["Y"], args={"length": 2})
    yield Case("StringStartsWith", "StringStartsWith", {"S": s}, ["Y"], args={"prefix": "hel"})
    yield Case("StringEndsWith", "StringEndsWith", {"S": s}, ["Y"], args={"suffix": "ld"})
    yield Case("StringEquals", "StringEquals", {"S": s}, ["Y"], args={"text": "hell"})
    yield Case("StringJoin", "StringJoin", {"S": s.reshape(2, 2)}, ["Y"], args={"delimiter": "-"})
    yield Case("StringJoin_axis1", "StringJoin", {"S": s.reshape(2, 2)}, ["Y"], args={"axis": 1})
    yield Case("StringJoin_float", "StringJoin", {"X": np.array([[1.5, 2, 1e-7], [3, 4, 123456.7]], F32)}, ["Y"])
    yield Case("StringJoin_int", "StringJoin", {"X": np.array([7, -3], I64)}, ["Y"], args={"delimiter": " "})


if __name__ == "__main__":
    kernel_oracle.seed_random_ops(RANDOM_OPS)
    print(record("sampling", cases()), "cases")
