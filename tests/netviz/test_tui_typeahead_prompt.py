"""A key typed ahead is not the missing-input prompt's text.  ``c c`` typed fast: the first ``c`` stops on a
missing input (Detectron's ``im_info``, the mlp's ``X``) and the prompt opens; the second ``c``, delivered
after it opened (queued behind the move, or pressed 120 ms after the first while the stop came at once),
was typed into it.  A key pressed before the prompt opened, or too soon after for a person to have seen it
(prompt.UNSEEN_S), is dropped; keys pressed once it has been seen are its text."""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from textual import events

from netviz.app import NetvizApp
from netviz.screens.prompt import UNSEEN_S, PromptScreen
from netviz.session import Session
from tests.netviz.tui_nets import mlp, write
from tests.netviz.waiting import asynctest, ready, wait_for


def _key_at(at: float) -> events.Key:
    """A ``c`` key as the terminal driver stamps it when pressed at `at` (Textual's clock)."""
    key = events.Key("c", "c")
    key.time = at
    return key


@asynctest
async def test_a_key_typed_ahead_is_not_the_missing_input_prompt_s_text(tmp_path: Path) -> None:
    app = NetvizApp(Session.open(write(tmp_path, "mlp", mlp())))
    session, go = app.session, threading.Event()
    step = session.step

    def held(*args: Any, **kwargs: Any) -> Any:
        assert go.wait(30), "the test never let the move run"
        return step(*args, **kwargs)
    session.step = held  # type: ignore[method-assign]
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await pilot.press("c")  # NOTE: the move waits: the next key is pressed while it runs
        queued = events.Key("c", "c")  # pressed now; the terminal's queue hands it over after the stop
        go.set()
        await wait_for(pilot, lambda: isinstance(app.screen, PromptScreen), "the missing-input prompt")
        prompt = app.screen
        await pilot.pause()
        box = prompt.query_one("#prompt-input")
        before = box.value
        assert prompt.title_text.startswith("give input X")
        for key in (queued, _key_at(prompt.opened_at + UNSEEN_S / 3)):  # before it opened; unseen yet
            app.post_message(key)
            await pilot.pause()
            assert box.value == before, f"a key typed ahead became the prompt's text: {box.value!r}"
        await wait_for(pilot, prompt.takes_keys, "the prompt to have been seen")
        await pilot.press("4", ",", "8")  # NOTE: keys pressed once it has been seen are typed, as ever
        assert box.value == "4,8"


@asynctest
async def test_a_prompt_a_key_opens_keeps_what_is_typed_at_once(tmp_path: Path) -> None:
    """``:`` then ``x`` at machine speed: a prompt a key opens takes the keys typed right after it."""
    app = NetvizApp(Session.open(write(tmp_path, "mlp", mlp()), inputs=["X=4,8", "label=4:int32"]))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await pilot.press("n")
        await wait_for(pilot, lambda: app.main.idle, "the step")
        await pilot.press("colon", "X", ".", "s", "u", "m")
        await wait_for(pilot, lambda: isinstance(app.screen, PromptScreen), "the eval prompt")
        await pilot.pause()
        assert app.screen.query_one("#prompt-input").value == "X.sum"
