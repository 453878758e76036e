"""Backward-pass generation with Caffe2's exact output: ``core.IR`` and ``core.GradientRegistry``.

The IR plays the forward ops to give every blob write a version, then walks them backwards,
asks each op's maker for gradient ops, checks that those ops read blobs at the versions they
need, and accumulates gradients of blobs read more than once (``Sum`` for dense gradients,
two ``Concat`` for sparse ones), renaming earlier outputs to ``_<name>_autosplit_<k>``.

Op lists, blob names, accumulation places and error texts are Caffe2's; errors are one line
(Caffe2's multi-line debug help is kept on the exception as ``.help``).
"""
from __future__ import annotations

import gc
from collections import defaultdict, namedtuple
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from engine.runtime import ops as _ops  # noqa: F401 - fills GRADIENTS
from engine.runtime import control_ops_grad
from engine.runtime.control_ops_grad import kept_by_a_branch
from engine.errors import GradientError
from engine.runtime.grad_makers import (NOT_IMPLEMENTED_YET, SHOULD_NOT_DO_GRADIENT, GradientMakerError, GradientSlice,
                                NoGradientMakerError, is_cc_maker)
from engine.runtime.fidelity import fixes_enabled
from engine.model.opdef import create_operator
from engine.model.optypes import CONTROL_FLOW
from engine.catalogue.registry import GRADIENTS
from proto import caffe2_pb2

__all__ = ["IR", "GradientRegistry", "GradientSlice", "GradientVersionError",
           "SparseDenseMixError", "backward_net"]

OpSSA = namedtuple("OpSSA", ["op", "in_versions", "out_versions", "inputs", "outputs"])
OpSSA.__doc__ = "A played op: versions read and written, and its input/output names as lists."
GradGenMeta = namedtuple("GradGenMeta", ["grad_op", "idx", "gradient", "device_option"])
SparseGradGenMeta = namedtuple("SparseGradGenMeta", ["grad_op_indices", "idx_indices",
                                                     "grad_op_values", "idx_values",
                                                     "gradient", "device_option"])
_new = tuple.__new__  # NOTE: _new(OpSSA, (…)) skips the namedtuple's Python-level __new__ (per op)
AUTOGEN_GRAD_SUFFIX = "_autogen_grad"
IS_AUTO_GEN_SUM_OPS_TAG = "is_auto_gen_sum_ops:1"
ONLY_KEEP_TAG = "only_keep_is_auto_gen_sum_ops_tag:1"
_OUT_MARK = "\x1fnetviz:out\x1f"  # tags in-place outputs when probing which name a maker means
SHAPE_ONLY_INPUTS: dict[str, frozenset[int]] = {
    "AddGradient": frozenset({1, 2}), "SubGradient": frozenset({1, 2}), "DivGradient": frozenset({1}),
    "SumReduceLike": frozenset({1}), "ExpandGradient": frozenset({1}),
    "ReduceSumGradient": frozenset({1}), "ReduceMeanGradient": frozenset({1})}
"""Gradient ops that read these inputs only for their shape (unchanged by an in-place forward op)."""


class GradientVersionError(GradientError):
    """A gradient op needs a blob version that a later (in-place) op overwrote."""

    def __init__(self, message: str, help: str = "", op_index: int | None = None) -> None:
        super().__init__(message)
        self.help, self.op_index = help, op_index


class SparseDenseMixError(GradientError):
    """One blob got both sparse and dense gradients (Caffe2 cannot accumulate those)."""


def _grad_index(g_list: Sequence[Any], name: str) -> int | None:
    """``GetIndexFromGradientList``: position of `name` (dense or a slice part) in `g_list`."""
    for i, g in enumerate(g_list):
        if g == name or (type(g) is GradientSlice and name in (g.indices, g.values)):
            return i
    return None


def _positions(g_list: Sequence[Any]) -> dict[str, int] | None:
    """``{name: _grad_index(g_list, name)}`` for every name in `g_list` (None: odd entries, scan)."""
    if len(g_list) == 1 and type(g_list[0]) is str:
        return {g_list[0]: 0}
    at: dict[str, int] = {}
    for i, g in enumerate(g_list):
        if g is None:
            continue
        t = type(g)
        if t is str:
            at.setdefault(g, i)
        elif t is GradientSlice and type(g.indices) is str and type(g.values) is str:
            at.setdefault(g.indices, i)
            at.setdefault(g.values, i)
        else:
            return None
    return at


def _device_equal(a: caffe2_pb2.DeviceOption, b: caffe2_pb2.DeviceOption) -> bool:
    """``device_option_equal`` ignoring node name and seed: CPU==CPU, else same type... and id."""
    if not a.device_type or not b.device_type:
        return not a.device_type and not b.device_type
    return a.device_id == b.device_id


class IR:
    """Versioned view of a forward op list, and the backward pass built from it.

    ``IS_AUTO_GEN_SUM_OPS_TAG`` / ``ONLY_KEEP_IS_AUTO_GEN_SUM_OPS_TAG``: Caffe2's tag names (without
    the ``:1`` that ``extra_info`` entries carry).

    Examples
    --------
    >>> fwd = [create_operator("Relu", "X", "A"), create_operator("Sigmoid", "X", "B"),
    ...        create_operator("Add", ["A", "B"], "C")]
    >>> ops, grads = IR(fwd).GetBackwardPass(["C"])
    >>> [(o.type, list(o.output)) for o in ops][-2:]
    [('ReluGradient', ['_X_grad_autosplit_0']), ('Sum', ['X_grad'])]
    """

    IS_AUTO_GEN_SUM_OPS_TAG = IS_AUTO_GEN_SUM_OPS_TAG.split(":")[0]
    ONLY_KEEP_IS_AUTO_GEN_SUM_OPS_TAG = ONLY_KEEP_TAG.split(":")[0]

    def __init__(self, operators: Sequence[caffe2_pb2.OperatorDef], save_inputs: bool | None = None) -> None:
        self.ssa: list[OpSSA] = []
        self.forward_ops: list[caffe2_pb2.OperatorDef] = []  # as given (ssa holds Ifs with implicit inputs)
        self.maybe_unchanged: set[tuple[str, int]] = set()  # versions an If may have left equal to the last
        # False: Caffe2's in-place reads (see _saved_input_reads); None: as engine.analysis.lint's mode says
        # (Caffe2-exact unless --fix-caffe2 / engine.analysis.lint.fix_caffe2()).
        self.save_inputs = fixes_enabled() if save_inputs is None else save_inputs
        self.saves: dict[tuple[int, str], caffe2_pb2.OperatorDef] = {}  # (fwd op, blob) -> Copy
        self.reader: dict[str, int] = {}  # blob -> first op reading its current version (none yet: absent)
        self.read_again: dict[tuple[str, int], int] = {}  # (blob, version) read twice or more -> first reader
        self.frontier: defaultdict[str, int] = defaultdict(int)
        self.gradient_frontier: dict[str, int] = {}
        self.gradient_generators: defaultdict[tuple[str, int], list[Any]] = defaultdict(list)  # (blob, version) ->
        self.grad_op_origin: list[int | None] = []  # forward op index of each gradient op
        gc_was_enabled = gc.isenabled()
        gc.disable()  # NOTE: only acyclic tuples/dicts/protos are made; collections cost ~20 % on 100k ops
        try:
            for op in operators:
                self.Play(op)
        finally:
            if gc_was_enabled:
                gc.enable()
        self.SanityCheck(operators)

    def SanityCheck(self, operators: Sequence[caffe2_pb2.OperatorDef]) -> None:
        """Every StopGradient output must be read by some op (else it stops nothing)."""
        read: set[str] | None = None
        for i, op in enumerate(operators):
            if op.type != "StopGradient":
                continue
            if read is None:
                read = {s for played in self.ssa for s in played.inputs}
            if op.output[0] not in read:
                raise GradientError(f"op #{i} StopGradient: StopGradient's output '{op.output[0]}' is "
                                    "orphan. You typically want to specify same input and output for "
                                    "StopGradient.")

    def Play(self, op: caffe2_pb2.OperatorDef) -> None:
        """Record `op`: inputs at the current versions, outputs one version up (new blobs: 0)."""
        i, frontier, reader, again = len(self.ssa), self.frontier, self.reader, self.read_again
        self.forward_ops.append(op)
        played = self._with_kept_inputs(op) if op.type == "If" else op
        inputs, outputs = played.input[:], played.output[:]
        in_versions = {}
        for s in inputs:
            if s in in_versions:  # read twice by this op
                again[s, in_versions[s]] = reader[s]
                continue
            v = in_versions[s] = frontier[s]
            first = reader.setdefault(s, i)
            if first != i:
                again[s, v] = first
        out_versions = {}
        for s in outputs:
            if s in frontier:
                frontier[s] += 1
                reader.pop(s, None)  # a new version: no reader yet
            v = out_versions[s] = frontier[s]
            if s in in_versions and played is not op and s not in op.input:
                self.maybe_unchanged.add((s, v))
        self.ssa.append(_new(OpSSA, (played, in_versions, out_versions, inputs, outputs)))

    def _with_kept_inputs(self, op: caffe2_pb2.OperatorDef) -> caffe2_pb2.OperatorDef:
        """`op`, or an If that a branch may leave an earlier blob unchanged in, with that blob added
        to its inputs: its gradient maker then passes the blob's gradient through (netviz only;
        Caffe2 rejects reads of the earlier version, docs/fidelity.md)."""
        kept = [b for b in kept_by_a_branch(op) if b in self.frontier and b not in op.input]
        if not kept:
            return op
        new = caffe2_pb2.OperatorDef()
        new.CopyFrom(op)
        new.input.extend(kept)
        return new

    def _holds(self, name: str, version: int) -> bool:
        """Whether blob `name` may still hold `version`: no later write, or only Ifs that keep it."""
        return all((name, v) in self.maybe_unchanged for v in range(version + 1, self.frontier[name] + 1))

    def _history(self, name: str, out: bool) -> str:
        """Caffe2's version history of `name` (replayed here: it is needed only for an error)."""
        hist, version = [], None
        for i, played in enumerate(self.ssa):
            for s in played.inputs:
                if s == name:
                    version = version or 0
                    if not out:
                        hist.append((i, version))
            for s in played.outputs:
                if s == name:
                    version = 0 if version is None else version + 1
                    if out:
                        hist.append((i, version))
        kind = "Version (out)" if out else "version (in)"
        lines = [f"{kind} {v} <-- op #{i} {self.ssa[i].op.type}" for i, v in hist]
        return "== Version history of blob [" + name + "]\n" + "\n".join(lines)

    def CheckGradientOperatorInput(self, grad_op_input: str, g_output: Sequence[Any],
                                   fwd_op_idx: int, locally_generated_blobs: set[str]) -> None:
        """Raise unless `grad_op_input` is readable at the version the gradient op needs."""
        forward_op, in_versions, out_versions, _, outputs = self.ssa[fwd_op_idx]
        k = _grad_index(g_output, grad_op_input)
        if k is None and grad_op_input in locally_generated_blobs and grad_op_input not in out_versions \
                and grad_op_input not in in_versions:
            return  # the common case, checked first (same outcome as the branch order below)
        where = f"op #{fwd_op_idx} {forward_op.type}: "
        if k is not None:
            out = outputs[k]
            if out_versions[out] != self.gradient_frontier[out]:
                raise GradientVersionError(
                    f'{where}Gradient name "{grad_op_input}" is expected to correspond to version '
                    f'{out_versions[out]} of "{out}", but currently we have version '
                    f'{self.gradient_frontier[out]}.', self._history(out, True), fwd_op_idx)
        elif grad_op_input in out_versions:
            if not self._holds(grad_op_input, out_versions[grad_op_input]):
                raise GradientVersionError(
                    f'{where}Gradient operator needs output "{grad_op_input}" at version '
                    f'{out_versions[grad_op_input]}, but currently we have version '
                    f'{self.frontier[grad_op_input]}.', self._history(grad_op_input, True), fwd_op_idx)
        elif grad_op_input in in_versions:
            if not self._holds(grad_op_input, in_versions[grad_op_input]):
                raise GradientVersionError(
                    f'{where}Gradient operator needs input "{grad_op_input}" at version '
                    f'{in_versions[grad_op_input]}, but currently we have version '
                    f'{self.frontier[grad_op_input]}.', self._history(grad_op_input, False), fwd_op_idx)
        elif grad_op_input not in locally_generated_blobs:
            raise GradientVersionError(
                f'{where}Blob name "{grad_op_input}" not in the scope of operator: '
                f'{forward_op.type} and is not generated by any of the local gradient operators.', "", fwd_op_idx)

    def BuildGradientGenerators(self, fwd_op_idx: int, gradient_ops: Sequence[caffe2_pb2.OperatorDef],
                                g_output: Sequence[Any], g_input: Sequence[Any],
                                saved: Sequence[str] = (),
                                io: Sequence[tuple[Sequence[str], Sequence[str]]] | None = None) -> None:
        """Check the gradient ops' inputs; record which op (or pass-through) made each input grad.

        `io`, when given, holds each gradient op's input and output names (read from the ops if not).
        """
        forward_op, in_versions, out_versions, inputs, outputs = self.ssa[fwd_op_idx]
        generators, frontier, gradient_frontier = self.gradient_generators, self.frontier, self.gradient_frontier
        again = self.read_again
        local: set[str] = set(saved) if saved else set()
        sparse: dict[str, list[SparseGradGenMeta]] | None = None
        g_out_at, g_in_at = _positions(g_output), _positions(g_input)
        for n, grad_op in enumerate(gradient_ops):
            grad_inputs, grad_outputs = io[n] if io is not None else (grad_op.input, tuple(grad_op.output))
            for s in grad_inputs:
                # NOTE: reads that pass are decided here; the rest get the full check (and its error).
                k = g_out_at.get(s) if g_out_at is not None else _grad_index(g_output, s)
                if k is None:
                    if s in out_versions:
                        if out_versions[s] == frontier[s]:
                            continue
                    elif s in in_versions:
                        if in_versions[s] == frontier[s]:
                            continue
                    elif s in local:
                        continue
                elif out_versions[outputs[k]] == gradient_frontier.get(outputs[k]):
                    continue
                self.CheckGradientOperatorInput(s, g_output, fwd_op_idx, local)
            local.update(grad_outputs)
            for j, output in enumerate(grad_outputs):
                k = g_in_at.get(output) if g_in_at is not None else _grad_index(g_input, output)
                if k is None:
                    continue
                name, g = inputs[k], g_input[k]
                if (name, in_versions[name]) not in again:
                    continue  # NOTE: generators are read only to accumulate a blob read twice or more
                if type(g) is GradientSlice:
                    part = (grad_op, j, None, 0) if g.indices == output else (None, 0, grad_op, j)
                    sparse = {} if sparse is None else sparse
                    sparse.setdefault(name, []).append(SparseGradGenMeta(*part, g, grad_op.device_option))
                else:
                    meta = _new(GradGenMeta, (grad_op, j, g, grad_op.device_option))
                    generators[name, in_versions[name]].append(meta)
        for name, parts in (sparse or {}).items():
            generators[name, in_versions[name]].append(_merge_sparse(parts))
        for name, g in zip(inputs, g_input):
            if g is None:
                continue
            version = gradient_frontier[name] = in_versions[name]
            if not g or (name, version) not in again:
                continue
            if type(g) is GradientSlice:
                if g.indices not in local and g.values not in local:
                    generators[name, version].append(SparseGradGenMeta(None, 0, None, 0, g, forward_op.device_option))
            elif g not in local:
                generators[name, version].append(_new(GradGenMeta, (None, 0, g, forward_op.device_option)))

    def DoGradientAccumulation(self, fwd_op_idx: int) -> tuple[list[caffe2_pb2.OperatorDef], dict[str, Any]]:
        """Sum (or Concat) the gradients of each input whose earliest reader is this op."""
        _, in_versions, _, inputs, _ = self.ssa[fwd_op_idx]
        sum_ops: list[caffe2_pb2.OperatorDef] = []
        grad_map: dict[str, Any] = {}
        again = self.read_again
        # NOTE: Caffe2 iterates set(op.input) (hash order); we use input order, deterministically.
        for name in (dict.fromkeys(inputs) if len(inputs) > 1 else inputs):
            key = (name, in_versions[name])
            if again.get(key) != fwd_op_idx:
                continue
            generators = self.gradient_generators.get(key, [])
            if not self._verify_generators(name, generators):
                continue
            ops, grad_map[name] = _make_sum_ops(name, generators)
            sum_ops.extend(ops)
        return sum_ops, grad_map

    @staticmethod
    def _verify_generators(name: str, generators: list[Any]) -> bool:
        if len({type(g) for g in generators}) > 1:
            raise SparseDenseMixError(f"Gradients for param ''{name}'' failed to verify: Automatic "
                                      "aggregation of a mix of sparse and dense gradients is not "
                                      "supported yet")
        if len(generators) < 2:
            return False
        first = generators[0].device_option
        if not all(_device_equal(g.device_option, first) for g in generators[1:]):
            raise GradientError(f"Gradients for param ''{name}'' failed to verify: Unexpected "
                                "behavior: not all grad ops have the same device option.")
        return True

    def _init_gradients(self, ys: Mapping[Any, Any]) -> tuple[dict[str, Any], list[caffe2_pb2.OperatorDef]]:
        input_to_grad: dict[str, Any] = {}
        ops: list[caffe2_pb2.OperatorDef] = []
        for y, g in ys.items():
            y = str(y)
            if g is None:
                fill = create_operator("ConstantFill", [y], [y + AUTOGEN_GRAD_SUFFIX], value=1.0)
                ops.append(fill)
                g = fill.output[0]
                self.gradient_generators[y, self.frontier[y]].append(
                    GradGenMeta(fill, 0, g, fill.device_option))
            input_to_grad[y] = (GradientSlice(str(g[0]), str(g[1])) if isinstance(g, GradientSlice)
                                else str(g))
        return input_to_grad, ops

    def _generate_for_op(self, i: int, input_to_grad: dict[str, Any]) -> list[caffe2_pb2.OperatorDef]:
        forward_op, in_versions, out_versions, inputs, outputs = self.ssa[i]
        g_output = [input_to_grad.get(outputs[0])] if len(outputs) == 1 else [input_to_grad.get(s) for s in outputs]
        if g_output.count(None) == len(g_output) and forward_op.type != "ZeroGradient":
            return []
        fast = getattr(GRADIENTS.get(forward_op.type), "fast", None)
        made = fast(forward_op, g_output, inputs, outputs) if fast is not None else None
        if made is None:
            (grad_ops, g_input), io = GradientRegistry.GetGradientForOp(forward_op, g_output, op_index=i), None
        else:
            grad_ops, g_input, io = made  # NOTE: the same ops; io: their input/output name lists
        in_place = not out_versions.keys().isdisjoint(in_versions)
        saved = self._read_saved_inputs(i, g_output, grad_ops, io) if self.save_inputs and in_place else []
        self.BuildGradientGenerators(i, grad_ops, g_output, g_input, saved, io)
        for name, grad in zip(inputs, g_input):
            # A None never erases a known gradient, except of an in-place input (newer version).
            if grad is not None or name not in input_to_grad or name in outputs:
                input_to_grad[name] = grad
        return grad_ops

    def _read_saved_inputs(self, i: int, g_output: Sequence[Any], grad_ops: list[caffe2_pb2.OperatorDef],
                           io: list[tuple[list[str], list[str]]] | None = None) -> list[str]:
        """Point reads of an input that op `i` overwrites in place at a copy saved before op `i`.

        Caffe2 checks such a name as the op's *output* and so reads the new value (``y = Mul(y, x)``,
        ``X = Log(X)``: docs/fidelity.md).  A maker names input and output alike, so it is asked
        again with the in-place outputs marked: a name still unmarked there means the input.
        Reads only for the shape (:data:`SHAPE_ONLY_INPUTS`) keep Caffe2's op list.
        """
        op, _, _, inputs, outputs = self.ssa[i]
        inplace = set(inputs).intersection(outputs)
        names = [g.input for g in grad_ops] if io is None else [ins for ins, _ in io]
        reads = [(j, p) for j, g in enumerate(grad_ops) for p, s in enumerate(names[j])
                 if s in inplace and p not in SHAPE_ONLY_INPUTS.get(g.type, ())]
        if not reads or op.type in CONTROL_FLOW:  # control ops keep their own snapshots
            return []
        kinds = getattr(GRADIENTS.get(op.type), "input_kinds", None)
        if kinds is not None and len(grad_ops) == 1 and op.type not in GradientRegistry.gradient_registry_:
            # NOTE: a simple() maker names its one op's inputs statically: what the probe finds.
            reads, marked = [(j, p) for j, p in reads if kinds[p] != "O"], None
        else:
            probe = caffe2_pb2.OperatorDef()
            probe.CopyFrom(op)
            probe.output[:] = [o + _OUT_MARK if o in inplace else o for o in outputs]
            try:
                marked, _ = GradientRegistry.GetGradientForOp(probe, g_output)
            except Exception:  # noqa: BLE001 - a maker that rejects the probe: Caffe2's reads
                return []
            if [_unmarked(g) for g in marked] != [g.SerializeToString(deterministic=True) for g in grad_ops]:
                return []  # the maker depends on being in place (Pow): leave it as Caffe2 has it
        saved = []
        for j, p in reads:
            name = grad_ops[j].input[p]
            if marked is not None and marked[j].input[p] != name:
                continue  # the output, which is current
            copy = self.saves.get((i, name))
            if copy is None:
                copy = self.saves[(i, name)] = caffe2_pb2.OperatorDef(
                    type="Copy", input=[name], output=[f"_{name}_saved_{i}"], name="")
                if op.HasField("device_option"):
                    copy.device_option.CopyFrom(op.device_option)
            grad_ops[j].input[p] = copy.output[0]
            if io is not None:
                io[j][0][p] = copy.output[0]
            saved.append(copy.output[0])
        return saved

    def ForwardWithSaves(self) -> tuple[list[caffe2_pb2.OperatorDef], list[int]]:
        """The forward ops with each saving ``Copy`` just before the op that overwrites the blob,
        and the new position of every forward op (the same list when nothing is saved)."""
        before: defaultdict[int, list[caffe2_pb2.OperatorDef]] = defaultdict(list)
        for (i, _), copy in self.saves.items():
            before[i].append(copy)
        ops, where = [], []
        for i, op in enumerate(self.forward_ops):
            ops.extend(before.get(i, ()))
            where.append(len(ops))
            ops.append(op)
        return ops, where

    def GetBackwardPass(self, ys: Sequence[Any] | Mapping[Any, Any]) -> tuple[list[caffe2_pb2.OperatorDef], dict[str, Any]]:
        """The gradient ops of `ys` and the map blob -> gradient (str or GradientSlice).

        `ys` is a list (gradients auto-filled with 1.0 as ``<y>_autogen_grad``) or a dict
        ``{y: gradient blob | GradientSlice | None}``.  Gradient ops that need an input an op
        overwrote in place read ``_<blob>_saved_<i>``: run :meth:`ForwardWithSaves` as the forward.
        """
        if isinstance(ys, list):
            ys = dict.fromkeys(ys)
        elif not isinstance(ys, dict):
            raise TypeError("ys should either be a list or a dict.")
        n, seen = len(self.ssa), set()
        for y in ys:
            y = str(y)
            v = self.gradient_frontier[y] = self.frontier[y]
            first = self.reader.setdefault(y, n)  # the backward pass reads each y once more
            if first != n or y in seen:
                self.read_again[y, v] = first
            seen.add(y)
        input_to_grad, all_ops = self._init_gradients(ys)
        origin = self.grad_op_origin = [None] * len(all_ops)
        gc_was_enabled = gc.isenabled()
        gc.disable()  # NOTE: see __init__
        sums_at = set(self.read_again.values())  # the ops that DoGradientAccumulation
        try:
            for i in range(len(self.ssa) - 1, -1, -1):
                ops = self._generate_for_op(i, input_to_grad)
                all_ops += ops
                n = len(ops)
                if i in sums_at:
                    sum_ops, grad_map = self.DoGradientAccumulation(i)
                    input_to_grad.update(grad_map)
                    all_ops += sum_ops
                    n += len(sum_ops)
                origin += [i] * n
        finally:
            if gc_was_enabled:
                gc.enable()
        return all_ops, {k: v for k, v in input_to_grad.items() if v is not None}


def _unmarked(op: caffe2_pb2.OperatorDef) -> bytes:
    """`op` with the in-place output marks removed, serialized for comparison."""
    op = caffe2_pb2.OperatorDef.FromString(op.SerializeToString())
    op.input[:] = [s.replace(_OUT_MARK, "") for s in op.input]
    op.output[:] = [s.replace(_OUT_MARK, "") for s in op.output]
    return op.SerializeToString(deterministic=True)


def _merge_sparse(parts: list[SparseGradGenMeta]) -> SparseGradGenMeta:
    """Join the indices half and the values half of one sparse gradient (``AppendSparseGenerators``)."""
    if len(parts) == 1:
        return parts[0]
    (a_i, ai, a_v, av, g, dev), (b_i, bi, b_v, bv, _, _) = parts
    return SparseGradGenMeta(a_i or b_i, ai + bi, a_v or b_v, av + bv, g, dev)


def _sum_output_name(generators: list[Any], name: str) -> str:
    """``_GetSumOpOutputName``: the first generator op's output (sparse: suffix removed)."""
    for g in generators:
        if type(g) is GradGenMeta:
            if g.grad_op is not None:
                return g.grad_op.output[g.idx]
        elif g.grad_op_indices is not None:
            return g.grad_op_indices.output[g.idx_indices].removesuffix("_indices")
        elif g.grad_op_values is not None:
            return g.grad_op_values.output[g.idx_values].removesuffix("_values")
    return name + "_grad"


def _autosplit(grad_op: caffe2_pb2.OperatorDef, idx: int, cnt: int) -> tuple[str, int]:
    """``_DisambiguateGradOpOutput``: rename an emitted output to ``_<old>_autosplit_<cnt>``."""
    new = f"_{grad_op.output[idx]}_autosplit_{cnt}"
    if grad_op.type == "If":  # the branch ops writing that output are renamed too
        from engine.runtime.control_ops_grad import disambiguate_grad_if_op_output  # noqa: PLC0415

        disambiguate_grad_if_op_output(grad_op, idx, new)
    grad_op.output[idx] = new
    return new, cnt + 1


def _check_conflict(out: str, g: str) -> None:
    if out == str(g):
        raise GradientError("The gradient output of empty gradient op can not be the same as the "
                            "normal name of the current input gradient.")


def _make_sum_ops(name: str, generators: list[Any]) -> tuple[list[caffe2_pb2.OperatorDef], Any]:
    out = _sum_output_name(generators, name)
    make = _dense_sum if type(generators[0]) is GradGenMeta else _sparse_sum
    ops, g = make(generators, out)
    # NOTE: ListFields()/ByteSize() first: `in extra_info` and CopyFrom cost 3-5x more, and are no-ops
    # on the usual empty option.
    only_tag = any(d.ListFields() and ONLY_KEEP_TAG in d.extra_info for d in (g.device_option for g in generators))
    first = generators[0].device_option
    for op in ops:
        dev = op.device_option
        if not only_tag and first.ByteSize():
            dev.CopyFrom(first)
        dev.extra_info.append(IS_AUTO_GEN_SUM_OPS_TAG)
    return ops, g


def _dense_sum(generators: list[GradGenMeta], out: str) -> tuple[list[caffe2_pb2.OperatorDef], str]:
    inputs, cnt, first = [], 0, True
    for grad_op, idx, g, _ in generators:
        if grad_op is None:
            _check_conflict(out, g)
            inputs.append(str(g))
        elif first:
            first = False
            inputs.append(grad_op.output[idx])
        else:
            new, cnt = _autosplit(grad_op, idx, cnt)
            inputs.append(new)
    if out in inputs:  # NOTE: Sum is in-place only on input 0.
        k = inputs.index(out)
        inputs[0], inputs[k] = inputs[k], inputs[0]
    # NOTE: CreateOperator("Sum", …, device_option=DeviceOption()); _make_sum_ops fills the option.
    op = caffe2_pb2.OperatorDef()
    op.type, op.name = "Sum", ""
    op.input.extend(inputs)
    op.output.append(out)
    return [op], out


def _sparse_sum(generators: list[SparseGradGenMeta], out: str) -> tuple[list[caffe2_pb2.OperatorDef], GradientSlice]:
    indices, values, ci, cv = [], [], 0, 0
    for op_i, idx_i, op_v, idx_v, g, _ in generators:
        if op_i is not None:
            new, ci = _autosplit(op_i, idx_i, ci)
            indices.append(new)
        else:
            _check_conflict(out, g.indices)
            indices.append(g.indices)
        if op_v is not None:
            new, cv = _autosplit(op_v, idx_v, cv)
            values.append(new)
        else:
            _check_conflict(out, g.values)
            values.append(g.values)
    dev = caffe2_pb2.DeviceOption()
    ops = [create_operator("Concat", indices, [out + "_indices_concat", out + "_indices_concat_split"],
                           device_option=dev, axis=0),
           create_operator("Concat", values, [out + "_values_concat", out + "_values_concat_split"],
                           device_option=dev, axis=0)]
    return ops, GradientSlice(out + "_indices_concat", out + "_values_concat")


class GradientRegistry:
    """Python-registered makers over the C++-style table ``engine.catalogue.registry.GRADIENTS``.

    As in Caffe2, a C++-style maker is tried first; if it fails (or none exists) a maker
    registered with :meth:`RegisterGradient` is used; else the C++ error is raised.
    """

    gradient_registry_: dict[str, Callable[..., Any]] = {}

    @classmethod
    def RegisterGradient(cls, op_type: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator registering ``maker(op, g_output) -> (grad_ops, g_input)`` for `op_type`."""
        def wrapper(func: Callable[..., Any]) -> Callable[..., Any]:
            cls.gradient_registry_[op_type] = func
            if not is_cc_maker(GRADIENTS.get(op_type)):
                GRADIENTS[op_type] = func
            return func
        return wrapper

    @classmethod
    def GetGradientForOp(cls, op: caffe2_pb2.OperatorDef, g_output: Sequence[Any],
                         op_index: int | None = None) -> tuple[list[caffe2_pb2.OperatorDef], list[Any]]:
        """``(grad_ops, g_input)`` for one forward op; errors name the op type (and index)."""
        maker = GRADIENTS.get(op.type)
        try:
            if maker is None:
                raise NoGradientMakerError(f"Gradient maker for operator {op.type} not implemented.")
            if not is_cc_maker(maker):
                return _as_list(maker(op, g_output))
            if maker is not SHOULD_NOT_DO_GRADIENT and maker is not NOT_IMPLEMENTED_YET:
                _verify_schema(op)  # those two markers override Get(), so Caffe2 never runs VerifyOp
            return maker(op, g_output)
        except GradientMakerError as e:
            fallback = cls.gradient_registry_.get(op.type)
            if fallback is not None and fallback is not maker:
                return _as_list(fallback(op, g_output))
            raise _with_context(e, op.type, op_index) from e

    @classmethod
    def GetBackwardPass(cls, operators: Sequence[caffe2_pb2.OperatorDef],
                        ys: Sequence[Any] | Mapping[Any, Any]) -> tuple[list[caffe2_pb2.OperatorDef], dict[Any, Any]]:
        """``IR(operators).GetBackwardPass(ys)``; ``core.GradientRegistry`` hands the map back as Caffe2's
        BlobReferences (:mod:`engine.caffe2.core`, the API face)."""
        return IR(operators).GetBackwardPass(ys)


def _verify_schema(op: caffe2_pb2.OperatorDef) -> None:
    """Caffe2's GradientMakerBase::VerifyOp: a C++ maker refuses an op failing its schema (a maker error,
    so a Python registration for the type is tried next, as Caffe2's GetGradientForOp does)."""
    from engine.catalogue.schema import violations
    found = [v for v in violations(op) if "is not a Caffe2 op" not in v]
    if found:
        raise GradientMakerError(f"(GradientMaker) Operator def did not pass schema checking: {found[0]}")


def _as_list(result: tuple[Any, list[Any]]) -> tuple[list[caffe2_pb2.OperatorDef], list[Any]]:
    ops, g_input = result
    return ([] if ops is None else list(ops) if isinstance(ops, (list, tuple)) else [ops]), g_input


def _with_context(e: GradientMakerError, op_type: str, op_index: int | None) -> GradientMakerError:
    msg = e.caffe2_message
    at = f" (op #{op_index})" if op_index is not None else ""
    if isinstance(e, NoGradientMakerError):
        text = f"No gradient registered for op type '{op_type}'{at}: {msg}"
    else:
        text = f"Exception when creating gradient for [{op_type}]{at}: {msg}"
    err = type(e)(text, msg)
    err.op_type, err.op_index = op_type, op_index
    return err


def backward_net(net: caffe2_pb2.NetDef, loss_blobs: Sequence[Any] | Mapping[Any, Any], *,
                 fix_caffe2: bool | None = None) -> tuple[caffe2_pb2.NetDef, list[int | None]]:
    """A copy of `net` with the backward pass of `loss_blobs` appended, and each grad op's origin.

    Returns
    -------
    (NetDef, list)
        The list has one entry per appended op: the index (in the returned net) of the forward
        op it was made for (accumulation ops: the op after whose gradients they run), ``None``
        for the ``<y>_autogen_grad`` fills.  It lives outside the proto, which Caffe2 reads
        unchanged.  The forward part is `net`'s ops, plus a ``Copy`` to ``_<blob>_saved_<i>``
        before each op that overwrites in place an input its gradient needs (Caffe2 reads the
        new value there), so it has ``len(out.op) - len(list)`` ops.  The saves are made with
        ``fix_caffe2=True`` (default: :func:`engine.runtime.fidelity.fixes_enabled`, Caffe2-exact unless
        ``--fix-caffe2`` or ``with engine.runtime.fidelity.fix_caffe2():``).

    Examples
    --------
    >>> net = caffe2_pb2.NetDef(op=[create_operator("Relu", "X", "Y")])
    >>> out, origin = backward_net(net, ["Y"])
    >>> [o.type for o in out.op], origin
    (['Relu', 'ConstantFill', 'ReluGradient'], [None, 0])
    """
    ir = IR(net.op, save_inputs=fix_caffe2)
    grad_ops, _ = ir.GetBackwardPass(loss_blobs)
    fwd, where = ir.ForwardWithSaves()
    out = caffe2_pb2.NetDef()
    out.CopyFrom(net)
    if len(fwd) != len(net.op):
        del out.op[:]
        out.op.extend(fwd)
    out.op.extend(grad_ops)
    return out, [None if i is None else where[i] for i in ir.grad_op_origin]


def _subnet_backward(ops: Sequence[caffe2_pb2.OperatorDef], init: dict[str, str]
                     ) -> tuple[list[caffe2_pb2.OperatorDef], dict[str, Any]]:
    """A subnet's backward pass, for the Do / If / While makers of the runtime's control family.

    NOTE: no saves of in-place inputs in subnets (Caffe2's reads; docs/fidelity.md)."""
    return IR(ops, save_inputs=False).GetBackwardPass(init)


control_ops_grad.SUBNET_BACKWARD[:] = [_subnet_backward]  # the makers sit below this layer; it lends them the IR
