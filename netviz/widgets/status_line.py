"""StatusLine: program counter, where the cursor is, and which views are on.

Fitted to its width on every draw: the flags (views on, a running move, the overlay) stay whole;
a long pc or cursor path (deep subnets) is cut from the left, so its innermost part shows.
"""
from __future__ import annotations

import re
from typing import Any

from rich.text import Text
from textual.widget import Widget

from netviz.widgets.breadcrumb import ELLIPSIS, cut_left

BAR = "  │  "

#: the innermost op of a pc label: ``op#349 SpatialBNGradient`` at its end
_LAST_OP = re.compile(r"op#\d+ (\S+)$")


def cut_pc(pc: str, room: int) -> str:
    """`pc` in at most `room` cells, cut from the left as :func:`cut_left` does, except that the innermost
    ``op#N`` stays whole while the type can shrink instead (``…op#349 Spat…``): at 80 columns a ResNet
    backward stop read ``pc …lBNGradient``, the type's tail with no op number."""
    cut = cut_left(pc, room)
    m = _LAST_OP.search(pc)
    if cut == pc or m is None or len(cut) - len(ELLIPSIS) >= len(pc) - m.start():
        return cut  # whole, or the whole ``op#N Type`` shows
    head = ELLIPSIS + pc[m.start():m.start(1)]
    if len(head) + 1 + len(ELLIPSIS) > room:
        return cut
    return head + pc[m.start(1):][:room - len(head) - len(ELLIPSIS)] + ELLIPSIS


def fit_status(pc: str, cursor: str, flags: list[str], width: int | None) -> Text:
    """``pc … │ cursor … │ flags`` in `width` cells: the flags whole, pc and cursor sharing the rest
    (the stop's ``[reason]`` dropped first, then each cut from the left only as far as needed)."""
    tail = " ".join(flags)
    if width is not None:
        room = width - len("pc ") - 2 * len(BAR) - len(tail)
        if len(pc) + len(cursor) > room and "  [" in pc:
            pc = pc[:pc.index("  [")]  # the stop's reason goes first: it was a notice too
        if len(pc) + len(cursor) > room:
            pc_room = max(room - len(cursor), (room + 1) // 2)
            pc = cut_pc(pc, pc_room)
            cursor = cut_left(cursor, room - len(pc))
    return Text.assemble(("pc ", "dim"), (pc, "bold"), (BAR, "dim"), cursor, (BAR, "dim"), (tail, "italic"))


def random_params(session: Any) -> list[str]:
    """The parameters the debugger filled with random values (no init net): lasting, not a toast."""
    return list(getattr(session.debugger, "synthesized", None) or ())


def random_flag(session: Any) -> list[str]:
    """``["params:random(12)"]`` while random parameters are in use (the status line's flag), else []."""
    made = random_params(session)
    return [f"params:random({len(made)})"] if made else []


class StatusLine(Widget):
    """One line: ``pc: main › While op#7 iter 3 › op 2 │ cursor … │ SSA backward zoom``."""

    _shown: tuple = ("", "", [])

    def render(self) -> Text:
        width = self.content_size.width
        return fit_status(*self._shown, width if width > 0 else None)

    @property
    def content(self) -> Text:
        return self.render()

    def show(self, pc: str, cursor: str, flags: list[str]) -> None:
        if (pc, cursor, flags) == self._shown:
            return  # a step asks twice
        self._shown = (pc, cursor, flags)
        # NOTE: one line of fixed height: a repaint, not Static.update()'s re-layout of the screen
        self.refresh()
