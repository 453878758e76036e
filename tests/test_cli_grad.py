"""`netviz grad -o` writes a backward net that runs, and `check-grad` on training nets and zoo nets."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.caffe2 import core
from engine.runtime import executor
from engine.caffe2.gradient_checker import check_model_gradients
from engine.model.modelio import load_net, save_net
from engine.caffe2.workspace import Workspace
from netviz.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _inplace_prelu(path: Path) -> Path:
    net = core.Net("prelu_inplace")
    net.FC(["X", "W", "b"], "h")
    net.PRelu(["h", "slope"], "h")  # its gradient reads the input h, which the op overwrites
    net.AveragedLoss("h", "loss")
    return save_net(net.Proto(), path)


def test_grad_output_is_caffe2s_by_default_and_saves_inputs_with_fix_caffe2(tmp_path, capsys):
    src = _inplace_prelu(tmp_path / "prelu.pbtxt")
    assert main(["grad", str(src), "--loss", "loss", "-o", str(tmp_path / "exact.pbtxt")]) == 0
    assert "Copy" not in capsys.readouterr().out  # Caffe2's gradient reads the overwritten h
    assert [op.type for op in load_net(tmp_path / "exact.pbtxt").op][:2] == ["FC", "PRelu"]
    assert main(["grad", str(src), "--loss", "loss", "-o", str(tmp_path / "g.pbtxt"), "--fix-caffe2"]) == 0
    assert "1 Copy saving an in-place input" in capsys.readouterr().out
    written = load_net(tmp_path / "g.pbtxt")
    assert [op.type for op in written.op][:2] == ["FC", "Copy"]
    rng = np.random.default_rng(0)
    feeds = {"X": rng.standard_normal((4, 3)), "W": rng.standard_normal((5, 3)), "b": rng.standard_normal(5),
             "slope": np.full(1, 0.25)}
    ws = Workspace("grad_out")
    for k, v in feeds.items():
        ws.feed_blob(k, v.astype(np.float32))
    executor.run_net(written, ws)
    # the gradient of mean(PRelu(XW' + b)) w.r.t. b, by hand: mean over rows of PRelu'(h)
    h = feeds["X"] @ feeds["W"].T + feeds["b"]
    expected = np.where(h > 0, 1.0, 0.25).sum(0) / h.size
    np.testing.assert_allclose(np.asarray(ws.values["b_grad"]), expected, rtol=1e-5)


@pytest.mark.parametrize("name", ["mlp", "lstm", "if_net", "while_net", "do_net", "nested_if_in_while"])
def test_grad_and_check_grad_work_on_every_bundled_training_example(name, tmp_path, capsys):
    path = str(EXAMPLES / name / "predict_net.pb")
    assert main(["grad", path, "--loss", "loss", "-o", str(tmp_path / "g.pb")]) == 0
    assert "differentiating its forward section" in capsys.readouterr().out
    assert main(["run", str(tmp_path / "g.pb"), "--init", str(EXAMPLES / name / "init_net.pb")]) == 0
    assert main(["check-grad", path, "--loss", "loss", "--elements", "3"]) == 0
    assert main(["export", path, "-o", str(tmp_path / "bw.dot"), "--backward"]) == 0


def test_check_grad_random_params_on_a_weightless_zoo_net(zoo, capsys):
    net = str(Path(zoo) / "zfnet512" / "predict_net.pbtxt")
    rc = main(["check-grad", net, "--loss", "gpu_0/softmax", "--random-params", "--input",
               "gpu_0/data=1,3,99,99", "--elements", "3", "--only", "gpu_0/fc8_b"])
    out = capsys.readouterr().out
    assert rc == 0 and "1 passed, 0 failed" in out


def test_check_grad_without_random_params_names_the_missing_parameter(zoo, capsys):
    net = str(Path(zoo) / "zfnet512" / "predict_net.pbtxt")
    assert main(["check-grad", net, "--loss", "gpu_0/softmax", "--input", "gpu_0/data=1,3,99,99",
                 "--elements", "1"]) == 2
    assert "gpu_0/conv1_w" in capsys.readouterr().err


def test_checker_sees_the_same_gradient_as_the_training_net_computes():
    net = load_net(EXAMPLES / "mlp" / "predict_net.pb")
    init = load_net(EXAMPLES / "mlp" / "init_net.pb")
    from engine.autodiff.training import forward_net
    results = check_model_gradients(forward_net(net), init, ["loss"], {}, ["fc2_w"], max_elements=4)
    assert [r.name for r in results] == ["fc2_w"] and results[0].passed
