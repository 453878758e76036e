"""Unexpected errors in the TUI: a traceback file under the user's state directory and a one-line notice.

A bug in a key handler, a worker or a widget must not take the session down nor scroll a traceback
over the screen: the app (:meth:`netviz.app.NetvizApp._handle_exception`) and the main screen's
``guarded`` actions both call :func:`report`, which writes the traceback to
``$NETVIZ_LOG_DIR`` (else ``$XDG_STATE_HOME/netviz``, else ``~/.local/state/netviz``) and returns
the line the user sees: what failed (the innermost netviz/engine function), the error, the log file.
"""
from __future__ import annotations

import os
import time
import traceback
from pathlib import Path


def log_dir() -> Path:
    """Where traceback files go: ``$NETVIZ_LOG_DIR``, else the XDG state directory's ``netviz``."""
    if os.environ.get("NETVIZ_LOG_DIR"):
        return Path(os.environ["NETVIZ_LOG_DIR"])
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "netviz"


def where_failed(error: BaseException) -> str:
    """The innermost frame of netviz or engine code in `error`'s traceback: ``choose_direction
    (graph_scene.py:319)``; the innermost frame at all when none is ours."""
    frames = traceback.extract_tb(error.__traceback__)
    ours = [f for f in frames if f"{os.sep}netviz{os.sep}" in f.filename or f"{os.sep}engine{os.sep}" in f.filename]
    frame = (ours or frames or [None])[-1]
    return f"{frame.name} ({Path(frame.filename).name}:{frame.lineno})" if frame is not None else "netviz"


def write_log(error: BaseException, context: str = "") -> Path | None:
    """Write `error`'s traceback (and `context`: the action or worker) to a new file; None when the
    directory cannot be written (the notice then says so instead of naming a file)."""
    folder = log_dir()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"error-{stamp}-{os.getpid()}-{time.monotonic_ns() % 10**6:06d}.log"
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        path.write_text(f"netviz internal error{f' in {context}' if context else ''}\n{text}", encoding="utf-8")
        return path
    except OSError:
        return None


def report(error: BaseException, context: str = "") -> str:
    """Log `error` and return its one-line notice: ``drill: ValueError: math domain error in
    choose_direction (graph_scene.py:319); traceback in ~/.local/state/netviz/error-….log``."""
    path = write_log(error, context)
    lead = f"{context}: " if context else ""
    saved = f"traceback in {path}" if path is not None else f"no traceback file ({log_dir()} not writable)"
    return f"{lead}{type(error).__name__}: {error} in {where_failed(error)}; {saved}"


class Guarded:
    """Mixin for the app, its screens and widgets: an exception out of a message handler (a key, a
    callback, a timer, a layout) is reported by the app's safety net instead of ending the pump.

    NOTE: Textual stops a pump's message loop after a handler raises (and the app with it); this
    catches it one level down, in ``_dispatch_message``, so the loop goes on with the next message.
    """

    async def _dispatch_message(self, message):  # type: ignore[no-untyped-def]
        try:
            return await super()._dispatch_message(message)  # type: ignore[misc]
        except Exception as error:  # noqa: BLE001 - the safety net: reported, never the end of the loop
            app = self.app  # type: ignore[attr-defined]
            survive = getattr(app, "survive", None)
            if survive is None:
                raise
            survive(error, type(message).__name__)
            return None
