"""MainScreen: op tree | breadcrumb + graph canvas | op and blob inspectors, status line, footer.

This module is the composition: the widgets, the first frame, bindings, reactives and the shared state.
The actions of :data:`netviz.actions.ACTIONS` live in one mixin per concern (stepping, inspecting,
overlays_ui, exporting, :mod:`netviz.timetravel_ui`), so a live session and a replay run one copy of
the TUI's logic; each runs under :func:`~netviz.screens.guarding.guarded`, so an engine error (or any
bug) becomes a notification and the UI stays usable.
"""
from __future__ import annotations

import gc
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from textual import events, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import OptionList

from engine.runtime.plan_view import STEP_OP
from netviz import weights
from netviz.actions import ACTIONS, bindings
from netviz.errorlog import Guarded, report
from netviz.overlays import OVERLAYS, diff_legend, legend
from netviz.session import BlobRef, NetPath, OpRef, Session
from netviz.style import legend_text as looks_legend
from netviz.screens.exporting import ExportActions
from netviz.screens.guarding import guarded
from netviz.screens.inspecting import InspectingActions
from netviz.screens.overlays_ui import OverlayActions
from netviz.screens.stepping import MOVE_GC_YOUNG, SteppingActions  # noqa: F401 - MOVE_GC_YOUNG: also read as main's
from netviz.timetravel_ui import TimeTravelActions
from netviz.widgets.breadcrumb import Breadcrumb
from netviz.widgets.graph_canvas import GraphCanvas
from netviz.widgets.minimap import Minimap
from netviz.widgets.footer import KeyFooter
from netviz.widgets.graph_scene import ZOOMS, common_scope, describe_window, window_for
from netviz.widgets.op_inspector import OpInspector
from netviz.widgets.op_tree import OpTree
from netviz.widgets.status_line import StatusLine

if TYPE_CHECKING:  # NOTE: imported where used: no part of the first frame
    from netviz.widgets.blob_inspector import BlobInspector


DETAIL_MAX_OPS = 200
#: the first frame waits at most this long for the graph's first drawing (a cached one takes ~10 ms)
FIRST_FRAME_HOLD_S = 0.3
#: keys of the actions that open a one-line input (search, eval, prompts): what is typed after them is its text
OPENS_INPUT = frozenset(k for aid in ("search", "repl.eval", "bp.global", "blob.watch", "blob.inject", "op.skip",
                                      "blob.save", "run.first-iteration") for k in ACTIONS[aid][0].split(","))
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


class MainScreen(SteppingActions, InspectingActions, OverlayActions, ExportActions, TimeTravelActions, Guarded,
                 Screen[None]):
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
        if flagged:  # NOTE: the canvas's ⚑ marks and their legend entry
            self.canvas.refresh()
            self.show_graph()
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
        view = self.session.view(self.path)
        n_ops = len(view.net.op)
        window = window_for(view, self._cursor_op(), self.session.show_backward)
        if len(window) < n_ops:
            extra += f"  ·  {describe_window(window, n_ops)} (follows the cursor)"
        if zoom != (self.zoom if self.zoom >= 0 else self.canvas.auto_zoom()):
            extra += f"  ·  (blob detail up to {DETAIL_MAX_OPS} ops)"
        if blobs:
            scope = common_scope(self.session.view(self.path).net)
            extra += f"  ·  blobs in {scope}" if scope else ""
        key = (diff_legend(self.onnx_rows) if self.onnx_rows is not None and self.path == ()
               else legend(OVERLAYS[self.overlay], self._records() if self.overlay else []))
        if not key.plain:  # NOTE: the exports' legend: colours for the ladder's ops, the box marks that occur
            key = looks_legend() if self.session.show_backward else key
            key.append_text(self.canvas.legend())
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

    async def _on_idle(self, event: Any) -> None:
        """Before Textual's own idle handler (which resumes the update timer): a change to draw
        promptly is drawn now (:meth:`_details_after_pc`)."""
        if self._draw_promptly:
            self._draw_promptly = False
            if self.is_current and not self.app._batch_count and (
                    self._layout_required or self._scroll_required or self._repaint_required or self._dirty_widgets):
                self._on_timer_update()

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
            over.type_ahead(event.character, event.time)
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
            self.app.screen.type_ahead("".join(held), 0.0)  # NOTE: held keys came before it opened

    def _drop_held_keys(self, held: list[str]) -> None:
        """The opening key opened nothing (refused: a notice says why): the keys after it are not commands.
        `held`: that key's list (a later opening key holds its own)."""
        if self._held_keys is held:
            self._held_keys = None

    @guarded
    def run_guarded(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)

    def on_unmount(self) -> None:
        """Leaving (quit): queued moves are dropped, a running one and a device diff stopped."""
        with self._moves:
            self.pending.clear()
        self.session.cancel()
        if self.diffing is not None:
            self.diffing.set()

    def _ask(self, title: str, value: str, then: Callable[[str], None], hint: str = "", empty: str = "",
             cursor: int | None = None, keys_before_open: bool = True) -> None:
        """Prompt for one line (the cursor at `cursor`, else the end); `then` gets a non-empty answer; Enter
        on an empty box shows `empty` (if given); `keys_before_open`: as :class:`PromptScreen`'s."""
        from netviz.screens.prompt import PromptScreen  # noqa: PLC0415 - a later key's screen

        screen = PromptScreen(title, value, hint=hint, cursor=cursor, keys_before_open=keys_before_open)

        def done(answer: str | None) -> None:
            if answer:
                self.run_guarded(then, answer)
            elif empty and getattr(screen, "empty_enter", False):
                self.notify(empty, title="Not available", severity="warning")
        self.app.push_screen(screen, done)

