"""The rest of caffe2.python's core/workspace API in netviz (issue #16): what Caffe2 scripts call.

Caffe2's own unit tests exercise all of it against real Caffe2 (``make conformance``); these pin
the behaviours a ported script relies on most.
"""
from __future__ import annotations

import numpy as np
import pytest

from engine.caffe2 import core, workspace
from engine.model import scope
from engine.errors import BlobNotFoundError, ExecutionError, GradientError, GraphError
from proto import caffe2_pb2


def test_errors_are_also_caffe2s_classes() -> None:
    with pytest.raises(RuntimeError):  # a failing op
        workspace.RunOperatorOnce(core.CreateOperator("Relu", ["never_fed"], ["y"]))
    with pytest.raises(RuntimeError):  # Caffe2: "Can't find blob"
        workspace.FetchBlob("never_fed")
    net = core.Net("dup_inputs")
    net.AddExternalInput("a")
    with pytest.raises(AssertionError):  # Caffe2 asserts here
        net.AddExternalInput("a")
    assert issubclass(GradientError, RuntimeError) and issubclass(GradientError, ValueError)
    assert issubclass(BlobNotFoundError, KeyError) and issubclass(GraphError, AssertionError)
    assert issubclass(ExecutionError, RuntimeError)


def test_gradient_maps_hold_blob_references() -> None:
    net = core.Net("refs")
    y = net.Relu("x", "y")
    grads = net.AddGradientOperators([y])
    assert all(type(k) is core.BlobReference and type(v) is core.BlobReference for k, v in grads.items())
    assert grads["x"] == "x_grad"
    _, g = core.GradientRegistry.GetBackwardPass(net.Proto().op[:1], ["y"])
    assert type(g["x"]) is core.BlobReference


def test_schema_failure_names_schema() -> None:
    net = core.Net("bad_schema")
    m = net.Mul("a", "b")  # one input: Mul needs two
    with pytest.raises(Exception, match="schema"):
        net.AddGradientOperators([net.Sub([m, "one"])])


def test_registered_operators_and_schemas() -> None:
    assert core.IsOperator("Relu") and not core.IsOperator("NoSuchOp") and "Relu" in workspace.RegisteredOperators()
    s = workspace.C.OpSchema.get("Conv")
    assert (s.min_input, s.max_input, [d[0] for d in s.input_desc]) == (2, 3, ["X", "filter", "bias"])
    assert workspace.C.OpSchema.get("NoSuchOp") is None


def test_c_workspace_is_private_and_a_child_sees_its_parent() -> None:
    ws = workspace.C.Workspace()
    ws.create_blob("w").feed(np.ones(2, np.float32))
    assert not workspace.HasBlob("w") and ws.blobs["w"].fetch().tolist() == [1.0, 1.0]
    child = workspace.C.Workspace(ws)
    child.create_blob("local").feed(np.zeros(1, np.float32))
    assert "w" in child.blobs and "local" not in ws.blobs
    with workspace.WorkspaceGuard(child):
        assert workspace.HasBlob("w")


def test_blob_dict_serialize_and_reset() -> None:
    workspace.blobs["bd"] = np.arange(4, dtype=np.int64)
    data = workspace.SerializeBlob("bd")
    workspace.ResetBlob("bd")
    assert b"uninitialized" in workspace.FetchBlob("bd")
    workspace.DeserializeBlob("bd", data)
    assert workspace.blobs["bd"].tolist() == [0, 1, 2, 3] and workspace.GetBlobSizeBytes("bd") == 32


def test_operator_cost_of_conv() -> None:
    op = core.CreateOperator("Conv", ["cx", "cw"], ["cy"], kernel=3, pad=1)
    workspace.FeedBlob("cx", np.zeros((2, 4, 5, 5), np.float32))
    workspace.FeedBlob("cw", np.zeros((6, 4, 3, 3), np.float32))
    cost = workspace.GetOperatorCost(op, ["cx", "cw"])
    # 2 images x 25 outputs x 9 taps x 4 in x 6 out x 2 (mul+add); inputs and outputs in float32 bytes
    assert cost == (2 * 25 * 9 * 4 * 6 * 2, 2 * 6 * 25 * 4, (2 * 4 * 25 + 6 * 4 * 9) * 4)


def test_cross_device_copies() -> None:
    gpu = caffe2_pb2.DeviceOption(device_type=caffe2_pb2.CUDA, device_id=0)
    net = core.Net("xdev")
    net.Relu("in", "cpu_out")
    with core.DeviceScope(gpu):
        net.Relu("cpu_out", "gpu_out")
    new, b2d = core.InjectCrossDeviceCopies(net)
    assert [op.type for op in new.Proto().op] == ["Relu", "CopyCPUToGPU", "Relu"]
    assert list(new.Proto().op[2].input) == ["cpu_out_gpu_0"] and b2d["gpu_out"].device_type == caffe2_pb2.CUDA
    assert core.device_option_equal(caffe2_pb2.DeviceOption(), caffe2_pb2.DeviceOption(device_id=3))


def test_net_editing_helpers() -> None:
    net = core.Net("edit")
    net.Relu("a", "b")
    net.Sigmoid("b", "c")
    net.set_rand_seed(seed=7)
    assert [op.device_option.random_seed for op in net.Proto().op] == [7, 8]
    tanh = core.CreateOperator("Tanh", ["b"], ["b2"])
    assert net.reroute_tensor("b", tanh, can_modify=[net.Proto().op[1]]) == 1
    assert [op.type for op in net.Proto().op] == ["Relu", "Tanh", "Sigmoid"]
    assert list(net.Proto().op[2].input) == ["b2"]
    net.RunAllOnGPU(gpu_id=1)
    assert net.Proto().device_option.device_id == 1
    with scope.EmptyNameScope(), core.NameScope("s"):
        assert core.ScopedName("x") == "s/x"


def test_fetching_a_cpp_object_blob_gives_caffe2s_description() -> None:
    """Caffe2 1.10.2 (checked on the oracle) fetches a mutex or a counter as the bytes
    ``b'<name>, a C++ native class of type <type>.'``, not as an object a script could use."""
    workspace.ResetWorkspace()
    workspace.RunOperatorOnce(core.CreateOperator("CreateMutex", [], ["m"]))
    assert workspace.FetchBlob("m") == b"m, a C++ native class of type std::unique_ptr<std::mutex>."
    workspace.RunOperatorOnce(core.CreateOperator("CreateCounter", [], ["c"], init_count=3))
    text = workspace.FetchBlob("c")
    assert isinstance(text, bytes) and text.startswith(b"c, a C++ native class of type std::unique_ptr<caffe2::Counter<")
    workspace.RunOperatorOnce(core.CreateOperator("RetrieveCount", ["c"], ["n"]))
    assert int(workspace.FetchBlob("n")) == 3  # the object itself still works for ops
