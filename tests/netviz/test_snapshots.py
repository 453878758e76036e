"""Snapshots of the main screens at 80×24 and 160×48 (pytest-textual-snapshot; --snapshot-update to accept)."""
from __future__ import annotations

from pathlib import Path

import pytest

from netviz.app import NetvizApp
from netviz.session import OpRef, Session
from tests.netviz.tui_nets import mlp, while_net, write
from tests.netviz.waiting import ready, wait_for

SIZES = [(80, 24), (160, 48)]


def _app(tmp_path: Path, net, **kw) -> NetvizApp:
    return NetvizApp(Session.open(write(tmp_path, net.name, net), **kw))


async def _settle(pilot) -> None:
    await wait_for(pilot, lambda: pilot.app.main.canvas.scene is not None, "the layout")
    await pilot.pause()


def _keys(*keys: str):
    async def run_before(pilot) -> None:
        await ready(pilot)
        for k in keys:
            await pilot.press(k)
            await _settle(pilot)
    return run_before


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("view,keys", [("overview", ()), ("ssa", ("v",)), ("backward", ("g",)),
                                       ("ops_zoom", ("z", "down", "down")), ("help", ("f1",))])
def test_mlp_screens(snap_compare, tmp_path, size, view, keys):
    assert snap_compare(_app(tmp_path, mlp(), inputs=["X=4,8"]), terminal_size=size, run_before=_keys(*keys))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_while_subnet(snap_compare, tmp_path, size):
    async def run_before(pilot) -> None:
        await ready(pilot)
        pilot.app.main.select(OpRef(((5, "loop_net"),), 0))
        await _settle(pilot)
    assert snap_compare(_app(tmp_path, while_net()), terminal_size=size, run_before=run_before)
