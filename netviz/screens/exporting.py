"""Export and comparison in the TUI: device, run and ONNX diffs (in workers, cancellable), extract,
copy, the view spec and exports.

A mixin of :class:`netviz.screens.main.MainScreen` (moved from it as is): one copy of the TUI's logic
for a live session and a replay, which differ only in the debugger behind :class:`netviz.session.Session`.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import work

from engine.errors import NetvizError
from netviz.errorlog import report
from netviz.overlays import OVERLAYS, diff_header, diff_label, diff_row, overlay_colors, worst_per_op
from netviz.session import NetPath, OpRef, Unavailable
from netviz.widgets.graph_scene import ZOOMS, window_for
from netviz.screens.guarding import error_title, guarded

if TYPE_CHECKING:  # NOTE: imported where used: no part of the first frame
    from netviz.view_export import ViewSpec


class ExportActions:
    """The main screen's export and diff keys; slow work runs in workers, its result is shown on the UI thread."""

    def _not_a_plan(self, what: str) -> None:
        """A diff runs one net: a PlanDef's step ops have no kernel (D said "the cpu run failed: op #0
        ExecutionStep … not a Caffe2 op")."""
        if self.session.plan_def is not None:
            raise Unavailable(f"{what} runs one net, not a PlanDef's steps: open one of its nets")

    @guarded
    def action_device_diff(self) -> None:
        self._not_a_plan("the device diff")
        self._start_diff("Device diff", "running the net on cpu and gpu… (Esc cancels)", self.session.device_diff,
                         self._show_diff)

    def _start_diff(self, title: str, line: str, run: Callable[[threading.Event], Any],
                    show: Callable[[Any], None]) -> None:
        """One diff at a time (device or ONNX Runtime): `run(cancel)` in a worker, Esc sets `cancel`,
        `show(result)` back on the UI thread; a failure is one notice."""
        if self.diffing is not None:
            raise Unavailable("a diff is already running (Esc cancels it)")
        self.diffing = threading.Event()
        self.notify(line, title=title)
        self._diff(self.diffing, run, show)

    @work(thread=True, group="diff")
    def _diff(self, cancel: threading.Event, run: Callable[[threading.Event], Any], show: Callable[[Any], None]) -> None:
        try:
            result = run(cancel)
        except NetvizError as e:
            self._to_ui(self.notify, str(e), title=error_title(e), severity="error")
            return
        except Exception as e:  # noqa: BLE001 - a failed comparison is a notice, never the end of the app
            self._to_ui(self.notify, report(e, "diff"), title="Internal error", severity="error")
            return
        finally:
            self.diffing = None
        self._to_ui(show, result)

    def _show_diff(self, report: Any, threshold: float = 1e-4) -> None:
        first = report.first_over(threshold)
        rows = [f"{d.name}  {'×'.join(map(str, d.shape)) or 'scalar'}  abs {d.max_abs:.3g}  rel {d.max_rel:.3g}"
                for d in report.diffs]  # NOTE: shapes as the inspector and `netviz info` write them
        head = report.header(threshold) + "; worst first"
        start = next((k for k, d in enumerate(report.diffs) if first is not None and d.name == first.name), 0)

        def jump(name: Any) -> None:
            writers = self.session.producers((), name) if isinstance(name, str) else []
            if writers:
                self.run_guarded(self.select, OpRef((), writers[0][0]))

        from netviz.screens.pick import PickScreen  # noqa: PLC0415 - a later key's screen
        self.app.push_screen(PickScreen(head, rows, [d.name for d in report.diffs], start), jump)

    @guarded
    def action_run_diff(self) -> None:
        """Two runs of the net op by op (side B asked for: an init net, a model file, an .onnx, fix, gpu): ops
        coloured by their OWN error, the culprit first in the list (netviz/run_diff.py)."""
        from netviz import run_diff  # noqa: PLC0415 - a later key's module

        self._ask("side B: INIT.pb · MODEL.pb · MODEL.onnx · fix · gpu", "", lambda text: self._start_diff(
            "Run diff", "running both sides op by op… (Esc cancels)",
            lambda cancel: run_diff.compare(self.session, text, cancel), self._show_onnx_diff))

    @guarded
    def action_extract(self) -> None:
        """Cut the culprit, the selected op or the first NaN op (or any N:M typed) into a repro folder."""
        from netviz import run_diff  # noqa: PLC0415 - a later key's module

        spec = run_diff.default_range(self.session, self.selected, self.onnx_rows)
        self._ask("extract [K/ARG] N:M DIR (ops N to M-1)", f"{spec} /tmp/netviz-extract-{spec.replace('/', '_')}",
                  lambda text: self._start_diff("Extract", "running the net and writing the repro…",
                                                lambda cancel: run_diff.extract(self.session, text, cancel),
                                                lambda line: self.notify(line, title="Extract")))

    @guarded
    def action_onnx_diff(self) -> None:
        """Export the net to a temporary .onnx, run it in ONNX Runtime and colour each op of the
        main net by its worst value's difference from the engine (Esc cancels between stages)."""
        self._not_a_plan("the ONNX Runtime diff")
        from netviz.onnx_diff import runtime_diff

        def run(cancel: threading.Event) -> Any:
            return runtime_diff(self.session.model, self.session.values, cancel=cancel,
                                progress=lambda line: self._to_ui(self.notify, line, title="ONNX diff"))
        self._start_diff("ONNX diff", "ONNX Runtime vs engine: exporting and running both… (Esc cancels)", run,
                         self._show_onnx_diff)

    def _show_onnx_diff(self, done: Any) -> None:
        """The comparison on the graph (main net: colours, breadcrumb key) and as a list of ops, worst
        blob each, the first over the tolerance highlighted; Enter jumps to the op."""
        rows = done.rows
        self.onnx_rows = rows
        if self.overlay:
            self.overlay = 0  # NOTE: one colouring at a time; watch_overlay repaints
        if self.path != ():
            self.path = ()
        self.update_canvas_marks()
        self.show_graph()
        label = diff_label(rows)
        for note in done.notes:
            self.notify(note, title=label[:1].upper() + label[1:])  # the run diff's verdict was titled "ONNX diff"
        worst = worst_per_op(rows)
        ops = sorted(worst)
        lines = [diff_row(worst[i]) for i in ops]
        first = next((r.op_index for r in rows if not r.ok), None)
        start = ops.index(first) if first is not None else 0
        from netviz.screens.pick import PickScreen  # noqa: PLC0415 - a later key's screen
        self.app.push_screen(PickScreen(diff_header(rows) + "; Enter jumps to the op", lines, ops, start),
                             self._jump_to_compared_op)

    def _jump_to_compared_op(self, i: Any) -> None:
        """Enter in a comparison's list selects the op; after a run diff (`A`) a worker then shows its values
        on both sides and their difference (netviz/run_diff.py)."""
        if not isinstance(i, int):
            return
        self.run_guarded(self.select, OpRef((), i))
        if self.onnx_rows and hasattr(self.onnx_rows[0], "inherited"):
            from netviz.run_diff import op_detail  # noqa: PLC0415 - a later key's module
            self._start_diff("Run diff", f"op #{i}: side A's and side B's values…", lambda _: op_detail(self.session, i),
                             lambda text: text and self.notify(text, title=f"Run diff: op #{i}, A and B", timeout=30))

    @guarded
    def action_copy(self) -> None:
        if self.blob is not None:
            text = self.blob.label(self.ssa)
        elif self.selected is not None:
            op = self.session.op(self.selected)
            text = op.name or f"{op.type} #{self.selected.index}"
        else:
            raise Unavailable("nothing selected to copy")
        self.app.copy_to_clipboard(text)
        self.notify(f"copied {text!r}", title="Copy")

    def view_spec(self) -> ViewSpec:
        """What the graph canvas shows now, as plain data for the "current view" export: the net,
        the ops the pane shows (:meth:`GraphCanvas.ops_in_view`; before a layout, the window of ops
        it will lay out) and focus set, zoom, SSA, overlay colours, pc and marks.

        NOTE: the ops on screen, not the canvas's whole laid-out window: that window is cut by op
        index, so with the backward pass shown its last gradient ops had no forward op beside them
        and the export piled them into a tall column the person never saw."""
        from netviz.view_export import ViewSpec  # noqa: PLC0415 - off the first frame

        s, c = self.session, self.canvas
        view = s.view(self.path)
        n = len(view.net.op)
        zoom = self.effective_zoom()
        window = window_for(view, self._cursor_op(), s.show_backward)
        seen = c.ops_in_view()
        ops = seen if seen else set(window) if len(window) < n else None
        if ops is not None and len(ops) == n:
            ops = None
        if self.focus_mode and c.focus_nodes is not None:
            ops = (set(range(n)) if ops is None else ops) & set(c.focus_nodes[0])
        colors: dict[int, tuple[str, str]] = {}
        if self.overlay:
            stale = [s.stale(OpRef(self.path, i)) for i in range(n)]
            colors = overlay_colors(OVERLAYS[self.overlay], self._records(), stale)
        focused = self.focus_mode and c.focus_nodes is not None
        shown = (f"{len(ops or ())} of {n} ops (focus)" if focused else
                 f"{len(ops)} of {n} ops in view ({min(ops)}–{max(ops)})" if ops else f"{n} ops")
        title = " · ".join([s.path_label(self.path), shown, f"zoom {ZOOMS[zoom][0]}"]
                           + ([f"overlay {OVERLAYS[self.overlay]}"] if self.overlay else [])
                           + [f"pc {s.pc_label()}"])
        return ViewSpec(self.path, title, self.ssa, ZOOMS[zoom][1], None if ops is None else frozenset(ops),
                        c.pc_op, frozenset(c.breakpoints), frozenset(c.executed), frozenset(c.nan_ops),
                        OVERLAYS[self.overlay], colors)

    @guarded
    def action_export(self) -> None:
        """Export: first what (the current view as shown, or the whole net), then where to."""
        spec = self.view_spec()  # NOTE: taken now: the view may change while the user types a name
        view = self.session.view(self.path)
        n, base = len(view.net.op), Path(self.session.name.replace("/", "_")).name
        shown = n if spec.ops is None else len(spec.ops)
        backward = " with backward" if view.n_forward < n else ""
        rows = [f"current view: {shown} of {n} ops as shown (zoom, overlay, pc, marks)",
                f"whole net: all {n} ops{backward}, unmarked",
                "ONNX model: the forward net as .onnx, checked against ONNX Runtime (netviz[onnx])"]

        def chosen(what: str | None) -> None:
            if what is None:
                return
            if what == "onnx":
                self._ask("export the ONNX model to (.onnx)", f"{base}.onnx", lambda target: self.export_to(target))
                return
            label = "current view" if what == "view" else "whole net"
            default = f"{base}{'_view' if what == 'view' else ''}.svg"
            self._ask(f"export the {label} to (.svg/.png/.pdf/.dot/.json)", default,
                      lambda target: self.export_to(target, what=what, spec=spec))

        from netviz.screens.pick import PickScreen  # noqa: PLC0415 - a later key's screen
        self.app.push_screen(PickScreen("export what?  (Enter chooses · Esc cancels)", rows, ["view", "net", "onnx"]),
                             chosen)

    def export_to(self, target: str, force: bool = False, what: str = "net", spec: ViewSpec | None = None) -> None:
        """Export in a worker (``dot`` on a big net takes seconds); an existing file is asked about.

        `what`: ``"view"`` writes `spec` (what the canvas showed when chosen), ``"net"`` the whole net."""
        if Path(target).expanduser().exists() and not force:
            self._ask(f"{target} exists — type yes to overwrite it", "",
                      lambda yes: self.export_to(target, True, what, spec) if yes.strip().lower() in ("y", "yes")
                      else None)
            return
        self.exporting = target
        self.notify(f"exporting the {'current view' if what == 'view' else 'whole net'} to {target}… (Esc cancels)",
                    title="Export")
        self._export(target, self.path, self.ssa, (spec or self.view_spec()) if what == "view" else None)

    @work(thread=True, group="export")
    def _export(self, target: str, path: NetPath, ssa: bool, spec: ViewSpec | None = None) -> None:
        call = self._to_ui
        try:
            if Path(target).suffix.lower() == ".onnx":  # NOTE: ONNX: the model, exported and checked in ORT
                from engine.onnx.export import export_file
                model = self.session.model
                out = export_file(model, self.session.values, str(Path(target).expanduser()),
                                  random_params=not len(model.init.op))
            else:
                out = (self.session.export_view(spec, target, force=True) if spec is not None
                       else self.session.export(path, target, ssa=ssa, force=True,
                                                progress=lambda line: call(self.notify, line, title="Export")))
        except NetvizError as e:
            call(self.notify, str(e), title=error_title(e), severity="error")
            out = None
        except Exception as e:  # noqa: BLE001 - a failed export is a notice, never the end of the app
            call(self.notify, report(e, "export"), title="Internal error", severity="error")
            out = None
        cancelled, self.exporting = self.exporting != target, None
        if cancelled and out is not None:
            Path(target).expanduser().unlink(missing_ok=True)
            call(self.notify, f"export to {target} cancelled (nothing written)", title="Export")
        elif out is not None:
            call(self.notify, f"wrote {out}", title="Export")
