"""Executor: dispatch, devices (CPU, stand-in CUDA, real CuPy), errors and atomicity, an MLP that trains."""
from __future__ import annotations

import numpy as np
import pytest

from engine.runtime import device as dev
from engine.errors import ExecutionError, UnknownOpError
from engine.runtime.executor import bind, run_net, run_op
from engine.runtime.workspace import eval_op
from engine.model.opdef import create_operator, device_option
from engine.caffe2.workspace import Workspace
from proto import caffe2_pb2

CUDA = device_option(1)


def test_unknown_args_ignored_and_declared_args_bound():
    op = create_operator("LeakyRelu", "X", "Y", alpha=0.5, order="NCHW", engine="CUDNN", whatever=3)
    b = bind(op)
    assert b.kwargs == {"alpha": 0.5}


def test_ops_without_a_kernel_say_so():
    w = Workspace()
    w.feed_blob("X", np.ones((1, 2, 3, 3), np.float32))
    for t in ("FbFCPacked", "Onnxifi", "FbGemmPack"):  # docs/ops.md lists why
        with pytest.raises(UnknownOpError, match=f"op {t} has no kernel"):
            run_op(create_operator(t, ["X"], ["Y"]), w)


def test_arity_checked():
    with pytest.raises(ExecutionError, match=r"op #0 Relu .*takes 1..1 inputs, got 2"):
        bind(create_operator("Relu", ["X", "Z"], ["Y"]))


def test_error_names_net_op_blob_and_shapes_and_keeps_workspace():
    w = Workspace()
    w.feed_blob("X", np.ones((2, 3), np.float32))
    w.feed_blob("W", np.ones((4, 5), np.float32))
    w.feed_blob("Y", np.full(1, 7.0, np.float32))
    net = caffe2_pb2.NetDef(name="mlp")
    net.op.extend([create_operator("Relu", "X", "X1"), create_operator("FC", ["X1", "W"], "Y", name="fc1")])
    before = {k: w.fetch_blob(k) for k in w.blobs()}
    with pytest.raises(ExecutionError) as e:
        run_net(net, w)
    msg = str(e.value)
    assert msg.startswith("mlp: op #1 FC 'fc1':") and "X1(2, 3)" in msg and "W(4, 5)" in msg
    assert w.fetch_blob("Y").tolist() == [7.0]  # the failing op wrote nothing
    assert set(w.blobs()) == set(before) | {"X1"}  # earlier ops' outputs are kept, as in Caffe2
    w2 = Workspace()
    w2.feed_blob("W", np.ones((4, 5), np.float32))
    with pytest.raises(ExecutionError, match=r"net: op #0 FC 'fc1': input blob 'X1' not found"):
        run_op(net.op[1], w2)
    assert w2.blobs() == ["W"]


def test_multi_output_failure_leaves_all_outputs_untouched():
    w = Workspace()
    w.feed_blob("X", np.ones((2, 3), np.float32))
    w.feed_blob("lab", np.array([0, 9], np.int32))  # label out of range
    w.feed_blob("P", np.zeros(1, np.float32))
    with pytest.raises(ExecutionError, match="SoftmaxWithLoss"):
        run_op(create_operator("SoftmaxWithLoss", ["X", "lab"], ["P", "L"]), w)
    assert w.fetch_blob("P").tolist() == [0.0] and not w.has_blob("L")


def cuda_net():
    net = caffe2_pb2.NetDef(name="gpu_net")
    net.op.extend([
        create_operator("CopyCPUToGPU", "X", "X_gpu", device_option=CUDA),
        create_operator("FC", ["X_gpu", "W_gpu", "b_gpu"], "Y_gpu", device_option=CUDA),
        create_operator("Relu", "Y_gpu", "Y_gpu", device_option=CUDA),
        create_operator("Concat", ["Y_gpu", "Y_gpu"], ["C_gpu", "split_info"], device_option=CUDA),
        create_operator("CopyGPUToCPU", "C_gpu", "C", device_option=CUDA),
        create_operator("EnsureCPUOutput", "Y_gpu", "Y2", device_option=CUDA),
    ])
    return net


def feed_cuda_inputs(w):
    rng = np.random.default_rng(0)
    w.feed_blob("X", rng.standard_normal((3, 4)).astype(np.float32))
    w.feed_blob("W_gpu", rng.standard_normal((5, 4)).astype(np.float32), CUDA)
    w.feed_blob("b_gpu", rng.standard_normal(5).astype(np.float32), CUDA)


def expected(w):
    return np.maximum(w.fetch_blob("X") @ w.fetch_blob("W_gpu").T + w.fetch_blob("b_gpu"), 0)


def test_cuda_net_on_stand_in_device_tracks_blob_devices():
    with dev.use_fake_cuda():
        w = Workspace()
        feed_cuda_inputs(w)
        run_net(cuda_net(), w)
    assert [w.device_of(b) for b in ("X", "X_gpu", "Y_gpu", "C_gpu", "split_info", "C", "Y2")] == [0, 1, 1, 1, 0, 0, 0]
    np.testing.assert_allclose(w.fetch_blob("C"), np.concatenate([expected(w)] * 2, 1), rtol=1e-5)


def test_cuda_op_on_cpu_blob_is_an_error_without_copy():
    with dev.use_fake_cuda():
        w = Workspace()
        w.feed_blob("X", np.ones(2, np.float32))
        with pytest.raises(ExecutionError, match="input blob 'X' is on device 0, op runs on device 1"):
            run_op(create_operator("Relu", "X", "Y", device_option=CUDA), w)


@pytest.mark.skipif(dev.has_gpu(), reason="a GPU is present")
def test_cuda_without_cupy_is_a_clear_error():
    w = Workspace()
    with pytest.raises(ExecutionError, match="CuPy and a GPU"):
        feed_cuda_inputs(w)
    with pytest.raises(ExecutionError, match=r"gpu_net: op #0 CopyCPUToGPU '': CUDA op needs CuPy and a GPU"):
        run_net(cuda_net(), w)


def test_device_cpu_runs_cuda_tagged_net_on_numpy():
    w = Workspace()
    rng = np.random.default_rng(0)
    w.feed_blob("X", rng.standard_normal((3, 4)).astype(np.float32))
    w.feed_blob("W_gpu", rng.standard_normal((5, 4)).astype(np.float32))
    w.feed_blob("b_gpu", rng.standard_normal(5).astype(np.float32))
    run_net(cuda_net(), w, device="cpu")
    assert all(w.device_of(b) == 0 for b in w.blobs())
    np.testing.assert_allclose(w.fetch_blob("Y2"), expected(w), rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not dev.cupy_module(), reason="needs CuPy and a CUDA device")
def test_real_cupy_matches_numpy():
    cp = dev.cupy_module()
    w = Workspace()
    feed_cuda_inputs(w)
    run_net(cuda_net(), w)
    assert isinstance(w.values["Y_gpu"], cp.ndarray)
    np.testing.assert_allclose(w.fetch_blob("Y2"), expected(w), rtol=1e-4, atol=1e-5)
    x, wt = np.random.randn(2, 3, 8, 8).astype(np.float32), np.random.randn(4, 3, 3, 3).astype(np.float32)
    y = eval_op("Conv", cp.asarray(x), cp.asarray(wt), kernel=3, pad=1, device_option=CUDA)[0]
    np.testing.assert_allclose(cp.asnumpy(y), eval_op("Conv", x, wt, kernel=3, pad=1)[0], rtol=1e-4, atol=1e-4)


def test_ctx_kernels_see_the_workspace_they_run_in():
    w1, w2 = Workspace(), Workspace()
    net = caffe2_pb2.NetDef(name="it")
    net.op.extend([create_operator("Iter", [], "iter")])
    from engine.runtime.executor import compile_net, run_compiled
    c = compile_net(net, w1)
    run_compiled(c, w1)
    run_compiled(c, w1)
    run_compiled(c, w2)
    assert w1.fetch_blob("iter").tolist() == [2] and w2.fetch_blob("iter").tolist() == [1]


def _mlp_nets():
    """FC-Relu-FC-SoftmaxWithLoss with hand-written backward ops and MomentumSGD updates."""
    init = caffe2_pb2.NetDef(name="mlp_init")
    co = create_operator
    init.op.extend([co("XavierFill", [], "W1", shape=[16, 4], random_seed=1), co("ConstantFill", [], "b1", shape=[16]),
                    co("XavierFill", [], "W2", shape=[3, 16], random_seed=2), co("ConstantFill", [], "b2", shape=[3]),
                    co("ConstantFill", [], "ITER", shape=[1], value=0, dtype=10)]
                   + [co("ConstantFill", [p], p + "_m", value=0.0) for p in ("W1", "b1", "W2", "b2")])
    train = caffe2_pb2.NetDef(name="mlp_train")
    train.op.extend([
        co("FC", ["X", "W1", "b1"], "h"), co("Relu", "h", "h"), co("FC", ["h", "W2", "b2"], "logits"),
        co("SoftmaxWithLoss", ["logits", "label"], ["prob", "loss"]),
        co("ConstantFill", ["loss"], "loss_grad", value=1.0),
        co("SoftmaxWithLossGradient", ["logits", "label", "prob", "loss_grad"], "logits_grad"),
        co("FCGradient", ["h", "W2", "logits_grad"], ["W2_grad", "b2_grad", "h_grad"]),
        co("ReluGradient", ["h", "h_grad"], "h_grad"),
        co("FCGradient", ["X", "W1", "h_grad"], ["W1_grad", "b1_grad"]),
        co("Iter", "ITER", "ITER"),
        co("LearningRate", "ITER", "LR", base_lr=0.1, policy="step", stepsize=30, gamma=0.5),
    ] + [co("MomentumSGDUpdate", [p + "_grad", p + "_m", "LR", p], [p + "_grad", p + "_m", p], momentum=0.9)
         for p in ("W1", "b1", "W2", "b2")])
    return init, train


def test_mlp_trains_50_steps_and_loss_falls():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 4)).astype(np.float32)
    label = (x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 0.5).astype(np.int32)
    w = Workspace()
    init, train = _mlp_nets()
    run_net(init, w)
    w.feed_blob("X", x)
    w.feed_blob("label", label)
    w.create_net(train)
    losses = []
    for _ in range(50):
        w.run_net("mlp_train")
        losses.append(float(w.fetch_blob("loss")))
    assert np.isfinite(losses).all()
    assert losses[-1] < 0.5 * losses[0], losses[::10]
    assert w.fetch_blob("ITER").tolist() == [50]
