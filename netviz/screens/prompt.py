"""PromptScreen: ask one line (the loss blob, a value to inject, a path); Enter answers, Escape cancels.

:func:`ask_until_taken` asks for a line its taker may refuse (a condition that does not parse, a blob the
net lacks): the error is shown and the prompt opens again on the typed text, the cursor where the error
points (:func:`error_cursor`), so a missing ``)`` is one key to fix, not the line to type again.
"""
from __future__ import annotations

import ast
import re
from collections.abc import Callable
from typing import Any

from textual import _time, events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.css.query import NoMatches
from textual.screen import ModalScreen
from textual.widgets import Input, Label

from engine.errors import NetvizError
from netviz.errorlog import Guarded
from netviz.style import plain


#: how long after a screen the app opened by itself (not a key) a key is still one typed before it was seen:
#: a person answers a prompt they did not ask for no sooner than that (a visual reaction takes ~0.2 s)
UNSEEN_S = 0.3


class TypeAhead:
    """Keys typed right after the key that opened a one-line screen are kept (issue 42 item 17).

    A terminal hands ``/relu`` typed fast to the app in one read: ``r e l u`` are queued at the
    screen below (its focused widget) before ``/`` opens this one, or reach this one before its
    :class:`Input` is mounted and focused; either way they were dropped (4 of 4 tries).  They come
    to :meth:`type_ahead` instead (the main screen hands over its own): into the input if it is
    there, else held until :meth:`take_type_ahead` (the screen's mount) puts them in."""

    _typed = ""
    #: whether keys pressed before the screen opened are its text: True for a screen a key opens (``/``),
    #: False for one the app opens by itself (a stop's missing-input prompt: a second ``c`` typed ahead
    #: was meant for the main screen, and became the input's text)
    keys_before_open = True
    opened_at = 0.0  # Textual's clock (:attr:`textual.message.Message.time`) when the screen was made

    def typed_before_open(self, at: float) -> bool:
        """A key pressed at `at` (its event's time) is not the text of a screen the app opened by itself:
        it came before the screen opened, or too soon after for a person to have seen it
        (:data:`UNSEEN_S`: ``c c`` at 120 ms, the first ``c`` stopping on the missing input at once)."""
        return not self.keys_before_open and at < self.opened_at + UNSEEN_S

    def takes_keys(self) -> bool:
        """Whether a key pressed now is this screen's text (:meth:`typed_before_open`)."""
        return not self.typed_before_open(_time.get_time())

    def on_key(self, event: events.Key) -> None:
        if event.is_printable and event.character:
            event.stop()
            event.prevent_default()
            self.type_ahead(event.character, event.time)

    def type_ahead(self, text: str, at: float | None = None) -> None:
        """`text` typed before the input had the focus (here, or queued at the screen below this one), at
        `at` (None: now); dropped when it came before a screen the app opened by itself."""
        if at is not None and self.typed_before_open(at):
            return
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


class _LineInput(Input):
    """The prompt's input: a key pressed before its screen opened (queued behind a move) is not typed."""

    async def _on_key(self, event: events.Key) -> None:
        if event.is_printable and isinstance(self.screen, TypeAhead) and self.screen.typed_before_open(event.time):
            event.stop()
            event.prevent_default()
            return
        await super()._on_key(event)


class PromptScreen(TypeAhead, Guarded, ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="prompt.cancel")]

    def __init__(self, title: str, value: str = "", placeholder: str = "", hint: str = "",
                 cursor: int | None = None, keys_before_open: bool = True) -> None:
        """`cursor`: where the cursor starts in `value`, nothing selected (a prompt reopened on its own
        text, at the column an error names: the text is fixed there, not typed again); None: the value
        opens selected, so typing replaces it.  `keys_before_open`: see :class:`TypeAhead` (False: the app
        opens this prompt by itself, not a key)."""
        super().__init__()
        self.title_text, self.value, self.placeholder, self.hint = title, value, placeholder, hint
        self.cursor = None if cursor is None else max(0, min(cursor, len(value)))
        self.keys_before_open, self.opened_at = keys_before_open, _time.get_time()

    def compose(self) -> ComposeResult:
        with Vertical(id="prompt-box"):
            yield Label(plain(self.title_text), id="prompt-title")
            yield _LineInput(self.value, placeholder=self.placeholder, id="prompt-input",
                             select_on_focus=self.cursor is None)
            if self.hint:
                yield Label(plain(self.hint), id="prompt-hint")

    def on_mount(self) -> None:
        box = self.query_one(Input)
        if self.cursor is not None:
            box.cursor_position = self.cursor
        self.take_type_ahead(box)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.empty_enter = not event.value.strip()  # NOTE: told apart from Esc by callers that say why
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)


#: ``condition 'loss >': expected a number or a blob at column 7 (e.g. …)`` (engine.debugger.conditions)
_AT_COLUMN = re.compile(r"""condition ('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"): .* at column (\d+)""")
_QUOTED = re.compile(r"'([^']+)'")


def error_cursor(text: str, error: BaseException) -> int:
    """Where in the typed `text` `error` points: the column a condition's parse error names (the condition
    may be part of the text: ``type Relu if loss >``), else the first name it quotes that the text holds
    (``no blob 'los'``); else the end of the text."""
    message = str(error)
    m = _AT_COLUMN.search(message)
    if m:
        cond, column = ast.literal_eval(m.group(1)), int(m.group(2)) - 1
        start = text.find(cond)
        return (start if start >= 0 else 0) + column
    for name in _QUOTED.findall(message):
        k = text.find(name)
        if 0 <= k and name != text.strip():
            return k
    return len(text)


def ask_until_taken(screen: Any, title: str, take: Callable[[str], Any], hint: str = "", value: str = "",
                    cursor: int | None = None) -> None:
    """Ask `screen`'s user for one line and give it to `take`; a :class:`NetvizError` from `take` is shown
    (titled in words) and the prompt opens again with the same text, the cursor at :func:`error_cursor`.
    Escape or an empty answer ends it."""
    from netviz.screens.guarding import error_title  # noqa: PLC0415 - it imports the session

    def done(answer: str | None) -> None:
        if not answer:
            return
        try:
            take(answer)
        except NetvizError as e:
            screen.notify(str(e), title=error_title(e), severity="error")
            ask_until_taken(screen, title, take, hint, answer, error_cursor(answer, e))
    screen.app.push_screen(PromptScreen(title, value, hint=hint, cursor=cursor), done)
