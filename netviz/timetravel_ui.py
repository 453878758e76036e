"""Time travel in the TUI (issue 45): record the session's run (``T``), reverse-continue (``U``), jump to the
writer of the shown blob version (``G``), query stops (``?`` in the search screen), and stop at the first
loop iteration or timestep where a condition holds (``I``).

One code path for live and replay: a move is a function of the debugger run in the move worker
(:func:`travel`).  A replay's debugger (:class:`engine.debugger.replayer.ReplayDebugger`) moves its cursor
any distance both ways; a live one steps back over its undo history (:func:`engine.debugger.timetravel.back_to`)
and says "Not available" where the history ends.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.markup import escape
from textual.widgets import Static

from netviz.session import BlobRef, OpRef, Session, Unavailable, to_oppath


def is_replay(dbg: Any) -> bool:
    """The debugger is a recording's (its moves are cursor moves)."""
    return hasattr(dbg, "cursor")


def travel(session: Session, fn: Callable[[Any], Any]) -> Any:
    """Run move `fn(debugger)` as :meth:`Session.step` runs a step: the debugger held, the state published."""
    with session.moving():
        dbg = session._debugger()
        try:
            stop = fn(dbg)
        finally:
            dbg.clear_cancel()
    session.last_stop = stop
    return stop


def reverse_continue(dbg: Any) -> Any:
    """Back to the previous breakpoint hit: a replay's cursor, else the live undo history."""
    if is_replay(dbg):
        return dbg.reverse_continue()
    from engine.debugger.timetravel import reverse_continue_live  # noqa: PLC0415
    return reverse_continue_live(dbg)


def go_back_to(dbg: Any, n: int, what: str) -> Any:
    """Put the pc before op run `n` (`n` ops have run): the cursor in a replay, the undo history live."""
    from engine.debugger.machine import DebuggerError  # noqa: PLC0415

    if is_replay(dbg):
        return dbg.goto(n, detail=what)
    if n > len(dbg.records):
        raise DebuggerError(f"{what}: ahead of the pc (t runs to it)")
    if n == len(dbg.records):
        raise DebuggerError(f"{what}: the pc is there already")
    from engine.debugger.records import Stopped  # noqa: PLC0415
    from engine.debugger.timetravel import back_to  # noqa: PLC0415
    return Stopped("jump", back_to(dbg, n).pc, what)


def writer_run(session: Session, dbg: Any, ref: BlobRef) -> int:
    """The op run that wrote `ref` last before the pc: its index in ``dbg.records``.

    Version None: the last op that wrote the name; a version: the last run of the op writing it in its net.

    Raises
    ------
    Unavailable
        An input or initial value (no op wrote it), or its writer has not run yet.
    """
    records = dbg.records
    if ref.version is None:
        ks = [k for k, r in enumerate(records) if any(o.name == ref.name for o in r.outputs)]
    else:
        ops = [i for i, v in session.producers(ref.path, ref.name) if v == ref.version]
        if not ops:
            raise Unavailable(f"{ref.label()} is the value the net starts with: no op wrote it")
        path = to_oppath(OpRef(ref.path, ops[0]))
        ks = [k for k, r in enumerate(records) if r.path == path]
    if not ks:
        raise Unavailable(f"{ref.label()}: its writer has not run yet at the pc (t runs to it)")
    return ks[-1]


# ---- the query behind "?" in the search screen -------------------------------------------------------
@dataclass(frozen=True, slots=True)
class QueryHit:
    """A query row and where its stop is: ``pos`` ops have run (the condition holds after op run ``pos - 1``)."""

    pos: int
    op: int
    place: str
    blobs: tuple[str, ...]
    iteration: str
    value: Any

    def label(self) -> str:
        """``#12    main › While op#2 iteration 1 › … › op#1 Tanh  acc@3  iteration 1  0.9051``"""
        v = self.value
        try:
            v = "" if v is None else f"{float(v):.4g}"
        except (TypeError, ValueError):  # NOTE: an array or text value: its start
            v = str(v)[:40]
        return f"#{self.op:<5} {self.place}  {', '.join(self.blobs)}  {self.iteration or '-'}  {v}"


def query_hits(session: Session, expr: str, cancel: threading.Event | None = None) -> tuple[list[QueryHit], str]:
    """Run the breakpoint DSL `expr` over the recording (replay) or the records so far (live) in the move
    lock; returns the hits and a note on what was searched.

    Raises
    ------
    ConditionError
        `expr` does not parse.
    """
    from engine.debugger.conditions import parse_condition  # noqa: PLC0415

    cond = parse_condition(expr)
    with session.moving():
        dbg = session.debugger
        if dbg is None:
            return [], "nothing has run yet: the run so far is empty (n or c runs it; a replay has it all)"
        if is_replay(dbg):
            from engine.debugger.timetravel import query  # noqa: PLC0415
            rows = query(dbg.rec, expr)
            return [QueryHit(r.seq + 1, r.seq, r.place, r.blobs, r.iteration, r.value) for r in rows], \
                f"over the recording's {len(dbg.rec.stops)} op runs"
        return _live_hits(session, dbg, cond, cancel), (
            f"over the {len(dbg.records)} op runs so far, each op's last run (earlier loop iterations' values "
            "are not kept live; a recording, T, has them all)")


def _live_hits(session: Session, dbg: Any, cond: Any, cancel: threading.Event | None) -> list[QueryHit]:
    """Live: the condition after each op's last run, on the values it wrote (the debugger keeps those)."""
    from engine.errors import NetvizError  # noqa: PLC0415

    records, out = dbg.records, []
    last = {r.path: k for k, r in enumerate(records)}
    values = dbg.frames[0].ws.values
    for k, r in enumerate(records):
        if last[r.path] != k or (cancel is not None and cancel.is_set()):
            continue
        written = {}
        for o in r.outputs:
            try:
                written[o.name] = dbg.written_value(r.path, o.name)
            except NetvizError:
                pass
        if not written or not cond.triggered_by(written) or not cond(written, values, k + 1):
            continue
        blobs = tuple(sorted(cond.blobs)) if cond.blobs else tuple(written)
        frames = getattr(r, "frames", ())
        out.append(QueryHit(k + 1, k, session.place(r), blobs, next((f for f in reversed(frames) if f), ""),
                            cond.value(written, values, k + 1)))
    return out


# ---- recording from the TUI ------------------------------------------------------------------------
def record_run(session: Session, target: str, shown: Callable[[Any], None]) -> Any:
    """Re-run from the start with a recorder attached, to the end (breakpoints pass), into `target`.

    The session's own debugger does the run (a restart, then continues), so the screen ends at the
    end of the run it recorded; Esc stops it and the file holds the ops up to there.  `shown(recorder)`
    is called once the recorder is attached (the progress line reads it).
    """
    from engine.debugger.recording import Recorder  # noqa: PLC0415

    with session.moving():
        dbg = session._debugger()
        dbg.restart()
        recorder = Recorder(dbg, Path(target))
        try:
            shown(recorder)
            stop = dbg.continue_()
            while stop.reason in ("breakpoint", "condition", "watchpoint"):
                stop = dbg.continue_()
            recorder.close(stop)
        finally:
            dbg.clear_cancel()
            if recorder in dbg.listeners:
                dbg.listeners.remove(recorder)
    session.last_stop = stop
    return stop, recorder


class RecordProgress(Static):
    """``⏺ recording run.nvrec: 120 op runs, 3.1 MB`` while T records (a line over the footer)."""

    DEFAULT_CSS = "RecordProgress { dock: bottom; height: 1; background: $error 30%; }"

    def __init__(self, target: str) -> None:
        super().__init__(f"⏺ recording {escape(target)} (Esc stops it)")
        self.target, self.recorder = target, None

    def on_mount(self) -> None:
        self.set_interval(0.2, self.tick)

    def tick(self) -> None:
        r = self.recorder
        if r is not None:
            self.update(f"⏺ recording {escape(self.target)}: {r.nstops} op runs, {r.bytes_in / 1e6:.1f} MB "
                        "(Esc stops it)")


class TimeTravelActions:
    """The main screen's time-travel keys (mixed into :class:`netviz.screens.main.MainScreen`)."""

    session: Session
    blob: BlobRef | None

    def _refuse(self, why: str) -> None:
        """A key that cannot act here: a warning saying why, as the other refused moves."""
        self.notify(why, title="Not available", severity="warning")  # type: ignore[attr-defined]

    def action_reverse_continue(self) -> None:
        """U: back to the previous breakpoint hit (replay: any distance; live: over the undo history)."""
        self.move("reverse_continue", call=lambda: travel(self.session, reverse_continue))  # type: ignore[attr-defined]

    def action_last_writer(self) -> None:
        """G: the pc to the op run that wrote the shown blob version (before it runs; n shows the write)."""
        ref = self.blob
        if ref is None:
            self._refuse("select a blob first (l, then ↑↓ in the blob list)")
            return

        def move(dbg: Any) -> Any:
            k = writer_run(self.session, dbg, ref)
            return go_back_to(dbg, k, f"op run #{k} {dbg.records[k].op_type} wrote {ref.label()}")
        self.move("last_writer", call=lambda: travel(self.session, move))  # type: ignore[attr-defined]

    def action_first_iteration(self) -> None:
        """I: run to the first op inside a loop iteration or RNN timestep after which a condition holds
        (:func:`engine.debugger.timetravel.run_to_first_iteration`: live, conditions met in the main net are
        passed; a replay's cursor moves there).  A condition that does not parse reopens the prompt on its
        text, the cursor at the error, before anything runs."""
        from engine.debugger.timetravel import run_to_first_iteration  # noqa: PLC0415
        from netviz.screens.prompt import ask_until_taken  # noqa: PLC0415 - a later key's screen

        if not self.session.has_loops():
            self._refuse("no loop here: I stops inside a While iteration or an RNN timestep, and this net has "
                         "neither (C stops at the first op after which a condition holds)")
            return

        def take(expr: str) -> None:
            # NOTE: refused here, on the typed text, not later in the move worker; an unknown blob too, which
            # would never be true and run the whole net
            self.session.check_condition(expr)
            self.move("first_iteration", call=lambda: travel(  # type: ignore[attr-defined]
                self.session, lambda dbg: run_to_first_iteration(dbg, expr)))
        ask_until_taken(self, "stop at the first loop iteration or timestep where", take,
                        "max_abs(h) > 0.9 · acc > 2 · has_inf_or_nan(any) · norm(x) < 1e-6")

    def jump_to_hit(self, hit: QueryHit) -> None:
        """Enter on a query row: the pc right after the op run where the condition held."""
        self.move("query", call=lambda: travel(  # type: ignore[attr-defined]
            self.session, lambda dbg: go_back_to(dbg, hit.pos, f"query: after op run #{hit.op}")))

    def action_record_run(self) -> None:
        """T: record this session's run to FILE.nvrec (re-run from the start, to the end) in the move worker."""
        s = self.session
        if s.debugger is not None and is_replay(s.debugger):
            self._refuse("this is a recording already (netviz query FILE EXPR asks it questions)")
            return
        if s.plan_def is not None:
            self._refuse("a plan is not recorded: record one of its nets (netviz run NET --record FILE)")
            return

        def start(target: str) -> None:
            target = str(Path(target).expanduser())
            folder = Path(target).resolve().parent
            if not folder.is_dir():  # NOTE: before the restart: a refused file leaves the pc where it was
                raise Unavailable(f"record to {target}: no folder {folder}")
            bar = RecordProgress(target)
            self.mount(bar)  # type: ignore[attr-defined]

            def shown(recorder: Any) -> None:
                bar.recorder = recorder

            def run() -> Any:
                try:
                    stop, recorder = record_run(s, target, shown)
                finally:
                    self._to_ui(bar.remove)  # type: ignore[attr-defined]
                said = f"recorded {recorder.nstops} op runs to {target} ({stop.reason}); netviz replay {target} " \
                       "opens it"
                self._to_ui(self.notify, said, title="Recorded")  # type: ignore[attr-defined]
                return stop
            self.move("record", call=run)  # type: ignore[attr-defined]
        ask = self._ask  # type: ignore[attr-defined]
        ask("record the run (from the start, to the end) to", f"{Path(s.name).stem}.nvrec", start)
