"""What the screen shows at 80×24, 140×40 and 160×48: the footer's essential keys whole, the overlay
legend whole beside a long (deep-subnet) breadcrumb.  Snapshots (pytest-textual-snapshot,
``--snapshot-update`` to accept) that also assert on the rendered screen text."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from netviz.actions import ACTIONS, FOOTER_FIRST, key_display
from netviz.app import NetvizApp
from netviz.session import OpRef, Session
from tests.netviz.tui_nets import mlp, nested_net, write
from tests.netviz.waiting import ready, screen_text, wait_for

DEEP = ((3, "then_net"), (3, "loop_net"), (2, "loop_net"))  # nested_net: If › While › While


def _footer(app) -> str:
    return screen_text(app)[-1]


@pytest.mark.parametrize("size", [(80, 24), (140, 40), (160, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_footer_shows_the_essential_keys_whole(snap_compare, tmp_path, size):
    async def run_before(pilot) -> None:
        await ready(pilot)
        await pilot.pause()
        footer = _footer(pilot.app)
        for aid in FOOTER_FIRST:
            keys, _, _, label = ACTIONS[aid]
            assert f" {key_display(keys).split(' / ')[0]} {label} " in footer, (aid, footer)
        # every key shown is whole: before the palette key, the footer is `key label` pairs only
        labels = {label for *_, label in ACTIONS.values() if label}
        for key_label in re.split(r"\s{2,}", footer.split("▏")[0].strip()):
            assert key_label.split(" ", 1)[1] in labels, (key_label, footer)
    app = NetvizApp(Session.open(write(tmp_path, "mlp", mlp()), inputs=["X=4,8"]))
    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_overlay_legend_shows_whole_beside_a_deep_breadcrumb(snap_compare, tmp_path, size):
    async def crumb_text(pilot) -> str:
        app = pilot.app
        app.main.select(OpRef(DEEP, 0))
        await wait_for(pilot, lambda: app.main.canvas.scene is not None and app.main.path == DEEP, "the inner net")
        await pilot.pause(0.3)
        app.clear_notifications()
        await pilot.pause()
        crumb = app.main.query_one("#crumb")
        lines = screen_text(app)[crumb.region.y:crumb.region.bottom]
        return "\n".join(line[crumb.region.x:crumb.region.right] for line in lines)

    async def run_before(pilot) -> None:
        app = pilot.app
        await ready(pilot)
        await pilot.press("c")  # run to the end: every op has a time
        await wait_for(pilot, lambda: app.main.idle and app.session.last_stop is not None, "the run")
        await pilot.press("m")  # overlay: time
        shown = await crumb_text(pilot)
        assert re.search(r"(time )?■■■■■ \d[\d.]*µs–\d[\d.]*[µm]s", shown), shown
        assert "loop_net" in shown and "…" in shown, shown  # the path, cut from the left
        assert "overlay:time" in screen_text(app)[-2]  # the status line names the overlay
        # the snapshot: the NaN overlay after a restart (times differ run to run; its legend does not)
        await pilot.press("m", "r")
        await wait_for(pilot, lambda: app.main.idle and app.session.pc == OpRef((), 0), "the restart")
        tree = app.main.op_tree
        tree.rebuild()  # NOTE: the tree's width (its scrollbar) otherwise keeps the time tags' widest label
        await wait_for(pilot, lambda: tree.populated, "the tree")
        shown = await crumb_text(pilot)
        assert "NaN/Inf" in shown and "finite" in shown and "loop_net" in shown, shown
    app = NetvizApp(Session.open(write(tmp_path, "nested", nested_net()), inputs=["x=2,3"]))
    assert snap_compare(app, terminal_size=size, run_before=run_before)
