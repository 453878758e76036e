"""Condition prompts as a user meets them: ``C`` with a condition that does not parse reopens on the typed
text with the cursor at the error (the notice came, the prompt closed, the text had to be typed again),
and ``I`` stops at the first loop iteration where a condition holds (the engine had it, no key did)."""
from __future__ import annotations

from pathlib import Path

from engine.debugger.conditions import ConditionError, parse_condition
from netviz.actions import ACTIONS
from netviz.app import NetvizApp
from netviz.screens.help import help_table
from netviz.screens.prompt import PromptScreen, error_cursor
from netviz.session import Session
from tests.netviz.tui_nets import mlp, while_net, write
from tests.netviz.waiting import answer, asynctest, notified, ready, wait_for


def _column(text: str) -> int:
    """The 0-based column of `text`'s parse error, from the engine's own message."""
    try:
        parse_condition(text)
    except ConditionError as e:
        return int(str(e).rsplit("at column ", 1)[1].split()[0]) - 1
    raise AssertionError(f"{text!r} parses")


def test_the_cursor_goes_where_the_error_points() -> None:
    for typed, cond in (("max_abs(h1 > 3", "max_abs(h1 > 3"), ("type Relu if loss >", "loss >")):
        try:
            parse_condition(cond)
        except ConditionError as e:
            assert error_cursor(typed, e) == typed.index(cond) + _column(cond)
    from engine.errors import NetvizError
    assert error_cursor("los > 1", NetvizError("condition 'los > 1': no blob 'los' in mlp (did you mean loss?)")) == 0
    assert error_cursor("type Reluu", NetvizError("breakpoint: no op of type 'Reluu' in mlp")) == 5
    assert error_cursor("x", NetvizError("something else")) == 1


async def _reopened(pilot, app: NetvizApp, typed: str, title: str) -> PromptScreen:
    await answer(pilot, app, typed, then=title)
    await wait_for(pilot, lambda: any(n.severity == "error" for n in app._notifications), "the refusal")
    return app.screen


@asynctest
async def test_c_with_a_bad_condition_reopens_on_the_text_at_the_error(tmp_path: Path) -> None:
    app = NetvizApp(Session.open(write(tmp_path, "mlp", mlp())))
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await ready(pilot)
        await pilot.press("C")
        typed = "max_abs(h1 > 3"
        prompt = await _reopened(pilot, app, typed, "break when")
        box = prompt.query_one("#prompt-input")
        assert box.value == typed and box.cursor_position == _column(typed) and box.selection.is_empty
        assert [n.title for n in app._notifications if n.severity == "error"] == ["Bad condition"]
        await pilot.press("end", "left", "left", "left", "left", ")", "enter")  # the missing ) where it goes
        await wait_for(pilot, lambda: app.screen is app.main, "the prompt to close")
        assert notified(app, "breakpoint") and len(app.session.global_breakpoints) == 1
        assert app.session.global_breakpoints[0].condition == "max_abs(h1) > 3"
        await pilot.press("C")  # a blob the net lacks: the cursor on its name
        prompt = await _reopened(pilot, app, "loss > 1 and max(h9) > 0", "break when")
        assert prompt.query_one("#prompt-input").cursor_position == len("loss > 1 and max(")
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is app.main, "the prompt to close")
        assert len(app.session.global_breakpoints) == 1


@asynctest
async def test_i_stops_at_the_first_iteration_where_a_condition_holds(tmp_path: Path) -> None:
    """``i > -1`` holds after the main net's ConstantFill already: I passes it and stops in iteration 0,
    after the body's Add, as :func:`engine.debugger.timetravel.run_to_first_iteration` does."""
    assert ACTIONS["run.first-iteration"][0] == "I"
    assert any("first loop iteration" in str(row) for row in help_table().columns[1].cells)
    app = NetvizApp(Session.open(write(tmp_path, "loop", while_net()), inputs=["x=1,4"]))
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        await ready(pilot)
        await pilot.press("I")
        prompt = await _reopened(pilot, app, "i > (1", "first loop iteration")
        assert prompt.query_one("#prompt-input").value == "i > (1"
        app.screen.query_one("#prompt-input").value = ""
        await answer(pilot, app, "i > -1")
        await wait_for(pilot, lambda: app.main.idle and app.session.last_stop is not None, "the move")
        stop, dbg = app.session.last_stop, app.session.debugger
        assert stop.reason == "condition" and dbg.records[-1].op_type == "Add"
        assert dbg.records[-1].frames[-1] == "iteration 0" and float(dbg.value("i")[0]) == 1.0


def test_a_misplaced_token_is_named_at_its_own_column() -> None:
    """``acc > (2`` said "found '(' at column 8": the column after it, so the cursor landed past it."""
    typed = "acc > (2"
    assert _column(typed) == typed.index("(")


@asynctest
async def test_i_refuses_an_unknown_blob_and_a_net_without_loops(tmp_path: Path) -> None:
    """``I`` with ``max_abs(nope) > 1`` ran the whole net to "end of program" (an unknown blob is never
    true): it is refused on the typed text, naming the closest blob; on a net with no While or RNN, ``I``
    says there is no loop instead of running to the end."""
    app = NetvizApp(Session.open(write(tmp_path, "loop", while_net()), inputs=["x=1,4"]))
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        await ready(pilot)
        await pilot.press("I")
        prompt = await _reopened(pilot, app, "max_abs(xx) > 1", "first loop iteration")
        assert prompt.query_one("#prompt-input").value == "max_abs(xx) > 1"
        assert any("did you mean x" in str(n.message) for n in app._notifications if n.severity == "error")
        assert app.session.last_stop is None
    app = NetvizApp(Session.open(write(tmp_path, "mlp", mlp())))
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await ready(pilot)
        await pilot.press("I")
        await wait_for(pilot, lambda: notified(app, "no loop here"), "the refusal")
        assert app.screen is app.main and app.session.last_stop is None
