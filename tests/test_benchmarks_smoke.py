"""The benchmark command runs end to end at tiny sizes, so it cannot rot (no timing asserts)."""
from __future__ import annotations

import pytest

from benchmarks.__main__ import main


def test_benchmarks_quick_run_prints_a_table_without_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("benchmark")
    assert "error:" not in out, out
