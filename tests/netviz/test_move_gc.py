"""While a move runs, the collector's young generation waits (its threshold raised) and its
collection comes once the frame showing the stop is drawn; afterwards the threshold is Python's
again, also when keys queue moves behind each other."""
from __future__ import annotations

import gc
from pathlib import Path

from tests.netviz.waiting import asynctest, continue_to_end, ready, wait_for

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@asynctest
async def test_young_collections_wait_for_the_stop_and_the_threshold_comes_back() -> None:
    from netviz.app import NetvizApp
    from netviz.screens import main as main_screen
    from netviz.session import Session

    default = gc.get_threshold()
    app = NetvizApp(Session.open(EXAMPLES / "mlp" / "predict_net.pb"))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("n")  # makes the debugger
        await wait_for(pilot, lambda: app.main.idle and app.session.debugger is not None, "the first step")
        during: list[tuple[int, int, int]] = []
        app.session.debugger.listeners.append(lambda event: during.append(gc.get_threshold()))
        await pilot.press("r")
        await wait_for(pilot, lambda: app.main.idle, "the restart")
        for _ in range(3):  # NOTE: queued: one worker runs them in turn
            await pilot.press("n")
        await continue_to_end(pilot, app)
        await wait_for(pilot, lambda: gc.get_threshold() == default, "the collector's threshold back", timeout=5)
        assert during and all(t[0] == main_screen.MOVE_GC_YOUNG and t[1:] == default[1:] for t in during)
    assert gc.get_threshold() == default
