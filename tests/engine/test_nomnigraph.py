"""engine.analysis.nomnigraph: Caffe2's NNModule dataflow graph, on small nets and on the model zoo.

The differential test runs tests/oracle/nomnigraph_scenarios.py through netviz and compares with
what real Caffe2 gave for the same calls (tests/golden/nomnigraph/scenarios.json, written by
tests/oracle/gen_nomnigraph.py): NetDef round trips byte for byte, match counts and members,
a Conv+BN fusion by replaceSubgraph, op placement after edits, annotations, device maps.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from engine.caffe2 import capi, core, workspace
from engine.model.modelio import load_net
from engine.model.ssa import get_consumer_map, get_ssa
from engine.analysis.nomnigraph import (CONVERTER_TYPES, NeuralNetData, NeuralNetOperator, NNMatchGraph, NNModule,
                               NomnigraphError, from_netdef, matchSubgraph, to_netdef)
from proto import caffe2_pb2

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "nomnigraph" / "scenarios.json"


def _scenarios():
    spec = importlib.util.spec_from_file_location("nomnigraph_scenarios",
                                                  ROOT / "tests" / "oracle" / "nomnigraph_scenarios.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _fc_relu_net() -> core.Net:
    net = core.Net("fc_relu")
    net.FC(["X", "W", "b"], ["Y"], axis=1)
    net.Relu(["Y"], ["Y"])  # in place: a second node for Y
    net.Mul(["Y", "X"], ["Z"], broadcast=1, device_option=caffe2_pb2.DeviceOption(device_type=0, node_name="n0"))
    net.AddExternalOutput(net.GetBlobRef("Z"))
    return net


def _chain_pattern(*names: str) -> NNMatchGraph:
    """Op names, "T" for any tensor; every node strict but the last."""
    mg, prev = NNMatchGraph(), None
    for i, n in enumerate(names):
        value = NeuralNetData("t") if n == "T" else NeuralNetOperator(n)
        cur = mg.createNode(value, strict=i < len(names) - 1)
        if prev is not None:
            mg.createEdge(prev, cur)
        prev = cur
    return mg


def _matches(m: NNModule, mg: NNMatchGraph) -> list:
    return [sg for sg in (matchSubgraph(n, mg) for n in m.dataFlow().nodes) if len(sg)]


# ---- the NetDef <-> NNModule conversion -----------------------------------------------------

def test_graph_of_a_net_has_one_tensor_node_per_write() -> None:
    m, ops = from_netdef(_fc_relu_net().Proto())
    df = m.dataFlow()
    assert [o.name for o in ops] == ["FC", "Relu", "Mul"]
    assert [t.name for t in df.tensors] == ["X", "W", "b", "Y", "Y", "Z"]
    fc, relu, mul = ops
    assert [t.name for t in fc.inputs] == ["X", "W", "b"] and not fc.inputs[0].hasProducer()
    assert relu.inputs[0] is fc.outputs[0] and relu.outputs[0] is not fc.outputs[0]
    assert mul.inputs[0].producer is relu and [c.name for c in fc.inputs[0].consumers] == ["FC", "Mul"]
    assert fc.getOperatorSuccessors() == [relu] and mul.getOperatorPredecessors() == [relu]
    assert [n.name for n in m.inputs] == ["X", "W", "b"] and [n.name for n in m.outputs] == ["Z"]


def test_round_trip_keeps_ops_args_devices_and_externals() -> None:
    net = _fc_relu_net().Proto()
    net.type, net.num_workers = "dag", 2
    back = to_netdef(from_netdef(net)[0], net)
    assert (back.name, back.type, back.num_workers) == (net.name, "dag", 2)
    assert list(back.external_input) == list(net.external_input)
    assert list(back.external_output) == ["Z"]
    # Ops Caffe2 has a converter for come back as they were; the others get an explicit
    # device_type (Caffe2 writes the annotation's device type into them).
    assert back.op[0] == net.op[0] and back.op[1] == net.op[1]
    assert {"FC", "Relu"} <= CONVERTER_TYPES and "Mul" not in CONVERTER_TYPES
    assert back.op[2].device_option.node_name == "n0" and back.op[2].HasField("device_option")
    assert back.op[2].arg == net.op[2].arg


def test_zoo_nets_round_trip_unchanged_but_for_caffe2s_two_edits(zoo: Path) -> None:
    """NetDef -> NNModule -> NetDef gives every zoo net back, ops in order, with Caffe2's two edits:
    ops without a converter carry an explicit device_type, and external inputs no op reads go."""
    for path in sorted(zoo.glob("*/predict_net.pbtxt")):
        net = load_net(path)
        back = to_netdef(from_netdef(net)[0], net)
        assert len(back.op) == len(net.op), path
        for i, (a, b) in enumerate(zip(net.op, back.op)):
            if b.type not in CONVERTER_TYPES or b.type == "SpatialBN":
                a.device_option.device_type = a.device_option.device_type  # now explicitly set
            assert a == b, f"{path.parent.name} op #{i} {a.type}"
        read = {x for op in net.op for x in op.input}
        assert list(back.external_input) == [x for x in net.external_input if x in read], path
        assert list(back.external_output) == list(net.external_output), path


def test_unread_external_inputs_are_dropped_and_strict_refuses_them() -> None:
    net = _fc_relu_net().Proto()
    net.external_input.append("unused")
    assert "unused" not in to_netdef(from_netdef(net)[0], net).external_input
    with pytest.raises(NomnigraphError, match="unused"):
        from_netdef(net, strict=True)


def test_order_argument_is_normalised_and_spatial_bn_is_batch_normalization() -> None:
    net = core.Net("n")
    net.Conv(["x", "w"], "y", kernel=3, order="nhwc")
    net.SpatialBN(["y", "s", "b", "m", "v"], "z", is_test=1)
    m, ops = from_netdef(net.Proto())
    assert [o.name for o in ops] == ["Conv", "BatchNormalization"]
    back = to_netdef(m, net.Proto())
    assert [a.s for a in back.op[0].arg if a.name == "order"] == [b"NHWC"]
    assert back.op[1].type == "SpatialBN"


def test_converter_argument_types_are_checked() -> None:
    op = core.CreateOperator("Conv", ["x", "w"], ["y"], kernel=3.5)
    with pytest.raises(NomnigraphError, match="kernel"):
        NNModule().dataFlow().createNode(op)


# ---- editing and ordering -------------------------------------------------------------------

def test_rewired_ops_run_in_dependency_order() -> None:
    """c = Add(a, d); e = Mul(c, b) after rewiring Mul(a, b) -> c; Add(c, d) -> e."""
    net = core.Net("rewire")
    net.Mul(["a", "b"], ["c"])
    net.Add(["c", "d"], ["e"])
    m, (mul, add) = from_netdef(net.Proto())
    a, b, c, d, e = mul.inputs[0], mul.inputs[1], mul.outputs[0], add.inputs[1], add.outputs[0]
    df = m.dataFlow()
    for x, y in [(a, mul), (b, mul), (mul, c), (c, add), (d, add), (add, e)]:
        df.deleteEdge(x, y)
    for x, y in [(a, add), (d, add), (add, c), (c, mul), (b, mul), (mul, e)]:
        df.createEdge(x, y)
    assert [o.name for o in m.getExecutionOrder()] == ["Add", "Mul"]
    ws = workspace.Workspace("nomnigraph")
    for name, v in (("a", 1.0), ("b", 2.0), ("d", 3.0)):
        ws.feed_blob(name, np.full(3, v, np.float32))
    ws.run_net_once(to_netdef(m))
    np.testing.assert_array_equal(ws.fetch_blob("e"), np.full(3, 8.0, np.float32))


def test_new_ops_go_before_their_consumers_and_after_the_rest() -> None:
    net = core.Net("n")
    net.Relu(["x"], ["y"])
    net.Sigmoid(["y"], ["z"])
    m, (relu, sig) = from_netdef(net.Proto())
    df = m.dataFlow()
    # Sigmoid now reads y2, which a new Tanh writes from y: Tanh must run before Sigmoid.
    y2 = m.createUniqueDataNode("y")
    capi.replaceAllUsesWith(relu.outputs[0], y2)
    tanh = df.createNode(NeuralNetOperator("Tanh"))
    df.createEdge(relu.outputs[0], tanh)
    df.createEdge(tanh, y2)
    tail = df.createNode(NeuralNetOperator("Exp"))
    df.createEdge(sig.outputs[0], tail)
    assert y2.name == "y_0"
    assert [o.name for o in m.getExecutionOrder()] == ["Relu", "Tanh", "Sigmoid", "Exp"]
    assert [list(o.input) for o in to_netdef(m).op] == [["x"], ["y"], ["y_0"], ["z"]]


def test_deleted_ops_leave_the_order_and_replacements_take_their_edges() -> None:
    m, (fc, relu, mul) = from_netdef(_fc_relu_net().Proto())
    df = m.dataFlow()
    sub = df.createNode(NeuralNetOperator("Sub"))
    df.replaceNode(relu, sub)
    df.deleteNode(relu)
    assert not df.hasNode(relu) and [o.name for o in m.getExecutionOrder()] == ["FC", "Sub", "Mul"]
    assert [t.name for t in sub.inputs] == ["Y"] and [t.name for t in sub.outputs] == ["Y"]


def test_create_unique_data_node_skips_every_taken_name() -> None:
    m, _ = from_netdef(_fc_relu_net().Proto())
    assert [m.createUniqueDataNode("Y").name for _ in range(3)] == ["Y_0", "Y_1", "Y_2"]
    assert m.createUniqueDataNode().name == "_unique"
    assert m.createUniqueDataNode("FC").name == "FC_0"  # operator names count too


def test_wrong_kind_of_node_raises_one_line_runtime_errors() -> None:
    m, (fc, _, _) = from_netdef(_fc_relu_net().Proto())
    x = fc.inputs[0]
    for call in (lambda: x.inputs, lambda: x.annotation, lambda: fc.producer, lambda: x.producer,
                 lambda: m.dataFlow().createEdge(x, fc.inputs[1]), lambda: m.dataFlow().createNode(7)):
        with pytest.raises(NomnigraphError) as info:
            call()
        assert isinstance(info.value, RuntimeError) and "\n" not in str(info.value)


def test_replace_subgraph_needs_every_boundary_tensor() -> None:
    m, (fc, relu, mul) = from_netdef(_fc_relu_net().Proto())
    x, y = fc.inputs[0], fc.outputs[0]
    sg = capi.NNSubgraph()
    for n in (x, fc, y):
        sg.addNode(n)
    new = m.dataFlow().createNode(NeuralNetOperator("Linear"))
    with pytest.raises(NomnigraphError, match="boundary tensor 'Y'"):
        m.replaceSubgraph(sg, new, [x], [])
    m.replaceSubgraph(sg, new, [x], [y])
    assert not m.dataFlow().hasNode(fc) and m.dataFlow().hasNode(x)
    assert new.inputs == [x] and new.outputs == [y] and relu.inputs == [y]
    assert [o.name for o in m.getExecutionOrder()] == ["Linear", "Relu", "Mul"]


# ---- annotations ----------------------------------------------------------------------------

def test_annotation_is_the_nodes_own_and_set_annotation_copies() -> None:
    m = NNModule()
    node = m.dataFlow().createNode(core.CreateOperator("Conv", [], [], engine="E1", kernel=1))
    assert node.annotation.operator_def.engine == "E1" and not node.annotation.hasDeviceOption()
    node.annotation.device_option = caffe2_pb2.DeviceOption(node_name="host1")
    copy = node.getAnnotation().copy()
    copy.setDeviceType(5)
    assert node.annotation.getDeviceType() == 0 and node.annotation.device_option.node_name == "host1"
    node.setAnnotation(copy)
    copy.setDeviceType(6)
    assert node.annotation.getDeviceType() == 5
    with pytest.raises(NomnigraphError):
        capi.Annotation().operator_def


# ---- matching -------------------------------------------------------------------------------

def test_strict_nodes_must_account_for_every_out_edge() -> None:
    net = core.Net("n")
    net.Relu(["x"], ["y"])
    net.Sigmoid(["y"], ["z"])
    net.Tanh(["y"], ["w"])  # y has two consumers
    m, _ = from_netdef(net.Proto())
    assert len(_matches(m, _chain_pattern("Relu", "T", "Sigmoid"))) == 0
    loose = NNMatchGraph()
    loose.createNode(NeuralNetOperator("Relu"))
    assert [len(sg) for sg in _matches(m, loose)] == [1]
    strict = NNMatchGraph()
    strict.createNode(NeuralNetOperator("Relu"), strict=True)
    assert _matches(m, strict) == []


def test_resnet50_conv_bn_relu_chains(zoo: Path) -> None:
    """Every Conv -> SpatialBN -> Relu chain of ResNet-50, as counted straight from the NetDef."""
    net = load_net(zoo / "resnet50" / "predict_net.pbtxt")
    ssa, _ = get_ssa(net)
    readers = get_consumer_map(ssa)

    def sole_reader(i: int, op_type: str) -> int | None:
        """The index of the one op reading op i's one output, when it is an `op_type`."""
        outs = ssa[i][1]
        rs = readers.get(outs[0], []) if len(outs) == 1 else []
        return rs[0][0] if [net.op[j].type for j, _ in rs] == [op_type] else None

    bns = [sole_reader(i, "SpatialBN") for i, op in enumerate(net.op) if op.type == "Conv"]
    expected = sum(1 for bn in bns if bn is not None and sole_reader(bn, "Relu") is not None)
    m, _ = from_netdef(net)
    found = _matches(m, _chain_pattern("Conv", "T", "BatchNormalization", "T", "Relu"))
    assert len(found) == expected == 33
    assert all(sorted(n.name for n in sg.nodes if n.isOperator()) == ["BatchNormalization", "Conv", "Relu"]
               for sg in found)


# ---- against real Caffe2 --------------------------------------------------------------------

def test_same_results_as_caffe2(zoo: Path) -> None:
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    got = json.loads(json.dumps(_scenarios().run(capi, caffe2_pb2, str(zoo))))
    assert got["small"] == golden["small"]
    assert sorted(got["zoo"]) == sorted(golden["zoo"])
    for name, want in golden["zoo"].items():
        assert got["zoo"][name] == want, name
