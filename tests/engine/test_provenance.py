"""NaN/Inf provenance to the element (issue #44 item 3): one test per op family's index map.

Each net runs in the debugger on real values; the provenance names the first bad output element,
the input elements it was computed from (with their values), and where the walk ends: an op that made
NaN/Inf from finite inputs, a net input, or a parameter.
"""
from __future__ import annotations

import numpy as np
import pytest

from engine.debugger import Debugger
from engine.debugger.provenance import explain_debugger, explain_nonfinite, first_nonfinite
from engine.model.modelio import Model
from engine.model.opdef import create_operator as op
from proto import caffe2_pb2


def explain(ops: list, feeds: dict[str, np.ndarray], params: dict[str, np.ndarray] | None = None,
            loss: str | None = None, blob: str | None = None) -> list[str]:
    """Run `ops` in the debugger (`params` made by the init net) and explain the last NaN/Inf."""
    init = caffe2_pb2.NetDef(name="init", op=[
        op("GivenTensorFill", [], name, shape=list(v.shape), values=v.ravel().tolist()) for name, v in (params or {}).items()])
    net = caffe2_pb2.NetDef(name="net", op=ops)
    net.external_input.extend([*feeds, *(params or {})])
    dbg = Debugger(Model(net, init), {k: v.astype(np.float32) if v.dtype.kind == "f" else v for k, v in feeds.items()})
    if loss:
        dbg.backward(loss)
    with np.errstate(all="ignore"):
        dbg.continue_()
    return explain_debugger(dbg, blob)


def test_unary_chain_back_to_the_op_that_made_it() -> None:
    lines = explain([op("Log", "x", "y"), op("Relu", "y", "z")], {"x": np.array([[1.0, 2.0, 3.0], [4.0, 5.0, -1.0]])})
    assert lines == ["op#1 Relu: z[1, 2] = nan ← Relu(y[1, 2] = nan)",
                     "op#0 Log: y[1, 2] = nan ← Log(x[1, 2] = -1)",
                     "origin: op#0 Log made nan from finite inputs"]


def test_elementwise_broadcast_numpy_and_legacy_axis() -> None:
    b = np.array([1.0, np.inf, 2.0])
    lines = explain([op("Add", ["x", "b"], "y")], {"x": np.ones((2, 3)), "b": b})
    assert lines[0] == "op#0 Add: y[0, 1] = inf ← Add(x[0, 1] = 1, b[1] = inf)"
    assert lines[1] == "origin: b[1] = inf is a net input (no op wrote it)"
    s = np.array([1.0, 2.0, np.nan])
    lines = explain([op("Mul", ["X", "s"], "Y", broadcast=1, axis=1)], {"X": np.ones((2, 3, 4))}, {"s": s})
    assert lines[0].startswith("op#0 Mul: Y[0, 2, 0] = nan ← Mul(X[0, 2, 0] = 1, s[2] = nan)")
    assert lines[1] == "origin: s[2] = nan is a parameter (no op wrote it)"


def test_reduction_and_softmax_rows() -> None:
    x = np.arange(6.0).reshape(2, 3)
    x[1, 2] = np.nan
    lines = explain([op("ReduceMean", "x", "m", axes=[1], keepdims=0)], {"x": x})
    assert lines[0] == "op#0 ReduceMean: m[1] = nan ← ReduceMean(x[1, :] ∋ x[1, 2] = nan)"
    x = np.zeros((2, 4))
    x[1, 3] = np.inf
    lines = explain([op("Softmax", "x", "p")], {"x": x})
    assert lines[0].startswith("op#0 Softmax: p[1, 0] = nan ← Softmax(x[1, :] ∋ x[1, 3] = inf)")


def test_fc_and_matmul_rows_and_columns() -> None:
    w = np.linspace(-1, 1, 12).reshape(4, 3)
    w[2, 1] = np.nan
    lines = explain([op("FC", ["x", "w", "b"], "y")], {"x": np.ones((2, 3))}, {"w": w, "b": np.arange(4.0)})
    assert lines == ["op#0 FC: y[0, 2] = nan ← FC(x[0, :] = [1, 1, 1], w[2, :] ∋ w[2, 1] = nan, b[2] = 2)",
                     "origin: w[2, 1] = nan is a parameter (no op wrote it)"]
    b = np.ones((3, 2))
    b[1, 1] = np.inf
    lines = explain([op("MatMul", ["a", "b"], "y", trans_b=1)], {"a": np.ones((2, 2)), "b": b})
    assert lines[0] == "op#0 MatMul: y[0, 1] = inf ← MatMul(a[0, :] = [1, 1], b[1, :] ∋ b[1, 1] = inf)"


def test_conv_window_and_pool_window() -> None:
    x = np.ones((1, 1, 5, 5))
    x[0, 0, 3, 3] = np.inf
    lines = explain([op("Conv", ["x", "w", "b"], "y", kernel=3, pad=1)], {"x": x},
                    {"w": np.full((2, 1, 3, 3), 0.5), "b": np.zeros(2)})
    assert lines[0] == ("op#0 Conv: y[0, 0, 2, 2] = inf ← Conv(x[0, 0, 1:4, 1:4] ∋ x[0, 0, 3, 3] = inf, "
                        "w[0, :, :, :] in [0.5, 0.5], b[0] = 0)")
    lines = explain([op("MaxPool", "x", "y", kernel=2, stride=2)], {"x": x})
    assert lines[0] == "op#0 MaxPool: y[0, 0, 1, 1] = inf ← MaxPool(x[0, 0, 2:4, 2:4] ∋ x[0, 0, 3, 3] = inf)"


def test_spatial_bn_channel_and_made_from_finite_inputs() -> None:
    lines = explain([op("SpatialBN", ["x", "s", "b", "m", "v"], "y", is_test=1, epsilon=0.0)],
                    {"x": np.ones((1, 2, 2, 2))}, {"s": np.ones(2), "b": np.zeros(2), "m": np.array([0.0, 1.0]),
                                                   "v": np.array([1.0, 0.0])})
    assert lines == ["op#0 SpatialBN: y[0, 1, 0, 0] = nan ← SpatialBN(x[0, 1, 0, 0] = 1, s[1] = 1, b[1] = 0, m[1] = 1, "
                     "v[1] = 0)", "origin: op#0 SpatialBN made nan from finite inputs"]


def test_gather_and_sparse_lengths_follow_the_index() -> None:
    data = np.arange(8.0).reshape(4, 2)
    data[3, 0] = np.nan
    lines = explain([op("Gather", ["data", "idx"], "y")], {"data": data, "idx": np.array([1, 3], np.int32)})
    assert lines[0] == "op#0 Gather: y[1, 0] = nan ← Gather(data[3, 0] = nan, idx[1] = 3)"
    data = np.arange(10.0).reshape(5, 2)
    data[4, 1] = np.inf
    lines = explain([op("SparseLengthsSum", ["data", "idx", "len"], "y")],
                    {"data": data, "idx": np.array([0, 4, 2], np.int64), "len": np.array([1, 2], np.int32)})
    assert lines[0] == ("op#0 SparseLengthsSum: y[1, 1] = inf ← SparseLengthsSum(data[[4, 2], 1] ∋ data[4, 1] = inf, "
                        "idx[1:3] = [4, 2], len[1] = 2)")


def test_concat_split_reshape_transpose_positions() -> None:
    b = np.zeros((2, 3))
    b[0, 1] = np.nan
    lines = explain([op("Concat", ["a", "b"], ["y", "info"], axis=1)], {"a": np.ones((2, 2)), "b": b})
    assert lines[0] == "op#0 Concat: y[0, 3] = nan ← Concat(b[0, 1] = nan)"
    x = np.zeros((2, 5))
    x[1, 4] = np.nan
    lines = explain([op("Split", "x", ["p", "q"], axis=1, split=[2, 3]), op("Transpose", "q", "t"),
                     op("Reshape", "t", ["r", "old"], shape=[-1])], {"x": x})
    assert lines[:3] == ["op#2 Reshape: r[5] = nan ← Reshape(t[2, 1] = nan)",
                         "op#1 Transpose: t[2, 1] = nan ← Transpose(q[1, 2] = nan)",
                         "op#0 Split: q[1, 2] = nan ← Split(x[1, 4] = nan)"]


def test_backward_ops_sqrt_gradient_divides_by_zero() -> None:
    """Sqrt's gradient (Scale, then Div by the output in place): an inf made in the backward pass."""
    lines = explain([op("Sqrt", "x", "y"), op("AveragedLoss", "y", "loss")], {"x": np.array([[4.0, 0.0]])}, loss="loss")
    assert lines[0].startswith("op#") and "x_grad[0, 1] = inf ← Div(x_grad[0, 1] = " in lines[0]
    assert lines[0].endswith("y[0, 1] = 0)") and lines[1].endswith("Div made inf from finite inputs")


def test_fc_gradient_weight_column() -> None:
    dy = np.zeros((2, 3))
    dy[1, 2] = np.nan
    grad = [op("FCGradient", ["x", "w", "dy"], ["dw", "db", "dx"])]
    feeds = {"x": np.arange(4.0).reshape(2, 2), "w": np.ones((3, 2)), "dy": dy}
    assert explain(grad, feeds)[0] == "op#0 FCGradient: dw[2, 0] = nan ← FCGradient(x[:, 0] = [0, 2], dy[:, 2] ∋ dy[1, 2] = nan)"
    assert explain(grad, feeds, blob="db")[0] == "op#0 FCGradient: db[2] = nan ← FCGradient(dy[:, 2] ∋ dy[1, 2] = nan)"
    assert explain(grad, feeds, blob="dx")[0] == \
        "op#0 FCGradient: dx[1, 0] = nan ← FCGradient(w[:, 0] = [1, 1, 1], dy[1, :] ∋ dy[1, 2] = nan)"


def test_explain_nonfinite_on_a_plain_trace_and_nothing_bad() -> None:
    x = np.array([0.0, 2.0], np.float32)
    with np.errstate(all="ignore"):
        y = 1 / x
    ops = [op("Reciprocal", "x", "y"), op("Relu", "y", "z")]
    lines = explain_nonfinite(ops, [{"y": y}, {"z": np.maximum(y, 0)}], {"x": x}, op_index=1)
    assert lines == ["op #1 Relu: z[0] = inf ← Relu(y[0] = inf)", "op #0 Reciprocal: y[0] = inf ← Reciprocal(x[0] = 0)",
                     "origin: op #0 Reciprocal made inf from finite inputs"]
    assert explain_nonfinite(ops[:1], [{"y": np.ones(2)}], {"x": x}) == []
    assert first_nonfinite(np.array([1, 2])) is None


@pytest.mark.parametrize("n", [1, 3])
def test_unknown_op_reads_its_whole_inputs(n: int) -> None:
    x = np.ones((n, 4))
    x[n - 1, 1] = np.nan
    lines = explain([op("LpNorm", "x", "y")], {"x": x})  # NOTE: no rule: every element is read
    assert lines[0] == f"op#0 LpNorm: y[0] = nan ← LpNorm(x[:, :] ∋ x[{n - 1}, 1] = nan)"


def test_netviz_diff_names_where_a_sides_nan_came_from(tmp_path, capsys) -> None:
    """Two inits of one net, B's weight holding a NaN: the diff's culprit, then B's provenance."""
    from engine.model.modelio import save_net
    from netviz.cli import main

    net = caffe2_pb2.NetDef(name="net", op=[op("FC", ["x", "w", "b"], "y"), op("Relu", "y", "z")])
    net.external_input.extend(["x", "w", "b"])
    save_net(net, tmp_path / "predict_net.pb")
    w = np.ones((3, 2), np.float32)
    for side, bad in (("a", False), ("b", True)):
        w[1, 0] = np.nan if bad else 1.0
        save_net(caffe2_pb2.NetDef(name="init", op=[
            op("GivenTensorFill", [], "w", shape=[3, 2], values=w.ravel().tolist()),
            op("GivenTensorFill", [], "b", shape=[3], values=[0.0, 0.5, 1.0])]), tmp_path / f"init_{side}.pb")
    assert main(["diff", str(tmp_path / "predict_net.pb"), "--init-a", str(tmp_path / "init_a.pb"),
                 "--init-b", str(tmp_path / "init_b.pb"), "--input", "x=2,2"]) == 1
    out = capsys.readouterr().out
    assert "culprit: op #0 FC" in out
    assert "B: op #0 FC: y[0, 1] = nan ← FC(x[0, :] = [" in out and "w[1, :] ∋ w[1, 0] = nan, b[1] = 0.5)" in out
    assert "B: origin: w[1, 0] = nan is a parameter (no op wrote it)" in out


def test_netviz_diff_against_onnx_names_the_engines_nan(tmp_path, capsys) -> None:
    pytest.importorskip("onnxruntime")
    from engine.model.modelio import save_net
    from netviz.cli import main

    net = caffe2_pb2.NetDef(name="net", op=[op("Log", "x", "y"), op("Sum", ["y", "y"], "z")])
    net.external_input.append("x")
    path = save_net(net, tmp_path / "predict_net.pb")
    np.save(tmp_path / "x.npy", np.array([[1.0, 2.0], [-3.0, 4.0]], np.float32))
    feed = f"x={tmp_path / 'x.npy'}"
    with np.errstate(all="ignore"):
        assert main(["export", str(path), "-o", str(tmp_path / "net.onnx"), "--input", feed]) == 0
        capsys.readouterr()
        main(["diff", str(path), str(tmp_path / "net.onnx"), "--input", feed])
    out = capsys.readouterr().out
    assert ("engine: op #0 Log: y[1, 0] = nan ← Log(x[1, 0] = -3)\n"
            "engine: origin: op #0 Log made nan from finite inputs\n") in out


def test_max_pool_gradient_reads_the_windows_over_the_element() -> None:
    """MaxPoolGradient(X, Y, dY): dX[h, w] reads Y and dY at every output whose window covers (h, w)."""
    x = np.arange(16.0).reshape(1, 1, 4, 4)
    dy = np.zeros((1, 1, 3, 3))
    dy[0, 0, 2, 1] = np.nan
    y = np.lib.stride_tricks.sliding_window_view(x, (2, 2), axis=(2, 3)).max(axis=(-1, -2))
    lines = explain([op("MaxPoolGradient", ["x", "y", "dy"], "dx", kernel=2, stride=1)], {"x": x, "y": y, "dy": dy})
    assert lines[0].startswith("op#0 MaxPoolGradient: dx[0, 0, 2, 1] = nan ← MaxPoolGradient(x[0, 0, 2, 1] = 9, "
                               "y[0, 0, 1:3, 0:2] = [")
    assert lines[0].endswith("dy[0, 0, 1:3, 0:2] ∋ dy[0, 0, 2, 1] = nan)")


def test_conv_gradient_filter_bias_and_input() -> None:
    """ConvGradient(X, W, dY): dW reads X at the taps' positions and dY's channel; dX the filters over it."""
    x = np.ones((1, 2, 4, 4))
    dy = np.zeros((1, 2, 4, 4))
    dy[0, 1, 3, 2] = np.nan
    grad = [op("ConvGradient", ["x", "w", "dy"], ["dw", "db", "dx"], kernel=3, pad=1)]
    feeds = {"x": x, "w": np.full((2, 2, 3, 3), 0.5), "dy": dy}
    assert explain(grad, feeds)[0] == ("op#0 ConvGradient: dw[1, 0, 0, 0] = nan ← ConvGradient(x[:, 0, 0:3, 0:3] in [1, 1], "
                                       "dy[:, 1, :, :] ∋ dy[0, 1, 3, 2] = nan)")
    assert explain(grad, feeds, blob="db")[0] == "op#0 ConvGradient: db[1] = nan ← ConvGradient(dy[:, 1, :, :] ∋ dy[0, 1, 3, 2] = nan)"
    assert explain(grad, feeds, blob="dx")[0] == ("op#0 ConvGradient: dx[0, 0, 2, 1] = nan ← ConvGradient("
                                                  "w[:, 0, :, :] in [0.5, 0.5], dy[0, :, 1:4, 0:3] ∋ dy[0, 1, 3, 2] = nan)")


def test_a_long_walk_keeps_its_first_and_last_lines() -> None:
    """Through 30 Relus back to the input: the lines where the value is and where it began, the middle counted."""
    x = np.array([[1.0, np.inf]])
    lines = explain([op("Relu", "x" if i == 0 else f"r{i - 1}", f"r{i}") for i in range(30)], {"x": x})
    assert len(lines) == 10 and lines[4] == "… 22 ops between …"
    assert lines[0] == "op#29 Relu: r29[0, 1] = inf ← Relu(r28[0, 1] = inf)"
    assert lines[-2:] == ["op#0 Relu: r0[0, 1] = inf ← Relu(x[0, 1] = inf)", "origin: x[0, 1] = inf is a net input (no op wrote it)"]


def _log_loop() -> caffe2_pb2.NetDef:
    """``while i < 3: x = Log(x)``: x = 0.5 turns negative in iteration 0 and NaN in iteration 1."""
    cond = caffe2_pb2.NetDef(name="cond", op=[op("LT", ["i", "three"], "cond")])
    body = caffe2_pb2.NetDef(name="body", op=[op("Log", "x", "x"), op("Add", ["i", "one"], "i"),
                                              op("LT", ["i", "three"], "cond")])
    net = caffe2_pb2.NetDef(name="loop", op=[
        op("ConstantFill", [], "i", shape=[1], value=0.0), op("ConstantFill", [], "three", shape=[1], value=3.0),
        op("ConstantFill", [], "one", shape=[1], value=1.0), op("LT", ["i", "three"], "cond"),
        op("While", ["cond"], [], loop_net=body, cond_net=cond), op("Relu", "x", "y")])
    net.external_input.append("x")
    return net


def test_control_flow_walks_back_through_the_loops_iterations() -> None:
    """Each iteration's value of an in-place loop blob comes from the undo history (one kept value per op)."""
    dbg = Debugger(Model(_log_loop()), {"x": np.array([3.0, 0.5], np.float32)})
    with np.errstate(all="ignore"):
        assert dbg.run_to_nan().reason == "nan"
        assert explain_debugger(dbg) == ["While op#4 iteration 1 › op#0 Log: x[1] = nan ← Log(x[1] = -0.693147)",
                                         "origin: While op#4 iteration 1 › op#0 Log made nan from finite inputs"]
        dbg.continue_()
    assert explain_debugger(dbg) == ["op#5 Relu: y[1] = nan ← Relu(x[1] = nan)",
                                     "While op#4 iteration 2 › op#0 Log: x[1] = nan ← Log(x[1] = nan)",
                                     "While op#4 iteration 1 › op#0 Log: x[1] = nan ← Log(x[1] = -0.693147)",
                                     "origin: While op#4 iteration 1 › op#0 Log made nan from finite inputs"]


def test_a_value_no_longer_kept_is_not_called_finite() -> None:
    """A value the memory budget dropped: the walk says it does not know, never 'from finite inputs'."""
    nan = np.array([np.nan], np.float32)
    ops = [op("Log", "x", "y"), op("Relu", "y", "z")]
    assert explain_nonfinite(ops, [{}, {"z": nan}], {"x": -nan})[-1] == \
        "origin: not known: the value op #0 Log wrote to 'y' was not kept"
    assert explain_nonfinite(ops[:1], [{"y": nan}], {}) == [
        "op #0 Log: y[0] = nan ← Log(x = ?)", "origin: not known: the value of 'x' op #0 Log read was not kept"]


def test_image_ops_of_a_style_transfer_net() -> None:
    """PadImage (reflect: the mirrored source), ConvTranspose (the inputs whose taps reach the element),
    InstanceNorm (the instance's whole plane), ResizeNearest (the source pixel)."""
    x = np.arange(16.0).reshape(1, 1, 4, 4)
    x[0, 0, 1, 2] = np.nan
    lines = explain([op("PadImage", "x", "y", pad=2, mode="reflect")], {"x": x})
    assert lines[0] == "op#0 PadImage: y[0, 0, 1, 0] = nan ← PadImage(x[0, 0, 1, 2] = nan)"  # NOTE: col 0 mirrors col 2
    lines = explain([op("ConvTranspose", ["x", "w", "b"], "y", kernel=2, stride=2)], {"x": x},
                    {"w": np.ones((1, 3, 2, 2)), "b": np.zeros(3)})
    assert lines[0] == "op#0 ConvTranspose: y[0, 0, 2, 4] = nan ← ConvTranspose(x[0, 0, 1, 2] = nan, w[0, 0, :, :] = [1, 1, 1, 1], b[0] = 0)"
    lines = explain([op("InstanceNorm", ["x", "s", "b"], "y")], {"x": x}, {"s": np.ones(1), "b": np.zeros(1)})
    assert lines[0] == "op#0 InstanceNorm: y[0, 0, 0, 0] = nan ← InstanceNorm(x[0, 0, :, :] ∋ x[0, 0, 1, 2] = nan, s[0] = 1, b[0] = 0)"
    lines = explain([op("ResizeNearest", "x", "y", width_scale=2.0, height_scale=2.0)], {"x": x})
    assert lines[0] == "op#0 ResizeNearest: y[0, 0, 2, 4] = nan ← ResizeNearest(x[0, 0, 1, 2] = nan)"


class _DeviceArray:
    """A CuPy-like array: a GPU run's recorded values are these, read through ``get()``."""

    __cuda_array_interface__: dict = {}

    def __init__(self, a: np.ndarray) -> None:
        self.a = a

    def get(self) -> np.ndarray:
        return self.a


def test_values_kept_on_a_gpu_are_read_on_the_host() -> None:
    x = np.array([[2.0, -1.0]], np.float32)
    with np.errstate(all="ignore"):
        y = np.log(x)
    lines = explain_nonfinite([op("Log", "x", "y")], [{"y": _DeviceArray(y)}], {"x": _DeviceArray(x)})
    assert lines == ["op #0 Log: y[0, 1] = nan ← Log(x[0, 1] = -1)", "origin: op #0 Log made nan from finite inputs"]
