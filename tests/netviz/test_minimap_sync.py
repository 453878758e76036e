"""The minimap shows a move's marks in the frame that shows its stop (the main screen syncs it as it
sets the canvas marks), not at its next 0.2 s poll; while a move runs the poll does nothing."""
from __future__ import annotations

from pathlib import Path

from tests.netviz.waiting import asynctest, continue_to_end, ready

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@asynctest
async def test_the_minimap_marks_come_with_the_stop_not_with_its_poll(monkeypatch) -> None:
    from netviz.app import NetvizApp
    from netviz.session import Session
    from netviz.widgets.minimap import Minimap

    polls: list[object] = []
    monkeypatch.setattr(Minimap, "_poll", lambda self: polls.append(self.main.busy))  # the timer does nothing
    app = NetvizApp(Session.open(EXAMPLES / "mlp" / "predict_net.pb"))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        minimap = app.main.query_one(Minimap)
        await continue_to_end(pilot, app)
        await pilot.pause()
        assert minimap._shown == minimap.state()  # drawn: what it shows is the end's state
        assert minimap._shown[6] == len(app.main.canvas.executed) > 0  # ops that ran are marked


def test_the_poll_waits_while_a_move_runs() -> None:
    from netviz.widgets.minimap import Minimap

    synced: list[int] = []

    class Main:
        busy = "continue_"

    mm = Minimap.__new__(Minimap)
    mm.main = Main()
    mm.sync = lambda: synced.append(1)  # type: ignore[method-assign]
    mm._poll()
    assert not synced
    Main.busy = None
    mm._poll()
    assert synced == [1]
