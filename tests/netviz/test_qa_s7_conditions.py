"""QA sweep s7: a condition naming a blob the net lacks is refused wherever a condition is typed.  ``C``
refused ``max_abs(relu9) > 1`` naming the closest blob, but the same text as a breakpoint's condition
(``B``, Enter) was taken: the breakpoint then never stopped (an unknown blob is never true), and nothing
said why."""
from __future__ import annotations

from pathlib import Path

import pytest

from engine.errors import NetvizError
from netviz.app import NetvizApp
from netviz.screens.prompt import PromptScreen
from netviz.session import OpRef, Session
from tests.netviz.tui_nets import mlp, write
from tests.netviz.waiting import asynctest, notified, ready, wait_for


def test_a_condition_on_a_blob_the_net_lacks_is_refused_naming_the_closest(tmp_path: Path) -> None:
    session = Session.open(write(tmp_path, "mlp", mlp()), inputs=["X=2,3"])
    with pytest.raises(NetvizError, match=r"condition 'max_abs\(h11\) > 1': no blob 'h11' in mlp \(did you mean h1\?\)"):
        session.check_condition("max_abs(h11) > 1")
    session.check_condition("max_abs(h1) > 1")  # a blob of the net: taken


@asynctest
async def test_b_refuses_a_breakpoint_condition_on_an_unknown_blob_and_asks_again(tmp_path: Path) -> None:
    from netviz.screens.breakpoints import BreakpointsScreen

    app = NetvizApp(Session.open(write(tmp_path, "mlp", mlp()), inputs=["X=2,3"]))
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await ready(pilot)
        app.main.select(OpRef((), 1))
        await pilot.press("b", "B")
        await wait_for(pilot, lambda: isinstance(app.screen, BreakpointsScreen), "the breakpoints list")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, PromptScreen), "the condition prompt")
        await pilot.press(*"max_abs(h11) > 1", "enter")
        await wait_for(pilot, lambda: notified(app, "no blob 'h11' in mlp (did you mean h1?)"), "the refusal")
        await wait_for(pilot, lambda: isinstance(app.screen, PromptScreen)
                       and app.screen.query_one("#prompt-input").value == "max_abs(h11) > 1", "the prompt again")
        assert app.screen.query_one("#prompt-input").cursor_position == len("max_abs(")
        assert app.session.breakpoints[OpRef((), 1)].condition == ""  # the refused text did not replace it
        app.screen.query_one("#prompt-input").value = "max_abs(h1) > 1"
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, BreakpointsScreen), "back to the list")
        assert app.session.breakpoints[OpRef((), 1)].condition == "max_abs(h1) > 1"


@asynctest
async def test_w_refuses_a_blob_the_net_lacks_and_asks_again(tmp_path: Path) -> None:
    """``w`` then ``h11`` was taken ("watching h11") and never fired; now it is refused naming ``h1``
    and the prompt reopens on the text."""
    app = NetvizApp(Session.open(write(tmp_path, "mlp", mlp()), inputs=["X=2,3"]))
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await ready(pilot)
        await pilot.press("w")
        await wait_for(pilot, lambda: isinstance(app.screen, PromptScreen), "the watch prompt")
        app.screen.query_one("#prompt-input").value = "h11"
        await pilot.press("enter")
        await wait_for(pilot, lambda: notified(app, "watch: no blob 'h11' in mlp (did you mean h1?)"), "the refusal")
        await wait_for(pilot, lambda: isinstance(app.screen, PromptScreen)
                       and app.screen.query_one("#prompt-input").value == "h11", "the prompt again")
        assert app.session.watches == []
        app.screen.query_one("#prompt-input").value = "h1"
        await pilot.press("enter")
        await wait_for(pilot, lambda: notified(app, "watching h1"), "the watch")
        assert app.session.watches == ["h1"]
        await pilot.press("c")
        await wait_for(pilot, lambda: app.main.idle and app.session.last_stop is not None, "the run")
        assert app.session.last_stop.reason == "watchpoint" and "h1" in app.session.last_stop.detail


@asynctest
async def test_a_query_on_a_blob_the_net_lacks_says_so_not_zero_stops(tmp_path: Path) -> None:
    """``/`` then ``? max_abs(h11) > 1`` after a run listed "0 stops where max_abs(h11) > 1 holds": the typo
    read as a fact about the run."""
    from netviz.screens.search import SearchScreen

    app = NetvizApp(Session.open(write(tmp_path, "mlp", mlp()), inputs=["X=2,3", "label=2:int32"]))
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await ready(pilot)
        await pilot.press("c")
        await wait_for(pilot, lambda: app.main.idle and app.session.last_stop is not None
                       and app.session.last_stop.reason == "end", "the run to the end")
        for typed, says in (("? max_abs(h11) > 1", "no blob 'h11' in mlp (did you mean h1?)"),
                            ("? max_abs(h1) > -1", "holds")):
            await pilot.press("slash")
            await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen), "search")
            box = app.screen.query_one("#search-input")
            await wait_for(pilot, lambda: app.screen.focused is box, "the search input's focus")
            box.value = typed
            await pilot.press("enter")
            await wait_for(pilot, lambda: app.screen.hits and says in str(app.screen.hits[0][1]), says)
            assert ("stops where" in str(app.screen.hits[0][1])) == (says == "holds")
            await pilot.press("escape")
            await wait_for(pilot, lambda: app.screen is app.main, "back on the main screen")


@asynctest
async def test_an_eval_that_fails_asks_again_on_its_text(tmp_path: Path) -> None:
    """``:`` with a typo (``fc1_ww``): the error came, the prompt closed, and ``:`` again offered the last
    expression that worked, so a long expression was typed again; now it reopens on the text, cursor at
    the name."""
    app = NetvizApp(Session.open(write(tmp_path, "mlp", mlp()), inputs=["X=2,3", "label=2:int32"]))
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await ready(pilot)
        await pilot.press("n")
        await wait_for(pilot, lambda: app.main.idle and app.session.last_stop is not None, "the first step")
        await pilot.press("colon")
        await wait_for(pilot, lambda: isinstance(app.screen, PromptScreen), "the eval prompt")
        typed = "np.abs(h11).max() + 1"
        app.screen.query_one("#prompt-input").value = typed
        await pilot.press("enter")
        await wait_for(pilot, lambda: notified(app, "name 'h11' is not defined"), "the error")
        await wait_for(pilot, lambda: isinstance(app.screen, PromptScreen)
                       and app.screen.query_one("#prompt-input").value == typed, "the prompt again, text kept")
        assert app.screen.query_one("#prompt-input").cursor_position == typed.index("h11")
        app.screen.query_one("#prompt-input").value = "np.abs(W1).max() + 1"
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.screen is app.main and notified(app, "np.abs(W1).max() + 1 →"), "the value")
