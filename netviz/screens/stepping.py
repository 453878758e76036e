"""Stepping in the TUI: moves queued and run one at a time in the move worker, the stop shown
(:meth:`after_step`), the status line, breakpoints and skips.

A mixin of :class:`netviz.screens.main.MainScreen` (moved from it as is): one copy of the TUI's logic
for a live session and a replay, which differ only in the debugger behind :class:`netviz.session.Session`.
"""
from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from typing import Any

from textual import work
from textual.css.query import NoMatches
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from engine.errors import NetvizError
from netviz import feeding, weights
from netviz.commands import missing_blob_hint
from netviz.errorlog import report
from netviz.overlays import OVERLAYS
from netviz.session import BlobRef, OpRef, Unavailable, to_oppath
from netviz.style import plain
from netviz.widgets.graph_scene import ZOOMS, window_for
from netviz.widgets.op_inspector import OpInspector
from netviz.widgets.status_line import StatusLine, random_flag
from netviz.screens.guarding import error_title, guarded, notice_toast


#: the young generation's collection threshold while a move runs (Python's default: 700); see _run_moves
MOVE_GC_YOUNG = 50_000
_GC_THRESHOLD = gc.get_threshold()


class SteppingActions:
    """The main screen's moves; the worker calls the Session, whose debugger is live or a replay's."""

    def select(self, ref: OpRef, stepping: bool = False, details: bool = True) -> None:
        """Make `ref` the selected op everywhere: tree, canvas (its net), inspector.

        `stepping`: the canvas follows lazily (scrolls only when the op nears an edge), so a
        step repaints two boxes, not the whole canvas.  `details`: False leaves the inspector to
        the caller (the first frame fills it after the first drawing)."""
        old, self.selected = self.selected, ref
        if ref.path != self.path:
            self.path = ref.path
        elif old is None or old.path != ref.path or self._window_of(old) != self._window_of(ref):
            self.show_graph()  # a big net: lay out the window around the new cursor
        canvas = self.canvas
        rows = canvas.rows_of_ops((canvas.selected_op, *canvas.linked_ops)) | canvas.hot_rows()
        canvas.selected_op = ref.index
        linked = self.session.linked(ref)
        canvas.linked_ops = linked if ref.path == self.path else set()
        self.op_tree.set_linked({OpRef(ref.path, i) for i in linked})
        canvas.refresh_rows(rows | canvas.rows_of_ops((ref.index, *canvas.linked_ops)) | canvas.hot_rows())
        if self.follow:
            canvas.center_on(ref.index, lazy=stepping)
        self.op_tree.select_ref(ref)
        if not details:  # the caller fills the inspector later
            pass
        elif stepping:  # NOTE: the pc's frame first; the inspector's table and re-layout (the costliest part) next frame
            self.call_after_refresh(self._details_after_pc, ref)
        else:
            self.show_details(ref)
        if self.focus_mode:
            self.set_focus_set()
        self.update_status()

    def show_details(self, ref: OpRef) -> None:
        """The op inspector and blob list of `ref` (skipped when the selection moved on meanwhile)."""
        if ref != self.selected:
            return
        self.query_one(OpInspector).show(self.session, ref)
        d = self.session.op_details(ref)
        blobs = self.query_one("#blob-list", OptionList)
        self.blob_options = [BlobRef(ref.path, n, v) for n, v in (*d["inputs"], *d["outputs"])]
        # NOTE: a scrollbar only when the blobs overflow the list's 10 rows: with `auto`, a list longer than the
        # last one showed a scrollbar until the screen's re-layout grew it, then hid it: a second layout per step
        blobs.styles.overflow_y = "auto" if len(self.blob_options) > 10 else "hidden"
        # NOTE: one replacement, not clear + add: an emptied list hides its scrollbar and a full one
        # shows it again, a second re-layout of the screen per step
        blobs.set_options([Option(plain(f"{'in ' if k < len(d['inputs']) else 'out'} {b.label()}"))
                           for k, b in enumerate(self.blob_options)])
        self.details_ref = ref

    def _details_after_pc(self, ref: OpRef) -> None:
        """The inspector of a step's op, right after the frame that showed the new pc, drawn at once.

        Textual draws a change at its update timer's next tick; after a frame that tick comes one
        to two refresh intervals later (the timer skips the tick it is late for and waits for the
        one after the next: 17-33 ms), which was most of a step's key -> complete repaint.  Here the
        inspector's widgets hand their changes to the screen now (``_check_refresh``: what they
        would do when idle) and the screen's next idle draws them (:meth:`_on_idle`)."""
        self.show_details(ref)
        if self.details_ref != ref:
            return
        for widget in (self.query_one(OpInspector), self.query_one("#blob-list", OptionList)):
            widget._check_refresh()
        self._draw_promptly = True
        self.check_idle()

    def _window_of(self, ref: OpRef) -> range | tuple[int, ...]:
        return window_for(self.session.view(ref.path), ref.index, self.session.show_backward)

    def update_status(self) -> None:
        try:
            status = self.query_one(StatusLine)
        except NoMatches:  # a worker's last word after the screen went away
            return
        s, ref = self.session, self.selected
        cursor = f"{s.path_label(ref.path)} › op {ref.index}" if ref else "-"
        flags = [f for f, on in (("SSA", self.ssa), ("backward", s.show_backward), ("follow", self.follow),
                                 ("focus", self.focus_mode)) if on]
        with self._moves:
            busy, queued = self.busy, len(self.pending)
        if busy is not None and not (self._shown_stop and not queued):
            flags.insert(0, f"⏳ {busy.rstrip('_').replace('_', ' ')}" + (f" +{queued} queued" if queued else "")
                         + " (Esc cancels)")
        overlay = [f"overlay:{OVERLAYS[self.overlay]}"] if self.overlay else []  # a narrow legend drops its name
        flags = weights.status_flag(s) + random_flag(s) + flags  # NOTE: random parameters are marked as long as they are in use
        status.show(s.pc_label(), cursor, flags + overlay + [f"zoom:{ZOOMS[self.effective_zoom()][0]}"])

    @guarded
    def after_step(self, stop: Any = None) -> None:
        """Show where the debugger stopped: markers, pc, the op there, and why it stopped."""
        if self._gc_frozen < 2:
            self._freeze_gc()
        self.op_tree.refresh_after_step()
        pc = self.session.pc
        if isinstance(pc, OpRef) and pc.index < len(self.session.view(pc.path).net.op):
            self.select(pc, stepping=True)
        elif self.selected is not None:  # NOTE: a run that ended past the chosen op: show its run
            self.call_after_refresh(self.show_details, self.selected)
        self.update_canvas_marks()
        self.update_status()
        self.call_after_refresh(self._stop_drawn.set)  # the move worker's idle work waits for it
        # NOTE: the status line's change reaches the screen now, with the canvas's and the op list's:
        # drawn in the frame that shows the new pc, not in the next
        self.query_one(StatusLine)._check_refresh()
        if self.overlay:
            self.show_graph()  # the legend's range
        for notice in self.session.pop_notices():
            self.notify(notice, **notice_toast(notice))
        if self.blob is not None:
            self.blob_inspector().show(self.session, self.blob)
        if stop is not None and stop.reason not in ("step",):
            hint = "  (K: skip it, giving its outputs)" if "no kernel" in stop.detail else ""
            hint += "  (a: alerts)" if stop.reason == "nan" else ""
            missing = feeding.missing_inputs(self.session, stop.detail) if stop.reason == "error" else []
            if missing:  # NOTE: every missing input named (the CLI's hint lists --input flags), then a prompt each
                hint = (f"; {len(missing)} inputs nothing gives: {', '.join(missing)} (asked for in turn; --input "
                        "NAME=SHAPE gives them at start)" if len(missing) > 1
                        else missing_blob_hint(stop.detail, self.session.model, True))
            if stop.reason == "nan":  # NOTE: the first bad element, back to what made it (engine.debugger.provenance)
                from rich.markup import escape
                hint += "".join("\n" + escape(line) for line in getattr(self.session, "provenance", ()))
            self.notify((stop.detail or stop.reason) + hint, title=stop.reason.capitalize(),
                        severity="error" if stop.reason in ("error", "nan") else "information")
            if missing:
                self.ask_feed(missing)

    def ask_feed(self, names: list[str], k: int = 0, fed: tuple[str, ...] = ()) -> None:
        """Ask for each missing input's value in turn (prefilled: value_info, else what its reader
        expects): the run stopped at the first, the rest were found up front, so one round asks them
        all (issue 42 item 19).  Then restart with them and run back to where the run stopped."""
        where, name = self.session.pc, names[k]

        def got(text: str) -> None:
            arr = feeding.feed(self.session, name, text)
            done = (*fed, f"{name} = {arr.dtype}{list(arr.shape)}")
            if k + 1 < len(names):
                self.ask_feed(names, k + 1, done)
                return
            self.notify(f"{'; '.join(done)}; restarting and running to where it stopped", title="Input")
            self.move("restart")
            if isinstance(where, OpRef):
                self.move("run_to", where)
        more = f"  [{k + 1} of {len(names)}: {', '.join(names)}]" if len(names) > 1 else ""
        self._ask(f"give input {name}{more}  (SHAPE[:DTYPE] for random values, or FILE.npy)",
                  feeding.suggest(self.session, name), got,
                  f"as --input takes it: 1,3 · 16,8:int32 · {name}.npy; Esc leaves it missing",
                  keys_before_open=k > 0)  # NOTE: a stop opens the first: a key typed ahead (a second c) is
        # no answer to it; the next ones the Enter of an answer opens, so what is typed after it is kept

    # -- actions ---------------------------------------------------------------------------
    def action_step(self, how: str) -> None:
        self.move(how, None)

    @guarded
    def action_run_to_cursor(self) -> None:
        """Run to the op under the cursor; one the run is past (it would never be reached: gdb's
        ``until`` would run to the end) offers a restart instead."""
        if self.selected is None:
            raise Unavailable("select an op to run to")
        target, dbg = self.selected, self.session.debugger
        if self.idle and dbg is not None and hasattr(dbg, "behind") and dbg.behind(to_oppath(target)):
            op = self.session.op(target)

            def restart(yes: str) -> None:
                if yes.strip().lower() in ("y", "yes"):
                    self.move("restart")
                    self.move("run_to", target)
            self._ask(f"op #{target.index} {op.type} ran already (the pc is past it) — type yes to restart "
                      "and run to it", "", restart)
            return
        self.move("run_to", target)

    @guarded
    def action_toggle_end_stops(self) -> None:
        """E: whether n/s stop at a subnet's end (``… › end``) or pass over it (the default)."""
        s = self.session
        s.skip_end_stops = not s.skip_end_stops
        s._on_debugger(lambda dbg: setattr(dbg, "skip_end_stops", s.skip_end_stops)
                       if s.plan_def is None else None)
        self.notify("n/s pass over subnet ends" if s.skip_end_stops else "n/s stop at each subnet's end too",
                    title="Stops")

    def move(self, how: str, target: OpRef | None = None, call: Callable[[], Any] | None = None) -> None:
        """Queue one debugger move (a key press); the move worker runs the queue in order.

        `call` replaces ``session.step(how, target)`` for moves that are not steps (skip)."""
        with self._moves:
            self.pending.append((how, target) if call is None else (how, call))  # type: ignore[arg-type]
            start = self.busy is None
            if start:
                self.busy = "starting"
        if start:
            self._run_moves()
            # NOTE: the busy flag of a lone key only once it has run a moment: most steps end within
            # a frame, and a frame showing ⏳ for them restarted Textual's frame clock, so the frame
            # showing the new pc waited a whole refresh interval (16.7 ms) behind it
            self.set_timer(0.05, self.update_status)
        else:
            self.update_status()

    @property
    def idle(self) -> bool:
        """No move running and none queued."""
        with self._moves:
            return self.busy is None and not self.pending

    @work(thread=True, group="debugger")
    def _run_moves(self) -> None:
        """The one move worker: pops queued moves until none is left (the UI stays live)."""
        threshold = _GC_THRESHOLD  # NOTE: not get_threshold(): a worker still in its idle wait may have raised it
        # NOTE: young collections wait until the frame showing the stop is drawn: a continue through
        # DenseNet-121 ran ~30 of them (records, undo entries, Textual's frame objects), 5-7 ms of the
        # key -> end frame; a long run still collects every MOVE_GC_YOUNG allocations
        gc.set_threshold(max(threshold[0], MOVE_GC_YOUNG), *threshold[1:])
        try:
            while True:
                with self._moves:
                    if not self.pending:
                        self.busy = None
                        break
                    how, target = self.pending.popleft()
                    self.busy, self._shown_stop = how, False
                    self._stop_drawn = threading.Event()  # NOTE: one per move: an earlier move's frame sets its own
                self._one_move(how, target)
            self._to_ui(self.update_status)
            # NOTE: once the frame showing the stop is drawn (after_step), at most 0.1 s: a fixed 0.1 s left
            # r then c within 0.15 s binding DenseNet-121's 668 ops inside the c (8-19 ms of it)
            drawn, stop = self._stop_drawn, lambda: self.busy is not None or not self.is_attached
            for _ in range(10):  # NOTE: a key meanwhile: this worker leaves within 10 ms, as before
                if drawn.wait(0.01) or stop():
                    break
        finally:
            gc.set_threshold(*threshold)
        gc.collect(0)  # NOTE: the young objects of the move, now that its frame is out
        idle_work = getattr(self.session.debugger, "idle_work", None)
        if idle_work is not None:  # NOTE: the last run's norms and binding the rest of the net, while idle
            idle_work(stop)

    def _to_ui(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> None:
        """Run `fn` on the UI thread and wait; nothing once the screen is gone (quit mid-move)."""
        if self.is_attached and self.app.is_running:
            try:
                self.app.call_from_thread(fn, *args, **kw)
            except RuntimeError:  # the app closed between the check and the call
                pass

    def _one_move(self, how: str, target: Any) -> None:
        call = self._to_ui
        try:
            stop = target() if callable(target) else self.session.step(how, target)
        except Unavailable as e:
            call(self.notify, str(e), title="Not available", severity="warning")
        except NetvizError as e:
            from engine.debugger.machine import DebuggerError  # noqa: PLC0415 - loaded: the move that raised ran it

            for notice in self.session.pop_notices():
                call(self.notify, notice, **notice_toast(notice))
            if isinstance(e, DebuggerError):  # NOTE: a move the pc's place does not allow (f in the main net,
                # u at the start, t behind the pc): a refusal that says why, not an error
                call(self.notify, str(e), title="Not available", severity="warning")
            else:
                call(self.notify, str(e), title=error_title(e), severity="error")
        except Exception as e:  # noqa: BLE001 - shown, never fatal
            call(self.notify, report(e, how.rstrip("_").replace("_", " ")), title="Internal error", severity="error")
        else:
            with self._moves:
                if stop is not None and stop.reason == "error":  # NOTE: keys typed ahead of a failed move are
                    self.pending.clear()  # dropped (as gdb does): each re-ran the failure and its feed prompt
                queued = bool(self.pending)
            if queued and stop is not None and stop.reason == "step":
                # NOTE: keys are queued: the status line follows, the rest shows where the last of them
                # stops, so they drain at the debugger's pace, not one screen repaint per step (the
                # op list and canvas marks diff against what they last showed: nothing is lost)
                call(self.update_status)
            else:
                # NOTE: the move is over: its stop shows without the busy flag (⏳ step showed for one
                # frame per step, and the worker's last status update cleared it one frame later)
                self._shown_stop = True
                call(self.after_step, stop)

    def action_cancel_run(self) -> None:
        """Escape: drop the typed-ahead moves and stop the running one between two ops; an
        export in progress is abandoned (its file is removed when ``dot`` returns); a big tensor's
        statistics pass stops within one slice (the inspector says so)."""
        if self._blob_info is not None:
            self._blob_info.cancel_stats()
        if self.exporting is not None:
            self.notify(f"cancelling the export to {self.exporting}", title="Cancel")
            self.exporting = None
        if self.diffing is not None:
            self.diffing.set()
        with self._moves:
            dropped, running = len(self.pending), self.busy
            self.pending.clear()
        if running is not None:
            self.session.cancel()
        if running is not None or dropped:
            self.notify(f"cancelled {running or 'nothing running'}" + (f"; dropped {dropped} queued" if dropped else ""),
                        title="Cancel")
        self.update_status()

    @guarded
    def action_toggle_breakpoint(self) -> None:
        if self.selected is None:
            raise Unavailable("select an op first")
        on = self.session.toggle_breakpoint(self.selected)
        self.update_canvas_marks()
        self.op_tree.update_markers({self.selected})
        self.notify(f"breakpoint {'set' if on else 'cleared'} at op #{self.selected.index}", title="Breakpoint")

    @guarded
    def action_list_breakpoints(self) -> None:
        def closed(_: Any) -> None:
            self.update_canvas_marks()
            self.op_tree.refresh_markers()

        from netviz.screens.breakpoints import BreakpointsScreen  # noqa: PLC0415 - a later key's screen
        self.app.push_screen(BreakpointsScreen(self.session), closed)

    @guarded
    def action_skip_op(self) -> None:
        """Step past the op at the pc without running it; the user gives its outputs."""
        pc = self.session.pc or OpRef((), 0)  # not started: the first op (the worker starts the debugger)
        if pc.index >= len(self.session.view(pc.path).net.op):
            raise Unavailable("nothing to skip: the program has ended")
        op = self.session.op(pc)

        def skip(text: str) -> None:
            text = "" if text.strip() == "zeros" else text
            self.move("skip", call=lambda: (self.session.skip(text), self.session.last_stop)[1])
        self._ask(f"skip op #{pc.index} {op.type}: its outputs ({', '.join(op.output)})", "zeros", skip,
                  "zeros (shape-inferred) · NAME=VALUE; NAME=VALUE with VALUE as for inject (x.npy, randn(1,10), 0.5)")

    @guarded
    def action_global_breakpoint(self) -> None:
        """C: a breakpoint on a condition, type or name (c then runs to it); one that is refused reopens the
        prompt on the typed text, the cursor at the error."""
        from netviz.screens.prompt import ask_until_taken  # noqa: PLC0415 - a later key's screen

        def add(text: str) -> None:
            self.notify(f"breakpoint {self.session.add_global_breakpoint(text)}", title="Breakpoint")
        ask_until_taken(self, "break when  (condition · type T [if C] · name REGEX [if C], then optional ignore N)",
                        add, "loss > 10 · max_abs(x) > 1e3 · has_inf_or_nan(any) · step >= 3 · type Relu ignore 2")

    @guarded
    def action_rerun_to_blob(self) -> None:
        """Restart and run until the op that writes the shown version has run (a dropped value)."""
        ref = self.blob
        writers = [i for i, v in self.session.producers(ref.path, ref.name) if v == ref.version] if ref else []
        if ref is None or not writers:
            raise Unavailable("select a blob version written by an op (name@v) first")
        op = OpRef(ref.path, writers[0])
        self.move("restart")
        self.move("run_to", op)
        self.move("step")
        self.notify(f"re-running to op #{op.index} for {ref.label()}", title="Re-run")
