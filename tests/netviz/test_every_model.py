"""Every zoo net and every bundled example opens in the TUI, shows SSA and backward views, steps."""
from __future__ import annotations

from pathlib import Path

import pytest

from examples.build import EXAMPLES
from netviz.app import NetvizApp
from netviz.screens.prompt import PromptScreen
from netviz.session import Session
from tests.conftest import zoo_nets
from tests.netviz.waiting import asynctest, ready, wait_for

ROOT = Path(__file__).resolve().parents[2]
MODELS = [pytest.param(p, id=p.parent.name) for p in zoo_nets()] + [
    pytest.param(ROOT / "examples" / n / "predict_net.pb", id=f"example-{n}") for n in sorted(EXAMPLES)]


@pytest.mark.parametrize("path", MODELS)
@asynctest
async def test_open_ssa_backward_step(path: Path) -> None:
    app = NetvizApp(Session.open(path))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        main = app.main
        assert main.op_tree.nodes_by_ref
        await pilot.press("v")
        await wait_for(pilot, lambda: main.ssa, "the SSA view")
        await pilot.press("g")          # backward: generated, or a notification naming the op that stops it
        done = lambda: main.session.show_backward or bool(app._notifications)  # noqa: E731
        await wait_for(pilot, lambda: done() or isinstance(app.screen, PromptScreen), "backward, a notice or a prompt")
        if isinstance(app.screen, PromptScreen):  # no loss to guess: answer with the last output, as a user would
            await pilot.press(*main.session.model.predict.external_output[-1], "enter")
            await wait_for(pilot, done, "the backward pass or a notice")
        await pilot.press("n")
        await pilot.pause()
        assert app.is_running
        await pilot.press("q")
