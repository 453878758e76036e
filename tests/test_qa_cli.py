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
