"""A recording behind the live debugger's face: what ``netviz replay`` gives the TUI's session.

:class:`ReplayDebugger` has the methods and state ``netviz/session.py`` uses on a
:class:`~engine.debugger.Debugger` (moves, ``pc``, records, values, breakpoints) over a
:class:`~engine.debugger.timetravel.Cursor`: a move is a cursor move, so nothing runs, no model file
or device is needed, and ``step_back`` goes into finished subnets, iterations and timesteps at any
distance.  Edits (inject, skip) are refused: a recording is what happened.

Positions are the recording's stops: the pc at ``stops[pos]`` is that op, about to run.  A control
op's own stop comes after its subnets' (it completes last): ``n`` over the op before it passes the
subnet runs to that stop (the pc then reads ``op#2 While``), ``s`` enters them, ``u`` from the control
op's stop goes back to the last op its subnets ran.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from engine.debugger.inspect import BlobStats, blob_stats, save_blob, value_slice
from engine.debugger.machine import DebuggerError
from engine.debugger.recorded import Recording, Stop
from engine.debugger.records import BlobSummary, FrameInfo, OpRecord, ProgramCounter, Stopped, Watchpoint
from engine.debugger.timetravel import Cursor
from engine.model.modelio import Model
from engine.model.opdef import subnets_of
from engine.model.optypes import RECURRENT


class _LazyHealth(tuple):
    """(NaN count, Inf count, norm) whose norm is computed from the recorded value when first read.

    Why: the norms (the grad-norm overlay's) are not in the file; reading every value to make them
    when the replay opens would read the whole recording."""

    rec: Recording
    key: tuple[str, int]
    result: Any

    def __new__(cls, rec: Recording, name: str, version: int, nan: int, inf: int) -> _LazyHealth:
        self = super().__new__(cls, (nan, inf, None))
        self.rec, self.key, self.result = rec, (name, version), ()
        return self

    def __getitem__(self, k: Any) -> Any:
        if k != 2:
            return tuple.__getitem__(self, k)
        if self.result == ():
            from engine.debugger.records import norm_of  # noqa: PLC0415
            name, version = self.key
            ok = not (self[0] or self[1]) and f"{name}@{version}" in self.rec.members
            value = self.rec.value(name, version) if ok else None
            self.result = norm_of(value) if value is not None and value.dtype.kind in "fc" and value.size else None
        return self.result


def op_record(stop: Stop, rec: Recording | None = None) -> OpRecord:
    """The live debugger's record of a stop; with `rec`, its outputs' norms are read from it when asked."""
    outs = tuple(BlobSummary(o.name, o.shape, o.dtype, (o.nan, o.inf, None) if rec is None else
                             _LazyHealth(rec, o.name, o.version, o.nan, o.inf)) for o in stop.outputs)
    return OpRecord(stop.seq, stop.path, stop.op_type, stop.label, stop.wall_s, outs, stop.backward, None,
                    stop.skipped, None, stop.frames)


def op_at(net: Any, path: Any) -> Any:
    """The op at a debugger path in `net`, a RecurrentNetwork's timestep read as the debugger runs it
    (its step net with Caffe2's link ops: :func:`engine.runtime.ops.rnn.timestep_program`)."""
    steps = list(path[1:])
    while net is not None and steps:
        i = steps.pop(0)
        if not isinstance(i, int) or i >= len(net.op):
            return None
        op = net.op[i]
        if not steps:
            return op
        arg = steps.pop(0)
        if op.type in RECURRENT:
            from engine.runtime.ops.rnn import timestep_program  # noqa: PLC0415 - only RNN paths
            net = timestep_program(op, arg)
        else:
            net = dict(subnets_of(op)).get(arg)
    return None


class _Versions(Mapping[str, int]):
    """``dbg.versions`` at the cursor: each blob's version once the ops before it ran."""

    def __init__(self, dbg: ReplayDebugger) -> None:
        self.dbg = dbg

    def __getitem__(self, name: str) -> int:
        v = self.dbg.rec.version_at(name, self.dbg.cursor.pos - 1)
        if v is None:
            raise KeyError(name)
        return v

    def __iter__(self) -> Any:
        return (n for n in self.dbg.rec.blobs() if n in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.dbg.rec.version_at(name, self.dbg.cursor.pos - 1) is not None


class ReplayDebugger:
    """The live debugger's interface over a recording (see the module doc)."""

    def __init__(self, rec: Recording) -> None:
        self.rec, self.cursor = rec, Cursor(rec)
        self.model = Model(rec.predict, rec.init)
        self.loss, self.device = list(rec.meta.get("loss") or []), rec.meta.get("device")
        self.synthesized = list(rec.meta.get("synthesized") or [])
        self.listeners: list[Any] = []
        self.injected: dict[str, int] = {}
        self.stale: set[Any] = set()
        self.given_feeds: dict[str, Any] = {}
        self.skip_end_stops = True
        self.error: str | None = None
        self._all = [op_record(s, rec) for s in rec.stops]
        self._rated = 0
        self._params = {*rec.predict.external_input, *rec.program.external_input}
        self.versions = _Versions(self)

    # ---- state ---------------------------------------------------------------------------
    @property
    def breakpoints(self) -> dict[int, Any]:
        return self.cursor.breakpoints

    @property
    def watchpoints(self) -> dict[int, Any]:
        return self.cursor.watchpoints

    def _program(self) -> Any:
        return self.rec.program

    @property
    def records(self) -> list[OpRecord]:
        self._rate(self.cursor.pos)
        return self._all[:self.cursor.pos]

    def _rate(self, pos: int) -> None:
        """Fill ‖ΔW‖/‖W‖ of the main net's in-place parameter updates among the first `pos` stops, from the
        parameter's versions before and after (the live debugger measures them as it runs; the file has
        the values, not the ratios), once each."""
        from engine.autodiff.training import update_ratio  # noqa: PLC0415 - a training net's only

        for k in range(self._rated, pos):
            stop = self.rec.stops[k]
            names = {o.name for o in stop.outputs} & self._params if len(stop.path) == 2 else set()
            op = op_at(self.rec.program, stop.path) if names else None
            if op is None or names.isdisjoint(op.input):
                continue
            members = self.rec.members
            writes = [(None, o.name, self.rec.value(o.name, o.version - 1), None, self.rec.value(o.name, o.version))
                      for o in stop.outputs if o.name in names and o.version
                      and f"{o.name}@{o.version - 1}" in members and o.key in members]
            ratio = update_ratio(op, writes, self._params) if writes else None
            if ratio is not None:
                self._all[k] = dataclasses.replace(self._all[k], update_ratio=ratio)
        self._rated = max(self._rated, pos)

    @property
    def records_by_path(self) -> dict[Any, OpRecord]:
        return {r.path: r for r in self.records}

    def current_records(self) -> dict[Any, OpRecord]:
        """:attr:`records_by_path`, less the runs of the pc's subnets other than the one it is in."""
        out, here = self.records_by_path, self.cursor.stop
        if here is None:
            return out
        for level in range(len(here.frames)):
            prefix = here.path[:2 + 2 * level + 1]
            for path, rec in list(out.items()):
                if path[:len(prefix)] == prefix and len(path) > len(prefix) and rec.frames[level:level + 1] != \
                        here.frames[level:level + 1]:
                    del out[path]
        return out

    @property
    def pc(self) -> ProgramCounter:
        here, net = self.cursor.stop, self.rec.program
        if here is None:
            return ProgramCounter((FrameInfo(net.name, "main", len(net.op), "", ("op", len(net.op))),))
        infos, labels = [], ("main", *here.frames)
        for level in range((len(here.path) - 2) // 2 + 1):
            path = here.path[:2 + 2 * level]
            op = op_at(net, path)
            infos.append(FrameInfo(net.name, labels[level] if level < len(labels) else "net", path[-1],
                                   op.type if op is not None else here.op_type, path))
        return ProgramCounter(tuple(infos))

    @property
    def finished(self) -> bool:
        return self.cursor.stop is None

    def current_op(self) -> Any:
        here = self.cursor.stop
        return None if here is None else op_at(self.rec.program, here.path)

    @property
    def num_forward(self) -> int:
        return len(self.rec.predict.op)

    def behind(self, path: Any) -> bool:
        here = self.cursor.stop
        return here is None or (len(path) > 1 and isinstance(path[1], int) and path[1] < here.path[1])

    def alerts(self) -> list[OpRecord]:
        return [r for r in self.records if r.has_inf_or_nan]

    # ---- moves -----------------------------------------------------------------------------
    def _move(self, pos: int, reason: str = "step", detail: str = "") -> Stopped:
        self.cursor.goto(pos)
        stop = Stopped(reason, self.pc, detail)
        for fn in list(self.listeners):
            fn(stop)
        return stop

    def _completes(self, k: int) -> bool:
        """Stop `k` is a control op completing (its subnets' stops came before it)."""
        op = op_at(self.rec.program, self.rec.stops[k].path)
        return op is not None and bool(subnets_of(op))

    def _next_at(self, depth: int, past: bool = False) -> int:
        """The next position at `depth` or above: a control op's subnet runs pass whole, to its own stop
        (`past`: beyond it, as a step out of its subnet ends after the op)."""
        stops, pos = self.rec.stops, self.cursor.pos
        q = next((k for k in range(pos + 1, len(stops)) if len(stops[k].path) <= depth), len(stops))
        return q + 1 if past and q < len(stops) and self._completes(q) else q

    def step(self) -> Stopped:
        here = self.cursor.stop
        return self._move(self._next_at(len(here.path)) if here else self.cursor.pos)

    def step_into(self) -> Stopped:
        return self._move(min(self.cursor.pos + 1, len(self.rec.stops)))

    def step_back(self) -> Stopped:
        if not self.cursor.pos:
            raise DebuggerError("nothing to step back over: the replay is at its first op")
        return self._move(self.cursor.pos - 1, detail="stepped back")

    def step_out(self) -> Stopped:
        here = self.cursor.stop
        if here is None or len(here.path) <= 2:
            raise DebuggerError("step out: the pc is in the main net, not in a subnet — nothing to finish")
        return self._move(self._next_at(len(here.path) - 2, past=True))

    def _hit(self, hit: Any, reverse: bool = False) -> Stopped:
        """The Stopped of a cursor hit, worded as the live debugger words it."""
        bp, back = hit.breakpoint, " (reverse)" if reverse else ""
        if isinstance(bp, Watchpoint):
            out = next(o for o in hit.stop.outputs if o.name == bp.blob)
            return self._move(hit.pos, "watchpoint", f"#{bp.id} {bp.blob} written (version {out.version}){back}")
        return self._move(hit.pos, "condition" if bp.kind == "condition" else "breakpoint", bp.describe() + back)

    def continue_(self) -> Stopped:
        hit = self.cursor.continue_()
        if hit is None:
            return self._move(len(self.rec.stops), "end", "end of recording")
        return self._hit(hit)

    def reverse_continue(self) -> Stopped:
        hit = self.cursor.reverse_continue()
        if hit is None:
            return self._move(0, "start", "start of recording")
        return self._hit(hit, reverse=True)

    def goto(self, pos: int, detail: str = "") -> Stopped:
        """Move the cursor to position `pos` (`pos` ops have run), e.g. a query row's or a last writer's."""
        return self._move(pos, "jump", detail)

    def run_to(self, path: Any) -> Stopped:
        target = tuple(path)
        q = next((k for k in range(self.cursor.pos + 1, len(self.rec.stops)) if self.rec.stops[k].path == target), None)
        if q is None:
            raise DebuggerError(f"run to {'/'.join(map(str, target[1:]))}: no later run of that op in the recording")
        return self._move(q)

    def run_to_nan(self) -> Stopped:
        q = next((s.seq for s in self.rec.stops[self.cursor.pos:] if s.has_inf_or_nan), None)
        if q is None:
            return self._move(len(self.rec.stops), "end", "no op wrote NaN/Inf")
        # NOTE: "condition", not the live "nan": the session's provenance walk runs kernels
        return self._move(q + 1, "condition", f"{self.rec.stops[q].op_type} wrote NaN/Inf")

    def restart(self) -> Stopped:
        return self._move(0, detail="restarted")

    def backward(self, loss: Any = None) -> int:
        """The recording holds the program as it ran (its backward pass if one was generated)."""
        return len(self.rec.program.op) - len(self.rec.predict.op)

    def cancel(self) -> None:
        """Moves are immediate: nothing to cancel."""

    clear_cancel = cancel

    def idle_work(self, stop: Any) -> None:
        """Nothing to bind or compute between moves."""

    # ---- breakpoints ----------------------------------------------------------------------
    def add_breakpoint(self, kind: str, spec: Any = None, condition: str | None = None, ignore: int = 0) -> Any:
        bp = self.cursor.add_breakpoint(kind, spec, condition)
        bp.ignore = int(ignore)
        return bp

    def add_watchpoint(self, blob: str, on: str = "write") -> Any:
        """A write watchpoint stops after each op that writes `blob`, as live; a read one is refused."""
        if on != "write":
            raise DebuggerError(f"a replay watches writes only, not {on!r}")
        return self.cursor.add_watchpoint(blob)

    def remove(self, point_id: int) -> None:
        c = self.cursor
        if c.breakpoints.pop(point_id, None) is None and c.watchpoints.pop(point_id, None) is None:
            raise DebuggerError(f"no breakpoint or watchpoint #{point_id}")

    # ---- values ----------------------------------------------------------------------------
    def value(self, name: str, version: int | None = None) -> Any:
        if version is None:
            version = self.rec.version_at(name, self.cursor.pos - 1)
            if version is None:
                raise DebuggerError(f"blob '{name}' does not exist at this point")
        return self.rec.value(name, version)

    def written_value(self, path: Any, name: str) -> Any:
        path = tuple(path)
        rec = next((r for r in reversed(self.records) if r.path == path), None)
        if rec is None:
            raise DebuggerError(f"op {'/'.join(map(str, path[1:]))} has not run yet: no value for '{name}' there")
        out = next(o for o in self.rec.stops[rec.seq].outputs if o.name == name)
        return self.rec.value(name, out.version)

    def initial_value(self, name: str, prefix: Any = None) -> Any:
        if prefix is not None:
            return None
        return self.rec.value(name, 0)

    def inspect(self, name: str, version: int | None = None) -> BlobStats:
        return blob_stats(name, self.value(name, version))

    def slice(self, name: str, index: str = "", version: int | None = None) -> Any:
        return value_slice(name, self.value(name, version), index)

    def save(self, name: str, path: str, version: int | None = None) -> str:
        return str(save_blob(name, self.value(name, version), path))

    def _read_only(self, *args: Any, **kwargs: Any) -> Any:
        raise DebuggerError("a recording is read-only: record a new run to change values (netviz run --record)")

    inject = skip = _read_only

    def output_infos(self) -> dict[str, Any]:
        return {}

    def missing_inputs(self) -> list[str]:
        return []
