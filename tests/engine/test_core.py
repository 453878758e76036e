"""engine.caffe2.core behaves as caffe2.python.core: references, scopes, CreateOperator, Net."""
from __future__ import annotations

import itertools
import sys
import types

import numpy as np
import pytest

from engine.caffe2 import core
from engine.caffe2.core import BlobReference, CreateOperator, DeviceScope, NameScope, Net
from engine.errors import GraphError
from engine.model.opdef import args_of
from proto import caffe2_pb2

_ids = itertools.count()


def fresh(base="t"):
    """A Net with a name no other test uses (names are unique per process, as in Caffe2)."""
    return Net(f"test_core_{base}_{next(_ids)}")


# ---- BlobReference and scopes ----
def test_blob_reference_is_str_like():
    b = BlobReference("gpu_0/conv1")
    assert b == "gpu_0/conv1" and b == b"gpu_0/conv1" and b == BlobReference("gpu_0/conv1")
    assert b != "conv1" and b != 3
    assert hash(b) == hash("gpu_0/conv1") and {b: 1}["gpu_0/conv1"] == 1
    assert (str(b), repr(b)) == ("gpu_0/conv1", 'BlobReference("gpu_0/conv1")')
    assert b + "_w" == "gpu_0/conv1_w" and isinstance(b + "_w", BlobReference)
    assert "x/" + BlobReference("y") == "x/y"
    assert b.GetNameScope() == "gpu_0/" and BlobReference("data").GetNameScope() == ""
    with pytest.raises(TypeError):
        b + 1


def test_blob_reference_without_net_cannot_build_ops():
    with pytest.raises(GraphError):
        BlobReference("x").Relu([], "y")
    with pytest.raises(AttributeError):
        BlobReference("x").lower_case_attribute


def test_name_scopes_nest_and_reset():
    with NameScope("a"):
        with NameScope("b/"):
            assert core.ScopedName("x") == "a/b/x"
            assert core.ScopedBlobReference("x") == "a/b/x"
            with NameScope("c", reset=True):
                assert core.ScopedName(b"x") == "c/x"
        assert core.CurrentNameScope() == "a/"
    assert core.ScopedName("x") == "x"


# ---- CreateOperator ----
def test_create_operator_argument_typing():
    sub = caffe2_pb2.NetDef(name="sub")
    op = CreateOperator("Op", [], [], i=3, f=0.5, s="str", b=b"raw", flag=True,
                        ints=[1, 2], floats=[1.0, 2.5], strings=["a", b"b"], net=sub,
                        nets=[sub, sub], npf=np.float32(1.5), npi=np.int64(7),
                        arr=np.array([1.0, 2.0], dtype=np.float32), iarr=np.array([4, 5]),
                        skipped=None)
    a = {x.name: x for x in op.arg}
    assert a["i"].i == 3 and a["f"].f == 0.5 and a["s"].s == b"str" and a["b"].s == b"raw"
    assert a["flag"].HasField("i") and a["flag"].i == 1
    assert list(a["ints"].ints) == [1, 2] and list(a["floats"].floats) == [1.0, 2.5]
    assert list(a["strings"].strings) == [b"a", b"b"]
    assert a["net"].n.name == "sub" and [n.name for n in a["nets"].nets] == ["sub", "sub"]
    assert a["npf"].f == 1.5 and a["npi"].i == 7
    assert list(a["arr"].floats) == [1.0, 2.0] and list(a["iarr"].ints) == [4, 5]
    assert "skipped" not in a


def test_create_operator_scopes_strings_not_references():
    with NameScope("gpu_0"):
        op = CreateOperator("Sum", ["X", BlobReference("Y")], "Z", control_input="C")
    assert (list(op.input), list(op.output), list(op.control_input)) == (
        ["gpu_0/X", "Y"], ["gpu_0/Z"], ["gpu_0/C"])
    with pytest.raises(TypeError):
        CreateOperator("Relu", [3], "Y")


def test_create_operator_device_engine_and_seed():
    gpu = core.DeviceOption(caffe2_pb2.CUDA, 1)
    with DeviceScope(gpu):
        scoped = CreateOperator("Relu", "X", "Y", engine="CUDNN", random_seed=5)
        explicit = CreateOperator("Relu", "X", "Y", device_option=core.DeviceOption(0))
    plain = CreateOperator("Relu", "X", "Y")
    assert (scoped.device_option.device_type, scoped.device_option.device_id) == (1, 1)
    assert scoped.engine == "CUDNN" and scoped.device_option.random_seed == 5
    assert explicit.device_option.device_type == 0
    assert not plain.HasField("device_option") and plain.name == ""


def test_device_option():
    cpu = core.DeviceOption(caffe2_pb2.CPU)
    assert cpu.HasField("device_id") and cpu.device_id == 0  # always set, as Caffe2
    full = core.DeviceOption(caffe2_pb2.CPU, 0, random_seed=3, node_name="n", numa_node_id=1,
                             extra_info=["k:v"])
    assert (full.random_seed, full.node_name, full.numa_node_id, list(full.extra_info)) == (
        3, "n", 1, ["k:v"])
    with pytest.raises(ValueError):
        core.DeviceOption(caffe2_pb2.CUDA, numa_node_id=1)
    assert core.IsGPUDeviceType(caffe2_pb2.CUDA) and core.IsGPUDeviceType(caffe2_pb2.HIP)
    assert not core.IsGPUDeviceType(caffe2_pb2.CPU)
    assert core.DataType.FLOAT == 1 and core.DataType.INT64 == 10


# ---- Net ----
def test_net_names_are_unique_per_process():
    base = f"test_core_unique_{next(_ids)}"
    assert [Net(base).Name(), Net(base).Name(), Net(base).Name()] == [base, f"{base}_1", f"{base}_2"]
    proto = caffe2_pb2.NetDef(name=base)
    assert Net(proto).Name() == f"{base}_3" and proto.name == base  # copied, not aliased
    assert Net(proto, inplace=True).Proto() is proto


def test_op_builders_return_references_and_register_external_inputs():
    net = fresh()
    y = net.FC(["X", "W", "b"], "Y", axis=1)
    z = y.Relu([], "Z")
    parts = net.Split("Z", ["A", "B"], axis=0)
    assert isinstance(y, BlobReference) and y.Net() is net and z == "Z"
    assert parts == ("A", "B") and all(p.Net() is net for p in parts)
    assert net.Print("Z", []) is None
    proto = net.Proto()
    assert [op.type for op in proto.op] == ["FC", "Relu", "Split", "Print"]
    assert list(proto.external_input) == ["X", "W", "b"]
    assert args_of(proto.op[0]) == {"axis": 1}


def test_op_builder_refuses_own_undefined_blob():
    net = fresh()
    with pytest.raises(GraphError):
        net.Relu(BlobReference("ghost", net), "Y")


def test_auto_named_outputs():
    net = fresh("auto")
    n = net.Name()
    assert net.FC(["X", "W", "b"]) == f"{n}/FC"
    assert net.FC(["X", "W", "b"]) == f"{n}/FC_2"
    assert net.FC(["X", "W", "b"]) == f"{n}/FC_3"
    assert net.Split("X", 2) == (f"{n}/Split:0", f"{n}/Split:1")
    assert (net.NextName(), net.NextName()) == (f"{n}_blob_0", f"{n}_blob_1")
    with NameScope("s"):
        assert net.Relu("X") == f"s/{n}/Relu"


def test_next_blob_never_repeats():
    net = fresh()
    net.Relu("X", "h")
    assert [net.NextBlob("h"), net.NextBlob("h"), net.NextBlob("u")] == ["h_auto_0", "h_auto_1", "u"]
    with NameScope("g"):
        assert net.NextScopedBlob("v") == "g/v"


def test_next_name_index_continues_from_proto():
    proto = caffe2_pb2.NetDef(name=f"test_core_idx_{next(_ids)}")
    proto.op.add(type="Relu", input=["x"], output=[proto.name + "_blob_3"])
    assert Net(proto, inplace=True).NextName() == proto.name + "_blob_4"


def test_external_inputs_and_outputs():
    net = fresh()
    assert net.AddExternalInput("a") == "a"
    assert net.AddExternalInputs("b", "c") == ["b", "c"]
    with pytest.raises(GraphError):
        net.AddExternalInput("a")
    with pytest.raises(GraphError):
        net.AddExternalInput("d", "d")
    y = net.Relu("a", "y")
    net.AddExternalOutput(y)
    with pytest.raises(GraphError):
        net.AddExternalOutput(BlobReference("missing"))
    assert net.external_inputs == ["a", "b", "c"] and net.external_outputs == ["y"]
    assert net.is_external_input("b") and not net.is_external_input("y")
    assert net.BlobIsDefined("y") and net.BlobIsDefined("a") and not net.BlobIsDefined("q")
    assert net.UsesBlob("a") and not net.UsesBlob("y")
    assert net.UsedBlobNames() == {"a", "b", "c", "y"}
    assert net.GetBlobRef("y").Net() is net
    with pytest.raises(KeyError):
        net.GetBlobRef("q")
    with NameScope("s"):
        assert net.AddScopedExternalInputs("e") == ["s/e"]


def test_lookup_follows_proto_edits():
    net = fresh()
    net.Relu("X", "Y")
    net.Proto().op.add(type="Relu", input=["Y"], output=["Z"])
    assert net.BlobIsDefined("Z")


def test_add_argument_and_const():
    net = fresh()
    net.AddArgument("num_workers", 4)
    assert net.Proto().arg[0].i == 4
    net.Const(np.array([[1, 2]], dtype=np.int32), "ci")
    net.Const([1.5, 2.5], "cf")
    net.Const(True, "cb")
    types_ = [op.type for op in net.Proto().op]
    assert types_ == ["GivenTensorIntFill", "GivenTensorFill", "ConstantFill"]
    assert args_of(net.Proto().op[0]) == {"shape": [1, 2], "values": [1, 2]}


def test_clone_remaps_blobs_into_subnets():
    then = caffe2_pb2.NetDef(name="then", op=[CreateOperator("Relu", "x", "y")])
    net = fresh()
    net.If(["c", "x"], [], then_net=then)
    net.Relu("x", "z")
    clone = net.Clone("cloned", blob_remap={"x": "x2"}, op_id_mask=[0])
    proto = clone.Proto()
    assert clone.Name().startswith("cloned") and len(proto.op) == 1
    assert list(proto.op[0].input) == ["c", "x2"]
    assert list(proto.op[0].arg[0].n.op[0].input) == ["x2"]
    assert list(net.Proto().op[0].input) == ["c", "x"]  # original untouched
    full = net.Clone("cloned_ext", update_external_list=True).Proto()
    assert list(full.external_input) == ["c", "x", "x"] and list(full.external_output) == ["z"]


def test_clone_partial_keeps_only_the_path():
    net = fresh()
    h = net.FC(["X", "W", "b"], "h")
    net.Relu(h, "unused")
    out = net.Sigmoid(h, "out")
    part, outs = net.ClonePartial("part", ["h"], [out])
    assert [op.type for op in part.Proto().op] == ["Sigmoid"]
    assert list(part.Proto().external_input) == ["h"] and outs == ["part/out"]
    whole, _ = net.ClonePartial("whole", {"X": "X_in"}, [out])
    assert [list(op.input) for op in whole.Proto().op] == [["X_in", "W", "b"], ["whole/h"]]


def test_ssa_helpers_are_reexported():
    net = fresh()
    net.Relu("X", "X")
    ssa, versions = core.get_ssa(net)
    assert ssa == [([("X", 0)], [("X", 1)])] and core.get_undefined_blobs(ssa) == {"X"}
    assert core.get_producer_map(ssa) == {("X", 1): (0, 0)}


@pytest.fixture
def fake_gradient_ir(monkeypatch):
    """Stand-in for engine.autodiff.gradient_ir: records what core hands to GetBackwardPass."""
    calls = []

    class GradientRegistry:
        @staticmethod
        def GetBackwardPass(ops, ys):
            calls.append(([op.type for op in ops], ys))
            return [CreateOperator("ReluGradient", ["Y", "Y_grad"], "X_grad")], {"X": "X_grad"}

    class IR:
        def __init__(self, ops):
            self.ops = list(ops)

        def GetBackwardPass(self, ys):
            return GradientRegistry.GetBackwardPass(self.ops, ys)

        def ForwardWithSaves(self):
            return self.ops, list(range(len(self.ops)))

    mod = types.SimpleNamespace(GradientRegistry=GradientRegistry, IR=IR,
                                GradientSlice=tuple, backward_net=lambda *a: None)
    monkeypatch.setitem(sys.modules, "engine.autodiff.gradient_ir", mod)
    import engine.autodiff
    monkeypatch.setattr(engine.autodiff, "gradient_ir", mod, raising=False)
    return calls


def test_add_gradient_operators_wires_to_the_registry(fake_gradient_ir):
    net = fresh()
    net.ConstantFill([], "X", shape=[2])
    net.Relu("X", "Y")
    grads = net.AddGradientOperators(["Y"], skip=1)
    assert fake_gradient_ir == [(["Relu"], ["Y"])]
    assert grads == {"X": "X_grad"}
    assert [op.type for op in net.Proto().op] == ["ConstantFill", "Relu", "ReluGradient"]
    assert net.BlobIsDefined("X_grad")
    assert core.GradientRegistry.GetBackwardPass is not None and core.GradientSlice is tuple


def test_unknown_module_attribute():
    with pytest.raises(AttributeError):
        core.NoSuchThing
