"""Breadcrumb: the net the canvas shows (``main › op#7 While › loop_net``), the zoom level, and the
overlay legend at the right end.

The line is fitted to the pane's width each time it is drawn (:func:`fit_crumb`): the overlay legend
always shows whole (it is the only key to the colours), the view notes (zoom, SSA, window) give way
first, and a long path (a deep If/While/RNN nesting) is cut from the left (``… › loop_net``): its
innermost net is the one on screen.
"""
from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widget import Widget

SEP = "  ·  "
ELLIPSIS = "…"
PATH_SEP = " › "


def cut_left(label: str, room: int) -> str:
    """`label` in at most `room` cells, its start dropped: at a ``›`` boundary when that keeps two
    thirds of the room (``… › op#0 While › loop_net``), else mid-name (``…op_net``)."""
    if len(label) <= room:
        return label
    if room <= len(ELLIPSIS):
        return ELLIPSIS[:max(room, 0)]
    start = label.find(PATH_SEP)
    while start >= 0 and len(ELLIPSIS) + len(label) - start > room:
        start = label.find(PATH_SEP, start + 1)
    if start >= 0 and 3 * (len(ELLIPSIS) + len(label) - start) >= 2 * room:
        return ELLIPSIS + label[start:]
    return ELLIPSIS + label[len(label) - room + len(ELLIPSIS):]


def legend_forms(legend: Text) -> list[Text]:
    """The legend, shortest last: whole (``  ·  overlay time ■■■■■ 1–3ms``), without the lead-in
    (``time ■■■■■ 1–3ms``), without the mode's name too (``■■■■■ 1–3ms``; the status line names it)."""
    lead = SEP + "overlay "
    body = legend[len(lead):] if legend.plain.startswith(lead) else legend
    forms = [legend, body]
    name, space, _ = body.plain.partition(" ")
    if space and "■" not in name:
        forms.append(body[len(name) + 1:])
    return forms


def fit_line(label: str, notes: list[str], room: int) -> Text:
    """`label` and as many of `notes` as fit in `room` cells (the last go first), the label cut from the left."""
    notes = list(notes)
    while notes and len(label) + sum(len(SEP) + len(p) for p in notes) > room:
        notes.pop()
    text = Text(cut_left(label, room - sum(len(SEP) + len(p) for p in notes)), "bold")
    for note in notes:
        text.append_text(Text.assemble((SEP, "dim"), (note, "dim")))
    return text


#: the path keeps at least this many cells beside the legend, else the legend gets a line of its own
MIN_LABEL = 16


def fit_crumb(label: str, zoom: str, extra: str, legend: Text, width: int | None) -> Text:
    """The breadcrumb in `width` cells: one line, or two when the legend leaves the path too little room.

    The legend always shows whole, flush right (its shorter forms, :func:`legend_forms`, when the
    full one does not fit); what gives way, in order: the notes in `extra` (``  ·  SSA  ·  ops 0–199
    of 1000 …``) from the last, then `zoom`, then the start of `label` (:func:`cut_left`).
    `width` None: nothing is cut (not laid out yet)."""
    notes = [p for p in (zoom, *extra.split(SEP)) if p.strip()]
    if width is None:
        width = len(label) + sum(len(SEP) + len(p) for p in notes) + 2 + legend.cell_len
    if not legend.cell_len:
        return fit_line(label, notes, width)
    forms = legend_forms(legend)
    beside = [f for f in forms if width - f.cell_len - 2 >= min(len(label), MIN_LABEL)]
    if beside:
        key = beside[0]
        text = fit_line(label, notes, width - key.cell_len - 2)
        text.append(" " * (width - text.cell_len - key.cell_len))
        return text.append_text(key)
    key = next((f for f in forms if f.cell_len <= width), forms[-1])
    if key.cell_len > width:
        key = key.copy()
        key.truncate(width, overflow="ellipsis")
    return fit_line(label, notes, width).append("\n").append_text(key)


class Breadcrumb(Widget):
    """One line (two when the legend needs its own), fitted to its width on every draw (a resize re-fits it)."""

    _parts: tuple[str, str, str, Text] = ("", "", "", Text())

    def show(self, label: str, zoom: str, extra: str = "", legend: Text | None = None) -> None:
        parts = (label, zoom, extra, legend or Text())
        if parts != self._parts:
            lines = fit_crumb(*self._parts, self.content_size.width or None).plain.count("\n")
            self._parts = parts
            relayout = fit_crumb(*parts, self.content_size.width or None).plain.count("\n") != lines
            self.refresh(layout=relayout)

    def render(self) -> Text:
        width = self.content_size.width
        return fit_crumb(*self._parts, width if width > 0 else None)

    def get_content_height(self, container: Any, viewport: Any, width: int) -> int:
        return fit_crumb(*self._parts, width).plain.count("\n") + 1

    @property
    def content(self) -> Text:
        """What the breadcrumb shows now (at its current width)."""
        return self.render()
