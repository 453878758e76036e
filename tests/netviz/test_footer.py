"""The footer (one widget drawing the keys): whole keys in binding order, the palette key at the
right end; a click on a key presses it, hovering shows the key's title; it follows a resize."""
from __future__ import annotations

from netviz.actions import ACTIONS, FOOTER_FIRST, FOOTER_THEN
from netviz.app import NetvizApp
from netviz.session import Session
from netviz.widgets.footer import KeyFooter
from tests.netviz.tui_nets import mlp, write
from tests.netviz.waiting import asynctest, ready, screen_text, wait_for


def _app(tmp_path) -> NetvizApp:
    return NetvizApp(Session.open(write(tmp_path, "mlp", mlp()), inputs=["X=4,8"]))


@asynctest
async def test_keys_in_order_whole_and_the_palette_at_the_right_end(tmp_path):
    app = _app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        footer = app.main.query_one(KeyFooter)
        order = [ACTIONS[aid][0].split(",")[0] for aid in FOOTER_FIRST + FOOTER_THEN]
        narrow = footer.shown_keys()
        assert narrow[-1] == "^p" and screen_text(app)[-1].rstrip().endswith("▏^p palette")
        keys = [{"question_mark": "?", "slash": "/", "colon": ":"}.get(k, k) for k in order]
        assert narrow[:-1] == keys[:len(narrow) - 1] and 6 <= len(narrow) - 1 < len(keys)
        await pilot.resize_terminal(160, 48)
        await wait_for(pilot, lambda: len(footer.shown_keys()) > len(narrow), "more keys at 160 columns")
        wide = footer.shown_keys()
        assert wide[:-1] == keys[:len(wide) - 1]
        line = screen_text(app)[-1]
        for aid in FOOTER_FIRST:
            assert f" {ACTIONS[aid][3]} " in line, (aid, line)


@asynctest
async def test_a_click_on_a_key_presses_it_and_hovering_shows_its_title(tmp_path):
    app = _app(tmp_path)
    async with app.run_test(size=(120, 30)) as pilot:
        await ready(pilot)
        footer = app.main.query_one(KeyFooter)
        line = screen_text(app)[-1]
        x = line.index(" n Step ") + 1
        await pilot.hover(KeyFooter, offset=(x, 0))
        assert footer.tooltip == ACTIONS["step.over"][2]
        await pilot.click(KeyFooter, offset=(x, 0))
        await wait_for(pilot, lambda: app.session.pc is not None and app.session.pc.index == 1 and app.main.idle,
                       "the step the click pressed")
        await pilot.click(KeyFooter, offset=(line.index(" ? Help ") + 1, 0))
        await wait_for(pilot, lambda: type(app.screen).__name__ == "HelpScreen", "the help screen")
