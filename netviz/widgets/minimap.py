"""Minimap: a two-row strip under the graph showing the whole net, however long, one cell per stretch.

Like a code editor's minimap laid on its side: each cell of the lower row stands for a run of
consecutive ops (``n / width`` of them; a 10,000-op net fits a 70-cell strip) and shows the pc
(``▶``), NaN/Inf alerts (``!``), breakpoints (``●``) and how much of the run has executed (``█``
all, ``▄`` some, ``·`` none); the cells of the ops the graph canvas shows now are highlighted
(the viewport).  The upper row labels the strip with op numbers (``#0``, ``#120``, … at the
cells they start).  A click, or Enter on the strip's cursor (``J`` focuses the strip, arrows
move it), selects that op, and the canvas follows it there.

The canvas keeps its whole width and almost all its height: the drawing folds to the pane's
height, so a strip beside it would have cost a band of ops.

It reads the main screen's state on a short timer and repaints only when what it shows changed, so
stepping and scrolling need no calls into it.
"""
from __future__ import annotations

from typing import Any

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.strip import Strip
from textual.widget import Widget

from netviz.messages import OpSelected
from netviz.session import OpRef

S_LINE, S_VIEW = Style(color="#8fa3b0", bgcolor="#1e2428"), Style(color="white", bgcolor="#3b5a7a", bold=True)
S_TICK = Style(color="#8fa3b0", bgcolor="#1e2428")
S_CUR = Style(color="black", bgcolor="#f5c542", bold=True)
S_PC, S_BP = Style(color="#ffff00", bgcolor="#1e2428", bold=True), Style(color="#ff3030", bgcolor="#1e2428", bold=True)
S_NAN = Style(color="white", bgcolor="#8E24AA", bold=True)
S_RAN = Style(color="#7CB342", bgcolor="#1e2428")
#: the label row's spacing: a tick label every TICK cells at least (``#10000`` is 6 wide)
TICK = 10


def cells_for(n_ops: int, width: int) -> list[range]:
    """The op ranges of the strip's cells: one op per cell when the net fits, else `width` runs of
    about equal length covering every op (the last cell ends at the last op)."""
    if n_ops <= 0 or width <= 0:
        return []
    if n_ops <= width:
        return [range(i, i + 1) for i in range(n_ops)]
    return [range(n_ops * c // width, n_ops * (c + 1) // width) for c in range(width)]


def cell_char(ops: range, pc: int | None, bps: set[int], nans: set[int], ran: set[int]) -> str:
    """The mark of one cell: pc, NaN/Inf alert, breakpoint, else how much of its ops ran."""
    if pc in ops:
        return "▶"
    if any(i in nans for i in ops):
        return "!"
    if any(i in bps for i in ops):
        return "●"
    done = sum(1 for i in ops if i in ran)
    return "█" if done == len(ops) else "▄" if done else "·"


def tick_line(cells: list[range], width: int) -> str:
    """The label row: ``#first`` of a cell every :data:`TICK` cells or more (no two labels touch)."""
    out = [" "] * width
    c = 0
    while c < len(cells):
        label = f"#{cells[c].start}"
        if c + len(label) > width:
            break
        out[c:c + len(label)] = label
        c += max(TICK, len(label) + 2)
    return "".join(out)


class Minimap(Widget, can_focus=True):
    """The whole net in a strip; `main` is the :class:`~netviz.screens.main.MainScreen` it serves."""

    DEFAULT_CSS = "Minimap { height: 2; width: 1fr; }"
    BINDINGS = [
        Binding("left,h", "move(-1)", "Left", show=False),
        Binding("right,l", "move(1)", "Right", show=False),
        Binding("home", "move(-100000)", "Start", show=False),
        Binding("end", "move(100000)", "End", show=False),
        Binding("enter", "jump", "Jump", show=False),
    ]

    def __init__(self, main: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.main = main
        self.cursor: int | None = None  # the cell Enter jumps to (moved by the arrows)
        self._shown: tuple | None = None

    def on_mount(self) -> None:
        # NOTE: the viewport follows the canvas at once (its scroll and drawing are reactive); the
        # marks (pc, ran, breakpoints) on the next tick of a short timer
        self.call_after_refresh(self._watch_canvas)  # the main screen names its canvas once mounted

    def _ready(self) -> bool:
        """The main screen has named its canvas (its on_mount runs after this widget's)."""
        return getattr(self.main, "canvas", None) is not None

    def _watch_canvas(self) -> None:
        if not self._ready():
            self.call_after_refresh(self._watch_canvas)
            return
        for attr in ("scroll_x", "scroll_y", "virtual_size"):
            self.watch(self.main.canvas, attr, self._changed, init=False)
        self.set_interval(0.2, self._poll)

    def _changed(self, *_: Any) -> None:
        self.sync()

    # -- what it shows ----------------------------------------------------------------------
    def n_ops(self) -> int:
        return len(self.main.session.view(self.main.path).net.op)

    def cells(self) -> list[range]:
        return cells_for(self.n_ops(), self.size.width)

    def state(self) -> tuple:
        """Everything the strip draws from: net size, pc, marks, viewport and cursor."""
        canvas = self.main.canvas
        return (self.main.path, self.n_ops(), self.size.width, canvas.pc_op, frozenset(canvas.breakpoints),
                frozenset(canvas.nan_ops), len(canvas.executed), self.viewport(), self.cursor, self.has_focus)

    def viewport(self) -> tuple[int, int] | None:
        """(first, last) op the canvas shows now, or None before a drawing is there."""
        canvas = self.main.canvas
        sc = canvas.scene
        if sc is None:
            return None
        region = canvas.scrollable_content_region
        sx, sy = int(canvas.scroll_x), int(canvas.scroll_y)
        seen = [n.op for n in sc.nodes if n.op is not None and n.x < sx + region.width and n.x + n.w > sx
                and n.y < sy + region.height and n.y + n.h > sy]
        return (min(seen), max(seen)) if seen else None

    def _poll(self) -> None:
        # NOTE: while a move runs the marks cannot change (the screen sets them when it ends, then
        # calls sync): the poll would only take the GIL from the move's worker
        if getattr(self.main, "busy", None) is None:
            self.sync()

    def sync(self) -> None:
        """Repaint if anything drawn changed: the main screen calls it as it sets the canvas marks, so
        they show in the frame that shows a move's stop (the 0.2 s poll catches the rest)."""
        state = self.state()
        if state != self._shown:
            self._shown = state
            self.refresh()

    def text(self) -> tuple[str, str]:
        """(label row, mark row) as plain text, for tests."""
        canvas, cells = self.main.canvas, self.cells()
        marks = "".join(cell_char(r, canvas.pc_op, canvas.breakpoints, canvas.nan_ops, canvas.executed)
                        for r in cells)
        return tick_line(cells, self.size.width), marks

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if not self._ready():
            return Strip([Segment(" " * width, S_LINE)], width)
        cells = self.cells()
        if y == 0:
            return Strip([Segment(tick_line(cells, width).ljust(width), S_TICK)], width)
        if y > 1:
            return Strip([Segment(" " * width, S_LINE)], width)
        canvas, view = self.main.canvas, self.viewport()
        segs = []
        for c, ops in enumerate(cells):
            ch = cell_char(ops, canvas.pc_op, canvas.breakpoints, canvas.nan_ops, canvas.executed)
            in_view = view is not None and ops.start <= view[1] and view[0] <= ops.stop - 1
            st = S_CUR if c == self.cursor and self.has_focus else S_PC if ch == "▶" else S_NAN if ch == "!" \
                else S_BP if ch == "●" else S_VIEW if in_view else S_RAN if ch != "·" else S_LINE
            segs.append(Segment(ch, st))
        segs.append(Segment(" " * (width - len(cells)), S_LINE))
        return Strip(segs, width)

    # -- jumping ------------------------------------------------------------------------------
    def op_at(self, x: int) -> int | None:
        cells = self.cells()
        return cells[x].start if 0 <= x < len(cells) else None

    def jump(self, x: int) -> None:
        """Select the first op of cell `x`: the canvas (which follows the cursor) moves there."""
        op = self.op_at(x)
        if op is not None:
            self.post_message(OpSelected(OpRef(self.main.path, op)))

    def on_click(self, event: Any) -> None:
        self.jump(event.x)

    def on_focus(self) -> None:
        if self.cursor is None:
            view = self.viewport()
            self.cursor = next((c for c, r in enumerate(self.cells()) if view and view[0] in r), 0)
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()

    def action_move(self, delta: int) -> None:
        self.cursor = max(0, min(len(self.cells()) - 1, (self.cursor or 0) + delta))
        self.refresh()

    def action_jump(self) -> None:
        if self.cursor is not None:
            self.jump(self.cursor)
