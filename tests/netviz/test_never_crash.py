"""Issue #30 item 1: the TUI never crashes, and a crash it cannot survive exits non-zero.

Every zoo net (both Mask R-CNNs), every example and the test nets are opened; every op row and
every subnet row of the op list is visited (through the app's own select/drill methods, a pause
every few rows, so 2 cores afford it), every subnet drilled into, then End and ``d`` pressed as a
user would.  The app's safety net turns an unexpected error into a notice and a log file: the
test fails on any such notice, so a swallowed crash still fails it.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from examples.build import EXAMPLES
from netviz.app import NetvizApp
from netviz.session import OpRef, Session
from tests.conftest import zoo_nets
from tests.netviz import tui_nets
from tests.netviz.waiting import asynctest, ready

ROOT = Path(__file__).resolve().parents[2]
NETS = ([pytest.param(p, id=p.parent.name) for p in zoo_nets()]
        + [pytest.param(ROOT / "examples" / n / "predict_net.pb", id=f"example-{n}") for n in sorted(EXAMPLES)]
        + [pytest.param(ROOT / "examples" / "mlp" / "plan.pbtxt", id="example-mlp-plan")]
        + [pytest.param(n, id=f"test-{n}") for n in ("mlp", "while_net", "nested_net")])


def internal_errors(app: NetvizApp) -> list[str]:
    return app.errors + [n.message for n in app._notifications if n.title == "Internal error"]


def open_net(spec: Path | str, tmp_path: Path) -> Session:
    if isinstance(spec, str):
        return Session.open(tui_nets.write(tmp_path, spec, getattr(tui_nets, spec)()))
    return Session.open(spec)


@pytest.mark.parametrize("spec", NETS)
@asynctest
async def test_visit_every_row_and_subnet(spec, tmp_path, monkeypatch):
    monkeypatch.setenv("NETVIZ_LOG_DIR", str(tmp_path / "logs"))
    app = NetvizApp(open_net(spec, tmp_path))
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(pilot)
        main, tree = app.main, app.main.op_tree
        refs = app.session.walk()
        for k, ref in enumerate(refs):
            tree._ensure(ref)
            main.run_guarded(main.select, ref)
            for arg, _ in app.session.subnets(ref):
                main.run_guarded(main.drill_into, ref, arg)
                await pilot.pause()  # drawn: an empty subnet's layout is where Mask R-CNN crashed
                main.run_guarded(main.select, ref)
            if k % 25 == 24:
                await pilot.pause()
            assert not internal_errors(app), (ref, internal_errors(app))
        await pilot.pause()
        main.run_guarded(main.select, OpRef((), 0))
        tree.focus()
        await pilot.press("end")       # the last row: Mask R-CNN's empty then_net
        await pilot.pause()
        for line in range(tree.last_line, max(tree.last_line - 6, -1), -1):  # the rows above it, subnets too
            tree.cursor_line = line
            await pilot.pause()
            await pilot.press("d")
            await pilot.pause()
        assert not internal_errors(app), internal_errors(app)
        assert app.is_running
    assert not (tmp_path / "logs").exists()
    assert app.return_code in (None, 0)


@asynctest
async def test_an_error_in_a_handler_is_a_notice_with_a_log_and_the_app_goes_on(tmp_path, monkeypatch):
    monkeypatch.setenv("NETVIZ_LOG_DIR", str(tmp_path / "logs"))
    app = NetvizApp(open_net("mlp", tmp_path))
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(pilot)

        def broken() -> None:
            raise ZeroDivisionError("made up for the test")
        monkeypatch.setattr(app.main, "action_toggle_ssa", broken)  # a bug in a key handler
        await pilot.press("v")
        await pilot.pause()
        assert app.is_running
        (line,) = [n.message for n in app._notifications if n.title == "Internal error"]
        assert "ZeroDivisionError: made up for the test" in line and "broken (test_never_crash.py" in line
        (log,) = (tmp_path / "logs").iterdir()
        assert str(log) in line and "Traceback" in log.read_text()
        await pilot.press("n")  # the session is still usable
        await pilot.pause()
        assert app.session.debugger is not None or app.main.busy is not None
    assert app.return_code in (None, 0)


FATAL = """
import sys
from netviz.screens.main import MainScreen
def broken(self):
    raise RuntimeError("compose failed for the test")
MainScreen.compose = broken   # the main screen never comes up: the app cannot go on
from netviz.cli import main
sys.exit(main([sys.argv[1]]))
"""


def test_a_fatal_error_exits_non_zero_naming_the_log(tmp_path):
    net = tui_nets.write(tmp_path, "mlp", tui_nets.mlp())
    env = {"NETVIZ_LOG_DIR": str(tmp_path / "logs"), "TERM": "xterm", "PATH": "/usr/bin:/bin",
           "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)}
    # NOTE: Textual's headless driver, so no terminal is needed
    env["TEXTUAL_HEADLESS"] = "1"
    done = subprocess.run([sys.executable, "-c", FATAL, str(net)], env=env, capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    said = " ".join((done.stdout + done.stderr).split())  # the line is wrapped at the terminal width
    assert "netviz: stopped by an internal error in the app: RuntimeError: compose failed for the test" in said
    assert "Traceback" not in said
    assert list((tmp_path / "logs").iterdir())
