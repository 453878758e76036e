"""Where netviz and Caffe2 1.10.2 part ways on a net: the Caffe2-exact switch and one lint rule per
entry of ``docs/fidelity.md``.

By default the engine computes what Caffe2 computes, wrong values included (an in-place ``Mul``'s
gradient reads the overwritten input; ``SpatialBNGradient`` of an ``is_test`` op reads the running
variance as an inverse std), so a user debugging a Caffe2 training sees its numbers.
:func:`fix_caffe2` (``--fix-caffe2`` in the CLI and TUI) applies netviz's fixes instead.  Where
Caffe2 refuses a net (raises while generating gradients), netviz generates the correct gradient in
both modes.  :func:`lint_net` lists every op where the two differ, or Caffe2 would refuse, or netviz
otherwise departs from Caffe2; each :class:`Rule` names its section of ``docs/fidelity.md``.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.model.opdef import arg_value, subnets_of
from engine.runtime.fidelity import fix_caffe2, fixes_enabled, set_fix_caffe2  # noqa: F401  (lint's switch)
from engine.runtime.shapes import inference_is_not_run
from proto import caffe2_pb2

if TYPE_CHECKING:
    from engine.autodiff.training import TrainingSplit

__all__ = ["fix_caffe2", "fixes_enabled", "set_fix_caffe2", "Finding", "Rule", "RULES", "lint_net"]

@dataclass(frozen=True, slots=True)
class Finding:
    """One op where netviz and Caffe2 differ: the rule, the op, and what differs (one line)."""

    rule: str
    op_index: int
    op_type: str
    message: str
    refused: bool = False  # Caffe2 raises on this net (netviz generates the correct gradient)
    values_differ: bool = False  # the two modes compute different values here

    def text(self) -> str:
        what = "Caffe2 refuses" if self.refused else "values differ" if self.values_differ else "note"
        return f"op #{self.op_index} {self.op_type}: [{self.rule}] ({what}) {self.message}"


@dataclass(frozen=True)
class Rule:
    """A lint rule: its id, the ``docs/fidelity.md`` section it checks, and the check."""

    id: str
    section: str
    check: Callable[[caffe2_pb2.NetDef, set[int], list[str]], list[Finding]]
    whole_net: bool = False  # checks a training net's backward ops too (else: its forward section)


RULES: list[Rule] = []


def rule(rule_id: str, section: str, whole_net: bool = False) -> Callable[[Callable], Callable]:
    """Register a check ``(net, differentiated op indices, losses) -> findings`` for a fidelity.md section."""
    def register(fn: Callable) -> Callable:
        RULES.append(Rule(rule_id, section, fn, whole_net))
        return fn
    return register


def _ops(net: caffe2_pb2.NetDef, types: Sequence[str] | str) -> Iterator[tuple[int, caffe2_pb2.OperatorDef]]:
    types = (types,) if isinstance(types, str) else types
    return ((i, op) for i, op in enumerate(net.op) if op.type in types)


def _f(rule_id: str, i: int, op: caffe2_pb2.OperatorDef, msg: str, **kw: bool) -> Finding:
    return Finding(rule_id, i, op.type, msg, **kw)


def _reads_in(net: caffe2_pb2.NetDef) -> set[str]:
    out = set()
    for op in net.op:
        out.update(op.input)
        for _, sub in subnets_of(op):
            out |= _reads_in(sub)
    return out


def _writes_in(net: caffe2_pb2.NetDef) -> set[str]:
    out = set()
    for op in net.op:
        out.update(op.output)
        for _, sub in subnets_of(op):
            out |= _writes_in(sub)
    return out


# ---- rules, in docs/fidelity.md order ----------------------------------------------------------
@rule("while-writes-outer-blob", 'While body that writes an outer blob ("Reusage of outer blob name … in Do op")')
def _while_state(net, diff, losses):
    out = []
    for i, op in _ops(net, "While"):
        body = dict(subnets_of(op)).get("loop_net")
        carried = sorted(b for b in set(op.input) & set(op.output) if body is not None and b in _reads_in(body)
                         and b in _writes_in(body) and "workspace" not in b)
        if carried and i in diff:
            out.append(_f("while-writes-outer-blob", i, op, f"the body updates {', '.join(carried)}: Caffe2 refuses "
                          "the gradient (Reusage of outer blob name … in Do op); netviz accumulates per iteration",
                          refused=True))
    return out


@rule("if-then-only-overwrite", "If without else that overwrites a blob")
def _if_then_only(net, diff, losses):
    out, written = [], set()
    for i, op in enumerate(net.op):
        nets = dict(subnets_of(op))
        if op.type == "If" and "else_net" not in nets and i in diff:
            over = sorted(b for b in op.output if b in written and "workspace" not in b)
            if over:
                out.append(_f("if-then-only-overwrite", i, op, f"{', '.join(over)} keep their value when the "
                              "condition is false: Caffe2 refuses the gradient (version error)", refused=True))
        written.update(op.output)
    return out


@rule("if-cond-name-chars", "If gradient's input list built by subtracting a string's characters")
def _if_cond_chars(net, diff, losses):
    out = []
    for i, op in _ops(net, "If"):
        if not op.input or i not in diff:
            continue
        dropped = sorted(b for b in op.input[1:] if len(b) == 1 and b in set(op.input[0]))
        if dropped:
            out.append(_f("if-cond-name-chars", i, op, f"Caffe2's gradient If drops input(s) {', '.join(dropped)} "
                          f"(characters of the condition name '{op.input[0]}')", values_differ=True))
    return out


@rule("set-order", "Set order")
def _set_order(net, diff, losses):
    return [_f("set-order", i, op, "Caffe2 lists this op's gradient inputs/outputs in Python set order; netviz "
               "uses first appearance (same values)") for i, op in _ops(net, ("If", "While", "Do")) if i in diff]


@rule("recycled-do-workspace", "Recycled Do workspaces")
def _recycled_do(net, diff, losses):
    out = []
    for i, op in _ops(net, "While"):
        body = dict(subnets_of(op)).get("loop_net")
        if body is not None and any(o.type == "Do" for o in body.op):
            out.append(_f("recycled-do-workspace", i, op, "a Do in the loop body reuses its workspace each iteration: "
                          "netviz empties it first, Caffe2 keeps the last iteration's local blobs"))
    return out


@rule("inplace-gradient-read", "In-place gradient reads the overwritten input (Mul, Log, Sqr)")
def _inplace_read(net, diff, losses):
    from engine.autodiff.gradient_ir import IR

    ops = [net.op[i] for i in sorted(diff)]
    if not ops:
        return []
    index = sorted(diff)
    try:
        ir = IR(ops, save_inputs=True)
        ir.GetBackwardPass(list(losses) or list(ops[-1].output[:1]))
    except Exception:  # noqa: BLE001 - a net netviz cannot differentiate has nothing to save
        return []
    return [_f("inplace-gradient-read", index[j], net.op[index[j]], f"the gradient reads '{blob}', which this op "
               "overwrites: Caffe2 (and exact mode) use the new value; --fix-caffe2 reads a copy saved before it",
               values_differ=True) for j, blob in sorted(ir.saves)]


@rule("two-char-gradient-name", "Two-character gradient names", whole_net=True)
def _two_char(net, diff, losses):
    # NOTE: only a gradient fed from outside is unpacked: a 2-character forward blob a gradient op
    # also reads (an RNN's "h0") is what every rnn_cell net has, and Caffe2 differentiates those.
    written = _writes_in(net)
    forward_reads = {b for op in net.op if not op.is_gradient_op for b in op.input}
    out = []
    for i, op in enumerate(net.op):
        given = [b for b in op.input if len(b) == 2 and b not in written and b not in forward_reads
                 and op.is_gradient_op]
        if given:
            out.append(_f("two-char-gradient-name", i, op, f"gradient {given[0]!r} has two characters: Caffe2 unpacks "
                          "it as a sparse (indices, values) pair and refuses", refused=True))
    return out


@rule("accumulation-hash-order", "Accumulation order of one op's inputs (hash order)")
def _accumulation(net, diff, losses):
    reads: dict[str, int] = {}
    for i in sorted(diff):
        for b in dict.fromkeys(net.op[i].input):
            reads[b] = reads.get(b, 0) + 1
    out = []
    for i in sorted(diff):
        op = net.op[i]
        fanned = [b for b in dict.fromkeys(op.input) if reads.get(b, 0) > 1]
        if len(fanned) > 1:
            out.append(_f("accumulation-hash-order", i, op, f"the gradient Sums of {', '.join(fanned)} run in "
                          "PYTHONHASHSEED order in Caffe2; netviz uses input order (same values)"))
    return out


@rule("pow-tensor-exponent", "Pow with a tensor exponent")
def _pow(net, diff, losses):
    return [_f("pow-tensor-exponent", i, op, "a tensor exponent: Caffe2 1.10.2 appends Log/Mul for E_grad (older "
               "documents say E_grad = E - 1); netviz follows 1.10.2") for i, op in _ops(net, "Pow")
            if len(op.input) > 1 and i in diff]


@rule("matmul-axis-gradient", "MatMul gradient axis arguments")
def _matmul(net, diff, losses):
    return [_f("matmul-axis-gradient", i, op, "axis_a/axis_b ≠ 1: Caffe2's gradient MatMuls use axis 1 and get the "
               "wrong shape; unsupported", values_differ=True) for i, op in _ops(net, "MatMul")
            if i in diff and (arg_value(op, "axis_a", 1) != 1 or arg_value(op, "axis_b", 1) != 1)]


#: ops whose output is always 2-D (FC / FCTransposed with the default axis=1, Flatten)
_TWO_D = {"FC": 1, "FCTransposed": 1, "Flatten": None}


@rule("spatialbn-is-test-gradient", "SpatialBNGradient in test mode (`is_test=1`)")
def _spatial_bn(net, diff, losses):
    two_d = {op.output[0] for op in net.op if op.type in _TWO_D and op.output
             and (_TWO_D[op.type] is None or arg_value(op, "axis", 1) == 1)}
    found = []
    for i, op in _ops(net, "SpatialBN"):
        if i not in diff:
            continue
        if op.input and op.input[0] in two_d:  # NOTE: known without shapes: the producer's output is 2-D
            found.append(_f("spatialbn-is-test-gradient", i, op, f"{op.input[0]} is 2-D (N x C): Caffe2's gradient "
                            "kernel needs >= 3 dimensions; --fix-caffe2 computes the gradient", refused=True))
        if arg_value(op, "is_test", 0):
            found.append(_f("spatialbn-is-test-gradient", i, op, "is_test=1: Caffe2's gradient reads the running "
                            "variance as a saved inverse std (exact mode does too); --fix-caffe2 differentiates the "
                            "inference formula", values_differ=True))
    return found


@rule("cpu-only-build", "Ops a CPU-only Caffe2 build lacks")
def _cpu_only(net, diff, losses):
    return [_f("cpu-only-build", i, op, "Caffe2's CPU wheel cannot create this op (netviz runs it on its host "
               "stand-in device)", refused=True) for i, op in _ops(net, ("CopyCPUToGPU", "CopyGPUToCPU", "ReluFp16"))]


@rule("random-ops", "Randomness and error texts")
def _random(net, diff, losses):
    return [_f("random-ops", i, op, "training-mode Dropout: netviz's random mask is not Caffe2's (same formula)")
            for i, op in _ops(net, "Dropout") if not arg_value(op, "is_test", 0)]


@rule("recurrent-network", "RecurrentNetwork")
def _recurrent(net, diff, losses):
    return [_f("recurrent-network", i, op, "timesteps run one after another in step workspaces; the gradient "
               "zeroes whole state-gradient buffers (same values)") for i, op in _ops(net, "RecurrentNetwork")]


@rule("zero-gradient-noise", "Gradients that are exactly zero")
def _zero_grad(net, diff, losses):
    bn_inputs = {op.input[0] for op in net.op if op.type == "SpatialBN" and not arg_value(op, "is_test", 0)}
    return [_f("zero-gradient-noise", i, op, f"{op.input[2]}'s gradient is exactly 0 (the training SpatialBN "
               "removes the batch mean): both compute float32 rounding noise")
            for i, op in _ops(net, ("Conv", "FC")) if len(op.input) > 2 and op.output[0] in bn_inputs and i in diff]


def _input_shapes(net: caffe2_pb2.NetDef) -> dict[int, list[tuple | None]]:
    """Statically inferred shapes of each top-level op's inputs (None: not fully known, or inference failed)."""
    from engine.runtime.inference import infer_shapes

    try:
        infos = infer_shapes(net)
    except Exception:  # noqa: BLE001 - a net shape inference cannot follow proves nothing either way
        return {}
    version: dict[str, int] = {}
    out: dict[int, list[tuple | None]] = {}
    for i, op in enumerate(net.op):
        shapes = []
        for b in op.input:
            info = infos.get((b, version.get(b, 0)))
            known = info is not None and info.shape is not None and all(d is not None for d in info.shape)
            shapes.append(tuple(info.shape) if known else None)
        out[i] = shapes
        for b in op.output:
            version[b] = version.get(b, 0) + 1
    return out


@rule("max-min-accumulate-shapes", "Max / Min with inputs of another shape; Accumulate into a blob of another shape")
def _max_min(net, diff, losses):
    # NOTE: Max/Min inputs of the same inferred shape are what Caffe2 computes right (Huber losses of
    # layer models use Min of two equal-shaped blobs); unknown shapes are a note, differing ones differ.
    shapes = _input_shapes(net) if any(op.type in ("Max", "Min") for op in net.op) else {}
    out = []
    for i, op in _ops(net, ("Max", "Min", "Accumulate")):
        if op.type != "Accumulate" and len(op.input) < 2:
            continue
        ins = shapes.get(i, [])
        known = op.type != "Accumulate" and ins and all(s is not None for s in ins)
        if known and len(set(ins)) == 1:
            continue
        out.append(_f("max-min-accumulate-shapes", i, op, "if the inputs' shapes differ, Caffe2 reads past the end "
                      "of the smaller one (Max/Min) or adds to uninitialised memory (Accumulate); netviz raises / "
                      "starts from 0", values_differ=bool(known) or op.type == "Accumulate"))
    return out


@rule("adjoint-gradients", "Conv and image gradients (issue #18)")
def _adjoint(net, diff, losses):
    out = []
    for i, op in enumerate(net.op):
        conv3d = op.type == "Conv" and arg_value(op, "order", "NCHW") == "NHWC" and len(arg_value(op, "kernels", [])) == 3
        if i in diff and (conv3d or op.type == "IntegralImage"):
            out.append(_f("adjoint-gradients", i, op, "Caffe2's CPU gradient is not the adjoint of this op; "
                          + ("netviz's is (in both modes)" if conv3d else "exact mode computes Caffe2's, "
                             "--fix-caffe2 the adjoint"), values_differ=True))
        elif op.type.startswith(("SparseAdagradFusedWithSparseLengthsWeightedSum",
                                 "RowWiseSparseAdagradFusedWithSparseLengthsWeightedSum")):
            out.append(_f("adjoint-gradients", i, op, "Caffe2 weights each index by its position in its segment "
                          "(exact mode too); --fix-caffe2 by the index", values_differ=True))
    return out


@rule("range-tile-args", "Range with a negative integer step; Tile with an int64 `tiles` input")
def _range_tile(net, diff, losses):
    return [_f("range-tile-args", i, op, "Caffe2 miscounts a negative integer step (Range) / reads an int64 tiles "
               "input as (tiles, axis=0) (Tile); netviz follows numpy") for i, op in _ops(net, ("Range", "Tile"))
            if op.type == "Range" or len(op.input) > 1]


@rule("inference-not-run", "Shape inference that differs from Caffe2's own kernels")
def _inference(net, diff, losses):
    notes = {"TopK": "Caffe2's shape inference types the indices int32; its kernel writes int64",
             "GatherRanges": "Caffe2's shape inference sizes the gathered values as DATA; the run gives the "
                             "summed range lengths",
             "LastNWindowCollector": "Caffe2's shape inference gives num_to_collect rows before the window fills"}
    out = [_f("inference-not-run", i, op, notes[op.type]) for i, op in _ops(net, tuple(notes))]
    out += [_f("inference-not-run", i, op, "order without axis: Caffe2's kernel ignores add_axis, its shape "
               "inference adds the axis") for i, op in _ops(net, "Concat") if inference_is_not_run(op)]
    return sorted(out, key=lambda f: f.op_index)


SPARSE_NOTES = {
    "BooleanMask": ("Caffe2's gradient has the mask's shape for rows of several elements; netviz the data's", True),
    "MergeSingleListFeatureTensors": ("Caffe2's gradient drops absent examples' values; netviz keeps zeros", True),
    "MergeSingleMapFeatureTensors": ("Caffe2's gradient drops absent examples' values; netviz keeps zeros", True),
    "APMeter": ("Caffe2 keeps a buffer across runs; netviz scores the current run", False),
    "AccumulateHistogram": ("Caffe2 accumulates over runs; netviz's AccHist equals CurHist", False),
    "MapToKeyValue": ("Caffe2 lists keys in unordered_map bucket order", False),
    "SampleAs": ("Caffe2's CPU wheel has no kernel for it", False),
}
SPARSE_RANDOM = ("WeightedSample", "WeightedMultiSampling", "ReservoirSampling", "SparseDropoutWithReplacement",
                 "SparseItemwiseDropoutWithReplacement", "UniqueUniformFill", "Float16UniformFill",
                 "FloatToFusedRandRowwiseQuantized")


@rule("sparse-ops", "Sparse, segment, sequence, feature and quantised-storage ops (issue #19)")
def _sparse(net, diff, losses):
    out = []
    for i, op in enumerate(net.op):
        if op.type in SPARSE_NOTES:
            msg, grad = SPARSE_NOTES[op.type]
            if not grad or i in diff:
                out.append(_f("sparse-ops", i, op, msg, values_differ=grad))
        elif op.type in SPARSE_RANDOM or op.engine == "GREEDY" and "Fused" in op.type:
            out.append(_f("sparse-ops", i, op, "random or engine-specific: netviz's numbers are not Caffe2's"))
    return out


#: The epsilon Caffe2's FuseConvBN folds with, whatever the SpatialBN says (engine/analysis/transforms.py).
_FUSE_EPSILON = 1e-5


@rule("fuse-conv-bn-epsilon", "FuseConvBN folds with epsilon 1e-5")
def _fuse_epsilon(net, diff, losses):
    conv_out = {op.output[0] for op in net.op if op.type == "Conv" and op.output}
    return [_f("fuse-conv-bn-epsilon", i, op, f"epsilon {arg_value(op, 'epsilon', _FUSE_EPSILON):g}: Caffe2's "
               "FuseConvBN would fold this into the Conv with 1e-5 and change its values (--fix-caffe2 folds "
               "with the op's epsilon)")
            for i, op in _ops(net, "SpatialBN")
            if op.input and op.input[0] in conv_out
            and not math.isclose(arg_value(op, "epsilon", _FUSE_EPSILON), _FUSE_EPSILON, rel_tol=1e-6)]


# ---- entry point ---------------------------------------------------------------------------
def differentiated(net: caffe2_pb2.NetDef, losses: Sequence[str]) -> set[int]:
    """Indices of the forward ops a backward pass of `losses` runs through (all ops without losses)."""
    if not losses:
        return set(range(len(net.op)))
    need, out = set(losses), set()
    for i in range(len(net.op) - 1, -1, -1):
        op = net.op[i]
        if need & set(op.output):
            out.add(i)
            need |= set(op.input)
    return out


def lint_net(net: caffe2_pb2.NetDef, losses: Sequence[str] = (), split: TrainingSplit | None = None) -> list[Finding]:
    """Every op of `net` (its forward section for a training net) where Caffe2 and netviz differ.

    `split`: the net's ``engine.autodiff.training.split_training_net``, when the caller has it already (the
    TUI's session makes it once; on a 10k-op net it takes 0.2 s).

    Examples
    --------
    >>> from engine.caffe2 import core
    >>> n = core.Net("m"); _ = n.Mul(["y", "x"], "y"); _ = n.AveragedLoss("y", "L")
    >>> [f.text() for f in lint_net(n.Proto(), ["L"])]  # doctest: +ELLIPSIS
    ["op #0 Mul: [inplace-gradient-read] (values differ) the gradient reads 'y', which this op overwrites: ..."]
    """
    from engine.autodiff.training import forward_net, split_training_net

    split = split or split_training_net(net)
    fwd = forward_net(net, split)
    losses = list(losses) or split.losses
    diff = differentiated(fwd, losses)
    found = [f for r in RULES if not r.whole_net for f in r.check(fwd, diff, losses)]
    if split.has_backward:  # findings index the forward section: map them back to the net
        where = split.indices("forward")
        found = [Finding(f.rule, where[f.op_index], f.op_type, f.message, f.refused, f.values_differ) for f in found]
    found += [f for r in RULES if r.whole_net for f in r.check(net, set(range(len(net.op))), losses)]
    return sorted(found, key=lambda f: (f.op_index, f.rule))
