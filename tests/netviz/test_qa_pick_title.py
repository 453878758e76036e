"""QA: a pick list's title is shown whole (wrapped), never cut at the dialog's edge: the ONNX diff's
verdict ('none over the tolerance' / 'first over the tolerance: op #…') sits at its end."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from netviz.app import NetvizApp  # noqa: E402
from netviz.screens.pick import PickScreen  # noqa: E402
from netviz.session import Session  # noqa: E402
from tests.netviz.waiting import asynctest, ready, screen_text, wait_for  # noqa: E402

MLP = Path(__file__).resolve().parents[2] / "examples" / "mlp" / "predict_net.pb"


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
@asynctest
async def test_onnx_diff_header_keeps_its_verdict_and_enter_hint_on_screen(size):
    app = NetvizApp(Session.open(MLP))
    async with app.run_test(size=size) as pilot:
        await ready(pilot)
        await pilot.press("O")
        await wait_for(pilot, lambda: isinstance(app.screen, PickScreen), "the ONNX diff list", timeout=120)
        await wait_for(pilot, lambda: "ONNX Runtime vs engine" in " ".join(screen_text(app)), "the list drawn")
        title = app.screen.title_text
        assert len(title) > 90  # longer than the dialog is wide
        words = " ".join(screen_text(app)).split()
        shown = " ".join(w.strip("▊▎█") for w in words)
        for tail in ("tolerance", "Enter jumps to the op"):
            assert tail in title and tail in shown, (tail, title)
