"""Issue #30 item 4: numbers that do not mislead, checked on what the screen and the output show.

The device-diff header says what the comparison found; a zero-initialised bias's update ratio is
no ``Δinf``; the all-versions ``.npz`` holds no phantom ``@0``; a skipped op is marked skipped, not
✓ and ``ran 0 ms``; an inject into a name the net does not have asks first; ``print(dbg.inspect())``
is readable.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.debugger import Debugger
from engine.model.modelio import load_model
from netviz.app import NetvizApp
from netviz.overlays import OVERLAYS
from netviz.screens.pick import PickScreen
from netviz.screens.prompt import PromptScreen
from netviz.session import BlobRef, OpRef, Session
from netviz.widgets.op_inspector import OpInspector
from tests.netviz.waiting import answer, asynctest, continue_to_end, notified, ready, text_of, tree_line, wait_for

MLP = Path(__file__).resolve().parents[2] / "examples" / "mlp" / "predict_net.pb"
BIAS_UPDATE = 12  # WeightedSum of fc1_b, which the init net fills with zeros


@asynctest
async def test_device_diff_header_says_what_the_comparison_found():
    app = NetvizApp(Session.open(MLP))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("D")
        await wait_for(pilot, lambda: isinstance(app.screen, PickScreen), "the diff list", timeout=120)
        title = app.screen.title_text
        rows = app.screen.rows
        differ = sum(1 for r in rows if " abs 0 " not in r)
        assert "should be 0" not in title
        if differ:
            assert f"{differ} of {len(rows)} blobs differ" in title, (title, rows[:5])
        else:
            assert f"all {len(rows)} blobs equal" in title


@asynctest
async def test_zero_initialised_bias_update_ratio_is_not_inf():
    app = NetvizApp(Session.open(MLP))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await continue_to_end(pilot, app)
        app.main.overlay = OVERLAYS.index("grad-norm")
        await pilot.pause()
        bias, weight = tree_line(app, OpRef((), BIAS_UPDATE)), tree_line(app, OpRef((), BIAS_UPDATE - 1))
        assert "Δ/0" in bias and "inf" not in bias, bias
        assert "Δ0.0" in weight or "Δ0.1" in weight, weight  # a real ratio stays a number
        app.main.select(OpRef((), BIAS_UPDATE))
        await pilot.pause()
        assert "no ratio: ‖W‖ was 0" in text_of(app.main.query_one(OpInspector))


@asynctest
async def test_the_all_versions_npz_has_no_phantom_version_zero(tmp_path):
    app = NetvizApp(Session.open(MLP))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await continue_to_end(pilot, app)
        written_only = app.session.save(BlobRef((), "fc1"), str(tmp_path / "fc1.npz"))
        assert "fc1@0" not in written_only
        assert sorted(np.load(tmp_path / "fc1.npz").files) == ["fc1@1"]
        param = app.session.save(BlobRef((), "fc1_w"), str(tmp_path / "w.npz"))  # read @0, updated @1
        assert sorted(np.load(tmp_path / "w.npz").files) == ["fc1_w@0", "fc1_w@1"], param


@asynctest
async def test_a_skipped_op_is_marked_skipped():
    app = NetvizApp(Session.open(MLP))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("n")  # start; op 0 ran
        await wait_for(pilot, lambda: app.main.idle and app.session.pc == OpRef((), 1), "the first step")
        await pilot.press("K")
        await answer(pilot, app, "zeros")
        await wait_for(pilot, lambda: app.main.idle and app.session.pc == OpRef((), 2), "the skip")
        await pilot.pause()
        assert tree_line(app, OpRef((), 1)).startswith("↷"), tree_line(app, OpRef((), 1))
        assert tree_line(app, OpRef((), 0)).startswith("✓")
        app.main.select(OpRef((), 1))
        await pilot.pause()
        shown = text_of(app.main.query_one(OpInspector))
        assert "skipped: its outputs were given" in shown and "ran 0 ms" not in shown


@asynctest
async def test_inject_into_an_unknown_name_asks_first():
    app = NetvizApp(Session.open(MLP))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("n")
        await wait_for(pilot, lambda: app.main.idle and app.session.debugger is not None, "the start")
        await pilot.press("i")
        await answer(pilot, app, "fc1_bb=0.5", then="is no blob of this net")
        await answer(pilot, app, "no")
        await pilot.pause()
        assert "fc1_bb" not in app.session.debugger.ws.values
        assert not notified(app, "fc1_bb =")
        await pilot.press("i")  # a known name goes straight in
        await answer(pilot, app, "fc1_b=0.5")
        await wait_for(pilot, lambda: notified(app, "fc1_b = float32"), "the inject")
        assert isinstance(app.screen, type(app.main)) and not isinstance(app.screen, PromptScreen)


def test_print_inspect_is_readable():
    dbg = Debugger(load_model(MLP))
    dbg.step()
    text = str(dbg.inspect("fc1"))
    lines = text.splitlines()
    assert lines[0] == "fc1: float32 16×16 on CPU (1024 bytes)", lines
    assert lines[1].startswith("  min ") and " std " in lines[1]
    assert "BlobStats(" not in text
