"""1,000 random keys with random resizes: nothing may raise, the app keeps running."""
from __future__ import annotations

import random

from netviz.actions import ACTIONS
from netviz.app import NetvizApp
from netviz.session import Session
from tests.netviz.test_abuse import fuzz_events
from tests.netviz.tui_nets import while_net, write
from tests.netviz.waiting import asynctest, ready

ACTION_KEYS = [k for keys, _, _, _ in ACTIONS.values() for k in keys.split(",") if k != "q"]
OTHER_KEYS = ["up", "down", "left", "right", "h", "j", "k", "l", "tab", "shift+tab", "enter", "escape", "space",
              "home", "end", "pageup", "pagedown", "ctrl+p", "a", "x", "1", "0", "comma", "colon", "delete"]


@asynctest
async def test_thousand_random_keys_and_resizes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # an export prompt accepted at random writes here
    rng = random.Random(1234)
    app = NetvizApp(Session.open(write(tmp_path, "loop", while_net()), inputs=["x=3"]))
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(pilot)
        for i in range(fuzz_events(1000)):  # 1,000 under `make fuzz`
            if i % 50 == 0:
                await pilot.resize_terminal(rng.randint(40, 200), rng.randint(10, 60))
            await pilot.press(rng.choice(ACTION_KEYS if rng.random() < 0.6 else OTHER_KEYS))
        await pilot.pause()
        assert app.is_running
        await pilot.press("escape", "escape", "escape")
        await pilot.pause()
    assert app.return_code in (None, 0)
