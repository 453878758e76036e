"""End to end in a real terminal: tmux runs `netviz` on a zoo net; we step, toggle backward, quit."""
from __future__ import annotations

import shutil
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.netviz.tmux import private_tmux, wait_screen

ROOT = Path(__file__).resolve().parents[2]
NETVIZ = Path(sys.executable).parent / "netviz"
pytestmark = pytest.mark.skipif(shutil.which("tmux") is None or not NETVIZ.exists(), reason="needs tmux")


def test_open_step_backward_quit(zoo, tmp_path):
    session, status = f"netviz-{uuid.uuid4().hex[:8]}", tmp_path / "status"
    net = zoo / "resnet50" / "predict_net.pbtxt"
    cmd = f"cd {ROOT} && env -u COLUMNS -u LINES {NETVIZ} {net}; echo $? > {status}; sleep 30"
    with private_tmux(tmp_path) as tmux:
        tmux("-f", "/dev/null", "new-session", "-d", "-s", session, "-x", "160", "-y", "48", cmd)
        wait_screen(tmux, session, "forward · 175 ops")
        wait_screen(tmux, session, "Conv #0")  # the graph laid out
        tmux("send-keys", "-t", session, "n")  # no init net: random weights of inferred shapes, op #0 runs
        wait_screen(tmux, session, "parameters filled with random values")
        wait_screen(tmux, session, "› op#1 SpatialBN")  # the pc moved on
        tmux("send-keys", "-t", session, "g")
        wait_screen(tmux, session, "loss blob to differentiate")
        tmux("send-keys", "-t", session, "gpu_0/softmax", "Enter")
        # NOTE: the backward view's breadcrumb carries the ladder's legend (■ grad …), which the narrower
        # notes (·  backward) give way to at 160x48; the status line's flags say "backward" too
        wait_screen(tmux, session, "■ grad")
        tmux("send-keys", "-t", session, "/")
        wait_screen(tmux, session, "search ops (type, cat:conv, name) and blobs")
        tmux("send-keys", "-t", session, "FCGradient", "Enter")
        wait_screen(tmux, session, "FCGradient  op #177")  # the cursor is on it: the inspector shows the gradient op
        wait_screen(tmux, session, "gradient op for forward op #173")
        tmux("send-keys", "-t", session, "q")
        deadline = time.monotonic() + 30
        while not status.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert status.read_text().strip() == "0"
