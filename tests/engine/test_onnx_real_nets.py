"""ONNX converters for what real nets use (issue #44 item 4): PadImage in every mode, ScatterAssign, a
Reshape to a shape computed in the net, the fused row-wise 8/4/2-bit and 8-bit SparseLengths lookups
(weighted and mean too), and the Stylizer's pre- and post-processing.  Each net is exported and run in
ONNX Runtime against the engine's own kernels on the same inputs, every value compared."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx", reason="netviz[onnx] not installed (pip install 'netviz[onnx]')")
pytest.importorskip("onnxruntime", reason="netviz[onnx] not installed (pip install 'netviz[onnx]')")

from engine.caffe2 import core  # noqa: E402
from engine.model.modelio import Model  # noqa: E402
from engine.onnx.export import OnnxExportError, diff_against_runtime, export, prepare_model  # noqa: E402

RNG = np.random.default_rng(44)


@pytest.fixture(autouse=True)
def _seeded() -> None:
    """Each test draws the same numbers whichever tests ran before it."""
    global RNG
    RNG = np.random.default_rng(44)


def check(net: core.Net, feeds: dict[str, np.ndarray], init: core.Net | None = None,
          truncated: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """Export `net` (weights from `init`), run it in ONNX Runtime; every value equal to the engine's.
    `truncated`: integer blobs cast from floats, where a float within rounding of an integer may land
    1 apart (a handful of elements). Returns the engine's values by blob."""
    src = prepare_model(Model(net.Proto(), (init or core.Net("init")).Proto()), feeds)
    rows = diff_against_runtime(src, export(src).model)
    bad = [(r.op_type, r.blob, r.max_abs) for r in rows if not r.ok and not (
        r.blob in truncated and r.max_abs <= 1 and np.count_nonzero(r.engine != r.runtime) <= 2)]
    assert rows and not bad, bad
    return {b: v for out in src.trace for b, v in out.items()}


def refusal(net: core.Net, feeds: dict[str, np.ndarray]) -> str:
    src = prepare_model(Model(net.Proto(), core.Net("init").Proto()), feeds)
    with pytest.raises(OnnxExportError) as e:
        export(src)
    return str(e.value)


def _x(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_image_every_mode(mode: str, order: str) -> None:
    n = core.Net("pad")
    n.PadImage("x", "y", pad_t=2, pad_l=1, pad_b=1, pad_r=3, mode=mode, value=7.5, order=order)
    n.PadImage("x", "z", pad=1, mode=mode, order=order)
    x = _x(2, 3, 5, 6) if order == "NCHW" else _x(2, 5, 6, 3)
    got = check(n, {"x": x})
    sp = ((2, 1), (1, 3))
    pads = ((0, 0), (0, 0), *sp) if order == "NCHW" else ((0, 0), *sp, (0, 0))
    assert np.array_equal(got["y"], np.pad(x, pads, mode=mode, **({"constant_values": 7.5} if mode == "constant" else {})))


def test_pad_image_reflect_wider_than_the_image_is_refused() -> None:
    """Caffe2 reads outside the image there (measured: garbage values); ONNX would not."""
    n = core.Net("pad")
    n.PadImage("x", "y", pad=3, mode="reflect")
    assert "PadImage (op #0: reflect pads [3, 3, 3, 3] not smaller than the image [3, 4])" in refusal(n, {"x": _x(1, 1, 3, 4)})


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_scatter_assign_rows(dtype: type) -> None:
    n = core.Net("scatter")
    n.ScatterAssign(["data", "idx", "slices"], "out")
    n.ScatterAssign(["data3", "idx", "slices3"], "out3")
    n.ScatterAssign(["data", "twice", "slices"], "last_wins")
    data, slices = _x(6, 3), _x(3, 3)
    got = check(n, {"data": data, "idx": np.array([4, 0, 2], dtype), "slices": slices,
                    "data3": _x(5, 2, 2), "slices3": _x(3, 2, 2), "twice": np.array([1, 1, 3], dtype)})
    assert np.array_equal(got["last_wins"][1], slices[1])
    assert np.array_equal(got["out"][[4, 0, 2]], slices) and np.array_equal(got["out"][[1, 3, 5]], data[[1, 3, 5]])


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_reshape_to_a_shape_computed_in_the_net(dtype: type) -> None:
    n = core.Net("rs")
    n.Shape("like", "s")
    n.Cast("s", "s_cast", to=core.DataType.INT32 if dtype == np.int32 else core.DataType.INT64)
    n.Reshape(["x", "s_cast"], ["y", "old"])
    n.Reshape(["x", "dims"], ["z", "old2"])  # NOTE: a fed shape with 0 (copy) and -1 (inferred)
    got = check(n, {"x": _x(2, 12), "like": _x(4, 6), "dims": np.array([0, -1, 3], dtype)})
    assert got["y"].shape == (4, 6) and got["z"].shape == (2, 4, 3)


LOOKUPS = [(bits, kind) for bits in (8, 4, 2) for kind in ("Sum", "Mean", "WeightedSum")]


@pytest.mark.parametrize("bits,kind", LOOKUPS)
def test_sparse_lengths_fused_rowwise(bits: int, kind: str) -> None:
    """A table quantised by the init net (as real nets ship it), looked up per segment; an empty segment too."""
    init = core.Net("init")
    init.GivenTensorFill([], "table_f", shape=[7, 8], values=_x(7, 8).ravel().tolist())
    init.__getattr__(f"FloatToFused{bits}BitRowwiseQuantized")("table_f", "table")
    n = core.Net("sls")
    weighted = kind == "WeightedSum"
    ins = ["table", "w", "idx", "len"] if weighted else ["table", "idx", "len"]
    n.__getattr__(f"SparseLengths{kind}Fused{bits}BitRowwise")(ins, "out")
    got = check(n, {"w": _x(6), "idx": np.array([6, 0, 3, 3, 1, 5], np.int64), "len": np.array([2, 0, 3, 1], np.int32)},
                init)
    assert got["out"].shape == (4, 8) and not got["out"][1].any()


def test_sparse_lengths_fused_table_given_at_run_time_is_refused() -> None:
    n = core.Net("sls")
    n.SparseLengthsSumFused8BitRowwise(["table", "idx", "len"], "out")
    table = RNG.integers(0, 256, size=(4, 11)).astype(np.uint8)  # NOTE: an input: not fixed in the model
    msg = refusal(n, {"table": table, "idx": np.array([1, 2], np.int64), "len": np.array([2], np.int32)})
    assert "SparseLengthsSumFused8BitRowwise (op #0: the fused table 'table' is computed in the net" in msg


@pytest.mark.parametrize("kind", ["Sum", "Mean", "WeightedSum", "WeightedMean"])
def test_sparse_lengths_8bits_rowwise(kind: str) -> None:
    init = core.Net("init")
    init.GivenTensorFill([], "table_f", shape=[6, 2, 3], values=_x(6, 2, 3).ravel().tolist())
    init.FloatToRowwiseQuantized8Bits("table_f", ["q", "scale_bias"])
    n = core.Net("sls8")
    ins = ["q", "w", "idx", "len", "scale_bias"] if "Weighted" in kind else ["q", "idx", "len", "scale_bias"]
    n.__getattr__(f"SparseLengths{kind}8BitsRowwise")(ins, "out")
    got = check(n, {"w": _x(5), "idx": np.array([5, 1, 1, 0, 2], np.int32), "len": np.array([3, 2], np.int32)}, init)
    assert got["out"].shape == (2, 2, 3)


def test_stylizer_preprocess_and_deprocess() -> None:
    """The packed BGRA image in, its float planes (the noise cycles: 12 x 15 x 3 > 491 values), and back."""
    x = RNG.integers(0, 256, size=(2, 12, 15, 4)).astype(np.uint8)
    n = core.Net("stylizer")
    n.PackedInt8BGRANHWCToNCHWCStylizerPreprocess(["img", "mean"], "planes")
    n.Scale("planes", "scaled", scale=1.5)
    n.BRGNCHWCToPackedInt8BGRAStylizerDeprocess(["scaled", "mean"], "out")
    got = check(n, {"img": x, "mean": np.array([103.9, 116.8, 123.7], np.float32)})
    assert got["out"].dtype == np.uint8 and (got["out"][..., 3] == 255).all() and got["planes"].shape == (2, 3, 12, 15)


def _fills(init: core.Net, **shapes: tuple[int, ...]) -> None:
    for name, shape in shapes.items():
        init.GivenTensorFill([], name, shape=list(shape), values=(_x(*shape) * 0.2).ravel().tolist())


def test_a_style_transfer_net_exports_whole() -> None:
    """A fast-style-transfer net as Caffe2's stylizer nets are built: the packed image in, reflect pads
    before the convs, instance norms, a residual block, an upsampling ConvTranspose, the packed image
    out.  Before these converters it stopped on the preprocess, PadImage and the deprocess."""
    init, n = core.Net("init"), core.Net("stylizer")
    _fills(init, w1=(8, 3, 9, 9), b1=(8,), w2=(16, 8, 3, 3), b2=(16,), wr1=(16, 16, 3, 3), br1=(16,),
           wr2=(16, 16, 3, 3), br2=(16,), wt=(16, 8, 4, 4), bt=(8,), w3=(3, 8, 9, 9), b3=(3,))
    for k, c in (("1", 8), ("2", 16), ("r1", 16), ("r2", 16), ("t", 8)):
        init.ConstantFill([], f"s{k}", shape=[c], value=1.0)
        init.ConstantFill([], f"h{k}", shape=[c], value=0.1)
    n.PackedInt8BGRANHWCToNCHWCStylizerPreprocess(["img", "mean"], "x")
    n.PadImage("x", "p1", pad=4, mode="reflect")
    n.Conv(["p1", "w1", "b1"], "c1", kernel=9)
    n.InstanceNorm(["c1", "s1", "h1"], "n1")
    n.Relu("n1", "n1")
    n.Conv(["n1", "w2", "b2"], "c2", kernel=3, stride=2, pad=1)
    n.InstanceNorm(["c2", "s2", "h2"], "n2")
    n.Relu("n2", "n2")
    n.PadImage("n2", "pr1", pad=1, mode="reflect")
    n.Conv(["pr1", "wr1", "br1"], "cr1", kernel=3)
    n.InstanceNorm(["cr1", "sr1", "hr1"], "nr1")
    n.Relu("nr1", "nr1")
    n.PadImage("nr1", "pr2", pad=1, mode="edge")
    n.Conv(["pr2", "wr2", "br2"], "cr2", kernel=3)
    n.InstanceNorm(["cr2", "sr2", "hr2"], "nr2")
    n.Sum(["nr2", "n2"], "res")
    n.ConvTranspose(["res", "wt", "bt"], "up", kernel=4, stride=2, pad=1)
    n.InstanceNorm(["up", "st", "ht"], "nt")
    n.Relu("nt", "nt")
    n.PadImage("nt", "p3", pad=4, mode="reflect")
    n.Conv(["p3", "w3", "b3"], "c3", kernel=9)
    n.Scale("c3", "out_f", scale=40.0)
    n.BRGNCHWCToPackedInt8BGRAStylizerDeprocess(["out_f", "mean"], "out")
    img = RNG.integers(0, 256, size=(1, 24, 24, 4)).astype(np.uint8)
    got = check(n, {"img": img, "mean": np.array([103.9, 116.8, 123.7], np.float32)}, init, truncated=("out",))
    assert got["out"].shape == (1, 24, 24, 4) and len(np.unique(got["out"][..., :3])) > 10


def test_a_recommender_net_with_quantised_embeddings_exports_whole() -> None:
    """A DLRM-shaped ranking net: a dense MLP, two quantised embedding tables (fused 8-bit, weighted;
    fused 4-bit, mean), pairwise dot products of the features, a top MLP and a sigmoid."""
    init, n = core.Net("init"), core.Net("dlrm")
    _fills(init, e1_f=(20, 16), e2_f=(12, 16), wd=(16, 13), bd=(16,), wt=(1, 19), bt=(1,))
    init.FloatToFused8BitRowwiseQuantized("e1_f", "e1")
    init.FloatToFused4BitRowwiseQuantized("e2_f", "e2")
    n.FC(["dense", "wd", "bd"], "d")
    n.Relu("d", "d")
    n.SparseLengthsWeightedSumFused8BitRowwise(["e1", "w1", "i1", "l1"], "emb1")
    n.SparseLengthsMeanFused4BitRowwise(["e2", "i2", "l2"], "emb2")
    n.Concat(["d", "emb1", "emb2"], ["z", "z_info"], axis=1)
    n.Reshape(["z", "zshape"], ["z3", "z_old"])  # NOTE: (B, 3, 16), the shape fed at run time
    n.BatchMatMul(["z3", "z3"], "zz", trans_b=1)
    n.Flatten("zz", "zf")
    n.Concat(["zf", "d_one"], ["top", "top_info"], axis=1)
    n.FC(["top", "wt", "bt"], "logit")
    n.Sigmoid("logit", "prob")
    feeds = {"dense": _x(4, 13), "w1": _x(9), "i1": RNG.integers(0, 20, 9).astype(np.int64),
             "l1": np.array([3, 1, 0, 5], np.int32), "i2": RNG.integers(0, 12, 6).astype(np.int32),
             "l2": np.array([2, 2, 1, 1], np.int32), "zshape": np.array([-1, 3, 16], np.int64), "d_one": _x(4, 10)}
    got = check(n, feeds, init)
    assert got["prob"].shape == (4, 1)


@pytest.mark.parametrize("cols,images", [(5, 2), (4, 1)])
@pytest.mark.parametrize("apply_scale", [1, 0])
def test_bbox_transform_decodes_every_class(cols: int, images: int, apply_scale: int) -> None:
    """Detectron's box decoding: per-image scale and size, per-class deltas, clamped exp, clipping."""
    r, k = 6, 3
    xy = RNG.uniform(0, 300, size=(r, 2)).astype(np.float32)
    boxes = np.concatenate([xy, xy + RNG.uniform(4, 200, size=(r, 2)).astype(np.float32)], axis=1)
    rois = np.concatenate([np.array([[0], [0], [1], [1], [1], [0]], np.float32)[:r] % images, boxes], axis=1)
    deltas = RNG.normal(0, 1.5, size=(r, 4 * k)).astype(np.float32)
    deltas[0, 2] = 9.0  # NOTE: past the log(1000/16) clamp
    info = np.array([[480, 640, 1.5], [400, 333, 0.8]], np.float32)[:images]
    n = core.Net("bbox")
    n.BBoxTransform(["rois", "deltas", "info"], ["boxes", "splits"], weights=[10.0, 10.0, 5.0, 5.0],
                    apply_scale=apply_scale)
    got = check(n, {"rois": rois[:, 5 - cols:], "deltas": deltas, "info": info})
    assert got["boxes"].shape == (r, 4 * k) and got["splits"].sum() == r


@pytest.mark.parametrize("bits,kind", LOOKUPS)
def test_sparse_lengths_pruned_rowwise(bits: int, kind: str) -> None:
    """The pruned tables: each index read through the mapping, a -1 row adding nothing (a mean still counts it)."""
    init = core.Net("init")
    init.GivenTensorFill([], "table_f", shape=[4, 8], values=_x(4, 8).ravel().tolist())
    init.__getattr__(f"FloatToFused{bits}BitRowwiseQuantized")("table_f", "table")
    init.GivenTensorIntFill([], "mapping", shape=[6], values=[2, -1, 0, 3, -1, 1])
    init.GivenTensorIntFill([], "unpruned", shape=[1], values=[0])
    n = core.Net("pruned")
    weighted = kind == "WeightedSum"
    ins = ["table", "w", "idx", "len", "mapping"] if weighted else ["table", "idx", "len", "mapping"]
    n.__getattr__(f"SparseLengths{kind}{bits}BitRowwiseSparse")(ins, "out")
    n.__getattr__(f"SparseLengths{kind}{bits}BitRowwiseSparse")([*ins[:-1], "unpruned"], "out_all")
    got = check(n, {"w": _x(5), "idx": np.array([1, 0, 3, 2, 3], np.int64), "len": np.array([2, 3], np.int32)}, init)
    assert got["out"].shape == (2, 8) and not np.allclose(got["out"], got["out_all"])


def test_sparse_lengths_pruned_mapping_given_at_run_time_is_refused() -> None:
    n = core.Net("pruned")
    n.SparseLengthsSum8BitRowwiseSparse(["table", "idx", "len", "mapping"], "out")
    feeds = {"table": RNG.integers(0, 256, size=(4, 11)).astype(np.uint8), "idx": np.array([1, 0], np.int64),
             "len": np.array([2], np.int32), "mapping": np.array([0], np.int32)}
    init = core.Net("init")
    init.GivenTensorByteStringToUInt8Fill([], "table", shape=[4, 11], values=[feeds.pop("table").tobytes()])
    src = prepare_model(Model(n.Proto(), init.Proto()), feeds)
    with pytest.raises(OnnxExportError, match="the index mapping 'mapping' is computed in the net"):
        export(src)


@pytest.mark.parametrize("axis", [1, 0, -1])
def test_scatter_elements_along_an_axis(axis: int) -> None:
    n = core.Net("scatter")
    n.Scatter(["data", "idx", "upd"], "out", axis=axis)
    idx = np.array([[0, 2, -1], [1, 1, 0]], np.int32)
    got = check(n, {"data": _x(3, 3), "idx": idx, "upd": _x(2, 3)})
    assert got["out"].shape == (3, 3)


def test_int8_data_movement_is_exact() -> None:
    """Int8Reshape, Int8Transpose, Int8Slice, Int8Flatten and Int8Concat move the uint8 values as the float ops do."""
    n = core.Net("q")
    n.Int8Quantize("x", "xq", Y_scale=0.02, Y_zero_point=120)
    n.Int8Quantize("z", "zq", Y_scale=0.02, Y_zero_point=120)
    n.Int8Concat(["xq", "zq"], ["cat", "cat_info"], Y_scale=0.02, Y_zero_point=120)  # NOTE: NHWC: the channels
    n.Int8Transpose("cat", "tr", axes=[0, 3, 1, 2])
    n.Int8Slice("tr", "sl", starts=[0, 1, 0, 1], ends=[-1, 5, 3, -1])
    n.Int8Reshape("sl", ["rs", "rs_old"], shape=[2, -1])
    n.Int8Flatten("tr", "fl", axis=2)
    n.Int8Dequantize("rs", "y")
    src = prepare_model(Model(n.Proto(), core.Net("init").Proto()), {"x": _x(2, 3, 4, 2), "z": _x(2, 3, 4, 4)})
    rows = diff_against_runtime(src, export(src).model, rtol=0, atol=0)
    assert [r.op_type for r in rows if r.blob in ("cat", "tr", "sl", "rs", "fl", "y")] == \
        ["Int8Concat", "Int8Transpose", "Int8Slice", "Int8Reshape", "Int8Flatten", "Int8Dequantize"]
    assert all(r.ok for r in rows) and rows[2].engine.shape == (2, 3, 4, 6)


@pytest.mark.parametrize("dtype", [np.int64, np.float32])
def test_unique_sorted_with_positions(dtype: type) -> None:
    n = core.Net("unique")
    n.Unique("x", ["u", "pos"])
    n.Unique("x", "u_only")
    got = check(n, {"x": np.array([[5, 1, 5], [3, 1, 9]], dtype)})
    assert got["u"].tolist() == [1, 3, 5, 9] and got["pos"].tolist() == [2, 0, 2, 1, 0, 3]


@pytest.mark.parametrize("weighted", [False, True])
def test_sparse_lengths_sum_sparse_lookup(weighted: bool) -> None:
    """Indices through the mapping; pruned ones (-1) leave their segment, which is recounted."""
    n = core.Net("lookup")
    ins = ["idx", "len", "mapping"] + (["w"] if weighted else [])
    n.SparseLengthsSumSparseLookup(ins, ["new_idx", "new_len"] + (["new_w"] if weighted else []))
    got = check(n, {"idx": np.array([0, 3, 1, 4, 2, 3], np.int32), "len": np.array([2, 0, 4], np.int32),
                    "mapping": np.array([1, -1, 0, 2, -1], np.int32), "w": _x(6)})
    assert got["new_idx"].tolist() == [1, 2, 0, 2] and got["new_len"].tolist() == [2, 0, 2]


@pytest.mark.parametrize("merge", [1, 0])
@pytest.mark.parametrize("lengths", [True, False])
def test_ctc_greedy_decoder(merge: int, lengths: bool) -> None:
    """Best class per step, blanks dropped, repeats merged (or not), each sequence cut at its length."""
    logits = _x(6, 3, 4)
    logits[1:3, 0, 2] = 9.0  # NOTE: a repeat to merge
    logits[4, 1, 0] = 9.0    # a blank
    n = core.Net("ctc")
    n.CTCGreedyDecoder(["x", "len"] if lengths else ["x"], ["out_len", "values"], merge_repeated=merge)
    got = check(n, {"x": logits, "len": np.array([6, 4, 2], np.int32)})
    assert got["out_len"].sum() == got["values"].size and got["values"].dtype == np.int32
