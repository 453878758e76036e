"""wait_for(pilot, predicate): let the app run until a condition holds; fail naming what was awaited."""
from __future__ import annotations

import time
from collections.abc import Callable

from textual.pilot import Pilot

TIMEOUT = 30.0


async def wait_for(pilot: Pilot, predicate: Callable[[], bool], description: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {description}")
        await pilot.pause(0.02)


async def ready(pilot: Pilot) -> None:
    """The op tree is complete, the graph canvas has its layout and the lint markers are in."""
    main = pilot.app.main
    await wait_for(pilot, lambda: main.is_mounted and main.op_tree.populated, "the op tree")
    await wait_for(pilot, lambda: main.canvas.scene is not None, "the graph layout")
    await wait_for(pilot, lambda: main.checked, "the lint and schema check (MainScreen.check_net)")
    await pilot.pause()


async def continue_to_end(pilot: Pilot, app, timeout: float = TIMEOUT) -> None:
    """Press ``c`` and wait until the debugger has run the whole net and the UI is idle again."""
    await pilot.press("c")
    session = app.session
    await wait_for(pilot, lambda: app.main.idle and session.debugger is not None and session.debugger.finished,
                   "the end of the net", timeout=timeout)


def notified(app, text: str) -> bool:
    return any(text in n.message for n in app._notifications)


def asynctest(fn):
    """Run an ``async def`` test with asyncio (no async pytest plugin needed); fixtures still apply."""
    import asyncio
    import functools

    @functools.wraps(fn)
    def run(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))
    return run


def text_of(widget) -> str:
    """The plain text a Static shows (its Rich content rendered 100 columns wide)."""
    import io

    from rich.console import Console

    console = Console(width=100, record=True, file=io.StringIO())
    console.print(widget.content)
    return console.export_text()


def screen_text(app) -> list[str]:
    """The lines the terminal shows now (every layer composed: panes, footer, toasts), as plain text."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


async def pick_export(pilot: Pilot, what: str) -> None:
    """After ``e``: choose the current view (``"view"``) or the whole net (``"net"``) in the export dialog."""
    from netviz.screens.pick import PickScreen

    app = pilot.app
    await wait_for(pilot, lambda: isinstance(app.screen, PickScreen), "the export choice")
    await pilot.pause()
    if what == "net":
        await pilot.press("down")
    await pilot.press("enter")


async def answer(pilot: Pilot, app, text: str, clear: bool = True, then: str = "") -> None:
    """Type `text` into the open prompt; wait until it closes (or a prompt asking `then` opens)."""
    from netviz.screens.prompt import PromptScreen

    await wait_for(pilot, lambda: isinstance(app.screen, PromptScreen), "a prompt")
    if clear:
        app.screen.query_one("#prompt-input").value = ""
    await pilot.press(*text, "enter")
    if then:
        await wait_for(pilot, lambda: isinstance(app.screen, PromptScreen) and then in app.screen.title_text,
                       f"a prompt asking {then!r}")
    else:
        await wait_for(pilot, lambda: app.screen is app.main, "the prompt to close")


async def export_while_moving(pilot: Pilot, app, what: str, target, key: str, moved_to, release) -> None:
    """Export `what` ("view" / "net") to `target` with a layout held until `release` is set, show
    that `key` moves the cursor to `moved_to` meanwhile, then let the export finish."""
    await pilot.press("e")
    await pick_export(pilot, what)
    await answer(pilot, app, str(target))
    assert app.main.exporting == str(target)
    await pilot.press(key)  # the UI answers while the export runs
    await wait_for(pilot, lambda: app.main.selected == moved_to, "the cursor to move during the export")
    release.set()
    await wait_for(pilot, lambda: notified(app, f"wrote {target}"), "the export to finish")


def tree_line(app, ref) -> str:
    """The op list's line for `ref` as drawn at the list's current width (marker, index, type, name)."""
    tree = app.main.op_tree
    tree._ensure(ref)
    return tree.render_label(tree.nodes_by_ref[ref], tree.rich_style, tree.rich_style).plain


async def backward_view(pilot: Pilot, app) -> None:
    """``g``, the prompt answered with the net's default loss, until the canvas draws the backward pass."""
    from netviz.export import default_loss

    session = app.session
    await pilot.press("g")
    await answer(pilot, app, default_loss(session.model.predict))
    await wait_for(pilot, lambda: session.show_backward and app.main.canvas.scene is not None
                   and app.main.canvas.key[1], "the backward view")
