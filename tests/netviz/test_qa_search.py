"""The search box says when nothing matches and when its list is cut (QA pass over the user's path):
an empty list read as "still searching", and 200 rows of 1000 as all of them."""
from __future__ import annotations

from pathlib import Path

from netviz.app import NetvizApp
from netviz.session import OpRef, Session
from tests.netviz.tui_nets import chain, write
from tests.netviz.waiting import asynctest, ready, screen_text, wait_for


def _shows(app: NetvizApp, text: str) -> bool:
    return any(text in line for line in screen_text(app))


@asynctest
async def test_search_names_no_match_and_a_cut_list(tmp_path: Path) -> None:
    from netviz.screens.search import SearchScreen

    app = NetvizApp(Session.open(write(tmp_path, "chain", chain(1000)), inputs=["x0=2,3"]))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await pilot.press("slash")
        await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen), "the search screen")
        box = app.screen.query_one("#search-input")
        box.value = "[red]zzz"
        await wait_for(pilot, lambda: _shows(app, "no op or blob matches '[red]zzz'"), "the no-match line, as typed")
        await pilot.press("enter")  # the note is no hit: Enter closes the search, jumping nowhere
        await wait_for(pilot, lambda: app.screen is app.main, "the search closed")
        await pilot.press("slash")
        await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen), "the search screen again")
        box = app.screen.query_one("#search-input")
        box.value = "relu"  # 500 Relu ops
        await wait_for(pilot, lambda: app.screen.hits and app.screen.hits[0][2] == OpRef((), 1), "Relu op #1 first")
        assert "the first 200 of 500 matches" in str(app.screen.hits[-1][1])
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.screen is app.main and app.main.selected == OpRef((), 1), "the jump to op #1")
