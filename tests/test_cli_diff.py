"""`netviz diff --devices cpu,gpu` and the early `--device gpu` check of `netviz PATH`."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine.runtime import device as dev
from engine.model.modelio import save_net
from netviz.cli import main
from tests.engine.test_debugger_hunt import bn_relu_model

MLP = str(Path(__file__).resolve().parents[1] / "examples" / "mlp" / "predict_net.pb")


def test_diff_runs_both_devices_and_names_the_stand_in(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = bn_relu_model()
    save_net(m.init, tmp_path / "init_net.pb")
    net = save_net(m.predict, tmp_path / "predict_net.pb")
    assert main(["diff", str(net), "--devices", "cpu,gpu"]) == 0
    out = capsys.readouterr().out
    if dev.cupy_module() is None:
        assert "stand-in device" in out
    for blob in ("conv1", "conv1_bn", "pool1"):
        assert any(line.split()[:1] == [blob] for line in out.splitlines())
    assert "none differs by more than 0.0001" in out


def test_diff_refuses_other_devices(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", MLP, "--devices", "cpu,tpu"]) == 2
    assert "only cpu,gpu" in capsys.readouterr().err


@pytest.mark.skipif(dev.has_gpu(), reason="a GPU is here: --device gpu is fine")
def test_device_gpu_without_a_gpu_is_refused_before_the_ui_starts() -> None:
    # a subprocess without a terminal: were the UI to start, it would hang or fail differently
    done = subprocess.run([sys.executable, "-m", "netviz.cli", MLP, "--device", "gpu"], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--device gpu" in lines[0] and "--device cpu" in lines[0]
