"""Kernel cases for linear algebra and tensor ops (family ``tensor``), recorded from real Caffe2.

Run from tests/oracle:
``PYTHONHASHSEED=0 GLOG_minloglevel=2 ../../.venv-caffe2/bin/python gen_kernels_tensor.py ../golden``
"""
import numpy as np

from kernel_oracle import Case, record, rng_for


def _x(name, shape, lo=-2.0, hi=2.0):
    return rng_for(name).uniform(lo, hi, size=shape).astype("f4")


def _linear():
    x, y = _x("dx", (4, 5)), _x("dy", (4, 5))
    for t in ("DotProduct", "CosineSimilarity", "L1Distance"):
        yield Case(t, t, {"X": x, "Y": y}, ["Z"], grad=True)
        yield Case(t + "_1d", t, {"X": x[0], "Y": y[0]}, ["Z"], grad=True)
        yield Case(t + "_badshape", t, {"X": x, "Y": y[:, :4].copy()}, ["Z"])
    yield Case("DotProduct_empty", "DotProduct", {"X": np.zeros((0, 5), "f4"), "Y": np.zeros((0, 5), "f4")}, ["Z"],
               grad=True)
    yield Case("CosineSimilarity_zero", "CosineSimilarity", {"X": np.zeros((2, 3), "f4"), "Y": y[:2, :3].copy()},
               ["Z"], grad=True)
    y7 = _x("dy7", (4, 7))
    yield Case("DotProductWithPadding", "DotProductWithPadding", {"X": x, "Y": y7}, ["Z"], grad=True)
    yield Case("DotProductWithPadding_xlong", "DotProductWithPadding", {"X": y7, "Y": x}, ["Z"],
               {"pad_value": 1.5}, grad=True)
    y10 = _x("dy10", (4, 10))
    yield Case("DotProductWithPadding_replicate", "DotProductWithPadding", {"X": x, "Y": y10}, ["Z"],
               {"replicate": 1}, grad=True)
    yield Case("DotProductWithPadding_replicate_xlong", "DotProductWithPadding", {"X": y10, "Y": x}, ["Z"],
               {"replicate": True}, grad=True)
    x3 = _x("el", (2, 3, 4))
    yield Case("ElementwiseLinear", "ElementwiseLinear", {"X": x, "w": _x("elw", (5,)), "b": _x("elb", (5,))},
               ["Y"], grad=True)
    yield Case("ElementwiseLinear_3d", "ElementwiseLinear", {"X": x3, "w": _x("elw2", (12,)), "b": _x("elb2", (12,))},
               ["Y"], grad=True)
    yield Case("ElementwiseLinear_axis2", "ElementwiseLinear", {"X": x3, "w": _x("elw3", (4,)), "b": _x("elb3", (4,))},
               ["Y"], {"axis": 2}, grad=True)
    yield Case("ElementwiseLinear_bad", "ElementwiseLinear", {"X": x3, "w": _x("elw4", (3,)), "b": _x("elb4", (3,))},
               ["Y"], {"axis": 2})
    # TT: inp 2*3, out 2*2, ranks 1,2,1 -> cores 2*2*1*2... sizes inp_i * r_i * r_{i+1} * out_i
    inp, out, ranks = [2, 3], [2, 2], [1, 2, 1]
    n_cores = sum(inp[i] * ranks[i] * ranks[i + 1] * out[i] for i in range(2))
    yield Case("TT", "TT", {"X": _x("ttx", (3, 6)), "b": _x("ttb", (4,)), "cores": _x("ttc", (n_cores,))}, ["Y"],
               {"inp_sizes": inp, "out_sizes": out, "tt_ranks": ranks}, grad=True)
    inp, out, ranks = [2, 2, 3], [3, 1, 2], [1, 3, 2, 1]
    n_cores = sum(inp[i] * ranks[i] * ranks[i + 1] * out[i] for i in range(3))
    yield Case("TT_3", "TT", {"X": _x("ttx3", (2, 12)), "b": _x("ttb3", (6,)), "cores": _x("ttc3", (n_cores,))}, ["Y"],
               {"inp_sizes": inp, "out_sizes": out, "tt_ranks": ranks})
    yield Case("ConcatBatchMatMulBatchGatherOp", "ConcatBatchMatMulBatchGatherOp",
               {"I": np.array([0, 1, 4, 5, 8], "i4"), "A": _x("cb1", (2, 4)), "B": _x("cb2", (2, 4)),
                "C": _x("cb3", (2, 4))}, ["Y"])
    # BatchMatMul with 1-D operands and broadcast
    for name, a, b in (("1d_2d", (3,), (3, 2)), ("2d_1d", (2, 3), (3,)), ("1d_3d", (3,), (2, 3, 2)),
                       ("1d_1d", (3,), (3,)), ("3d_1d", (2, 2, 3), (3,))):
        yield Case("BatchMatMul_" + name, "BatchMatMul", {"A": _x("bma" + name, a), "B": _x("bmb" + name, b)}, ["Y"],
                   grad=True)
    yield Case("BatchMatMul_1d_2d_transb", "BatchMatMul", {"A": _x("bmt", (3,)), "B": _x("bmtb", (2, 3))}, ["Y"],
               {"trans_b": 1})
    yield Case("BatchMatMul_bcast", "BatchMatMul", {"A": _x("bmc", (2, 2, 3)), "B": _x("bmcb", (3, 4))}, ["Y"],
               {"broadcast": 1})
    yield Case("BatchMatMul_bcast2", "BatchMatMul", {"A": _x("bmd", (2, 1, 2, 3)), "B": _x("bmdb", (3, 3, 4))}, ["Y"],
               {"broadcast": 1})
    # FC with an empty batch
    yield Case("FC_empty", "FC", {"X": np.zeros((0, 4), "f4"), "W": _x("fcw", (3, 4)), "b": _x("fcb", (3,))}, ["Y"],
               grad=True)


def _tensor():
    x = _x("tx", (2, 3))
    yield Case("Tile", "Tile", {"X": x}, ["Y"], {"tiles": 3, "axis": 1}, grad=True)
    yield Case("Tile_default", "Tile", {"X": x}, ["Y"], {"tiles": 2}, grad=True)
    yield Case("Tile_inputs", "Tile", {"X": x, "t": np.array([3], "i4"), "a": np.array([0], "i4")}, ["Y"], grad=True)
    yield Case("Tile_inputs_axis1", "Tile", {"X": x, "t": np.array([2], "i4"), "a": np.array([1], "i4")}, ["Y"],
               grad=True)
    yield Case("Tile_negaxis", "Tile", {"X": x}, ["Y"], {"tiles": 2, "axis": -1})
    yield Case("Tile_tiles_input", "Tile", {"X": x, "t": np.array([2], "i4")}, ["Y"], {"axis": 1}, grad=True)
    yield Case("NumpyTile", "NumpyTile", {"X": x, "r": np.array([2, 3], "i8")}, ["Y"])
    yield Case("NumpyTile_bad", "NumpyTile", {"X": x, "r": np.array([2], "i8")}, ["Y"])
    x21 = _x("ex", (2, 1))
    yield Case("Expand", "Expand", {"X": x21, "s": np.array([2, 3], "i8")}, ["Y"], grad=True)
    yield Case("Expand_rank", "Expand", {"X": x21, "s": np.array([3, 1, 1], "i8")}, ["Y"], grad=True)
    yield Case("Expand_bad", "Expand", {"X": x, "s": np.array([2, 4], "i8")}, ["Y"])
    t = _x("topk", (3, 5))
    t[0, 1] = t[0, 3]  # a tie
    yield Case("TopK", "TopK", {"X": t}, ["V", "I"], {"k": 2}, grad=True)
    yield Case("TopK_flat", "TopK", {"X": t}, ["V", "I", "F"], {"k": 3}, grad=True)
    yield Case("TopK_axis0", "TopK", {"X": t}, ["V", "I"], {"k": 2, "axis": 0}, grad=True)
    yield Case("TopK_3d", "TopK", {"X": _x("topk3", (2, 3, 4))}, ["V", "I", "F"], {"k": 2, "axis": 1}, grad=True)
    yield Case("TopK_kinput", "TopK", {"X": t, "k": np.array([4], "i8")}, ["V", "I"], grad=True)
    yield Case("TopK_bigk", "TopK", {"X": t}, ["V", "I"], {"k": 6})
    yield Case("FlexibleTopK", "FlexibleTopK", {"X": t, "k": np.array([1, 3, 2], "i8")}, ["V", "I"], grad=True)
    yield Case("FlexibleTopK_3d", "FlexibleTopK", {"X": _x("ftk3", (2, 2, 4)), "k": np.array([1, 4, 2, 3], "i8")},
               ["V", "I"], grad=True)
    x234 = _x("md", (2, 3, 4))
    yield Case("MergeDim", "MergeDim", {"X": x234}, ["Y"])
    yield Case("PrependDim", "PrependDim", {"X": _x("pd", (6, 4))}, ["Y"], {"dim_size": 2}, grad=True)
    yield Case("PrependDim_bad", "PrependDim", {"X": _x("pd", (6, 4))}, ["Y"], {"dim_size": 4})
    idx = np.array([5, 3, 9, 3, 7], "i4")
    yield Case("Find", "Find", {"I": idx, "Q": np.array([3, 9, 8, 7, 5], "i4")}, ["Y"])
    yield Case("Find_int64", "Find", {"I": idx.astype("i8"), "Q": np.array([3, 4], "i8")}, ["Y"], {"missing_value": -7})
    u = np.array([5, 3, 9, 3, 5, 1, 1], "i4")
    yield Case("Unique", "Unique", {"X": u}, ["U", "R"])
    yield Case("Unique_one", "Unique", {"X": u.astype("i8")}, ["U"])
    yield Case("Unique_remap64", "Unique", {"X": u.astype("i8")}, ["U", "R"])
    yield Case("IsMemberOf", "IsMemberOf", {"X": u}, ["Y"], {"value": [3, 1]})
    yield Case("IsMemberOf_int64", "IsMemberOf", {"X": u.astype("i8")}, ["Y"], {"value": [9, 4], "dtype": 10})
    d = np.zeros((3, 4), "f4")
    yield Case("Scatter", "Scatter", {"D": d, "I": np.array([[1, 0], [2, 3]], "i4"), "U": _x("su", (2, 2))}, ["Y"])
    yield Case("Scatter_axis0", "Scatter", {"D": d, "I": np.array([[1, 0, 2, 2]], "i8"), "U": _x("su2", (1, 4))},
               ["Y"], {"axis": 0})
    yield Case("Scatter_neg_axis", "Scatter", {"D": _x("sd3", (2, 3, 2)), "I": np.array([[[1], [0]]], "i4"),
                                              "U": _x("su3", (1, 2, 1))}, ["Y"], {"axis": -2})
    yield Case("CopyRowsToTensor", "CopyRowsToTensor", {"T": _x("crt", (3, 4)), "I": np.array([0, 2], "i8"),
                                                        "R": _x("crr", (4,))}, ["T"], grad=True)
    yield Case("CopyRowsToTensor_int32", "CopyRowsToTensor", {"T": _x("crt", (3, 4)), "I": np.array([0], "i4"),
                                                              "R": _x("crr", (4,))}, ["T"])
    # Range
    for name, vals in (("stop", [np.array(5, "i4")]), ("start_stop", [np.array(2, "i4"), np.array(9, "i4")]),
                       ("float", [np.array(2, "f4"), np.array(9, "f4"), np.array(1.5, "f4")]),
                       ("neg", [np.array(9, "i8"), np.array(1, "i8"), np.array(-2, "i8")]),
                       ("neg_float", [np.array(9, "f4"), np.array(2, "f4"), np.array(-2, "f4")]),
                       ("empty", [np.array(5, "i4"), np.array(2, "i4")]),
                       ("double", [np.array(0.5, "f8"), np.array(2.0, "f8"), np.array(0.25, "f8")])):
        yield Case("Range_" + name, "Range", {f"B{i}": v for i, v in enumerate(vals)}, ["Y"])
    yield Case("Range_zero_step", "Range", {"a": np.array(1, "i4"), "b": np.array(5, "i4"), "c": np.array(0, "i4")},
               ["Y"])
    # Gather with match_outer (and its BatchGatherGradient), BatchGather
    g = _x("gather", (2, 4, 3))
    gi = np.array([[0, 3, 1], [2, 2, 0]], "i4")
    yield Case("Gather_match_outer", "Gather", {"D": g, "I": gi}, ["Y"], {"axis": 1, "match_outer": 1}, grad=True)
    yield Case("Gather_axis1", "Gather", {"D": g, "I": gi}, ["Y"], {"axis": 1}, grad=True)
    yield Case("Gather_match_outer_bad", "Gather", {"D": g, "I": gi[:, :2].copy()}, ["Y"],
               {"axis": 2, "match_outer": 1})
    yield Case("Gather_match_outer_axis2", "Gather", {"D": g, "I": np.array([[[1], [0], [2], [2]], [[0], [0], [1], [2]]],
                                                                           "i8")}, ["Y"],
               {"axis": 2, "match_outer": 1}, grad=True)
    yield Case("BatchGather", "BatchGather", {"D": g, "I": gi}, ["Y"], grad=True)
    yield Case("BatchGather_match_outer", "BatchGather", {"D": g, "I": gi}, ["Y"], {"match_outer": 1}, grad=True)
    # ScatterWeightedSum: a repeated index scales its row by w0 once per occurrence, then adds every slice
    sw = {"X": _x("sws", (4, 3)), "w0": np.array([0.5], "f4"), "I": np.array([1, 3, 1, 1], "i8"),
          "S1": _x("sws1", (4, 3)), "w1": np.array([2.0], "f4"), "S2": _x("sws2", (4, 3)), "w2": np.array([-1.5], "f4")}
    yield Case("ScatterWeightedSum_repeated", "ScatterWeightedSum", sw, ["X"])
    # Cast to string, Reshape with an empty batch
    yield Case("Cast_string", "Cast", {"X": np.array([1.5, -2.0, 3.25], "f4")}, ["Y"], {"to": 4})
    yield Case("Cast_string_int", "Cast", {"X": np.array([1, -20, 3], "i4")}, ["Y"], {"to": 4})
    e = np.zeros((0, 4), "f4")
    for name, shape in (("zero", [0, 2, 2]), ("minus1", [-1, 2, 2]), ("zero_minus1", [0, -1])):
        yield Case("Reshape_empty_" + name, "Reshape", {"X": e}, ["Y", "old"], {"shape": shape}, grad=True)
    # an empty input: 0 is a literal 0; a non-empty one: 0 copies the input's dim
    for name, xs, shape in (("literal", (3, 0), [2, 0]), ("literal2", (1, 0), [0]), ("more_dims", (0, 0), [0, 0, 0]),
                            ("copy", (4, 3, 2), [-1, 0])):
        yield Case("Reshape_zero_" + name, "Reshape", {"X": np.zeros(xs, "f4"), "S": np.array(shape, "i8")},
                   ["Y", "old"], grad=True)
    # UniformFill / UniformIntFill with min and max as inputs (random: shapes and dtypes only)
    yield Case("UniformIntFill_inputs", "UniformIntFill", {"S": np.zeros((2, 3), "f4"), "lo": np.array([1], "i4"),
                                                           "hi": np.array([5], "i4")}, ["Y"], values=False)
    yield Case("UniformIntFill_shape_inputs", "UniformIntFill",
               {"S": np.array([4, 2], "i8"), "lo": np.array(1, "i4"), "hi": np.array(5, "i4")}, ["Y"],
               {"input_as_shape": 1}, values=False)
    yield Case("UniformFill_inputs", "UniformFill", {"S": np.zeros((2, 3), "f4"), "lo": np.array(1, "f4"),
                                                     "hi": np.array(5, "f4")}, ["Y"], values=False)
    yield Case("UniformIntFill_bad_bounds", "UniformIntFill", {}, ["Y"], {"shape": [2], "min": 5, "max": 1})
    for op, dt in (("UniformIntFill", "i4"), ("UniformFill", "f4")):  # bound inputs: min == max, min > max
        for lo, hi in ((3, 3), (5, 2)):
            yield Case(f"{op}_inputs_min{lo}_max{hi}", op, {"S": np.array([3, 2], "i8"), "lo": np.array([lo], dt),
                                                             "hi": np.array([hi], dt)}, ["Y"], {"input_as_shape": 1})
    yield Case("UniformIntFill_args_min_eq_max", "UniformIntFill", {}, ["Y"], {"shape": [2], "min": 3, "max": 3})


def _layout_and_empty():
    """Concat/Split by `order` alone (NHWC is axis 3 at any rank; add_axis then ignored), out-of-range axes,
    Flatten and Softmax (with its gradient) of empty batches."""
    a, b = _x("ca", (2, 3, 4, 5)), _x("cb", (2, 3, 4, 2))
    yield Case("Concat_NHWC_order", "Concat", {"A": a, "B": b}, ["C", "S"], {"order": "NHWC"})
    yield Case("Concat_NHWC_order_add_axis", "Concat", {"A": a, "B": a + 1}, ["C", "S"],
               {"order": "NHWC", "add_axis": 1})
    yield Case("Concat_NHWC_5d", "Concat", {"A": _x("c5", (2, 3, 4, 2, 3)), "B": _x("c6", (2, 3, 4, 1, 3))},
               ["C", "S"], {"order": "NHWC"})
    yield Case("Concat_NHWC_3d", "Concat", {"A": a[0], "B": a[1]}, ["C", "S"], {"order": "NHWC"})
    yield Case("Concat_axis_add_axis", "Concat", {"A": a, "B": a + 1}, ["C", "S"], {"axis": 3, "add_axis": 1})
    yield Case("Split_NHWC_order_add_axis", "Split", {"X": a[..., :2].copy()}, ["Y", "Z"],
               {"order": "NHWC", "add_axis": 1})
    yield Case("Split_axis_add_axis", "Split", {"X": a[..., :2].copy()}, ["Y", "Z"], {"axis": 3, "add_axis": 1})
    yield Case("Split_uneven", "Split", {"X": a[0, 0, 0, :3].copy()}, ["Y", "Z"], {"axis": 0})
    for axis in (0, 1, 2):
        yield Case(f"Flatten_empty_axis{axis}", "Flatten", {"X": np.zeros((0, 2, 3), "f4")}, ["Y"], {"axis": axis})
    for dims in ([0, 0], [0, 0, 2], [2, 0]):  # a repeated dim counts once
        yield Case("ExpandDims_" + "_".join(map(str, dims)), "ExpandDims", {"X": _x("ed", (2, 3))}, ["Y"],
                   {"dims": dims}, grad=True)
    # ResizeNearest: index and size in float32 (6 rows x 1/3: rows 0 and 3, where float64 gives 2)
    rx = _x("rn", (1, 2, 6, 4))
    yield Case("ResizeNearest_third", "ResizeNearest", {"X": rx}, ["Y"], {"height_scale": 1 / 3, "width_scale": 2.0},
               grad=True)
    yield Case("ResizeNearest_scales_input", "ResizeNearest",
               {"X": rx, "S": np.array([1 / 3, 0.6], "f4")}, ["Y"], grad=True)
    for shape in ((0, 4), (3, 0), (0, 0)):
        name = "Softmax_empty_{}x{}".format(*shape)
        yield Case(name, "Softmax", {"X": np.zeros(shape, "f4")}, ["Y"], grad=True)


def cases():
    yield from _linear()
    yield from _tensor()
    yield from _layout_and_empty()


if __name__ == "__main__":
    print(record("tensor", cases()), "cases")
