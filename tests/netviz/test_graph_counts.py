"""How much of ResNet-50 the graph canvas shows around the cursor, per terminal size and zoom (issue #43):
whole op boxes inside the pane, and how many of them run on from the cursor's op in program order.

80×24 starts at the zoom its pane calls for (at least 6 boxes); 160×48's goals (12 at detail, 30 at ops,
60 at overview) are met: ops (was 22) since folded bands keep their own widths and ops-zoom boxes lost
their padding (three bands in the 78-cell pane)."""
from __future__ import annotations

from pathlib import Path

import pytest

from netviz.app import NetvizApp
from netviz.session import Session
from netviz.widgets.graph_scene import MIN_VIEW_OPS, default_zoom
from tests.netviz.waiting import asynctest, ready, wait_for


def visible_ops(canvas) -> list[int]:
    """Op indices whose whole box lies inside the canvas's viewport."""
    r, sx, sy = canvas.scrollable_content_region, int(canvas.scroll_x), int(canvas.scroll_y)
    return sorted(n.op for n in canvas.scene.nodes if n.kind == "op" and sx <= n.x and n.x + n.w <= sx + r.width
                  and sy <= n.y and n.y + n.h <= sy + r.height)


def run_from(ops: list[int], start: int) -> int:
    """How many ops from `start` on, in program order, are all in `ops`."""
    have, k = set(ops), 0
    while start + k in have:
        k += 1
    return k


async def shown(zoo: Path, size: tuple[int, int], zoom: int | None) -> tuple[int, list[int]]:
    """(the zoom shown, the ops fully in view) of ResNet-50 at `size`, `zoom` (None: the default)."""
    app = NetvizApp(Session.open(zoo / "resnet50" / "predict_net.pbtxt"))
    async with app.run_test(size=size) as pilot:
        await ready(pilot)
        m = app.main
        if zoom is not None:
            m.zoom = zoom
        await wait_for(pilot, lambda: m.canvas.scene is not None and m.canvas.key[3] == m.effective_zoom(),
                       "the layout at the zoom shown", timeout=60)
        await pilot.pause()
        return m.effective_zoom(), visible_ops(m.canvas)


def test_default_zoom_follows_the_pane() -> None:
    assert default_zoom(26, 18) == 2 and default_zoom(78, 42) == 0 and default_zoom(0, 0) == 0
    assert [default_zoom(w, 18) for w in (26, 60, 120)] == sorted(default_zoom(w, 18) for w in (26, 60, 120))[::-1]


@asynctest
async def test_80x24_default_zoom_shows_six_ops_around_the_cursor(zoo: Path) -> None:
    zoom, ops = await shown(zoo, (80, 24), None)
    assert zoom > 0 and len(ops) >= MIN_VIEW_OPS and run_from(ops, 0) >= MIN_VIEW_OPS, (zoom, ops)


GOALS = [((160, 48), 0, 12, ()), ((160, 48), 1, 30, ()), ((160, 48), 2, 60, ()),
         ((240, 60), 0, 12, ()), ((240, 60), 1, 30, ()), ((240, 60), 2, 60, ())]


@pytest.mark.parametrize("size,zoom,goal", [pytest.param(s, z, g, marks=m, id=f"{s[0]}x{s[1]}-zoom{z}")
                                            for s, z, g, m in GOALS])
@asynctest
async def test_ops_in_view(zoo: Path, size: tuple[int, int], zoom: int, goal: int) -> None:
    _, ops = await shown(zoo, size, zoom)
    assert len(ops) >= goal and run_from(ops, 0) >= 3 * goal // 4, (len(ops), ops)


@pytest.mark.parametrize("model,wide", [("inception_v2/predict_net.pbtxt", 3), ("mask_rcnn_2go_fp32/model.pbtxt", 2)])
def test_parallel_branches_stand_side_by_side(zoo: Path, model: str, wide: int) -> None:
    """Inception's branches (3-4 per module) and Mask R-CNN's RPN heads (2) share rows of the canvas's
    (unfolded) drawing, not one thin column.  (DenseNet-121's ops are one chain: its fans are edges.)"""
    from collections import Counter

    from netviz.widgets.graph_scene import build_scene, window_of

    s = Session.open(zoo / model)
    v = s.view(())
    sc = build_scene(v.net, v.ssa, v.n_forward, False, 1, params=s.param_names(), direction="TB",
                     ops=window_of(len(v.net.op), len(v.net.op) // 2))
    rows = Counter(n.y for n in sc.nodes if n.kind == "op")
    assert max(rows.values()) >= wide, rows.most_common(3)
