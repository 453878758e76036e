"""Every op box on the canvas names its own op (issue #43): its drawn ``#N`` is its op index in full, at
every zoom and terminal size, forward and with the backward pass, also where the pane's edge cuts a
box (a cut ``SpatialBN #169`` once read ``SpatialBN #16``, another op's number).  Read off the screen text."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from netviz.app import NetvizApp
from netviz.session import OpRef, Session
from netviz.widgets.graph_canvas import fit_op_label
from tests.netviz.waiting import answer, asynctest, ready, screen_text, wait_for

NUMBER = re.compile(r"#(\d+)")


def label_faults(app) -> tuple[int, list[tuple[int, str]]]:
    """(op boxes whose label row is on screen, those whose drawn text there is not their own number:
    (op, text)).  A box wholly in view shows its ``#N`` once; a box the pane's edge cuts shows its own
    number or none, never a part of it."""
    canvas = app.main.canvas
    r, view = canvas.region, canvas.scrollable_content_region
    lines = [line[r.x:r.x + view.width] for line in screen_text(app)[r.y:r.y + view.height]]
    sx, sy = int(canvas.scroll_x), int(canvas.scroll_y)
    seen, faults = 0, []
    for n in canvas.scene.nodes:
        row = n.y + (n.h > 1)
        if n.kind != "op" or not sy <= row < sy + view.height or n.x + n.w <= sx or n.x >= sx + view.width:
            continue
        seen += 1
        text = lines[row - sy][max(n.x - sx, 0):n.x + n.w - sx]
        whole = sx <= n.x and n.x + n.w <= sx + view.width
        if NUMBER.findall(text) != [str(n.op)] and (whole or NUMBER.search(text)):
            faults.append((n.op, text))
    return seen, faults


@pytest.mark.parametrize("size", [(80, 24), (160, 48), (240, 60)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@asynctest
async def test_every_box_shows_its_whole_op_number(zoo: Path, size: tuple[int, int], backward: bool) -> None:
    from netviz.export import default_loss

    session = Session.open(zoo / "resnet50" / "predict_net.pbtxt")
    app = NetvizApp(session)
    async with app.run_test(size=size) as pilot:
        await ready(pilot)
        m = app.main
        if backward:
            await pilot.press("g")
            await answer(pilot, app, default_loss(session.model.predict))
            await wait_for(pilot, lambda: session.show_backward and m.canvas.scene is not None and m.canvas.key[1],
                           "the backward view", timeout=60)
        for zoom in (0, 1, 2):
            m.zoom = zoom
            await wait_for(pilot, lambda: m.canvas.scene is not None and m.canvas.key[3] == m.effective_zoom()
                           and m.idle, "the layout at the zoom", timeout=60)
            # NOTE: the backward view's first frame is the forward ops; a gradient op puts both columns in view
            for target in ((session.view(()).n_forward + 3, 240) if backward else (0, 60)):
                m.select(OpRef((), target))
                await wait_for(pilot, lambda: m.idle and m.canvas.scene is not None and target in m.canvas.scene.by_op,
                               "the window with the op", timeout=60)
                await pilot.pause(0.3)
                # NOTE: and the view a few cells to each side, so the pane's edges cut boxes at other places
                base = int(m.canvas.scroll_x)
                for dx in (0, 5, -7, 11):
                    m.canvas.scroll_to(x=max(0, base + dx), animate=False, immediate=True)
                    await pilot.pause(0.1)
                    seen, faults = label_faults(app)
                    assert seen and not faults, (size, zoom, target, int(m.canvas.scroll_x), faults)


def test_a_label_keeps_its_whole_number() -> None:
    """Too few cells: the type gives way (``…``), the number never does; no room for it: no digit at all."""
    assert fit_op_label("SpatialBN #169", 16) == " SpatialBN #169 "
    assert fit_op_label("SpatialBN #169", 13) == "Spatial… #169"
    assert [fit_op_label("SpatialBNGradient #180", w) for w in (8, 6, 5, 4, 2)] == \
        ["Sp… #180", "…#180 ", "…#180", "#180", "… "]
