"""PromptScreen: ask one line (the loss blob, a value to inject, a path); Enter answers, Escape cancels."""
from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.css.query import NoMatches
from textual.screen import ModalScreen
from textual.widgets import Input, Label

from netviz.errorlog import Guarded
from netviz.style import plain


class TypeAhead:
    """Keys typed right after the key that opened a one-line screen are kept (issue 42 item 17).

    A terminal hands ``/relu`` typed fast to the app in one read: ``r e l u`` are queued at the
    screen below (its focused widget) before ``/`` opens this one, or reach this one before its
    :class:`Input` is mounted and focused; either way they were dropped (4 of 4 tries).  They come
    to :meth:`type_ahead` instead (the main screen hands over its own): into the input if it is
    there, else held until :meth:`take_type_ahead` (the screen's mount) puts them in."""

    _typed = ""

    def on_key(self, event: events.Key) -> None:
        if event.is_printable and event.character:
            event.stop()
            event.prevent_default()
            self.type_ahead(event.character)

    def type_ahead(self, text: str) -> None:
        """`text` typed before the input had the focus (here, or queued at the screen below this one)."""
        try:
            box = self.query_one(Input)  # type: ignore[attr-defined]
        except NoMatches:
            self._typed += text
            return
        self.take_type_ahead(box)
        box.focus()
        if box.selection.is_empty:  # NOTE: as Input types a key: a selection (the prefilled value) is replaced
            box.insert_text_at_cursor(text)
        else:
            box.replace(text, *box.selection)

    def take_type_ahead(self, box: Input) -> None:
        """Put the keys held so far into `box`, in place of a prefilled value (typed into the focused
        input they would have replaced it: it opens selected)."""
        typed, self._typed = self._typed, ""
        if typed:
            box.value = typed
            box.cursor_position = len(typed)


class PromptScreen(TypeAhead, Guarded, ModalScreen[str | None]):
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

    def on_mount(self) -> None:
        self.take_type_ahead(self.query_one(Input))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.empty_enter = not event.value.strip()  # NOTE: told apart from Esc by callers that say why
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)
