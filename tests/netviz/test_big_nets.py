"""Big nets in the TUI: the graph is laid out a window of ops around the cursor, the op tree in
blocks made on demand, and a step relabels only the tree nodes whose marker changed."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from netviz.app import NetvizApp
from netviz.session import OpRef, Session
from netviz.widgets.graph_scene import WINDOW, WINDOW_OPS, WINDOW_STEP, build_scene, window_of
from netviz.widgets.op_tree import BLOCK
from proto import caffe2_pb2
from tests.netviz.tui_nets import write
from tests.netviz.waiting import asynctest, ready, wait_for

HAS_DEBUGGER = importlib.util.find_spec("engine.debugger") is not None


def chain(n: int) -> caffe2_pb2.NetDef:
    net = caffe2_pb2.NetDef(name=f"chain_{n}", external_input=["b0"], external_output=[f"b{n}"])
    for i in range(n):
        net.op.add(type="Relu", input=[f"b{i}"], output=[f"b{i + 1}"])
    return net


@pytest.mark.parametrize("n", [400, 3001])
def test_ladder_window_holds_whole_rungs(tmp_path, n):
    """With the backward pass shown, every cursor position's window holds the cursor and, for each
    gradient op in it, the forward op it differentiates (an op-index window of a 400-op chain's
    backward view held gradient ops 200-399 of forward ops 0-199 with none of their forward ops)."""
    from netviz.widgets.graph_scene import ladder_window

    s = Session.open(write(tmp_path, "chain", chain(n)))
    s.set_backward(True, f"b{n}")
    v = s.view(())
    nf, total = v.n_forward, len(v.net.op)
    assert nf < total and total > WINDOW_OPS
    for op in range(0, total, 3):
        w = ladder_window(v, op)
        assert op in w and list(w) == sorted(set(w)) and len(w) <= WINDOW + WINDOW_STEP, (op, len(w))
        fwd = [o for o in w if o < nf]
        assert len(fwd) == nf if nf <= WINDOW // 2 else WINDOW // 2 - WINDOW_STEP // 2 < len(fwd) <= WINDOW // 2
        assert all(v.forward_of(o) in w for o in w if v.forward_of(o) is not None), op
        assert all(g in w for f in fwd for g in v.grads_of.get(f, ())), op  # and each forward op's gradients

@pytest.mark.parametrize("n", [10, WINDOW_OPS, WINDOW_OPS + 1, 1000, 10_007])
def test_window_holds_the_cursor_away_from_its_edges(n):
    for op in range(0, n, 7):
        w = window_of(n, op)
        assert op in w and w.start >= 0 and w.stop <= n
        if n <= WINDOW_OPS:
            assert w == range(n)
            continue
        assert WINDOW - WINDOW_STEP < len(w) <= WINDOW and w.start % WINDOW_STEP == 0  # the last may be short
        assert w.start == 0 or op - w.start >= WINDOW_STEP
        assert w.stop == n or w.stop - op > WINDOW_STEP


def test_a_window_scene_draws_only_its_ops_with_their_own_indices(tmp_path):
    s = Session.open(write(tmp_path, "chain", chain(1000)))
    v = s.view(())
    sc = build_scene(v.net, v.ssa, v.n_forward, False, 1, ops=window_of(1000, 500))
    assert set(sc.by_op) == set(window_of(1000, 500)) and sc.window == window_of(1000, 500)
    assert len(sc.edges) == WINDOW - 1


@asynctest
async def test_big_net_tree_blocks_fill_on_demand_and_canvas_follows_the_cursor(tmp_path):
    app = NetvizApp(Session.open(write(tmp_path, "chain", chain(1000))))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        main = app.main
        assert len(main.op_tree.nodes_by_ref) == BLOCK  # the block holding op 0, nothing else
        main.select(OpRef((), 900))
        await wait_for(pilot, lambda: main.canvas.scene is not None and 900 in main.canvas.scene.by_op,
                       "the window around op 900")
        assert OpRef((), 900) in main.op_tree.nodes_by_ref and main.op_tree.selected_ref == OpRef((), 900)
        assert len(main.op_tree.nodes_by_ref) == 2 * BLOCK
        assert main.canvas.key[4] == window_of(1000, 900).start


@pytest.mark.skipif(not HAS_DEBUGGER, reason="engine.debugger not there yet")
@asynctest
async def test_a_step_relabels_only_what_changed(tmp_path):
    app = NetvizApp(Session.open(write(tmp_path, "chain", chain(50)), inputs=["b0=4,8"]))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        tree = app.main.op_tree
        for k in range(3):
            await pilot.press("n")
            await wait_for(pilot, lambda: app.session.pc == OpRef((), k + 1), f"pc at op {k + 1}")
        relabelled = []
        label_of = tree.label_of
        # NOTE: every label made while the step is drawn (the lines on screen are drawn fitted to the list)
        tree.label_of = lambda ref, room=None: (relabelled.append(ref), label_of(ref, room))[1]
        await pilot.press("n")
        await wait_for(pilot, lambda: app.session.pc == OpRef((), 4), "pc at op 4")
        await pilot.pause()
        del tree.label_of
        assert sorted(r.index for r in relabelled) == [3, 4] and all(not r.path for r in relabelled)
        labels = {r: str(n.label) for r, n in tree.nodes_by_ref.items()}  # NOTE: reading a label makes a stale one
        assert labels[OpRef((), 3)].startswith("✓") and labels[OpRef((), 4)].startswith("→")
        assert labels[OpRef((), 5)].startswith(" ")
