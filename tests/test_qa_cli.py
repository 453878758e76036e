"""What a user's slips at the command line get back (the QA pass of the user's path): one line naming
the file, op or blob and what is wrong, before anything runs."""
from __future__ import annotations

from pathlib import Path

import pytest

from netviz.cli import main

ROOT = Path(__file__).resolve().parents[1]
MLP_FORWARD = ROOT / "examples" / "mlp_forward"


def _cli(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as e:  # argparse
        rc = int(e.code or 0)
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("command", ["run", "check-grad", "grad"])
def test_a_mistyped_loss_is_one_line_before_anything_runs(command, capsys):
    """`run --loss nope` ran the forward table, then a loss-seed ConstantFill failed on 'nope'."""
    rc, out, err = _cli(capsys, command, MLP_FORWARD / "predict_net.pb", "--init", MLP_FORWARD / "init_net.pb",
                        *(["--input", "data=16,8"] if command != "grad" else []), "--loss", "nope")
    assert rc == 2
    assert "FC" not in out, out  # no per-op table: nothing ran
    lines = [ln for ln in err.splitlines() if ln.startswith("netviz: ") and "note:" not in ln]
    assert len(lines) == 1, err
    assert "loss blob 'nope'" in lines[0], lines[0]


def test_a_good_loss_still_runs_the_backward_pass(capsys):
    rc, out, _ = _cli(capsys, "run", MLP_FORWARD / "predict_net.pb", "--init", MLP_FORWARD / "init_net.pb",
                      "--input", "data=16,8", "--loss", "loss")
    assert rc == 0
    assert "FCGradient" in out


def test_lint_refuses_a_loss_the_net_does_not_make(capsys):
    """`lint --loss nope` checked no op and said "0 findings" (exit 0): a clean bill for a typo."""
    rc, out, err = _cli(capsys, "lint", ROOT / "examples" / "mlp" / "predict_net.pb", "--loss", "nope")
    assert rc == 2
    assert "findings" not in out
    assert "loss blob 'nope'" in err
    rc, out, _ = _cli(capsys, "lint", ROOT / "examples" / "while_net" / "predict_net.pb", "--loss", "loss")
    assert rc == 1 and "while-writes-outer-blob" in out


def test_extract_of_an_if_without_outputs_checks_what_its_branch_wrote(tmp_path, capsys):
    """Mask R-CNN's If declares no outputs: its repro compared nothing ("0 of 0 outputs match")."""
    import subprocess
    import sys

    import numpy as np

    from engine.model.modelio import save_net
    from engine.model.opdef import create_operator as op
    from proto import caffe2_pb2

    then_net = caffe2_pb2.NetDef(name="then", op=[op("Relu", "x", "z")])
    else_net = caffe2_pb2.NetDef(name="else", op=[op("Sigmoid", "x", "w")])
    net = caffe2_pb2.NetDef(name="branch", op=[op("If", ["cond"], [], then_net=then_net, else_net=else_net)])
    net.external_input.extend(["cond", "x"])
    x = np.array([[-1.0, 2.0, -3.0]], dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "cond.npy", np.array(True))
    rc, out, err = _cli(capsys, "extract", save_net(net, tmp_path / "branch.pbtxt"), "--ops", "0",
                        "--input", f"x={tmp_path / 'x.npy'}", "--input", f"cond={tmp_path / 'cond.npy'}",
                        "-o", tmp_path / "repro")
    assert rc == 0, err
    expected = np.load(tmp_path / "repro" / "expected.npz")
    assert expected.files == ["z"]  # the branch taken; the else branch's w was never written
    np.testing.assert_allclose(expected["z"], np.maximum(x, 0))
    ran = subprocess.run([sys.executable, "repro.py"], cwd=tmp_path / "repro", capture_output=True, text=True,
                         timeout=120)
    assert "1 of 1 outputs match" in ran.stdout, ran.stdout + ran.stderr
