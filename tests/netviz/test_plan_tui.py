"""The TUI on a PlanDef (examples/mlp/plan.pbtxt): its step tree is the op tree, and n/s/f/c move the
pc through steps and across iterations of the training net, the status line naming step and iteration."""
from __future__ import annotations

from pathlib import Path

from netviz.app import NetvizApp
from netviz.session import OpRef, Session
from netviz.widgets.status_line import StatusLine
from tests.netviz.waiting import asynctest, ready, text_of, wait_for

PLAN = Path(__file__).resolve().parents[2] / "examples" / "mlp" / "plan.pbtxt"
TRAIN = ((1, "mlp_train"),)  # the net the train step repeats, as a subnet of step op #1


async def _move(pilot, key: str, what: str) -> None:
    s = pilot.app.session
    before = s.last_stop
    await pilot.press(key)
    await wait_for(pilot, lambda: s.last_stop is not before, what)


@asynctest
async def test_plan_steps_across_an_iteration_boundary_and_the_screen_shows_it():
    app = NetvizApp(Session.open(PLAN))
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        await ready(pilot)
        s, tree = app.session, app.main.op_tree
        await wait_for(pilot, lambda: tree.populated, "the op tree")
        steps = {r: str(n.label) for r, n in tree.nodes_by_ref.items() if not r.path}
        assert "ExecutionStep init" in steps[OpRef((), 0)] and "ExecutionStep train (×20)" in steps[OpRef((), 1)]
        assert OpRef(TRAIN, 14) in tree.nodes_by_ref  # the train step's net, op by op

        await _move(pilot, "n", "the init step")            # runs the init step whole
        assert s.pc == OpRef((), 1) and s.record(OpRef(((0, "mlp_init"),), 7)) is not None
        await wait_for(pilot, lambda: any("plan 'mlp_plan'" in n.message for n in app._notifications),
                       "the plan notice (after the first move)")
        await _move(pilot, "s", "into the train step")      # iteration 0 of mlp_train
        assert s.pc == OpRef(TRAIN, 0)
        status = app.main.query_one(StatusLine)
        await wait_for(pilot, lambda: "train iteration 0 · net mlp_train" in text_of(status), "iteration 0 shown")
        await wait_for(pilot, lambda: str(tree.nodes_by_ref[OpRef(TRAIN, 0)].label).startswith("▶")
                       or s.pc == OpRef(TRAIN, 0), "the pc marker")

        for k in range(15):                                 # n: op by op to the end of iteration 0
            await _move(pilot, "n", f"op {k}")
        await _move(pilot, "n", "across the iteration boundary")
        assert s.pc == OpRef(TRAIN, 0) and s.debugger.ws.fetch_blob("ITER").tolist() == [1]
        await wait_for(pilot, lambda: "train iteration 1 · net mlp_train" in text_of(status), "iteration 1 shown")
        assert s.path_label(TRAIN) == ("mlp_plan › op#1 ExecutionStep train › mlp_train "
                                       "(train iteration 1 · net mlp_train)")

        await _move(pilot, "n", "op 0 of iteration 1")
        await _move(pilot, "f", "finish iteration 1")       # f: over the rest of the iteration
        assert s.pc == OpRef(TRAIN, 0) and s.debugger.ws.fetch_blob("ITER").tolist() == [2]
        await wait_for(pilot, lambda: "train iteration 2 · net mlp_train" in text_of(status), "iteration 2 shown")

        await _move(pilot, "c", "the end of the plan")      # c: the remaining 17 iterations
        assert s.last_stop.reason == "end" and s.debugger.ws.fetch_blob("ITER").tolist() == [20]
        assert s.record(OpRef((), 1)) is not None           # the train step completed
