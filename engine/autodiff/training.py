"""Training nets: split a net that already holds its backward pass (and optimizer) into sections.

Most Caffe2 nets people debug are training nets: the forward ops, the ops
``AddGradientOperators`` appended (gradient ops, the ``<loss>_autogen_grad`` fill, the
``Sum``/``Concat`` accumulations, the zero fills and ``HasScope`` checks of control-flow
gradients) and an optimizer (``Iter``/``LearningRate`` plumbing and the parameter updates), in
one NetDef.  Differentiating such a net again fails (the updates overwrite parameters the
gradient ops read: "Gradient operator needs input "fc2_w" at version 0 …"), so every command
differentiates only its forward section, and the views show the three sections with each
gradient op paired with its forward op, exactly as for a generated backward pass.
"""
from __future__ import annotations

import re
from collections.abc import Container, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.errors import GradientError
from proto import caffe2_pb2

__all__ = ["FORWARD", "BACKWARD", "OPTIMIZER", "ITERATION_OPS", "UPDATE_OPS", "TrainingSplit", "sections_of",
           "is_gradient_name", "is_gradient_op", "split_training_net", "forward_net", "losses_of", "seeds_of",
           "reordered"]

FORWARD, BACKWARD, OPTIMIZER = "forward", "backward", "optimizer"

ITERATION_OPS = frozenset({"Iter", "AtomicIter", "LearningRate"})
"""Optimizer plumbing: the iteration counter and the learning rate computed from it."""

UPDATE_OPS = frozenset({
    "MomentumSGD", "MomentumSGDUpdate", "SparseMomentumSGDUpdate", "Adagrad", "SparseAdagrad",
    "RowWiseSparseAdagrad", "DecayAdagrad", "Adam", "SparseAdam", "RowWiseSparseAdam", "Ftrl",
    "SparseFtrl", "GFtrl", "Adadelta", "SparseAdadelta", "Wngrad", "SparseWngrad", "RmsProp",
    "YellowFin", "Lars", "Storm", "SparseStorm", "ClipTensorByScaling", "FP16MomentumSGDUpdate",
    "FP32MomentumSGDUpdate", "SparseLpRegularizer", "WeightScale", "LearningRateAdaption"})
"""Ops that only optimizers (``caffe2.python.optimizer``) emit: parameter and state updates."""

_COUNTER = re.compile(r"_\d+(?=/)")
_GRAD_NAME = re.compile(r"_grad(?:$|_|/)|_autogen_grad$|_grad_autosplit_")


def is_gradient_name(name: str) -> bool:
    """Whether `name` is named like a blob the gradient pass writes (``X_grad``,
    ``_X_grad_autosplit_0``, ``loss_autogen_grad``, ``W_grad/_WHILE_ITERATION_GRAD_``)."""
    return bool(_GRAD_NAME.search(name))


FORWARD_GRADIENT_TYPES = frozenset({"StopGradient", "ZeroGradient", "NegateGradient"})
"""Forward ops whose type ends in ``Gradient`` (they shape the backward pass, no maker emits them:
layer_model_helper's BatchLRLoss puts ``StopGradient`` on its example weights)."""


def _maker_type(op_type: str) -> bool:
    """Whether an op type is named like a gradient maker's op (``FCGradient``, not ``StopGradient``)."""
    return op_type.endswith("Gradient") and op_type not in FORWARD_GRADIENT_TYPES


def is_gradient_op(op: caffe2_pb2.OperatorDef) -> bool:
    """Whether `op` is recognisably part of a backward pass on its own (flag, type or output names)."""
    return op.is_gradient_op or _maker_type(op.type) or any(is_gradient_name(o) for o in op.output)


@dataclass
class TrainingSplit:
    """The sections of one net and the forward partner of every backward op.

    Attributes
    ----------
    sections : list of str
        One per op of the net: ``"forward"``, ``"backward"`` or ``"optimizer"``.
    partner : dict
        Backward op index → the index (in the net) of the forward op it differentiates; ``None``
        for the ``<loss>_autogen_grad`` fills and ops made for no single forward op.
    losses : list of str
        The blobs the backward pass was generated for (from its ``<loss>_autogen_grad`` fills).
    paired_by : str
        ``"regenerated"`` when the pairing comes from regenerating the backward pass of the
        forward section (the generated view's pairing), ``"names"`` when from blob names,
        ``"regenerated+names"`` when ops without a generated twin were paired by names.
    """

    sections: list[str]
    partner: dict[int, int | None] = field(default_factory=dict)
    losses: list[str] = field(default_factory=list)
    paired_by: str = "names"
    #: indices of the loss-gradient seeds (``ConstantFill(loss) -> loss_grad``, ``<loss>_autogen_grad``)
    #: that no forward op reads
    seeds: list[int] = field(default_factory=list)

    @property
    def has_backward(self) -> bool:
        """Whether the net holds a backward pass or optimizer (a training net).

        Seeds alone are not one: a net ``FC -> loss1, ConstantFill(loss1) -> loss1_grad, FC -> loss2``
        (how Detectron builds its losses before ``AddGradientOperators``) is differentiated whole, as
        Caffe2 does, its seeds being ops like any other."""
        seeds = set(self.seeds)
        return any(s != FORWARD and i not in seeds for i, s in enumerate(self.sections))

    def program_order(self) -> list[int]:
        """The net's op indices in the order its program runs: forward ops first.

        Detectron's training nets interleave loss-gradient seeds with forward ops (one seed per loss
        as each head is built, then ``AddGradientOperators``); a seed no later forward op reads moves
        to the start of the backward part, so the forward part is every forward op.  Other nets: the
        identity.
        """
        n = len(self.sections)
        seeds = set(self.seeds)
        first = next((i for i, s in enumerate(self.sections) if s != FORWARD and i not in seeds), n)
        last_fwd = max((i for i in range(first) if self.sections[i] == FORWARD), default=-1)
        if not any(i < last_fwd for i in self.seeds):
            return list(range(n))
        moved = [i for i in self.seeds if i < first]
        return [i for i in range(first) if i not in set(moved)] + moved + list(range(first, n))

    def indices(self, section: str) -> list[int]:
        """The op indices of one section, in net order."""
        return [i for i, s in enumerate(self.sections) if s == section]

    def counts(self) -> dict[str, int]:
        """Ops per non-empty section, in forward/backward/optimizer order."""
        out = {s: self.sections.count(s) for s in (FORWARD, BACKWARD, OPTIMIZER)}
        return {s: n for s, n in out.items() if n}


def _classify(ops: Sequence[caffe2_pb2.OperatorDef]) -> list[str]:
    """Sections by seeds (op flags, types, names) spread along the data flow (see module doc)."""
    sections: list[str] = []
    grad_blobs: set[str] = set()
    opt_blobs: set[str] = set()
    for op in ops:
        ins = set(op.input)
        made_by_maker = op.is_gradient_op or _maker_type(op.type)
        if op.type in ITERATION_OPS or op.type in UPDATE_OPS or ins & opt_blobs:
            kind = OPTIMIZER
        elif is_gradient_op(op) or ins & grad_blobs:
            # NOTE: an op no maker made that reads a gradient and a parameter, or overwrites a blob the
            # forward section reads, is an optimizer's (weight decay ``WeightedSum([g, ONE, w, wd], g)``,
            # an update written without LearningRate ``WeightedSum([w, ONE, w_grad, lr], w)``).
            # NOTE: an op that reads gradients but neither a maker nor the accumulation made it is the
            # optimizer's: weight decay, global-norm clipping (seq2seq), data_parallel_model's
            # all-reduce (Sum/Copy of gradients across devices), an update without LearningRate.
            made = made_by_maker or _is_accumulation(op)
            kind = OPTIMIZER if ins & grad_blobs and not made else BACKWARD
        else:
            kind = FORWARD
        (opt_blobs if kind == OPTIMIZER else grad_blobs if kind == BACKWARD else set()).update(op.output)
        sections.append(kind)
    return _pull_feeders(ops, sections)


def _is_accumulation(op: caffe2_pb2.OperatorDef) -> bool:
    """A Sum/Concat the gradient pass added to add up a fanned-out blob's gradients (tagged so by
    Caffe2's ``DoGradientAccumulation``, and by netviz's)."""
    return any(tag.startswith("is_auto_gen_sum_ops") for tag in op.device_option.extra_info)


def _pull_feeders(ops: Sequence[caffe2_pb2.OperatorDef], sections: list[str]) -> list[str]:
    """Forward-looking ops after the first backward op that only feed backward (optimizer) ops
    belong to that section (``HasScope`` before a gradient ``While``; ``ConstantFill`` of ``ONE``)."""
    first = sections.index(BACKWARD) if BACKWARD in sections else len(ops)
    # NOTE: a loss (or any blob) the backward pass differentiates is forward, even when only the
    # backward reads it: Detectron computes its second loss after the first loss's seed.
    differentiated = set(seeds_of(ops)) | {_base_name(o) for op in ops for o in op.output if is_gradient_name(o)}
    for i in range(len(ops) - 1, first, -1):
        if sections[i] != FORWARD:
            continue
        outs = set(ops[i].output)
        if outs & differentiated:
            continue
        readers = {sections[j] for j in range(i + 1, len(ops)) if outs & set(ops[j].input)}
        if len(readers) == 1 and FORWARD not in readers:
            sections[i] = readers.pop()
    return sections


def losses_of(ops: Sequence[caffe2_pb2.OperatorDef]) -> list[str]:
    """Loss blobs a backward pass was made for: inputs of its ``<y>_autogen_grad`` fills, and of
    ``ConstantFill(y) -> y_grad`` seeds a builder made itself (data_parallel_model)."""
    return list(seeds_of(ops))


def seeds_of(ops: Sequence[caffe2_pb2.OperatorDef]) -> dict[str, str]:
    """Loss blob → the gradient blob its backward pass was seeded with."""
    out: dict[str, str] = {}
    for op in ops:
        for o in op.output:
            if o.endswith("_autogen_grad"):
                out.setdefault(op.input[0] if op.input else o[: -len("_autogen_grad")], o)
            elif op.type == "ConstantFill" and op.input and o == op.input[0] + "_grad" and any(
                    a.name == "value" and a.f == 1.0 for a in op.arg):
                out.setdefault(op.input[0], o)
    return out


def _op_key(op: caffe2_pb2.OperatorDef) -> tuple:
    """Type and blob names, without the unique-name counters of generated nets
    (``gradient_loop_cond_net_1/cond`` is ``gradient_loop_cond_net/cond``)."""
    def norm(names: Sequence[str]) -> tuple[str, ...]:
        return tuple(_COUNTER.sub("", n) for n in names)
    return op.type, norm(op.input), norm(op.output)


def _pair_by_regenerating(ops: Sequence[caffe2_pb2.OperatorDef], split: TrainingSplit) -> bool:
    """Regenerate the backward pass of the forward section and pair each backward op that has a
    generated twin as the twin is paired; True when every backward op found one."""
    from engine.autodiff.gradient_ir import IR

    fwd = split.indices(FORWARD)
    if not split.losses:
        return False
    seeds = seeds_of([ops[i] for i in split.indices(BACKWARD)])
    ys = split.losses if all(g.endswith("_autogen_grad") for g in seeds.values()) else seeds
    try:
        ir = IR([ops[i] for i in fwd])
        grad_ops, _ = ir.GetBackwardPass(ys)
    except Exception:  # noqa: BLE001 - any failure means: fall back to names
        return False
    twins: dict[tuple, list[int | None]] = {}
    for g, origin in zip(grad_ops, ir.grad_op_origin):
        twins.setdefault(_op_key(g), []).append(None if origin is None else fwd[origin])
    for i in split.indices(BACKWARD):
        found = twins.get(_op_key(ops[i]))
        if found:
            split.partner[i] = found.pop(0)
    return len(split.partner) == len(split.indices(BACKWARD))


def _base_name(grad: str) -> str:
    """``X_grad`` / ``_X_grad_autosplit_0`` / ``X_autogen_grad`` → ``X``."""
    name = grad[1:] if grad.startswith("_") and "_grad_autosplit_" in grad else grad
    return re.split(r"_autogen_grad$|_grad(?:$|_|/)", name, maxsplit=1)[0]


def _pair_by_names(ops: Sequence[caffe2_pb2.OperatorDef], split: TrainingSplit) -> None:
    """A backward op pairs with the last forward op writing the blob of its first gradient input."""
    writer: dict[str, int] = {}
    for i in split.indices(FORWARD):
        for o in ops[i].output:
            writer[o] = i
    for i in split.indices(BACKWARD):
        op = ops[i]
        if i in split.partner:
            continue
        if any(o.endswith("_autogen_grad") for o in op.output):
            split.partner[i] = None
            continue
        bases = [_base_name(b) for b in op.input if is_gradient_name(b)]
        split.partner[i] = next((writer[b] for b in bases if b in writer), None)


def _seeds(ops: Sequence[caffe2_pb2.OperatorDef], sections: list[str]) -> list[int]:
    """Indices of the backward section's seed ops whose outputs no forward op reads."""
    grads = set(seeds_of([ops[i] for i, s in enumerate(sections) if s == BACKWARD]).values())
    read = {b for op, s in zip(ops, sections) if s == FORWARD for b in op.input}
    return [i for i, (op, s) in enumerate(zip(ops, sections))
            if s == BACKWARD and op.output and set(op.output) <= grads and not set(op.output) & read]


def split_training_net(net: caffe2_pb2.NetDef) -> TrainingSplit:
    """Sections of `net` and the forward partner of each of its backward ops.

    Examples
    --------
    >>> from engine.caffe2 import core
    >>> n = core.Net("t"); y = n.Relu("X", "Y"); loss = n.AveragedLoss(y, "L")
    >>> _ = n.AddGradientOperators([loss])
    >>> s = split_training_net(n.Proto())
    >>> s.sections, s.partner
    (['forward', 'forward', 'backward', 'backward', 'backward'], {2: None, 3: 1, 4: 0})
    """
    ops = list(net.op)
    split = TrainingSplit(_classify(ops))
    split.losses = losses_of(ops[i] for i in split.indices(BACKWARD))
    split.seeds = _seeds(ops, split.sections)
    if split.has_backward:
        if _pair_by_regenerating(ops, split):
            split.paired_by = "regenerated"
        else:
            split.paired_by = "regenerated+names" if split.partner else "names"
            _pair_by_names(ops, split)
    return split


def sections_of(net: caffe2_pb2.NetDef) -> list[str]:
    """Each op's section (FORWARD, BACKWARD or OPTIMIZER), as :func:`split_training_net` gives them, without
    pairing the backward ops (which regenerates the gradient pass: most of its cost; netviz's drawings
    only colour the sections)."""
    return _classify(list(net.op))


def forward_net(net: caffe2_pb2.NetDef, split: TrainingSplit | None = None) -> caffe2_pb2.NetDef:
    """A copy of `net` holding only its forward section (the net itself when it has no other).

    Raises
    ------
    GradientError
        When the net holds backward ops but no forward op.
    """
    split = split or split_training_net(net)
    if not split.has_backward:
        return net
    keep = split.indices(FORWARD)
    if not keep:
        raise GradientError(f"{net.name or 'net'}: every op is a gradient or optimizer op; no forward section")
    out = caffe2_pb2.NetDef()
    out.CopyFrom(net)
    del out.op[:]
    out.op.extend(net.op[i] for i in keep)
    return out


def backward_program(net: caffe2_pb2.NetDef, losses: Sequence[str] | None = None, *,
                     regenerate: bool = False, split: TrainingSplit | None = None) -> tuple[caffe2_pb2.NetDef, list[int | None], list[str]]:
    """The net to step with its backward pass, each op's forward partner after the forward part,
    and the losses.

    A net that holds its backward pass is its own program (unless `regenerate`): its forward part
    ends at its first backward op, and ops after it (backward, optimizer, later forward ops) map
    to their forward partner or ``None``.  Any other net (or with `regenerate`, the forward section
    of a training net) gets the backward pass of `losses` generated, as
    :func:`engine.autodiff.gradient_ir.backward_net`.

    Examples
    --------
    >>> from engine.caffe2 import core
    >>> n = core.Net("t"); y = n.Relu("X", "Y"); loss = n.AveragedLoss(y, "L")
    >>> _ = n.AddGradientOperators([loss])
    >>> prog, origin, losses = backward_program(n.Proto())
    >>> len(prog.op), origin, losses
    (5, [None, 1, 0], ['L'])
    """
    from engine.autodiff.gradient_ir import backward_net

    split = split or split_training_net(net)
    if split.has_backward and not regenerate:
        order = split.program_order()
        if order != list(range(len(order))):  # NOTE: interleaved seeds move behind the forward ops
            net = reordered(net, order)
        at = {old: new for new, old in enumerate(order)}
        first = next((k for k, i in enumerate(order) if split.sections[i] != FORWARD), len(order))
        origin = [split.partner.get(i) for i in order[first:]]
        return net, [None if j is None else at[j] for j in origin], list(losses or split.losses)
    if not losses and split.seeds and not split.has_backward:
        # NOTE: a net holding only seeds is differentiated as Caffe2's AddGradientOperators does with
        # Detectron's {loss: seed} map: the seeds stay where they are and feed the gradient ops.
        ys: Sequence[str] | dict[str, str] = seeds_of([net.op[i] for i in split.seeds])
        out, origin = backward_net(net, ys)
        return out, origin, list(ys)
    losses = list(losses or split.losses)
    if not losses:
        raise GradientError(f"{net.name or 'net'}: name the loss blob to differentiate")
    out, origin = backward_net(forward_net(net, split), losses)
    return out, origin, losses


def reordered(net: caffe2_pb2.NetDef, order: Sequence[int]) -> caffe2_pb2.NetDef:
    """A copy of `net` with its ops in `order` (:meth:`TrainingSplit.program_order`)."""
    out = caffe2_pb2.NetDef()
    out.CopyFrom(net)
    del out.op[:]
    out.op.extend(net.op[i] for i in order)
    return out


def update_ratio(op: caffe2_pb2.OperatorDef, writes: Sequence[tuple[Any, str, Any, Any, Any]],
                 params: Container[str] | None = None) -> float | None:
    """‖ΔW‖/‖W‖ of the parameters `op` overwrote in place (an optimizer update), from the
    debugger's undo writes ``(ws, name, old, old_device, new)``; ``None`` when it updated none.

    `params`: the blobs that can be parameters (the net's external inputs); an in-place
    activation (ResNet's ``Relu`` X -> X) rewrites an activation, not a parameter.

    Gradient blobs updated in place (``Sum`` accumulations, weight decay) are left out: their
    overlay is the gradient norm.  Several parameters: the ratio of the norms over all of them.
    """
    from engine.runtime import device as dev

    inputs = set(op.input)
    delta = base = 0.0
    found = False
    for _, name, old, _, new in writes:
        if name not in inputs or is_gradient_name(name) or getattr(old, "dtype", None) is None \
                or (params is not None and name not in params):
            continue
        if old.dtype.kind != "f" or getattr(new, "shape", None) != old.shape or not old.size or new is old:
            continue  # NOTE: new is old: an RNN state buffer written through a link's view, no update to measure
        xp = dev.array_module(new)
        o, n = xp.asarray(old, dtype=xp.float64), xp.asarray(new, dtype=xp.float64)
        delta, base, found = delta + float(xp.sum((n - o) ** 2)), base + float(xp.sum(o * o)), True
    if not found:
        return None
    return (delta ** 0.5) / (base ** 0.5) if base else float("inf") if delta else 0.0
