"""Screens as tests: what the graph canvas and its minimap show, read off the screen text.

The canvas shows one contiguous stretch of the net around the cursor/pc (consecutive op numbers,
never bands from far apart side by side), folds to the pane at every zoom, follows the pc, draws
the value's shape once an op ran and keeps its marks inside box borders; the minimap covers the
whole net and jumps the view.
"""
from __future__ import annotations

import contextlib
import re

import pytest

from netviz.app import NetvizApp
from netviz.session import Session
from netviz.widgets.graph_scene import STATIC_MARK, shape_text
from netviz.widgets.minimap import Minimap
from tests.netviz.tui_nets import chain, write
from tests.netviz.waiting import asynctest, ready, screen_text, wait_for


def canvas_lines(app) -> list[str]:
    """The canvas's cells on screen, line by line."""
    r = app.main.canvas.region
    return [line[r.x:r.x + r.width] for line in screen_text(app)[r.y:r.y + r.height]]


def ops_seen(app) -> list[int]:
    """Op numbers (``#12``) drawn on the canvas now, sorted."""
    return sorted({int(m) for line in canvas_lines(app) for m in re.findall(r"#(\d+)", line)})


def run_through(ops: list[int], through: int) -> range:
    """The run of consecutive numbers in `ops` that contains `through` (empty if absent)."""
    if through not in ops:
        return range(0)
    have, lo, hi = set(ops), through, through
    while lo - 1 in have:
        lo -= 1
    while hi + 1 in have:
        hi += 1
    return range(lo, hi + 1)


def assert_contiguous(ops: list[int], pc: int, run: int) -> None:
    """`run` consecutive ops through `pc`, and no op far from them (a branch may sit beside its
    stretch: ResNet's projection shortcut #12 beside #4; a band far down the net may not)."""
    stretch = run_through(ops, pc)
    assert len(stretch) >= run, (pc, ops)
    # NOTE: an Inception module's branches are drawn side by side in any order: a band's left part
    # may hold ops numbered a module later than the stretch, and a pane wide enough for the whole
    # module shows its last branch (v2's #47-#51 beside #0-#20 at 240x60); far means beyond twice a
    # stretch's length
    slack = max(8, 2 * len(stretch))
    far = [o for o in ops if not stretch.start - slack <= o < stretch.stop + slack]
    assert not far, f"ops from distant places beside #{stretch.start}-#{stretch.stop - 1}: {far}"


@contextlib.asynccontextmanager
async def shown(path, size: tuple[int, int]):
    """The app on `path` at `size`, its first drawing laid out and the UI idle."""
    app = NetvizApp(Session.open(path))
    async with app.run_test(size=size) as pilot:
        await ready(pilot)
        await settle(pilot, app)
        yield app, pilot


async def settle(pilot, app) -> None:
    await wait_for(pilot, lambda: app.main.idle and app.main.canvas.scene is not None, "an idle app with a drawing")
    await pilot.pause(0.3)


async def steps(pilot, app, n: int) -> None:
    for _ in range(n):
        await pilot.press("n")
        await wait_for(pilot, lambda: app.main.idle, "the step")
    await settle(pilot, app)


RESNET_RUN = {(80, 24): 2, (160, 48): 8, (240, 60): 12}


@pytest.mark.parametrize("size", list(RESNET_RUN), ids=lambda s: f"{s[0]}x{s[1]}")
@asynctest
async def test_resnet50_start_and_after_40_steps(zoo, size):
    async with shown(zoo / "resnet50" / "predict_net.pbtxt", size) as (app, pilot):
        assert_contiguous(ops_seen(app), 0, RESNET_RUN[size])
        await steps(pilot, app, 40)
        assert app.main.canvas.pc_op == 40
        seen = ops_seen(app)
        assert_contiguous(seen, 40, RESNET_RUN[size])
        assert any("▶" in line for line in canvas_lines(app))  # the pc's mark is in view


@asynctest
async def test_resnet50_ops_zoom_shows_a_dozen_consecutive_ops(zoo):
    app = NetvizApp(Session.open(zoo / "resnet50" / "predict_net.pbtxt"))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("z")
        await wait_for(pilot, lambda: app.main.canvas.key[3] == 1 and app.main.canvas.scene is not None, "ops zoom")
        await settle(pilot, app)
        assert_contiguous(ops_seen(app), 0, 12)


@pytest.mark.parametrize("size", list(RESNET_RUN), ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("net", ["densenet121", "inception_v2"])
@asynctest
async def test_big_zoo_nets_start_contiguous(zoo, net, size):
    async with shown(zoo / net / "predict_net.pbtxt", size) as (app, pilot):
        assert_contiguous(ops_seen(app), 0, RESNET_RUN[size])


@asynctest
async def test_first_z_on_densenet_changes_the_drawing(zoo):
    app = NetvizApp(Session.open(zoo / "densenet121" / "predict_net.pbtxt"))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        shown = app.main.effective_zoom()
        await pilot.press("z")
        await settle(pilot, app)
        assert app.main.effective_zoom() == shown + 1 and app.main.canvas.key[3] == shown + 1
        assert_contiguous(ops_seen(app), 0, 12)


@asynctest
async def test_shapes_become_the_values_and_marks_keep_borders(zoo):
    async with shown(zoo / "resnet50" / "predict_net.pbtxt", (160, 48)) as (app, pilot):
        text = "\n".join(canvas_lines(app))
        static = shape_text(app.session.shapes(()).get(("gpu_0/conv1", 1)))
        assert STATIC_MARK + static in text  # before the run: the inferred shape, marked
        await steps(pilot, app, 2)
        ran = shape_text(app.session.records_in(())[0].outputs[0])
        assert "?" not in ran
        lines = canvas_lines(app)
        assert any(ran in line and STATIC_MARK + ran not in line for line in lines), ran
        text = "\n".join(lines)
        assert "│ Conv #0✓│" in text  # the ran mark inside the border, both borders whole
        assert "║▶Relu #2 ║" in text  # the pc likewise (an in-place op: double-line borders)


@asynctest
async def test_map_zoom_labels_keep_op_numbers(zoo):
    app = NetvizApp(Session.open(zoo / "resnet50" / "predict_net.pbtxt"))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        for _ in range(3):
            await pilot.press("z")
        await wait_for(pilot, lambda: app.main.canvas.key[3] == 3 and app.main.canvas.scene is not None, "map zoom")
        await settle(pilot, app)
        assert all(f"#{n.op}" in n.label for n in app.main.canvas.scene.nodes if n.op is not None)
        assert_contiguous(ops_seen(app), 0, 12)


@asynctest
async def test_w_widens_the_graph_and_it_reflows(zoo):
    async with shown(zoo / "resnet50" / "predict_net.pbtxt", (160, 48)) as (app, pilot):
        narrow, seen = app.main.canvas.size.width, len(ops_seen(app))
        await pilot.press("W")
        await wait_for(pilot, lambda: app.main.canvas.size.width > narrow + 60, "the wide canvas")
        await settle(pilot, app)
        assert len(ops_seen(app)) > seen
        assert_contiguous(ops_seen(app), 0, 12)
        await pilot.press("W")
        await wait_for(pilot, lambda: app.main.canvas.size.width == narrow, "the panes back")


async def _minimap_covers_and_jumps(pilot, app, n_ops: int, by_keys: bool) -> None:
    await ready(pilot)
    await settle(pilot, app)
    mini = app.main.query_one(Minimap)
    ticks, marks = mini.text()
    cells = mini.cells()
    assert cells[0].start == 0 and cells[-1].stop == n_ops and len(marks) == len(cells) <= mini.size.width
    assert ticks.startswith("#0") and f"#{cells[len(cells) // 2].start}" in ticks or len(ticks.split()) >= 3
    shown = mini.viewport()
    assert shown is not None and shown[0] == 0
    await steps(pilot, app, 1)
    assert mini.text()[1][0] in "█▶"  # op 0 ran (or the pc is still in its cell)
    target = len(cells) * 3 // 4
    if by_keys:
        await pilot.press("J")
        await pilot.press("end")
        for _ in range(len(cells) - 1 - target):
            await pilot.press("left")
        await pilot.press("enter")
    else:
        await pilot.click(Minimap, offset=(target, 1))
    want = mini.op_at(target)
    await wait_for(pilot, lambda: app.main.selected is not None and app.main.selected.index == want, "the jump")
    await wait_for(pilot, lambda: (v := mini.viewport()) is not None and v[0] <= want <= v[1],
                   "the canvas showing the op jumped to")
    assert want in ops_seen(app)


@asynctest
async def test_minimap_densenet121_click_jumps(zoo):
    app = NetvizApp(Session.open(zoo / "densenet121" / "predict_net.pbtxt"))
    async with app.run_test(size=(160, 48)) as pilot:
        await _minimap_covers_and_jumps(pilot, app, 668, by_keys=False)


@asynctest
async def test_minimap_10k_chain_key_jumps(tmp_path):
    app = NetvizApp(Session.open(write(tmp_path, "chain", chain(10_000)), inputs=["x0=2,3"]))
    async with app.run_test(size=(160, 48)) as pilot:
        await _minimap_covers_and_jumps(pilot, app, 10_000, by_keys=True)


def edge_labels(sc, op: int) -> tuple[set[str], set[str]]:
    """Labels of the nodes with an edge into and out of op `op`'s box."""
    k = sc.by_op[op]
    return ({sc.nodes[e.tail].label for e in sc.edges if e.head == k},
            {sc.nodes[e.head].label for e in sc.edges if e.tail == k})


@asynctest
async def test_mask_rcnn_if_box_shows_the_blobs_its_branches_use(zoo):
    """Mask R-CNN's If #111 declares only ``is_bbox_rois_empty``; its else_net reads ``xif3_6``,
    ``bbox_nms`` and ``im_info`` and writes ``mask_fcn_probs`` (a net output)."""
    from netviz.session import OpRef

    app = NetvizApp(Session.open(zoo / "mask_rcnn_2go_fp32" / "model.pbtxt"))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        app.main.select(OpRef((), 111))
        await settle(pilot, app)
        ins, outs = edge_labels(app.main.canvas.scene, 111)
        assert {"is_bbox_rois_empty", "xif3_6", "bbox_nms", "im_info"} <= ins
        assert "mask_fcn_probs" in outs
        text = "\n".join(canvas_lines(app))
        assert "If #111" in text and "not run yet" in text and "bbox_nms" in text


@asynctest
async def test_while_example_box_counts_its_iterations():
    """examples/while_net loops 3 times (examples/control_flow.py); the While box says so after a
    run, and its loop-carried blobs (``acc``, ``i``) are drawn into and out of it."""
    from pathlib import Path

    from tests.netviz.waiting import continue_to_end

    net = Path(__file__).resolve().parents[2] / "examples" / "while_net" / "predict_net.pb"
    async with shown(net, (160, 48)) as (app, pilot):
        ins, outs = edge_labels(app.main.canvas.scene, 2)
        assert {"acc", "i"} <= {label.rsplit("/", 1)[-1] for label in ins}
        assert {"acc", "i"} <= {label.rsplit("/", 1)[-1] for label in outs}
        assert "not run yet" in "\n".join(canvas_lines(app))
        await continue_to_end(pilot, app)
        await settle(pilot, app)
        text = "\n".join(canvas_lines(app))
        assert "3 iterations" in text and "While #2" in text


@asynctest
async def test_resnet50_with_backward_pass_stays_contiguous(zoo):
    """With the backward pass (``g``, loss asked for), the first frame starts at #0 and a backward op
    chosen far down the net is shown among its neighbours, beside the forward ops they differentiate
    (the ladder, issue #43) and nothing else from afar."""
    from netviz.session import OpRef
    from tests.netviz.waiting import backward_view

    session = Session.open(zoo / "resnet50" / "predict_net.pbtxt")
    app = NetvizApp(session)
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await backward_view(pilot, app)
        await settle(pilot, app)
        seen, view = ops_seen(app), session.view(())
        assert_contiguous([o for o in seen if o < view.n_forward], 0, 6)
        # NOTE: a ladder from the first rung: each forward op at the top beside its gradient op (the window
        # held no gradient op of the first 25 forward ops, so the first frame had no gradient column)
        assert all(set(view.grads_of.get(o, ())) & set(seen) for o in range(6) if view.grads_of.get(o)), seen
        n_forward = view.n_forward
        target = n_forward + 30
        app.main.select(OpRef((), target))
        await wait_for(pilot, lambda: app.main.canvas.scene is not None and target in app.main.canvas.scene.by_op,
                       "the window with the backward op")
        await settle(pilot, app)
        seen, view = ops_seen(app), session.view(())
        assert_contiguous([o for o in seen if o >= n_forward], target, 6)
        near = {view.forward_of(o) for o in range(target - 12, target + 12)} - {None}
        beside = [o for o in seen if o < n_forward]  # a gradient op's forward op stands on its rank, in view
        assert beside and min(near) - 8 <= min(beside) and max(beside) <= max(near) + 8, (beside, sorted(near))


@asynctest
async def test_stepping_moves_the_view_forwards_only(zoo):
    """30 steps through ResNet-50: the pc is on screen after every step; the view moves at most
    twice per band the pc enters (its band at the far side, then the near side), and back only to a
    box drawn before the view (a projection shortcut, #12, sits beside #4)."""
    from bisect import bisect_right

    async with shown(zoo / "resnet50" / "predict_net.pbtxt", (160, 48)) as (app, pilot):
        canvas = app.main.canvas
        sc = canvas.scene
        assert len(sc.offsets) == sc.columns > 1  # NOTE: bands of their own widths, each starting at its offset
        before, moves, bands = int(canvas.scroll_x), 0, set()
        for k in range(1, 31):
            await steps(pilot, app, 1)
            box = sc.nodes[sc.by_op[k]]
            bands.add(bisect_right(sc.offsets, box.x) - 1)
            assert canvas.pc_op == k and k in ops_seen(app), (k, ops_seen(app))
            now = int(canvas.scroll_x)
            if now < before:
                assert box.x < before, f"#{k} lies ahead, yet the view went back from {before} to {now}"
            moves += now != before
            before = now
        assert 0 < moves <= 2 * len(bands), (moves, bands)


@asynctest
async def test_ops_zoom_marks_take_a_border_cell(zoo):
    """Ops-zoom boxes have no padding inside their borders (three ResNet-50 bands fit 160x48): the pc's ▶
    and a run's ✓ take the border's cell there, and the label stays whole."""
    async with shown(zoo / "resnet50" / "predict_net.pbtxt", (160, 48)) as (app, pilot):
        app.main.zoom = 1
        await wait_for(pilot, lambda: app.main.canvas.key[3] == 1 and app.main.canvas.scene is not None, "ops zoom")
        await steps(pilot, app, 2)
        await settle(pilot, app)
        text = "\n".join(canvas_lines(app))
        assert "▶Relu #2║" in text and "│Conv #0✓" in text, text
