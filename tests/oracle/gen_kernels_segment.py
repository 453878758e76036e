"""Oracle cases for the segment reductions (engine/runtime/ops/segment.py): sorted, range, unsorted,
sparse, lengths-weighted, reduce-front-weighted and positional-weighted sums, with gradients."""
from __future__ import annotations

import numpy as np

from kernel_oracle import Case, record, rng_for

I32, I64, F32 = np.int32, np.int64, np.float32


def _data(name, *shape):
    return rng_for(name).randn(*shape).astype(F32)


def cases():
    sorted_ids = np.array([0, 0, 1, 2, 2, 2], I32)
    unsorted_ids = np.array([3, 0, 3, 1, 0, 3], I32)   # segment 2 is empty
    for kind in ("Sum", "Mean", "WeightedSum"):
        w = {"SCALARS": rng_for(kind).rand(6).astype(F32)} if kind == "WeightedSum" else {}
        n = f"SortedSegment{kind}"
        yield Case(n, n, {"DATA": _data(n, 6, 3), **w, "SEGMENT_IDS": sorted_ids}, ["Y"], grad=True)
        yield Case(n + "_3d", n, {"DATA": _data(n + "3", 6, 2, 2), **w, "SEGMENT_IDS": sorted_ids}, ["Y"], grad=True)
        yield Case(n + "_gap", n, {"DATA": _data(n, 6, 3), **w, "SEGMENT_IDS": sorted_ids * 2}, ["Y"])
        yield Case(n + "_i64_ids", n, {"DATA": _data(n, 6, 3), **w, "SEGMENT_IDS": sorted_ids.astype(I64)}, ["Y"])
        yield Case(n + "_empty", n, {"DATA": np.zeros((0, 3), F32), **({"SCALARS": np.zeros(0, F32)} if w else {}),
                                     "SEGMENT_IDS": np.zeros(0, I32)}, ["Y"])
        n = f"UnsortedSegment{kind}"
        yield Case(n, n, {"DATA": _data(n, 6, 3), **w, "SEGMENT_IDS": unsorted_ids}, ["Y"], grad=True)
        yield Case(n + "_num_segments", n, {"DATA": _data(n, 6, 3), **w, "SEGMENT_IDS": unsorted_ids}, ["Y"],
                   args={"num_segments": 5}, grad=True)
        yield Case(n + "_bad_id", n, {"DATA": _data(n, 6, 3), **w, "SEGMENT_IDS": unsorted_ids}, ["Y"],
                   args={"num_segments": 3})
        idx = np.array([4, 0, 2, 2, 1, 3], I64)
        for form, ids in (("Sorted", sorted_ids), ("Unsorted", unsorted_ids)):
            n = f"Sparse{form}Segment{kind}"
            yield Case(n, n, {"DATA": _data(n, 5, 3), **w, "INDICES": idx, "SEGMENT_IDS": ids}, ["Y"], grad=True)
        if kind == "WeightedSum":
            yield Case("SortedSegmentWeightedSum_grad_on_weights", "SortedSegmentWeightedSum",
                       {"DATA": _data(n, 6, 3), **w, "SEGMENT_IDS": sorted_ids}, ["Y"],
                       args={"grad_on_weights": 1}, grad=True)
    for kind in ("Sum", "Mean", "Max", "LogSumExp", "LogMeanExp"):
        n = f"SortedSegmentRange{kind}"
        data = _data(n, 6, 3)
        data[1, 0] = data[0, 0]                   # a tie inside segment 0
        yield Case(n, n, {"DATA": data, "SEGMENT_IDS": sorted_ids}, ["Y"], grad=True)
        yield Case(n + "_3d", n, {"DATA": _data(n + "3", 6, 2, 2), "SEGMENT_IDS": np.array([0, 1, 1, 1, 2, 2], I32)},
                   ["Y"], grad=True)
    yield Case("SortedSegmentRangeSum_empty", "SortedSegmentRangeSum",
               {"DATA": np.zeros((0, 1), F32), "SEGMENT_IDS": np.zeros(0, I32)}, ["Y"], grad=True)
    lengths = np.array([2, 0, 3, 1], I32)
    n = "LengthsWeightedSum"
    yield Case(n, n, {"DATA": _data(n, 6, 3), "SCALARS": rng_for(n + "w").rand(6).astype(F32), "LENGTHS": lengths},
               ["Y"], grad=True)
    yield Case(n + "_grad_on_weights", n, {"DATA": _data(n, 6, 3), "SCALARS": rng_for(n + "w").rand(6).astype(F32),
                                           "LENGTHS": lengths}, ["Y"], args={"grad_on_weights": 1}, grad=True)
    yield Case(n + "_bad_lengths", n, {"DATA": _data(n, 6, 3), "SCALARS": np.ones(6, F32),
                                       "LENGTHS": np.array([2, 2], I32)}, ["Y"])
    n = "SparseLengthsWeightedSum"
    yield Case(n + "_grad_on_weights", n, {"DATA": _data(n, 5, 3), "SCALARS": rng_for(n + "w").rand(6).astype(F32),
                                           "INDICES": np.array([4, 0, 2, 2, 1, 3], I64), "LENGTHS": lengths},
               ["Y"], args={"grad_on_weights": 1}, grad=True)
    for t in ("SparseLengthsSum", "SparseLengthsMean"):
        yield Case(t + "_fp16", t, {"DATA": _data(t, 5, 3).astype(np.float16), "INDICES": np.array([4, 0, 2, 2, 1, 3], I64),
                                    "LENGTHS": lengths}, ["Y"], rtol=1e-3, atol=1e-3)
    yield Case("SparseLengthsWeightedSum_fp16", "SparseLengthsWeightedSum",
               {"DATA": _data("slws", 5, 3).astype(np.float16), "SCALARS": rng_for("w16").rand(6).astype(F32),
                "INDICES": np.array([4, 0, 2, 2, 1, 3], I32), "LENGTHS": lengths}, ["Y"], rtol=1e-3, atol=1e-3)
    n = "ReduceFrontWeightedSum"
    yield Case(n, n, {"DATA": _data(n, 4, 3, 2), "SCALARS": rng_for(n + "w").rand(4).astype(F32)}, ["Y"], grad=True)
    yield Case(n + "_grad_on_weights", n, {"DATA": _data(n, 4, 3), "SCALARS": rng_for(n + "w").rand(4).astype(F32)},
               ["Y"], args={"grad_on_weights": 1}, grad=True)
    n = "SparseLengthsPositionalWeightedSum"
    yield Case(n, n, {"DATA": _data(n, 5, 3), "WEIGHT": rng_for(n + "w").rand(4).astype(F32),
                      "INDICES": np.array([4, 0, 2, 2, 1, 3], I64), "LENGTHS": lengths}, ["Y"])
    yield Case(n + "_i32", n, {"DATA": _data(n, 5, 3), "WEIGHT": rng_for(n + "w").rand(3).astype(F32),
                               "INDICES": np.array([4, 0, 2, 2, 1, 3], I32), "LENGTHS": lengths}, ["Y"])

    fi, fj, rk = [2, 3, 2], [2, 2, 3], [1, 3, 2, 1]
    cores = {f"c{k}": rng_for(f"tt{k}").randn(fi[k], rk[k], fj[k], rk[k + 1]).astype(F32) for k in range(3)}
    tt_args = {"factor_i": fi, "factor_j": fj, "ranks": rk, "emb_size": 12}
    yield Case("TTSparseLengthsSum", "TTSparseLengthsSum",
               {**cores, "I": np.array([0, 11, 5, 7, 5, 2], I64), "L": lengths}, ["Y", "O1", "O2", "O3"],
               args=tt_args, grad=True)
    yield Case("TTSparseLengthsSum_emb_smaller", "TTSparseLengthsSum",
               {**cores, "I": np.array([3, 4], I64), "L": np.array([1, 1], I32)}, ["Y", "O1", "O2", "O3"],
               args=dict(tt_args, emb_size=8))
    yield Case("TTSparseLengthsSum_i32", "TTSparseLengthsSum",
               {**cores, "I": np.array([3, 4], I32), "L": np.array([1, 1], I32)}, ["Y", "O1", "O2", "O3"], args=tt_args)


if __name__ == "__main__":
    print(record("segment", cases()), "cases")
