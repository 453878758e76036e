"""Moving through a recording both ways, and asking it questions: cursor, breakpoints, query, history.

A recording (:class:`engine.debugger.recorded.Recording`) holds every op run in program order, so
going back costs what going forward does: the :class:`Cursor` is an index into its stops, not an
undo log.  Breakpoints are the live debugger's (:class:`engine.debugger.records.Breakpoint`, the
condition language of :mod:`engine.debugger.conditions`) and mean the same here: a location
breakpoint stops *before* its op, a condition breakpoint *after* the op whose writes make it true.

:func:`query` runs a condition over every op run and lists where it holds; :func:`history` gives a
blob's per-iteration statistics (While iterations, RNN timesteps, repeated runs), from a recording
or live (:class:`LiveHistory`, a debugger listener).
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.debugger.conditions import Condition, parse_condition
from engine.debugger.recorded import Recording, Stop
from engine.debugger.records import Breakpoint, OpExecuted, Stopped, Watchpoint
from engine.errors import NetvizError


class CursorError(NetvizError):
    """A move a recording's cursor cannot make."""


@dataclass(frozen=True, slots=True)
class Hit:
    """Where a breakpoint stopped the cursor: the position, the stop that made it, which breakpoint."""

    pos: int
    stop: Stop
    breakpoint: Breakpoint | Watchpoint


class Cursor:
    """A position in a recording: ``pos`` ops have run, the pc is at ``stops[pos]`` (== len: the end).

    Every move goes both ways and any distance; stepping one op at a time enters finished subnets,
    iterations and timesteps (each of their ops is a stop), and :meth:`step_over` passes them whole.
    """

    def __init__(self, rec: Recording, pos: int = 0) -> None:
        self.rec, self.pos = rec, 0
        self.breakpoints: dict[int, Breakpoint] = {}
        self.watchpoints: dict[int, Watchpoint] = {}
        self._next_id = 1
        self.goto(pos)

    @property
    def stop(self) -> Stop | None:
        """The op the pc is at (None at the end)."""
        return self.rec.stops[self.pos] if self.pos < len(self.rec.stops) else None

    @property
    def last(self) -> Stop | None:
        """The op that ran last (None at the start)."""
        return self.rec.stops[self.pos - 1] if self.pos else None

    def goto(self, pos: int) -> int:
        if not 0 <= pos <= len(self.rec.stops):
            raise CursorError(f"{self.rec.path}: no stop #{pos} (0..{len(self.rec.stops)})")
        self.pos = pos
        return pos

    def step(self, n: int = 1) -> int:
        """Move `n` ops (negative: back), clamped to the start and the end."""
        return self.goto(min(max(self.pos + n, 0), len(self.rec.stops)))

    def step_over(self, back: bool = False) -> int:
        """Move to the next (previous) op at the pc's depth or above: a control op's subnet runs pass whole."""
        stops, here = self.rec.stops, self.stop or self.last
        if here is None:
            return self.pos
        depth = len(here.path)
        if back:
            k = next((k for k in range(self.pos - 1, -1, -1) if len(stops[k].path) <= depth), 0)
            return self.goto(k)
        k = next((k for k in range(self.pos + 1, len(stops)) if len(stops[k].path) <= depth), len(stops))
        return self.goto(k)

    def add_breakpoint(self, kind: str, spec: Any = None, condition: str | None = None) -> Breakpoint:
        """A breakpoint as :meth:`engine.debugger.Debugger.add_breakpoint` takes it (path, type, name, condition)."""
        if kind not in ("path", "type", "name", "condition"):
            raise CursorError(f"breakpoint kind must be path, type, name or condition, not {kind!r}")
        cond = parse_condition(condition) if condition else None
        if kind == "condition" and cond is None:
            raise CursorError("a condition breakpoint needs a condition")
        bp = Breakpoint(self._next_id, kind, tuple(spec) if kind == "path" else spec, cond,
                        _regex=re.compile(str(spec)) if kind == "name" else None)
        self.breakpoints[bp.id] = bp
        self._next_id += 1
        return bp

    def add_watchpoint(self, blob: str) -> Watchpoint:
        """Stop after each op that writes `blob` (a new version), as the live debugger's write watchpoint."""
        wp = Watchpoint(self._next_id, blob)
        self.watchpoints[wp.id] = wp
        self._next_id += 1
        return wp

    def _hit_at(self, pos: int, located: bool = True, others: bool = True, at: int | None = None) -> Hit | None:
        """A breakpoint stopping the cursor at `pos`: before op `pos` (location; not when `located` is False) or
        after op `pos - 1` (condition, watchpoint; not when `others` is False).  `at`: the position whose
        state a location breakpoint's condition reads (a replay checks a control op's location where its run
        begins: its own stop comes after its subnets' ops)."""
        stops = self.rec.stops
        for wp in self.watchpoints.values() if others else ():
            if pos and any(o.name == wp.blob for o in stops[pos - 1].outputs):
                return Hit(pos, stops[pos - 1], wp)
        for bp in self.breakpoints.values():
            if not bp.enabled:
                continue
            if bp.kind == "condition":
                if others and pos and bp.condition is not None and holds(self.rec, stops[pos - 1], bp.condition):
                    return Hit(pos, stops[pos - 1], bp)
            elif located and pos < len(stops) and _at(bp, stops[pos]) and (bp.condition is None or bp.condition(
                    {}, self.rec.state((pos if at is None else at) - 1, stops[pos]), pos)):
                return Hit(pos, stops[pos], bp)
        return None

    def hit_at(self, pos: int, located: bool = True, others: bool = True, at: int | None = None) -> Hit | None:
        """The breakpoint or watchpoint that stops a move passing position `pos` (None: none), counted;
        `located`/`others` False: location breakpoints / conditions and watchpoints there do not stop it."""
        hit = self._hit_at(pos, located, others, at)
        if hit is not None and isinstance(hit.breakpoint, Breakpoint):
            hit.breakpoint.hits += 1
        return hit

    def continue_(self, start: int | None = None) -> Hit | None:
        """Move forward to the next breakpoint hit (None: to the end); `start`: scan from after that
        position instead of the cursor's."""
        first = self.pos if start is None else start
        return self._scan(range(first + 1, len(self.rec.stops) + 1), len(self.rec.stops))

    def reverse_continue(self) -> Hit | None:
        """Move back to the previous breakpoint hit (None: to the start)."""
        return self._scan(range(self.pos - 1, -1, -1), 0)

    def _scan(self, positions: range, end: int) -> Hit | None:
        for pos in positions:
            hit = self._hit_at(pos)
            if hit is not None:
                if isinstance(hit.breakpoint, Breakpoint):
                    hit.breakpoint.hits += 1
                self.goto(pos)
                return hit
        self.goto(end)
        return None


def _at(bp: Breakpoint, stop: Stop) -> bool:
    if bp.kind == "path":
        return tuple(bp.spec) == stop.path
    if bp.kind == "type":
        return bp.spec == stop.op_type
    return bp._regex is not None and any(bp._regex.search(o.name) for o in stop.outputs)


def holds(rec: Recording, stop: Stop, cond: Condition) -> bool:
    """Whether `cond` holds right after `stop` ran (its writes, the workspace then, its op count)."""
    names = {o.name: None for o in stop.outputs}
    if not cond.triggered_by(names):
        return False
    return cond(_Written(rec, stop), rec.state(stop.seq, stop), stop.seq + 1)


class _Written(dict):
    """The blobs a stop wrote, each read when a condition first looks at it."""

    def __init__(self, rec: Recording, stop: Stop) -> None:
        super().__init__()
        self.rec, self.outs = rec, {o.name: o for o in stop.outputs if o.key in rec.members}

    def __contains__(self, name: object) -> bool:
        return name in self.outs

    def __getitem__(self, name: str) -> Any:
        if not dict.__contains__(self, name):
            o = self.outs[name]
            dict.__setitem__(self, name, self.rec.value(o.name, o.version))
        return dict.__getitem__(self, name)

    def items(self) -> Iterator[tuple[str, Any]]:  # type: ignore[override]
        return ((n, self[n]) for n in self.outs)

    def __iter__(self) -> Iterator[str]:
        return iter(self.outs)

    def __len__(self) -> int:
        return len(self.outs)


# ---- query ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Row:
    """One place where a query's condition holds."""

    seq: int
    place: str
    blobs: tuple[str, ...]     # blob@version the condition read (or the op wrote, for has_inf_or_nan)
    iteration: str
    value: Any                 # the value the condition compared first (None for has_inf_or_nan)

    def as_json(self) -> dict[str, Any]:
        v = self.value
        return {"op": self.seq, "place": self.place, "blobs": list(self.blobs), "iteration": self.iteration,
                "value": v.tolist() if hasattr(v, "tolist") else v}


def query(rec: Recording, expr: str) -> list[Row]:
    """Every op run after which condition `expr` holds, in program order.

    Raises
    ------
    ConditionError
        `expr` does not parse (one line with the column and examples).
    """
    cond = parse_condition(expr)
    rows = []
    for stop in rec.stops:
        if holds(rec, stop, cond):
            state = rec.state(stop.seq, stop)
            if cond.blobs:
                blobs = tuple(f"{b}@{state.version(b)}" for b in sorted(cond.blobs) if state.version(b) is not None)
            else:
                blobs = tuple(o.key for o in stop.outputs)
            value = cond.value(_Written(rec, stop), state, stop.seq + 1)
            rows.append(Row(stop.seq, rec.place(stop), blobs, stop.iteration, value))
    return rows


# ---- iteration history ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class IterationStat:
    """Statistics of one version of a blob: where it was written and its min, max, mean and L2 norm."""

    seq: int
    iteration: str      # "iteration 2", "timestep 0"; "run N" in the main net
    version: int
    min: float
    max: float
    mean: float
    norm: float


def stats_of(seq: int, iteration: str, version: int, value: Any) -> IterationStat | None:
    """One :class:`IterationStat` (None for an empty or non-numeric value)."""
    a = np.asarray(value)
    if a.dtype.kind not in "fiub" or a.size == 0:
        return None
    f = a.astype(np.float64, copy=False)
    return IterationStat(seq, iteration, version, float(f.min()), float(f.max()), float(f.mean()),
                         float(np.sqrt(np.square(f).sum())))


def history(rec: Recording, blob: str) -> list[IterationStat]:
    """Every recorded version of `blob` written by an op, in program order, with its statistics; a version
    written in the main net is labelled ``run 1`` (a recording holds one run), as :class:`LiveHistory` does."""
    out = []
    for stop in rec.stops:
        for o in stop.outputs:
            if o.name == blob and o.key in rec.members:
                s = stats_of(stop.seq, stop.iteration or "run 1", o.version, rec.value(o.name, o.version))
                if s is not None:
                    out.append(s)
    return out


def first_iteration_where(rec: Recording, expr: str) -> Stop | None:
    """The first op run inside a loop iteration or timestep after which `expr` holds (None: never)."""
    cond = parse_condition(expr)
    return next((s for s in rec.stops if s.iteration and holds(rec, s, cond)), None)


#: an iteration's words in a frame label: ``iteration 2``, ``timestep 0``, a plan's ``train iteration 3 · net …``
_ITERATION = re.compile(r"(\w+ )?(iteration|timestep|check) \d+")


class LiveHistory:
    """A debugger listener keeping `blob`'s per-version statistics as it runs, across restarts.

    Each :meth:`Debugger.restart` (a training net run again with ``c``) starts ``run N+1``; inside a
    loop the label is the iteration's.  Attach with ``dbg.listeners.append(h)``."""

    def __init__(self, dbg: Any, blob: str) -> None:
        self.dbg, self.blob, self.run, self.stats = dbg, blob, 1, []

    def __call__(self, event: Any) -> None:
        if isinstance(event, Stopped) and event.detail == "restarted":
            self.run += 1
        elif isinstance(event, OpExecuted) and any(o.name == self.blob for o in event.record.outputs):
            r = event.record
            label = next((m.group(0) for f in reversed(r.frames) if (m := _ITERATION.search(f))), "") \
                or f"run {self.run}"
            from engine.runtime.device import to_host  # noqa: PLC0415
            s = stats_of(r.seq, label, self.dbg.versions.get(self.blob, 0), to_host(self.dbg.value(self.blob)))
            if s is not None:
                self.stats.append(s)


def run_to_first_iteration(dbg: Any, expr: str) -> Stopped:
    """Live: continue `dbg` to the first op inside a loop iteration or timestep after which `expr` holds."""
    bp = dbg.add_breakpoint("condition", condition=expr)
    try:
        while True:
            stop = dbg.continue_()
            if stop.reason != "condition" or any(f[-1:].isdigit() for f in dbg.records[-1].frames):
                return stop
    finally:
        dbg.remove(bp.id)


# ---- live moves back, over the debugger's undo history -----------------------------------------
def _located(bp: Breakpoint, path: Any, op: Any) -> bool:
    """Whether location breakpoint `bp` names the op at `path` (its condition is not evaluated: going back,
    the workspace is the one before the op, as it was when the breakpoint stopped forward)."""
    if bp.kind == "path":
        return tuple(bp.spec) == tuple(path)
    if bp.kind == "type":
        return op is not None and bp.spec == op.type
    return bp.kind == "name" and op is not None and bp._regex is not None and any(
        bp._regex.search(s) for s in (op.name, *op.output) if s)


def reverse_continue_live(dbg: Any) -> Stopped:
    """Live: step back over the undo history to the previous location-breakpoint op (the pc before it, as
    a forward continue stops); with none on the way, to the oldest op the history holds.

    Raises
    ------
    DebuggerError
        No undo history at all (the start, or history dropped beyond the budget): nothing to go back over.
    """
    from engine.debugger.machine import DebuggerError  # noqa: PLC0415

    located = [bp for bp in dbg.breakpoints.values() if bp.enabled and bp.kind != "condition"]
    stop = dbg.step_back()
    while True:
        for bp in located:
            if _located(bp, dbg.pc.path, dbg.current_op()):
                return Stopped("breakpoint", stop.pc, f"{bp.hit_text(dbg.pc.text())} (reverse)")
        try:
            stop = dbg.step_back()
        except DebuggerError as e:
            return Stopped("start", stop.pc, f"start of the undo history: {e}")


def back_to(dbg: Any, n: int) -> Stopped:
    """Live: step back until `n` op records are left (the pc at the op of record `n`, about to run it).

    Raises
    ------
    DebuggerError
        The undo history ends first (the pc stays where that left it; the message says how far it got).
    """
    from engine.debugger.machine import DebuggerError  # noqa: PLC0415

    if len(dbg.records) <= n:
        raise DebuggerError(f"op run #{n} is not behind the pc ({len(dbg.records)} ops have run): "
                            "nothing to go back to")
    stop = None
    while len(dbg.records) > n:
        try:
            stop = dbg.step_back()
        except DebuggerError as e:
            raise DebuggerError(f"{e}: stopped {len(dbg.records) - n} ops short of op run #{n}") from None
    return stop
