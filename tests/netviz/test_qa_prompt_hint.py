"""QA: a prompt's title and hint wrap inside the dialog at 80x24 instead of being cut at its edge
(the missing-input prompt's hint ended 'Esc leav' on the zoo's int8 Mask R-CNN)."""
from __future__ import annotations

from netviz.app import NetvizApp
from netviz.screens.prompt import PromptScreen
from netviz.session import Session
from tests.netviz.waiting import asynctest, ready, screen_text, wait_for


@asynctest
async def test_missing_input_prompt_shows_its_whole_hint_at_80x24(zoo):
    app = NetvizApp(Session.open(zoo / "mask_rcnn_2go_int8" / "model.pbtxt"))
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        await pilot.press("n")  # op #0 reads 'data', which nothing gives: a prompt asks for it
        await wait_for(pilot, lambda: isinstance(app.screen, PromptScreen), "the missing-input prompt")
        await wait_for(pilot, lambda: "give input data" in " ".join(screen_text(app)), "the prompt drawn")
        hint = app.screen.hint
        assert len(hint) > 60  # wider than the dialog's text at 80 columns
        shown = " ".join(" ".join(screen_text(app)).split())
        assert " ".join(hint.split()[-3:]) in shown, (hint, shown)
