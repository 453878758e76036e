"""KeyFooter: the screen's keys in one line, drawn by one widget; only the keys that fit whole, in order.

Textual's Footer lays every key out in one row and cuts the last visible one mid-word (``c Cont``)
at 80 columns.  Here a key either shows whole or not at all: keys are kept in their binding order
(:data:`netviz.actions.FOOTER_FIRST` first) up to the first that does not fit, the rest are left
out (``?`` lists every key).  The palette key sits at the right end, as in Textual's Footer.

It draws what Textual's Footer draws (the same component styles: ``footer-key--key`` and
``footer-key--description``, the palette key's ``▏`` border), but as one widget: Textual's is a
container of a ``FooterKey`` widget per key (~22 here), each with its reactives, data binding and
CSS, composed again on every bindings update; they were two thirds of the main screen's widgets
and a good part of its start.  A click on a key presses it; hovering one highlights it and shows
its tooltip.
"""
from __future__ import annotations

from typing import NamedTuple

from rich.style import Style
from rich.segment import Segment
from textual import events
from textual.screen import Screen
from textual.strip import Strip
from textual.widget import Widget


class Key(NamedTuple):
    key: str          # the key pressed on a click (the binding's first key)
    display: str      # how it is shown (``?``, ``^p``)
    description: str
    enabled: bool
    tooltip: str

    def width(self, palette: bool = False) -> int:
        """Cells it takes: `` k Label `` (a palette key: ``▏^p palette `` ).

        Textual's FooterKey pads the key by one each side and the label by one on the right; the
        palette key is compact (``^p`` unpadded, one before its label) with a border and one after."""
        if palette:
            return 1 + len(self.display) + (1 + len(self.description) if self.description else 0) + 1
        return len(self.display) + 2 + (len(self.description) + 1 if self.description else 0)


class KeyFooter(Widget, can_focus=False):
    ALLOW_SELECT = False
    COMPONENT_CLASSES = {"footer-key--key", "footer-key--description", "footer-key--hover",
                         "footer-key--border"}
    DEFAULT_CSS = """
    KeyFooter {
        color: $footer-foreground;
        background: $footer-background;
        dock: bottom;
        height: 1;
        text-wrap: nowrap;
        .footer-key--key { color: $footer-key-foreground; background: $footer-key-background; text-style: bold; }
        .footer-key--description { color: $footer-description-foreground; background: $footer-description-background; }
        .footer-key--hover { color: $footer-key-foreground; background: $block-hover-background; }
        .footer-key--border { color: $foreground 20%; }
    }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._keys: tuple[Key, ...] = ()
        self._palette: Key | None = None
        self._hover: int | None = None  # index into the shown keys, len(shown) for the palette key

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self.bindings_changed)
        self.bindings_changed(self.screen)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def bindings_changed(self, screen: Screen) -> None:
        """Read the screen's keys (one per action, its first key, as Textual's Footer does);
        repaint only when they changed (each focus change signals, most change nothing here)."""
        if screen is not self.screen:
            return
        app, active = self.app, screen.active_bindings
        keys: dict[str, Key] = {}
        for _, binding, enabled, tooltip in active.values():
            if binding.show and binding.action not in keys:
                keys[binding.action] = Key(binding.key, app.get_key_display(binding), binding.description,
                                           enabled, tooltip or binding.tooltip)
        palette = None
        if app.ENABLE_COMMAND_PALETTE and app.COMMAND_PALETTE_BINDING in active:
            _, binding, enabled, tooltip = active[app.COMMAND_PALETTE_BINDING]
            palette = Key(binding.key, app.get_key_display(binding), binding.description, enabled,
                          binding.tooltip or binding.description)
        shown = tuple(k for k in keys.values() if k != palette)
        if (shown, palette) != (self._keys, self._palette):
            self._keys, self._palette = shown, palette
            self.refresh()

    def _fitting(self) -> tuple[Key, ...]:
        """The keys that fit whole beside the palette key, in order, up to the first that does not."""
        room = self.size.width - (self._palette.width(palette=True) if self._palette else 0)
        used, n = 0, 0
        for key in self._keys:
            used += key.width()
            if used > room:
                break
            n += 1
        return self._keys[:n]

    def render_line(self, y: int) -> Strip:
        """The one line: segments of the same text and styles FooterKey widgets drew, gaps uncoloured."""
        width = self.size.width
        blank = Style(bgcolor=self.rich_style.bgcolor)  # NOTE: Textual's gaps and paddings carry no colour
        if y:
            return Strip.blank(width, blank)
        key_style = self.get_component_rich_style("footer-key--key")
        desc_style = self.get_component_rich_style("footer-key--description")
        hover = self.get_component_rich_style("footer-key--hover")
        keys = self._fitting()
        segments: list[Segment] = []

        def add(k: int, key: Key, text: str, description: str) -> None:
            ks, ds = key_style, desc_style
            if k == self._hover:
                ks, ds = hover + Style(color=ks.color, bold=ks.bold), hover + Style(color=ds.color)
            if not key.enabled:
                ks, ds = ks + Style(dim=True), ds + Style(dim=True)
            segments.append(Segment(text, ks))
            if key.description:
                segments.append(Segment(description, ds))

        for k, key in enumerate(keys):
            add(k, key, f" {key.display} ", f"{key.description} ")
        used = sum(key.width() for key in keys)
        if self._palette is not None:
            key = self._palette
            gap = width - used - key.width(palette=True)
            if gap > 0:
                segments.append(Segment(" " * gap, blank))
            segments.append(Segment("▏", self.get_component_rich_style("footer-key--border")))
            add(len(keys), key, key.display, f" {key.description}")
            segments.append(Segment(" ", hover if self._hover == len(keys) else blank))
        elif width > used:
            segments.append(Segment(" " * (width - used), blank))
        return Strip(segments).crop_extend(0, width, blank)

    def _key_at(self, x: int) -> tuple[int, Key] | None:
        keys = self._fitting()
        at = 0
        for k, key in enumerate(keys):
            at += key.width()
            if x < at:
                return k, key
        if self._palette is not None and x >= self.size.width - self._palette.width(palette=True):
            return len(keys), self._palette
        return None

    def on_mouse_move(self, event: events.MouseMove) -> None:
        hit = self._key_at(event.x)
        index = None if hit is None else hit[0]
        if index != self._hover:
            self._hover = index
            self.tooltip = None if hit is None else (hit[1].tooltip or None)
            self.refresh()

    def on_leave(self) -> None:
        if self._hover is not None:
            self._hover = None
            self.tooltip = None
            self.refresh()

    def on_mouse_down(self, event: events.MouseDown) -> None:
        hit = self._key_at(event.x)
        if hit is None:
            return
        if hit[1].enabled:
            self.app.simulate_key(hit[1].key)
        else:
            self.app.bell()

    def on_resize(self) -> None:
        self.refresh()

    def shown_keys(self) -> list[str]:
        """The keys the footer shows now (``q``, ``?`` …), palette key last."""
        return [k.display for k in self._fitting()] + ([self._palette.display] if self._palette else [])
