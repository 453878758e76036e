"""Oracle cases for dense/sparse conversion and feature ops (engine/runtime/ops/features.py)."""
from __future__ import annotations

import numpy as np

from kernel_oracle import Case, record, rng_for

I32, I64, F32 = np.int32, np.int64, np.float32
B = bool


def _f(name, *shape):
    return rng_for(name).randn(*shape).astype(F32)


def cases():
    L = np.array([2, 0, 3], I32)
    idx = np.array([1, 4, 0, 2, 4], I64)
    yield Case("BatchSparseToDense", "BatchSparseToDense", {"L": L, "I": idx, "V": _f("bsd", 5)}, ["Y"],
               args={"dense_last_dim": 5}, grad=True)
    yield Case("BatchSparseToDense_default", "BatchSparseToDense", {"L": L, "I": idx.astype(I32), "V": _f("bsd", 5)},
               ["Y"], args={"dense_last_dim": 6, "default_value": -1.5})
    yield Case("BatchSparseToDense_like", "BatchSparseToDense",
               {"L": L, "I": idx, "V": _f("bsd", 5), "S": np.zeros((3, 7), F32)}, ["Y"], grad=True)
    yield Case("BatchSparseToDense_dup", "BatchSparseToDense",
               {"L": np.array([3], I32), "I": np.array([1, 1, 0], I64), "V": _f("dup", 3)}, ["Y"],
               args={"dense_last_dim": 2})
    yield Case("BatchSparseToDense_oob", "BatchSparseToDense", {"L": L, "I": idx, "V": _f("bsd", 5)}, ["Y"],
               args={"dense_last_dim": 4})
    yield Case("BatchDenseToSparse", "BatchDenseToSparse", {"L": L, "I": idx, "D": _f("bds", 3, 5)}, ["Y"], grad=True)
    ids = np.array([7, 3, 9, 3, 11, 1], I64)
    vals = _f("sdm", 6, 2)
    yield Case("SparseToDenseMask", "SparseToDenseMask", {"I": ids, "V": vals, "D": np.array([0.5, -1], F32)},
               ["Y"], args={"mask": [3, 1, 7, 5]}, grad=True)
    yield Case("SparseToDenseMask_lengths", "SparseToDenseMask",
               {"I": ids.astype(I32), "V": vals, "D": np.array([0.5, -1], F32), "L": np.array([4, 0, 2], I32)},
               ["Y", "P"], args={"mask": [3, 1, 7, 5], "return_presence_mask": 1}, grad=True)
    yield Case("SparseToDenseMask_scalar", "SparseToDenseMask",
               {"I": ids, "V": vals[:, 0].copy(), "D": np.array(2.0, F32)}, ["Y", "P"],
               args={"mask": [9, 3], "return_presence_mask": 1})
    yield Case("SparseToDenseMask_skipped", "SparseToDenseMask", {"I": ids, "V": vals, "D": np.zeros(2, F32)},
               ["Y"], args={"mask": [3], "max_skipped_indices": 2})
    bad = np.array([1, -1, 3, -2, -5, 7, 2**31 - 1, 3], I32)  # negative and type-max indices are invalid
    for rows in (2, 3):  # rows holding an invalid index: under max_skipped_indices=3 skipped, at it an error
        lens = np.array([2, 2, 1, 3] if rows == 3 else [2, 3, 3], I32)
        yield Case(f"SparseToDenseMask_invalid_rows{rows}", "SparseToDenseMask",
                   {"I": bad if rows == 3 else np.where(np.isin(np.arange(8), [4, 6]), 3, bad).astype(I32),
                    "V": _f("sdmi", 8),
                    "D": np.array(0.5, F32), "L": lens}, ["Y", "P"],
                   args={"mask": [3, 1, 7], "return_presence_mask": 1, "max_skipped_indices": 3})
    yield Case("SparseToDenseMask_invalid_i64", "SparseToDenseMask",
               {"I": np.array([1, 3_000_000_000, -4, 7], I64), "V": _f("sdm64", 4), "D": np.array(0.0, F32)},
               ["Y"], args={"mask": [7, 1]})
    data = np.array([[1, 4], [3, 4], [2, 0]], I32)
    yield Case("BatchOneHot", "BatchOneHot", {"X": data, "L": np.array([2, 3], I32),
                                              "V": np.array([1, 3, 4, 0, 7], I32)}, ["Y"])
    yield Case("BatchOneHot_i64", "BatchOneHot", {"X": data.astype(I64), "L": np.array([1, 1], I32),
                                                  "V": np.array([2, 0], I64)}, ["Y"])
    yield Case("BatchOneHot_float", "BatchOneHot", {"X": data.astype(F32), "L": np.array([1, 1], I32),
                                                    "V": np.array([2, 0], F32)}, ["Y"])
    fd = _f("bbo", 4, 2)
    yield Case("BatchBucketOneHot", "BatchBucketOneHot", {"X": fd, "L": np.array([2, 3], I32),
                                                          "B": np.array([-0.5, 0.5, -1, 0, 1], F32)}, ["Y"])
    yield Case("BatchBucketOneHot_exact", "BatchBucketOneHot", {"X": np.array([[0.5], [1.0]], F32),
                                                                "L": np.array([2], I32),
                                                                "B": np.array([0.5, 1.0], F32)}, ["Y"])
    yield Case("BatchBucketOneHot_repeated", "BatchBucketOneHot", {"X": np.array([[0.0], [0.0], [-1.0], [2.0]], F32),
                                                                  "L": np.array([4], I32),
                                                                  "B": np.array([-1, 0, 0, 0], F32)}, ["Y"])
    yield Case("SegmentOneHot", "SegmentOneHot", {"L": L, "I": idx, "S": np.array([6], I64)}, ["Y"])
    yield Case("Bucketize", "Bucketize", {"X": np.array([[-2, 0.1], [0.5, 3.0]], F32)}, ["Y"],
               args={"boundaries": [0.1, 0.5, 1.0]})
    yield Case("BatchBucketize", "BatchBucketize",
               {"F": _f("bb", 4, 3), "I": np.array([2, 0], I32), "B": np.array([-0.5, 0.5, 0.0], F32),
                "L": np.array([2, 1], I32)}, ["Y"])
    # feature maps
    p0, p1 = np.array([True, False, True]), np.array([True, True, False])
    yield Case("MergeDenseFeatureTensors", "MergeDenseFeatureTensors",
               {"V": _f("mdf", 3, 2), "P": np.stack([p0, p1], axis=1)}, ["L", "K", "V2"], args={"feature_ids": [11, 4]})
    yield Case("MergeSingleScalarFeatureTensors", "MergeSingleScalarFeatureTensors",
               {"a": _f("ms0", 3), "ap": p0, "b": _f("ms1", 3), "bp": p1}, ["L", "K", "V"],
               args={"feature_ids": [11, 4]}, grad=True)
    yield Case("MergeSingleScalarFeatureTensorsGradient_strings", "MergeSingleScalarFeatureTensorsGradient",
               {"ap": p0, "bp": p1, "g": np.array([b"0.1", b"1.1", b"1.2", b"2.3"], dtype="S")}, ["ag", "bg"])
    yield Case("MergeSingleListFeatureTensors", "MergeSingleListFeatureTensors",
               {"al": np.array([2, 1, 0], I32), "av": _f("sl0", 3), "ap": p0,
                "bl": np.array([0, 2, 3], I32), "bv": _f("sl1", 5), "bp": p1}, ["L", "K", "VL", "VV"],
               args={"feature_ids": [11, 4]}, grad=True,
               note="caffe2_bug: the gradient of a values input drops the values of absent examples")
    yield Case("MergeSingleMapFeatureTensors", "MergeSingleMapFeatureTensors",
               {"al": np.array([2, 1, 0], I32), "ak": np.arange(3, dtype=I64), "av": _f("sm0", 3), "ap": p0,
                "bl": np.array([0, 2, 3], I32), "bk": np.arange(5, dtype=I64) + 10, "bv": _f("sm1", 5), "bp": p1},
               ["L", "K", "VL", "VK", "VV"], args={"feature_ids": [11, 4]}, grad=True,
               note="caffe2_bug: the gradient of a values input drops the values of absent examples")
    yield Case("MergeSingleListFeatureTensors_absent_empty", "MergeSingleListFeatureTensors",
               {"al": np.array([2, 0, 1], I32), "av": _f("sl0", 3), "ap": p0,
                "bl": np.array([0, 2, 0], I32), "bv": _f("sl1", 2), "bp": p1}, ["L", "K", "VL", "VV"],
               args={"feature_ids": [11, 4]}, grad=True)
    yield Case("MergeMultiScalarFeatureTensors", "MergeMultiScalarFeatureTensors",
               {"al": np.array([2, 0, 1], I32), "ak": np.array([1, 2, 3], I64), "av": _f("mm0", 3),
                "bl": np.array([1, 1, 0], I32), "bk": np.array([4, 5], I64), "bv": _f("mm1", 2)}, ["L", "K", "V"],
               grad=True)
    yield Case("MergeMultiListFeatureTensors", "MergeMultiListFeatureTensors",
               {"al": np.array([2, 0, 1], I32), "ak": np.array([1, 2, 3], I64), "avl": np.array([1, 2, 0], I32),
                "avv": _f("ml0", 3), "bl": np.array([1, 1, 0], I32), "bk": np.array([4, 5], I64),
                "bvl": np.array([2, 1], I32), "bvv": _f("ml1", 3)}, ["L", "K", "VL", "VV"], grad=True)
    yield Case("MergeMultiMapFeatureTensors", "MergeMultiMapFeatureTensors",
               {"al": np.array([2, 0, 1], I32), "ak": np.array([1, 2, 3], I64), "avl": np.array([1, 2, 0], I32),
                "avk": np.array([7, 8, 9], I64), "avv": _f("mp0", 3), "bl": np.array([1, 1, 0], I32),
                "bk": np.array([4, 5], I64), "bvl": np.array([2, 1], I32), "bvk": np.array([1, 2, 3], I64),
                "bvv": _f("mp1", 3)}, ["L", "K", "VL", "VK", "VV"], grad=True)
    yield Case("KeyValueToMap_roundtrip", "MapToKeyValue", {"M": np.zeros(1, I64)}, ["K2", "V2"],
               extra_ops=[("GivenTensorInt64Fill", [], ["_k"], {"values": [5, 1, 9], "shape": [3]}),
                          ("GivenTensorInt64Fill", [], ["_v"], {"values": [50, 10, 90], "shape": [3]}),
                          ("KeyValueToMap", ["_k", "_v"], ["M"], {})])
    yield Case("KeySplit", "KeySplit", {"K": np.array([2, 0, 2, 1, 0], I64)}, ["A", "B", "C"],
               args={"categorical_limit": 3})
    yield Case("KeySplit_i32", "KeySplit", {"K": np.array([1, 1, 0], I32)}, ["A", "B"], args={"categorical_limit": 2})
    hx = np.array([0, 1, -5, 123456789, 2 ** 31 - 1], I64)
    yield Case("IndexHash", "IndexHash", {"X": hx}, ["Y"], args={"modulo": 1000})
    yield Case("IndexHash_seed", "IndexHash", {"X": hx}, ["Y"], args={"modulo": 97, "seed": 7})
    yield Case("IndexHash_i32", "IndexHash", {"X": hx[:4].astype(I32)}, ["Y"], args={"modulo": 1 << 30, "seed": 3})
    floats = np.array([[3.2, -1, 7.0, 2.0], [8.0, 0, 1.1, 2.4], [0.0, 0, 5.0, 9.0]], F32)
    yield Case("NGramFromCategorical", "NGramFromCategorical", {"X": floats}, ["Y"],
               args={"col_ids": [0, 2], "categorical_limits": [3, 2], "vals": [8, 3, 5, 1, 7]})
    yield Case("DenseVectorToIdList", "DenseVectorToIdList",
               {"X": np.array([[0, 1.5, 0, 2], [0, 0, 0, 0], [3, 0, 0, -1]], F32)}, ["L", "V"])
    yield Case("MergeIdLists", "MergeIdLists",
               {"l0": np.array([2, 1, 0], I32), "v0": np.array([5, 3, 9], I64),
                "l1": np.array([2, 0, 1], I32), "v1": np.array([3, 1, 4], I64)}, ["L", "V"])
    yield Case("FindDuplicateElements", "FindDuplicateElements", {"X": np.array([3, 1, 3, 2, 1, 3], I64)}, ["Y"])
    yield Case("FindDuplicateElements_float", "FindDuplicateElements", {"X": np.array([0.5, 1, 0.5], F32)}, ["Y"])
    yield Case("RemoveDataBlocks", "RemoveDataBlocks", {"D": _f("rdb", 5, 2), "I": np.array([3, 0, 3], I64)}, ["Y"])
    yield Case("RemoveDataBlocks_i32", "RemoveDataBlocks", {"D": _f("rdb", 5), "I": np.array([4], I32)}, ["Y"])
    yield Case("UnsafeCoalesce", "UnsafeCoalesce", {"a": _f("uc", 2, 3), "b": _f("uc2", 4)}, ["a", "b", "Y"])
    yield Case("ViterbiPath", "ViterbiPath", {"P": _f("vp", 5, 3), "T": _f("vt", 3, 3)}, ["Y"])
    yield Case("SwapBestPath", "SwapBestPath", {"P": _f("sb", 4, 3), "B": np.array([0, 2, 1, 1], I32)}, ["Y"])
    yield Case("APMeter", "APMeter", {"P": rng_for("ap").rand(6, 3).astype(F32),
                                      "L": rng_for("apl").randint(0, 2, (6, 3)).astype(I32)}, ["Y"])
    yield Case("APMeter_buffer", "APMeter", {"P": rng_for("ap").rand(6, 3).astype(F32),
                                             "L": rng_for("apl").randint(0, 2, (6, 3)).astype(I32)}, ["Y"],
               args={"buffer_size": 4})


if __name__ == "__main__":
    print(record("features", cases()), "cases")
