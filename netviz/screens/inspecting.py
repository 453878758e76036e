"""Inspecting in the TUI: the blob list and blob inspector, watches, inject, alerts, the REPL and
shell, blob versions, save and copy.

A mixin of :class:`netviz.screens.main.MainScreen` (moved from it as is): one copy of the TUI's logic
for a live session and a replay, which differ only in the debugger behind :class:`netviz.session.Session`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual import work
from textual.containers import VerticalScroll
from textual.css.query import NoMatches
from textual.widgets import OptionList

from engine.errors import NetvizError
from netviz.messages import BlobSelected, OpSelected
from netviz.session import BlobRef, OpRef, Unavailable, from_oppath
from netviz.screens.guarding import error_title, guarded

if TYPE_CHECKING:  # NOTE: imported where used: no part of the first frame
    from netviz.widgets.blob_inspector import BlobInspector


class InspectingActions:
    """The main screen's blob and value keys; values come from the Session, live or replayed."""

    def select_blob(self, ref: BlobRef) -> None:
        self.blob = ref
        self.blob_inspector().result = None  # a blob replaces an eval's value there
        self.canvas.selected_blob = (ref.name, ref.version if self.ssa else None)
        self.canvas.refresh()
        self.blob_inspector().show(self.session, ref)
        self.call_after_refresh(self._reveal_blob_inspector)

    def blob_inspector(self) -> BlobInspector:
        """The blob inspector (hidden until a blob or an eval's value is shown), mounted under the op
        inspector after the first frame (its four widgets and the slice box's styles are no part of
        it), or now if a blob is shown before."""
        if self._blob_info is None:
            from netviz.widgets.blob_inspector import BlobInspector  # noqa: PLC0415 - after the first frame

            self._blob_info = BlobInspector(id="blob-info")
            self._blob_info.display = False
            self.query_one("#inspector", VerticalScroll).mount(self._blob_info)
        return self._blob_info

    def _reveal_blob_inspector(self) -> None:
        """Scroll the inspector column so the blob just chosen shows: under a long op inspector
        (ResNet-50's Conv lists 24 arguments) it would start below the screen."""
        try:
            blob = self.blob_inspector()
            self.query_one("#inspector", VerticalScroll).scroll_to_widget(blob, animate=False, top=True)
        except NoMatches:  # the screen went away meanwhile
            pass

    def on_op_selected(self, message: OpSelected) -> None:
        if message.ref != self.selected:  # NOTE: the tree echoes a select() that moved its cursor
            self.run_guarded(self.select, message.ref)

    def on_blob_selected(self, message: BlobSelected) -> None:
        self.run_guarded(self.select_blob, message.ref)

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option_list.id == "blob-list" and event.option_index < len(self.blob_options):
            self.run_guarded(self.select_blob, self.blob_options[event.option_index])

    @guarded
    def action_watch_blob(self) -> None:
        """w: stop after each write of a blob; a name the net lacks asks again with its text (it was taken
        and the watch never fired)."""
        from netviz.screens.prompt import ask_until_taken  # noqa: PLC0415 - a later key's screen

        def watch(name: str) -> None:
            self.session.watch(name.strip())
            self.notify(f"watching {name.strip()}", title="Watch")
        ask_until_taken(self, "watch blob", watch, value=self.blob.name if self.blob else "")

    @guarded
    def action_inject_value(self) -> None:
        def inject(text: str, reshape: bool = False, create: bool = False) -> None:
            from engine.debugger.values import ShapeMismatch

            name, sep, value = text.partition("=")
            if not sep:
                raise NetvizError(f"inject: expected NAME=VALUE, got {text!r}")
            known = {b for path in {(), self.path} for b in self.session.all_blobs(path)} | set(self.session.values)
            if name.strip() not in known and not create:  # NOTE: a typo would silently make a new blob
                self._ask(f"{name.strip()} is no blob of this net — type yes to create it", "",
                          lambda yes: inject(text, reshape, True) if yes.strip().lower() in ("y", "yes") else None)
                return

            def run() -> None:  # in the move worker: never beside a running move
                call = self._to_ui
                try:
                    arr = self.session.inject(name.strip(), value.strip(), reshape=reshape, path=self.path)
                except ShapeMismatch as e:
                    call(self._ask, f"{e} — type yes to inject it anyway", "", lambda yes: inject(text, True)
                         if yes.strip().lower() in ("y", "yes") else None)
                    return
                call(self.notify, f"{name.strip()} = {arr.dtype}{list(arr.shape)} (marked injected until an op "
                     "writes it)", title="Injected")
                call(self.select_blob, BlobRef(self.path, name.strip()))
            self.move("inject", call=run)
        shown = self.session.blob_info(self.blob.name) if self.blob else None
        typed = f" ({'×'.join(map(str, shown['shape']))} {shown['dtype']})" if shown and shown["shape"] else ""
        self._ask(f"inject value  NAME=VALUE{typed}", f"{self.blob.name}=" if self.blob else "", inject,
                  "VALUE: nan · inf · 0.5 (fills the shape) · [1, nan] · zeros() · ones() · randn(2,3) · x.npy")

    @guarded
    def action_show_alerts(self) -> None:
        alerts = self.session.alerts()
        rows, refs = [], []
        for r in alerts:
            ref = from_oppath(r.path)
            bad = ", ".join(f"{o.name} NaN×{o.nan_count} Inf×{o.inf_count}" for o in r.outputs
                            if o.nan_count or o.inf_count)
            rows.append(f"{r.seq:>5}  {self.session.place(r)}  {bad}")
            refs.append(ref)

        def jump(ref: Any) -> None:
            if isinstance(ref, OpRef):
                self.run_guarded(self.select, ref)

        from netviz.screens.pick import PickScreen  # noqa: PLC0415 - a later key's screen
        self.app.push_screen(PickScreen(f"NaN/Inf alerts in execution order ({len(rows)}; Enter jumps)", rows, refs,
                                        empty="(no op has written NaN or Inf yet: x runs to the first)"), jump)

    # -- REPL at a stop (issue 30 item 6) ---------------------------------------------------------
    @guarded
    def action_eval(self) -> None:
        """``:`` an expression over the blobs as they are now (engine.debugger.repl); its value is
        shown in the blob inspector (S saves it)."""
        self._ask_eval(self._stopped_debugger(), self.result[0] if self.result else "")

    def _ask_eval(self, dbg: Any, value: str, cursor: int | None = None) -> None:
        """The ``:`` prompt on `value`; an expression that fails opens it again on its text, the cursor at
        the error (a typo in a long expression meant typing it all again: ``:`` offered the last good one)."""
        self._ask("eval  (NumPy over the blobs now: fc1.max(), np.abs(x - y).mean(), b(\"gpu_0/conv1\"))",
                  value, lambda expr: self._evaluate(dbg, expr),
                  "names that are identifiers are blobs; others: b(\"name\") or blobs[\"name\"]; np, math; "
                  "nv.b, nv.blobs, nv.np: never shadowed by a blob", cursor=cursor)

    @work(thread=True, exclusive=True, group="eval")
    def _evaluate(self, dbg: Any, expr: str) -> None:
        """Evaluate off the UI thread (a reduction over a big blob must not freeze the screen); the
        value, or the expression's one-line error, is shown on the UI thread."""
        from engine.debugger.repl import evaluate

        try:
            value = evaluate(dbg, expr)
        except NetvizError as e:
            from netviz.screens.prompt import error_cursor  # noqa: PLC0415 - a later key's screen

            def fail(error: NetvizError = e) -> None:
                self._ask_eval(dbg, expr, error_cursor(expr, error))
                raise error
            self.app.call_from_thread(self.run_guarded, fail)
            return
        self.app.call_from_thread(self.run_guarded, self._show_result, expr, value)

    def _show_result(self, expr: str, value: Any) -> None:
        self.result = (expr, value)
        self.blob_inspector().show_result(self.session, expr, value)
        self.call_after_refresh(self._reveal_blob_inspector)
        shape = f"{value.dtype}{list(value.shape)}" if hasattr(value, "shape") else type(value).__name__
        self.notify(f"{expr} → {shape} (shown in the inspector; S saves it)", title="Eval")

    @guarded
    def action_shell(self) -> None:
        """``!`` a Python shell with ``ws``, ``net``, ``dbg`` (and ``np``) bound, the TUI suspended
        (pudb's ``!``); Ctrl+D returns to it."""
        import code

        import numpy as np

        dbg = self._stopped_debugger()
        if getattr(dbg, "frames", None) is None:  # NOTE: a replay has recorded values, no workspace to hand over
            raise Unavailable("a replay has no workspace for a shell: : evaluates over the recorded values here")
        bound = {"ws": dbg.frames[-1].ws, "net": dbg.frames[-1].net, "dbg": dbg, "np": np, "session": self.session}
        banner = (f"netviz shell at {self.session.pc_label()}\n  ws: the workspace here (ws.fetch_blob(name)), "
                  "net: its NetDef, dbg: the Debugger, np: NumPy.  Ctrl+D returns to the TUI.")
        from engine.debugger.records import Stopped  # noqa: PLC0415

        stops: list[Any] = []

        def listen(event: Any) -> None:
            if isinstance(event, Stopped):
                stops.append(event)
        dbg.listeners.append(listen)
        try:  # NOTE: a move: the state the screen shows is copied at its end (a dbg.step() there showed the old pc)
            with self.app.suspend(), self.session.moving():
                code.interact(banner=banner, local=bound, exitmsg="back to netviz")
        finally:
            dbg.listeners.remove(listen)
        if stops:
            self.session.last_stop = stops[-1]
        self.after_step(stops[-1] if stops else None)

    def _stopped_debugger(self) -> Any:
        dbg = self.session.debugger
        if dbg is None:
            raise Unavailable("not running yet: n starts the debugger, then : evaluates at the stop")
        if not self.idle:
            raise Unavailable("a move is running: Esc stops it, then evaluate at the stop")
        return dbg

    @guarded
    def action_blob_version(self, delta: int) -> None:
        """``[`` / ``]``: the shown blob's previous / next SSA version (its value at each)."""
        if self.blob is None:
            raise Unavailable("select a blob first (l, then ↑↓ in the blob list)")
        ref = self.blob
        writers = sorted({v for _, v in self.session.producers(ref.path, ref.name)})
        read0 = any(v == 0 for _, v in self.session.consumers(ref.path, ref.name))
        versions = sorted(set(writers) | ({0} if read0 or not writers else set()))
        now = ref.version if ref.version is not None else (versions[-1] if versions else 0)
        at = versions.index(now) if now in versions else None
        if at is not None and not 0 <= at + delta < len(versions):
            which = "first" if delta < 0 else "last"
            raise Unavailable(f"'{ref.name}'@{now} is its {which} version ({len(versions)} in all: "
                              f"{', '.join(f'@{v}' for v in versions)})")
        self.select_blob(BlobRef(ref.path, ref.name, versions[at + delta if at is not None else 0]))

    @guarded
    def action_save_blob(self) -> None:
        from netviz.widgets.blob_inspector import save_value  # noqa: PLC0415 - off the first frame

        shown = self.blob_inspector()
        if self.result is not None and shown.result is not None:  # an eval's value is what the inspector shows
            expr, value = self.result
            self._ask(f"save the value of {expr} to (.npy)", "eval.npy",
                      lambda target: self.notify(f"wrote {save_value(value, target, expr)}", title="Saved"))
            return
        if self.blob is None:
            raise Unavailable("select a blob first (the blob list under the op)")
        ref = self.blob
        default = ref.file_name()

        def save(target: str) -> None:
            self.notify(f"saving {ref.label()} to {target}…", title="Save")
            self._save(ref, target)
        self._ask(f"save {ref.label()} to (.npy: this version · .npz: every version)", default, save)

    @work(thread=True, group="save")
    def _save(self, ref: BlobRef, target: str) -> None:
        """Write a blob's value off the UI thread (a big tensor, a device copy); a notice when done or failed."""
        try:
            out = self.session.save(ref, target)
        except NetvizError as e:
            self._to_ui(self.notify, str(e), title=error_title(e), severity="error")
        except Exception as e:  # noqa: BLE001 - an unwritable file is a notice, never the end of the app
            self._to_ui(self.notify, f"save {ref.label()}: {type(e).__name__}: {e}", title="Not saved",
                        severity="error")
        else:
            self._to_ui(self.notify, f"wrote {out}", title="Saved")

    @guarded
    def action_copy_value(self) -> None:
        if self.blob is None:
            raise Unavailable("select a blob first")
        text = self.blob_inspector().shown_text()
        if not text:
            raise Unavailable(f"{self.blob.label()} has no value yet")
        self.app.copy_to_clipboard(text)
        self.notify(f"copied {self.blob.label()} ({len(text)} characters)", title="Copy")
