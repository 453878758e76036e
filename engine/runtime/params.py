"""Random parameters for a model that comes without weights (every model-zoo predict net).

A weightless net still says a lot: kernel sizes, strides and the input shape fix every spatial
size, and the input channels of each layer follow from the layer before.  What it cannot say
is how many filters a layer has, so each conv gets `width` filters and each FC `classes`
outputs, unless a reader fixes the number: a grouped (depthwise) conv, a Reshape to a fixed
shape (ONNX SqueezeNet's 1000 classes), a given filter, a detection head; a width one input of
a Sum (Add, Mul, …) needs, all its inputs get, and what a Concat lacks goes to an input that can
grow; ChannelShuffle passes widths through.  Synthesis then runs again with those widths.
The result runs end to end with true spatial shapes, so a user can step through ResNet-50 from
the zoo; the session says plainly which blobs were made up.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from engine.model.opdef import arg_value, subnets_of
from engine.runtime.shapes import UNKNOWN, TensorInfo
from engine.runtime.inference import infer_op
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


@param_rule("Conv", "Conv1D", "Conv2D", "Conv3D", "Int8Conv", "Int8ConvRelu")
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


@param_rule("FC", "Int8FC")
def _fc(op, x, width, classes):
    axis, axis_w = arg_value(op, "axis", 1), arg_value(op, "axis_w", 1)
    if x.shape is None or any(not isinstance(d, int) for d in x.shape[axis:]):  # NOTE: RoI counts may be unknown
        return {}
    k = int(np.prod(x.shape[axis:]))
    return {1: ((classes,) + (1,) * (axis_w - 1) + (k,), False), 2: ((classes,), False)}


@param_rule("ConvTranspose")
def _conv_transpose(op, x, width, classes):
    # NOTE: the filter is (C_in, M / group, kernel...) (NHWC: C_in, kernel..., M / group); bias M.
    c = _channels(op, x)
    if c is None:
        return {}
    group = arg_value(op, "group", 1)
    m = group * max(1, width // group)
    k = _kernel(op, len(x.shape) - 2)
    nhwc = arg_value(op, "order", "NCHW") == "NHWC"
    return {1: ((c, *k, m // group) if nhwc else (c, m // group, *k), False), 2: ((m,), False)}


@param_rule("MatMul")
def _matmul(op, x, width, classes):
    # NOTE: A is flattened to 2-D at axis_a; B (K, N), or (N, K) with trans_b, gets `classes` columns.
    axis = arg_value(op, "axis_a", 1)
    if x.shape is None or not all(isinstance(d, int) for d in x.shape):
        return {}
    k = int(np.prod(x.shape[:axis])) if arg_value(op, "trans_a", 0) else int(np.prod(x.shape[axis:]))
    return {1: ((classes, k) if arg_value(op, "trans_b", 0) else (k, classes), False)}


@param_rule("BatchMatMul")
def _batch_matmul(op, x, width, classes):
    # NOTE: B keeps A's batch dims: (..., K, N), or (..., N, K) with trans_b.
    if x.shape is None or len(x.shape) < 2 or not all(isinstance(d, int) for d in x.shape):
        return {}
    k = x.shape[-2] if arg_value(op, "trans_a", 0) else x.shape[-1]
    last = (classes, k) if arg_value(op, "trans_b", 0) else (k, classes)
    return {1: ((*x.shape[:-2], *last), False)}


@param_rule("AffineChannel")
def _affine_channel(op, x, width, classes):
    c = _channels(op, x)
    return {} if c is None else {1: ((c,), True), 2: ((c,), False)}


@param_rule("PRelu")
def _slope(op, x, width, classes):
    c = _channels(op, x)
    return {} if c is None or len(op.input) != 2 else {1: ((c,), False)}


@param_rule("Mul", "Add", "Sub", "Div")
def _per_channel(op, x, width, classes):
    """A per-channel constant in the shape Caffe2 broadcasts: with ``broadcast=1`` a vector at
    ``axis`` (legacy broadcasting matches B's dims from there), else NumPy's rules, so an NCHW
    channel vector is (C, 1, 1)."""
    c = _channels(op, x)
    if c is None or len(op.input) != 2:
        return {}
    if arg_value(op, "broadcast", 0):
        axis = arg_value(op, "axis", -1)
        d = x.shape[axis] if axis != -1 else x.shape[-1]
        return {} if not isinstance(d, int) else {1: ((d,), op.type == "Div")}
    nchw = arg_value(op, "order", "NCHW") != "NHWC" and len(x.shape) > 2
    return {1: ((c, *(1,) * (len(x.shape) - 2)) if nchw else (x.shape[-1],), op.type == "Div")}


#: Anchors per position of a synthesised RPN head (Detectron's 5 sizes x 3 aspect ratios).
RPN_ANCHORS = 15


def rpn_anchors(stride: float = 16.0, sizes=(32, 64, 128, 256, 512), ratios=(0.5, 1.0, 2.0)) -> np.ndarray:
    """Detectron-style anchors (A, 4) [x1, y1, x2, y2] centred on the first cell of a `stride` grid."""
    ctr = (stride - 1) / 2.0
    rows = []
    for size in sizes:
        for r in ratios:
            w = np.round(np.sqrt(size * size / r))
            h = np.round(w * r)
            rows.append([ctr - (w - 1) / 2, ctr - (h - 1) / 2, ctr + (w - 1) / 2, ctr + (h - 1) / 2])
    return np.array(rows, np.float32)


_SAME_CHANNELS = frozenset({"Relu", "Sigmoid", "Tanh", "SpatialBN", "AffineChannel", "LeakyRelu", "PRelu",
                            "Softmax", "Reshape", "Flatten", "Dropout", "Copy", "Clip", "ResizeNearest",
                            "MaxPool", "AveragePool", "Int8Relu", "Int8ResizeNearest", "Int8MaxPool",
                            "Int8AveragePool", "Int8Quantize", "Int8Dequantize", "NHWC2NCHW", "NCHW2NHWC",
                            "Sum", "Int8Sum", "Int8Add", "Int8SumRelu", "Int8AddRelu", "ChannelShuffle",
                            "Int8ChannelShuffle"})
_CONV_FC = frozenset({"Conv", "FC", "Int8Conv", "Int8ConvRelu", "Int8FC"})


def _output_hints(net: caffe2_pb2.NetDef) -> dict[str, int]:
    """Filter counts fixed by what reads a layer (weight blob -> outputs).

    GenerateProposals needs scores (N, A, H, W) and deltas (N, 4A, H, W) from the convs before
    it; a grouped (depthwise) conv needs as many input channels as it has groups."""
    writer: dict[str, int] = {}           # blob -> index of the op that last wrote it (so far)
    reads: list[list[int | None]] = []    # per op: the writer of each of its inputs when it ran

    def weight_of(i: int | None) -> str | None:
        seen = 0
        while i is not None and net.op[i].type in _SAME_CHANNELS and seen < 1000:
            i, seen = reads[i][0] if reads[i] else None, seen + 1
        op = net.op[i] if i is not None else None
        return op.input[1] if op is not None and op.type in _CONV_FC and len(op.input) > 1 else None

    hints: dict[str, int] = {}
    for k, op in enumerate(net.op):
        reads.append([writer.get(b) for b in op.input])
        if op.type in ("GenerateProposals", "GenerateProposalsCPP") and len(op.input) >= 2:
            for src, n in ((reads[k][0], RPN_ANCHORS), (reads[k][1], 4 * RPN_ANCHORS)):
                if weight_of(src):
                    hints[weight_of(src)] = n
        if op.type in ("Conv", "Int8Conv", "Int8ConvRelu") and arg_value(op, "group", 1) > 1 \
                and weight_of(reads[k][0]):
            hints.setdefault(weight_of(reads[k][0]), arg_value(op, "group", 1))
        for o in op.output:
            writer[o] = k
    return hints


def _box_hints(net: caffe2_pb2.NetDef, classes: int) -> dict[str, int]:
    """BBoxTransform needs 4 deltas per class: the FC making its deltas gets 4 * classes outputs."""
    producer = {o: op for op in net.op for o in op.output}
    hints = {}
    for op in net.op:
        if op.type == "BBoxTransform" and len(op.input) >= 2:
            p = producer.get(op.input[1])
            while p is not None and p.type in ("Int8Dequantize", "NHWC2NCHW", "Reshape") and p.input:
                p = producer.get(p.input[0])
            if p is not None and p.type in ("FC", "Int8FC") and len(p.input) > 1:
                hints[p.input[1]] = 4 * classes
    return hints


def _int8_param(op: caffe2_pb2.OperatorDef, i: int, a: np.ndarray, scales: dict[str, float],
                made: dict[str, Any]) -> Any:
    """Quantise a synthesised float parameter of an Int8 op: weights to uint8 around 128 with
    their own scale, biases to int32 in units of x_scale * w_scale (what QNNPACK adds)."""
    from engine.runtime.blobio import Int8Tensor  # noqa: PLC0415

    if i == 1:
        scale = float(np.float32(max(float(np.abs(a).max()), 1e-8) / 127.0))
        return Int8Tensor(np.clip(np.rint(a / scale) + 128, 0, 255).astype(np.uint8), scale, 128)
    w = made.get(op.input[1])
    scale = float(np.float32(scales.get(op.input[0], 1.0) * (w.scale if w is not None else 1.0)))
    return Int8Tensor(np.rint(a / scale).astype(np.int32), scale, 0)


def synthesize_params(net: caffe2_pb2.NetDef, known: Mapping[str, Any], *, width: int = 16,
                      classes: int = 1000, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 arrays (Int8 tensors for Int8 ops) for every parameter input of `net` missing from `known`.

    `known` maps blob names to arrays (inputs and whatever the init net made); shapes flow
    through :mod:`engine.runtime.shapes`, into the subnets of control-flow ops too.  Variances get
    positive values so SpatialBN stays finite; detection heads get the filter counts their
    readers need and GenerateProposals gets Detectron-style anchors.  A made layer a later op
    finds too narrow or too wide (see :meth:`_State.check`) is remade in another round, at most
    four; constants of Mul/Add/Sub/Div take the shape Caffe2 broadcasts.
    """
    demands: dict[str, int] = {}
    for _ in range(4):  # NOTE: each round may only widen layers a later reader found too narrow
        state = _State(known, demands)
        _synthesize(net, state.env, state.made, np.random.default_rng(seed), width, classes, {}, state)
        new = {w: n for w, n in state.found.items() if demands.get(w) != n}
        if not new:
            break
        demands.update(new)
    return state.made


#: Ops whose output channel count is not their first input's (a width demanded downstream stops here).
_CHANNELS_CHANGE = frozenset({"Conv", "Conv1D", "Conv2D", "Conv3D", "ConvTranspose", "FC", "Int8Conv", "Int8ConvRelu",
                              "Int8FC", "MatMul", "BatchMatMul", "Concat", "Split", "Reshape", "Flatten", "Transpose",
                              "Slice", "Gather", "Int8Reshape", "Int8Flatten", "Int8Transpose", "Int8Concat",
                              "DepthConcat", "SpaceToBatch", "BatchToSpace", "Im2Col"})
#: Ops whose inputs all have their output's channels: a width one of them needs, all of them need.
_JOINS = frozenset({"Sum", "Add", "Sub", "Mul", "Div", "Max", "Min", "Int8Sum", "Int8Add", "Int8SumRelu",
                    "Int8AddRelu"})
#: Ops whose output channels are their inputs' summed (Concat on the channel axis).
_CONCATS = frozenset({"Concat", "DepthConcat", "Int8Concat"})
_WEIGHTED = frozenset({"Conv", "Conv1D", "Conv2D", "Conv3D", "ConvTranspose", "FC", "Int8Conv", "Int8ConvRelu",
                       "Int8FC", "MatMul", "BatchMatMul"})


class _State:
    """One synthesis round: infos so far, the arrays made, which made weight fixes each blob's
    channels, and the widths readers found they need (weight name -> output count)."""

    def __init__(self, known: Mapping[str, Any], demands: dict[str, int]) -> None:
        self.known = known
        self.env = {k: TensorInfo(tuple(np.shape(v)), None) for k, v in known.items()}
        self.made: dict[str, Any] = {}
        self.demands = demands
        self.source: dict[str, str] = {}
        self.found: dict[str, int] = {}
        self.parts: dict[str, tuple[str, list[str], bool]] = {}   # join/concat output -> (kind, inputs, NHWC)

    def track(self, op: caffe2_pb2.OperatorDef) -> None:
        if (op.type in _JOINS and len(op.input) > 1 and self._same_shapes(op.input)) or \
                (op.type in _CONCATS and self._channel_axis(op)):
            nhwc = arg_value(op, "order", "NHWC" if op.type.startswith("Int8") else "NCHW") == "NHWC"
            self.parts[op.output[0]] = ("join" if op.type in _JOINS else "concat", list(op.input), nhwc)
        else:
            for o in op.output:
                self.parts.pop(o, None)
        if op.type in _WEIGHTED and len(op.input) > 1 and op.input[1] in self.made:
            self.source.update(dict.fromkeys(op.output, op.input[1]))
        elif op.type not in _CHANNELS_CHANGE and op.input and op.input[0] in self.source:
            self.source.update(dict.fromkeys(op.output, self.source[op.input[0]]))
        else:
            for o in op.output:
                self.source.pop(o, None)

    def _same_shapes(self, blobs: Sequence[str]) -> bool:
        """All of `blobs` have one known rank (an elementwise join, not a broadcast of a constant)."""
        shapes = [self.env.get(b, UNKNOWN).shape for b in blobs]
        return all(sh is not None for sh in shapes) and len({len(sh) for sh in shapes}) == 1 and len(shapes[0]) > 1

    def _channel_axis(self, op: caffe2_pb2.OperatorDef) -> bool:
        nhwc = arg_value(op, "order", "NHWC" if op.type.startswith("Int8") else "NCHW") == "NHWC"
        axis = arg_value(op, "axis", 3 if nhwc else 1)
        x = self.env.get(op.input[0], UNKNOWN) if op.input else UNKNOWN
        return x.shape is not None and axis % max(len(x.shape), 1) == (len(x.shape) - 1 if nhwc else 1) \
            and not arg_value(op, "add_axis", 0)

    def need(self, blob: str, channels: int | float, depth: int = 0) -> None:
        """`blob` needs `channels` channels: widen the made layer that fixes them, if any; through a join
        (Sum, Add, …) every input needs them, through a Concat an input that can grow takes the rest."""
        if channels != int(channels) or channels <= 0 or depth > 64:
            return
        kind, inputs, nhwc = self.parts.get(blob, ("", [], False))
        if kind == "join":
            for b in inputs:
                self.need(b, channels, depth + 1)
            return
        if kind == "concat":
            have = [self._channels_of(b, nhwc) for b in inputs]
            if None in have or sum(have) >= channels:
                return
            grow = next((k for k, b in enumerate(inputs) if self._grows(b)), None)
            if grow is not None:
                self.need(inputs[grow], have[grow] + int(channels) - sum(have), depth + 1)
            return
        w = self.source.get(blob)
        if w is not None:
            self.found.setdefault(w, int(channels))

    def _channels_of(self, blob: str, nhwc: bool) -> int | None:
        x = self.env.get(blob, UNKNOWN)
        c = x.shape[-1 if nhwc else 1] if x.shape is not None and len(x.shape) > 1 else None
        return c if isinstance(c, int) else None

    def _grows(self, blob: str) -> bool:
        """Whether a made layer (or a join/concat of them) decides `blob`'s channels."""
        return blob in self.source or blob in self.parts

    def check(self, op: caffe2_pb2.OperatorDef) -> None:
        """Note the widths `op` needs of the layers before it (grouped convs, given filters, fixed
        reshapes) — what a weightless net's own numbers say a made-up layer must have."""
        if not op.input:
            return
        x = self.env.get(op.input[0], UNKNOWN)
        c = _channels(op, x)
        if c is None:
            return
        if op.type in _JOINS and len(op.input) > 1 and self._same_shapes(op.input):
            widths = [_channels(op, self.env.get(b, UNKNOWN)) for b in op.input]
            if None not in widths and len(set(widths)) > 1 and 1 not in widths:  # NOTE: 1 broadcasts (attention)
                for b in op.input:
                    self.need(b, max(widths))
        if op.type in ("Conv", "Conv2D", "Int8Conv", "Int8ConvRelu") and len(op.input) > 1:
            group = arg_value(op, "group", 1)
            w = self.known.get(op.input[1])
            if w is not None and np.ndim(w) >= 2:  # a given filter fixes the input channels
                wc = np.shape(w)[-1] if arg_value(op, "order", "NCHW") == "NHWC" else np.shape(w)[1]
                if c != wc * group:
                    self.need(op.input[0], wc * group)
            elif c % group:
                self.need(op.input[0], group * max(1, -(-c // group)))
        if op.type in ("FC", "Int8FC") and len(op.input) > 1 and op.input[1] not in self.made \
                and np.ndim(self.known.get(op.input[1])) == 2 and x.is_known:
            rest = int(np.prod(x.shape[2:])) if len(x.shape) > 2 else 1
            k = np.shape(self.known[op.input[1]])[1]
            if c * rest != k:
                self.need(op.input[0], k / rest)
        if op.type == "Reshape" and x.is_known:
            target = arg_value(op, "shape") or (list(np.asarray(self.known[op.input[1]]).reshape(-1))
                                                if len(op.input) > 1 and op.input[1] in self.known else None)
            target = [x.shape[i] if int(t) == 0 and i < len(x.shape) else int(t) for i, t in enumerate(target or ())]
            if target and all(t > 0 for t in target):  # NOTE: 0 copies the input's dim; with a -1 anything fits
                total, want = int(np.prod(x.shape)), int(np.prod(target))
                if total != want:
                    self.need(op.input[0], c * want / total)


def _synthesize(net: caffe2_pb2.NetDef, env: dict[str, TensorInfo], made: dict[str, Any],
                rng: np.random.Generator, width: int, classes: int, scales: dict[str, float],
                state: _State) -> None:
    hints = {**_box_hints(net, classes), **_output_hints(net), **state.demands}
    for op in net.op:
        state.check(op)
        rule = PARAM_RULES.get(op.type)
        if rule is not None and op.input:
            n_out = hints.get(op.input[1]) if len(op.input) > 1 else None
            given = rule(op, env.get(op.input[0], UNKNOWN), n_out or width, n_out or classes)
            for i, (shape, positive) in given.items():
                name = op.input[i] if i < len(op.input) else None
                if name is None or name in env:
                    continue
                scale = np.sqrt(2.0 / max(1, int(np.prod(shape[1:])))) if len(shape) > 1 else 0.1
                a = (rng.standard_normal(shape) * scale).astype(np.float32)
                made[name] = np.abs(a) + np.float32(0.5) if positive else a
                if op.type.startswith("Int8"):
                    made[name] = _int8_param(op, i, made[name], scales, made)
                env[name] = TensorInfo(shape, None)
        if op.type in ("GenerateProposals", "GenerateProposalsCPP") and len(op.input) > 3 \
                and op.input[3] not in env:
            made[op.input[3]] = rpn_anchors(1.0 / arg_value(op, "spatial_scale", 1.0 / 16))
            env[op.input[3]] = TensorInfo(made[op.input[3]].shape, None)
        if arg_value(op, "Y_scale") is not None:
            scales.update(dict.fromkeys(op.output, float(arg_value(op, "Y_scale"))))
        for _, sub in subnets_of(op):
            _synthesize(sub, env, made, rng, width, classes, scales, state)
        try:
            outs = infer_op(op, [env.get(i, UNKNOWN) for i in op.input])
        except Exception:  # an op the shape rules cannot follow: later params stay unknown
            outs = [UNKNOWN] * len(op.output)
        env.update(zip(op.output, outs))
        state.track(op)
