"""Name-scope grouping (`N`): ops nest by scope, as deep as the names go, in collapsed blocks that
open for the op at the cursor (stepping, search, breakpoints) and close again behind it.

The tree's shape is checked on the zoo's GoogLeNet (inception_v1), Inception-v2 and ResNet-50;
the stepping on a small scoped net that runs in milliseconds."""
from __future__ import annotations

from pathlib import Path

import pytest

from engine.model.modelio import load_net
from engine.model.opdef import create_operator as op
from netviz.app import NetvizApp
from netviz.screens.search import SearchScreen
from netviz.session import OpRef, Session
from netviz.widgets.op_tree import ScopeBlock, name_of, scope_tree
from proto import caffe2_pb2
from tests.netviz.tui_nets import write
from tests.netviz.waiting import asynctest, ready, screen_text, wait_for


def _tree(zoo: Path, model: str) -> tuple[caffe2_pb2.NetDef, list[ScopeBlock | int]]:
    net = load_net(zoo / model / "predict_net.pbtxt")
    return net, scope_tree([(i, name_of(o)) for i, o in enumerate(net.op)])


def _flat(items: list[ScopeBlock | int]) -> list[int]:
    return [i for x in items for i in ([x] if isinstance(x, int) else _flat(x.items))]


def _blocks(items: list[ScopeBlock | int]) -> list[ScopeBlock]:
    return [b for x in items if isinstance(x, ScopeBlock) for b in (x, *_blocks(x.items))]


def _top(items: list[ScopeBlock | int]) -> dict[str, ScopeBlock]:
    return {x.name: x for x in items if isinstance(x, ScopeBlock)}


@pytest.mark.parametrize("model", ["inception_v1", "inception_v2", "resnet50"])
def test_every_op_once_in_order_and_no_block_of_one(zoo, model):
    net, items = _tree(zoo, model)
    assert _flat(items) == list(range(len(net.op)))
    for b in _blocks(items):
        assert b.count == len(_flat(b.items)) >= 2, b.name
        assert not (len(b.items) == 1 and isinstance(b.items[0], ScopeBlock)), f"{b.name}: a chain not merged"


def test_googlenet_inception_blocks_hold_their_ops(zoo):
    net, items = _tree(zoo, "inception_v1")
    top = _top(items)
    for name in ("inception_3a/", "inception_4e/", "inception_5b/"):
        members = [i for i, o in enumerate(net.op) if name_of(o).startswith(name)]
        assert _flat(top[name].items) == members and top[name].count == 14
    assert not [x for x in items if isinstance(x, ScopeBlock) and x.count == 1]


def test_inception_v2_nests_as_deep_as_the_names(zoo):
    _, items = _tree(zoo, "inception_v2")
    block = _top(items)["inception_3a/"]
    inner = _top(block.items)["inception_3a/1x1/"]
    deepest = _top(inner.items)["inception_3a/1x1/bn/"]
    assert (block.count, inner.count, deepest.count) == (37, 4, 3)


def test_resnet50_without_scopes_nests_by_name_parts(zoo):
    net, items = _tree(zoo, "resnet50")  # every name is gpu_0/<something>: the shared scope is dropped
    top = _top(items)
    assert {"gpu_0/res2_", "gpu_0/res3_", "gpu_0/res4_", "gpu_0/res5_"} <= set(top)
    res2 = top["gpu_0/res2_"]
    assert [b.name for b in res2.items] == ["gpu_0/res2_0_", "gpu_0/res2_1_", "gpu_0/res2_2_"]
    assert res2.count == sum(name_of(o).startswith("gpu_0/res2_") for o in net.op)


def _scoped_net() -> caffe2_pb2.NetDef:
    """enc/{layer0,layer1}/{fc,relu} → dec/out: two levels of scope, a single-child chain (dec/out/)."""
    ops, x = [], "x"
    for k in range(2):
        ops.append(op("Scale", x, f"enc/layer{k}/y", name=f"enc/layer{k}/scale", scale=2.0))
        ops.append(op("Relu", f"enc/layer{k}/y", f"enc/layer{k}/h", name=f"enc/layer{k}/relu"))
        x = f"enc/layer{k}/h"
    ops.append(op("Scale", x, "dec/out/a", name="dec/out/scale_a", scale=0.5))
    ops.append(op("Scale", "dec/out/a", "y", name="dec/out/scale_b", scale=0.5))
    net = caffe2_pb2.NetDef(name="scoped", op=ops)
    net.external_input.append("x")
    net.external_output.append("y")
    return net


def _rows(app) -> list[str]:
    tree = app.main.op_tree
    lines = screen_text(app)[tree.region.y:tree.region.bottom]
    return [line[tree.region.x:tree.region.right].strip(" │├└─") for line in lines]


@asynctest
async def test_stepping_and_breakpoints_open_the_block_of_the_pc(tmp_path):
    app = NetvizApp(Session.open(write(tmp_path, "scoped", _scoped_net()), inputs=["x=2,3"]))
    async with app.run_test(size=(120, 30)) as pilot:
        await ready(pilot)
        tree = app.main.op_tree
        await pilot.press("N")
        await wait_for(pilot, lambda: tree.group_scopes and tree.populated, "the scope tree")
        await pilot.pause()
        rows = _rows(app)
        assert any(r.endswith("enc/ · 4 ops") for r in rows) and any(r.endswith("dec/out/ · 2 ops") for r in rows)
        app.session.toggle_breakpoint(OpRef((), 4))  # dec/out/scale_a, in a collapsed block
        await pilot.press("c")
        await wait_for(pilot, lambda: app.session.pc == OpRef((), 4) and app.main.idle, "the breakpoint")
        await wait_for(pilot, lambda: tree.selected_ref == OpRef((), 4), "the tree cursor at the pc")
        await pilot.pause()
        assert tree.nodes_by_ref[OpRef((), 4)].parent.is_expanded
        assert not tree.nodes_by_ref[OpRef((), 0)].parent.is_expanded  # enc/ closed again behind the pc
        assert any("4 Scale scale_a" in r for r in _rows(app))  # the label drops the block's name
        await pilot.press(*"rnnn")  # quick keys: restart, then three steps into enc/layer1/
        await wait_for(pilot, lambda: app.main.idle and app.session.pc == OpRef((), 3), "the moves")
        await wait_for(pilot, lambda: tree.selected_ref == OpRef((), 3), "the cursor in enc/layer1/")
        node = tree.nodes_by_ref[OpRef((), 3)]
        assert node.parent.data == ("scope", "enc/layer1/") and node.parent.is_expanded
        assert not tree.nodes_by_ref[OpRef((), 4)].parent.is_expanded
        await pilot.press("slash")  # search finds an op in a closed block, and opens it
        await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen), "search")
        await pilot.press(*"scale_b", "enter")
        await wait_for(pilot, lambda: tree.selected_ref == OpRef((), 5), "the cursor on the found op")
        assert tree.nodes_by_ref[OpRef((), 5)].parent.is_expanded
        assert not tree.nodes_by_ref[OpRef((), 3)].parent.is_expanded


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_googlenet_scope_tree_snapshot(snap_compare, zoo, size):
    async def run_before(pilot) -> None:
        app = pilot.app
        await ready(pilot)
        await pilot.press("N")
        await wait_for(pilot, lambda: app.main.op_tree.group_scopes and app.main.op_tree.populated, "the scope tree")
        app.main.select(OpRef((), 12))  # in inception_3a/: that block opens, the others stay closed
        await wait_for(pilot, lambda: app.main.op_tree.selected_ref == OpRef((), 12), "the cursor")
        await wait_for(pilot, lambda: app.main.canvas.scene is not None, "the layout")
        app.clear_notifications()
        await pilot.pause(0.3)
        rows = _rows(app)
        assert any(r.startswith("▼ inception_3a/") for r in rows), rows  # its count is cut at 80 columns
        if size[0] >= 160:
            assert any(r.startswith("▼ inception_3a/ · 14 ops") for r in rows), rows
            assert any(r.startswith("▶ inception_3b/ · 14 ops") for r in rows), rows
    app = NetvizApp(Session.open(zoo / "inception_v1" / "predict_net.pbtxt"))
    assert snap_compare(app, terminal_size=size, run_before=run_before)
