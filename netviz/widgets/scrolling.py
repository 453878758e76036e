"""SteadyScrollbars: a ScrollView that skips the scrollbar update of a re-layout that changed nothing.

Textual's ``ScrollView._size_updated`` compares the compositor's sizes with its own (which never
match), so every re-layout of the screen (an inspector showing another op) repaints the pane's
scrollbars and sends it a Resize: the costliest part of a step's repaint.  Here the pane updates
only when its size, virtual size, container or gutter really changed.
"""
from __future__ import annotations

from typing import Any

from textual.geometry import Size


class SteadyScrollbars:
    _sized: Any = None

    def _size_updated(self, size: Size, virtual_size: Size, container_size: Size, layout: bool = True) -> bool:
        state = (size, self.virtual_size, container_size, self.styles.gutter.totals)  # type: ignore[attr-defined]
        if state == self._sized:
            return False
        self._sized = state
        return super()._size_updated(size, virtual_size, container_size, layout)  # type: ignore[misc]
