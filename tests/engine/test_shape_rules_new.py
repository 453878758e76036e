"""The shape rules of issue #35 item 7 against what the kernels really write.

Every recorded oracle case (``tests/golden/kernels_*``) of an op type whose rule this file lists is
run through netviz's engine (its extra ops too: queues, indexes, readers are made first) and inferred
statically from the same fed inputs; each output the rule knows must have the kernel's shape and
dtype.  The kernels themselves are held to Caffe2's recorded outputs by the kernel tests, so this
ties each rule to Caffe2's numbers on real inputs.  Ops without a golden case get a small hand-made
net; RecurrentNetwork is checked on Caffe2's RNN builder nets, Do/If/While on the control-flow
examples.  Outputs declared ``opaque`` (queues, DBs and what they hand out, where Caffe2's inference
knows nothing either) read ``opaque``, never ``?``, and so does what is computed from them.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format

import engine.runtime.ops  # noqa: F401  (fills the tables)
from engine.runtime.blobio import Int8Tensor, data_type_of
from engine.model.opdef import create_operator
from engine.catalogue.registry import SHAPES
from engine.runtime.shapes import OPAQUE, TensorInfo, opaque
from engine.runtime.inference import infer_net_shapes, infer_op
from engine.caffe2.workspace import Workspace
from proto import caffe2_pb2

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"

#: op types given a rule for issue #35 item 7 that computes shapes (checked on every golden case)
COMPUTED = frozenset({
    "BatchPermutation", "CollectAndDistributeFpnRpnProposals", "CollectRpnProposals", "DistributeFpnProposals",
    "HeatmapMaxKeypoint", "PSRoIPool", "RMACRegions", "RoIAlignRotated",
    "Append", "AtomicAppend", "TrimDataset", "SortAndShuffle", "ComputeOffset", "GetCursorOffset", "IndexGet",
    "IndexSize", "StoreAdd", "IndexStore", "TensorVectorSize", "GetAllBlobNames", "StatRegistryExport",
    "AsyncNetBarrier", "DataCouple", "Allreduce", "Broadcast", "Reduce", "SafeDequeueBlobs", "SafeEnqueueBlobs",
    "Int8Sigmoid", "Int8LeakyRelu", "Int8ChannelShuffle", "Int8Flatten", "Int8Reshape", "Int8Transpose", "Int8Slice",
    "Int8Concat", "Int8RoIAlign", "Int8ConvTranspose", "Int8GivenTensorFill", "Int8GivenIntTensorFill",
    "MapToKeyValue", "KeySplit", "MergeMultiScalarFeatureTensors", "MergeSingleListFeatureTensors",
    "MergeMultiListFeatureTensors", "MergeSingleMapFeatureTensors", "MergeMultiMapFeatureTensors",
    "Partition", "LengthsPartition", "SplitByLengths", "LengthsRangeFill", "RecurrentNetwork",
    "UniqueUniformFill", "ReservoirSampling", "BooleanUnmask", "HasScope", "Do",
    "PackedInt8BGRANHWCToNCHWCStylizerPreprocess", "BRGNCHWCToPackedInt8BGRAStylizerDeprocess",
})


def _cases() -> list[Path]:
    out = []
    for p in sorted(GOLDEN.glob("kernels*/*.json")):
        data = json.loads(p.read_text())
        if isinstance(data, dict) and data.get("op_type") in COMPUTED | OPAQUE_TYPES and "error" not in data \
                and data.get("npz"):
            out.append(p)
    return out


def _run_case(path: Path) -> tuple[caffe2_pb2.OperatorDef, dict[str, TensorInfo], Workspace, caffe2_pb2.NetDef]:
    """The case's net (extra ops, then the op) run in a fresh engine workspace; the fed inputs' infos."""
    data = json.loads(path.read_text())
    net = caffe2_pb2.NetDef(name=path.stem)
    for e in data.get("extra_ops") or []:
        net.op.append(text_format.Parse(e, caffe2_pb2.OperatorDef()))
    op = text_format.Parse(data["op"], caffe2_pb2.OperatorDef())
    net.op.append(op)
    made = {o for e in net.op[:-1] for o in e.output}
    ws, fed = Workspace(path.stem), {}
    with np.load(path.with_name(data["npz"]), allow_pickle=True) as z:
        for i, b in enumerate(data["inputs"]):
            if b in made or f"in{i}" not in z.files or z[f"in{i}"].dtype == object:
                continue
            ws.feed_blob(b, z[f"in{i}"])
            fed[b] = TensorInfo(z[f"in{i}"].shape, data_type_of(z[f"in{i}"]))
    if op.type == "PSRoIPool":  # NOTE: Caffe2 has it on CUDA only; netviz follows the op's device
        op.device_option.device_type = caffe2_pb2.CUDA
        net.op[-1].CopyFrom(op)
    try:
        ws.run_net_once(net)
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"the engine cannot run this case here: {e}")
    return op, fed, ws, net


#: op types whose every output is declared opaque by their family module
OPAQUE_TYPES = frozenset(t for t, rule in SHAPES.items() if rule is opaque)


@pytest.mark.parametrize("path", _cases(), ids=lambda p: f"{p.parent.name[8:]}/{p.stem}")
def test_new_shape_rule_matches_the_kernel(path: Path) -> None:
    _check(*_run_case(path))


def _net(*ops: caffe2_pb2.OperatorDef) -> caffe2_pb2.NetDef:
    return caffe2_pb2.NetDef(name="hand", op=list(ops))


_X = np.arange(6, dtype=np.float32).reshape(2, 3)
_ROIS = np.array([[0, 0, 0, 4, 4], [0, 1, 1, 5, 5], [0, 2, 0, 3, 5]], np.float32)
#: ops without a golden case: a small net each (the op last), the fed arrays
HAND = {
    "Allreduce": ([create_operator("CreateCommonWorld", [], ["cw"]), create_operator("Allreduce", ["cw", "X"], ["X"])], {}),
    "Broadcast": ([create_operator("CreateCommonWorld", [], ["cw"]), create_operator("Broadcast", ["cw", "X"], ["X"])], {}),
    "Reduce": ([create_operator("CreateCommonWorld", [], ["cw"]), create_operator("Reduce", ["cw", "X"], ["X"])], {}),
    "AsyncNetBarrier": ([create_operator("AsyncNetBarrier", ["X", "B"], ["X", "B"])], {"B": _X[:1]}),
    "DataCouple": ([create_operator("DataCouple", ["X", "B"], ["X", "B"])], {"B": _X[:1]}),
    "AtomicAppend": ([create_operator("CreateMutex", [], ["m"]), create_operator("AtomicAppend", ["m", "X", "B"], ["X"])],
                     {"B": _X[:1]}),
    "GetAllBlobNames": ([create_operator("GetAllBlobNames", [], ["names"])], {}),
    "Int8GivenTensorFill": ([create_operator("Int8GivenTensorFill", [], ["q"], shape=[2, 3], values="abcdef")], {}),
    "Int8GivenIntTensorFill": ([create_operator("Int8GivenIntTensorFill", [], ["q"], shape=[2], values=[1, 2])], {}),
    "SafeEnqueueBlobs": ([create_operator("CreateBlobsQueue", [], ["q"], capacity=2, num_blobs=1),
                          create_operator("SafeEnqueueBlobs", ["q", "X"], ["X", "status"])], {}),
    "StatRegistryExport": ([create_operator("StatRegistryExport", [], ["k", "v", "ts"])], {}),
    "TensorVectorSize": ([create_operator("CreateTensorVector", [], ["vec"]),
                          create_operator("TensorVectorSize", ["vec"], ["n"])], {}),
    "LengthsRangeFill": ([create_operator("LengthsRangeFill", ["L"], ["r"])], {"L": np.array([2, 0, 3], np.int32)}),
    "HasScope": ([create_operator("CreateScope", [], ["ws"]), create_operator("HasScope", ["ws"], ["has"])], {}),
    "PSRoIPool": ([create_operator("PSRoIPool", ["P", "R"], ["Y", "map"], group_size=2, output_dim=2,
                                   device_option=caffe2_pb2.DeviceOption(device_type=caffe2_pb2.CUDA))],
                  {"P": np.ones((1, 8, 6, 6), np.float32), "R": _ROIS}),
}


@pytest.mark.parametrize("op_type", sorted(HAND))
def test_new_shape_rule_matches_the_kernel_on_a_hand_made_net(op_type: str) -> None:
    ops, arrays = HAND[op_type]
    arrays = {"X": _X, **arrays}
    ws, net = Workspace(op_type), _net(*ops)
    for k, v in arrays.items():
        ws.feed_blob(k, v)
    try:
        ws.run_net_once(net)
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"the engine cannot run this case here: {e}")
    _check(net.op[-1], {k: TensorInfo(v.shape, data_type_of(v)) for k, v in arrays.items()}, ws, net)


def test_store_add_is_a_0d_int64(tmp_path: Path) -> None:
    net = _net(create_operator("FileStoreHandlerCreate", [], ["h"], path=str(tmp_path)),
               create_operator("StoreAdd", ["h"], ["n"], blob_name="k"))
    ws = Workspace("store")
    ws.run_net_once(net)
    _check(net.op[-1], {}, ws, net)


def _check(op: caffe2_pb2.OperatorDef, fed: dict[str, TensorInfo], ws: Workspace, net: caffe2_pb2.NetDef) -> None:
    inferred = infer_net_shapes(net, fed)[()]
    last = {}
    for (name, _v), info in inferred.items():  # NOTE: the op's outputs are the last versions written
        last[name] = info
    for k, name in enumerate(op.output):
        info = last[name]
        value = ws.fetch_blob(name)
        value = value.data if isinstance(value, Int8Tensor) else value
        if not isinstance(value, np.ndarray):
            assert info.opaque or info.shape is None, f"output {k} {name}: {info} but the kernel wrote {type(value)}"
            continue
        assert info != TensorInfo() or op.type not in COMPUTED, f"output {k} {name} unknown"
        if info.shape is None:
            continue
        assert len(info.shape) == value.ndim, f"output {k}: {info} vs the kernel's {value.shape}"
        assert all(d is None or d == r for d, r in zip(info.shape, value.shape)), f"output {k}: {info} vs {value.shape}"
        if info.dtype is not None:
            assert info.dtype == data_type_of(value), f"output {k}: {info} vs the kernel's {value.dtype}"


def test_every_computed_rule_has_a_golden_case() -> None:
    covered = {json.loads(p.read_text())["op_type"] for p in _cases()} | set(HAND) | {"StoreAdd", "RecurrentNetwork", "Do"}
    assert COMPUTED <= SHAPES.keys()
    assert COMPUTED <= covered


def test_an_opaque_input_makes_opaque_outputs_not_unknown() -> None:
    op = create_operator("Relu", ["q_out"], ["y"])
    assert infer_op(op, [OPAQUE]) == [OPAQUE]
    assert str(OPAQUE) == "opaque"


def _rnn_cases() -> list[str]:
    from engine.model.modelio import load_net  # noqa: PLC0415

    return [p.relative_to(GOLDEN).with_suffix("").as_posix() for p in sorted(GOLDEN.glob("builders*/*.json"))
            if any(o.type == "RecurrentNetwork" for o in load_net(GOLDEN / json.loads(p.read_text())["net"]).op)]


@pytest.mark.parametrize("case", _rnn_cases())
def test_recurrent_network_outputs_have_the_engines_shapes(case: str) -> None:
    """Every RecurrentNetwork output of Caffe2's own RNN builder nets (LSTM, GRU, MILSTM, attention,
    seq2seq, beam search) inferred from the net's inputs equals what the engine's run wrote; the
    state buffers and their _all/_last aliases are fully known except where input 0 itself is made
    at run time (beam search), and the step workspaces are opaque."""
    from engine.model.modelio import load_net  # noqa: PLC0415

    meta = json.loads((GOLDEN / f"{case}.json").read_text())
    net, init = load_net(GOLDEN / meta["net"]), load_net(GOLDEN / meta["init"])
    ws = Workspace(case)
    ws.run_net_once(init)
    with np.load(GOLDEN / f"{case}.npz") as z:
        for b in net.external_input:
            if f"in/{b}" in z.files and not ws.has_blob(b):
                ws.feed_blob(b, z[f"in/{b}"])
    ws.run_net_once(net)
    fed = {b: TensorInfo(ws.fetch_blob(b).shape, data_type_of(ws.fetch_blob(b))) for b in net.external_input
           if ws.has_blob(b) and isinstance(ws.fetch_blob(b), np.ndarray)}
    last = {}
    for (name, _v), info in infer_net_shapes(net, fed, init)[()].items():
        last[name] = info
    for op in (o for o in net.op if o.type == "RecurrentNetwork"):
        assert last[op.output[-1]].opaque
        if "beam_search" not in case:  # NOTE: there input 0 (T x N) is made at run time
            assert any(last[out].is_known for out in op.output[:-1]), [str(last[o]) for o in op.output]
        for out in op.output[:-1]:
            value, info = ws.fetch_blob(out), last[out]
            assert info.shape is not None and len(info.shape) == value.ndim, f"{out}: {info} vs {value.shape}"
            assert all(i is None or i == d for i, d in zip(info.shape, value.shape)), f"{out}: {info} vs {value.shape}"
            assert info.dtype in (None, data_type_of(value))


@pytest.mark.parametrize("name", ["do_net", "if_net", "while_net", "nested_if_in_while"])
def test_control_flow_outputs_have_the_engines_shapes(name: str) -> None:
    """Do (its net inferred on the bound inner names), If and While (their subnets on the outer
    blobs): each output the rules know has the shape and dtype the engine's run wrote."""
    from engine.model.modelio import load_model  # noqa: PLC0415

    model = load_model(ROOT / "examples" / name / "predict_net.pb")
    ws = Workspace(name)
    if model.init is not None:
        ws.run_net_once(model.init)
    inputs = {k: np.random.default_rng(0).random(tuple(v.shape)).astype(np.float32)
              for k, v in model.value_info.items()}
    for k, v in inputs.items():
        ws.feed_blob(k, v)
    ws.run_net_once(model.predict)
    last = {}
    for (blob, _v), info in infer_net_shapes(model.predict, {**model.value_info}, model.init)[()].items():
        last[blob] = info
    checked = 0
    for op in (o for o in model.predict.op if o.type in ("Do", "If", "While")):
        for out in op.output:
            value, info = ws.fetch_blob(out), last[out]
            if not isinstance(value, np.ndarray):
                assert info.opaque, f"{out}: {info} for a {type(value).__name__}"
                continue
            if info.shape is None:  # NOTE: the examples' backward While (its gradient loop) stays unknown
                continue
            assert info.shape == value.shape, f"{op.type} {out}: {info} vs {value.shape}"
            checked += 1
    assert checked


#: Caffe2 1.10.2's ``workspace.InferShapesAndTypes`` on these ops (no kernels: FBGEMM/DNNLOWP packing),
#: every input (2, 3, 4, 4): what its inference functions say, recorded from the oracle venv.
CAFFE2_INFERENCE = {"FbGemmPack": (1, (2, 3, 4, 4)), "FbGemmPackTranspose": (1, (3, 2, 4, 4)),
                    "FbFCPacked": (3, (2, 2)), "Int8FCPackWeight": (1, (2, 3, 4, 4))}


@pytest.mark.parametrize("op_type", sorted(CAFFE2_INFERENCE))
def test_packing_rules_give_caffe2s_inference(op_type: str) -> None:
    n_in, want = CAFFE2_INFERENCE[op_type]
    op = create_operator(op_type, [f"i{k}" for k in range(n_in)], ["o"])
    assert infer_op(op, [TensorInfo((2, 3, 4, 4), 1)] * n_in)[0].shape == want


def test_every_forward_op_has_a_shape_rule() -> None:
    from engine.catalogue.facts import forward_ops  # noqa: PLC0415

    assert [t for t in forward_ops() if t not in SHAPES] == []
