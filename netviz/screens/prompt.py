"""PromptScreen: ask one line (the loss blob, a value to inject, a path); Enter answers, Escape cancels."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label

from netviz.errorlog import Guarded
from netviz.style import plain


class PromptScreen(Guarded, ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="prompt.cancel")]

    def __init__(self, title: str, value: str = "", placeholder: str = "", hint: str = "") -> None:
        super().__init__()
        self.title_text, self.value, self.placeholder, self.hint = title, value, placeholder, hint

    def compose(self) -> ComposeResult:
        with Vertical(id="prompt-box"):
            yield Label(plain(self.title_text), id="prompt-title")
            yield Input(self.value, placeholder=self.placeholder, id="prompt-input")
            if self.hint:
                yield Label(plain(self.hint), id="prompt-hint")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)
