"""The UI beside the move worker: saving a value runs in a worker of its own; while a move holds the
debugger, the screen shows the state copied at the last move's end, and breakpoints set meanwhile
reach the debugger when the move ends — never while it runs."""
from __future__ import annotations

import threading

import numpy as np

from netviz.app import NetvizApp
from netviz.session import BlobRef, OpRef, Session, from_oppath
from tests.netviz.tui_nets import chain, write
from tests.netviz.waiting import answer, asynctest, notified, ready, text_of, wait_for


@asynctest
async def test_save_runs_in_a_worker_and_says_when_done_or_failed(tmp_path):
    app = NetvizApp(Session.open(write(tmp_path, "chain", chain(20)), inputs=["x0=2,3"]))
    gate, save = threading.Event(), app.session.save

    def held(ref, target):  # a slow disk
        gate.wait(30)
        return save(ref, target)
    app.session.save = held
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await ready(pilot)
        await pilot.press("n")
        await wait_for(pilot, lambda: app.main.idle and app.session.pc == OpRef((), 1), "one step")
        app.main.select_blob(BlobRef((), "x1", 1))
        await pilot.press("S")
        await answer(pilot, app, str(tmp_path / "x1.npy"))
        await pilot.press("down")  # the UI answers while the file is written
        await wait_for(pilot, lambda: app.main.selected == OpRef((), 2), "the cursor during the save")
        assert not (tmp_path / "x1.npy").exists()
        gate.set()
        await wait_for(pilot, lambda: notified(app, f"wrote {tmp_path / 'x1.npy'}"), "the save")
        expected = app.session.debugger.written_value(("op", 0), "x1")
        assert np.array_equal(np.load(tmp_path / "x1.npy"), expected)
        app.main.select_blob(BlobRef((), "x1", 1))
        await pilot.press("S")
        await answer(pilot, app, str(tmp_path / "no" / "such" / "folder" / "x1.npy"))
        await wait_for(pilot, lambda: any(n.severity == "error" and "x1" in n.message for n in app._notifications),
                       "the failed save's notice")
        assert app.is_running


@asynctest
async def test_rapid_keys_during_a_held_move_see_one_state_and_breakpoints_wait(tmp_path):
    app = NetvizApp(Session.open(write(tmp_path, "chain", chain(60)), inputs=["x0=2,3"]))
    s = app.session
    gate, step = threading.Event(), s.step

    def long_move(how, target=None):  # a move that holds the debugger until released
        with s.moving():
            gate.wait(30)
        return step(how, target)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await ready(pilot)
        await pilot.press("n", "n")
        await wait_for(pilot, lambda: app.main.idle and s.pc == OpRef((), 2), "two steps")
        s.step = long_move
        await pilot.press("c")
        await wait_for(pilot, lambda: app.main.busy == "continue_", "the held move to start")
        # rapid keys while the move holds the debugger: cursor, breakpoints, overlays, scope view
        for _ in range(3):
            await pilot.press("down", "down", "down", "b", "m", "m", "b", "down", "b", "N", "N")
        await pilot.press("up", "up", "up", "b", "m")
        await pilot.pause(0.1)
        assert s._move.locked() and app.main.busy is not None
        dbg = s.debugger
        assert not dbg.breakpoints  # nothing reached the debugger while it ran …
        assert s.breakpoints      # … though the session has them
        assert s.pc == OpRef((), 2) == from_oppath(s.state.pc.path)  # the state of the last move's end
        assert "op#2" in text_of(app.main.query_one("#status"))
        value, why = s.version_value(BlobRef((), "x2", 1))  # the workspace is the move's until it ends
        assert value is None and "move is running" in why
        gate.set()
        await wait_for(pilot, lambda: app.main.idle, "the moves")
        ids = {bp.dbg_id for bp in s.breakpoints.values()}
        assert None not in ids and ids == set(dbg.breakpoints)  # the debugger has exactly the session's
        first = min(r.index for r in s.breakpoints)
        assert s.pc == OpRef((), first) == from_oppath(dbg.pc.path)  # continue stopped at the first of them
        assert not [n for n in app._notifications if n.title == "Internal error"]
        assert s.version_value(BlobRef((), "x2", 1))[0] is not None
