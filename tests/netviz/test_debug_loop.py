"""The debugging loop in the TUI: serialised moves (rapid keys = a sequential replay), cancel,
each SSA version's own value, the NaN hunt, typed inject, save, skip, device diff."""
from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.runtime import device as dev
from engine.errors import NetvizError
from engine.model.modelio import save_net
from engine.model.opdef import create_operator as op
from netviz.app import NetvizApp
from netviz.screens.breakpoints import BreakpointsScreen
from netviz.screens.pick import PickScreen
from netviz.session import BlobRef, OpRef, Session
from proto import caffe2_pb2
from tests.engine.test_debugger_hunt import bn_relu_model
from tests.netviz.tui_nets import while_net, write
from tests.netviz.waiting import (answer, asynctest, export_while_moving, notified, pick_export, ready, text_of,
                                  wait_for)

#: move keys → the Session.step move they ask for.  NOTE: not t: it runs to the cursor as it is
#: when pressed, and the cursor follows the pc as queued moves finish, so its target is the
#: user's timing, not the key sequence (test_app covers t).
MOVES = {"n": "step", "s": "step_into", "f": "step_out", "u": "step_back", "r": "restart",
         "c": "continue_", "x": "run_to_nan"}


def state(session: Session) -> tuple:
    """What a move sequence leaves: pc, every record, every value of the main workspace."""
    dbg = session.debugger
    values = {k: (np.asarray(dev.to_host(v)).tobytes(), str(v.dtype)) for k, v in dbg.ws.values.items()
              if hasattr(v, "dtype")}
    return dbg.pc.path, [(r.seq, r.path, r.op_type) for r in dbg.records], values


def replay(path: Path, keys: list[str]) -> tuple:
    """The same keys as one move after the other, without the UI."""
    session = Session.open(path, inputs=["x=3"])
    for k in keys:
        try:
            session.step(MOVES[k])
        except NetvizError:
            pass  # the UI shows these as notifications and goes on
    return state(session)


async def press_fast(path: Path, keys: list[str]) -> tuple:
    app = NetvizApp(Session.open(path, inputs=["x=3"]))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await pilot.press(*keys)  # no waiting between keys: they queue behind the running move
        await wait_for(pilot, lambda: app.main.idle, "the move queue to drain")
        return state(app.session)


@settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow,
                                                                                    HealthCheck.function_scoped_fixture])
@given(keys=st.lists(st.sampled_from(sorted(MOVES)), min_size=1, max_size=14))
def test_rapid_move_keys_equal_a_sequential_replay(tmp_path_factory, keys):
    path = write(tmp_path_factory.mktemp("loop"), "loop", while_net())
    assert asyncio.run(press_fast(path, keys)) == replay(path, keys)


def long_loop(n: int = 1_000_000) -> caffe2_pb2.NetDef:
    """``while i < n: i += 1`` — a continue that runs for minutes unless cancelled."""
    body = caffe2_pb2.NetDef(name="body", op=[op("Add", ["i", "one"], "i"), op("LT", ["i", "n"], "cond")])
    net = caffe2_pb2.NetDef(name="long", op=[
        op("ConstantFill", [], "i", shape=[1], value=0.0), op("ConstantFill", [], "n", shape=[1], value=float(n)),
        op("ConstantFill", [], "one", shape=[1], value=1.0), op("LT", ["i", "n"], "cond"),
        op("While", ["cond"], [], loop_net=body, name="loop"), op("Relu", "i", "out")])
    net.external_output.append("out")
    return net


@asynctest
async def test_escape_cancels_a_running_continue_and_drops_the_typed_ahead_moves(tmp_path):
    app = NetvizApp(Session.open(write(tmp_path, "long", long_loop())))
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await ready(pilot)
        await pilot.press("n")
        await wait_for(pilot, lambda: app.main.idle and app.session.debugger is not None, "the first step")
        dbg = app.session.debugger
        ran_at: list[float] = []
        dbg.listeners.append(lambda ev: ran_at.append(time.monotonic()) if hasattr(ev, "record") else None)
        await pilot.press("c", "n", "n")
        await wait_for(pilot, lambda: len(ran_at) > 50, "the loop running")
        assert "+2 queued" in text_of(app.main.query_one("#status"))  # the type-ahead is shown
        asked: list[float] = []
        cancel = app.session.cancel
        app.session.cancel = lambda: (asked.append(time.monotonic()), cancel())  # when Escape's action runs
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.main.idle, "the cancelled move to stop")
        cancelled_at = asked[0]
        stop = app.session.last_stop
        assert stop.reason == "cancelled" and not dbg.finished
        late = [t for t in ran_at if t > cancelled_at]
        # NOTE: ops here take microseconds; at most the op running when Escape came finishes, so the
        # stop comes well within 100 ms of the key.  The queued n, n never ran.
        assert len(late) <= 1, f"{len(late)} ops ran after Escape"
        assert notified(app, "dropped 2 queued")
        print(f"cancel latency: {(max(ran_at) - cancelled_at) * 1e3:.1f} ms after Escape, {len(late)} op")
        await pilot.press("n")  # the cancel does not stick to the next move
        await wait_for(pilot, lambda: app.main.idle and app.session.last_stop is not stop, "one more step")
        assert app.session.last_stop.reason == "step"


@pytest.fixture
def bn_path(tmp_path: Path) -> Path:
    model = bn_relu_model()
    save_net(model.init, tmp_path / "bnrelu_init.pbtxt")
    return save_net(model.predict, tmp_path / "bnrelu.pbtxt")


def bn_app(bn_path: Path) -> NetvizApp:
    return NetvizApp(Session.open(bn_path, init=bn_path.parent / "bnrelu_init.pbtxt"))


async def run_keys(pilot, app, *keys: str) -> None:
    await pilot.press(*keys)
    await wait_for(pilot, lambda: app.main.idle, "the moves to finish")


@asynctest
async def test_the_inspector_shows_each_ssa_versions_own_value(bn_path):
    app = bn_app(bn_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await run_keys(pilot, app, "n", "n", "n", "n")  # Conv, SpatialBN, Relu (in place), MaxPool
        dbg = app.session.debugger
        pre, post = dbg.written_value(("op", 1), "conv1_bn"), dbg.written_value(("op", 2), "conv1_bn")
        app.main.select(OpRef((), 1))
        app.main.select_blob(BlobRef((), "conv1_bn", 1))
        await pilot.pause()
        shown = text_of(app.main.query_one("#blob-values"))
        assert f"{pre.min():.4g} / {pre.max():.4g}" in shown and f"zeros    0 of {pre.size}" in shown
        app.main.select_blob(BlobRef((), "conv1_bn", 2))
        await pilot.pause()
        shown = text_of(app.main.query_one("#blob-values"))
        assert f"0 / {post.max():.4g}" in shown and f"zeros    {np.count_nonzero(post == 0)} of" in shown
        assert "1×4×8×8" in text_of(app.main.query_one("#op-info"))  # the runtime shape


@asynctest
async def test_nan_injected_in_resnet50_is_found_by_x_and_listed_first_in_the_alerts(zoo):
    app = NetvizApp(Session.open(zoo / "resnet50" / "predict_net.pbtxt"))
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        await ready(pilot)
        await pilot.press("i")
        await answer(pilot, app, "gpu_0/res3_0_branch2a_w=nan")
        assert np.isnan(app.session.value("gpu_0/res3_0_branch2a_w")).all()
        await run_keys(pilot, app, "x")
        assert app.session.last_stop.reason == "nan" and app.session.pc == OpRef((), 37)
        assert notified(app, "gpu_0/res3_0_branch2a holds NaN/Inf")
        await run_keys(pilot, app, "x")  # the next one: SpatialBN of that Conv
        await pilot.press("a")
        await wait_for(pilot, lambda: isinstance(app.screen, PickScreen), "the alerts panel")
        rows = app.screen.rows
        assert len(rows) == 2 and "main › op#36 Conv" in rows[0] and "main › op#37 SpatialBN" in rows[1]
        await pilot.press("enter")  # opens on the first alert; Enter jumps to it
        await wait_for(pilot, lambda: app.main.selected == OpRef((), 36), "the first alert's op")


@asynctest
async def test_global_condition_breakpoint_from_the_prompt(bn_path):
    app = bn_app(bn_path)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await ready(pilot)
        await pilot.press("C")
        await answer(pilot, app, "max_ab(conv1_bn) > 1", then="break when")  # it reopens on the text to fix
        assert notified(app, "did you mean max_abs")
        await answer(pilot, app, "max_abs(conv1_bn) > 0 ignore 1")
        await run_keys(pilot, app, "c")  # SpatialBN's write is ignored, Relu's stops
        assert app.session.last_stop.reason == "condition" and app.session.pc == OpRef((), 3)
        await pilot.press("B")
        await wait_for(pilot, lambda: isinstance(app.screen, BreakpointsScreen), "the breakpoints list")
        row = str(app.screen.query_one("#bps-list").get_option_at_index(0).prompt)
        assert row == "global: after any op if max_abs(conv1_bn) > 0 · hits 2"
        await pilot.press("x", "escape")
        await wait_for(pilot, lambda: app.screen is app.main, "the list closed")
        assert not app.session.global_breakpoints and not app.session.debugger.breakpoints


@asynctest
async def test_typed_inject_save_and_copy(bn_path, tmp_path):
    app = bn_app(bn_path)
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        await ready(pilot)
        await run_keys(pilot, app, "n")
        app.main.select_blob(BlobRef((), "conv1", 1))
        await pilot.press("i")
        await answer(pilot, app, "conv1=inf", clear=False)  # the prompt starts with "conv1="
        v = app.session.value("conv1")
        assert v.shape == (1, 4, 8, 8) and v.dtype == np.float32 and np.isposinf(v).all()
        assert "injected" in text_of(app.main.query_one("#blob-facts"))
        await pilot.press("i")
        await answer(pilot, app, "conv1=[1, nan]", then="type yes")  # another shape: asked first
        await answer(pilot, app, "yes")
        assert app.session.value("conv1").shape == (2,)
        await run_keys(pilot, app, "r", "n")
        app.main.select_blob(BlobRef((), "conv1", 1))
        await pilot.press("S")
        await answer(pilot, app, str(tmp_path / "conv1.npy"))
        await wait_for(pilot, lambda: notified(app, f"wrote {tmp_path / 'conv1.npy'}"), "the save (a worker)")
        saved = np.load(tmp_path / "conv1.npy")
        assert np.array_equal(saved, app.session.debugger.written_value(("op", 0), "conv1"))
        await pilot.press("S")
        await answer(pilot, app, str(tmp_path / "all.npz"))
        await wait_for(pilot, lambda: notified(app, f"wrote {tmp_path / 'all.npz'}"), "the .npz save")
        assert set(np.load(tmp_path / "all.npz").files) == {"conv1@1"}
        await pilot.press("Y")
        await wait_for(pilot, lambda: notified(app, "copied conv1@1"), "the copy")


def no_kernel_net() -> caffe2_pb2.NetDef:
    net = caffe2_pb2.NetDef(name="gap", op=[op("Relu", "x", "a"), op("NoKernelHere", "a", "b"),
                                            op("Sigmoid", "b", "c")])
    net.external_input.append("x")
    return net


@asynctest
async def test_skip_an_op_without_a_kernel_by_giving_its_outputs(tmp_path):
    app = NetvizApp(Session.open(write(tmp_path, "gap", no_kernel_net()), inputs=["x=2,3"]))
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await ready(pilot)
        await run_keys(pilot, app, "n", "n")
        await wait_for(pilot, lambda: notified(app, "K: skip it"), "the no-kernel error with its way out")
        await pilot.press("K")
        await answer(pilot, app, "b=full((2,3), 0)")
        await wait_for(pilot, lambda: app.main.idle and app.session.pc == OpRef((), 2), "the pc past the op")
        assert app.session.record(OpRef((), 1)).skipped
        await run_keys(pilot, app, "n")
        assert np.allclose(app.session.value("c"), 0.5)


@asynctest
async def test_skip_with_shape_inferred_zeros(bn_path):
    app = bn_app(bn_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await wait_for(pilot, lambda: app.session.shapes_ready(()) is not None, "shape inference")
        await pilot.press("K")
        await answer(pilot, app, "zeros", clear=True)
        await wait_for(pilot, lambda: app.main.idle and app.session.pc == OpRef((), 1), "op 0 skipped")
        assert app.session.value("conv1").shape == (1, 4, 8, 8) and not app.session.value("conv1").any()


@asynctest
async def test_device_diff_against_the_stand_in(bn_path):
    if dev.cupy_module() is not None:
        pytest.skip("a real GPU is here: the stand-in is not used")
    app = bn_app(bn_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("D")
        await wait_for(pilot, lambda: isinstance(app.screen, PickScreen), "the diff list")
        assert "stand-in" in app.screen.title_text and "none over" in app.screen.title_text
        assert {r.split()[0] for r in app.screen.rows} >= {"conv1", "conv1_bn", "pool1"}
        app.screen.query_one("#pick-list").highlighted = [r.split()[0] for r in app.screen.rows].index("pool1")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.main.selected == OpRef((), 3), "the op that wrote pool1")


@asynctest
async def test_export_runs_in_a_worker_and_asks_before_overwriting(bn_path, tmp_path):
    app = bn_app(bn_path)
    release = threading.Event()

    def slow_export(path, target, ssa=False, force=False, progress=None):  # a layout that takes as long as we like
        if progress is not None:
            progress("laying out with dot…")  # as Session.export reports its steps
        release.wait(30)
        Path(target).write_text("<svg/>")
        return target
    app.session.export = slow_export
    target = tmp_path / "net.svg"
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await ready(pilot)
        await export_while_moving(pilot, app, "net", target, "down", OpRef((), 1), release)
        assert notified(app, "laying out with dot…")  # the export's progress lines reach the user
        await pilot.press("e")
        await pick_export(pilot, "net")
        await answer(pilot, app, str(target), then="exists — type yes")
        await answer(pilot, app, "no")
        assert app.main.exporting is None  # not overwritten
        release.clear()
        await pilot.press("e")
        await pick_export(pilot, "net")
        await answer(pilot, app, str(target), then="exists — type yes")
        await answer(pilot, app, "yes")
        await pilot.press("escape")  # cancel: the file dot writes is removed
        release.set()
        await wait_for(pilot, lambda: notified(app, "cancelled (nothing written)"), "the cancelled export")
        assert not target.exists()


@asynctest
async def test_a_dropped_version_says_so_and_r_reruns_to_it(bn_path):
    app = bn_app(bn_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await run_keys(pilot, app, "n")
        app.session.debugger.keep_budget = 1  # keep only the newest value
        await run_keys(pilot, app, "n", "n")
        app.main.select_blob(BlobRef((), "conv1", 1))
        await pilot.pause()
        assert "dropped" in text_of(app.main.query_one("#blob-values"))
        await pilot.press("R")
        await wait_for(pilot, lambda: app.main.idle and app.session.pc == OpRef((), 1), "the re-run to op #0")
        app.main.select_blob(BlobRef((), "conv1", 1))
        await pilot.pause()
        assert "min/max" in text_of(app.main.query_one("#blob-values"))


@asynctest
async def test_choosing_a_blob_brings_its_inspector_into_view(zoo):
    """ResNet-50's Conv inspector is taller than the column: the blob chosen must still show
    (the blob_histogram screenshot showed only the op's arguments)."""
    app = NetvizApp(Session.open(zoo / "resnet50" / "predict_net.pbtxt"))
    # NOTE: 80×24: with its unset arguments folded the Conv inspector fits a 48-row column
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        column = app.main.query_one("#inspector")
        app.main.select_blob(BlobRef((), "gpu_0/data", 0))
        blob = app.main.query_one("#blob-info")
        await wait_for(pilot, lambda: column.scroll_y > 0 and column.region.contains_point(blob.region.offset),
                       "the blob inspector to scroll into view")
        assert blob.display and blob.region.y < column.region.bottom - 2  # its first lines are on screen
