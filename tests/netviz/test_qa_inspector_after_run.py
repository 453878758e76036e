"""QA: when a run ends past the selected op, the op inspector shows that op's run (not its state before)."""
from __future__ import annotations

from pathlib import Path

from netviz.app import NetvizApp
from netviz.session import OpRef, Session
from netviz.widgets.op_inspector import OpInspector
from tests.netviz.waiting import asynctest, continue_to_end, ready, text_of, wait_for

MLP = Path(__file__).resolve().parents[2] / "examples" / "mlp" / "predict_net.pb"


@asynctest
async def test_inspector_of_the_last_stop_shows_its_run_after_continue_to_the_end():
    app = NetvizApp(Session.open(MLP))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        for _ in range(3):  # stops before op #3 SoftmaxWithLoss: the cursor follows the pc there
            await pilot.press("n")
            await wait_for(pilot, lambda: app.main.idle and app.session.debugger is not None, "a step")
        inspector = app.main.query_one(OpInspector)
        await wait_for(pilot, lambda: "op #3 " in text_of(inspector), "op #3 in the inspector")
        assert "\nran " not in text_of(inspector)
        await continue_to_end(pilot, app)
        assert app.main.selected == OpRef((), 3) and app.session.executed(OpRef((), 3))
        await wait_for(pilot, lambda: "ran " in text_of(inspector), "op #3's run in the inspector", timeout=5)
