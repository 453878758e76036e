"""QA: a dialog's title, hint and key line wrap inside the dialog instead of being cut at its edge.

Found cut: the ONNX diff's verdict ('none over the tolerance') off its header at 160x48, the
missing-input prompt's hint ('… data.npy; Esc leav') at 80x24, the breakpoints list's key line
('… C on the main screen a') at both sizes.  What a widget shows is read from the screen's cells."""
from __future__ import annotations

from pathlib import Path

import pytest

from netviz.app import NetvizApp
from netviz.screens.breakpoints import BreakpointsScreen
from netviz.screens.pick import PickScreen
from netviz.screens.prompt import PromptScreen
from netviz.session import Session
from tests.netviz.waiting import asynctest, ready, screen_text, wait_for

MLP = Path(__file__).resolve().parents[2] / "examples" / "mlp" / "predict_net.pb"
SIZES = [(80, 24), (160, 48)]


async def shown_in(pilot, app, screen_type: type, selector: str) -> str:
    """The words the widget at `selector` of the open dialog shows on screen (its cells only)."""
    await wait_for(pilot, lambda: isinstance(app.screen, screen_type), screen_type.__name__)
    await wait_for(pilot, lambda: app.screen.query_one(selector).region.width > 0, "the dialog laid out")
    await pilot.pause()
    box = app.screen.query_one(selector).region
    return " ".join(" ".join(line[box.x:box.right] for line in screen_text(app)[box.y:box.bottom]).split())


@pytest.mark.parametrize("size", SIZES)
@asynctest
async def test_onnx_diff_header_keeps_its_verdict_and_enter_hint_on_screen(size):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    app = NetvizApp(Session.open(MLP))
    async with app.run_test(size=size) as pilot:
        await ready(pilot)
        await pilot.press("O")
        await wait_for(pilot, lambda: isinstance(app.screen, PickScreen), "the ONNX diff list", timeout=120)
        title = app.screen.title_text
        assert len(title) > 90 and "tolerance" in title  # longer than the dialog is wide
        assert " ".join(title.split()) == await shown_in(pilot, app, PickScreen, "#pick-title")


@asynctest
async def test_missing_input_prompt_shows_its_whole_hint_at_80x24(zoo):
    app = NetvizApp(Session.open(zoo / "mask_rcnn_2go_int8" / "model.pbtxt"))
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        await pilot.press("n")  # op #0 reads 'data', which nothing gives: a prompt asks for it
        await wait_for(pilot, lambda: isinstance(app.screen, PromptScreen), "the missing-input prompt")
        hint = app.screen.hint
        assert len(hint) > 60  # wider than the dialog's text at 80 columns
        assert " ".join(hint.split()) == await shown_in(pilot, app, PromptScreen, "#prompt-hint")


@pytest.mark.parametrize("size", SIZES)
@asynctest
async def test_breakpoints_dialog_shows_all_of_its_keys(size):
    app = NetvizApp(Session.open(MLP))
    async with app.run_test(size=size) as pilot:
        await ready(pilot)
        await pilot.press("B")
        shown = await shown_in(pilot, app, BreakpointsScreen, "#bps-box > Label")
        assert shown.startswith("breakpoints") and shown.endswith("C on the main screen adds a global one)"), shown
