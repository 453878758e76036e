"""The verdict of a run diff (``A``) came titled "ONNX diff" (the two diffs share the list and the graph's
colours); each diff's notices now carry its own name."""
from __future__ import annotations

from pathlib import Path

from textual.widgets import Input

from netviz.app import NetvizApp
from netviz.screens.pick import PickScreen
from netviz.screens.prompt import PromptScreen
from netviz.session import Session
from tests.netviz.waiting import asynctest, ready, wait_for

MLP = Path(__file__).resolve().parents[2] / "examples" / "mlp"


@asynctest
async def test_a_run_diff_s_verdict_is_titled_run_diff(tmp_path: Path) -> None:
    app = NetvizApp(Session.open(MLP / "predict_net.pb", inputs=["data=16,8"]))
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        await ready(pilot)
        await pilot.press("A")
        await wait_for(pilot, lambda: isinstance(app.screen, PromptScreen), "the side B prompt")
        app.screen.query_one(Input).value = "fix"
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, PickScreen), "the run diff list", timeout=120)
        verdicts = [n for n in app._notifications if n.message.startswith("no culprit")]
        assert verdicts and all(n.title == "Run diff" for n in verdicts), [(n.title, n.message) for n in verdicts]
        assert not any(n.title == "ONNX diff" for n in app._notifications)
