"""The graph canvas marks a skipped op (K: its outputs given, its kernel never ran) ↷ as the op list
does, never ✓; an op that ran keeps its ✓."""
from __future__ import annotations

import re
from pathlib import Path

from netviz.app import NetvizApp
from netviz.session import OpRef, Session
from tests.netviz.test_canvas_screens import canvas_lines
from tests.netviz.waiting import answer, asynctest, ready, wait_for

MLP = Path(__file__).resolve().parents[2] / "examples" / "mlp" / "predict_net.pb"


def box_line(app, label: str) -> str:
    """The canvas cells of the op box line holding `label`, up to its right border."""
    for line in canvas_lines(app):
        m = re.search(re.escape(label) + r"\b[^│]*│", line)
        if m:
            return m.group(0)
    raise AssertionError(f"{label!r} not on the canvas:\n" + "\n".join(canvas_lines(app)))


@asynctest
async def test_a_skipped_op_is_marked_skipped_on_the_canvas():
    app = NetvizApp(Session.open(MLP))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("n")  # op 0 (FC) runs
        await wait_for(pilot, lambda: app.main.idle and app.session.pc == OpRef((), 1), "the first step")
        await pilot.press("K")  # skip op 1 (Relu), its output zeros
        await answer(pilot, app, "zeros")
        await wait_for(pilot, lambda: app.main.idle and app.session.pc == OpRef((), 2), "the skip")
        await pilot.pause()
        relu, fc = box_line(app, "Relu #1"), box_line(app, "FC #0")
        assert "↷" in relu and "✓" not in relu, relu
        assert "✓" in fc and "↷" not in fc, fc
