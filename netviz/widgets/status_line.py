"""StatusLine: program counter, where the cursor is, and which views are on."""
from __future__ import annotations

from rich.text import Text
from textual.widget import Widget


class StatusLine(Widget):
    """One line: ``pc: main › While op#7 iter 3 › op 2 │ cursor … │ SSA backward zoom``."""

    _shown: tuple = ()
    _text = Text()

    def render(self) -> Text:
        return self._text

    @property
    def content(self) -> Text:
        return self._text

    def show(self, pc: str, cursor: str, flags: list[str]) -> None:
        if (pc, cursor, flags) == self._shown:
            return  # a step asks twice
        self._shown = (pc, cursor, flags)
        self._set_text(Text.assemble(("pc ", "dim"), (pc, "bold"), ("  │  ", "dim"), cursor,
                                  ("  │  ", "dim"), (" ".join(flags), "italic")))

    def _set_text(self, text: Text) -> None:
        # NOTE: one line of fixed height: a repaint, not Static.update()'s re-layout of the screen
        self._text = text
        self.refresh()
