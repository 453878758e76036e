"""NetvizApp: the Textual application; screens live in :mod:`netviz.screens`, looks in app.tcss.

Global keys are the app's (help, quit, palette); everything else is a main-screen action from
:data:`netviz.actions.ACTIONS`, each also a command in the palette (Ctrl+P).

Safety net: an exception no handler caught (a key handler, a worker, a widget) becomes a notice
naming what failed plus a traceback file (:mod:`netviz.errorlog`); the session goes on.  Only an
error before the main screen is up (a timer ticking early aside), or a burst of them (a widget failing on every frame), ends
the app, with return code 1 and one line naming the log (``netviz`` then exits 1, never 0).
"""
from __future__ import annotations

import gc
import os
import time
import traceback
from collections.abc import Iterable
from functools import partial

from rich.text import Text
from textual.app import App, SystemCommand
from textual.screen import Screen
from textual.worker import WorkerFailed

from netviz.actions import ACTIONS, key_display
from netviz.errorlog import Guarded, report
from netviz.screens.main import MainScreen
from netviz.session import Session

#: this many unexpected errors within BURST_S seconds end the app (a widget failing on every frame)
BURST, BURST_S = 8, 3.0


class NetvizApp(Guarded, App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "netviz"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]

    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session = session
        self.main = MainScreen(session)
        self.sub_title = str(session.model.path or session.name)
        self.errors: list[str] = []  # the notices of the unexpected errors so far (tests read them)
        self._error_times: list[float] = []

    def notify(self, message: str, *, title: str = "", severity: str = "information",  # type: ignore[override]
               timeout: float | None = None, markup: bool = False) -> None:
        """Notices are always plain text: they quote blob and op names (``_[mask]_pool5_int8``) that
        Rich markup would swallow (widgets' ``notify`` passes ``markup=True`` by default)."""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=False)  # type: ignore[arg-type]

    def _handle_exception(self, error: Exception) -> None:
        """Textual's end for an uncaught exception (a worker's, a timer's), made a notice and a log file."""
        worker = isinstance(error, WorkerFailed)
        self.survive(error.error if worker else error, "a worker" if worker else "the app")

    def survive(self, error: BaseException, context: str) -> None:
        """The safety net (see the module doc): a notice and a log file, or the end with return code 1."""
        now = time.monotonic()
        self._error_times = [t for t in self._error_times if now - t < BURST_S] + [now]
        line = report(error, context)
        self.errors.append(line)
        # NOTE: fatal: an error before the main screen is up (its compose or mount failed), except a
        # timer ticking early (a widget polling before on_mount): that one is a notice, as later
        tick = any(f.filename.endswith(f"textual{os.sep}timer.py") for f in traceback.extract_tb(error.__traceback__))
        started = self.main.is_mounted and self.is_running
        if (not started and not tick) or len(self._error_times) >= BURST:
            # NOTE: result 1 too: `netviz` returns App.run()'s result as its exit status
            self.exit(1, return_code=1, message=Text(f"netviz: stopped by an internal error in {line}"))
            return
        self.notify(line, title="Internal error", severity="error", timeout=20)

    def get_default_screen(self) -> Screen:
        """The main screen is the app's first screen (Textual's hook for it): pushed over Textual's
        own default screen, that blank screen was composed, styled and laid out first, and the main
        screen's layout waited for it (DenseNet-121 start -> first frame 62 -> 54 ms)."""
        return self.main

    def on_mount(self) -> None:
        # NOTE: no cyclic garbage collection from the app's start to its first frame: ~95 collections
        # (37-66 ms of DenseNet-121's start on a quiet machine) walked objects that all stay alive;
        # MainScreen._freeze_gc turns it back on at the first frame (and on_unmount, if none came)
        gc.disable()

    def on_unmount(self) -> None:
        gc.enable()

    def action_help(self) -> None:
        from netviz.screens.help import HelpScreen  # noqa: PLC0415 - off the first frame

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for keys, action, title, _ in ACTIONS.values():
            yield SystemCommand(title, f"key: {key_display(keys)}", partial(self.main.run_action, action))
