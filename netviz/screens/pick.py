"""PickScreen: a titled list to choose one row from — the NaN/Inf alerts, the device diff.

Enter answers the chosen row's value (the op to jump to), Escape closes without one.  The
screen opens on `highlight` (the first alert, the first blob over the threshold).
"""
from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList

from netviz.errorlog import Guarded
from netviz.style import plain


class PickScreen(Guarded, ModalScreen[Any]):
    BINDINGS = [Binding("escape,q", "close", "Close", id="pick.close")]

    def __init__(self, title: str, rows: list[str], values: list[Any], highlight: int = 0,
                 empty: str = "(nothing)") -> None:
        super().__init__()
        self.title_text, self.rows, self.values, self.start, self.empty = title, rows, values, highlight, empty

    def compose(self) -> ComposeResult:
        with Vertical(id="pick-box"):
            yield Label(plain(self.title_text), id="pick-title")
            yield OptionList(*(plain(r) for r in self.rows or [self.empty]), id="pick-list")

    def on_mount(self) -> None:
        box = self.query_one(OptionList)
        box.highlighted = min(self.start, max(len(self.rows) - 1, 0))
        box.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option_index < len(self.values):
            self.dismiss(self.values[event.option_index])

    def action_close(self) -> None:
        self.dismiss(None)
