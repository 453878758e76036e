"""HelpScreen: every key of the action table and of the graph canvas."""
from __future__ import annotations

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from netviz.actions import ACTIONS, key_display

CANVAS_KEYS = [("←↓↑→ / h j k l", "pan the graph"), ("Tab", "next pane"), ("Enter", "expand/collapse in the op tree"),
               ("mouse click", "select an op or blob in the graph"), ("Ctrl+P", "command palette")]


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark,f1", "close", "Close", id="help.close")]

    def compose(self) -> ComposeResult:
        table = Table(title="netviz keys", box=None, padding=(0, 2), title_style="bold")
        table.add_column("key", style="bold #F4B400")
        table.add_column("action")
        for keys, _, title, _ in ACTIONS.values():
            table.add_row(key_display(keys), title)
        for keys, title in CANVAS_KEYS:
            table.add_row(keys, title)
        with VerticalScroll(id="help-box"):
            yield Static(table)

    def action_close(self) -> None:
        self.dismiss(None)
