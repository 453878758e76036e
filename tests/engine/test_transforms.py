"""Graph transforms: exact rewrites on tiny nets, and rewritten nets still run with identical outputs."""
from __future__ import annotations

import numpy as np
import pytest

from engine.errors import GraphError, IllegalGraphTransformError
from engine.runtime.executor import run_net
from engine.model.modelio import load_model
from engine.model.opdef import create_operator as op
from engine.runtime.shapes import TensorInfo
from engine.analysis.transforms import (Export, fuse_copy_gpu_cpu, get_params_from_init_net,
                               get_sub_graph_external_input_output, identify_reshape_sub_graph,
                               infer_device_type, remove_dead_end_ops, remove_reshape_for_fc,
                               rename_op_input, rename_op_output, ssa_rewrite)
from engine.caffe2.workspace import Workspace
from proto import caffe2_pb2

from tests.conftest import ROOT
from tests.engine.test_shapes import RUNNABLE, synth_params

RNG = np.random.default_rng(1)


def net_of(*ops, inputs=(), outputs=(), name="t"):
    return caffe2_pb2.NetDef(name=name, op=list(ops), external_input=list(inputs), external_output=list(outputs))


def run(net, feeds, init=None):
    ws = Workspace("transforms")
    if init is not None:
        run_net(init, ws, device="cpu")
    for k, v in feeds.items():
        ws.feed_blob(k, v)
    run_net(net, ws, device="cpu")
    return {n: ws.fetch_blob(n) for n in net.external_output}


def same(a, b):
    assert list(a) == list(b)
    for x, y in zip(a.values(), b.values()):
        np.testing.assert_array_equal(x, y)


def copy_of(net):
    return caffe2_pb2.NetDef.FromString(net.SerializeToString())


def ios(net):
    return [(list(o.input), list(o.output)) for o in net.op]


FEEDS = {"X": RNG.standard_normal((2, 3)).astype(np.float32)}


def chain():
    return net_of(op("Relu", "X", "Y"), op("Sigmoid", "Y", "Z"), op("Sum", ["Y", "Z"], "Y"), op("Tanh", "Y", "Out"),
                  inputs=["X"], outputs=["Out"])


def test_rename_op_output_renames_the_version_and_its_reads():
    net = chain()
    rename_op_output(net, 0, 0, "H")
    assert ios(net)[:3] == [(["X"], ["H"]), (["H"], ["Z"]), (["H", "Z"], ["Y"])]
    same(run(net, FEEDS), run(chain(), FEEDS))
    rename_op_output(net, 3, 0, "Final")
    assert list(net.external_output) == ["Final"]


def test_rename_op_input_single_reader_and_external_input():
    net = net_of(op("Relu", "X", "Y"), op("Tanh", "Y", "Z"), inputs=["X"], outputs=["Z"])
    rename_op_input(net, caffe2_pb2.NetDef(), 1, 0, "Y2")
    assert ios(net) == [(["X"], ["Y2"]), (["Y2"], ["Z"])]  # NOTE: the version is renamed, write and read
    net = net_of(op("Relu", "X", "Y"), inputs=["X"], outputs=["Y"])
    rename_op_input(net, caffe2_pb2.NetDef(), 0, 0, "data")
    assert list(net.external_input) == ["data"] and net.op[0].input[0] == "data"


def test_rename_op_input_shared_version_is_illegal():
    with pytest.raises(IllegalGraphTransformError, match=r"also read by op\(s\) \[2\].*from_producer"):
        rename_op_input(chain(), caffe2_pb2.NetDef(), 1, 0, "H")


def test_rename_op_input_from_producer():
    net = chain()
    rename_op_input(net, caffe2_pb2.NetDef(), 1, 0, "H", from_producer=True)
    assert ios(net)[:3] == [(["X"], ["H"]), (["H"], ["Z"]), (["H", "Z"], ["Y"])]
    with pytest.raises(NotImplementedError, match="init net"):
        rename_op_input(chain(), caffe2_pb2.NetDef(), 0, 0, "H", from_producer=True)


def test_rename_op_input_updates_the_init_net():
    init = net_of(op("GivenTensorFill", [], "W", shape=[4, 3], values=RNG.standard_normal(12).tolist()),
                  op("ConstantFill", [], "b", shape=[4], value=0.5), outputs=["W"])
    net = net_of(op("FC", ["X", "W", "b"], "Y"), inputs=["X", "W", "b"], outputs=["Y"])
    before = run(net, FEEDS, init)
    rename_op_input(net, init, 0, 1, "fc_w")
    assert list(net.external_input) == ["X", "fc_w", "b"] and init.op[0].output[0] == "fc_w"
    assert list(init.external_output) == ["fc_w"]
    same(run(net, FEEDS, init), before)


def test_remove_dead_end_ops():
    net = net_of(op("Relu", "X", "A"), op("Sigmoid", "A", "dead1"), op("Tanh", "dead1", "dead2"),
                 op("Print", "A", []), op("Tanh", "A", "Out"), op("Relu", "X", "Out2"), inputs=["X"], outputs=["Out"])
    before = run(net, FEEDS)
    remove_dead_end_ops(net)
    assert [o.type for o in net.op] == ["Relu", "Print", "Tanh"]
    same(run(net, FEEDS), before)


def test_fuse_copy_pairs_and_rewire_every_reader():
    gpu = caffe2_pb2.DeviceOption(device_type=caffe2_pb2.CUDA)
    net = net_of(op("Relu", "X", "A"), op("CopyCPUToGPU", "A", "A_gpu"), op("CopyGPUToCPU", "A_gpu", "A2"),
                 op("Tanh", "A2", "B", device_option=gpu), op("Sigmoid", "A2", "C"), op("Sum", ["B", "C"], "Out"),
                 op("CopyCPUToGPU", "Out", "Out_gpu"), inputs=["X"], outputs=["Out_gpu"])
    before = run(net, FEEDS)
    fuse_copy_gpu_cpu(net)
    assert [o.type for o in net.op] == ["Relu", "Tanh", "Sigmoid", "Sum", "CopyCPUToGPU"]
    assert net.op[1].input[0] == net.op[2].input[0] == "A"
    same(run(net, FEEDS), before)


def test_fuse_copy_keeps_external_outputs_and_overwritten_sources():
    net = net_of(op("CopyCPUToGPU", "X", "Xg"), op("CopyGPUToCPU", "Xg", "Xc"), inputs=["X"], outputs=["Xg"])
    fuse_copy_gpu_cpu(net)
    assert len(net.op) == 2
    net = net_of(op("CopyCPUToGPU", "X", "Xg"), op("Relu", "X", "X"), op("CopyGPUToCPU", "Xg", "Xc"),
                 op("Tanh", "Xc", "Out"), inputs=["X"], outputs=["Out"])
    fuse_copy_gpu_cpu(net)
    assert len(net.op) == 4


def reshape_net():
    return net_of(op("Relu", "X4", "R"), op("Shape", "R", "s"), op("Slice", "s", "n", starts=[0], ends=[1]),
                  op("Concat", ["n", "minus1"], ["newshape", "split"], axis=0),
                  op("Reshape", ["R", "newshape"], ["Rf", "old"]), op("FC", ["Rf", "W", "b"], "Y"),
                  inputs=["X4", "minus1", "W", "b"], outputs=["Y"])


def reshape_params():
    return {"minus1": np.array([-1], dtype=np.int64), "W": RNG.standard_normal((5, 12)).astype(np.float32),
            "b": RNG.standard_normal(5).astype(np.float32)}


def test_identify_reshape_sub_graph_and_its_boundary():
    net = reshape_net()
    assert identify_reshape_sub_graph(net) == [[1, 2, 3, 4]]
    ext_in, ext_out = get_sub_graph_external_input_output(net, [1, 2, 3, 4])
    assert ext_in == [("R", 1), ("minus1", 0)] and ext_out == [("Rf", 1)]


def test_remove_reshape_for_fc_runs_identically():
    net, params = reshape_net(), reshape_params()
    feeds = {"X4": RNG.standard_normal((2, 3, 4)).astype(np.float32)}
    before = run(net, {**feeds, **params})
    new, new_params = remove_reshape_for_fc(net, params)
    assert [o.type for o in new.op] == ["Relu", "FC"] and new.op[1].input[0] == "R"
    assert set(new_params) == {"W", "b"} and "minus1" not in new.external_input
    assert len(net.op) == 6 and "minus1" in params  # inputs untouched
    same(run(new, {**feeds, **new_params}), before)


def test_remove_reshape_for_fc_keeps_reshapes_read_elsewhere():
    net = reshape_net()
    net.op.append(op("Relu", "Rf", "Other"))
    new, _ = remove_reshape_for_fc(net, reshape_params())
    assert len(new.op) == len(net.op)


def test_infer_device_type_over_copies():
    net = net_of(op("Relu", "X", "A"), op("CopyCPUToGPU", "A", "Ag"), op("Tanh", "Ag", "B"),
                 op("CopyGPUToCPU", "B", "Bc"), op("Sum", ["Bc", "A"], "Out"), inputs=["X"], outputs=["Out"])
    got = infer_device_type(net, {("Out", 1): "cpu"})
    assert got[("X", 0)] == "cpu" and got[("Ag", 1)] == got[("B", 1)] == "gpu" and got[("Bc", 1)] == "cpu"
    assert infer_device_type(net, {("B", 1): "cuda"}, "pytorch")[("A", 1)] == "cpu"
    with pytest.raises(GraphError, match="conflicting status for 'Ag' version 1"):
        infer_device_type(net, {("X", 0): "cpu", ("Ag", 1): "cpu"})
    with pytest.raises(GraphError, match="cannot infer"):
        infer_device_type(net_of(op("Relu", "X", "Y")), {})


def test_get_params_from_init_net_matches_fill_shapes():
    model = load_model(ROOT / "tests/golden/models/resnet50/predict_net.pb")
    params, devices = get_params_from_init_net(model.init)
    assert set(params) == {o for op_ in model.init.op for o in op_.output} and set(devices) == set(params)
    assert params["conv1_w"].shape == (64, 3, 7, 7) and devices["conv1_w"].device_type == 0


def test_export_round_trips_through_a_fresh_workspace():
    init = net_of(op("GivenTensorFill", [], "W", shape=[4, 3], values=RNG.standard_normal(12).tolist()),
                  op("GivenTensorIntFill", [], "k", shape=[2], values=[1, 2]),
                  op("ConstantFill", [], "b", shape=[4], value=0.25))
    net = net_of(op("FC", ["X", "W", "b"], "Y"), op("Relu", "Y", "R"), op("Shape", "k", "ks"), inputs=["X"])
    ws = Workspace("export")
    run_net(init, ws)
    ws.feed_blob("X", FEEDS["X"])
    run_net(net, ws)
    exp_init, exp_net = Export(ws, net, ["W", "b", "k"])
    assert [o.type for o in exp_init.op] == ["GivenTensorFill", "GivenTensorFill", "GivenTensorIntFill",
                                             "GivenTensorFill"]
    assert list(exp_net.external_input) == ["X"] and list(exp_net.external_output) == ["R", "ks"]
    np.testing.assert_array_equal(run(exp_net, FEEDS, exp_init)["R"], ws.fetch_blob("R"))


def test_ssa_rewrite_names_every_version():
    net, vi = chain(), {"X": TensorInfo((2, 3))}
    init = net_of(op("GivenTensorFill", [], "unused", shape=[1], values=[1.0]))
    ssa_rewrite(net, init, vi)
    assert ios(net) == [(["X_0"], ["Y_1"]), (["Y_1"], ["Z_1"]), (["Y_1", "Z_1"], ["Y_2"]), (["Y_2"], ["Out_1"])]
    assert list(net.external_input) == ["X_0"] and list(net.external_output) == ["Out_1"]
    assert list(vi) == ["X_0"] and init.op[0].output[0] == "unused_0"
    assert run(net, {"X_0": FEEDS["X"]})["Out_1"].tolist() == run(chain(), FEEDS)["Out"].tolist()
    with pytest.raises(IllegalGraphTransformError):
        ssa_rewrite(chain(), net_of(op("ConstantFill", [], "c", shape=[1])), None)


# ---- on zoo nets ----

def test_transforms_on_zoo_net(zoo_net):
    """Dead-op removal and copy fusion keep runnable zoo nets' outputs; SSA names run identically."""
    model = load_model(zoo_net)
    net = copy_of(model.predict)
    remove_dead_end_ops(net)
    assert {o.type for o in net.op} <= {o.type for o in model.predict.op}
    assert identify_reshape_sub_graph(model.predict) == []
    if zoo_net.parent.name not in RUNNABLE:
        return
    inputs = {k: TensorInfo(tuple(v.shape)) for k, v in model.value_info.items()}
    feeds = synth_params(model.predict, inputs)
    before = run(model.predict, feeds)
    same(run(net, feeds), before)
    copied = copy_of(model.predict)  # NOTE: a GPU detour after every Relu, then fused away
    ops = []
    for o in copied.op:
        ops.append(o)
        if o.type == "Relu":
            y = o.output[0]
            ops += [op("CopyCPUToGPU", y, y + "_gpu"), op("CopyGPUToCPU", y + "_gpu", y)]
    del copied.op[:]
    copied.op.extend(ops)
    same(run(copied, feeds), before)
    fuse_copy_gpu_cpu(copied)
    assert ios(copied) == ios(model.predict)
    same(run(copied, feeds), before)
    ssa_net, vi = copy_of(model.predict), dict(model.value_info)
    ssa_rewrite(ssa_net, None, vi)
    got = run(ssa_net, {f"{k}_0": v for k, v in feeds.items()})
    for (k, a), b in zip(before.items(), got.values()):
        np.testing.assert_array_equal(a, b)
