"""GraphCanvas: one net drawn with box-drawing characters; pan, zoom, follow, neighbourhood focus.

Layout runs in a worker thread (``dot`` can take seconds on big nets); scenes are cached per
(net, backward shown, SSA, zoom, window, direction), so switching back is instant.  Only visible
rows are drawn.  The flow direction (TB/LR, or ``auto``: the one that uses the pane best) and the
bands a deep drawing is folded into (one pane long: the pane shows consecutive ops) follow the
pane's size (see :func:`~netviz.widgets.graph_scene.plan_view`): a resize (or ``W``, which hides
the side panes) re-plans, without a new ``dot`` run unless the direction changes.  Blob shapes
are the values' once their op ran (``records``), static ones marked ``~`` before; control-flow
boxes say what their last run did (:meth:`GraphCanvas.control_note`).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import work
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from engine.errors import NetvizError
from netviz import cache
from netviz import style as looks
from netviz.messages import BlobSelected, OpSelected
from netviz.widgets.scrolling import SteadyScrollbars
from netviz.session import BlobRef, NetPath, OpRef
from netviz.widgets.graph_scene import (ZOOMS, Scene, SceneNode, bands_for, build_scene, default_zoom, fold_scroll,
                                        plan_view, shape_text, window_for, wrap_scene)

FILL = {"op": looks.OP.fill, "control": looks.CONTROL_OP.fill, "backward": looks.BACKWARD_OP.fill}
S_EDGE, S_EDGE_BWD, S_DIM = Style(color="#7f8c8d"), Style(color=looks.RED), Style(color="#4a4a4a")
S_EDGE_SEL = Style(color=looks.AMBER, bold=True)
CHIP = "#2f3439"
S_BLOB, S_GRAD = Style(color="#d0d4d8", bgcolor=CHIP), Style(color="#ff8a80", bgcolor=CHIP)
S_SHAPE, S_BLOB_DIM = Style(color="#8fa3b0", bgcolor=CHIP), Style(color="#5a5a5a")
S_SEL = Style(color="black", bgcolor=looks.AMBER, bold=True)
S_SEL_SUB = Style(color="#3a2a00", bgcolor=looks.AMBER)
S_LINK = Style(color="black", bgcolor="#CE93D8", bold=True)
S_NAN, S_DONE = Style(color="white", bgcolor="#8E24AA", bold=True), Style(color="#7CB342", bold=True)
S_SKIP = Style(color="#F4B400", bold=True)  # ↷ as the op list draws it: skipped (K), its kernel never ran
S_PC, S_BP = Style(color="#ffff00", bold=True), Style(color="#ff3030", bold=True)
S_FIX = Style(color="#F4B400", bold=True)  # ⚑ as the op list draws it: Caffe2 computes other values or refuses
#: a box's border characters (top-left, top, top-right, side, bottom-left, bottom, port, bottom-right): an
#: in-place op is drawn with a double line, as the exports give it a double outline (netviz.style.INPLACE)
BORDER = "╭─╮│╰─┬╯"
BORDER_INPLACE = "╔═╗║╚═╤╝"


def in_place_ops(net: Any) -> frozenset[int]:
    """The ops of `net` that write a blob they read (``Relu(x) → x``): what the exports' double outline marks."""
    return frozenset(i for i, op in enumerate(net.op) if set(op.input) & set(op.output))


def marks_legend(inplace: bool, flagged: bool) -> Text:
    """The breadcrumb's legend entries of the canvas's box marks that occur (:data:`netviz.style.LEGEND`'s
    in-place and ``⚑`` rows): ``║ in-place  ⚑ Caffe2 fix``; empty when neither does."""
    text = Text("", "dim")
    if inplace:
        text.append("║", "bold")
        text.append(" in-place ", "dim")
    if flagged:
        text.append(looks.FIX_MARK, S_FIX)
        text.append(" Caffe2 fix ", "dim")
    return text


@lru_cache(maxsize=None)
def _op_styles(kind: str) -> tuple[Style, Style]:
    fill = FILL.get(kind) or looks.category_fill(kind)  # forward ops: kind is their category
    return Style(color=fill), Style(color="white", bgcolor=fill, bold=True)


class GraphCanvas(SteadyScrollbars, ScrollView, can_focus=True):
    """The graph pane.  The main screen sets what to show; clicks post OpSelected/BlobSelected."""

    BINDINGS = [
        Binding("left,h", "pan(-8, 0)", "Pan left", show=False, id="graph.pan-left"),
        Binding("right,l", "pan(8, 0)", "Pan right", show=False, id="graph.pan-right"),
        Binding("up,k", "pan(0, -4)", "Pan up", show=False, id="graph.pan-up"),
        Binding("down,j", "pan(0, 4)", "Pan down", show=False, id="graph.pan-down"),
    ]

    zoom: reactive[int] = reactive(0)
    placeholder: reactive[str] = reactive("")

    class Shown(Message):
        """A laid-out drawing (or why there is none) replaced the placeholder: the main screen starts
        its whole-net work after the first one, so it never competes with the first frame."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scene: Scene | None = None
        self.path: NetPath = ()
        self.key: tuple | None = None
        self.selected_op: int | None = None
        self.selected_blob: tuple[str, int | None] | None = None
        self.pc_op: int | None = None
        self.breakpoints: set[int] = set()
        self.executed: set[int] = set()
        self.nan_ops: set[int] = set()
        #: op index → the debugger's OpRecord of the ops that ran (the main screen sets it with the
        #: marks): a blob's shape on the canvas is its value's once the op that wrote it has run
        self.records: dict[int, Any] = {}
        self._writers: tuple[Any, dict[tuple[str, int], tuple[int, int]]] | None = None
        self._outs: tuple[Any, dict[int, list[int]]] | None = None
        self.linked_ops: set[int] = set()
        self.overlay: dict[int, Style] = {}
        self._hot: dict[int, set[int]] = {}
        self._hot_for: tuple | None = None
        self.focus_nodes: tuple[set[int], set[str]] | None = None
        self._cache: dict[tuple, Scene] = {}   # (view key, direction) → scene as laid out
        self._extents: dict[tuple, dict] = {}  # view key → estimate_extents, to re-plan on resize
        self._base: Scene | None = None        # the laid-out scene shown, before wrapping
        self._pending_center: int | None = None
        self._args: tuple = ()                 # what the last show() laid out, for a re-plan
        #: "auto", "TB" or "LR" (the main screen's toggle); the key of the view includes it
        self.direction = "auto"
        self._auto_zoom: int | None = None  # what auto_zoom() said at the last resize
        self._width_for: tuple | None = None
        self._width = 0
        self._strips: dict[int, tuple[tuple[Any, ...], Strip]] = {}  # scene row → ((sx, width, look), strip)
        self._strips_for: tuple | None = None  # (scene, focus on) the strips were drawn for
        self._inplace: tuple[Any, frozenset[int]] | None = None  # (net, its in-place ops), made once per net

    # -- what to show ----------------------------------------------------------------------
    def show(self, session: Any, path: NetPath, ssa: bool, zoom: int, op: int | None = None) -> None:
        """Show the net at `path` (a big net: the window of ops around `op`); lays it out in a
        worker unless cached.  A new window of the same view keeps the old drawing until it is ready."""
        view = session.view(path)
        window = window_for(view, op, session.show_backward)
        key = (path, session.show_backward, ssa, zoom, window[0] if len(window) < len(view.net.op) else None,
               self.direction)
        if key == self.key:
            return
        same_view = self.key is not None and self.key[:4] == key[:4] and self.scene is not None
        self.key, self.path = key, path
        # NOTE: the view, not its SSA: a drawing read from the cache needs none (a 10k-op net's SSA is
        # ~20 ms to read back), and one laid out reads it in the worker
        self._args = (session, view.net, view, view.n_forward, ssa, zoom, None if key[4] is None else window)
        direction = self._planned(key)
        if (key, direction) in self._cache:
            self._set_scene(self._cache[key, direction])
            return
        if not same_view:
            # NOTE: a drawing cached on disk is read here (DenseNet-121's first window: ~5 ms), not in the
            # worker: the first frame waits for it, and the thread hop took ~15 ms more
            where = self._scene_key(key, direction or "auto", self._pane(), session, zoom, self._args[6], block=False)
            scene = cache.load("scene", where) if where is not None else None
            if scene is not None:
                self._ready(key, scene)
                return
            self.scene, self._base, self.placeholder = None, None, f"laying out {session.path_label(path)} …"
            self.virtual_size = Size(self.size.width, self.size.height)
            self.refresh()
        self._layout(key, direction or "auto", self._pane(), *self._args)

    def auto_zoom(self) -> int:
        """The zoom the pane's size calls for (:func:`~netviz.widgets.graph_scene.default_zoom`)."""
        return default_zoom(*self._pane())

    def _pane(self) -> tuple[int, int]:
        """The cells a drawing may take: the widget less a scrollbar's cell each way, so a drawing
        folded to the pane's height (or width) still fits once the other scrollbar appears."""
        size = self.size
        return max(0, size.width - 1), max(0, size.height - 1)

    def _planned(self, key: tuple) -> str | None:
        """The direction of view `key` in the pane now; None while auto and its extents are unknown."""
        if key[5] != "auto":
            return key[5]
        ext = self._extents.get(key)
        return plan_view(ext, *self._pane())[0] if ext else None

    def set_direction(self, direction: str) -> None:
        """Flow "TB", "LR" or "auto"; takes effect at the next :meth:`show`."""
        self.direction = direction

    class ZoomFits(Message):
        """The pane's size now calls for another zoom than the one shown (:meth:`auto_zoom`): a screen
        whose zoom follows the pane shows the graph again."""

    def on_resize(self) -> None:
        """Re-plan the shown view for the new size: other columns now, another direction in a worker."""
        auto = self.auto_zoom()
        if self.key is not None:
            if self.key[3] != auto and auto != self._auto_zoom:
                self.post_message(self.ZoomFits())  # NOTE: once per change (a big net's shown zoom is never 0)
            self._auto_zoom = auto
        if self._base is not None:
            self._replan()

    def _replan(self) -> None:
        """Show the current view as planned for the pane now: a cached scene, else lay it out."""
        if self.key is None or not self._args:
            return
        direction = self._planned(self.key)
        if (self.key, direction) in self._cache:
            self._set_scene(self._cache[self.key, direction])
        else:
            self._layout(self.key, direction or "auto", self._pane(), *self._args)

    @work(thread=True, exclusive=True, group="layout")
    def _layout(self, key: tuple, direction: str, pane: tuple[int, int], session: Any, net: Any, view: Any,
                n_forward: int, ssa: bool, zoom: int, window: range | None) -> None:
        try:
            blobs = ZOOMS[zoom][1]
            params = session.param_names()
            where = self._scene_key(key, direction, pane, session, zoom, window)

            def make() -> Scene:
                shapes = session.shapes(key[0]) if blobs else None
                return build_scene(net, view.ssa, n_forward, ssa, zoom, shapes=shapes, params=params, ops=window,
                                   direction=direction, pane=pane, ladder=key[1])

            scene = cache.cached("scene", where, make)
        except NetvizError as e:
            self.app.call_from_thread(self._failed, key, e)
            return
        self.app.call_from_thread(self._ready, key, scene)

    @staticmethod
    def _scene_key(key: tuple, direction: str, pane: tuple[int, int], session: Any, zoom: int,
                   window: range | None, block: bool = True) -> str | None:
        """The :mod:`netviz.cache` key of a drawing; None when it is not cached (no net digest: a
        subnet, a plan) or, with `block` False, when the key needs a costly hash not made yet (a big init
        net: :meth:`netviz.session.Session.shapes_key`)."""
        digest = getattr(session, "digest", None)
        if digest is None:
            return None
        inferred = None
        if ZOOMS[zoom][1]:
            inferred = session.shapes_key(block=block) if hasattr(session, "shapes_key") else None
            if inferred is None:
                return None
        # NOTE: a drawing is a function of the net (its digest), the view (key, loss), the direction,
        # the pane and, with blobs, what shape inference reads: a net seen before draws from
        # netviz.cache without inferring shapes (which imports every kernel module).
        # Every argument of build_scene must be in this key.
        return cache.key(digest, key, session.loss, direction, pane, sorted(session.param_names()), window, inferred)

    def _ready(self, key: tuple, scene: Scene) -> None:
        self._cache[key, scene.direction] = scene
        self._extents[key] = scene.extents
        if key == self.key:  # NOTE: the pane may have changed while it was laid out
            self._replan()

    def _failed(self, key: tuple, error: NetvizError) -> None:
        if key == self.key:
            self.placeholder = f"no drawing: {error}"
            self.app.notify(str(error), title="Layout", severity="error")
            self.post_message(self.Shown())

    def _set_scene(self, base: Scene) -> None:
        """Show a laid-out scene, wrapped into the columns the pane takes (unchanged: no repaint)."""
        band = bands_for(base, *self._pane())
        if self._base is base and self.scene is not None and self.scene.band == band:
            return
        self._base = base
        scene = self.scene = wrap_scene(base, band)
        self.virtual_size = Size(scene.width, scene.height)
        self.refresh()
        self.post_message(self.Shown())
        if self._pending_center is not None:
            self.center_on(self._pending_center)  # now, and again once the new size is laid out
            self.call_after_refresh(self.center_on, self._pending_center)

    def watch_placeholder(self) -> None:
        self.refresh()

    def center_on(self, op: int | None, lazy: bool = False) -> None:
        """Scroll so that op `op` is in the middle (remembered until the layout is there).

        `lazy`: only when its box is not well inside the view (a quarter of it from the edges),
        so stepping along repaints the changed boxes, not the whole canvas, most of the time.
        """
        self._pending_center = op
        if op is None or self.scene is None or op not in self.scene.by_op:
            return
        n = self.scene.nodes[self.scene.by_op[op]]
        x, y = n.center
        region = self.scrollable_content_region
        folded = fold_scroll(self.scene, n, region.width, region.height, (int(self.scroll_x), int(self.scroll_y)),
                             lazy)
        if folded is not None:
            if folded != (int(self.scroll_x), int(self.scroll_y)):
                self.scroll_to(*folded, animate=False)
            return
        if lazy:
            sx, sy, mx, my = self.scroll_x, self.scroll_y, region.width // 4, region.height // 4
            if sx + mx <= n.x and n.x + n.w <= sx + region.width - mx and sy + my <= n.y \
                    and n.y + n.h <= sy + region.height - my:
                return
        self.scroll_to(max(0, x - region.width // 2), max(0, y - region.height // 2), animate=False)

    def ops_in_view(self) -> set[int] | None:
        """Indices of the ops whose boxes the pane shows, whole or in part (the "current view" export
        draws these: what the person sees, each gradient op beside its forward op as here); None
        while no layout is shown."""
        sc = self.scene
        if sc is None:
            return None
        r, sx, sy = self.scrollable_content_region, int(self.scroll_x), int(self.scroll_y)
        return {n.op for n in sc.nodes if n.op is not None and n.kind == "op" and n.x < sx + r.width
                and sx < n.x + n.w and n.y < sy + r.height and sy < n.y + n.h}

    # -- repainting only what changed --------------------------------------------------------
    def rows_of_ops(self, ops: Any) -> set[int]:
        """Scene rows of the boxes of `ops` and of the blobs they write (whose shapes change when
        they run); None and ops not drawn are skipped."""
        sc, rows = self.scene, set()
        if sc is None:
            return rows
        if self._outs is None or self._outs[0] is not sc:
            outs: dict[int, list[int]] = {}
            for e in sc.edges:
                if sc.nodes[e.tail].op is not None and sc.nodes[e.head].kind == "blob":
                    outs.setdefault(sc.nodes[e.tail].op, []).append(e.head)
            self._outs = (sc, outs)
        for op in ops:
            k = sc.by_op.get(op) if op is not None else None
            if k is not None:
                for j in (k, *self._outs[1].get(op, ())):
                    n = sc.nodes[j]
                    rows.update(range(n.y, n.y + n.h))
        return rows

    def control_note(self, n: SceneNode) -> str:
        """What an If/While/Do/RecurrentNetwork box says of its last run: the If's branch and
        ``cond`` value, a loop's iteration (or timestep) count; before it ran, the layout's note."""
        if n.op is None or n.op not in self.records or not self._args:
            return n.sub
        from netviz.session import BlobRef, OpRef, to_oppath  # NOTE: the session module is loaded by now
        session, net = self._args[0], self._args[1]
        prefix = to_oppath(OpRef(self.path, n.op))
        depth = len(self.path)
        branches: set[str] = set()
        count = -1
        for path, rec in session.state.records.items():
            if len(path) > len(prefix) + 1 and path[:len(prefix)] == prefix:
                branches.add(path[len(prefix)])
                label = rec.frames[depth] if len(rec.frames) > depth else ""
                if label.startswith(("iteration ", "timestep ")):
                    count = max(count, int(label.split()[1]))
        op = net.op[n.op]
        if op.type == "If":
            if branches:
                took = "then" if "then_net" in branches else "else"
                return f"{took} · cond={took == 'then'}"
            ins = self._args[2].ssa[n.op][0]
            value, _ = session.version_value(BlobRef(self.path, ins[0][0], ins[0][1])) if ins else (None, "")
            if value is None or getattr(value, "size", 0) != 1:
                return "ran"
            cond = bool(value.reshape(-1)[0])
            return f"{'then' if cond else 'else'} · cond={cond}"
        if op.type in ("While", "ONNXWhile"):
            return f"{count + 1} iteration{'s' if count != 0 else ''}"
        if count >= 0:
            return f"{count + 1} timestep{'s' if count else ''}"
        return "ran"

    def shape_now(self, n: SceneNode) -> str:
        """The shape a blob node shows: its value's once the op that wrote that version has run,
        else the static one the layout drew (marked ``~``)."""
        if not self.records or n.blob is None or n.version is None or len(self._args) < 3:
            return n.sub
        ssa_list = self._args[2].ssa
        if self._writers is None or self._writers[0] is not ssa_list:
            self._writers = (ssa_list, {b: (i, k) for i, (_, outs) in enumerate(ssa_list)
                                        for k, b in enumerate(outs)})
        at = self._writers[1].get((n.blob[0], n.version))
        rec = self.records.get(at[0]) if at is not None else None
        if rec is None or at[1] >= len(rec.outputs) or rec.outputs[at[1]].name != n.blob[0]:
            return n.sub
        return shape_text(rec.outputs[at[1]]) or n.sub

    def hot_rows(self) -> set[int]:
        """Scene rows of the highlighted edges of the selection."""
        return set(self._hot_edges()) if self.scene is not None else set()

    def refresh_rows(self, rows: set[int]) -> None:
        """Repaint scene rows (only those in view reach the screen)."""
        top, height = int(self.scroll_y), self.scrollable_content_region.height
        visible = sorted(r for r in rows if top <= r < top + height)
        start = prev = None
        for r in visible + [None]:
            if start is not None and (r is None or r != prev + 1):
                self.refresh_lines(start, prev - start + 1)
                start = None
            if r is not None and start is None:
                start = r
            prev = r

    def action_pan(self, dx: int, dy: int) -> None:
        self.scroll_to(self.scroll_x + dx, self.scroll_y + dy, animate=False)

    # -- drawing ---------------------------------------------------------------------------
    def _content_width(self) -> int:
        """``scrollable_content_region.width``, cached per region and scrollbar gutter (Textual
        recomputes it per call: a third of a line's drawing time)."""
        key = (self.region, self.scrollbar_gutter)
        if self._width_for != key:
            self._width_for, self._width = key, self.scrollable_content_region.width
        return self._width

    _pass_width: int | None = None  # the content width during one render_lines pass (it cannot change there)

    def render_lines(self, crop: Any) -> list[Strip]:
        # NOTE: the width is read once per pass: its key (Widget.region) looks the canvas up in the
        # screen's map on every read, ~8 us a line
        self._pass_width = self._content_width()
        try:
            return super().render_lines(crop)
        finally:
            self._pass_width = None

    def render_line(self, y: int) -> Strip:
        """Line `y` of the view: the scene row's cells in view, drawn once per look and place
        (:meth:`_view_row`), so a scroll that brings back rows drawn before (stepping re-centres the
        view about every third step) reuses them."""
        width = self._pass_width if self._pass_width is not None else self._content_width()
        sx, sy = int(self.scroll_x), int(self.scroll_y)
        sc, row = self.scene, sy + y
        if sc is None or row >= sc.height:
            text = self.placeholder if sc is None and y == 1 else ""
            return Strip([Segment(f" {text}".ljust(width)[:width], S_EDGE)], width)
        return self._view_row(row, sx, width)

    def _row_look(self, row: int) -> tuple[Any, ...]:
        """Everything a scene row's drawing depends on besides the scene: the marks of each box on
        it and its highlighted edge cells.  Equal looks draw the same row, so no cache invalidation."""
        sc, focus, flagged = self.scene, self.focus_nodes, self.flagged_ops()
        marks: list[tuple[Any, ...]] = []
        for k in sc.rows.get(row, ()):
            n = sc.nodes[k]
            if n.op is not None:
                op = n.op
                marks.append((op == self.selected_op, op == self.pc_op, op in self.breakpoints, op in self.executed,
                               self._skipped(op),
                               op in self.nan_ops, op in self.linked_ops, self.overlay.get(op),
                               focus is not None and op in focus[0], self.control_note(n) if n.h == 4 else None,
                               op in flagged))
            else:
                marks.append((n.blob == self.selected_blob, focus is not None and n.blob[0] in focus[1],
                              self.shape_now(n) if n.h > 1 else None))
        hot = self._hot_edges().get(row)
        return tuple(marks), frozenset(hot) if hot else None

    def _view_row(self, row: int, sx: int, width: int) -> Strip:
        """Cells sx..sx+width of a scene row, kept while its look (:meth:`_row_look`) and place are
        unchanged.  Only the cells in view are drawn: a wrapped drawing is several panes wide."""
        sc, focus = self.scene, self.focus_nodes is not None
        # NOTE: the scene itself, not its id: a new scene may get the id of the one it replaced
        if self._strips_for is None or self._strips_for[0] is not sc or self._strips_for[1] != focus:
            self._strips, self._strips_for = {}, (sc, focus)
        key = (sx, width, self._row_look(row))
        kept = self._strips.get(row)
        if kept is not None and kept[0] == key:
            return kept[1]
        strip = self._draw_row(row, sx, width)
        self._strips[row] = (key, strip)
        return strip

    def _draw_row(self, row: int, sx: int, width: int) -> Strip:
        sc = self.scene
        chars = list(sc.edge_chars(row, sx, sx + width).ljust(width))
        if self.focus_nodes is not None:
            styles = [S_DIM] * width
        else:
            styles = [S_EDGE_BWD if b else S_EDGE for b in sc.backward_flags(row, sx, sx + width)]
            styles += [S_EDGE] * (width - len(styles))
        for cx in self._hot_edges().get(row, ()):
            if sx <= cx < sx + width:
                styles[cx - sx] = S_EDGE_SEL
        for k in sc.rows.get(row, ()):
            n = sc.nodes[k]
            if n.x >= sx + width or n.x + n.w <= sx:
                continue
            cells = self._node_row(n, row - n.y)
            if n.kind == "op" and (n.x < sx or n.x + n.w > sx + width) and row - n.y == (n.h > 1):
                cells = _refit_cut(cells, n, sx - n.x, sx + width - n.x)
            for j, (c, st) in enumerate(cells):
                cx = n.x + j - sx
                if 0 <= cx < width:
                    chars[cx], styles[cx] = c, st
        return Strip(_runs(chars, styles), width)

    def _hot_edges(self) -> dict[int, set[int]]:
        """Cells of the edges of the selected op (or blob), computed once per selection."""
        sc = self.scene
        key = (sc, self.selected_op, self.selected_blob)  # NOTE: the scene, not its id (ids are reused)
        if (self._hot_for is None or self._hot_for[0] is not sc or key[1:] != self._hot_for[1:]) and sc is not None:
            picked = {k for k, n in enumerate(sc.nodes)
                      if (n.op is not None and n.op == self.selected_op)
                      or (n.blob is not None and n.blob == self.selected_blob)}
            self._hot, self._hot_for = sc.edge_cells_of(picked) if picked else {}, key
        return self._hot

    def _node_row(self, n: SceneNode, r: int) -> list[tuple[str, Style]]:
        if n.kind == "blob":
            sel = n.blob == self.selected_blob
            dim = self.focus_nodes is not None and n.blob[0] not in self.focus_nodes[1]
            st = S_SEL if sel else S_BLOB_DIM if dim else S_GRAD if n.style == "grad" else S_BLOB
            if r == 1:
                return [(c, S_SEL_SUB if sel else S_BLOB_DIM if dim else S_SHAPE) for c in _fit(self.shape_now(n), n.w)]
            return [(c, st) for c in _fit(n.label, n.w)]
        border, inner = _op_styles(n.style)
        if n.op in self.overlay:
            inner = self.overlay[n.op]
        if self.focus_nodes is not None and n.op not in self.focus_nodes[0]:
            border = inner = S_DIM
        if n.op in self.nan_ops:
            inner = S_NAN
        if n.op in self.linked_ops:
            border, inner = Style(color="#CE93D8", bold=True), S_LINK
        if n.op == self.selected_op:
            border, inner = Style(color=looks.AMBER, bold=True), S_SEL
        if n.h == 1:  # NOTE: a mark's character is one of ONE_ROW_MARKS (_refit_cut finds it by that)
            mark = ("▶", S_PC) if n.op == self.pc_op else ("●", S_BP) if n.op in self.breakpoints else None
            text = fit_op_label(n.label, n.w)
            if mark is not None and not text.startswith(" "):  # NOTE: a label filling the row lost its type's
                # first letter under the mark (▶enerateProposals #102): the space before # goes first
                tight = n.label.replace(" #", "#")
                text = " " + (tight if len(tight) == n.w - 1 else fit_op_label(n.label, n.w - 1))
            cells = [(c, inner) for c in text]
            if mark is not None:
                cells[0] = mark
            return cells
        b = BORDER_INPLACE if n.op in self.inplace_ops() else BORDER
        if r == 0:
            top = [(c, border) for c in b[0] + b[1] * (n.w - 2) + b[2]]
            if n.w >= 4 and n.op in self.flagged_ops():  # NOTE: on the border: the label keeps its cells, marks theirs
                top[-2] = (looks.FIX_MARK, S_FIX)
            return top
        if r == n.h - 1:
            return [(c, border) for c in b[4] + "".join(b[6] if j in n.ports else b[5] for j in range(1, n.w - 1)) + b[7]]
        if r == 2:  # a control-flow op's second line: what its run did
            return [(b[3], border), (" ", inner), *((c, inner) for c in _fit(self.control_note(n), n.w - 4)),
                    (" ", inner), (b[3], border)]
        # NOTE: marks take the padding cells inside the borders (a detail box is its label + 4 wide); an ops-zoom
        # box has none (label + 2): there a mark takes the border's cell
        padded = n.w - len(n.label) >= 4
        pad = (b[3], border) if not padded else (" ", inner)
        left = ("▶", S_PC) if n.op == self.pc_op else pad
        right = (("●", S_BP) if n.op in self.breakpoints else ("↷", S_SKIP) if self._skipped(n.op)
                 else ("!", S_NAN) if n.op in self.nan_ops  # NOTE: wrote NaN/Inf: never ✓ (as the op tree's !)
                 else ("✓", S_DONE) if n.op in self.executed else pad)
        label = [(c, inner) for c in fit_op_label(n.label, n.w - (4 if padded else 2))]
        return [(b[3], border), left, *label, right, (b[3], border)] if padded else [left, *label, right]

    def inplace_ops(self) -> frozenset[int]:
        """The shown net's in-place ops (a double-line border), found once per net."""
        net = self._args[1] if self._args else None
        if net is None:
            return frozenset()
        if self._inplace is None or self._inplace[0] is not net:
            self._inplace = (net, in_place_ops(net))
        return self._inplace[1]

    def flagged_ops(self) -> dict[int, Any]:
        """The main net's ops the lint flags (``⚑`` on their box): none in a subnet, none until the
        screen's lint worker is done (:meth:`netviz.session.Session.lint_ready` never blocks)."""
        session = self._args[0] if self._args else None
        return session.lint_ready() if session is not None and not self.path else {}

    def legend(self) -> Text:
        """:func:`marks_legend` of the shown net: the marks its boxes carry.  None at a zoom of one-line
        boxes (overview, map), which have no border to mark: the breadcrumb keeps its room there."""
        if self.key is None or ZOOMS[self.key[3]][2] < 3:
            return Text("", "dim")
        return marks_legend(bool(self.inplace_ops()), bool(self.flagged_ops()))

    def _skipped(self, op: int) -> bool:
        """The op's last run was a skip (K: outputs given, kernel not run): marked ↷, never ✓."""
        rec = self.records.get(op) if op in self.executed else None
        return bool(getattr(rec, "skipped", False))

    def on_click(self, event: Any) -> None:
        if self.scene is None:
            return
        node = self.scene.node_at(int(self.scroll_x) + event.x, int(self.scroll_y) + event.y)
        if node is None:
            return
        if node.op is not None:
            self.post_message(OpSelected(OpRef(self.path, node.op)))
        elif node.blob is not None:
            self.post_message(BlobSelected(BlobRef(self.path, *node.blob)))


def _fit(label: str, w: int) -> str:
    return label.center(w)[:w] if len(label) <= w else (label[: w - 1] + "…" if w > 1 else label[:w])


def fit_op_label(label: str, w: int) -> str:
    """An op's label (``SpatialBN #169``) in `w` cells: whole and centred when it fits, else its type
    shortened with ``…`` and its ``#N`` kept whole (``Spat… #169``, ``…#169``), since a cut number names
    another op; with no room for the whole number, only ``…``."""
    if len(label) <= w:
        return label.center(w)
    kind, sep, num = label.rpartition(" #")
    if not sep:
        return _fit(label, w)
    num = "#" + num
    room = w - len(num) - 1  # NOTE: the type's cells before " #N"
    if room >= 2:
        return f"{kind[:room - 1]}… {num}"
    if w > len(num):
        return f"…{num}".center(w)
    return num if w == len(num) else "…".center(w)[:w]


#: the marks a one-row op (overview, map) carries in its first cell: the pc, a breakpoint
ONE_ROW_MARKS = frozenset("▶●")


def _refit_cut(cells: list[tuple[str, Style]], n: SceneNode, a: int, b: int) -> list[tuple[str, Style]]:
    """An op box's label row when the pane's edge cuts the box: only its cells `a`..`b` (box columns) are in
    view, so the label is fitted into the part of its span in view (:func:`fit_op_label`) rather than cut
    off at the edge (``SpatialBN #16`` for #169).  Marks and the border on the side in view stay; a one-row
    op's mark (the pc's ▶, a breakpoint's ●) moves to the first cell in view: cut off with the label's
    left end, the pc was nowhere on the canvas."""
    if n.h == 1:
        marked = bool(cells) and cells[0][0] in ONE_ROW_MARKS
        start, hi = max(0, a), min(n.w, b)
        lo = start + marked
        if hi <= lo:
            return cells
        head = [*cells[:start], cells[0]] if marked else cells[:start]
        return [*head, *((c, cells[lo][1]) for c in fit_op_label(n.label, hi - lo)), *cells[hi:]]
    pad = 2 if n.w - len(n.label) >= 4 else 1
    lo, hi = max(pad, a), min(n.w - pad, b)
    if hi <= lo:
        return cells
    style = cells[lo][1]
    return [*cells[:lo], *((c, style) for c in fit_op_label(n.label, hi - lo)), *cells[hi:]]


def _runs(chars: list[str], styles: list[Style]) -> list[Segment]:
    """One segment per run of cells sharing a style (by identity)."""
    if not chars:
        return []
    out, start, prev = [], 0, styles[0]
    for i, st in enumerate(styles):
        if st is not prev:
            out.append(Segment("".join(chars[start:i]), prev))
            start, prev = i, st
    out.append(Segment("".join(chars[start:]), prev))
    return out
