"""Issue #34 item 2 (TUI side): `O` exports the net to a temporary .onnx, runs it in ONNX Runtime and
shows each op's worst difference from the engine on the graph and in a list whose header says what
the comparison found.  A deliberately wrong converter makes it name the first differing op; a net
with an op that has no ONNX form gets one notice naming it."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import engine.runtime.ops  # noqa: E402,F401 - fills the converter table the test patches
from engine.catalogue.registry import ONNX  # noqa: E402
from netviz.app import NetvizApp  # noqa: E402
from netviz.overlays import OVER, diff_colors  # noqa: E402
from netviz.screens.pick import PickScreen  # noqa: E402
from netviz.session import Session  # noqa: E402
from tests.netviz.waiting import asynctest, notified, ready, wait_for  # noqa: E402

MLP = Path(__file__).resolve().parents[2] / "examples" / "mlp" / "predict_net.pb"


async def _diff(pilot, app) -> PickScreen:
    await ready(pilot)
    await pilot.press("O")
    await wait_for(pilot, lambda: isinstance(app.screen, PickScreen), "the ONNX diff list", timeout=120)
    return app.screen


@asynctest
async def test_onnx_runtime_diff_of_the_mlp_shows_on_the_graph():
    app = NetvizApp(Session.open(MLP))
    async with app.run_test(size=(160, 48)) as pilot:
        pick = await _diff(pilot, app)
        title, rows, ops = pick.title_text, pick.rows, pick.values
        net = app.main.session.view(()).net
        # the training MLP exports its forward section: FC, Relu, FC, SoftmaxWithLoss
        assert ops == [0, 1, 2, 3], (ops, rows)
        assert all(r.startswith(f"#{i} {net.op[i].type}") for i, r in zip(ops, rows)), rows
        assert title.startswith("ONNX Runtime vs engine: ")
        assert not any(r.endswith("over tol") for r in rows), rows  # the real converters are right
        assert "first over the tolerance" not in title, title
        differ = sum(1 for r in rows if " abs 0 " not in r)
        assert (f"all 4 ops within tolerance ({differ} differ by float rounding" in title) if differ \
            else ("all 4 ops equal" in title), (title, rows)
        canvas = app.main.canvas
        assert set(canvas.overlay) == set(ops)  # every compared op coloured on the graph, nothing else
        assert all(s.bgcolor.triplet.hex.lower() != OVER.lower() for s in canvas.overlay.values())
        await pilot.press("escape")
        await pilot.press("m")  # m clears the diff's colours before cycling the overlays
        await pilot.pause()
        assert app.main.onnx_rows is None


@asynctest
async def test_resnet50_with_made_up_weights_every_op_on_the_graph(zoo):
    app = NetvizApp(Session.open(zoo / "resnet50" / "predict_net.pbtxt"))
    async with app.run_test(size=(160, 48)) as pilot:
        pick = await _diff(pilot, app)
        n = len(app.main.session.view(()).net.op)
        assert pick.values == list(range(n)), pick.values[:5]  # every top-level op compared
        assert f"all {n} ops within tolerance" in pick.title_text or f"all {n} ops equal" in pick.title_text, \
            pick.title_text
        assert "first over the tolerance" not in pick.title_text
        assert set(app.main.canvas.overlay) == set(range(n))
        assert notified(app, "parameters made up by --random-params")  # the export's note, shown


@asynctest
async def test_a_wrong_converter_is_named_as_the_first_differing_op(monkeypatch):
    def relu_as_sigmoid(c):  # a deliberately wrong converter: Relu written as Sigmoid
        c.emit("Sigmoid", [c.x(0)], [c.y(0)])
    monkeypatch.setitem(ONNX, "Relu", relu_as_sigmoid)
    app = NetvizApp(Session.open(MLP))
    async with app.run_test(size=(160, 48)) as pilot:
        pick = await _diff(pilot, app)
        title, rows, ops = pick.title_text, pick.rows, pick.values
        relu = app.main.session.view(()).net.op[1]
        assert f"first over the tolerance: op #1 Relu '{relu.output[0]}'" in title, title
        assert ops[pick.start] == 1 and rows[pick.start].endswith("over tol"), (pick.start, rows)
        colours = diff_colors(app.main.onnx_rows)
        assert colours[1][0] == OVER
        assert app.main.canvas.overlay[1].bgcolor.triplet.hex.lower() == OVER.lower()
        await pilot.press("enter")  # jumps to the op
        await pilot.pause()
        assert app.main.selected is not None and app.main.selected.index == 1


@asynctest
async def test_an_op_without_onnx_form_is_named_in_one_notice(monkeypatch):
    monkeypatch.delitem(ONNX, "Relu")
    app = NetvizApp(Session.open(MLP))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("O")
        await wait_for(pilot, lambda: app.main.diffing is None and notified(app, "no faithful ONNX form"), "the refusal", timeout=120)
        assert any("for Relu (op #1)" in n.message for n in app._notifications)
        assert not isinstance(app.screen, PickScreen)
        assert app.main.onnx_rows is None


@asynctest
async def test_escape_cancels_the_onnx_diff_between_stages(monkeypatch):
    import threading

    from engine.onnx import export as onnx_export

    started, real = threading.Event(), onnx_export.export

    def held_export(*args, **kwargs):  # the export stage waits until the test has pressed Esc
        started.set()
        app.main.diffing.wait(30)
        return real(*args, **kwargs)
    monkeypatch.setattr(onnx_export, "export", held_export)
    app = NetvizApp(Session.open(MLP))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("O")
        await wait_for(pilot, started.is_set, "the export stage")
        assert notified(app, "running the net in the engine") and notified(app, "exporting 4 ops to ONNX")
        await pilot.press("escape")
        await wait_for(pilot, lambda: notified(app, "ONNX Runtime diff cancelled"), "the cancel notice")
        await wait_for(pilot, lambda: app.main.diffing is None, "the worker's end")
        assert not isinstance(app.screen, PickScreen) and app.main.onnx_rows is None
        assert not notified(app, "running ONNX Runtime")  # stopped before ONNX Runtime ran
