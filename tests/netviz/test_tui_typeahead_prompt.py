"""A key pressed before the missing-input prompt opened is not its text: ``c c`` typed fast, the first
``c`` stops on a missing input (Detectron's ``im_info``, the mlp's ``X``) and the prompt opens; the second
``c``, delivered after it opened, was typed into it.  Keys pressed once it is open are its text."""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from textual import events

from netviz.app import NetvizApp
from netviz.screens.prompt import PromptScreen
from netviz.session import Session
from tests.netviz.tui_nets import mlp, write
from tests.netviz.waiting import asynctest, ready, wait_for


@asynctest
async def test_a_key_pressed_before_the_missing_input_prompt_opened_is_not_its_text(tmp_path: Path) -> None:
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
        second = events.Key("c", "c")  # pressed now; the terminal's queue hands it over after the stop
        go.set()
        await wait_for(pilot, lambda: isinstance(app.screen, PromptScreen), "the missing-input prompt")
        prompt = app.screen
        await pilot.pause()
        box = prompt.query_one("#prompt-input")
        before = box.value
        assert prompt.title_text.startswith("give input X")
        app.post_message(second)
        await pilot.pause()
        assert box.value == before, f"the key typed ahead became the prompt's text: {box.value!r}"
        await pilot.press("4", ",", "8")  # NOTE: keys pressed once it is open are typed, as ever
        assert box.value == "4,8"
