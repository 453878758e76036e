"""The help screen shows every key, grouped, and the footer leads with the keys a newcomer needs."""
from __future__ import annotations

import pytest

from netviz.actions import ACTIONS, FOOTER_FIRST, bindings, key_display
from netviz.app import NetvizApp
from netviz.screens.help import HEADINGS, HelpScreen
from netviz.session import Session
from tests.netviz.tui_nets import mlp, write
from tests.netviz.waiting import asynctest, ready, text_of, wait_for


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
@asynctest
async def test_help_shows_every_key_in_its_group(tmp_path, size):
    app = NetvizApp(Session.open(write(tmp_path, "mlp", mlp())))
    async with app.run_test(size=size) as pilot:
        await ready(pilot)
        await pilot.press("f1")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), "help")
        await pilot.pause()
        box = app.screen.query_one("#help-text")
        assert box.size.width > 40 and box.size.height > 20  # not an empty box
        text = text_of(box)
        lines = [line.strip() for line in text.splitlines()]
        assert [h.upper() for h in HEADINGS] == [line for line in lines if line.isupper() and line.isalpha()]
        for keys, _, title, _ in ACTIONS.values():
            assert any(line.startswith(key_display(keys)) and line.endswith(title) for line in lines), title
        move, bps = lines.index("MOVE"), lines.index("BREAKPOINTS")
        assert any(line.startswith("x") and "NaN" in line for line in lines[move:bps])
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is app.main, "help closed")


def test_footer_order_starts_with_the_essential_keys():
    shown = [b.id for b in bindings() if b.show]
    assert tuple(shown[: len(FOOTER_FIRST)]) == FOOTER_FIRST
