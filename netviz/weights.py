"""The init net's weights bound after the first frame, in a worker, with a progress line (issue #41).

The TUI opens the init net without reading its values (``load_model(..., lazy_values=True)``): they
stay in the memory-mapped file and the first step reads only what its ops read.  After the first
frame :func:`start` checks in a thread every tag of the unpacked floats (Caffe2's own layout) that
the quick open checked only near each run's ends (engine.model.valueref.bind_values; reading them
brings their pages in) while the status line says "loading 128 MB of weights … 61 %".
"""
from __future__ import annotations

import sys
from typing import Any

#: below this many bytes of file-backed values the line is not worth a flicker
SHOW_MIN_BYTES = 8 << 20


def status_flag(session: Any) -> list[str]:
    """``["loading 128 MB of weights … 61 %"]`` while the worker reads them, else []."""
    line = getattr(session, "weights_line", None)
    return [line] if line else []


def start(screen: Any) -> None:
    """Check the session's file-backed init values in a thread worker (nothing when none needs it)."""
    valueref = sys.modules.get("engine.model.valueref")
    init = screen.session.model.init
    if valueref is None or not len(init.op):
        return
    total = valueref.referenced_bytes(init)
    if total:
        screen.run_worker(lambda: _bind(screen, valueref, init, total), thread=True, group="weights",
                          exclusive=True, name="weights")


def _bind(screen: Any, valueref: Any, init: Any, total: int) -> None:
    from textual.worker import get_current_worker  # noqa: PLC0415

    session, app, worker = screen.session, screen.app, get_current_worker()
    shown = [-1]

    def tell(fn: Any, *args: Any, **kwargs: Any) -> None:
        """Run `fn` on the UI thread, unless the app has gone (quit while the worker read)."""
        if not worker.is_cancelled:
            try:
                app.call_from_thread(fn, *args, **kwargs)
            except RuntimeError:
                worker.cancel()

    def progress(done: int, _total: int) -> None:
        pct = 100 * done // max(_total, 1)
        if total >= SHOW_MIN_BYTES and pct != shown[0] and done < _total:
            shown[0] = pct
            session.weights_line = f"loading {total / 1e6:.0f} MB of weights … {pct} %"
            tell(screen.update_status)

    try:
        valueref.bind_values(init, progress, cancelled=lambda: worker.is_cancelled)
    except Exception as e:  # noqa: BLE001 - a broken weight file is told, the net stays open
        from rich.markup import escape  # noqa: PLC0415

        tell(screen.notify, escape(str(e)), title="Weights", severity="error")
    finally:
        session.weights_line = None
        tell(screen.update_status)
