"""A breakpoint condition that does not parse asks again with its text (QA pass over the user's path):
the prompt closed and the typed text was gone, so one missing ``)`` meant typing it all again."""
from __future__ import annotations

from pathlib import Path

from netviz.app import NetvizApp
from netviz.screens.prompt import PromptScreen
from netviz.session import OpRef, Session
from tests.netviz.tui_nets import mlp, write
from tests.netviz.waiting import asynctest, notified, ready, wait_for


@asynctest
async def test_a_bad_condition_is_asked_again_with_its_text(tmp_path: Path) -> None:
    from netviz.screens.breakpoints import BreakpointsScreen

    app = NetvizApp(Session.open(write(tmp_path, "mlp", mlp()), inputs=["X=2,3"]))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        app.main.select(OpRef((), 1))
        await pilot.press("b", "B")
        await wait_for(pilot, lambda: isinstance(app.screen, BreakpointsScreen), "the breakpoints list")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, PromptScreen), "the condition prompt")
        await pilot.press(*"max_abs(h1", "enter")
        await wait_for(pilot, lambda: notified(app, "missing ')'"), "the bad-condition notice")
        await wait_for(pilot, lambda: isinstance(app.screen, PromptScreen)
                       and app.screen.query_one("#prompt-input").value == "max_abs(h1", "the prompt again, text kept")
        app.screen.query_one("#prompt-input").value += ") > 1e9"
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, BreakpointsScreen), "back to the list")
        assert app.session.breakpoints[OpRef((), 1)].condition == "max_abs(h1) > 1e9"
