"""Build the example models in ``examples/`` with netviz's Caffe2-compatible builders.

``python -m examples.build [OUTDIR]`` writes one folder per example holding a binary
``predict_net.pb`` and ``init_net.pb``; ``tests/test_examples.py`` rebuilds them into a temporary
folder and fails when the committed files differ, so examples cannot drift from this script.
Every example's init net creates all its parameters *and its input data* with fill ops, so
``netviz examples/<name>/predict_net.pb`` can run and step it with no further files.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
from google.protobuf import text_format

from engine.caffe2 import core
from engine.model.modelio import save_net
from proto import caffe2_pb2

HERE = Path(__file__).resolve().parent
Builder = Callable[[], tuple[caffe2_pb2.NetDef, caffe2_pb2.NetDef]]
EXAMPLES: dict[str, Builder] = {}


def example(name: str) -> Callable[[Builder], Builder]:
    """Register a builder returning ``(predict_net, init_net)`` under `name`."""
    def register(fn: Builder) -> Builder:
        EXAMPLES[name] = fn
        return fn
    return register


@example("mlp")
def build_mlp(batch: int = 16, dims: tuple[int, ...] = (8, 16, 4)) -> tuple[caffe2_pb2.NetDef, caffe2_pb2.NetDef]:
    """An MLP trainer: FC-Relu-FC-SoftmaxWithLoss, its generated backward pass and an SGD step.

    The data and labels are fixed (GivenTensorFill in the init net), so repeated runs of the
    predict net train on one batch and the loss falls.
    """
    rng = np.random.default_rng(0)
    init, train = core.Net("mlp_init"), core.Net("mlp_train")
    x = rng.standard_normal((batch, dims[0])).astype(np.float32)
    init.GivenTensorFill([], "data", shape=list(x.shape), values=x.flatten().tolist())
    init.GivenTensorIntFill([], "label", shape=[batch], values=(x[:, 0] > 0).astype(int).tolist())
    params = []
    blob = core.BlobReference("data")
    for k, (d_in, d_out) in enumerate(zip(dims, dims[1:])):
        w, b = init.XavierFill([], f"fc{k + 1}_w", shape=[d_out, d_in]), init.ConstantFill([], f"fc{k + 1}_b", shape=[d_out])
        params += [w, b]
        blob = train.FC([blob, w, b], f"fc{k + 1}")
        if k < len(dims) - 2:
            blob = train.Relu(blob, f"relu{k + 1}")
    _, loss = train.SoftmaxWithLoss([blob, "label"], ["softmax", "loss"])
    grads = train.AddGradientOperators([loss])
    init.ConstantFill([], "ITER", shape=[1], value=0, dtype=core.DataType.INT64)
    init.ConstantFill([], "ONE", shape=[1], value=1.0)
    train.Iter("ITER", "ITER")
    lr = train.LearningRate("ITER", "LR", base_lr=-0.1, policy="fixed")
    for p in params:
        train.WeightedSum([p, "ONE", grads[str(p)], lr], p)
    train.AddExternalOutput(loss)
    return train.Proto(), init.Proto()


@example("mlp_forward")
def build_mlp_forward() -> tuple[caffe2_pb2.NetDef, caffe2_pb2.NetDef]:
    """The mlp example's forward net alone (no backward pass, no optimizer): for ``g``, which
    generates the backward pass, and ``check-grad``."""
    train, init = build_mlp()
    forward = caffe2_pb2.NetDef(name="mlp_forward", external_input=train.external_input[:6],
                                external_output=["loss"])
    forward.op.extend(op for op in train.op[:4])
    del init.op[-2:]  # ITER and ONE feed only the optimizer
    init.name = "mlp_forward_init"  # NOTE: fixed names: core.Net numbers a name built twice
    return forward, init


def build_mlp_plan() -> caffe2_pb2.PlanDef:
    """A PlanDef training the mlp example: its init net once, then 20 iterations of the training
    net (forward, backward, SGD); ``netviz run examples/mlp/plan.pbtxt`` runs it."""
    train, init = build_mlp()
    init.name, train.name = "mlp_init", "mlp_train"
    plan = caffe2_pb2.PlanDef(name="mlp_plan", network=[init, train])
    plan.execution_step.add(name="init", network=[init.name])
    plan.execution_step.add(name="train", network=[train.name], num_iter=20)
    return plan


def build_all(out_dir: Path = HERE) -> list[Path]:
    """Write every registered example under `out_dir` (and the mlp plan); return the files written."""
    written = []
    for name, builder in EXAMPLES.items():
        predict, init = builder()
        folder = out_dir / name
        folder.mkdir(parents=True, exist_ok=True)
        written += [save_net(predict, folder / "predict_net.pb"), save_net(init, folder / "init_net.pb")]
    plan_path = out_dir / "mlp" / "plan.pbtxt"
    plan_path.write_text(text_format.MessageToString(build_mlp_plan()))
    return written + [plan_path]


from examples import control_flow  # noqa: E402,F401
from examples import lstm  # noqa: E402,F401

if __name__ == "__main__":
    from examples.build import build_all  # noqa: F811 (the imported module holds every example)

    for path in build_all(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE):
        print(path)
