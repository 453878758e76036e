"""Workspace class and Caffe2's module-level workspace API."""
from __future__ import annotations

import numpy as np
import pytest

from engine.caffe2 import workspace as ws
from engine.errors import BlobNotFoundError, ExecutionError
from engine.model.opdef import create_operator, device_option
from proto import caffe2_pb2


@pytest.fixture(autouse=True)
def fresh():
    ws.SwitchWorkspace("test_ws", True)
    ws.ResetWorkspace()
    yield
    ws.ResetWorkspace()
    ws.SwitchWorkspace("default")


def net(name, *ops, external_input=()):
    n = caffe2_pb2.NetDef(name=name)
    n.op.extend(ops)
    n.external_input.extend(external_input)
    return n


def test_feed_fetch_copy_and_blobs_sorted():
    x = np.arange(4, dtype=np.float32)
    assert ws.FeedBlob("b", x) and ws.FeedBlob("a", "hello")
    x[0] = 99
    assert ws.FetchBlob("b")[0] == 0  # feed copies
    y = ws.FetchBlob("b")
    y[1] = 7
    assert ws.FetchBlob("b")[1] == 1  # fetch copies
    assert ws.FetchBlob("a") == b"hello"
    assert ws.Blobs() == ["a", "b"] and ws.HasBlob("a") and not ws.HasBlob("z")
    assert [v.tolist() for v in ws.FetchBlobs(["b"])] == [[0, 1, 2, 3]]
    ws.FeedBlobs(["c", "d"], [np.ones(1), np.zeros(1)])
    assert ws.FetchBlob("d").dtype == np.float64  # dtype kept, as Caffe2 does
    with pytest.raises(BlobNotFoundError, match="Can't find blob: nope"):
        ws.FetchBlob("nope")


def test_tensor_proto_feed():
    t = caffe2_pb2.TensorProto(dims=[2], data_type=caffe2_pb2.TensorProto.INT64, int64_data=[3, 4])
    ws.FeedBlob("t", t)
    assert ws.FetchBlob("t").tolist() == [3, 4] and ws.FetchBlob("t").dtype == np.int64


def test_switch_reset_and_current():
    ws.FeedBlob("x", np.ones(1))
    assert ws.CurrentWorkspace() == "test_ws"
    with pytest.raises(ExecutionError):
        ws.SwitchWorkspace("never_made")
    ws.SwitchWorkspace("other_ws", True)
    assert not ws.HasBlob("x") and "other_ws" in ws.Workspaces()
    ws.SwitchWorkspace("test_ws")
    assert ws.HasBlob("x")
    ws.CreateNet(net("n", create_operator("Relu", "x", "y")))
    assert ws.ResetWorkspace() and ws.Blobs() == []
    with pytest.raises(ExecutionError, match="Can't find net n"):
        ws.RunNet("n")


def test_init_net_then_predict_net():
    init = net("init", create_operator("GivenTensorFill", [], "W", shape=[2, 3], values=[1.0] * 6),
               create_operator("ConstantFill", [], "b", shape=[2], value=0.5))
    pred = net("pred", create_operator("FC", ["X", "W", "b"], "Y"), create_operator("Relu", "Y", "Y"),
               external_input=["X", "W", "b"])
    assert ws.RunNetOnce(init)
    ws.FeedBlob("X", np.array([[1, -2, 0.5]], np.float32))
    assert ws.CreateNet(pred)
    assert ws.RunNet("pred", num_iter=2)
    np.testing.assert_allclose(ws.FetchBlob("Y"), [[0.0, 0.0]])
    ws.FeedBlob("X", np.array([[1, 2, 0.5]], np.float32))
    ws.RunNet(pred)
    np.testing.assert_allclose(ws.FetchBlob("Y"), [[4.0, 4.0]])


def test_create_net_rules():
    with pytest.raises(ExecutionError, match="should have a name"):  # no name field at all (Caffe2's has_name)
        ws.CreateNet(caffe2_pb2.NetDef(op=[create_operator("Relu", "x", "y")]))
    ws.CreateNet(net("n", create_operator("Relu", "x", "y")), input_blobs=["x"])
    assert ws.HasBlob("x") and ws.HasBlob("y")  # outputs are created (empty) with the net
    assert b"uninitialized" in ws.FetchBlob("y")
    with pytest.raises(ExecutionError, match="respectfully refuse"):
        ws.CreateNet(net("n", create_operator("Relu", "x", "y")))
    assert ws.CreateNet(net("n", create_operator("Relu", "x", "z")), overwrite=True)
    op = create_operator("Relu", "x", "y", device_option=caffe2_pb2.DeviceOption(node_name="a"))
    with pytest.raises(ExecutionError, match="node_name must be empty"):
        ws.CreateNet(net("m", op))


def test_run_operator_once_and_allow_fail():
    ws.FeedBlob("x", np.array([-1.0, 2.0], np.float32))
    assert ws.RunOperatorOnce(create_operator("Relu", "x", "y"))
    assert ws.FetchBlob("y").tolist() == [0.0, 2.0]
    with pytest.raises(RuntimeError, match="non-existing input blob: q"):  # Caffe2 checks inputs at CreateNet
        ws.CreateNet(net("bad", create_operator("Relu", "x", "y"), create_operator("Add", ["x", "q"], "z")))
    ws.FeedBlob("q", np.ones(3, np.float32))  # exists now, but its shape fails at run time
    ws.CreateNet(net("bad", create_operator("Relu", "x", "y"), create_operator("Add", ["x", "q"], "z")))
    assert ws.RunNet("bad", allow_fail=True) is False
    bad = [create_operator("Relu", "missing", "y")]
    with pytest.raises(RuntimeError):  # Caffe2 raises here; so does netviz (an ExecutionError)
        ws.RunOperatorsOnce(bad)
    assert ws.try_run_operators(bad) is False


def test_blobs_remember_device_and_device_scope_feed():
    from engine.runtime import device as dev
    from engine.model.scope import DeviceScope

    with dev.use_fake_cuda(), DeviceScope(device_option(1)):
        ws.FeedBlob("g", np.ones(2, np.float32))
        assert ws.current().device_of("g") == 1
        assert type(ws.FetchBlob("g")) is np.ndarray
    ws.FeedBlob("c", np.ones(2, np.float32))
    assert ws.current().device_of("c") == 0


def test_child_workspace_sees_and_writes_parent_blobs():
    parent = ws.Workspace("p")
    parent.feed_blob("a", np.ones(1))
    child = parent.child()
    assert child.has_blob("a")
    child.feed_blob("a", np.zeros(1))
    child.feed_blob("local", np.ones(1))
    assert parent.fetch_blob("a").tolist() == [0.0]
    assert not parent.has_blob("local") and child.blobs() == ["local", "a"]
    child.run_operator_once(create_operator("Relu", "a", "r"))
    assert child.has_blob("r") and not parent.has_blob("r")
