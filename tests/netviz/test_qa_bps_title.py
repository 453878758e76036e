"""QA: the breakpoints list's key line wraps inside its dialog instead of being cut at the edge
(at 160x48 it ended 'C on the main screen a')."""
from __future__ import annotations

from pathlib import Path

import pytest

from netviz.app import NetvizApp
from netviz.screens.breakpoints import BreakpointsScreen
from netviz.session import Session
from tests.netviz.waiting import asynctest, ready, screen_text, wait_for

MLP = Path(__file__).resolve().parents[2] / "examples" / "mlp" / "predict_net.pb"


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
@asynctest
async def test_breakpoints_dialog_shows_all_of_its_keys(size):
    app = NetvizApp(Session.open(MLP))
    async with app.run_test(size=size) as pilot:
        await ready(pilot)
        await pilot.press("B")
        await wait_for(pilot, lambda: isinstance(app.screen, BreakpointsScreen), "the breakpoints list")
        await wait_for(pilot, lambda: "breakpoints" in " ".join(screen_text(app)), "the list drawn")
        await pilot.pause()
        box = app.screen.query_one("#bps-box > Label").region  # its own cells, not the border or panes
        shown = " ".join(" ".join(line[box.x:box.right] for line in screen_text(app)[box.y:box.bottom]).split())
        assert "C on the main screen adds a global one)" in shown, shown
