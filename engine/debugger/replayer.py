"""A recording behind the live debugger's face: what ``netviz replay`` gives the TUI's session.

:class:`ReplayDebugger` has the methods and state ``netviz/session.py`` uses on a
:class:`~engine.debugger.Debugger` (moves, ``pc``, records, values, breakpoints) over a
:class:`~engine.debugger.timetravel.Cursor`: a move is a cursor move, so nothing runs, no model file
or device is needed, and ``step_back`` goes into finished subnets, iterations and timesteps at any
distance.  Edits (inject, skip) are refused: a recording is what happened.

Positions are the recording's stops: the pc at ``stops[pos]`` is that op, about to run.  A control
op's own stop comes after its subnets' (it completes last), so the replay reads that stop as the pc
*before* the control op, as live: the records and values there are those before its first subnet op
(:meth:`ReplayDebugger._start`).  Every move lands where the live debugger stops after the same key
(:meth:`ReplayDebugger._land`): ``s`` there enters the subnet runs, ``n`` passes them whole, an op whose
subnet the pc leaves is never shown again after it finished, a control op the pc comes to is shown
before it, and ``u`` over the first op of a subnet run goes back before the control op that ran it.
Deeper stops of a finished run stay reachable by breakpoints, ``t``, reverse-continue and queries.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from engine.debugger.inspect import BlobStats, blob_stats, save_blob, value_slice
from engine.debugger.machine import DebuggerError
from engine.debugger.places import place
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
        net = _subnet(op, steps.pop(0))
    return None


def _subnet(op: Any, arg: Any) -> Any:
    """The net `op` runs for subnet argument `arg` (a RecurrentNetwork's: its timestep program)."""
    if op.type in RECURRENT:
        from engine.runtime.ops.rnn import timestep_program  # noqa: PLC0415 - only RNN paths
        return timestep_program(op, arg)
    return dict(subnets_of(op)).get(arg)


def _inside(stop: Stop, path: tuple[Any, ...], frames: tuple[str, ...]) -> bool:
    """`stop` ran in a subnet of the control op at `path` in its run in subnet runs `frames`."""
    return len(stop.path) > len(path) and stop.path[:len(path)] == path and stop.frames[:len(frames)] == frames


class _Versions(Mapping[str, int]):
    """``dbg.versions`` at the cursor: each blob's version once the ops before it ran."""

    def __init__(self, dbg: ReplayDebugger) -> None:
        self.dbg = dbg

    def __getitem__(self, name: str) -> int:
        v = self.dbg.rec.version_at(name, self.dbg.ran() - 1)
        if v is None:
            raise KeyError(name)
        return v

    def __iter__(self) -> Any:
        return (n for n in self.dbg.rec.blobs() if n in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.dbg.rec.version_at(name, self.dbg.ran() - 1) is not None


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
        self._starts: dict[int, int] = {}
        self._entered: set[tuple[tuple[Any, ...], tuple[str, ...]]] = set()  # see _track
        self._out_from: dict[tuple[int, bool], tuple[int, bool]] = {}  # a step out's landing → where it was taken
        self._end = False  # the pc at the end of the subnet run stop ``pos - 1`` ran in (see _move)
        # (stops run at its start, u goes back one op, (pos, end) it began at, stops run at its end): see _moved
        self._moves: list[tuple[int, bool, tuple[int, bool], int]] = []
        self._params = {*rec.predict.external_input, *rec.program.external_input}
        self.versions = _Versions(self)

    # ---- state ---------------------------------------------------------------------------
    def ran(self) -> int:
        """How many stops have run at the cursor (before a control op: not its subnets' stops)."""
        return self.cursor.pos if self._end else self._start(self.cursor.pos)

    def _here(self) -> Stop | None:
        """The stop the pc's place is read from: at a subnet's end, the last op that ran in it."""
        return self.rec.stops[self.cursor.pos - 1] if self._end else self.cursor.stop

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
        ran = self.ran()
        self._rate(ran)
        return self._all[:ran]

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
        here, net = self._here(), self.rec.program
        if here is None:
            return ProgramCounter((FrameInfo(net.name, "main", len(net.op), "", ("op", len(net.op))),))
        infos, labels = [], ("main", *here.frames)
        for level in range((len(here.path) - 2) // 2 + 1):
            path = here.path[:2 + 2 * level]
            op = op_at(net, path)
            infos.append(FrameInfo(net.name, labels[level] if level < len(labels) else "net", path[-1],
                                   op.type if op is not None else here.op_type, path))
        if self._end:  # NOTE: the subnet run `here` was the last op of has ended (live's "› end" stop)
            last = infos[-1]
            owner = op_at(net, here.path[:-2])
            sub = _subnet(owner, here.path[-2]) if owner is not None else None
            n = len(sub.op) if sub is not None else last.op_index + 1
            infos[-1] = FrameInfo(last.net_name, last.label, n, "", (*here.path[:-1], n))
        return ProgramCounter(tuple(infos))

    @property
    def finished(self) -> bool:
        return self.cursor.stop is None

    def current_op(self) -> Any:
        here = self.cursor.stop
        return None if here is None or self._end else op_at(self.rec.program, here.path)

    @property
    def num_forward(self) -> int:
        return len(self.rec.predict.op)

    def behind(self, path: Any) -> bool:
        here = self.cursor.stop
        return here is None or (len(path) > 1 and isinstance(path[1], int) and path[1] < here.path[1])

    def alerts(self) -> list[OpRecord]:
        return [r for r in self.records if r.has_inf_or_nan]

    # ---- moves -----------------------------------------------------------------------------
    def _move(self, pos: int, reason: str = "step", detail: str = "", *, end: bool = False) -> Stopped:
        """Put the cursor at `pos` (`end`: the pc at the end of the subnet run stop ``pos - 1`` ran in)."""
        self.cursor.goto(pos)
        self._end = end
        self._track(pos)
        stop = Stopped(reason, self.pc, detail)
        for fn in list(self.listeners):
            fn(stop)
        return stop

    def _completes(self, k: int) -> bool:
        """Stop `k` is a control op completing (its subnets' stops came before it)."""
        op = op_at(self.rec.program, self.rec.stops[k].path)
        return op is not None and bool(subnets_of(op))

    def _track(self, pos: int) -> None:
        """Keep :attr:`_entered` as the live debugger's undo history would be: a control op's run the pc
        has been inside is undone op by op, one run whole (``n``) at once; before a control op, none of
        its runs has happened yet."""
        stops = self.rec.stops
        here = self._here()
        if here is None:
            return
        ran = self.ran()
        self._out_from = {k: v for k, v in self._out_from.items() if k[0] <= pos and v[0] < ran}
        if not self._end and self._start(pos) < pos:
            self._entered = {(p, f) for p, f in self._entered
                             if not (p[:len(here.path)] == here.path and f[:len(here.frames)] == here.frames)}
        for cut in range(2, len(here.path), 2):
            self._entered.add((here.path[:cut], here.frames[:cut // 2 - 1]))

    def _ended(self, pos: int) -> bool:
        """Stop ``pos - 1`` was the last op of its subnet run (the live pc would read "› end" after it)."""
        stops = self.rec.stops
        if not 0 < pos < len(stops) or len(stops[pos - 1].path) <= 2:
            return False
        last = stops[pos - 1]
        nxt = stops[pos]
        return not (len(nxt.path) >= len(last.path) and nxt.path[:len(last.path) - 1] == last.path[:-1]
                    and nxt.frames[:len(last.frames)] == last.frames)

    def _start(self, pos: int) -> int:
        """How many stops have run at position `pos` as the pc there reads: at a control op's own stop
        (the pc before that op), the stops before its first subnet stop; else `pos`."""
        stops = self.rec.stops
        if pos >= len(stops) or not self._completes(pos):
            return pos
        if pos not in self._starts:
            k, op = pos, stops[pos]
            while k and _inside(stops[k - 1], op.path, op.frames):
                k -= 1
            self._starts[pos] = k
        return self._starts[pos]

    def _land(self, q: int, path: tuple[Any, ...], frames: tuple[str, ...]) -> int:
        """Where a forward move from a pc at `path` (in subnet runs `frames`) that passes the stops before
        `q` stops, as live: a control op that finished around the pc is not shown (its stop is passed),
        and a stop inside a control op the pc was not in shows the pc before that op (its own stop)."""
        stops = self.rec.stops
        while q < len(stops):
            s = stops[q]
            if self._completes(q) and len(path) > len(s.path) and path[:len(s.path)] == s.path \
                    and frames[:len(s.frames)] == s.frames:
                q += 1  # NOTE: the op the pc was in finished: live shows the op after it
                continue
            for cut in range(2, len(s.path), 2):
                op, above = s.path[:cut], s.frames[:cut // 2 - 1]
                if not (len(path) > cut and path[:cut] == op and frames[:len(above)] == above):
                    return next(k for k in range(q, len(stops)) if stops[k].path == op and stops[k].frames == above)
            return q
        return len(stops)

    def _next_at(self, depth: int) -> int:
        """The next position after the cursor whose stop is at `depth` or above, landed as live."""
        stops, pos, here = self.rec.stops, self.cursor.pos, self._here()
        q = next((k for k in range(pos + (not self._end), len(stops)) if len(stops[k].path) <= depth), len(stops))
        return self._land(q, here.path, here.frames)

    def _scan_forward(self, last: int) -> Any:
        """The first breakpoint or watchpoint hit (counted; None: none) of a forward move from the pc that runs
        the stops before `last`, in the order live meets them: after op q-1 (conditions, watchpoints), then
        before each control op whose run begins with op q, outermost first, then before op q.  A control op's
        own stop comes after its subnets' ops: its location is checked where its run begins, never at its
        stop (a type breakpoint on Do stopped ``n`` out of the Do's last op before the Do it left, and ``t``
        past a Do with one went on to its Relu).  The op at the pc runs first, as live: not its location."""
        stops, cursor, pos = self.rec.stops, self.cursor, self.cursor.pos
        ran = self.ran()
        here = pos if ran < pos and not self._end else None  # NOTE: the control op the pc is before
        lo = ran if here is not None or self._end else pos + 1
        for q in range(lo, last + 1):
            hit = cursor.hit_at(q, located=False) if q > ran else None
            if hit is None and q < min(last, len(stops)):
                for k in self._begun_at(q):
                    if k != here and (hit := cursor.hit_at(k, others=False, at=q)) is not None:
                        break
                else:
                    inner = self._completes(q) and self._start(q) < q
                    hit = None if inner or q == here else cursor.hit_at(q, others=False)
            if hit is not None:
                return hit
        return None

    def _begun_at(self, q: int) -> list[int]:
        """The stops of the control ops whose runs begin with stop `q`, outermost first."""
        stops, s = self.rec.stops, self.rec.stops[q]
        out = []
        for cut in range(2, len(s.path), 2):
            op, above = s.path[:cut], s.frames[:cut // 2 - 1]
            if q and _inside(stops[q - 1], op, above):
                continue  # NOTE: not the first op of that control op's run
            k = next((j for j in range(q + 1, len(stops)) if stops[j].path == op and stops[j].frames == above), None)
            if k is not None:
                out.append(k)
        return out

    def _run_to(self, target: int, *, end: bool = False, reason: str = "step", detail: str = "") -> Stopped:
        """A move over several ops to position `target`, stopping first at a breakpoint or watchpoint one of
        the ops passed hits, as live (``n`` over a loop with a breakpoint inside stops there)."""
        last = target if end else self._start(target)  # NOTE: not the ops of a control op `target` is before
        hit = self._scan_forward(last)
        return self._move(target, reason, detail, end=end) if hit is None else self._hit(hit)

    def _moved(self, move: Any, whole: bool) -> Stopped:
        """Make `move` and note how it ended, for :meth:`step_back`: live, ``u`` after ``n``, ``s`` or ``f``
        that ended by its own rule reverses that step (a control op it passed whole is undone whole), while
        after ``c``, ``t``, or a move a breakpoint stopped, it goes back one op, into the last op run inside a
        control op (:meth:`engine.debugger.machine.Machine._replay_units` reads the last move not undone)."""
        start, origin = self.ran(), (self.cursor.pos, self._end)
        stop = move()
        self._moves.append((start, not (whole and stop.reason == "step"), origin, self.ran()))
        del self._moves[:-256]
        return stop

    def _last_move(self, ran: int) -> tuple[int, bool, tuple[int, bool], int] | None:
        """The last move not undone yet at `ran` stops run, as live reads it for ``u`` (one that ran nothing or
        was stepped back over is forgotten); None: none."""
        moves = self._moves
        while moves and moves[-1][0] >= ran:
            moves.pop()
        return moves[-1] if moves else None

    def step(self) -> Stopped:
        return self._moved(self._step, True)

    def _step(self) -> Stopped:
        here = self._here()
        return self._run_to(self._next_at(len(here.path))) if here else self._move(self.cursor.pos)

    def step_into(self) -> Stopped:
        return self._moved(self._step_into, True)

    def _step_into(self) -> Stopped:
        here, pos = self._here(), self.cursor.pos
        if here is None:
            return self._move(pos)
        if self._end:
            return self._move(self._land(pos, here.path, here.frames))
        first = self._start(pos)
        if first < pos:  # NOTE: the pc before a control op: into its first subnet run, as live
            return self._move(self._land(first, (*here.path, None, None), (*here.frames, "")))
        return self._move(self._land(pos + 1, here.path, here.frames))

    def step_back(self) -> Stopped:
        """Back to the place before, as live: from the first op of a subnet run, before the control op that
        ran it (live undoes the whole op there); else the op run before, where a control op's run the pc
        went through is stepped back into (its last op) and one passed whole is stepped back over whole."""
        pos, stops = self.cursor.pos, self.rec.stops
        first = self.ran()
        if (pos, self._end) in self._out_from:  # NOTE: back over a step out: where it was taken, as live
            back, end = self._out_from.pop((pos, self._end))
            return self._move(back, detail="stepped back", end=end)
        moves = self._moves
        while moves and moves[-1][0] >= first and moves[-1][3] > first:
            moves.pop()  # NOTE: moves stepped back over already
        last = moves[-1] if moves else None
        if last is not None and last[0] == last[3] == first and not last[1] and last[2] != (pos, self._end):
            # NOTE: an n/s/f that ran no op but moved (from a subnet's "› end" to the next iteration's
            # control op): live undoes that frame change, back to where it began
            self._moves.pop()
            return self._move(last[2][0], detail="stepped back", end=last[2][1])
        here = stops[pos] if pos < len(stops) and not self._end else None
        if here is not None and len(here.path) > 2:
            owner, above = here.path[:-2], here.frames[:-1]
            if not first or not _inside(stops[first - 1], owner, above):
                return self._move(next(k for k in range(pos, len(stops)) if stops[k].path == owner
                                       and stops[k].frames == above), detail="stepped back")
        if not first:
            raise DebuggerError("nothing to step back over: the replay is at its first op")
        prev, last = first - 1, self._last_move(first)
        into = last is not None and last[1]
        if last is not None and not into and self._completes(prev):
            # NOTE: back over a control op a step (n, s, f) began inside of: where it began, as live
            (opos, oend), c = last[2], stops[prev]
            began = stops[opos - 1] if oend else stops[opos] if opos < len(stops) else None
            if began is not None and opos <= prev and _inside(began, c.path, c.frames):
                return self._move(opos, detail="stepped back", end=oend)
        while self._start(prev) < prev and (into or (stops[prev].path, stops[prev].frames) in self._entered):
            prev -= 1  # NOTE: a run the pc went through op by op (or a c or t ran) is stepped back into, as live
        return self._move(prev, detail="stepped back")

    def step_out(self) -> Stopped:
        return self._moved(self._step_out, True)

    def _step_out(self) -> Stopped:
        here, stops = self._here(), self.rec.stops
        if here is None or len(here.path) <= 2:
            raise DebuggerError("step out: the pc is in the main net, not in a subnet — nothing to finish")
        origin = (self.cursor.pos, self._end)
        done = next((k for k in range(self.cursor.pos, len(stops)) if len(stops[k].path) <= len(here.path) - 2),
                    len(stops))  # the control op owning the pc's subnet run completes
        stop = self._run_to(done + 1 if self._ended(done + 1) else self._next_at(len(here.path) - 2),
                            end=self._ended(done + 1))
        if stop.reason == "step":  # NOTE: live steps back over a finished step out's ops at once
            self._out_from[(self.cursor.pos, self._end)] = origin
        return stop

    def _hit(self, hit: Any, reverse: bool = False) -> Stopped:
        """The Stopped of a cursor hit, worded as the live debugger words it."""
        bp, back = hit.breakpoint, " (reverse)" if reverse else ""
        # NOTE: a write stops right after its op, as live: at its subnet's end when it was the last op there
        end = self._ended(hit.pos)
        after = hit.pos if end else self._land(hit.pos, hit.stop.path, hit.stop.frames)
        if isinstance(bp, Watchpoint):
            out = next(o for o in hit.stop.outputs if o.name == bp.blob)
            return self._move(after, "watchpoint", f"#{bp.id} {bp.blob} written (version {out.version}){back}",
                              end=end)
        if bp.kind == "condition":  # NOTE: the blobs the op wrote, as live says them
            written = ", ".join(o.name for o in hit.stop.outputs)
            return self._move(after, "condition", f"{bp.describe()} (after {written}){back}", end=end)
        self.cursor.goto(hit.pos)  # NOTE: the pc there names the op, as a live stop's text does
        self._end = False
        return self._move(hit.pos, "breakpoint", bp.hit_text(self.pc.text()) + back)

    def continue_(self) -> Stopped:
        return self._moved(self._continue, False)

    def _continue(self) -> Stopped:
        hit = self._scan_forward(len(self.rec.stops))  # NOTE: before a control op, its subnets' ops too
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
        return self._moved(lambda: self._run_to_path(tuple(path)), False)

    def _run_to_path(self, target: tuple[Any, ...]) -> Stopped:
        first, here, stops = self.ran(), self._here(), self.rec.stops  # NOTE: before a control op, its subnets' ops are ahead

        def inside(k: int) -> bool:  # NOTE: a control op the pc is in: its stop (after its subnets' ops) is no later run
            return self._completes(k) and (self._start(k) < first or here is not None and _inside(
                here, stops[k].path, stops[k].frames))
        q = next((k for k in range(first + (first == self.cursor.pos and not self._end), len(stops))
                  if stops[k].path == target and (k != self.cursor.pos or self._end) and not inside(k)), None)
        if q is not None:
            return self._run_to(q)  # NOTE: a breakpoint on the way stops it, as live
        # NOTE: no later run, but the main net's op that runs it is not behind the pc: live runs until that op
        # is passed and says so ("passed"); only a target behind the pc is refused
        top = target[1] if len(target) > 2 and isinstance(target[1], int) else None
        done = None if top is None or here is None or here.path[1] > top else next(
            (k for k in range(self.cursor.pos, len(stops)) if stops[k].path == ("op", top)), None)
        if done is None:
            raise DebuggerError(f"run to {'/'.join(map(str, target[1:]))}: no later run of that op in the recording")
        return self._run_to(self._land(done + 1, here.path, here.frames), reason="passed", detail=(
            f"run to {place(self.rec.program, target)}: it does not run again in this run; stopped after the op "
            "that ran it"))

    def run_to_nan(self) -> Stopped:
        return self._moved(self._run_to_nan, False)

    def _run_to_nan(self) -> Stopped:
        q = next((s.seq for s in self.rec.stops[self.cursor.pos:] if s.has_inf_or_nan), None)
        if q is None:
            return self._move(len(self.rec.stops), "end", "no op wrote NaN/Inf")
        # NOTE: "condition", not the live "nan": the session's provenance walk runs kernels
        return self._move(q + 1, "condition", f"{self.rec.stops[q].op_type} wrote NaN/Inf")

    def restart(self) -> Stopped:
        self._entered.clear()
        self._out_from.clear()
        self._moves.clear()
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
    def values_here(self) -> Mapping[str, Any]:
        """The blobs the pc's workspace sees, as live's :meth:`Debugger.values_here`: a recorded state
        read on use, a name only another workspace holds absent (:meth:`Recording.seen_from`)."""
        return self.rec.state(self.ran() - 1, self._here())

    def value(self, name: str, version: int | None = None) -> Any:
        """`name` as the pc's frame reads it (or `name`@`version`).  The latest version counts writes of
        the name in every workspace, as live's does; the value is the one the pc's workspace holds
        (:meth:`Recording.seen_from`), which for a name a subnet shadows is not that version's."""
        ran = self.ran()
        latest = self.rec.version_at(name, ran - 1)
        if version is None or version == latest:
            try:
                seen = self.rec.seen_from(name, ran - 1, self._here())
            except KeyError:  # NOTE: the pc's workspace cannot see it: live says so too, not another's value
                raise DebuggerError(f"blob '{name}' does not exist at this point") from None
            if seen is not None:
                return seen
            version = latest
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
