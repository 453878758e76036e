"""Shape inference: every rule agrees with its kernel, nets agree with a run, zoo nets infer."""
from __future__ import annotations

import json

import numpy as np
import pytest

from engine.errors import ShapeError
from engine.runtime.executor import run_op
from engine.runtime.workspace import eval_op
from engine.graph import blob_id, from_netdef
from engine.model.modelio import load_model
from engine.model.opdef import create_operator as op
from engine.runtime.params import synthesize_params
from engine.runtime.ops.tensor import DTYPES
from engine.runtime.shapes import BOOL, FLOAT, INT64, UNKNOWN, TensorInfo, inference_is_not_run
from engine.runtime.inference import annotate_graph, infer_op, infer_model_shapes, infer_net_shapes, infer_shapes
from engine.model.ssa import get_ssa
from engine.caffe2.workspace import Workspace
from proto import caffe2_pb2

from tests.conftest import ROOT

TO_PROTO = {np.dtype(v): k for k, v in DTYPES.items() if v is not object and k not in (3, 7)}
TO_PROTO[np.dtype(np.uint8)], TO_PROTO[np.dtype(np.int8)] = 6, 7
RNG = np.random.default_rng(0)


def dtype_of(a) -> int:
    return TO_PROTO[np.asarray(a).dtype]


def rand(shape, dtype=np.float32):
    if np.issubdtype(dtype, np.integer):
        return RNG.integers(0, 3, size=shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype) + (0 if shape else 2)


def case(op_type, shapes, n_out=1, dtypes=None, **args):
    return pytest.param(op_type, shapes, n_out, dtypes or {}, args, id=f"{op_type}-{args}" if args else op_type)


F = np.float32
# (op, input shapes, outputs, input dtypes by position, args): the kernel's output is the oracle.
CASES = [
    case("Relu", [(2, 3)]), case("Softmax", [(2, 5)]), case("ReluGradient", [(2, 3), (2, 3)]),
    case("PReluGradient", [(2, 3, 4), (2, 3, 4), (2, 3, 4), (3,)], n_out=2),
    case("Conv", [(1, 3, 9, 9), (4, 3, 3, 3), (4,)], kernel=3, pad=1, stride=2),
    case("Conv", [(2, 4, 8, 7), (6, 2, 3, 2)], group=2, kernel_h=3, kernel_w=2, dilation=2),
    case("Conv", [(1, 7, 6, 3), (5, 3, 3, 3)], order="NHWC", pads=[1, 0, 0, 1]),
    case("Conv", [(1, 2, 10), (3, 2, 4)], stride=3),
    case("ConvGradient", [(1, 3, 6, 6), (4, 3, 3, 3), (1, 4, 4, 4)], n_out=3, kernel=3),
    case("ConvTranspose", [(1, 4, 3, 5), (4, 3, 3, 2), (6,)], group=2, kernel_h=3, kernel_w=2, stride=2, pad=1, adj=1),
    case("ConvTranspose", [(1, 3, 5, 4), (4, 3, 3, 2)], order="NHWC", kernels=[3, 3], strides=[2, 3], pads=[1, 0, 0, 1]),
    case("ConvTransposeGradient", [(1, 4, 3, 3), (4, 3, 3, 3), (1, 6, 7, 7)], n_out=3, kernel=3, stride=2, group=2),
    case("ConvTransposeGradient", [(1, 3, 3, 4), (4, 3, 3, 2), (1, 7, 7, 2)], n_out=2, kernel=3, stride=2,
         order="NHWC", no_bias=1),
    case("MaxPool", [(1, 2, 7, 7)], kernel=3, stride=2), case("AveragePool", [(1, 2, 7, 7)], kernel=2, pad=1),
    case("AveragePool", [(1, 5, 5, 2)], order="NHWC", global_pooling=1),
    case("MaxPoolGradient", [(1, 2, 4, 4), (1, 2, 2, 2), (1, 2, 2, 2)], kernel=2, stride=2),
    case("SpatialBN", [(2, 3, 4, 4), (3,), (3,), (3,), (3,)], is_test=1),
    case("SpatialBN", [(2, 3, 4, 4), (3,), (3,), (3,), (3,)], n_out=5),
    case("FC", [(2, 3, 4), (5, 12), (5,)]), case("FC", [(2, 3, 4), (5, 4), (5,)], axis=2),
    case("FCTransposed", [(2, 6), (6, 5), (5,)]), case("FCGradient", [(2, 6), (5, 6), (2, 5)], n_out=3),
    case("MatMul", [(3, 4), (5, 4)], trans_b=1), case("BatchMatMul", [(2, 3, 4), (2, 4, 5)]),
    case("LRN", [(1, 5, 3, 3)], n_out=2, size=3, alpha=1e-4, beta=0.75),
    case("Dropout", [(2, 3)], n_out=2, is_test=1), case("Dropout", [(2, 3)], n_out=2, ratio=0.3),
    case("LayerNorm", [(2, 3, 4)], n_out=3, axis=2),
    case("Add", [(2, 3, 4), (4,)]), case("Mul", [(2, 3, 4, 5), (3,)], broadcast=1, axis=1),
    case("Sub", [(2, 1, 4), (3, 1)]), case("Div", [(2, 3), (2, 3)]), case("GT", [(2, 3), (3,)]),
    case("Sum", [(2, 3), (2, 3), (2, 3)]), case("DivGradient", [(2, 3), (2, 3), (3,), (2, 3)], n_out=2),
    case("Concat", [(1, 2, 3), (1, 4, 3)], n_out=2), case("Concat", [(2, 3), (2, 3)], n_out=2, axis=0, add_axis=1),
    case("Concat", [(1, 3, 3, 2), (1, 3, 3, 5)], n_out=2, order="NHWC"),
    case("Split", [(2, 6)], n_out=3), case("Split", [(2, 6)], n_out=2, axis=1, split=[2, 4]),
    case("Reshape", [(2, 3, 4)], n_out=2, shape=[0, -1]), case("Reshape", [(2, 3, 4)], n_out=2, shape=[4, 6]),
    case("Transpose", [(2, 3, 4)]), case("Transpose", [(2, 3, 4)], axes=[1, 0, 2]),
    case("Flatten", [(2, 3, 4)]), case("Flatten", [(2, 3, 4)], axis=2), case("FlattenToVec", [(2, 3)]),
    case("ExpandDims", [(2, 3)], dims=[0, 3]), case("Squeeze", [(2, 1, 3, 1)], dims=[1, 3]),
    case("Slice", [(4, 5, 6)], starts=[1, 0], ends=[-1, 3]), case("Slice", [(4, 5)], starts=[0, -3], ends=[2, -1]),
    case("Cast", [(2, 3)], to=10), case("ResizeNearest", [(1, 2, 3, 4)], width_scale=2.0, height_scale=1.5),
    case("ResizeNearestGradient", [(1, 2, 6, 8), (1, 2, 3, 4)], width_scale=2.0, height_scale=2.0),
    case("NCHW2NHWC", [(1, 2, 3, 4)]), case("NHWC2NCHW", [(1, 2, 3, 4)]), case("Shape", [(2, 3)]),
    case("Size", [(2, 3)]), case("ReduceSum", [(2, 3, 4)], axes=[1], keepdims=0), case("ReduceMean", [(2, 3, 4)]),
    case("ReduceBackSum", [(2, 3, 4)], num_reduce_dim=2), case("ReduceFrontMean", [(2, 3, 4)]),
    case("ArgMax", [(2, 3, 4)], axis=1, keepdims=0), case("SumElements", [(2, 3)]),
    case("SoftmaxWithLoss", [(4, 5), (4,)], n_out=2, dtypes={1: np.int32}),
    case("LabelCrossEntropy", [(4, 5), (4,)], dtypes={1: np.int32}), case("AveragedLoss", [(4,)]),
    case("SquaredL2Distance", [(4, 3), (4, 3)]), case("Accuracy", [(4, 5), (4,)], dtypes={1: np.int32}),
    case("Gather", [(5, 3), (2, 4)], dtypes={1: np.int64}), case("BatchGather", [(2, 5, 3), (4,)], dtypes={1: np.int64}),
    case("ConstantFill", [], shape=[2, 3], value=1.0), case("ConstantFill", [(2, 3)], value=2, extra_shape=[4]),
    case("GaussianFill", [], shape=[3]), case("UniformIntFill", [], shape=[2], min=0, max=5),
    case("GivenTensorIntFill", [], shape=[2], values=[1, 2]), case("GivenTensorFill", [], values=[1.5]),
    case("Iter", [(1,)], dtypes={0: np.int64}), case("LearningRate", [()], dtypes={0: np.int64}, base_lr=0.1, policy="fixed"),  # 0-d: rule = kernel
    case("MomentumSGDUpdate", [(3,), (3,), (), (3,)], n_out=3), case("IsEmpty", [(2,)]),
    case("Copy", [(2, 3)]), case("Where", [(2, 3), (2, 3), (3,)], dtypes={0: np.bool_}),
]


@pytest.mark.parametrize("op_type, shapes, n_out, dtypes, args", CASES)
def test_rule_matches_kernel(op_type, shapes, n_out, dtypes, args):
    xs = [rand(s, dtypes.get(i, F)) for i, s in enumerate(shapes)]
    got = eval_op(op_type, *xs, n_out=n_out, **args)
    o = op(op_type, [f"I{i}" for i in range(len(xs))], [f"O{i}" for i in range(n_out)], **args)
    inferred = infer_op(o, [TensorInfo(x.shape, dtype_of(x)) for x in xs])
    assert [i.shape for i in inferred] == [np.shape(g) for g in got]
    assert [i.dtype for i in inferred] == [dtype_of(g) for g in got]


def test_unknown_stays_unknown_and_partial_dims_flow():
    net = caffe2_pb2.NetDef(op=[op("Conv", ["X", "w"], "Y", kernel=3, stride=2), op("Relu", "Y", "Y"),
                                op("Reshape", ["Y", "s"], ["Z", "old"]), op("FC", ["Y", "W2", "b2"], "F")])
    s = infer_shapes(net, {"X": TensorInfo((1, 3, 9, 9), FLOAT)})
    assert s[("Y", 2)] == TensorInfo((1, None, 4, 4), FLOAT)
    assert s[("Z", 1)].shape is None and s[("old", 1)] == TensorInfo((4,), INT64)
    assert s[("F", 1)] == TensorInfo((1, None), FLOAT)
    assert s[("w", 0)] == UNKNOWN


def test_incompatible_inputs_raise_one_line_shape_error():
    net = caffe2_pb2.NetDef(name="bad", op=[op("FC", ["X", "W", "b"], "Y", name="fc1")])
    with pytest.raises(ShapeError, match=r"^bad: op #0: op FC 'fc1': X has 5 features per row, W expects 4"):
        infer_shapes(net, {"X": (2, 5), "W": (3, 4), "b": (3,)})


def test_if_subnets_agree_or_unknown():
    then = caffe2_pb2.NetDef(op=[op("Relu", "X", "Y"), op("Relu", "X", "Z")])
    else_ = caffe2_pb2.NetDef(op=[op("Relu", "X", "Y"), op("FlattenToVec", "X", "Z")])
    net = caffe2_pb2.NetDef(op=[op("If", "c", [], then_net=then, else_net=else_), op("Sum", ["Y", "Z"], "S")])
    s = infer_net_shapes(net, {"X": TensorInfo((2, 3), FLOAT), "c": TensorInfo((), BOOL)})
    assert s[("op", 0, "then_net")][("Z", 1)] == TensorInfo((2, 3), FLOAT)
    assert s[("op", 0, "else_net")][("Z", 1)] == TensorInfo((6,), FLOAT)
    assert s[()][("Y", 0)] == TensorInfo((2, 3), FLOAT) and s[()][("Z", 0)] == UNKNOWN


def test_init_net_fills_give_param_shapes():
    init = caffe2_pb2.NetDef(op=[op("XavierFill", [], "W", shape=[3, 5]), op("ConstantFill", [], "b", shape=[3])])
    net = caffe2_pb2.NetDef(op=[op("FC", ["X", "W", "b"], "Y")], external_input=["X", "W", "b"])
    assert infer_shapes(net, {"X": TensorInfo((4, 5), FLOAT)}, init)[("Y", 1)] == TensorInfo((4, 3), FLOAT)


def test_annotate_graph_fills_blob_nodes():
    net = caffe2_pb2.NetDef(op=[op("Relu", "X", "Y"), op("Flatten", "Y", "Y")], external_input=["X"])
    G = annotate_graph(from_netdef(net), infer_net_shapes(net, {"X": TensorInfo((2, 3, 4), FLOAT)}))
    assert G.nodes[blob_id("Y", 2)]["shape"] == (2, 12) and G.nodes[blob_id("Y", 2)]["dtype"] == FLOAT


# ---- whole nets against a run ----

def synth_params(net, inputs, width=4, classes=1000):
    """Random inputs plus engine.runtime.params' synthesized weights (`width` filters per conv)."""
    values = {k: rand(v.shape) for k, v in inputs.items()}
    return {**values, **synthesize_params(net, values, width=width, classes=classes)}




def check_against_run(net, feeds):
    """Run `net` op by op and compare every output with its inferred SSA version."""
    shapes = infer_shapes(net, {k: TensorInfo(np.shape(v), dtype_of(v)) for k, v in feeds.items()})
    ssa, _ = get_ssa(net)
    ws = Workspace("shapes")
    for k, v in feeds.items():
        ws.feed_blob(k, v)
    for i, (o, (_, outs)) in enumerate(zip(net.op, ssa)):
        run_op(o, ws, index=i)
        for name, ver in outs:
            got, info = ws.fetch_blob(name), shapes[(name, ver)]
            if inference_is_not_run(o):  # the rule is Caffe2's inference, not its kernel's output
                continue
            assert info.shape == np.shape(got), f"op #{i} {o.type} {name}@{ver}"
            assert info.dtype in (None, dtype_of(got)), f"op #{i} {o.type} {name}@{ver}"
    return shapes


RUNNABLE = {"bvlc_alexnet", "zfnet512", "vgg19", "resnet50", "inception_v1", "inception_v2", "densenet121"}


def test_zoo_net_shapes(zoo_net):
    """Every zoo net infers without a rule raising; CNNs with synthesized params agree with a run."""
    model = load_model(zoo_net)
    shapes = infer_model_shapes(model)[()]
    data = model.value_info.get("data") or model.value_info.get("gpu_0/data")
    if data is not None:
        assert shapes[(next(iter(model.value_info)), 0)].shape == tuple(data.shape)
    if zoo_net.parent.name not in RUNNABLE:
        return
    feeds = synth_params(model.predict, {k: TensorInfo(tuple(v.shape)) for k, v in model.value_info.items()})
    shapes = check_against_run(model.predict, feeds)
    final = model.predict.external_output[-1]
    out = shapes[(final, get_ssa(model.predict)[1][final])].shape
    assert out == ((1, 1000) if any(o.type == "FC" for o in model.predict.op) else (1, 4, 1, 1))


def test_example_and_golden_models_agree_with_run():
    for path in ("examples/mlp/predict_net.pb", "tests/golden/models/resnet50/predict_net.pb"):
        model = load_model(ROOT / path)
        ws = Workspace("init")
        run_net_values = _run_init(model.init, ws)
        feeds = {**run_net_values, **{k: rand(v.shape, DTYPES[v.data_type]) for k, v in model.value_info.items()}}
        check_against_run(model.predict, feeds)


def _run_init(init, ws):
    from engine.runtime.executor import run_net  # noqa: PLC0415
    run_net(init, ws)
    return {k: ws.fetch_blob(k) for k in ws.blobs()}


def test_info_shapes_text_and_json(capsys):
    from netviz.cli import main  # noqa: PLC0415

    path = str(ROOT / "tests/golden/models/mlp_sgd/predict_net.pb")
    assert main(["info", path, "--shapes", "--json"]) == 0
    shapes = json.loads(capsys.readouterr().out)["shapes"]
    assert shapes["data@0"] == {"shape": [8, 16], "dtype": "float32"}
    assert main(["info", path, "--shapes"]) == 0
    assert "  data@0: 8×16 float32" in capsys.readouterr().out.splitlines()
