"""Random parameters for a model that comes without weights (every model-zoo predict net).

A weightless net still says a lot: kernel sizes, strides and the input shape fix every spatial
size, and the input channels of each layer follow from the layer before.  What it cannot say
is how many filters a layer has, so each conv gets `width` filters and each FC `classes`
outputs.  The result runs end to end with true spatial shapes, so a user can step through
ResNet-50 from the zoo; the session says plainly which blobs were made up.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from engine.opdef import arg_value
from engine.shapes import UNKNOWN, TensorInfo, infer_op
from proto import caffe2_pb2

ParamRule = Callable[[caffe2_pb2.OperatorDef, TensorInfo, int, int], dict[int, tuple[tuple[int, ...], bool]]]
#: op type → rule giving ``{input index: (shape, positive)}`` for its parameter inputs.
PARAM_RULES: dict[str, ParamRule] = {}


def param_rule(*op_types: str) -> Callable[[ParamRule], ParamRule]:
    def register(fn: ParamRule) -> ParamRule:
        for t in op_types:
            PARAM_RULES[t] = fn
        return fn
    return register


def _channels(op: caffe2_pb2.OperatorDef, x: TensorInfo) -> int | None:
    if x.shape is None or len(x.shape) < 2:
        return None
    c = x.shape[-1] if arg_value(op, "order", "NCHW") == "NHWC" else x.shape[1]
    return c if isinstance(c, int) else None


def _kernel(op: caffe2_pb2.OperatorDef, rank: int) -> tuple[int, ...]:
    ks = arg_value(op, "kernels")
    if ks:
        return tuple(ks)
    if arg_value(op, "kernel_h") is not None:
        return (arg_value(op, "kernel_h"), arg_value(op, "kernel_w"))
    return (arg_value(op, "kernel", 1),) * rank


@param_rule("Conv", "Conv1D", "Conv2D", "Conv3D")
def _conv(op, x, width, classes):
    c = _channels(op, x)
    if c is None:
        return {}
    group = arg_value(op, "group", 1)
    m = group * max(1, width // group) if group > 1 else width
    k = _kernel(op, len(x.shape) - 2)
    nhwc = arg_value(op, "order", "NCHW") == "NHWC"
    w = (m, *k, c // group) if nhwc else (m, c // group, *k)
    return {1: (w, False), 2: ((m,), False)}


@param_rule("SpatialBN")
def _bn(op, x, width, classes):
    c = _channels(op, x)
    return {} if c is None else {i: ((c,), i == 4) for i in range(1, 5)}


@param_rule("FC")
def _fc(op, x, width, classes):
    if x.shape is None or any(not isinstance(d, int) for d in x.shape):
        return {}
    axis, axis_w = arg_value(op, "axis", 1), arg_value(op, "axis_w", 1)
    k = int(np.prod(x.shape[axis:]))
    return {1: ((classes,) + (1,) * (axis_w - 1) + (k,), False), 2: ((classes,), False)}


@param_rule("Mul", "Add", "PRelu")
def _per_channel(op, x, width, classes):
    c = _channels(op, x)
    return {} if c is None or len(op.input) != 2 else {1: ((c,), False)}


def synthesize_params(net: caffe2_pb2.NetDef, known: Mapping[str, Any], *, width: int = 16,
                      classes: int = 1000, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 arrays for every parameter input of `net` missing from `known`.

    `known` maps blob names to arrays (inputs and whatever the init net made); shapes flow
    through :mod:`engine.shapes`.  Variances get positive values so SpatialBN stays finite.
    """
    rng = np.random.default_rng(seed)
    env = {k: TensorInfo(tuple(np.shape(v)), None) for k, v in known.items()}
    made: dict[str, np.ndarray] = {}
    for op in net.op:
        rule = PARAM_RULES.get(op.type)
        if rule is not None and op.input:
            for i, (shape, positive) in rule(op, env.get(op.input[0], UNKNOWN), width, classes).items():
                name = op.input[i] if i < len(op.input) else None
                if name is None or name in env:
                    continue
                scale = np.sqrt(2.0 / max(1, int(np.prod(shape[1:])))) if len(shape) > 1 else 0.1
                a = (rng.standard_normal(shape) * scale).astype(np.float32)
                made[name] = np.abs(a) + np.float32(0.5) if positive else a
                env[name] = TensorInfo(shape, None)
        try:
            outs = infer_op(op, [env.get(i, UNKNOWN) for i in op.input])
        except Exception:  # an op the shape rules cannot follow: later params stay unknown
            outs = [UNKNOWN] * len(op.output)
        env.update(zip(op.output, outs))
    return made
