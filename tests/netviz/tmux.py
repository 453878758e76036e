"""A private tmux server for end-to-end tests: its socket lives in the test's tmp dir and is gone after.

``with private_tmux(tmp_path) as tmux: tmux("new-session", ...)`` runs tmux against a socket file of
its own (``-S``, in a short temp folder), never the user's server, and kills the server and removes the socket on exit, so a
test run leaves nothing behind in ``/tmp/tmux-UID``.
"""
from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def private_tmux(folder: Path | None = None) -> Iterator[Callable[..., str]]:
    # NOTE: a unix socket path must stay under ~107 bytes; pytest's tmp_path can be longer.
    own = Path(tempfile.mkdtemp(prefix="nvtmux-"))
    sock = own / "s"

    def tmux(*args: str) -> str:
        return subprocess.run(["tmux", "-S", str(sock), *args], capture_output=True, text=True,
                              check=True).stdout
    try:
        yield tmux
    finally:
        subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True)
        sock.unlink(missing_ok=True)
        own.rmdir()


def wait_screen(tmux: Callable[..., str], session: str, text: str, timeout: float = 60.0) -> str:
    """Poll capture-pane until `text` shows (a real terminal has no idle hook to wait on)."""
    deadline, screen = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        screen = tmux("capture-pane", "-p", "-t", session)
        if text in screen:
            return screen
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {text!r}; screen was:\n{screen}")


def wait_settled(tmux: Callable[..., str], session: str, pattern: str, timeout: float = 120.0) -> str:
    """Poll until regex `pattern` shows and no move runs or waits (no ``⏳``); the screen then."""
    import re

    deadline, screen = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        screen = tmux("capture-pane", "-p", "-t", session)
        if re.search(pattern, screen) and "⏳" not in screen:
            return screen
        time.sleep(0.2)
    raise AssertionError(f"never settled on {pattern!r}; screen was:\n{screen}")
