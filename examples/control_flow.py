"""Control-flow examples: If, a While with loop-carried state, a Do, an If nested in a While.

Each predict net holds the forward ops, an ``AveragedLoss`` and its generated backward pass,
so netviz can step into the taken branch, each iteration and each gradient Do; the init net
fills data, parameters, counters and the condition.
"""
from __future__ import annotations

import numpy as np

from engine.caffe2 import control, core
from examples.build import example
from proto import caffe2_pb2

Nets = tuple[caffe2_pb2.NetDef, caffe2_pb2.NetDef]


def _fresh_names(fn):
    """Build with Caffe2's global net-name counters reset, so names do not depend on history."""
    def build() -> Nets:
        saved = dict(core.Net._net_names_used_counters)
        core.Net._net_names_used_counters.clear()
        try:
            return fn()
        finally:
            core.Net._net_names_used_counters.clear()
            core.Net._net_names_used_counters.update(saved)
    build.__doc__, build.__name__ = fn.__doc__, fn.__name__
    return build


def _init(name: str, seed: int, **blobs: tuple[int, ...]) -> core.Net:
    """An init net with a GivenTensorFill of seeded normal values per named shape."""
    rng, init = np.random.default_rng(seed), core.Net(name)
    for blob, shape in blobs.items():
        x = (0.5 * rng.standard_normal(shape)).astype(np.float32)
        init.GivenTensorFill([], blob, shape=list(shape), values=x.flatten().tolist())
    return init


def _finish(net: core.Net, loss_of: str) -> caffe2_pb2.NetDef:
    """Loss, backward pass; external outputs = the loss (stack blobs are not tensors)."""
    loss = net.AveragedLoss(loss_of, "loss")
    net.AddGradientOperators([loss])
    proto = net.Proto()
    del proto.external_output[:]
    proto.external_output.append("loss")
    return proto


def _counter(init: core.Net, n: int) -> None:
    init.ConstantFill([], "i", shape=[1], value=0, dtype=core.DataType.INT32)
    init.ConstantFill([], "one", shape=[1], value=1, dtype=core.DataType.INT32)
    init.ConstantFill([], "n", shape=[1], value=n, dtype=core.DataType.INT32)
    init.ConstantFill([], "cond", shape=[1], value=True, dtype=core.DataType.BOOL)


@example("if_net")
@_fresh_names
def build_if() -> Nets:
    """Y = cond ? Relu(FC(X, W, b)) : 2 * Tanh(X), then its loss and gradients."""
    init = _init("if_net_init", 1, X=(4, 3), W=(3, 3), b=(3,))
    init.ConstantFill([], "cond", shape=[1], value=True, dtype=core.DataType.BOOL)
    net, then_net, else_net = core.Net("if_net"), core.Net("if_net_then"), core.Net("if_net_else")
    then_net.Relu(then_net.FC(["X", "W", "b"], "h_then"), "Y")
    else_net.Scale(else_net.Tanh("X", "t_else"), "Y", scale=2.0)
    net.AddExternalInput("cond", "X", "W", "b")
    control.If(net, "cond", then_net, else_net, lexical_scope={"cond", "X", "W", "b", "Y"})
    return _finish(net, "Y"), init.Proto()


@example("while_net")
@_fresh_names
def build_while() -> Nets:
    """acc <- Tanh(FC(acc, W, b)) while ++i < n (3 iterations): state carried across iterations."""
    init = _init("while_net_init", 2, acc=(2, 3), W=(3, 3), b=(3,))
    _counter(init, 4)
    net, body, cond = core.Net("while_net"), core.Net("while_net_body"), core.Net("while_net_cond")
    body.Tanh(body.FC(["acc", "W", "b"], "h"), "acc")
    cond.LT([cond.Add(["i", "one"], "i"), "n"], "cond")
    net.AddExternalInput("cond", "acc", "W", "b", "i", "one", "n")
    control.While(net, "cond", body, cond, lexical_scope={"cond", "acc", "W", "b", "i", "one", "n"})
    return _finish(net, "acc"), init.Proto()


@example("do_net")
@_fresh_names
def build_do() -> Nets:
    """Y = Relu(FC(X, W, b)) in a Do with its own workspace (h stays local to it)."""
    init = _init("do_net_init", 3, X=(4, 3), W=(2, 3), b=(2,))
    net, sub = core.Net("do_net"), core.Net("do_net_inner")
    sub.Relu(sub.FC(["x_in", "w_in", "b_in"], "h_local"), "y_in")
    net.AddExternalInput("X", "W", "b")
    control.Do(net, sub, ["X", "W", "b"], ["Y"], bindings={"x_in": "X", "w_in": "W", "b_in": "b", "y_in": "Y"})
    return _finish(net, "Y"), init.Proto()


@example("nested_if_in_while")
@_fresh_names
def build_nested() -> Nets:
    """While ++i < n: if i < half then acc <- Tanh(FC(acc, W, b)) else acc <- 0.5 * acc."""
    init = _init("nested_if_in_while_init", 4, acc=(2, 3), W=(3, 3), b=(3,))
    _counter(init, 5)
    init.ConstantFill([], "half", shape=[1], value=3, dtype=core.DataType.INT32)
    net, body, cond = core.Net("nested_if_in_while"), core.Net("nested_body"), core.Net("nested_cond")
    then_net, else_net = core.Net("nested_then"), core.Net("nested_else")
    then_net.Tanh(then_net.FC(["acc", "W", "b"], "h"), "acc")
    else_net.Scale("acc", "acc", scale=0.5)
    body.LT(["i", "half"], "first_half")
    control.If(body, "first_half", then_net, else_net, lexical_scope={"acc", "W", "b", "first_half"})
    cond.LT([cond.Add(["i", "one"], "i"), "n"], "cond")
    scope = {"cond", "acc", "W", "b", "i", "one", "n", "half"}
    net.AddExternalInput(*sorted(scope))
    control.While(net, "cond", body, cond, lexical_scope=scope)
    return _finish(net, "acc"), init.Proto()
