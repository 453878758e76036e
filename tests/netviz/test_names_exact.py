"""Issue #30 item 2: every name is shown exactly, keeps its distinguishing tail, and places read as places.

Mask R-CNN's ``_[mask]_pool5_int8`` (renamed ``gpu:0/_[mask]_pool5_int8`` so one name holds ``[``,
``]``, ``:`` and ``/``) must show as itself in the op inspector, its blob list, a notice and search;
Rich markup swallowed ``[mask]`` (``__pool5_int8@1``).  ResNet-50's SpatialBN ops 5, 8, 11, 13
must read differently in the op list at 80×24 and 160×48, forward and backward.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

import pytest

from textual.widgets import OptionList

from netviz.app import NetvizApp
from netviz.screens.search import SearchScreen
from netviz.session import OpRef, Session
from netviz.widgets.op_inspector import OpInspector
from tests.conftest import ZOO
from tests.netviz.waiting import answer, asynctest, notified, ready, screen_text, text_of, tree_line, wait_for

MASK = ZOO / "mask_rcnn_2go_int8" / "model.pbtxt"
NAME = "gpu:0/_[mask]_pool5_int8"


@pytest.fixture
def mask_net(zoo, tmp_path) -> Path:
    text = MASK.read_text().replace('"_[mask]_pool5_int8"', f'"{NAME}"')
    assert NAME in text
    out = tmp_path / "model.pbtxt"
    out.write_text(text)
    return out


def toasts(app) -> list[str]:
    """The text the notices on screen show."""
    from textual.widgets._toast import Toast
    return [t.render().plain for t in app.screen.query(Toast)]


def screen(app) -> str:
    return "\n".join(screen_text(app))


@asynctest
async def test_a_name_with_brackets_colon_and_slash_shows_exactly(mask_net, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = NetvizApp(Session.open(mask_net))
    async with app.run_test(size=(200, 60), notifications=True) as pilot:
        await ready(pilot)
        main, s = app.main, app.session
        reader = next(r for r in s.walk() if NAME in s.op(r).input)  # in the If's then_net
        main.select(reader)
        await pilot.pause()
        assert f"{NAME}@1" in text_of(main.query_one(OpInspector))       # the inspector's table
        assert f"in  {NAME}@1" in screen(app)                            # the blob list under it
        await pilot.press("w")
        await answer(pilot, app, NAME)
        await wait_for(pilot, lambda: notified(app, f"watching {NAME}"), "the watch notice")
        await pilot.pause()
        assert any(f"watching {NAME}" in toast for toast in toasts(app)), toasts(app)   # the notice as drawn
        await pilot.press("slash")
        await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen), "search")
        await pilot.press(*"pool5_int8")
        await pilot.pause()
        results = [str(o.prompt) for o in app.screen.query_one(OptionList).options]
        assert any(r.startswith(f"blob {NAME} in ") for r in results), results
        assert any(f"Int8Quantize [quantized] {NAME} in " in r for r in results), results
        assert f"blob {NAME}" in screen(app)


RESNET = ZOO / "resnet50" / "predict_net.pbtxt"
BN_OPS = (5, 8, 11, 13)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
@asynctest
async def test_op_list_names_keep_their_tail(zoo, size):
    app = NetvizApp(Session.open(RESNET))
    async with app.run_test(size=size) as pilot:
        await ready(pilot)
        lines = [tree_line(app, OpRef((), i)) for i in BN_OPS]
        assert len(set(lines)) == len(lines), lines
        names = [app.session.op(OpRef((), i)).output[0] for i in BN_OPS]
        assert all(line.endswith(name[-4:]) for line, name in zip(lines, names)), lines  # the tail, not the head
        assert all(len(line) <= app.main.op_tree.scrollable_content_region.width for line in lines)
        # the backward view: gradient ops keep the tail too, gpu_0/ still dropped
        await pilot.press("g")
        await answer(pilot, app, app.session.model.predict.external_output[-1])
        await wait_for(pilot, lambda: app.session.show_backward and app.main.op_tree.populated, "the backward view")
        view = app.session.view(())
        grads = [i for i in range(view.n_forward, len(view.net.op)) if view.net.op[i].type == "SpatialBNGradient"]
        shown = []
        for i in grads[-4:]:
            shown.append(tree_line(app, OpRef((), i)))
        assert len(set(shown)) == len(shown), shown
        assert not any("gpu_0/" in line for line in shown), shown


NESTED = Path(__file__).resolve().parents[2] / "examples" / "nested_if_in_while" / "predict_net.pb"


@asynctest
async def test_a_breakpoint_hit_names_its_place_not_a_path():
    app = NetvizApp(Session.open(NESTED))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        s = app.session
        tanh = next(r for r in s.walk() if s.op(r).type == "Tanh")
        s.toggle_breakpoint(tanh)
        await pilot.press("c")
        await wait_for(pilot, lambda: app.main.idle and s.last_stop is not None
                       and s.last_stop.reason == "breakpoint", "the breakpoint")
        await pilot.pause()
        place = "main › While op#2 iteration 0 › Do op#0 › If op#3 then_net › Do op#0 › op#1 Tanh"
        assert notified(app, place), [n.message for n in app._notifications]
        assert not any("loop_net/0" in n.message for n in app._notifications)


@asynctest
async def test_nan_stop_and_alerts_name_the_place(tmp_path):
    from netviz.screens.pick import PickScreen
    from tests.netviz.tui_nets import while_net, write

    np.save(tmp_path / "x.npy", np.array([np.nan, 1.0], dtype=np.float32))
    app = NetvizApp(Session.open(write(tmp_path, "loop", while_net()), inputs=[f"x={tmp_path / 'x.npy'}"]))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("x")
        place = "main › While op#5 iteration 0 › op#0 Mul"
        await wait_for(pilot, lambda: notified(app, f"x holds NaN/Inf (after {place})"), "the NaN stop naming its place")
        await pilot.press("a")
        await wait_for(pilot, lambda: isinstance(app.screen, PickScreen), "the alerts")
        assert any(place in row for row in app.screen.rows), app.screen.rows
        assert not any("loop_net/" in row for row in app.screen.rows)
