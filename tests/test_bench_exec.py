"""benchmarks/bench_exec.py's Conv rows: netviz and the reference alternated, the best of each side kept,
PyTorch first (the printed table's ratio is to the first reference)."""
from __future__ import annotations

import re

import pytest

from benchmarks import bench_exec
from benchmarks.__main__ import format_table


def test_conv_row_alternates_rounds_and_keeps_each_sides_best(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = iter([{"caffe2": 0.003, "pytorch": 0.0004}, {"caffe2": 0.002, "pytorch": 0.0006}])
    calls = []

    def reference(code: str) -> dict[str, float]:
        calls.append(code)
        return next(answers)
    monkeypatch.setattr(bench_exec, "_caffe2", reference)
    monkeypatch.setattr(bench_exec, "CONV_REPEAT", 1)
    row = bench_exec.bench_conv(False, xs=(1, 8, 12, 12), wshape=(8, 8, 3, 3))
    assert len(calls) == bench_exec.CONV_ROUNDS == 2
    assert row["reference"] == {"pytorch": 0.0004, "caffe2": 0.002}
    assert list(row["reference"]) == ["pytorch", "caffe2"]
    ratio = float(re.search(r"caffe2 \S+s\s+(\S+)", format_table([row]).splitlines()[2]).group(1))
    assert ratio == pytest.approx(row["netviz_s"] / 0.0004, abs=0.006)  # 2 decimals printed
