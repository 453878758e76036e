"""Oracle cases for the lengths and segment utilities (engine/runtime/ops/lengths.py)."""
from __future__ import annotations

import numpy as np

from kernel_oracle import Case, record, rng_for

I32, I64, F32 = np.int32, np.int64, np.float32


def _f(name, *shape):
    return rng_for(name).randn(*shape).astype(F32)


def cases():
    L = np.array([2, 0, 3, 1], I32)
    empty = np.zeros(0, I32)
    for t in ("LengthsToOffsets", "LengthsToRanges", "LengthsToSegmentIds", "LengthsToWeights"):
        yield Case(t, t, {"L": L}, ["Y"])
        yield Case(t + "_empty", t, {"L": empty}, ["Y"])
    yield Case("LengthsToOffsets_last", "LengthsToOffsets", {"L": L}, ["Y"], args={"include_last_offset": 1})
    yield Case("LengthsToOffsets_i64", "LengthsToOffsets", {"L": L.astype(I64)}, ["Y"])
    yield Case("LengthsToWeights_power", "LengthsToWeights", {"L": L}, ["Y"], args={"power": 1.5})
    yield Case("LengthsToShape", "LengthsToShape", {"L": np.array([3, 3, 3], I32)}, ["Y"])
    yield Case("LengthsToShape_unequal", "LengthsToShape", {"L": L}, ["Y"])
    ids = np.array([0, 0, 2, 2, 2, 3], I32)
    for t in ("SegmentIdsToLengths", "SegmentIdsToRanges"):
        yield Case(t, t, {"S": ids}, ["Y"])
        yield Case(t + "_data", t, {"S": ids, "D": np.zeros((6, 2), F32)}, ["Y"])
        yield Case(t + "_empty", t, {"S": empty}, ["Y"])
        yield Case(t + "_i64", t, {"S": ids.astype(I64)}, ["Y"])
    yield Case("LengthsGather", "LengthsGather", {"ITEMS": _f("LG", 6, 2), "LENGTHS": L,
                                                  "INDICES": np.array([2, 0, 1, 2], I64)}, ["Y"])
    yield Case("LengthsGather_i32", "LengthsGather", {"ITEMS": np.arange(6, dtype=I64), "LENGTHS": L,
                                                      "INDICES": np.array([3], I32)}, ["Y"])
    yield Case("LengthsPad", "LengthsPad", {"D": _f("LP", 6, 2), "L": L}, ["Y"],
               args={"target_length": 4, "padding_value": 7.5})
    yield Case("LengthsPad_default", "LengthsPad", {"D": _f("LP", 6), "L": L}, ["Y"], args={"target_length": 3})
    yield Case("LengthsPad_too_long", "LengthsPad", {"D": _f("LP", 6), "L": L}, ["Y"], args={"target_length": 2})
    yield Case("LengthsSplit", "LengthsSplit", {"L": np.array([5, 0, 3, 1], I32)}, ["Y"], args={"n_split": 3})
    yield Case("LengthsSplit_input", "LengthsSplit", {"L": np.array([7, 2], I32), "N": np.array([2], I32)}, ["Y"])
    yield Case("LengthsTile", "LengthsTile", {"D": _f("LT", 4, 3), "L": L}, ["Y"], grad=True)
    yield Case("LengthsTile_1d", "LengthsTile", {"D": _f("LT1", 4), "L": L}, ["Y"], grad=True)
    topd = _f("TK", 6)
    topd[3] = topd[4]   # a tie
    yield Case("LengthsTopK", "LengthsTopK", {"D": topd, "L": L}, ["V", "I"], args={"k": 2}, grad=True)
    yield Case("LengthsTopK_k4", "LengthsTopK", {"D": topd, "L": L}, ["V", "I"], args={"k": 4}, grad=True)
    data = np.arange(10, dtype=F32) * 1.5
    ranges = np.array([[[0, 2], [5, 1]], [[3, 0], [7, 3]], [[2, 2], [0, 0]]], I32)
    yield Case("GatherRanges", "GatherRanges", {"D": data, "R": ranges}, ["Y", "L"])
    yield Case("GatherRanges_i64", "GatherRanges", {"D": data.astype(I64), "R": ranges.astype(I64)}, ["Y", "L"])
    yield Case("GatherRanges_oob", "GatherRanges", {"D": data, "R": np.array([[[8, 3]]], I32)}, ["Y", "L"])
    rd = np.array([[[0, 2], [2, 3]], [[0, 0], [5, 3]], [[8, 2], [0, 0]]], I32)
    yield Case("GatherRangesToDense", "GatherRangesToDense", {"D": data, "R": rd}, ["A", "B"],
               args={"lengths": [2, 3]})
    yield Case("GatherRangesToDense_key", "GatherRangesToDense",
               {"D": data, "R": rd, "K": np.array([5, 3, 9, 1, 4, 8, 2, 7, 6, 0], I64)}, ["A", "B"],
               args={"lengths": [2, 3]})
    yield Case("GatherRangesToDense_mismatch", "GatherRangesToDense", {"D": data, "R": rd}, ["A", "B"],
               args={"lengths": [2, 2], "min_observation": 1, "max_mismatched_ratio": 0.0})
    yield Case("GatherRangesToDense_mismatch_tolerated", "GatherRangesToDense", {"D": data, "R": rd}, ["A", "B"],
               args={"lengths": [2, 2]})
    yield Case("GatherRangesToDense_empty_ratio", "GatherRangesToDense", {"D": data, "R": rd}, ["A", "B"],
               args={"lengths": [2, 3], "min_observation": 1, "max_empty_ratio": 0.2})
    yield Case("GatherRangesToDense_i64", "GatherRangesToDense", {"D": data.astype(I64), "R": rd.astype(I64)},
               ["A", "B"], args={"lengths": [2, 3]})
    keys = np.array([3, 4, 0, 7, -2, 5], I32)
    vals = _f("PV", 6, 2)
    yield Case("Partition", "Partition", {"K": keys, "V": vals}, ["K0", "V0", "K1", "V1", "K2", "V2"])
    yield Case("Partition_pack", "Partition", {"K": keys.astype(I64), "V": vals}, ["K0", "V0", "K1", "V1"],
               args={"pack_first_input": 1})
    yield Case("Partition_2d_keys", "Partition", {"K": keys.reshape(2, 3), "V": _f("PV2", 2, 3, 2)},
               ["K0", "V0", "K1", "V1"])
    yield Case("Partition_float_keys", "Partition", {"K": vals[:, 0]}, ["K0", "K1"])
    yield Case("LengthsPartition", "LengthsPartition", {"L": np.array([2, 0, 4], I32), "K": keys, "V": vals},
               ["L0", "K0", "V0", "L1", "K1", "V1"])
    yield Case("LengthsPartition_pack", "LengthsPartition", {"L": np.array([3, 3], I32), "K": keys.astype(I64)},
               ["L0", "K0", "L1", "K1", "L2", "K2"], args={"pack_first_input": 1})
    gk = np.array([3, 4, 0, 7, 2, 5], I64)
    yield Case("GatherByKey", "GatherByKey", {"K": gk, "S0": _f("G0", 3, 2), "S1": _f("G1", 3, 2)}, ["Y"],
               grad=True)
    yield Case("GatherByKey_3", "GatherByKey", {"K": gk, "S0": _f("G0", 2), "S1": _f("G1", 2), "S2": _f("G2", 2)},
               ["Y"], grad=True)
    x = _f("SBL", 6, 4)
    yield Case("SplitByLengths", "SplitByLengths", {"X": x, "L": np.array([1, 2, 1, 0], I32)}, ["A", "B"],
               grad=True)
    yield Case("SplitByLengths_axis0", "SplitByLengths", {"X": x, "L": np.array([1, 2, 3, 0], I32)}, ["A", "B"],
               args={"axis": 0}, grad=True)
    yield Case("SplitByLengths_nhwc", "SplitByLengths", {"X": x, "L": np.array([1, 3], I32)}, ["A", "B"],
               args={"order": "NHWC"})
    yield Case("SplitByLengths_axis", "SplitByLengths", {"X": x, "L": np.array([1, 3], I32)}, ["A", "B"],
               args={"axis": 1}, grad=True)
    yield Case("SplitByLengths_scaling", "SplitByLengths", {"X": x, "L": np.array([1, 1], I32)}, ["A", "B"],
               args={"use_scaling_lengths": 1})
    yield Case("SplitByLengths_bad", "SplitByLengths", {"X": x, "L": np.array([1, 2, 4], I32)}, ["A"])


if __name__ == "__main__":
    print(record("lengths", cases()), "cases")
