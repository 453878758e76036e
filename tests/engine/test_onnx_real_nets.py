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


def check(net: core.Net, feeds: dict[str, np.ndarray], init: core.Net | None = None) -> dict[str, np.ndarray]:
    """Export `net` (weights from `init`), run it in ONNX Runtime; every value equal to the engine's.
    Returns the engine's values by blob, for tests that check the net did what it should."""
    src = prepare_model(Model(net.Proto(), (init or core.Net("init")).Proto()), feeds)
    rows = diff_against_runtime(src, export(src).model)
    bad = [(r.op_type, r.blob, r.max_abs) for r in rows if not r.ok]
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
    data, slices = _x(6, 3), _x(3, 3)
    got = check(n, {"data": data, "idx": np.array([4, 0, 2], dtype), "slices": slices,
                    "data3": _x(5, 2, 2), "slices3": _x(3, 2, 2)})
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
