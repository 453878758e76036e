"""In a real 80×24 terminal, as a person would: the footer's first keys whole, `N` folds GoogLeNet
by scope, ten fast `n` presses end with the pc's block open, and the time overlay's legend shows."""
from __future__ import annotations

import re
import shutil
import sys
import uuid
from pathlib import Path

import pytest

from tests.netviz.tmux import private_tmux, wait_screen, wait_settled

ROOT = Path(__file__).resolve().parents[2]
NETVIZ = Path(sys.executable).parent / "netviz"
pytestmark = pytest.mark.skipif(shutil.which("tmux") is None or not NETVIZ.exists(), reason="needs tmux")


def test_googlenet_at_80x24(zoo, tmp_path):
    session = f"netviz-{uuid.uuid4().hex[:8]}"
    net = zoo / "inception_v1" / "predict_net.pbtxt"
    cmd = f"cd {ROOT} && env -u COLUMNS -u LINES {NETVIZ} {net}; sleep 30"
    with private_tmux(tmp_path) as tmux:
        tmux("-f", "/dev/null", "new-session", "-d", "-s", session, "-x", "80", "-y", "24", cmd)
        screen = wait_screen(tmux, session, "forward · 142 ops")
        footer = screen.rstrip("\n").splitlines()[-1]
        assert "q Quit  ? Help  g Backward  n Step  s Into  c Continue" in footer, footer
        tmux("send-keys", "-t", session, "N")
        wait_screen(tmux, session, "inception_3a/ ·")
        tmux("send-keys", "-t", session, *["n"] * 10)  # one write: ten moves queued at once
        # NOTE: at 80 columns (the overview zoom's longer flag) the status line may elide "main" from the left
        screen = wait_settled(tmux, session, r"pc (main |…)› op#10 Conv")
        assert "▼ inception_3a/" in screen and "Internal error" not in screen, screen
        tmux("send-keys", "-t", session, "m")  # overlay: time
        screen = wait_settled(tmux, session, r"■■■■■ \d")  # the legend, under the breadcrumb in a narrow pane
        assert re.search(r"│ (time )?■■■■■ \d[\d.]*[µm]s–", screen), screen
        tmux("send-keys", "-t", session, "q")
