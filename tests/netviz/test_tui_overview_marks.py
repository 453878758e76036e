"""At the overview zoom an op is one row, its label often as wide as the node: the pc's ▶ and a
breakpoint's ● took the label's first cell, so the pc at GenerateProposals read ``▶enerateProposals #102``
(Detectron at 80x24); and where the pane's left edge cut the node, the mark went with the cut-off cell:
the pc was nowhere on the canvas.  A mark now stands before the label, shortened to the cells left
(``●Sigmo… #18``), in the first cell in view."""
from __future__ import annotations

import re

from netviz.app import NetvizApp
from netviz.session import Session
from tests.netviz.test_canvas_screens import canvas_lines, settle, steps
from tests.netviz.tui_nets import chain, write
from tests.netviz.waiting import asynctest, ready, wait_for


@asynctest
async def test_the_pc_and_breakpoint_marks_keep_the_label_s_first_letter(tmp_path) -> None:
    app = NetvizApp(Session.open(write(tmp_path, "chain", chain(40)), inputs=["x0=2,3"]))
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        app.main.zoom = 2  # overview: one-row ops
        await settle(pilot, app)
        await steps(pilot, app, 16)  # NOTE: "Sigmo… #16" fills its node (a one-digit op's label is padded)
        await pilot.press("down", "down", "b")  # a breakpoint on op #18 (the cursor follows the pc to #16)
        await wait_for(pilot, lambda: any("●" in line for line in canvas_lines(app)), "the breakpoint's mark")
        text = "\n".join(canvas_lines(app))
        pc, bp = re.search(r"▶(\S+(?: #\d+)?)", text), re.search(r"●(\S+(?: #\d+)?)", text)
        assert pc and bp, text
        assert pc.group(1).startswith("Sig") and "#16" in pc.group(1), pc.group(0)
        assert bp.group(1).startswith("Sig") and "#18" in bp.group(1), bp.group(0)  # ●Sigmoid#18: the space went
