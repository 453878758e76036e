"""The graph uses its pane: TB or LR chosen per view from the pane's shape, deep drawings wrapped into
bands, re-planned on resize, toggled with ``L``; snapshots of a deep (ResNet-50) and a wide net."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.model.modelio import save_net
from engine.model.opdef import create_operator as op
from netviz.app import NetvizApp
from netviz.session import Session
from netviz.widgets.graph_scene import (ARROW_DOWN, ARROW_RIGHT, Scene, build_scene, choose_direction,
                                        estimate_extents, plan_view, view_graph, wrap_scene)
from proto import caffe2_pb2
from tests.netviz.tui_nets import chain, mlp, write
from tests.netviz.waiting import asynctest, ready, wait_for

SIZES = [(80, 24), (160, 48)]


def wide(branches: int = 8) -> caffe2_pb2.NetDef:
    """``X`` into `branches` FC → Relu branches summed: 5 ranks deep, `branches` nodes wide."""
    net = caffe2_pb2.NetDef(name="wide")
    net.external_input.append("X")
    for i in range(branches):
        net.op.append(op("FC", ["X", f"W{i}", f"b{i}"], f"h{i}", name=f"branch{i}/fc"))
        net.op.append(op("Relu", f"h{i}", f"r{i}", name=f"branch{i}/relu"))
        net.external_input.extend([f"W{i}", f"b{i}"])
    net.op.append(op("Sum", [f"r{i}" for i in range(branches)], "y", name="sum"))
    net.external_output.append("y")
    return net


def _scene(tmp_path: Path, net: caffe2_pb2.NetDef, zoom: int = 0, **kw) -> Scene:
    s = Session.open(save_net(net, tmp_path / f"{net.name}.pbtxt"))
    v = s.view(())
    return build_scene(v.net, v.ssa, v.n_forward, False, zoom, params=s.param_names(), **kw)


def _check_geometry(sc: Scene) -> None:
    """Boxes never overlap; every edge leaves its tail on the flow side and ends by its head."""
    cover = np.zeros((sc.height, sc.width), np.int8)
    for n in sc.nodes:
        assert 0 <= n.x and n.x + n.w <= sc.width and 0 <= n.y and n.y + n.h <= sc.height
        cover[n.y:n.y + n.h, n.x:n.x + n.w] += 1
    assert cover.max() == 1
    for e in sc.edges:
        t, h = sc.nodes[e.tail], sc.nodes[e.head]
        ys, xs = np.divmod(e.cells, sc.width)
        if sc.direction == "TB":
            assert any(y == t.y + t.h and t.x <= x < t.x + t.w for y, x in zip(ys, xs))
            assert any(y == h.y - 1 and h.x <= x < h.x + h.w for y, x in zip(ys, xs))
        else:
            assert any(x == t.x + t.w and t.y <= y < t.y + t.h for y, x in zip(ys, xs))
            assert any(x == h.x - 1 and h.y <= y < h.y + h.h for y, x in zip(ys, xs))


def test_lr_scene_edges_run_rightwards_into_arrows(tmp_path):
    sc = _scene(tmp_path, wide(3), direction="LR")
    assert sc.direction == "LR" and sc.width > sc.height
    _check_geometry(sc)
    heads = {sc.nodes[e.head].label for e in sc.edges if any(sc.mask.flat[c] & ARROW_RIGHT for c in e.cells)}
    assert {"FC #0", "Relu #1", "Sum #6", "r0", "y"} <= heads
    assert not (sc.mask & ARROW_DOWN).any()


def test_estimate_is_near_the_real_layout(tmp_path):
    """The estimate decides without running dot: on these nets it is within a third of dot's size."""
    for net in (mlp(), wide(), chain(60)):
        s = Session.open(write(tmp_path, net.name, net))
        v = s.view(())
        ext = estimate_extents(view_graph(v.net, v.ssa, v.n_forward, False, 0))
        for d in ("TB", "LR"):
            sc = build_scene(v.net, v.ssa, v.n_forward, False, 0, direction=d)
            for est, real in zip(ext[d], (sc.width, sc.height)):
                assert abs(est - real) <= max(3, real / 3), (net.name, d, ext[d], (sc.width, sc.height))


def test_choice_follows_the_pane():
    chain_like, fan = {"TB": (20, 400), "LR": (1200, 5)}, {"TB": (120, 25), "LR": (70, 40)}
    assert choose_direction(chain_like, 100, 40) == "TB"     # a deep chain: a column, not a line
    assert choose_direction(fan, 78, 45) == "LR"             # a wide fan fits whole flowing right
    assert choose_direction(fan, 200, 30) == "TB"            # … and whole downwards in a wide, low pane
    assert choose_direction(fan, 0, 0) == "TB"               # no pane yet
    assert plan_view(chain_like, 100, 40) == ("TB", 40)      # folded into columns one pane (40 rows) deep
    assert plan_view(chain_like, 100, 40, "LR")[0] == "LR"   # the user's choice stands


def test_wrapped_scene_keeps_every_node_and_edge(tmp_path):
    base = _scene(tmp_path, chain(80), zoom=1, direction="TB")
    band = base.height // 3 + 4
    sc = wrap_scene(base, band)
    assert sc.columns == 3 and sc.height <= band and sc.width > 2 * base.width
    assert [n.label for n in sc.nodes] == [n.label for n in base.nodes]
    assert [len(e.cells) for e in sc.edges] == [len(e.cells) for e in base.edges]
    assert int((sc.mask > 0).sum()) == int((base.mask > 0).sum())
    cover = np.zeros((sc.height, sc.width), np.int8)
    for n in sc.nodes:
        cover[n.y:n.y + n.h, n.x:n.x + n.w] += 1
    assert cover.max() == 1
    lr = _scene(tmp_path, chain(80), zoom=1, direction="LR")
    rows = wrap_scene(lr, lr.width // 4 + 8)
    assert rows.columns == 4 and rows.width <= lr.width // 4 + 8 and rows.height > 3 * lr.height
    assert [len(e.cells) for e in rows.edges] == [len(e.cells) for e in lr.edges]


@asynctest
async def test_l_cycles_the_flow_and_a_resize_replans(tmp_path):
    app = NetvizApp(Session.open(save_net(wide(), tmp_path / "wide.pbtxt")))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        canvas = app.main.canvas
        assert canvas.scene.direction == "LR"  # 8 branches fit whole flowing right, not down
        for want in ("TB", "LR", "auto"):
            await pilot.press("L")
            await wait_for(pilot, lambda: canvas.direction == want and canvas.scene is not None
                           and canvas.scene.direction == (want if want != "auto" else "LR"), f"flow {want}")
        chain_app = NetvizApp(Session.open(write(tmp_path, "chain", chain(120))))
    async with chain_app.run_test(size=(200, 40)) as pilot:
        await ready(pilot)
        canvas = chain_app.main.canvas
        wrapped = canvas.scene.columns
        assert canvas.scene.direction == "TB" and wrapped >= 2 and canvas.scene.height <= canvas.size.height
        await pilot.resize_terminal(200, 30)
        await wait_for(pilot, lambda: (canvas.scene.direction, canvas.scene.columns) != ("TB", wrapped),
                       "a new plan for a lower pane")
        assert canvas.scene.height <= canvas.size.height  # folded anew to the lower pane
        pane = canvas.scrollable_content_region
        assert canvas.scene.direction == plan_view(canvas.scene.extents, pane.width, pane.height)[0]


async def _laid_out(pilot) -> None:
    await ready(pilot)
    await wait_for(pilot, lambda: pilot.app.main.canvas.scene is not None, "the layout")
    await pilot.pause()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_deep_net_fits_pane(snap_compare, zoo, size):
    app = NetvizApp(Session.open(zoo / "resnet50" / "predict_net.pbtxt"))
    assert snap_compare(app, terminal_size=size, run_before=_laid_out)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_wide_net_fits_pane(snap_compare, tmp_path, size):
    app = NetvizApp(Session.open(save_net(wide(), tmp_path / "wide.pbtxt")))
    assert snap_compare(app, terminal_size=size, run_before=_laid_out)


def test_folded_bands_keep_their_own_widths(zoo):
    """ResNet-50's first band holds the downsampling shortcut beside its chain; the bands after it are
    cut to what they draw, not to that widest band (three bands fit 160x48's 78-cell pane at ops)."""
    from netviz.widgets.graph_scene import WRAP_GAP, build_scene, wrap_scene

    s = Session.open(zoo / "resnet50" / "predict_net.pbtxt")
    v = s.view(())
    sc = wrap_scene(build_scene(v.net, v.ssa, v.n_forward, False, 1, params=s.param_names(), direction="TB",
                                ops=range(0, 60)), 42)
    widths = [b - a - WRAP_GAP["TB"] for a, b in zip(sc.offsets, sc.offsets[1:])]
    assert len(set(widths)) > 1 and sc.offsets[2] + widths[2] <= 78, (sc.offsets, widths)
    for n in sc.nodes:  # every box lies within its own band
        j = max(k for k, o in enumerate(sc.offsets) if o <= n.x)
        end = sc.offsets[j + 1] - WRAP_GAP["TB"] if j + 1 < len(sc.offsets) else sc.width
        assert n.x + n.w <= end, (n.label, n.x, sc.offsets)
