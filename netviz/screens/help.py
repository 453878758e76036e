"""HelpScreen: every key, grouped (move, breakpoints, views, inspect, export), scrollable.

The rows come from :data:`netviz.actions.ACTIONS` (the same table as the footer and the
palette), plus the keys of the graph canvas, the panes and the modal screens.
"""
from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from netviz.actions import ACTIONS, group_of, key_display
from netviz.errorlog import Guarded

HEADINGS = ("move", "breakpoints", "views", "inspect", "export", "app")
OTHER_KEYS = {
    "views": [("←↓↑→ / h j k l", "pan the graph when it has focus (elsewhere h/l: pane, j/k: cursor)"), ("mouse click", "select an op or blob in the graph")],
    "app": [("Tab / Shift+Tab", "next / previous pane"), ("Enter", "expand/collapse in the op tree; "
                                                                  "choose in a list"),
            ("Ctrl+P", "command palette: every action by name"), ("Esc", "close a dialog")],
}


def help_table() -> Table:
    """Keys and what they do, one titled block per group."""
    table = Table(box=None, padding=(0, 2), show_header=False)
    table.add_column("key", style="bold #F4B400", no_wrap=True)
    table.add_column("action")
    rows: dict[str, list[tuple[str, str]]] = {h: [] for h in HEADINGS}
    for aid, (keys, _, title, _) in ACTIONS.items():
        rows[group_of(aid)].append((key_display(keys), title))
    for heading, extra in OTHER_KEYS.items():
        rows[heading].extend(extra)
    for k, heading in enumerate(HEADINGS):
        if k:
            table.add_row("", "")
        table.add_row(Text(heading.upper(), "bold underline"), "")
        for keys, title in rows[heading]:
            table.add_row(keys, title)
    return table


class HelpScreen(Guarded, ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark,f1", "close", "Close", id="help.close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(Text("netviz keys  (↑↓ / PgUp PgDn scroll · Esc closes)", style="bold"), id="help-title")
            yield Static(help_table(), id="help-text")

    def on_mount(self) -> None:
        self.query_one("#help-box").focus()

    def action_close(self) -> None:
        self.dismiss(None)
