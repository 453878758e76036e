"""The op tree counts in English (QA pass over the user's path): a While's one-op cond_net read
"cond_net · 1 ops"."""
from __future__ import annotations

from pathlib import Path

from netviz.app import NetvizApp
from netviz.session import OpRef, Session
from tests.netviz.waiting import asynctest, ready, screen_text, wait_for

WHILE_NET = Path(__file__).resolve().parents[2] / "examples" / "while_net" / "predict_net.pb"


@asynctest
async def test_a_one_op_subnet_says_1_op() -> None:
    app = NetvizApp(Session.open(str(WHILE_NET)))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        tree = app.main.op_tree
        await wait_for(pilot, lambda: OpRef((), 2) in tree.nodes_by_ref, "the While's row")
        tree.nodes_by_ref[OpRef((), 2)].expand()
        await wait_for(pilot, lambda: any("cond_net · 1 op" in line for line in screen_text(app)), "cond_net · 1 op")
        shown = "\n".join(screen_text(app))
        assert "1 ops" not in shown
