"""`check-grad` warns when the checked gradients are all 0 (issue #42 item 12).

A Softmax output as the loss sums to 1 per row whatever the input, so every gradient is 0 and
every check passed with no word that it showed nothing.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from engine.caffe2.gradient_checker import InputGradCheck
from netviz.cli import main

NET = """name: "fc_softmax"
op { input: "X" input: "W" input: "b" output: "Y" type: "FC" }
op { input: "Y" output: "P" type: "Softmax" }
op { input: "X" input: "V" input: "c" output: "U" type: "FC" }
external_input: "X"
external_input: "W"
external_input: "b"
external_input: "V"
external_input: "c"
external_output: "P"
"""


def _check(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, list[str]]:
    (tmp_path / "net.pbtxt").write_text(NET)
    rc = main(["check-grad", str(tmp_path / "net.pbtxt"), "--input", "X=4,5",
               "--random-params", "--elements", "5", *extra])
    return rc, capsys.readouterr().out.splitlines()


def test_a_softmax_loss_passes_with_a_warning(tmp_path, capsys):
    rc, out = _check(tmp_path, capsys, "--loss", "P", "--only", "W", "--only", "b")
    assert rc == 0 and out[-2] == "2 passed, 0 failed"
    assert out[-1].startswith("warning: every checked gradient is 0: the loss (sum of P) does not depend on")


def test_a_real_loss_gives_no_warning(tmp_path, capsys):
    rc, out = _check(tmp_path, capsys, "--loss", "Y", "--only", "W", "--only", "b")
    assert rc == 0 and out[-1] == "2 passed, 0 failed"


def test_an_input_the_loss_ignores_is_named(tmp_path, capsys):
    """With P + U as the loss, W reaches it only through the Softmax (flat), V through U."""
    rc, out = _check(tmp_path, capsys, "--loss", "P", "--loss", "U", "--only", "W", "--only", "V")
    assert rc == 0 and out[-1] == "warning: the gradients of W are 0: the loss (sum of P + U) does not depend on them"


def test_flat_needs_a_pass_and_a_zero_analytic_gradient():
    def check(a: float, passed: bool = True) -> InputGradCheck:
        return InputGradCheck("W", (2, 2), 4, 0.0, 0.0, passed, max_analytic=a, max_numeric=0.0)
    assert check(1e-9).flat and not check(0.3).flat and not check(1e-9, passed=False).flat
