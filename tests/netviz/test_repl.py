"""Issue #30 item 6: a REPL at a stop, value history, and a keyboard-driven inspector.

``:`` evaluates NumPy over the blobs at the stop (value in the inspector, ``S`` saves it); ``!``
opens a Python shell with ``ws``, ``net``, ``dbg`` bound; a blob written in a While body shows its
value history per iteration; h/j/k/l and ``[``/``]`` drive the lists and versions, focus stays; set
arguments come first and unset ones fold; blob names and shapes are never cut mid-token.
"""
from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np

from netviz.actions import ACTIONS
from netviz.app import NetvizApp
from netviz.session import BlobRef, OpRef, Session
from netviz.widgets.blob_inspector import BlobInspector
from netviz.widgets.op_inspector import OpInspector
from tests.conftest import ZOO
from tests.netviz.waiting import answer, asynctest, continue_to_end, ready, screen_text, text_of, wait_for

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MLP = EXAMPLES / "mlp" / "predict_net.pb"
NEW = ("repl.eval", "repl.shell", "blob.prev-version", "blob.next-version", "view.focus-ops", "view.focus-blobs",
       "view.cursor-down", "view.cursor-up", "step.end-stops")


def blob_text(app) -> str:
    box = app.main.query_one(BlobInspector)
    return "\n".join(text_of(w) for w in box.query("Static"))


async def steps(pilot, app, n: int) -> None:
    for _ in range(n):
        await pilot.press("n")
        await wait_for(pilot, lambda: app.main.idle and app.session.debugger is not None, "a step")
    await pilot.pause()


@asynctest
async def test_eval_shows_the_value_in_the_inspector_and_saves_it(tmp_path):
    app = NetvizApp(Session.open(MLP))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await steps(pilot, app, 2)  # fc1 and relu1 exist
        await pilot.press("colon")
        await answer(pilot, app, 'np.abs(fc1).max() - b("relu1").max()')
        fc1 = app.session.debugger.value("fc1")
        want = float(np.abs(fc1).max() - np.maximum(fc1, 0).max())
        await wait_for(pilot, lambda: "eval" in blob_text(app), "the value in the inspector")
        shown = blob_text(app)
        assert 'np.abs(fc1).max() - b("relu1").max()' in shown and "float32 scalar" in shown, shown
        await pilot.press("S")
        await answer(pilot, app, str(tmp_path / "v.npy"))
        await wait_for(pilot, lambda: (tmp_path / "v.npy").exists(), "the saved value")
        assert np.isclose(float(np.load(tmp_path / "v.npy")), want)
        await pilot.press("colon")
        await answer(pilot, app, "nosuch + 1", then="eval")  # a failed eval reopens on its text
        await wait_for(pilot, lambda: any("name 'nosuch' is not defined" in n.message for n in app._notifications),
                       "the error as a notice")


@asynctest
async def test_shell_binds_ws_net_dbg(monkeypatch):
    import code
    seen = {}
    monkeypatch.setattr(code, "interact", lambda banner="", local=None, exitmsg="": seen.update(local or {}))
    app = NetvizApp(Session.open(MLP))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        monkeypatch.setattr(app, "suspend", contextlib.nullcontext)  # headless: no terminal to hand over
        await steps(pilot, app, 1)
        await pilot.press("exclamation_mark")
        await wait_for(pilot, lambda: bool(seen), "the shell")
        dbg = app.session.debugger
        assert seen["dbg"] is dbg and seen["ws"] is dbg.frames[-1].ws and seen["net"].name == dbg.frames[-1].net.name
        assert app.is_running


@asynctest
async def test_value_history_across_while_iterations():
    app = NetvizApp(Session.open(EXAMPLES / "while_net" / "predict_net.pb"))
    async with app.run_test(size=(200, 60)) as pilot:
        await ready(pilot)
        await continue_to_end(pilot, app)
        s = app.session
        tanh = next(r for r in s.walk() if s.op(r).type == "Tanh" and r.path[0][1] == "loop_net")
        app.main.select_blob(BlobRef(tanh.path, s.op(tanh).output[0]))
        await pilot.pause()
        shown = blob_text(app)
        runs = [r for r in s.state.history if r.path[:-1] == ("op", *(x for p in tanh.path for x in p))
                and r.op_type == "Tanh"]
        assert len(runs) >= 2
        assert "history" in shown and "iteration 0" in shown and "iteration 1" in shown, shown
        assert f"‖·‖ {runs[0].outputs[0].norm:.4g}" in shown


@asynctest
async def test_the_inspector_is_keyboard_driven():
    app = NetvizApp(Session.open(MLP))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        main = app.main
        await pilot.press("j")  # hjkl work at start
        await wait_for(pilot, lambda: main.selected == OpRef((), 1), "j: the next op")
        await pilot.press("k")
        await wait_for(pilot, lambda: main.selected == OpRef((), 0), "k: the previous op")
        await pilot.press("l")
        await wait_for(pilot, lambda: main.blob is not None, "l: into the blob list")
        assert main.focused is main.query_one("#blob-list")
        first = main.blob
        await pilot.press("down")
        await wait_for(pilot, lambda: main.blob != first, "↓: the next blob")
        assert main.focused is main.query_one("#blob-list")  # focus stays in the list
        await continue_to_end(pilot, app)
        await pilot.pause()
        assert main.focused is main.query_one("#blob-list")
        main.select_blob(BlobRef((), "fc1_w", 0))
        await pilot.press("right_square_bracket")
        await wait_for(pilot, lambda: main.blob == BlobRef((), "fc1_w", 1), "]: the next version")
        assert "fc1_w@1" in blob_text(app)
        await pilot.press("left_square_bracket")
        await wait_for(pilot, lambda: main.blob == BlobRef((), "fc1_w", 0), "[: the previous version")
        await pilot.press("left_square_bracket")  # NOTE: at its first version: said, not silent
        await wait_for(pilot, lambda: any("'fc1_w'@0 is its first version" in n.message
                                          and n.severity == "warning" for n in app._notifications), "[ at the first")
        assert main.blob == BlobRef((), "fc1_w", 0)
        await pilot.press("h")
        await wait_for(pilot, lambda: main.focused is main.op_tree, "h: back to the op list")


@asynctest
async def test_resnet_conv_inspector_folds_unset_args_and_keeps_names_whole(zoo):
    app = NetvizApp(Session.open(ZOO / "resnet50" / "predict_net.pbtxt"))
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        app.main.select(OpRef((), 4))
        await pilot.pause()
        text = text_of(app.main.query_one(OpInspector))
        assert "not set" not in text and " unset" in text
        assert text.index("·stride") < text.index(" unset")  # set arguments first
        lines = screen_text(app)
        op = app.session.op(OpRef((), 4))
        for name in op.input:
            assert any(f"{name}@0" in line for line in lines) or not any(name[:12] in line for line in lines), \
                (name, [line for line in lines if name[-6:] in line])


def test_every_new_key_is_in_the_help_and_the_palette():
    import io

    from rich.console import Console

    from netviz.actions import key_display
    from netviz.screens.help import help_table
    console = Console(width=160, record=True, file=io.StringIO())
    console.print(help_table())
    shown = console.export_text()
    for aid in NEW:
        keys, _, title, _ = ACTIONS[aid]
        assert any(key_display(keys) in line and title in line for line in shown.splitlines()), aid
    app = NetvizApp(Session.open(MLP))
    titles = {c.title for c in app.get_system_commands(app.main)}
    assert all(ACTIONS[aid][2] in titles for aid in NEW)
