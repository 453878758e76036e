"""`netviz run` and `netviz check-grad` on real example nets; their bad-input paths."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.caffe2.core import Net
from engine.model.modelio import save_net
from netviz.cli import main
from tests.engine.test_debugger import forward_model

MLP = str(Path(__file__).resolve().parents[1] / "examples" / "mlp" / "predict_net.pb")


@pytest.fixture()
def fwd(tmp_path: Path) -> Path:
    m = forward_model()
    save_net(m.init, tmp_path / "init_net.pb")
    return save_net(m.predict, tmp_path / "predict_net.pb")


def test_run_prints_a_table_and_dumps_every_version(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", MLP, "--dump", str(tmp_path / "d")]) == 0
    out = capsys.readouterr().out
    assert "WeightedSum" in out and "15 ops" in out
    index = json.loads((tmp_path / "d" / "index.json").read_text())
    files = {e["file"] for e in index}
    assert {"fc1_w@0.npy", "fc1_w@1.npy", "ITER@1.npy", "loss@1.npy"} <= files
    for e in index:
        assert np.load(tmp_path / "d" / e["file"]).shape == tuple(e["shape"])


def test_run_with_loss_runs_the_backward_pass(fwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(fwd), "--loss", "loss"]) == 0
    out = capsys.readouterr().out
    assert "∇ FCGradient" in out and "∇ SoftmaxWithLossGradient" in out


def test_run_break_on_nan_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    init, net = Net("init"), Net("nan")
    init.GivenTensorFill([], "X", shape=[2], values=[-1.0, 1.0])
    net.Log("X", "y")
    net.Relu("y", "z")
    save_net(init.Proto(), tmp_path / "init_net.pb")
    save_net(net.Proto(), tmp_path / "predict_net.pb")
    with np.errstate(all="ignore"):
        assert main(["run", str(tmp_path / "predict_net.pb"), "--break-on-nan"]) == 1
    assert "NaN" in capsys.readouterr().out


def test_check_grad_passes_on_a_correct_net(fwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-grad", str(fwd), "--loss", "loss", "--elements", "5"]) == 0
    assert "5 passed, 0 failed" in capsys.readouterr().out


@pytest.mark.parametrize("argv,expected", [
    (["run", MLP, "--input", "data"], "expected NAME=FILE.npy"),
    (["run", MLP, "--input", "data=missing.npy"], "missing.npy: no such file"),
    (["run", MLP, "--input", "data=abc"], "neither a .npy file nor a shape"),
    (["run", MLP, "--input", "data=1,x"], "neither a .npy file nor a shape"),
    (["check-grad", MLP, "--loss", "nope"], "no op writes loss blob 'nope'"),
    (["run", "/nonexistent.pb"], "no such file"),
])
def test_bad_input_is_one_line_exit_2(argv: list[str], expected: str) -> None:
    r = subprocess.run([sys.executable, "-m", "netviz.cli", *argv], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and expected in r.stderr, r.stderr


def test_run_a_weightless_zoo_net(zoo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(zoo / "zfnet512" / "predict_net.pbtxt")
    assert main(["run", path]) == 2
    assert "--random-params" in capsys.readouterr().err
    assert main(["run", path, "--random-params", "--param-width", "4"]) == 0
    out = capsys.readouterr().out
    assert "filled with random values" in out and "gpu_0/softmax[1, 1000]" in out
