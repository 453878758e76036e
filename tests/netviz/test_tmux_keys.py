"""End to end in a real terminal: 20 `n` sent at once to ResNet-50 end where 20 slow presses end."""
from __future__ import annotations

import shutil
import sys
import uuid
from pathlib import Path

import pytest

from tests.netviz.tmux import private_tmux, wait_screen, wait_settled

ROOT = Path(__file__).resolve().parents[2]
NETVIZ = Path(sys.executable).parent / "netviz"
pytestmark = pytest.mark.skipif(shutil.which("tmux") is None or not NETVIZ.exists(), reason="needs tmux")
STEPS = 20


def status_line(screen: str) -> str:
    """The pc part of the status line (``pc main › op#20 Conv``), without the busy flag."""
    line = next(line for line in screen.splitlines() if line.lstrip().startswith("pc "))
    return line.split("│")[0].strip()


def settled(tmux, session: str, k: int) -> str:
    """Wait until the pc is at op #k and no move is running or queued; the screen then."""
    return wait_settled(tmux, session, rf"› op#{k} \w")


def test_twenty_quick_n_presses_end_where_twenty_slow_ones_do(zoo, tmp_path):
    net = zoo / "resnet50" / "predict_net.pbtxt"
    screens = {}
    with private_tmux(tmp_path) as tmux:
        for how in ("fast", "slow"):
            session = f"netviz-{how}-{uuid.uuid4().hex[:6]}"
            cmd = f"cd {ROOT} && env -u COLUMNS -u LINES {NETVIZ} {net}; sleep 30"
            tmux("-f", "/dev/null", "new-session", "-d", "-s", session, "-x", "160", "-y", "48", cmd)
            wait_screen(tmux, session, "Conv #0")
            if how == "fast":
                tmux("send-keys", "-t", session, *["n"] * STEPS)  # one write: no delay between keys
            else:
                for k in range(1, STEPS + 1):
                    tmux("send-keys", "-t", session, "n")
                    settled(tmux, session, k)
            screens[how] = settled(tmux, session, STEPS)
            tmux("send-keys", "-t", session, "q")
    fast, slow = screens["fast"], screens["slow"]
    assert status_line(fast) == status_line(slow)
    for screen in (fast, slow):
        assert "not found" not in screen and "Error" not in screen
