"""End to end in a real terminal: tmux runs `netviz` on a zoo net; we step, toggle backward, quit."""
from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NETVIZ = Path(sys.executable).parent / "netviz"
pytestmark = pytest.mark.skipif(shutil.which("tmux") is None or not NETVIZ.exists(), reason="needs tmux")


SOCKET = f"netviz-test-{uuid.uuid4().hex[:8]}"  # a private tmux server, never the user's


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", "-L", SOCKET, *args], capture_output=True, text=True, check=True).stdout


def wait_screen(session: str, text: str, timeout: float = 60.0) -> str:
    """Poll capture-pane until `text` shows (a real terminal has no idle hook to wait on)."""
    deadline, screen = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        screen = tmux("capture-pane", "-p", "-t", session)
        if text in screen:
            return screen
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {text!r}; screen was:\n{screen}")


def test_open_step_backward_quit(zoo, tmp_path):
    session, status = f"netviz-{uuid.uuid4().hex[:8]}", tmp_path / "status"
    net = zoo / "resnet50" / "predict_net.pbtxt"
    cmd = f"cd {ROOT} && env -u COLUMNS -u LINES {NETVIZ} {net}; echo $? > {status}; sleep 30"
    tmux("-f", "/dev/null", "new-session", "-d", "-s", session, "-x", "160", "-y", "48", cmd)
    try:
        wait_screen(session, "forward · 175 ops")
        wait_screen(session, "Conv #0")  # the graph laid out
        tmux("send-keys", "-t", session, "n")  # no init net: random weights of inferred shapes, op #0 runs
        wait_screen(session, "parameters filled with random values")
        wait_screen(session, "› op#1 SpatialBN")  # the pc moved on
        tmux("send-keys", "-t", session, "g")
        wait_screen(session, "loss blob to differentiate")
        tmux("send-keys", "-t", session, "gpu_0/softmax", "Enter")
        wait_screen(session, "·  backward")  # the breadcrumb of the backward view
        tmux("send-keys", "-t", session, "/")
        wait_screen(session, "search ops and blobs")
        tmux("send-keys", "-t", session, "FCGradient", "Enter")
        wait_screen(session, "FCGradient  op #177")  # the cursor is on it: the inspector shows the gradient op
        wait_screen(session, "gradient op for forward op #173")
        tmux("send-keys", "-t", session, "q")
        deadline = time.monotonic() + 30
        while not status.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert status.read_text().strip() == "0"
    finally:
        subprocess.run(["tmux", "-L", SOCKET, "kill-server"], capture_output=True)
