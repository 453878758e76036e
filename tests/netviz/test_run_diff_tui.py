"""Issue #44 items 1-2 in the TUI: `A` runs the net against side B (here while_net with W off by 0.01 in
another init net) and colours ops by their own error, the culprit (the While) first in the list and red
on the graph; `X` then offers the culprit and writes a repro folder that runs."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from textual.widgets import Input

from engine.model.modelio import load_net, save_net
from netviz.app import NetvizApp
from netviz.overlays import OVER
from netviz.screens.pick import PickScreen
from netviz.screens.prompt import PromptScreen
from netviz.session import Session
from tests.netviz.waiting import asynctest, notified, ready, wait_for

WHILE = Path(__file__).resolve().parents[2] / "examples" / "while_net"


async def _answer(pilot, app, text: str) -> None:
    await wait_for(pilot, lambda: isinstance(app.screen, PromptScreen), "the prompt")
    app.screen.query_one(Input).value = text
    await pilot.press("enter")


@asynctest
async def test_run_diff_names_the_while_and_extract_writes_its_repro(tmp_path: Path) -> None:
    init = load_net(WHILE / "init_net.pb")
    next(a for a in next(o for o in init.op if o.output[0] == "W").arg if a.name == "values").floats[0] += 0.01
    init_b = save_net(init, tmp_path / "init_b.pb")
    app = NetvizApp(Session.open(WHILE / "predict_net.pb"))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("A")
        await _answer(pilot, app, str(init_b))
        await wait_for(pilot, lambda: isinstance(app.screen, PickScreen), "the run diff list", timeout=120)
        pick = app.screen
        assert "run diff (own error per op)" in pick.title_text, pick.title_text
        assert "first over the tolerance: op #2 While" in pick.title_text, pick.title_text
        assert pick.values[pick.start] == 2 and pick.rows[pick.start].endswith("over tol"), pick.rows
        assert pick.rows[pick.start].startswith("#2 While  acc  own 0.00107  out 0.00107  inherited 0  ")
        assert notified(app, "culprit: op #2 While 'acc': own error")
        assert app.main.canvas.overlay[2].bgcolor.triplet.hex.lower() == OVER.lower()
        assert all(s.bgcolor.triplet.hex.lower() != OVER.lower() for i, s in app.main.canvas.overlay.items() if i != 2)
        await pilot.press("enter")  # jumps to the While and shows its values on both sides
        await wait_for(pilot, lambda: notified(app, "'acc': B's run 0.00107 from A, B's op on A's inputs 0.00107"),
                       "the op's values on both sides", timeout=60)
        assert app.main.selected is not None and app.main.selected.index == 2
        detail = next(n.message for n in app._notifications if n.message.startswith("'acc'"))
        (_, a, b, gap), *_ = [ln.rsplit(None, 3) for ln in detail.splitlines()[2:]]
        assert float(gap) == pytest.approx(abs(float(a) - float(b)), rel=1e-2)  # A, B and their difference
        await pilot.pause()
        await pilot.press("X")
        await wait_for(pilot, lambda: isinstance(app.screen, PromptScreen), "the extract prompt")
        assert app.screen.query_one(Input).value.startswith("2 ")  # the culprit is offered
        await _answer(pilot, app, f"2 {tmp_path / 'repro'}")
        await wait_for(pilot, lambda: notified(app, "ops 2:3: 1 ops"), "the extract notice", timeout=120)
    assert sorted(np.load(tmp_path / "repro" / "expected.npz").files) == ["acc", "cond", "i"]
    assert (tmp_path / "repro" / "repro.py").is_file()


def test_x_offers_the_culprit_then_the_selected_op_then_the_first_nan_op() -> None:
    from types import SimpleNamespace as NS

    from netviz.run_diff import default_range
    from netviz.session import OpRef

    session = NS(records_in=lambda path: {0: NS(has_inf_or_nan=False), 3: NS(has_inf_or_nan=True),
                                          5: NS(has_inf_or_nan=True)})
    rows = [NS(op_index=1, ok=True), NS(op_index=4, ok=False)]
    assert default_range(session, OpRef((), 2), rows) == "4"
    assert default_range(session, OpRef((), 2), None) == "2"
    assert default_range(session, OpRef(((2, "loop_net"),), 0), None) == "2/loop_net 0"
    assert default_range(session, None, None) == "3"


def test_side_b_gpu_without_a_gpu_runs_on_the_stand_in_with_a_note_as_d_does() -> None:
    """QA: ``A`` → gpu refused ("no CUDA GPU here") where ``D`` and ``netviz diff --devices cpu,gpu`` run the
    GPU side on the NumPy stand-in; now one behaviour: the stand-in, and a note saying so."""
    from engine.runtime import device as dev
    from netviz.run_diff import compare, op_detail

    if dev.has_gpu():
        pytest.skip("a real GPU: side B runs on it, no stand-in note")
    session = Session.open(Path(__file__).resolve().parents[2] / "examples" / "mlp_forward" / "predict_net.pb")
    diff = compare(session, "gpu")
    assert any("no CUDA GPU here: side B gpu ran on the stand-in device (NumPy)" in n for n in diff.notes), diff.notes
    assert diff.rows and all(r.max_abs < 1e-3 for r in diff.rows)  # float rounding only
    detail = op_detail(session, diff.rows[0].op_index)
    assert detail is not None and "B's op on A's inputs" in detail
    assert not dev.has_gpu()  # the stand-in is switched off again
