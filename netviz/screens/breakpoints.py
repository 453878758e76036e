"""BreakpointsScreen: the breakpoints with their conditions; Delete removes, Enter edits the condition."""
from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList

from netviz.errorlog import Guarded
from netviz.style import plain
from netviz.screens.prompt import ask_until_taken
from netviz.session import GlobalBreakpoint, Session


class BreakpointsScreen(Guarded, ModalScreen[None]):
    BINDINGS = [Binding("escape,q", "close", "Close", id="bps.close"),
                Binding("delete,x", "remove", "Remove", id="bps.remove")]

    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session = session

    def compose(self) -> ComposeResult:
        with Vertical(id="bps-box"):
            yield Label("breakpoints  (Enter: condition, x/Delete: remove, Esc: close; C on the main screen "
                        "adds a global one)")
            yield OptionList(id="bps-list")

    def on_mount(self) -> None:
        self.fill()

    def fill(self) -> None:
        box = self.query_one(OptionList)
        box.clear_options()
        self.refs: list[Any] = [*self.session.breakpoints, *self.session.global_breakpoints]
        dbg = self.session.debugger
        for bp in self.session.breakpoints.values():
            op = self.session.op(bp.op)
            live = dbg.breakpoints.get(bp.dbg_id) if dbg is not None and bp.dbg_id else None
            box.add_option(plain(f"{self.session.path_label(bp.op.path)} op #{bp.op.index} {op.type}"
                                 f"  if {bp.condition or 'always'}" + (f"  · hits {live.hits}" if live else "")))
        for g in self.session.global_breakpoints:
            box.add_option(plain(f"global: {self.session.describe_global(g)}"))
        if not self.refs:
            box.add_option("(none: press b on an op, or C for a condition/type/name)")
        box.highlighted = 0

    def action_remove(self) -> None:
        k = self.query_one(OptionList).highlighted
        if k is not None and k < len(self.refs):
            ref = self.refs[k]
            if isinstance(ref, GlobalBreakpoint):
                self.session.remove_global(ref)
            else:
                self.session.toggle_breakpoint(ref)
            self.fill()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option_index >= len(self.refs) or isinstance(self.refs[event.option_index], GlobalBreakpoint):
            return
        ref = self.refs[event.option_index]
        self._ask_condition(ref, self.session.breakpoints[ref].condition)

    def _ask_condition(self, ref: Any, value: str) -> None:
        """The condition prompt; a condition that does not parse asks again with its text, the cursor at
        the error, so a missing ``)`` is one key to fix (the prompt closed and the text was gone)."""
        def take(cond: str) -> None:
            self.session.toggle_breakpoint(ref, cond)
            self.fill()
        ask_until_taken(self, "break when (condition on blobs, e.g. `loss > 10`)", take, value=value)

    def action_close(self) -> None:
        self.dismiss(None)
