"""BreakpointsScreen: the breakpoints with their conditions; Delete removes, Enter edits the condition."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList

from engine.errors import NetvizError
from netviz.screens.prompt import PromptScreen
from netviz.session import Session


class BreakpointsScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q", "close", "Close", id="bps.close"),
                Binding("delete,x", "remove", "Remove", id="bps.remove")]

    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session = session

    def compose(self) -> ComposeResult:
        with Vertical(id="bps-box"):
            yield Label("breakpoints  (Enter: condition, x/Delete: remove, Esc: close)")
            yield OptionList(id="bps-list")

    def on_mount(self) -> None:
        self.fill()

    def fill(self) -> None:
        box = self.query_one(OptionList)
        box.clear_options()
        self.refs = list(self.session.breakpoints)
        for bp in self.session.breakpoints.values():
            op = self.session.op(bp.op)
            box.add_option(f"{self.session.path_label(bp.op.path)} op #{bp.op.index} {op.type}"
                           f"  if {bp.condition or 'always'}")
        if not self.refs:
            box.add_option("(none: press b on an op)")
        box.highlighted = 0

    def action_remove(self) -> None:
        k = self.query_one(OptionList).highlighted
        if k is not None and k < len(self.refs):
            self.session.toggle_breakpoint(self.refs[k])
            self.fill()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option_index >= len(self.refs):
            return
        ref = self.refs[event.option_index]

        def done(cond: str | None) -> None:
            if cond is None:
                return
            try:
                self.session.toggle_breakpoint(ref, cond)
            except NetvizError as e:
                self.notify(str(e), title="Bad condition", severity="error")
            self.fill()
        self.app.push_screen(PromptScreen("break when (condition on blobs, e.g. `loss > 10`)",
                                          self.session.breakpoints[ref].condition), done)

    def action_close(self) -> None:
        self.dismiss(None)
