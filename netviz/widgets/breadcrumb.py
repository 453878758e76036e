"""Breadcrumb: the net the canvas shows (``main › op#7 While › loop_net``) and the zoom level."""
from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


class Breadcrumb(Static):
    def show(self, label: str, zoom: str, extra: str = "", legend: Text | None = None) -> None:
        text = Text.assemble((label, "bold"), ("  ·  ", "dim"), (zoom, "dim"), (extra, "dim"))
        if legend:
            text.append_text(legend)
        self.update(text)
