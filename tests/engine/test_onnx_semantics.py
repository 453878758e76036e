"""Where ONNX and Caffe2 differ, the export reproduces Caffe2 (issue #34): each small net is built with
Caffe2's own builder API (engine.caffe2.core), exported, and run in ONNX Runtime against the engine, every
value compared; an op with no faithful form is refused by name, never written wrong."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx", reason="netviz[onnx] not installed (pip install 'netviz[onnx]')")
pytest.importorskip("onnxruntime", reason="netviz[onnx] not installed (pip install 'netviz[onnx]')")

from engine.caffe2 import core  # noqa: E402
from engine.model.modelio import Model  # noqa: E402
from engine.onnx.export import OnnxExportError, diff_against_runtime, export, prepare_model  # noqa: E402

RNG = np.random.default_rng(7)


def _check(net: core.Net, feeds: dict[str, np.ndarray], params: dict[str, np.ndarray] | None = None):
    """Export `net` (params from an init net of GivenTensorFills), diff it in ONNX Runtime; the rows."""
    init = core.Net("init")
    for name, v in (params or {}).items():
        init.GivenTensorFill([], name, shape=list(v.shape), values=v.ravel().tolist())
    model = Model(net.Proto(), init.Proto())
    src = prepare_model(model, feeds)
    rows = diff_against_runtime(src, export(src).model)
    bad = [(r.op_type, r.blob, r.max_abs) for r in rows if not r.ok]
    assert rows and not bad, bad
    return rows


def _x(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("kind", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("legacy_pad,size", [(3, 6), (3, 7), (2, 7), (1, 7)])
def test_pool_legacy_pad(kind, legacy_pad, size):
    """CAFFE_LEGACY_POOLING's ceil sizes, SAME's and VALID's pads, as explicit ONNX pads."""
    n = core.Net("pool")
    getattr(n, kind)("x", "y", kernel=3, stride=2, pad=1 if legacy_pad == 3 else 0, legacy_pad=legacy_pad)
    _check(n, {"x": _x(1, 2, size, size)})


def test_softmax_flattens_at_axis():
    """Caffe2 normalises over everything after `axis` (ONNX 13+ over one axis)."""
    n = core.Net("sm")
    n.Softmax("x", "y", axis=1)
    n.Softmax("x", "z", axis=2)
    _check(n, {"x": _x(2, 3, 4, 5)})


def test_fc_axis_flattening():
    n = core.Net("fc")
    n.FC(["x", "w", "b"], "y", axis=2)
    n.FC(["x", "w2", "b"], "z", axis=1, axis_w=1)
    _check(n, {"x": _x(2, 3, 4, 5)}, {"w": _x(6, 20), "w2": _x(6, 60), "b": _x(6)})


def test_reshape_zero_dims_and_old_shape():
    n = core.Net("rs")
    n.Reshape("x", ["y", "old"], shape=[0, -1, 2])
    _check(n, {"x": _x(3, 4, 6)})


def test_legacy_broadcast_axis():
    """broadcast=1 aligns B with A's dims from `axis` (numpy would align the trailing dims)."""
    n = core.Net("bc")
    n.Add(["x", "c"], "y", broadcast=1, axis=1)
    n.Mul(["x", "hw"], "z", broadcast=1, axis=2)
    _check(n, {"x": _x(2, 3, 4, 5), "c": _x(3), "hw": _x(4, 5)})


def test_spatial_bn_epsilon_and_dropout_test_mode():
    n = core.Net("bn")
    n.SpatialBN(["x", "s", "b", "m", "v"], "y", is_test=1, epsilon=1e-3)
    n.Dropout("y", ["d", "mask"], is_test=1, ratio=0.3)
    v = np.abs(_x(3)) + 0.5
    _check(n, {"x": _x(2, 3, 4, 4)}, {"s": _x(3), "b": _x(3), "m": _x(3), "v": v})


def test_slice_negative_ends_and_concat_split_info():
    n = core.Net("sl")
    n.Slice("x", "y", starts=[0, 1], ends=[-1, -2])
    n.Concat(["x", "x"], ["c", "info"], axis=1)
    _check(n, {"x": _x(3, 5)})


def test_training_mode_ops_are_refused_by_name():
    n = core.Net("train")
    n.Dropout("x", ["y", "mask"], is_test=0, ratio=0.5)
    n.Relu("y", "z")
    n.GenerateProposals(["a", "b", "c", "d"], ["r", "p"])
    src = prepare_model(Model(n.Proto()), {"x": _x(2, 3), "a": _x(1), "b": _x(1), "c": _x(1), "d": _x(1)}, run=False)
    with pytest.raises(OnnxExportError) as e:
        export(src, where="train")
    text = str(e.value)
    assert "\n" not in text and "Dropout (op #0: training mode" in text and "GenerateProposals (op #2)" in text
    assert "Relu" not in text


def test_top_k_ties_and_mod_signs():
    """TopK keeps the lower index first among equal values; Mod follows the dividend's sign (C's %)
    unless sign_follow_divisor."""
    n = core.Net("tk")
    n.TopK("x", ["v", "i"], k=3)
    n.Mod("m", "r", divisor=3)
    n.Mod("m", "q", divisor=3, sign_follow_divisor=1)
    x = np.array([[1, 3, 3, 2, 3], [0, 0, 0, 0, 0]], np.float32)
    _check(n, {"x": x, "m": np.array([-7, -3, 0, 4, 8], np.int32)})


def test_int8_ops_are_bit_exact():
    """Int8 ops export as integer ONNX ops (ConvInteger / MatMulInteger, QNNPACK's Q31 requantization
    spelled out in int64): every quantised value equals the engine's (QNNPACK's) exactly."""
    init = core.Net("init")
    w = RNG.integers(100, 156, (8, 3, 3, 4)).astype(np.uint8)
    init.Int8GivenTensorFill([], "w", values=w.tobytes(), shape=list(w.shape), Y_scale=0.02, Y_zero_point=128)
    init.Int8GivenIntTensorFill([], "b", values=RNG.integers(-500, 500, 8).tolist(), shape=[8], Y_scale=0.0002,
                                Y_zero_point=0)
    fw = RNG.integers(90, 166, (5, 8 * 3 * 3)).astype(np.uint8)
    init.Int8GivenTensorFill([], "fw", values=fw.tobytes(), shape=list(fw.shape), Y_scale=0.01, Y_zero_point=128)
    init.Int8GivenIntTensorFill([], "fb", values=RNG.integers(-50, 50, 5).tolist(), shape=[5], Y_scale=0.0005,
                                Y_zero_point=0)
    n = core.Net("q")
    n.Int8Quantize("x", "xq", Y_scale=0.01, Y_zero_point=120)
    n.Int8ConvRelu(["xq", "w", "b"], "c", kernel=3, pad=1, order="NHWC", Y_scale=0.05, Y_zero_point=100)
    n.Int8MaxPool("c", "p", kernel=2, stride=2, order="NHWC", Y_scale=0.05, Y_zero_point=100)
    n.Int8Relu("p", "r", Y_scale=0.05, Y_zero_point=100)
    n.Int8Quantize("z", "zq", Y_scale=0.03, Y_zero_point=90)
    n.Int8Sum(["r", "zq"], "r2", Y_scale=0.06, Y_zero_point=95)
    n.Int8FC(["r2", "fw", "fb"], "f", Y_scale=0.1, Y_zero_point=110)
    n.Int8Dequantize("f", "y")
    src = prepare_model(Model(n.Proto(), init.Proto()), {"x": _x(2, 6, 6, 4), "z": _x(2, 3, 3, 8)})
    rows = diff_against_runtime(src, export(src).model, rtol=0, atol=0)
    assert [r.op_type for r in rows] == [op.type for op in n.Proto().op] and all(r.ok for r in rows)
    for k in (1, 5):  # the conv and the sum: not saturated, so their rounding is exercised
        assert np.asarray(rows[k].engine).dtype == np.uint8 and len(np.unique(np.asarray(rows[k].engine))) > 20


def test_in_place_op_reads_its_input_before_writing():
    """Reshape X -> X: its old-shape output is X's shape before the reshape (the input's version)."""
    n = core.Net("inplace")
    n.Reshape("x", ["x", "old"], shape=[-1])
    n.Relu("x", "x")
    rows = _check(n, {"x": _x(2, 3)})
    assert np.asarray(rows[1].runtime).tolist() == [2, 3]


@pytest.mark.parametrize("aligned,sampling_ratio", [(0, -1), (1, 2)])
def test_roi_align(aligned, sampling_ratio):
    """Caffe2's [batch, x1, y1, x2, y2] rows, RoIs smaller than a pixel, aligned or not."""
    n = core.Net("roi")
    n.RoIAlign(["x", "rois"], "y", spatial_scale=0.5, pooled_h=3, pooled_w=2, sampling_ratio=sampling_ratio,
               aligned=aligned)
    rois = np.array([[0, 1.0, 2.0, 9.5, 12.0], [1, 3.2, 0.4, 3.6, 0.9], [1, 0.0, 0.0, 15.0, 15.0]], np.float32)
    _check(n, {"x": _x(2, 3, 8, 8), "rois": rois})


def test_segments_and_distances():
    """LengthsToSegmentIds (an empty segment included), L1Distance, LpNorm's sum of squares."""
    n = core.Net("seg")
    n.LengthsToSegmentIds("lengths", "ids")
    n.L1Distance(["x", "y"], "l1")
    n.LpNorm("x", "p2", p=2)
    n.LpNorm("x", "p1", p=1, average=1)
    _check(n, {"lengths": np.array([2, 0, 3, 1], np.int32), "x": _x(4, 3), "y": _x(4, 3)})


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_index_hash_wraps_as_caffe2(dtype):
    n = core.Net("hash")
    n.IndexHash("i", "h", seed=7, modulo=1009)
    _check(n, {"i": np.array([0, 1, -1, 255, 256, 2**30, -(2**31) + 5, 123456789], dtype)})


def test_int8_pool_softmax_resize_are_bit_exact():
    """Int8AveragePool (zero-point padding in the divisor), Int8ResizeNearest and Int8Softmax's table."""
    n = core.Net("q2")
    n.Int8Quantize("x", "xq", Y_scale=0.02, Y_zero_point=128)
    n.Int8AveragePool("xq", "a", kernel=3, stride=2, pad=1, order="NHWC", Y_scale=0.015, Y_zero_point=120)
    n.Int8AveragePool("xq", "g", global_pooling=1, order="NHWC", Y_scale=0.01, Y_zero_point=128)
    n.Int8ResizeNearest("a", "r", width_scale=2.0, height_scale=1.5, Y_scale=0.015, Y_zero_point=120)
    n.Int8Softmax("g", "s", Y_scale=1.0 / 256, Y_zero_point=0)
    src = prepare_model(Model(n.Proto()), {"x": _x(2, 7, 7, 5) * 2})
    rows = diff_against_runtime(src, export(src).model, rtol=0, atol=0)
    assert [r.op_type for r in rows] == [op.type for op in n.Proto().op] and all(r.ok for r in rows)
    assert len(np.unique(np.asarray(rows[1].engine))) > 20


@pytest.mark.parametrize("kind", ["Sum", "Mean", "Max", "LogSumExp", "LogMeanExp"])
def test_sorted_segment_range_with_infinite_rows(kind):
    """Segments from sorted ids over 3-D data; a segment whose values are all -inf gives 0 for Max
    and the log-sum forms (Caffe2 reads a -inf max as 0 and a zero sum as 0), a single-row segment
    itself; the last id sets the segment count."""
    x = _x(6, 2, 3)
    x[3:5, 0, :] = -np.inf
    op = f"SortedSegmentRange{kind}"
    n = core.Net("seg")
    getattr(n, op)(["x", "ids"], "y")
    getattr(n, op)(["x", "ids1"], "z")
    feeds = {"x": x if kind not in ("Sum", "Mean") else np.nan_to_num(x, neginf=-3.0),
             "ids": np.array([0, 0, 1, 2, 2, 3], np.int32), "ids1": np.zeros(6, np.int32)}
    _check(n, feeds)


@pytest.mark.parametrize("lengths", [[2, 0, 3, 1, 0], [0, 0], [4]])
def test_lengths_fills_at_run_time(lengths):
    """Lengths computed in the net (not foldable): empty segments, all-empty lists; LengthsToWeights
    with the default power and another one."""
    n = core.Net("lf")
    n.Copy("lengths", "l")
    n.LengthsRangeFill("l", "r")
    n.LengthsToWeights("l", "w")
    n.LengthsToWeights("l", "w3", power=1.5)
    n.LengthsToSegmentIds("l", "s")
    _check(n, {"lengths": np.array(lengths, np.int32)})


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_merge_id_lists_sorted_union(dtype):
    """Ids repeated within and across lists count once, each example's union comes out sorted
    (negative ids first), an example empty in every list gets length 0."""
    n = core.Net("merge")
    n.MergeIdLists(["l1", "v1", "l2", "v2"], ["lengths", "values"])
    _check(n, {"l1": np.array([3, 0, 2, 0], np.int32), "v1": np.array([9, -4, 9, 5, 1], dtype),
               "l2": np.array([1, 2, 2, 0], np.int32), "v2": np.array([-4, 7, 7, 1, 0], dtype)})


def test_beam_search_ops():
    """WeightedSum of equal-size inputs of different shapes (each read as X0's shape); Conditional
    picking whole rows of 3-D data; ReversePackedSegs with lengths 0, partial and full; Slice with
    ends computed in the net, a negative end read as dim + 1 + end."""
    n = core.Net("beam")
    n.WeightedSum(["a", "wa", "b", "wb", "a", "wb"], "ws")
    n.Conditional(["cond", "t", "f"], "picked")
    n.ReversePackedSegs(["seq", "lengths"], "rev")
    n.Copy("ends_in", "ends")
    n.Slice(["t", "starts", "ends"], "sliced")
    _check(n, {"a": _x(2, 6), "wa": _x(1), "b": _x(3, 4), "wb": _x(1),
               "cond": np.array([True, False, True]), "t": _x(3, 4, 5), "f": _x(3, 4, 5),
               "seq": _x(4, 3, 2), "lengths": np.array([0, 2, 4], np.int32),
               "starts": np.array([1, 0, 2], np.int32), "ends_in": np.array([-1, -2, 4], np.int32)})


def test_top_k_on_a_slice_sized_at_run_time():
    """Inside a While the slice's length is known only at run time: TopK takes min(k, length) and
    pads like Caffe2 (value 0, index -1); the last pass slices 2 values for k = 3."""
    from engine.caffe2 import control  # noqa: PLC0415

    n, body, cond = core.Net("topk_while"), core.Net("topk_body"), core.Net("topk_cond")
    body.Slice(["x", "zero", "i"], "sl")
    body.TopK("sl", ["top", "idx"], k=3)
    cond.LT([cond.Add(["i", "one"], "i"), "n"], "cond")
    scope = {"cond", "x", "zero", "i", "one", "n", "top", "idx"}
    n.AddExternalInput(*sorted(scope))
    control.While(n, "cond", body, cond, lexical_scope=scope)
    rows = _check(n, {"cond": np.array([True]), "x": _x(6), "zero": np.array([0], np.int32),
                      "i": np.array([1], np.int32), "one": np.array([1], np.int32), "n": np.array([3], np.int32),
                      "top": np.ones(3, np.float32), "idx": np.zeros(3, np.int64)})
    assert {"top", "idx"} <= {r.blob for r in rows}
