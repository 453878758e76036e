"""Small nets for the TUI tests: a trainable MLP with a loss, a While loop, a 1,000-op chain."""
from __future__ import annotations

from pathlib import Path

from engine.model.modelio import save_net
from engine.model.opdef import create_operator as op
from proto import caffe2_pb2


def mlp() -> caffe2_pb2.NetDef:
    """FC → Relu → FC → SoftmaxWithLoss: the loss is guessable (external output ``loss``)."""
    net = caffe2_pb2.NetDef(name="mlp", op=[
        op("FC", ["X", "W1", "b1"], "h1", name="fc1"),
        op("Relu", "h1", "h1", name="relu1"),
        op("FC", ["h1", "W2", "b2"], "logits", name="fc2"),
        op("SoftmaxWithLoss", ["logits", "label"], ["prob", "loss"], name="xent"),
    ])
    net.external_input.extend(["X", "W1", "b1", "W2", "b2", "label"])
    net.external_output.extend(["prob", "loss"])
    return net


def while_net() -> caffe2_pb2.NetDef:
    """``i = 0; while i < 3: x = x * 2; i += 1`` with cond_net and loop_net subnets."""
    cond = caffe2_pb2.NetDef(name="cond", op=[op("LT", ["i", "three"], "cond")])
    body = caffe2_pb2.NetDef(name="body", op=[
        op("Mul", ["x", "two"], "x", name="double"),
        op("Add", ["i", "one"], "i", name="inc"),
        op("LT", ["i", "three"], "cond", name="check"),
    ])
    net = caffe2_pb2.NetDef(name="loop", op=[
        op("ConstantFill", [], "i", shape=[1], value=0.0),
        op("ConstantFill", [], "three", shape=[1], value=3.0),
        op("ConstantFill", [], "one", shape=[1], value=1.0),
        op("ConstantFill", [], "two", shape=[1], value=2.0),
        op("LT", ["i", "three"], "cond"),
        op("While", ["cond"], [], loop_net=body, cond_net=cond, name="loop"),
        op("Relu", "x", "y", name="out"),
    ])
    net.external_input.append("x")
    net.external_output.append("y")
    return net


def chain(n: int = 1000) -> caffe2_pb2.NetDef:
    """`n` alternating Relu/Sigmoid ops in scopes of 50 (``block_k/``)."""
    net = caffe2_pb2.NetDef(name=f"chain{n}")
    for i in range(n):
        net.op.append(op("Relu" if i % 2 else "Sigmoid", f"x{i}", f"x{i + 1}",
                         name=f"block_{i // 50}/op{i}"))
    net.external_input.append("x0")
    net.external_output.append(f"x{n}")
    return net


def write(tmp: Path, name: str, net: caffe2_pb2.NetDef) -> Path:
    return save_net(net, tmp / f"{name}.pbtxt")


def nested_net() -> caffe2_pb2.NetDef:
    """An If holding a While holding a While (``x`` doubled 3 × 2 times): a breadcrumb three subnets deep.

    ``nested › op#3 If › then_net › op#3 While › loop_net › op#2 While › loop_net``.
    """
    inner = caffe2_pb2.NetDef(name="inner", op=[
        op("Mul", ["x", "two"], "x", name="double"),
        op("Add", ["j", "one"], "j", name="inc_j"),
        op("LT", ["j", "two"], "cond_j", name="check_j"),
    ])
    outer = caffe2_pb2.NetDef(name="outer", op=[
        op("ConstantFill", [], "j", shape=[1], value=0.0),
        op("LT", ["j", "two"], "cond_j"),
        op("While", ["cond_j"], [], loop_net=inner, name="inner_loop"),
        op("Add", ["i", "one"], "i", name="inc_i"),
        op("LT", ["i", "three"], "cond_i", name="check_i"),
    ])
    branch = caffe2_pb2.NetDef(name="branch", op=[
        op("ConstantFill", [], "i", shape=[1], value=0.0),
        op("ConstantFill", [], "three", shape=[1], value=3.0),
        op("LT", ["i", "three"], "cond_i"),
        op("While", ["cond_i"], [], loop_net=outer, name="outer_loop"),
    ])
    net = caffe2_pb2.NetDef(name="nested", op=[
        op("ConstantFill", [], "one", shape=[1], value=1.0),
        op("ConstantFill", [], "two", shape=[1], value=2.0),
        op("GT", ["two", "one"], "flag"),
        op("If", ["flag"], [], then_net=branch, name="branch"),
        op("Relu", "x", "y", name="out"),
    ])
    net.external_input.append("x")
    net.external_output.append("y")
    return net
