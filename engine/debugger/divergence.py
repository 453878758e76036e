"""The divergence localizer: run two sides of a net op by op and name the op whose OWN error starts
the difference, not the last op that inherited it.

A side is a model (predict + init net) run in a setting: a device and netviz's Caffe2-fix switch.
Two sides may hold two model files (an epsilon changed), two init nets (checkpoints), or one model
in two settings (``--fix-caffe2`` on one side, CPU against GPU).  Each op's row holds

- ``out``: how far side B's output is from side A's (what a per-layer compare reports);
- ``own``: the op re-run in side B's setting (B's op def, device, fix switch, and B's parameters:
  every blob no earlier op wrote) on side A's inputs, compared with side A's output: the error the
  op adds by itself;
- ``inherited``: how far the op's inputs made by earlier ops already were apart when it ran.

The culprit is the first op whose own error exceeds the tolerance; later ops may show a larger
``out`` but an own error of float rounding.  Errors are ``max|a - b| / max(1, max|a|)``: relative to
the value's largest magnitude, absolute below 1, so a near-zero element's large relative difference
does not read as alarming.  A control-flow op (If, While, Do) is re-run whole, subnets included.
"""
from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from engine.runtime import blocking, executor
from engine.runtime import device as dev
from engine.runtime.fidelity import fix_caffe2
from engine.runtime.workspace import Workspace
from engine.debugger.debugger import Debugger
from engine.errors import ExecutionError
from engine.model.modelio import Model
from engine.model.ssa import get_ssa
from proto import caffe2_pb2

__all__ = ["Side", "Trace", "OpDivergence", "Divergence", "run_side", "localize", "diverge", "value_error",
           "side_by_side", "op_values"]

#: default tolerance of an op's error: float32 rounding amplified by a deep net stays well below it
DEFAULT_TOL = 1e-4


@dataclass(frozen=True)
class Side:
    """One run of a net: its model and the setting it runs in."""

    model: Model
    device: str = "cpu"
    fix_caffe2: bool = False
    label: str = "A"

    def setting(self) -> Any:
        """The context the side's kernels run in (netviz's Caffe2 fixes on or off)."""
        return fix_caffe2(self.fix_caffe2)


@dataclass
class Trace:
    """A side's run: the program of top-level ops, the values before the first op, each op's outputs
    (host copies), and per blob the ops that wrote it (for a blob's value before op i)."""

    side: Side
    net: caffe2_pb2.NetDef
    start: dict[str, Any]
    start_devices: dict[str, int]
    outputs: list[dict[str, Any]]
    bind_device: str | None
    writes: dict[str, list[int]] = field(default_factory=dict)
    #: the run's random source before each op (a random op re-run alone draws the same numbers)
    rng_states: list[dict[str, Any]] = field(default_factory=list)
    #: parameters the run made up (seeded random values: no init net made them)
    synthesized: tuple[str, ...] = ()
    #: the run shows only some values (ONNX Runtime: those the export names): a value it lacks is
    #: not compared (``-``), where a netviz side lacking an output differs from one that has it
    partial: bool = False

    def made_before(self, name: str, i: int) -> bool:
        """Whether an op before op `i` wrote `name` (a parameter or a feed is part of the setting)."""
        return bisect.bisect_left(self.writes.get(name, []), i) > 0

    def before(self, name: str, i: int) -> Any:
        """Blob `name` as op `i` read it: the last earlier write, else its start value (None: absent, or
        a write a partial side does not show)."""
        ops = self.writes.get(name, [])
        k = bisect.bisect_left(ops, i)
        return self.outputs[ops[k - 1]].get(name) if k else self.start.get(name)


@dataclass(frozen=True, slots=True)
class OpDivergence:
    """One op's row: where it is in side A (and B), and its output, own and inherited errors
    (NaN where a side lacks the op or the value)."""

    index: int
    index_b: int | None
    op_type: str
    name: str
    out: float
    own: float
    inherited: float
    blob: str
    note: str = ""


@dataclass(frozen=True)
class Divergence:
    """Every op's row in side A's order and the culprit (the first op whose own error exceeds `tol`)."""

    rows: tuple[OpDivergence, ...]
    tol: float
    only_b: tuple[int, ...] = ()
    nonfinite: tuple[str, ...] = ()  # each side's first NaN/Inf, back to its origin (engine.debugger.provenance)
    #: the culprit's worst output: (blob, side A's value, side B's re-run of it on A's inputs)
    culprit_values: tuple[str, Any, Any] | None = None
    #: a culprit control op's path down to the op of its subnet that makes the error (engine.debugger.descend)
    inside: tuple[str, ...] = ()
    #: the two runs compared (side A, side B): what :mod:`engine.debugger.descend` looks into
    traces: tuple[Any, ...] = field(default=(), repr=False, compare=False)

    def culprit_detail(self) -> list[str]:
        """Where the culprit's output differs most: side A's value, B's re-run and the difference."""
        if self.culprit_values is None:
            return []
        blob, a, b = self.culprit_values
        return [f"op #{self.culprit.index} output '{blob}', where side B's re-run differs most:", *side_by_side(a, b)]

    @property
    def differs(self) -> bool:
        """Whether any op's output, or own error, is over the tolerance (``netviz diff`` exits 1)."""
        return any(r.out > self.tol or r.own > self.tol for r in self.rows)

    @property
    def only_a(self) -> tuple[int, ...]:
        """Side A's ops that match no op of B (their rows are NaN: nothing was compared)."""
        return tuple(r.index for r in self.rows if r.index_b is None)

    @property
    def compared(self) -> int:
        """How many ops were compared: those of A that align with an op of B."""
        return len(self.rows) - len(self.only_a)

    @property
    def culprit(self) -> OpDivergence | None:
        return next((r for r in self.rows if r.own > self.tol), None)

    def culprit_line(self) -> str:
        """``culprit: op #N Type 'name': own error E (inherited I)``, or what was found instead."""
        c = self.culprit
        if c is not None:
            return (f"culprit: op #{c.index} {c.op_type} '{c.name}': own error {c.own:.3g} "
                    f"(inherited {c.inherited:.3g})"
                    + "".join(f"; in its {step}" for step in self.inside))
        over = [r for r in self.rows if r.out > self.tol]
        if over:
            why = (f"side B's ops {', '.join(f'#{j}' for j in self.only_b[:5])} match no op of A: look there first"
                   if self.only_b else "rounding that grew")
            return (f"no culprit: no op's own error exceeds {self.tol:g}; {len(over)} ops' outputs differ by more "
                    f"({why}), first op #{over[0].index} {over[0].op_type}")
        if self.only_a:  # NOTE: unaligned ops were never compared: no clean bill for them
            return (f"no culprit among the {self.compared} ops that align; {len(self.only_a)} ops of A and "
                    f"{len(self.only_b)} of B match no op of the other side (the nets do not align op by op)")
        return f"no culprit: all {len(self.rows)} ops within tolerance {self.tol:g}"

    def to_json(self) -> dict[str, Any]:
        nan = lambda x: None if x != x else "inf" if x == float("inf") else x  # noqa: E731 - JSON has no NaN, no inf
        c = self.culprit
        return {"tol": self.tol, "culprit": None if c is None else {"op": c.index, "type": c.op_type, "name": c.name,
                                                                     "own": nan(c.own), "inherited": nan(c.inherited),
                                                                     "inside": list(self.inside)},
                "summary": self.culprit_line(), "detail": self.culprit_detail(), "only_in_b": list(self.only_b),
                "nonfinite": list(self.nonfinite),
                "ops": [{"op": r.index, "op_b": r.index_b, "type": r.op_type, "name": r.name, "blob": r.blob,
                         "out": nan(r.out), "own": nan(r.own), "inherited": nan(r.inherited), "note": r.note}
                        for r in self.rows]}


def value_error(a: Any, b: Any) -> float:
    """``max|a - b| / max(1, max|a|)`` of two values (0 for NaN in both; inf for another shape or a
    NaN on one side; strings: 0 when equal, else inf; other objects, such as scopes: 0).

    Examples
    --------
    >>> round(value_error(np.array([1e-3, 200.0]), np.array([1.1e-3, 200.0])), 12)
    5e-07
    """
    if a is None or b is None:
        return 0.0 if a is b else float("inf")
    na, nb = _numeric(a), _numeric(b)
    if na is None and nb is None:  # NOTE: scopes, queues, C++ objects: not values to compare
        return 0.0 if _same(a, b) else float("inf")
    if na is None or nb is None:
        return float("inf")
    a, b = na, nb
    if a.shape != b.shape:
        return float("inf")
    if a.size == 0:
        return 0.0
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        both = np.isnan(a64) & np.isnan(b64) | (np.isinf(a64) & (a64 == b64))
        err = np.where(both, 0.0, np.abs(a64 - b64))
    err = np.where(np.isnan(err), np.inf, err)
    finite = np.abs(a64[np.isfinite(a64)])
    return float(err.max() / max(1.0, float(finite.max(initial=0.0))))


def _numeric(v: Any) -> np.ndarray | None:
    if hasattr(v, "data") and hasattr(v, "scale") and hasattr(v.data, "dtype"):  # an Int8 blob: its data
        v = v.data
    if not hasattr(v, "dtype") or not hasattr(v, "shape") or v.dtype.kind not in "biuf":
        return None
    return np.asarray(dev.to_host(v))


def _same(a: Any, b: Any) -> bool:
    """Strings and bytes compare by value; any other object (one numeric, one not) only by identity."""
    if isinstance(a, (bytes, str)) or isinstance(b, (bytes, str)):
        return a == b
    return not isinstance(a, np.ndarray) and not isinstance(b, np.ndarray) or bool(np.array_equal(a, b))


def _host_copy(v: Any) -> Any:
    """A host copy of an array (an Int8 tensor stays one, with its scale and zero point); other objects as they are."""
    if hasattr(v, "scale") and hasattr(v, "data") and hasattr(v, "copy"):
        return v.copy()
    if hasattr(v, "shape") and hasattr(v, "dtype"):
        return np.array(dev.to_host(v), copy=True)
    return v


def run_side(side: Side, feeds: Mapping[str, Any] | None = None, *, loss: str | None = None,
             synthesize_params: bool = False, param_width: int = 16, seed: int = 0) -> Trace:
    """Run `side` top-level op by op (its backward pass too when `loss` is given), keeping every
    op's outputs.  Raises ExecutionError naming the side when an op fails."""
    with side.setting():
        dbg = Debugger(side.model, feeds, device=side.device, loss=loss, record_stats=False, budget_bytes=0,
                       keep_budget=0, synthesize_params=synthesize_params, param_width=param_width, seed=seed)
        if loss is not None:
            dbg.backward()
        net, ws = dbg._program(), dbg.ws
        trace = Trace(side, net, {k: _host_copy(v) if side.device == "cpu" else v for k, v in ws.values.items()},
                      dict(ws.devices), [], dbg._bind_device, synthesized=tuple(dbg.synthesized))
        record_ops(trace, ws, dbg._rng)
    return trace


def record_ops(trace: Trace, ws: Workspace, rng: np.random.Generator) -> None:
    """Run the trace's net op by op in `ws` (in the side's setting), keeping each op's outputs and the
    random source before it.  Raises ExecutionError naming the side when an op fails."""
    net = trace.net
    with trace.side.setting(), executor.random_source(rng), blocking.single_threaded(), _quiet():
        for i, op in enumerate(net.op):
            trace.rng_states.append(rng.bit_generator.state)  # NOTE: a re-run draws what this run drew
            try:
                executor.run_op(op, ws, device=trace.bind_device, index=i, net_name=net.name)
            except ExecutionError as e:
                raise ExecutionError(f"side {trace.side.label}: {e}") from None
            trace.outputs.append({o: _host_copy(ws.values[o]) for o in op.output if o in ws.values})
            for o in op.output:
                trace.writes.setdefault(o, []).append(i)


def _quiet() -> Any:
    """NumPy's float warnings off while ops run: a Log of -1 is a NaN in the values compared, not a
    RuntimeWarning with a source path on stderr."""
    return np.errstate(all="ignore")


def match_ops(a: caffe2_pb2.NetDef, b: caffe2_pb2.NetDef) -> list[int | None]:
    """For each op of `a`, the op of `b` with the same SSA outputs (``name@version``) and type, else the
    op at the same position when its type is the same, else None."""
    def keys(net: caffe2_pb2.NetDef) -> list[tuple[str, tuple[tuple[str, int], ...]]]:
        ssa, _ = get_ssa(net)
        return [(op.type, tuple(outs)) for op, (_, outs) in zip(net.op, ssa)]
    ka, kb = keys(a), keys(b)
    by_key: dict[Any, int] = {}
    for j, k in enumerate(kb):
        by_key.setdefault(k, j)
    out: list[int | None] = []
    for i, k in enumerate(ka):
        j = by_key.get(k)
        if j is None and i < len(b.op) and b.op[i].type == a.op[i].type:
            j = i
        out.append(j)
    return out


#: How side B re-runs its op #j on side A's values: ``rerun(b, op_b, j, state)`` gives the op's outputs
#: (None: it cannot run alone) and why not.  netviz re-runs the op (:func:`_rerun`); ONNX Runtime runs the
#: op's nodes cut out of the model (:mod:`engine.onnx.divergence`).
Rerun = Callable[[Trace, caffe2_pb2.OperatorDef, int, Mapping[str, Any]], tuple[dict[str, Any] | None, str]]


def localize(a: Trace, b: Trace, *, tol: float = DEFAULT_TOL, rerun: Rerun | None = None) -> Divergence:
    """Each op's output, own and inherited error (see the module docstring) and the culprit, with the
    culprit's worst output as side A made it and as side B's setting re-made it from A's inputs
    (`rerun`: how side B re-runs one op; netviz's executor by default)."""
    pairs = match_ops(a.net, b.net)
    state: dict[str, Any] = {}  # side A's op-made values so far, on side B's device
    rows, values = [], None
    for i, (op, j) in enumerate(zip(a.net.op, pairs)):
        if j is None:
            name = op.name or (op.output[0] if op.output else "")
            rows.append(OpDivergence(i, None, op.type, name, float("nan"), float("nan"), float("nan"), ""))
        else:
            row, own_out = _compare_op(a, b, i, j, state, rerun or _rerun)
            rows.append(row)
            if values is None and row.own > tol:
                k = list(op.output).index(row.blob)
                values = (row.blob, a.outputs[i].get(row.blob), own_out.get(b.net.op[j].output[k]))
        for o, v in a.outputs[i].items():
            state[o] = _to_side(v, b)
    used = {j for j in pairs if j is not None}
    return Divergence(tuple(rows), tol, tuple(j for j in range(len(b.net.op)) if j not in used), culprit_values=values)


def _compare_op(a: Trace, b: Trace, i: int, j: int, state: Mapping[str, Any], rerun: Rerun
                ) -> tuple[OpDivergence, dict[str, Any]]:
    """Side A's op #i against side B's op #j: its row (worst output) and B's re-run outputs ({} if none).
    A partial side B compares only the outputs it shows (none: ``-``)."""
    op, op_b = a.net.op[i], b.net.op[j]
    inherited = max((value_error(a.before(n, i), b.before(n, j)) for n in op.input
                     if a.made_before(n, i) and b.before(n, j) is not None), default=0.0)
    own_out, note = rerun(b, op_b, j, state)
    nan = float("nan")
    out_err, own_err, blob = nan if b.partial else 0.0, 0.0 if own_out is not None and not b.partial else nan, ""
    for k, o in enumerate(op.output):
        va, ob = a.outputs[i].get(o), op_b.output[k] if k < len(op_b.output) else None
        e_out = (nan if b.partial and ob not in b.outputs[j] else value_error(va, b.outputs[j].get(ob))
                 if ob is not None else float("inf"))
        e_own = (nan if own_out is None or b.partial and ob not in own_out else value_error(va, own_out.get(ob))
                 if ob else float("inf"))
        if not blob or _rank(e_own, e_out) > _rank(own_err, out_err):
            blob = o
        out_err, own_err = _nanmax(out_err, e_out), _nanmax(own_err, e_own)
    name = op.name or (op.output[0] if op.output else "")
    return OpDivergence(i, j, op.type, name, out_err, own_err, inherited, blob, note), own_out or {}


def _rank(own: float, out: float) -> tuple[float, float]:
    """How an output ranks as its op's worst: by own error, then output error; not compared (NaN) last."""
    return (-1.0 if own != own else own, -1.0 if out != out else out)


def _nanmax(x: float, y: float) -> float:
    """The larger of two errors, NaN (not compared) only where both are."""
    return y if x != x else x if y != y else max(x, y)


def side_by_side(a: Any, b: Any, n: int = 5) -> list[str]:
    """The `n` elements where two values differ most: index, side A, side B, |A - B| (one line each)."""
    na, nb = _numeric(a), _numeric(b)
    if na is None or nb is None or na.shape != nb.shape:
        return [f"    values not comparable element by element: A {getattr(a, 'shape', type(a).__name__)}, "
                f"B {getattr(b, 'shape', type(b).__name__)}"]
    with np.errstate(invalid="ignore"):
        gap = np.abs(na.astype(np.float64) - nb.astype(np.float64)).ravel()
    order = np.argsort(-np.nan_to_num(gap, nan=np.inf), kind="stable")[:n]
    lines = [f"    {'index':<20} {'A':>13} {'B (re-run)':>13} {'|A-B|':>10}"]
    for k in order:
        at = tuple(int(x) for x in np.unravel_index(int(k), na.shape)) if na.ndim else ()
        lines.append(f"    {str(at):<20} {na.ravel()[k]:>13.6g} {nb.ravel()[k]:>13.6g} {gap[k]:>10.3g}")
    return lines


def _to_side(v: Any, t: Trace) -> Any:
    if t.side.device == "gpu" and hasattr(v, "shape") and hasattr(v, "dtype"):
        return dev.to_device(v, dev.namespace(dev.CUDA))
    return v


def _rerun(b: Trace, op: caffe2_pb2.OperatorDef, j: int, state: Mapping[str, Any]
           ) -> tuple[dict[str, Any] | None, str]:
    """`op` (side B's op #j) run in side B's setting on `state` (side A's values) over B's start values,
    and why not (None) when it cannot run alone: a backward While (or RecurrentNetworkGradient) reads
    the workspaces its forward op saved, which side A's run already used up."""
    ws = Workspace("divergence")
    ws.values.update(b.start)
    ws.devices.update(b.start_devices)
    on = dev.CUDA if b.side.device == "gpu" else dev.CPU
    for k, v in state.items():
        ws.values[k], ws.devices[k] = v, on
    for n in op.input:  # NOTE: an in-place op must not write into side A's recorded value
        v = ws.values.get(n)
        if hasattr(v, "copy") and hasattr(v, "shape"):
            ws.values[n] = v.copy()
    rng = np.random.default_rng()
    if j < len(b.rng_states):
        rng.bit_generator.state = b.rng_states[j]
    with b.side.setting(), executor.random_source(rng), blocking.single_threaded(), _quiet():
        try:
            executor.run_op(op, ws, device=b.bind_device, index=j, net_name=b.net.name)
        except ExecutionError as e:
            return None, f"re-run alone failed: {str(e).split(': ')[-1][:120]}"
        except (KeyError, IndexError, AttributeError) as e:  # NOTE: a backward op missing its forward run's saved state
            return None, f"re-run alone failed: {type(e).__name__} {str(e)[:100]}"
    return {o: _host_copy(ws.values[o]) for o in op.output if o in ws.values}, ""


def op_values(a: Trace, b: Trace, i: int, j: int, rerun: Rerun | None = None) -> list[tuple[str, Any, Any, Any]]:
    """Per output of side A's op #i (side B's op #j): its name, side A's value, side B's value (None where a
    partial side shows none) and side B's op re-run on side A's inputs (None where it cannot run alone;
    `rerun` as :func:`localize`'s): what an inspector shows side by side."""
    state = {n: _to_side(a.before(n, i), b) for n in a.writes if a.made_before(n, i)}
    own, _ = (rerun or _rerun)(b, b.net.op[j], j, state)
    return [(o, a.outputs[i].get(o), b.outputs[j].get(ob), None if own is None else own.get(ob))
            for o, ob in zip(a.net.op[i].output, b.net.op[j].output)]


def diverge(a: Side, b: Side, feeds: Mapping[str, Any] | None = None, *, loss: str | None = None,
            synthesize_params: bool = False, param_width: int = 16, seed: int = 0,
            tol: float = DEFAULT_TOL) -> Divergence:
    """Run both sides on the same feeds (and seeded random parameters) and localize the divergence.

    Examples
    --------
    >>> from engine.model.opdef import create_operator as op
    >>> net = caffe2_pb2.NetDef(op=[op("Relu", ["X"], ["Y"])], external_input=["X"])
    >>> m = Model(net)
    >>> diverge(Side(m), Side(m, label="B"), {"X": np.ones(3, np.float32)}).culprit is None
    True
    """
    ta = run_side(a, feeds, loss=loss, synthesize_params=synthesize_params, param_width=param_width, seed=seed)
    tb = run_side(b, feeds, loss=loss, synthesize_params=synthesize_params, param_width=param_width, seed=seed)
    from engine.debugger.provenance import explain_trace  # noqa: PLC0415
    return replace(localize(ta, tb, tol=tol), nonfinite=tuple(explain_trace(ta) + explain_trace(tb)), traces=(ta, tb))


def table(d: Divergence, *, only_over: bool = False) -> list[str]:
    """The rows as aligned text lines: op, type, name, out, own, inherited (``-``: op only in A)."""
    f = lambda x: "-" if x != x else f"{x:.3g}"  # noqa: E731
    lines = [f"{'op':>5} {'type':<22} {'name':<32} {'out':>9} {'own':>9} {'inherited':>9}"]
    for r in d.rows:
        if only_over and not (r.out > d.tol or r.own > d.tol):
            continue
        mark = "  <- culprit" if r is d.culprit else ""
        lines.append(f"{'#' + str(r.index):>5} {r.op_type[:22]:<22} {r.name[:32]:<32} {f(r.out):>9} {f(r.own):>9} "
                     f"{f(r.inherited):>9}{mark}{'  (' + r.note + ')' if r.note else ''}")
    return lines

