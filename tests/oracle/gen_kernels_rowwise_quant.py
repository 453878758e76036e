"""Oracle cases for quantised embedding storage and fp16 (engine/runtime/ops/rowwise_quant.py).

Quantised tables are made by Caffe2 itself (``extra_ops``), so the lookups read Caffe2's bytes.
"""
from __future__ import annotations

import numpy as np

import kernel_oracle
from kernel_oracle import Case, record, rng_for

I32, I64, F32, F16 = np.int32, np.int64, np.float32, np.float16
RANDOM_OPS = {"Float16UniformFill"}


def _f(name, *shape):
    x = rng_for(name).randn(*shape).astype(F32)
    if x.ndim == 2 and x.shape[0] > 2:
        x[1] = 0.5        # a constant row: range 0
    return x


def cases():
    x = _f("table", 6, 8)
    for t in ("FloatToFused8BitRowwiseQuantized", "FloatToFused8BitRowwiseQuantizedHalfScaleBias",
              "FloatToFused4BitRowwiseQuantized", "FloatToFused2BitRowwiseQuantized",
              "FloatToFused4BitFakeRowwiseQuantized", "FloatToFused2BitFakeRowwiseQuantized"):
        yield Case(t, t, {"X": x}, ["Y"])
        yield Case(t + "_wide", t, {"X": _f(t, 3, 40) * 100}, ["Y"])
        yield Case(t + "_half_in", t, {"X": x.astype(F16)}, ["Y"])
    for t in ("FloatToFused4BitRowwiseQuantized", "FloatToFused2BitRowwiseQuantized",
              "FloatToFused4BitFakeRowwiseQuantized", "FloatToFused2BitFakeRowwiseQuantized"):
        yield Case(t + "_greedy", t, {"X": _f(t + "g", 6, 40)}, ["Y"], engine="GREEDY")
        yield Case(t + "_greedy_half", t.replace("Float", "Half", 1), {"X": _f(t + "g", 6, 40).astype(F16)}, ["Y"],
                   engine="GREEDY")
    yield Case("FloatToFused8BitRowwiseQuantized_3d", "FloatToFused8BitRowwiseQuantized", {"X": _f("t3", 2, 3, 4)}, ["Y"])
    yield Case("FloatToFused4BitRowwiseQuantized_odd", "FloatToFused4BitRowwiseQuantized", {"X": _f("odd", 2, 5)}, ["Y"])
    xh = x.astype(F16)
    for t in ("HalfFloatToFused8BitRowwiseQuantized", "HalfFloatToFused8BitRowwiseQuantizedHalfScaleBias",
              "HalfToFused4BitRowwiseQuantized", "HalfToFused2BitRowwiseQuantized",
              "HalfToFused4BitFakeRowwiseQuantized", "HalfToFused2BitFakeRowwiseQuantized"):
        yield Case(t, t, {"X": xh}, ["Y"])
    pairs = (("FloatToFused8BitRowwiseQuantized", ("Fused8BitRowwiseQuantizedToFloat",
                                                  "Fused8BitRowwiseQuantizedToHalfFloat")),
             ("FloatToFused8BitRowwiseQuantizedHalfScaleBias", ("Fused8BitRowwiseQuantizedHalfScaleBiasToFloat",
                                                               "Fused8BitRowwiseQuantizedHalfScaleBiasToHalfFloat")),
             ("FloatToFused4BitRowwiseQuantized", ("Fused4BitRowwiseQuantizedToFloat",
                                                  "Fused4BitRowwiseQuantizedToHalf")),
             ("FloatToFused2BitRowwiseQuantized", ("Fused2BitRowwiseQuantizedToFloat",
                                                  "Fused2BitRowwiseQuantizedToHalf")))
    idx = np.array([5, 0, 2, 2, 1, 3, 4], I64)
    L = np.array([2, 0, 4, 1], I32)
    w = rng_for("w").rand(7).astype(F32)
    for q, backs in pairs:
        for b in backs:
            yield _case_on(b, q, x)
        bits = {"FloatToFused8BitRowwiseQuantized": "Fused8BitRowwise", "FloatToFused4BitRowwiseQuantized":
                "Fused4BitRowwise", "FloatToFused2BitRowwiseQuantized": "Fused2BitRowwise"}.get(q)
        if bits:
            for r in ("Sum", "Mean", "WeightedSum"):
                t = f"SparseLengths{r}{bits}"
                yield _lookup(t, q, x, idx, L, w if r == "WeightedSum" else None)
                yield _lookup(t, q, x, idx.astype(I32), L, w if r == "WeightedSum" else None, name=t + "_i32")
            mapping = np.array([0, -1, 1, 2, -1, 3], I32)
            nb = {"Fused8BitRowwise": 8, "Fused4BitRowwise": 4, "Fused2BitRowwise": 2}[bits]
            for r in ("Sum", "Mean", "WeightedSum"):
                t = f"SparseLengths{r}{nb}BitRowwiseSparse"
                yield _lookup(t, q, x[[0, 2, 3, 5]], idx, L, w if r == "WeightedSum" else None, mapping=mapping)
    yield _lookup("SparseLengthsSum4BitRowwiseSparse", "FloatToFused4BitRowwiseQuantized", x, idx, L, None,
                  mapping=np.array([0], I32), name="SparseLengthsSum4BitRowwiseSparse_unpruned")
    yield _lookup("SparseLengthsWeightedSum2BitRowwiseSparse", "FloatToFused2BitRowwiseQuantized", x[:0], idx[:0],
                  np.zeros(3, I32), w[:0], mapping=np.array([0], I32), name="SparseLengthsWeightedSum2BitRowwiseSparse_empty")
    yield Case("SparseLengthsSumSparseLookup", "SparseLengthsSumSparseLookup",
               {"I": idx, "L": L, "M": np.array([0, -1, 1, 2, -1, 3], I32)}, ["IO", "LO"])
    yield Case("SparseLengthsSumSparseLookup_w", "SparseLengthsSumSparseLookup",
               {"I": idx.astype(I32), "L": L, "M": np.array([0, -1, 1, 2, -1, 3], I32), "W": w}, ["IO", "LO", "WO"])
    yield Case("FloatToRowwiseQuantized8Bits", "FloatToRowwiseQuantized8Bits", {"X": x}, ["Q", "SB"])
    yield Case("FloatToRowwiseQuantized8Bits_3d", "FloatToRowwiseQuantized8Bits", {"X": _f("r3", 3, 2, 5) * 10},
               ["Q", "SB"])
    yield Case("Rowwise8BitQuantizedToFloat", "Rowwise8BitQuantizedToFloat",
             {"Q": rng_for("q8").randint(0, 256, (4, 3)).astype(np.uint8),
              "SB": rng_for("sb").rand(4, 2).astype(F32)}, ["Y"])
    for r, wt in (("Sum", False), ("Mean", False), ("WeightedSum", True), ("WeightedMean", True)):
        yield _rw8(f"SparseLengths{r}8BitsRowwise", x, w if wt else None, idx, L)
    yield Case("GatherFused8BitRowwise", "GatherFused8BitRowwise",
               {"D": rng_for("g8").randint(0, 256, (5, 12)).astype(np.uint8), "I": np.array([4, 0, 4], I64)}, ["Y"])
    yield Case("GatherFused8BitRowwise_oob", "GatherFused8BitRowwise",
               {"D": rng_for("g8").randint(0, 256, (5, 12)).astype(np.uint8), "I": np.array([5], I32)}, ["Y"])
    cb = rng_for("cb").randn(5).astype(F32)
    c0 = rng_for("c0").randint(0, 5, (3, 4)).astype(np.uint8)
    c1 = rng_for("c1").randint(0, 5, (6,)).astype(np.uint8)
    yield Case("QuantDecode", "QuantDecode", {"CB": cb, "C0": c0}, ["Y0"], grad=True)
    yield Case("QuantDecode_two", "QuantDecode", {"CB": cb, "C0": c0, "C1": c1}, ["Y0", "Y1"], grad=True)
    yield Case("ByteWeightDequant", "ByteWeightDequant", {"W": rng_for("bw").randint(0, 256, (6,)).astype(np.uint8)},
               ["Y"], args={"min": -1.5, "max": 2.0, "shape": [2, 3]})
    yield Case("FloatToHalf", "FloatToHalf", {"X": np.array([1e-8, 1.0001, 7e4, -3.3], F32)}, ["Y"], grad=True)
    yield Case("FloatToHalf_clip", "FloatToHalf", {"X": np.array([1e-8, 1.0001, 7e4, -7e4], F32)}, ["Y"],
               args={"clip": 1})
    yield Case("HalfToFloat", "HalfToFloat", {"X": x.astype(F16)}, ["Y"], grad=True)
    yield Case("HalfToFloat_bad", "HalfToFloat", {"X": x}, ["Y"])
    yield Case("Float16ConstantFill", "Float16ConstantFill", {}, ["Y"], args={"value": 3.3, "shape": [2, 3]})
    yield Case("Float16ConstantFill_default", "Float16ConstantFill", {}, ["Y"])
    for bits in (1, 2, 4, 8):
        yield Case(f"FloatToFusedRandRowwiseQuantized_{bits}", "FloatToFusedRandRowwiseQuantized", {"X": _f("rq", 3, 7)},
                   ["Y"], args={"bitwidth": bits, "random": 0})
        yield Case(f"FusedRandRowwiseQuantizedToFloat_{bits}", "FusedRandRowwiseQuantizedToFloat",
                   {"Q": np.zeros((1, 1), np.uint8)}, ["Y"], extra_ops=[
                       ("GivenTensorFill", [], ["_f"], {"values": _f("rq", 3, 7).ravel().tolist(), "shape": [3, 7]}),
                       ("FloatToFusedRandRowwiseQuantized", ["_f"], ["_q"], {"bitwidth": bits, "random": 0}),
                       ("Copy", ["_q"], ["Q"], {})])
    # NOTE: random=1 draws from its own unseeded engine in Caffe2: tested in test_kernels_sparse_random.py
    yield Case("FloatToFusedRandRowwiseQuantized_3d", "FloatToFusedRandRowwiseQuantized", {"X": _f("rq", 3, 7, 1)},
               ["Y"], args={"bitwidth": 2, "random": 0})
    yield Case("Float16UniformFill", "Float16UniformFill", {}, ["Y"], args={"min": -2.0, "max": 1.0, "shape": [3, 4]},
               values=False)


def _made_by(quant, x, blob):
    """Extra ops that fill `blob` with Caffe2's quantisation of `x` (ops may not run in place)."""
    return [("GivenTensorFill", [], ["_f"], {"values": x.ravel().tolist(), "shape": list(x.shape)}),
            (quant, ["_f"], ["_q"], {}), ("Copy", ["_q"], [blob], {})]


def _case_on(back, quant, x):
    """`back` applied to Caffe2's own quantisation of `x`."""
    return Case(back, back, {"Q": np.zeros(1, np.uint8)}, ["Y"], extra_ops=_made_by(quant, x, "Q"))


def _lookup(t, quant, x, idx, L, w, mapping=None, name=None):
    ins = {"D": np.zeros(1, np.uint8), **({"W": w} if w is not None else {}), "I": idx, "L": L,
           **({"M": mapping} if mapping is not None else {})}
    return Case(name or t, t, ins, ["Y"], extra_ops=_made_by(quant, x, "D"), rtol=1e-4, atol=1e-4)


def _rw8(t, x, w, idx, L):
    ins = {"D": np.zeros(1, np.uint8), **({"W": w} if w is not None else {}), "I": idx, "L": L,
           "SB": np.zeros((6, 2), F32)}
    return Case(t, t, ins, ["Y"], extra_ops=[
        ("GivenTensorFill", [], ["_f"], {"values": x.ravel().tolist(), "shape": list(x.shape)}),
        ("FloatToRowwiseQuantized8Bits", ["_f"], ["_q", "_sb"], {}), ("Copy", ["_q"], ["D"], {}),
        ("Copy", ["_sb"], ["SB"], {})], rtol=1e-4, atol=1e-4)


if __name__ == "__main__":
    kernel_oracle.seed_random_ops(RANDOM_OPS)
    print(record("rowwise_quant", cases()), "cases")
