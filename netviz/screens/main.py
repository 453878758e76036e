"""MainScreen: op tree | breadcrumb + graph canvas | op and blob inspectors, status line, footer.

Every action of :data:`netviz.actions.ACTIONS` is a method here; each runs under
:func:`guarded`, so an engine error (or any bug) becomes a notification and the UI stays usable.
"""
from __future__ import annotations

import functools
import gc
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import events, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.reactive import reactive
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import OptionList
from textual.widgets.option_list import Option
from rich.style import Style
from rich.text import Text

from engine.errors import NetvizError
from engine.runtime.plan_view import STEP_OP
from netviz import feeding, weights
from netviz.actions import ACTIONS, bindings
from netviz.commands import missing_blob_hint
from netviz.errorlog import Guarded, report
from netviz.messages import BlobSelected, DrillRequested, OpSelected
from netviz.overlays import (OVERLAYS, diff_colors, diff_header, diff_legend, diff_row, legend, overlay_colors,
                             worst_per_op)
from netviz.session import BlobRef, NetPath, OpRef, Session, Unavailable, from_oppath, to_oppath
from netviz.style import legend_text as looks_legend, plain
from netviz.timetravel_ui import TimeTravelActions
from netviz.widgets.breadcrumb import Breadcrumb
from netviz.widgets.graph_canvas import GraphCanvas
from netviz.widgets.minimap import Minimap
from netviz.widgets.footer import KeyFooter
from netviz.widgets.graph_scene import ZOOMS, common_scope, window_of
from netviz.widgets.op_inspector import OpInspector
from netviz.widgets.op_tree import OpTree
from netviz.widgets.status_line import StatusLine, random_flag

if TYPE_CHECKING:  # NOTE: imported where used: no part of the first frame
    from netviz.view_export import ViewSpec
    from netviz.widgets.blob_inspector import BlobInspector


DETAIL_MAX_OPS = 200
#: the young generation's collection threshold while a move runs (Python's default: 700); see _run_moves
MOVE_GC_YOUNG = 50_000
_GC_THRESHOLD = gc.get_threshold()
#: the first frame waits at most this long for the graph's first drawing (a cached one takes ~10 ms)
FIRST_FRAME_HOLD_S = 0.3
#: keys of the actions that open a one-line input (search, eval, prompts): what is typed after them is its text
OPENS_INPUT = frozenset(k for aid in ("search", "repl.eval", "bp.global", "blob.watch", "blob.inject", "op.skip",
                                      "blob.save") for k in ACTIONS[aid][0].split(","))
#: how long keys typed after such a key wait for its screen (it opens within a frame; refused, they are dropped)
TYPE_AHEAD_S = 0.5


class BlobList(OptionList):
    """The op's inputs and outputs.  Textual's OptionList forgets its rendered lines on every resize;
    they depend on the width only, and a step that changes the list's height (another op's blob
    count) re-rendered the same lines in a frame of their own after the step's."""

    _widths: tuple[int, int] | None = None

    def _on_resize(self, event: events.Resize) -> None:
        widths = (event.size.width, self.scrollable_content_region.width)  # NOTE: a scrollbar narrows the lines
        if widths != self._widths:
            self._widths = widths
            return  # NOTE: OptionList._on_resize (next in the MRO) clears the lines
        event.prevent_default()


def guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run an action; a NetvizError is a notification titled in words (:func:`error_title`), anything else too."""
    @functools.wraps(fn)
    def wrapper(self: MainScreen, *args: Any) -> Any:
        try:
            return fn(self, *args)
        except Unavailable as e:
            self.notify(str(e), title="Not available", severity="warning")
        except NetvizError as e:
            self.notify(str(e), title=error_title(e), severity="error")
        except Exception as e:  # noqa: BLE001 - a bad key must never take the UI down
            inner = args[0] if fn.__name__ == "run_guarded" and args else fn  # what run_guarded ran
            self.notify(report(e, getattr(inner, "__name__", fn.__name__).removeprefix("action_")),
                        title="Internal error", severity="error", timeout=20)
    return wrapper


#: A failure's toast title in the user's words, by the first of its classes (MRO order) named here
_ERROR_TITLES = {"ConditionError": "Bad condition", "UnknownOpError": "No kernel", "SchemaError": "Bad op",
                 "ShapeError": "Shapes", "GradientError": "Backward pass", "OnnxExportError": "ONNX export",
                 "ModelError": "Model", "ExecutionError": "Run failed", "InspectError": "Inspect"}


def error_title(e: BaseException) -> str:
    """A toast title for `e` in words ("Bad condition"), never its Python class name ("ConditionError")."""
    return next((_ERROR_TITLES[c.__name__] for c in type(e).__mro__ if c.__name__ in _ERROR_TITLES), "Error")


def notice_toast(notice: str) -> dict[str, str]:
    """A session notice's toast title and severity: a plan's how-to informs; filled parameters warn."""
    if notice.startswith("plan "):
        return {"title": "Plan", "severity": "information"}
    return {"title": "Parameters" if notice.startswith("no init net") else "Notice", "severity": "warning"}


class MainScreen(TimeTravelActions, Guarded, Screen[None]):
    BINDINGS = bindings()

    ssa: reactive[bool] = reactive(False)
    zoom: reactive[int] = reactive(-1)  # -1: chosen from the graph pane's size (GraphCanvas.auto_zoom)
    follow: reactive[bool] = reactive(True)
    focus_mode: reactive[bool] = reactive(False)
    path: reactive[NetPath] = reactive(())
    overlay: reactive[int] = reactive(0)

    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session = session
        self.selected: OpRef | None = None
        self.details_ref: OpRef | None = None  # the op the inspector shows (a step updates it a frame after the pc)
        self.blob: BlobRef | None = None
        self.result: tuple[str, Any] | None = None  # the last eval: (expression, value)
        # NOTE: moves are serialised: keys queue here (type-ahead, shown in the status line, flushed
        # by Escape) and one worker runs them in order — never two moves at once.
        self.pending: deque[tuple[str, OpRef | None]] = deque()
        self.busy: str | None = None     # the move being run; None when the worker is idle
        self._shown_stop = False  # the running move has stopped and its stop is being shown (after_step)
        self.exporting: str | None = None  # target of the export running in its worker
        self.checked = False  # the lint and schema check of the main net are done (check_net)
        self._whole_net_started = False
        self._first_layout = False  # the screen was laid out once: the canvas has its size (_compositor_refresh)
        self._held = False          # a screen update was held back for the graph's first drawing
        self._released = False      # updates are no longer held (the graph is shown, or the deadline passed)
        self._draw_promptly = False  # the next idle draws what changed, not the update timer's tick (_on_idle)
        self._blob_info: BlobInspector | None = None  # mounted after the first frame (blob_inspector)
        self._nan_seen: dict[int, tuple[Any, bool]] = {}  # op index → (its record, has_inf_or_nan): update_canvas_marks
        self._gc_frozen = 0  # gc.freeze() calls made: after the first frame, after the first step (_freeze_gc)
        self.diffing: threading.Event | None = None  # set to cancel the device diff running
        self.onnx_rows: tuple[Any, ...] | None = None  # the last ONNX Runtime diff, coloured on the main net
        self._moves = threading.Lock()
        self._stop_drawn = threading.Event()  # the frame showing the last move's stop is drawn (_run_moves)
        self._held_keys: list[str] | None = None  # typed after a key opening an input, before it is up (on_key)

    def compose(self) -> ComposeResult:
        with Horizontal(id="body"):
            yield OpTree(self.session, id="ops")
            with Vertical(id="center"):
                yield Breadcrumb(id="crumb")
                yield GraphCanvas(id="graph")
                yield Minimap(self, id="minimap")
            with VerticalScroll(id="inspector"):
                yield OpInspector(id="op-info")
                yield BlobList(id="blob-list")
        yield StatusLine(id="status")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.op_tree, self.canvas = self.query_one(OpTree), self.query_one(GraphCanvas)
        self.op_tree.focus()
        if self.session.plan_def is not None:  # NOTE: steps top-down in their order: left-right, dot drew #1 above #0
            self.canvas.set_direction("TB")
        if self.session.view(()).net.op:
            # NOTE: the inspector fills after the first drawing (on_graph_canvas_shown): its op
            # facts (engine.catalogue's tables) and Rich table are no part of the first frame
            self.select(OpRef((), 0), details=False)
        self.update_status()
        # NOTE: the graph is laid out at the first layout (the canvas's size is its pane), in the first
        # frame's place: see _compositor_refresh; this deadline shows the screen without it if it is slow
        self.set_timer(FIRST_FRAME_HOLD_S, self._release_first_frame)

    def _compositor_refresh(self) -> None:
        """Textual's screen update (render the dirty regions, hand them to the driver), held back
        until the first drawing of the graph is ready: the first frame shows the op list and the graph
        together.  The graph's pane is the canvas's size, known only once the screen is laid out; the
        first layout calls this, so the layout worker starts here.  Drawn before, the op list's frame
        (a full screen render) and the graph's (the canvas and a re-layout) were two frames and the
        worker competed with the first for the GIL: DenseNet-121's start -> graph 135 -> ~100 ms.
        Held at most FIRST_FRAME_HOLD_S (a layout not cached: ``dot`` may take seconds)."""
        if not self._first_layout and self.is_mounted:
            self._first_layout = True
            self.show_graph()
        if self._holding():
            self._held = True
            return
        super()._compositor_refresh()

    def _holding(self) -> bool:
        """Whether the first frame still waits: for the graph's first drawing (or its failure), and
        for the op list's ops (Populated: a list rebuilt later shows a first screenful before the
        rest, and drawn between, the list grew its scrollbar a frame later)."""
        if self._released or not self._first_layout:
            return False
        return (self.canvas.scene is None and not self._whole_net_started) or not self.op_tree.populated

    def _release_when_ready(self) -> None:
        if self._first_layout and not self._released and not self._holding():
            self._release_first_frame()

    def on_op_tree_populated(self) -> None:
        self._release_when_ready()

    def _release_first_frame(self) -> None:
        """Draw the screen from now on; repaint it whole if a frame was held back."""
        self._released = True
        if not self._first_layout:  # NOTE: never laid out as the current screen (a modal over it)
            self._first_layout = True
            self.show_graph()
        if self._held:
            self._held = False
            self.refresh()

    def on_graph_canvas_zoom_fits(self) -> None:
        if self.zoom < 0:  # NOTE: the zoom follows the pane (GraphCanvas.auto_zoom): laid out anew at the new one
            self.show_graph()
            self.update_status()

    def on_graph_canvas_shown(self) -> None:
        """After the first frame with the graph, the whole-net work: shape inference (the drawing
        infers them itself when it shows blobs), the lint and the schema check.  Started earlier
        they import every kernel module and hold the GIL while the first window is laid out and drawn."""
        if not self._whole_net_started:
            self._whole_net_started = True
            self._release_when_ready()
            self.call_after_refresh(self.blob_inspector)
            self._freeze_gc()
            if self.selected is not None and self.details_ref is None:
                self.call_after_refresh(self.show_details, self.selected)
            # NOTE: a moment after the refresh that draws it, so the frame showing the graph is
            # composed before a worker importing the kernels competes for the GIL (0.3-1 s)
            self.call_after_refresh(self.set_timer, 0.1, self._start_whole_net)

    def _freeze_gc(self) -> None:
        """Move what lives now out of the cyclic collector's sight (``gc.freeze``), twice: after the
        first frame (Textual's DOM, the net, the session) and after the first step (the workspace,
        the kernel modules). A full collection walked all of it: one took 106 ms of a step while
        stepping ResNet-50 (the worst key -> repaint times); 7 ms once frozen. Refcounting still
        frees frozen objects; only cycles among them stay (twice per session, not per step)."""
        self._gc_frozen += 1
        gc.freeze()
        gc.enable()  # NOTE: off from the app's start to the first frame (NetvizApp.on_mount)

    def _start_whole_net(self) -> None:
        self.infer_shapes()
        self.check_net()
        weights.start(self)  # NOTE: the init net's file-backed values, read in a worker (status line: progress)

    def relint(self) -> None:
        """Lint again (the backward view may have chosen the loss): markers come when done."""
        self.check_net(schema=False)

    @work(thread=True, exclusive=True, group="lint")
    def check_net(self, schema: bool = True) -> None:
        """The lint markers (``⚑``) and the schema check, off the UI thread; then relabel the ops
        that have a finding (every other label is unchanged) and say what Caffe2 would refuse."""
        from engine.catalogue.schema import check_tree  # noqa: PLC0415 - after the first frame

        try:
            bad = check_tree(self.session.model.predict) if schema else []  # Caffe2 would refuse these ops
            # NOTE: a plan's steps are shown as ops of type ExecutionStep (engine.runtime.plan_view): no Caffe2 op to check
            bad = [b for b in bad if f"'{STEP_OP}' is not a Caffe2 op" not in b]
            found = self.session.lint_findings()
        except Exception as e:  # noqa: BLE001 - markers are a nicety: a failing check is a notice
            self._to_ui(self.notify, report(e, "lint"), title="Internal error", severity="error")
            bad, found = [], {}
        self._to_ui(self._checked, bad, set(found))

    def _checked(self, bad: list[str], flagged: set[int]) -> None:
        self.op_tree.relabel({OpRef((), i) for i in flagged})
        if self.selected is not None and not self.selected.path and self.selected.index in flagged:
            self.run_guarded(self.query_one(OpInspector).show, self.session, self.selected)
        if bad:
            more = f" (+{len(bad) - 1} more: netviz info lists them)" if len(bad) > 1 else ""
            self.notify(bad[0] + more, title="Schema", severity="warning")
        self.checked = True

    @work(thread=True, exclusive=True, group="shapes")
    def infer_shapes(self) -> None:
        """Shape inference of the shown program, once, off the UI thread (the inspector shows … until then)."""
        try:
            self.session.shapes(())
        except Exception:  # noqa: BLE001 - shapes are a nicety: unknown, never fatal
            return
        self.app.call_from_thread(self._shapes_ready)

    def _shapes_ready(self) -> None:
        notice, self.session.shape_notice = self.session.shape_notice, None
        if notice:
            self.notify(notice, title="Shapes", severity="warning")
        if self.selected is not None:
            self.run_guarded(self.query_one(OpInspector).show, self.session, self.selected)

    # -- showing ---------------------------------------------------------------------------
    def effective_zoom(self) -> int:
        """Blob-level detail only for nets up to DETAIL_MAX_OPS ops (``dot`` gets slow beyond)."""
        big = len(self.session.view(self.path).net.op) > DETAIL_MAX_OPS
        zoom = self.zoom if self.zoom >= 0 else self.canvas.auto_zoom()
        return max(zoom, 1) if big else zoom

    def _cursor_op(self) -> int | None:
        ref = self.selected
        return ref.index if ref is not None and ref.path == self.path else None

    def show_graph(self) -> None:
        if not self._first_layout:  # NOTE: no pane yet: the first layout lays the graph out (_compositor_refresh)
            return
        zoom = self.effective_zoom()
        self.canvas.show(self.session, self.path, self.ssa, zoom, self._cursor_op())
        name, blobs, _ = ZOOMS[zoom]
        extra = ("  ·  SSA" if self.ssa else "") + ("  ·  backward" if self.session.show_backward else "")
        n_ops = len(self.session.view(self.path).net.op)
        window = window_of(n_ops, self._cursor_op())
        if len(window) < n_ops:
            extra += f"  ·  ops {window.start}–{window.stop - 1} of {n_ops} (follows the cursor)"
        if zoom != (self.zoom if self.zoom >= 0 else self.canvas.auto_zoom()):
            extra += f"  ·  (blob detail up to {DETAIL_MAX_OPS} ops)"
        if blobs:
            scope = common_scope(self.session.view(self.path).net)
            extra += f"  ·  blobs in {scope}" if scope else ""
        key = (diff_legend(self.onnx_rows) if self.onnx_rows is not None and self.path == ()
               else legend(OVERLAYS[self.overlay], self._records() if self.overlay else []))
        if not key.plain and self.session.show_backward:  # NOTE: the exports' legend (colours) for the ladder's ops
            key = looks_legend()
        # NOTE: an empty net's canvas is blank: the crumb says why, at the path's end (a label is cut from the left)
        self.query_one(Breadcrumb).show(self.session.path_label(self.path) + ("" if n_ops else " (0 ops: empty)"),
                                        f"zoom {name}", extra, key)

    def _records(self) -> list[Any]:
        s = self.session
        return [s.record(OpRef(self.path, i)) for i in range(len(s.view(self.path).net.op))]

    def watch_ssa(self) -> None:
        self.refresh_all()

    def watch_zoom(self) -> None:
        self.refresh_all()

    def watch_path(self) -> None:
        self.refresh_all()

    def refresh_all(self) -> None:
        if not self.is_mounted:
            return
        self.show_graph()
        self.update_canvas_marks()
        self.update_status()
        if self.selected is not None and self.follow:
            self.canvas.center_on(self.selected.index if self.selected.path == self.path else None)

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

    async def _on_idle(self, event: Any) -> None:
        """Before Textual's own idle handler (which resumes the update timer): a change to draw
        promptly is drawn now (:meth:`_details_after_pc`)."""
        if self._draw_promptly:
            self._draw_promptly = False
            if self.is_current and not self.app._batch_count and (
                    self._layout_required or self._scroll_required or self._repaint_required or self._dirty_widgets):
                self._on_timer_update()

    def _window_of(self, ref: OpRef) -> range:
        return window_of(len(self.session.view(ref.path).net.op), ref.index)

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

    def set_focus_set(self) -> None:
        ref = self.selected
        if not self.focus_mode or ref is None or ref.path != self.path:
            self.canvas.focus_nodes = None
        else:
            ins, outs = self.session.view(ref.path).ssa[ref.index]
            names = {n for n, _ in (*ins, *outs)}
            ops = {ref.index, *(i for n in names for i, _ in self.session.producers(ref.path, n)),
                   *(i for n, _ in outs for i, _ in self.session.consumers(ref.path, n))}
            self.canvas.focus_nodes = (ops, names)
        self.canvas.refresh()

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
                  f"as --input takes it: 1,3 · 16,8:int32 · {name}.npy; Esc leaves it missing")

    def update_canvas_marks(self) -> None:
        """Markers on the canvas (pc, breakpoints, executed, NaN, overlay); repaints the boxes that changed."""
        s, pc, c = self.session, self.session.pc, self.canvas
        before = (c.pc_op, c.breakpoints, c.executed, c.nan_ops, c.overlay)
        c.pc_op = pc.index if isinstance(pc, OpRef) and pc.path == self.path else None
        c.breakpoints = {r.index for r in s.breakpoints if r.path == self.path}
        records = s.records_in(self.path)
        c.executed = set(records)
        c.records = records  # NOTE: blob shapes on the canvas: the value's once its op ran
        # NOTE: a record's NaN/Inf flag never changes: asked once per record, not of all records per move
        # (after c through DenseNet-121: 668 records, 0.85-1.2 ms each move); the memo holds only the shown records
        seen, self._nan_seen = self._nan_seen, {}
        memo, nan_ops = self._nan_seen, set()
        for i, r in records.items():
            hit = seen.get(i)
            if hit is None or hit[0] is not r:
                hit = (r, r.has_inf_or_nan)
            memo[i] = hit
            if hit[1]:
                nan_ops.add(i)
        c.nan_ops = nan_ops
        if self.overlay:
            recs = self._records()
            stale = [s.stale(OpRef(self.path, i)) for i in range(len(recs))]
            colors = overlay_colors(OVERLAYS[self.overlay], recs, stale)
            c.overlay = {i: Style(color="white", bgcolor=col, bold=True) for i, (col, _) in colors.items()}
        elif self.onnx_rows is not None and self.path == ():
            c.overlay = {i: Style(color="white", bgcolor=col, bold=True)
                         for i, (col, _) in diff_colors(self.onnx_rows).items()}
        else:
            c.overlay = {}
        changed = {before[0], c.pc_op} | (before[1] ^ c.breakpoints) | (before[2] ^ c.executed) \
            | (before[3] ^ c.nan_ops) | {i for i in before[4].keys() | c.overlay.keys()
                                         if before[4].get(i) != c.overlay.get(i)}
        c.refresh_rows(c.rows_of_ops(changed))
        self.query_one(Minimap).sync()  # NOTE: its marks in this frame, not at its next poll (0.2 s)

    def watch_overlay(self) -> None:
        if not self.is_mounted:
            return
        self.op_tree.overlay = OVERLAYS[self.overlay]
        self.op_tree.refresh_markers()
        self.update_canvas_marks()
        self.show_graph()
        self.update_status()

    def action_cycle_overlay(self) -> None:
        if self.onnx_rows is not None:  # NOTE: m first clears the ONNX diff's colours
            self.onnx_rows = None
            self.update_canvas_marks()
            self.show_graph()
        self.overlay = (self.overlay + 1) % len(OVERLAYS)
        self.notify(f"overlay: {OVERLAYS[self.overlay]}", title="Overlay")

    # -- messages --------------------------------------------------------------------------
    def on_key(self, event: events.Key) -> None:
        """Keys typed right after one that opens a one-line screen (``/relu`` typed fast) belong to its
        input (issue 42 item 17).  A terminal's read queues them all at the op list; they pass here
        before the app's bindings open the screen, and were dropped there.  They are held from the
        opening key until the screen is up (:meth:`on_screen_suspend` hands them over), at most
        TYPE_AHEAD_S; one reaching here once the screen is up goes to it at once."""
        over, typed = self.app.screen, event.is_printable and bool(event.character)
        if over is not self and typed and hasattr(over, "type_ahead"):
            event.stop()
            event.prevent_default()
            over.type_ahead(event.character)
        elif self._held_keys is not None and typed:
            event.stop()
            event.prevent_default()
            self._held_keys.append(event.character)
        elif event.key in OPENS_INPUT:
            held = self._held_keys = []
            self.set_timer(TYPE_AHEAD_S, lambda: self._drop_held_keys(held))

    def on_screen_suspend(self) -> None:
        held, self._held_keys = self._held_keys, None
        if held and hasattr(self.app.screen, "type_ahead"):
            self.app.screen.type_ahead("".join(held))

    def _drop_held_keys(self, held: list[str]) -> None:
        """The opening key opened nothing (refused: a notice says why): the keys after it are not commands.
        `held`: that key's list (a later opening key holds its own)."""
        if self._held_keys is held:
            self._held_keys = None

    def on_op_selected(self, message: OpSelected) -> None:
        if message.ref != self.selected:  # NOTE: the tree echoes a select() that moved its cursor
            self.run_guarded(self.select, message.ref)

    def on_blob_selected(self, message: BlobSelected) -> None:
        self.run_guarded(self.select_blob, message.ref)

    def on_drill_requested(self, message: DrillRequested) -> None:
        self.run_guarded(self.drill_into, message.ref, message.arg)

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option_list.id == "blob-list" and event.option_index < len(self.blob_options):
            self.run_guarded(self.select_blob, self.blob_options[event.option_index])

    @guarded
    def run_guarded(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)

    def drill_into(self, ref: OpRef, arg: str | None) -> None:
        subnets = self.session.subnets(ref)
        if not subnets:
            raise Unavailable(f"op #{ref.index} {self.session.op(ref).type} holds no subnet")
        self.path = ref.path + ((ref.index, arg or subnets[0][0]),)

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

    def on_unmount(self) -> None:
        """Leaving (quit): queued moves are dropped, a running one and a device diff stopped."""
        with self._moves:
            self.pending.clear()
        self.session.cancel()
        if self.diffing is not None:
            self.diffing.set()

    def action_cancel_run(self) -> None:
        """Escape: drop the typed-ahead moves and stop the running one between two ops; an
        export in progress is abandoned (its file is removed when ``dot`` returns)."""
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

    def _ask(self, title: str, value: str, then: Callable[[str], None], hint: str = "", empty: str = "") -> None:
        """Prompt for one line; `then` gets a non-empty answer; Enter on an empty box shows `empty` (if given)."""
        from netviz.screens.prompt import PromptScreen  # noqa: PLC0415 - a later key's screen

        screen = PromptScreen(title, value, hint=hint)

        def done(answer: str | None) -> None:
            if answer:
                self.run_guarded(then, answer)
            elif empty and getattr(screen, "empty_enter", False):
                self.notify(empty, title="Not available", severity="warning")
        self.app.push_screen(screen, done)

    @guarded
    def action_watch_blob(self) -> None:
        def watch(name: str) -> None:
            self.session.watch(name)
            self.notify(f"watching {name}", title="Watch")
        self._ask("watch blob", self.blob.name if self.blob else "", watch)

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
        def add(text: str) -> None:
            self.notify(f"breakpoint {self.session.add_global_breakpoint(text)}", title="Breakpoint")
        self._ask("break when  (condition · type T [if C] · name REGEX [if C], then optional ignore N)", "", add,
                  "loss > 10 · max_abs(x) > 1e3 · has_inf_or_nan(any) · step >= 3 · type Relu ignore 2")

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
        dbg = self._stopped_debugger()
        self._ask("eval  (NumPy over the blobs now: fc1.max(), np.abs(x - y).mean(), b(\"gpu_0/conv1\"))",
                  self.result[0] if self.result else "", lambda expr: self._evaluate(dbg, expr),
                  "names that are identifiers are blobs; others: b(\"name\") or blobs[\"name\"]; np, math; "
                  "nv.b, nv.blobs, nv.np: never shadowed by a blob")

    @work(thread=True, exclusive=True, group="eval")
    def _evaluate(self, dbg: Any, expr: str) -> None:
        """Evaluate off the UI thread (a reduction over a big blob must not freeze the screen); the
        value, or the expression's one-line error, is shown on the UI thread."""
        from engine.debugger.repl import evaluate

        try:
            value = evaluate(dbg, expr)
        except NetvizError as e:
            def fail(error: NetvizError = e) -> None:
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

    def action_focus_pane(self, pane: str) -> None:
        """``h`` / ``l``: the op list / the blob list of the inspector (keyboard only, focus stays there)."""
        if pane == "ops":
            self.op_tree.focus()
            return
        blobs = self.query_one("#blob-list", OptionList)
        blobs.focus()
        if blobs.highlighted is None and blobs.option_count:
            blobs.highlighted = 0

    def action_cursor(self, delta: int) -> None:
        """``j`` / ``k``: down / up in the focused list (the op list at start)."""
        target = self.focused if isinstance(self.focused, OptionList) else self.op_tree
        (target.action_cursor_down if delta > 0 else target.action_cursor_up)()

    @guarded
    def action_save_blob(self) -> None:
        from netviz.widgets.blob_inspector import save_value  # noqa: PLC0415 - off the first frame

        shown = self.blob_inspector()
        if self.result is not None and shown.result is not None:  # an eval's value is what the inspector shows
            expr, value = self.result
            self._ask(f"save the value of {expr} to (.npy)", "eval.npy",
                      lambda target: self.notify(f"wrote {save_value(value, target)}", title="Saved"))
            return
        if self.blob is None:
            raise Unavailable("select a blob first (the blob list under the op)")
        ref = self.blob
        default = f"{ref.label().replace('/', '_')}.npy"

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

    @guarded
    def action_copy_value(self) -> None:
        if self.blob is None:
            raise Unavailable("select a blob first")
        text = self.blob_inspector().shown_text()
        if not text:
            raise Unavailable(f"{self.blob.label()} has no value yet")
        self.app.copy_to_clipboard(text)
        self.notify(f"copied {self.blob.label()} ({len(text)} characters)", title="Copy")

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
        for note in done.notes:
            self.notify(note, title="ONNX diff")
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
    def action_toggle_backward(self, loss: str | None = None) -> None:
        if self.session.plan_def is not None:  # NOTE: its nets run as steps; no one loss to differentiate
            self.notify(f"plan {self.session.plan_def.name!r}: a plan has no backward view (open one of its nets "
                        "with --loss to see its backward pass)", title="Not available", severity="warning")
            return
        from netviz.commands import naming  # noqa: PLC0415 - the CLI's words for a gradient error

        try:
            with naming(str(self.session.model.path or self.session.model.predict.name or "net")):
                self.session.set_backward(not self.session.show_backward, loss)
        except Unavailable as e:
            if "loss" not in str(e):
                raise
            outs = list(self.session.model.predict.external_output)
            self._ask("loss blob to differentiate", outs[0] if len(outs) == 1 else "",
                      lambda name: self.action_toggle_backward(name), f"outputs: {', '.join(outs)}",
                      empty="no loss blob given: the backward view stays off")
            return
        for notice in self.session.pop_notices():  # a loss that is no scalar (netviz.overlays.loss_seed_note)
            self.notify(notice, title="Backward pass", severity="warning")
        self.op_tree.rebuild()
        if self.selected and self.selected.path == () and self.selected.index >= len(self.session.view(()).net.op):
            self.selected = OpRef((), 0)
        self.path = ()
        self.canvas.key = None
        self.infer_shapes()
        self.relint()
        self.refresh_all()
        if self.selected:
            self.select(self.selected)

    def action_toggle_ssa(self) -> None:
        self.ssa = not self.ssa

    @guarded
    def action_toggle_scopes(self) -> None:
        self.op_tree.group_scopes = not self.op_tree.group_scopes
        self.op_tree.rebuild()
        if self.selected:
            self.op_tree.select_ref(self.selected)

    def action_zoom(self, delta: int) -> None:
        # NOTE: from the zoom shown, not the one asked for: a big net shows "ops" while zoom is
        # "detail", and the first z from there did nothing
        self.zoom = max(0, min(len(ZOOMS) - 1, self.effective_zoom() + delta))

    def action_toggle_wide(self) -> None:
        """The graph over the side panes (op tree and inspector hidden) and back; the drawing
        reflows to the new width (the canvas re-plans on resize)."""
        self.set_class(not self.has_class("-wide-graph"), "-wide-graph")

    def action_focus_minimap(self) -> None:
        self.query_one(Minimap).focus()

    def action_toggle_follow(self) -> None:
        self.follow = not self.follow
        self.refresh_all()

    def action_cycle_direction(self) -> None:
        """The graph's flow: auto (the direction that uses the pane best, re-chosen on resize) → TB → LR."""
        order = ("auto", "TB", "LR")
        self.canvas.set_direction(order[(order.index(self.canvas.direction) + 1) % len(order)])
        self.show_graph()
        self.notify(f"graph flow: {self.canvas.direction}", title="Graph")

    def action_toggle_focus(self) -> None:
        self.focus_mode = not self.focus_mode
        self.set_focus_set()
        self.update_status()

    @guarded
    def action_drill(self) -> None:
        if self.selected is None:
            raise Unavailable("select an op first")
        self.drill_into(self.selected, None)

    @guarded
    def action_drill_up(self) -> None:
        if not self.path:
            raise Unavailable("already at the main net")
        index = self.path[-1][0]
        self.path = self.path[:-1]
        self.select(OpRef(self.path, index))

    @guarded
    def action_search(self) -> None:
        def found(hit: Any) -> None:
            if isinstance(hit, OpRef):
                self.run_guarded(self.select, hit)
            elif isinstance(hit, BlobRef):
                self.run_guarded(self.select_blob, hit)

        from netviz.screens.search import SearchScreen  # noqa: PLC0415 - a later key's screen
        self.app.push_screen(SearchScreen(self.session), found)

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
        the ops in its window (and focus set), zoom, SSA, overlay colours, pc and marks."""
        from netviz.view_export import ViewSpec  # noqa: PLC0415 - off the first frame

        s, c = self.session, self.canvas
        n = len(s.view(self.path).net.op)
        zoom = self.effective_zoom()
        window = window_of(n, self._cursor_op())
        ops = set(window) if len(window) < n else None
        if self.focus_mode and c.focus_nodes is not None:
            ops = (set(range(n)) if ops is None else ops) & set(c.focus_nodes[0])
        colors: dict[int, tuple[str, str]] = {}
        if self.overlay:
            stale = [s.stale(OpRef(self.path, i)) for i in range(n)]
            colors = overlay_colors(OVERLAYS[self.overlay], self._records(), stale)
        focused = self.focus_mode and c.focus_nodes is not None
        shown = (f"{len(ops or ())} of {n} ops (focus)" if focused else
                 f"ops {window.start}–{window.stop - 1} of {n}" if ops is not None else f"{n} ops")
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
