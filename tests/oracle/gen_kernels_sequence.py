"""Oracle cases for sequences, padding and masks (engine/runtime/ops/sequence.py)."""
from __future__ import annotations

import numpy as np

from kernel_oracle import Case, record, rng_for

I32, I64, F32 = np.int32, np.int64, np.float32


def _f(name, *shape):
    return rng_for(name).randn(*shape).astype(F32)


def cases():
    L = np.array([2, 0, 3, 1], I32)
    x = _f("pad", 6, 3)
    yield Case("AddPadding", "AddPadding", {"X": x, "L": L}, ["Y", "LY"], grad=True)
    yield Case("AddPadding_widths", "AddPadding", {"X": x, "L": L}, ["Y", "LY"],
               args={"padding_width": 2, "end_padding_width": 1}, grad=True)
    yield Case("AddPadding_no_lengths", "AddPadding", {"X": x}, ["Y", "LY"], args={"padding_width": 2})
    yield Case("AddPadding_start", "AddPadding", {"X": x, "L": L, "S": _f("s", 3)}, ["Y", "LY"], grad=True)
    yield Case("AddPadding_start_end", "AddPadding", {"X": x, "L": L, "S": _f("s", 3), "E": _f("e", 3)},
               ["Y", "LY"], args={"end_padding_width": 2}, grad=True)
    yield Case("AddPadding_1out", "AddPadding", {"X": x[:, 0].copy(), "L": L}, ["Y"], args={"padding_width": 0,
                                                                                          "end_padding_width": 1})
    xp_ = _f("rp", 10, 2)
    LP = np.array([3, 2, 5], I32)
    yield Case("RemovePadding", "RemovePadding", {"X": xp_, "L": LP}, ["Y", "LY"], grad=True)
    yield Case("RemovePadding_widths", "RemovePadding", {"X": xp_, "L": LP}, ["Y", "LY"],
               args={"padding_width": 0, "end_padding_width": 2}, grad=True)
    yield Case("RemovePadding_no_lengths", "RemovePadding", {"X": xp_}, ["Y", "LY"], args={"padding_width": 3})
    yield Case("RemovePadding_too_short", "RemovePadding", {"X": xp_, "L": LP}, ["Y", "LY"],
               args={"padding_width": 2})
    yield Case("GatherPadding", "GatherPadding", {"X": xp_, "L": LP}, ["S", "E"])
    yield Case("GatherPadding_one", "GatherPadding", {"X": xp_, "L": LP}, ["S"], args={"end_padding_width": 0})
    yield Case("GatherPadding_widths", "GatherPadding", {"X": xp_, "L": LP}, ["S", "E"],
               args={"padding_width": 1, "end_padding_width": 2})
    yield Case("PadEmptySamples", "PadEmptySamples", {"L": L, "F": x, "G": np.arange(6, dtype=I64)},
               ["LO", "FO", "GO"])
    yield Case("PadEmptySamples_lengths_only", "PadEmptySamples", {"L": np.array([0, 0], I32)}, ["LO"])
    yield Case("PackSegments", "PackSegments", {"L": L, "D": x}, ["P"], grad=True)
    yield Case("PackSegments_mask", "PackSegments", {"L": L, "D": x}, ["P", "M"],
               args={"return_presence_mask": 1})
    yield Case("PackSegments_minf", "PackSegments", {"L": L, "D": x}, ["P"], args={"pad_minf": 1})
    yield Case("PackSegments_max_length", "PackSegments", {"L": L, "D": x}, ["P"], args={"max_length": 2},
               grad=True)
    yield Case("PackSegments_max_length_long", "PackSegments", {"L": L, "D": x}, ["P"], args={"max_length": 5})
    yield Case("PackSegments_i64_1d", "PackSegments", {"L": L.astype(I64), "D": np.arange(6, dtype=I64)}, ["P"])
    yield Case("PackSegments_empty", "PackSegments", {"L": np.zeros(0, I32), "D": np.zeros((0, 3), F32)}, ["P"])
    packed = _f("up", 4, 3, 2)
    yield Case("UnpackSegments", "UnpackSegments", {"L": L, "P": packed}, ["Y"], grad=True)
    yield Case("UnpackSegments_max_length", "UnpackSegments", {"L": L, "P": packed[:, :2]}, ["Y"],
               args={"max_length": 2})
    yield Case("PackRNNSequence", "PackRNNSequence", {"V": x, "L": L}, ["Y"], grad=True)
    yield Case("PackRNNSequence_1d", "PackRNNSequence", {"V": x[:, 0].copy(), "L": L}, ["Y"], grad=True)
    yield Case("UnpackRNNSequence", "UnpackRNNSequence", {"V": _f("ur", 3, 4, 2), "L": L}, ["Y"], grad=True)
    tb = _f("rev", 4, 3, 2)
    yield Case("ReversePackedSegs", "ReversePackedSegs", {"D": tb, "L": np.array([4, 0, 2], I32)}, ["Y"], grad=True)
    yield Case("ReversePackedSegs_i64", "ReversePackedSegs", {"D": tb, "L": np.array([1, 3, 2], I64)}, ["Y"])
    yield Case("ReversePackedSegs_too_long", "ReversePackedSegs", {"D": tb, "L": np.array([5, 3, 2], I32)}, ["Y"])
    yield Case("VariableLengthSequencePadding", "VariableLengthSequencePadding",
               {"X": tb, "L": np.array([4, 0, 2], I32)}, ["X"])
    m = np.array([True, False, True, True, False, True])
    yield Case("BooleanMask", "BooleanMask", {"D": x, "M": m}, ["Y"], grad=True,
               note="caffe2_bug: BooleanMaskGradient shapes dX like the mask and fills it from the flat dY")
    yield Case("BooleanMask_1d", "BooleanMask", {"D": x[:, 0].copy(), "M": m}, ["Y"], grad=True)
    yield Case("BooleanMask_indices", "BooleanMask", {"D": np.arange(6, dtype=I32), "M": m}, ["Y", "I"])
    yield Case("BooleanMask_bad_size", "BooleanMask", {"D": x, "M": m[:4]}, ["Y"])
    yield Case("BooleanMaskLengths", "BooleanMaskLengths", {"L": L, "M": m}, ["Y"])
    yield Case("BooleanUnmask", "BooleanUnmask", {"M0": np.array([True, False, True]), "D0": np.array([1., 2.], F32),
                                                  "M1": np.array([False, True, False]), "D1": np.array([3.], F32)},
               ["Y"])
    yield Case("BooleanUnmask_rows", "BooleanUnmask", {"M0": np.array([False, True, True]), "D0": _f("bu", 2, 2),
                                                       "M1": np.array([True, False, False]), "D1": _f("bu1", 1, 2)},
               ["Y"])
    sx = _f("sm", 3, 4)
    yield Case("SequenceMask_no_mode", "SequenceMask", {"X": sx, "L": np.array([1, 4, 0], I32)}, ["Y"])
    yield Case("SequenceMask", "SequenceMask", {"X": sx, "L": np.array([1, 4, 0], I32)}, ["Y"],
               args={"mode": "sequence"}, grad=True)
    yield Case("SequenceMask_fill", "SequenceMask", {"X": sx, "L": np.array([1, 4, 0], I32)}, ["Y"],
               args={"mode": "sequence", "fill_val": 2.5})
    yield Case("SequenceMask_window", "SequenceMask", {"X": sx, "C": np.array([0, 2, 3], I32)}, ["Y"],
               args={"mode": "window", "radius": 1}, grad=True)
    for mode in ("upper", "lower", "upperdiag", "lowerdiag"):
        yield Case("SequenceMask_" + mode, "SequenceMask", {"X": sx}, ["Y"], args={"mode": mode}, grad=True)
    x4 = _f("sm4", 2, 3, 4, 2)
    yield Case("SequenceMask_axis2", "SequenceMask", {"X": x4, "L": np.array([1, 3, 8, 0, 2, 5], I32)}, ["Y"],
               args={"mode": "sequence", "axis": 2})
    yield Case("SequenceMask_batch", "SequenceMask", {"X": x4, "L": np.array([1, 3, 0], I32)}, ["Y"],
               args={"mode": "sequence", "axis": 2, "batch": 0})
    yield Case("SequenceMask_repeat", "SequenceMask", {"X": x4, "L": np.array([1, 3, 4, 0, 2, 2], I32)}, ["Y"],
               args={"mode": "sequence", "axis": 2, "repeat_from_axis": 3})
    yield Case("SequenceMask_upper_axis2", "SequenceMask", {"X": x4}, ["Y"], args={"mode": "upper", "axis": 2})
    # issue 35: a given negative repeat_from_axis / batch is an axis counted from the end, not "absent"
    xr = np.arange(1, 11, dtype=F32).reshape(1, 5, 2)
    yield Case("SequenceMask_repeat_negative", "SequenceMask", {"X": xr, "L": np.array([4], I32)}, ["Y"],
               args={"mode": "sequence", "axis": 1, "repeat_from_axis": -1, "fill_val": -1.0}, grad=True)
    yield Case("SequenceMask_batch_negative", "SequenceMask", {"X": x4, "L": np.array([3], I32)}, ["Y"],
               args={"mode": "sequence", "axis": 1, "batch": -4})
    for mode in ("upper", "lowerdiag"):  # boolean_mask_test::test_sequence_mask_batching_triangle
        yield Case(f"SequenceMask_{mode}_batch", "SequenceMask", {"X": x4}, ["Y"],
                   args={"mode": mode, "axis": 2, "batch": 0, "fill_val": 1e-9}, grad=True)
    yield Case("SequenceMask_batch_minus_one", "SequenceMask", {"X": x4, "L": np.array([1, 3], I32)}, ["Y"],
               args={"mode": "sequence", "axis": 1, "batch": -1})


if __name__ == "__main__":
    print(record("sequence", cases()), "cases")
