"""StatusLine: program counter, where the cursor is, and which views are on."""
from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


class StatusLine(Static):
    """One line: ``pc: main › While op#7 iter 3 › op 2 │ cursor … │ SSA backward zoom``."""

    def show(self, pc: str, cursor: str, flags: list[str]) -> None:
        self.update(Text.assemble(("pc ", "dim"), (pc, "bold"), ("  │  ", "dim"), cursor,
                                  ("  │  ", "dim"), (" ".join(flags), "italic")))
