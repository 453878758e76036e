"""KeyFooter: Textual's Footer showing only the keys that fit whole, in order, rebuilt only when they change.

Textual's Footer lays every key out in one row and cuts the last visible one mid-word (``c Cont``)
at 80 columns.  Here a key either shows whole or not at all: keys are kept in their binding order
(:data:`netviz.actions.FOOTER_FIRST` first) up to the first that does not fit, the rest are hidden
(``?`` lists every key).

Textual's Footer also recomposes (a widget and a style pass per key) on every bindings update: each
focus change, and several times while the screen starts.  The shown keys of the main screen
rarely change, so most of those rebuilds redraw the same footer.
"""
from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from textual.screen import Screen
from textual.widgets import Footer
from textual.widgets._footer import FooterKey


def key_width(key: FooterKey) -> int:
    """Cells a footer key takes: its text (key and label with their padding), gutter and margin.

    The text's width is counted, not rendered: ``FooterKey.render`` resolves two component styles
    per key (0.1 s for the 20 keys of a start on a loaded machine, twice per start)."""
    text = cell_len(key.key_display)
    if key.description:
        pads = key.get_component_styles("footer-key--key").padding, \
            key.get_component_styles("footer-key--description").padding
        text += cell_len(key.description) + sum(p.left + p.right for p in pads)
    return text + key.styles.gutter.width + key.styles.margin.width


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

    async def recompose(self) -> None:
        await super().recompose()
        self.fit()

    def on_resize(self) -> None:
        self.fit()

    def fit(self) -> None:
        """Show the keys, in order, up to the first that would be cut; hide it and the rest."""
        keys = list(self.query_children(FooterKey))
        palette = [k for k in keys if k.has_class("-command-palette")]
        room = self.size.width - sum(key_width(k) for k in palette)
        used, fits = 0, True
        for key in keys:
            if key in palette:
                continue
            used += key_width(key)
            fits = fits and used <= room
            key.display = fits

    def shown_keys(self) -> list[str]:
        """The keys the footer shows now (``q``, ``?`` …), palette key last."""
        return [k.key_display for k in self.query_children(FooterKey) if k.display]
