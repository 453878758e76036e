"""KeyFooter: Textual's Footer, rebuilt only when the keys it shows change.

Textual's Footer recomposes (a widget and a style pass per key) on every bindings update: each
focus change, and several times while the screen starts.  The shown keys of the main screen
rarely change, so most of those rebuilds redraw the same footer.
"""
from __future__ import annotations

from typing import Any

from textual.screen import Screen
from textual.widgets import Footer


class KeyFooter(Footer):
    _shown: Any = None

    def bindings_changed(self, screen: Screen) -> None:
        shown = tuple((b.key, b.description, enabled) for _, b, enabled, _ in screen.active_bindings.values()
                      if b.show)
        if shown == self._shown and self._bindings_ready:
            return
        if self.is_attached and screen is self.screen and screen.app.app_focus:
            self._shown = shown
        super().bindings_changed(screen)
