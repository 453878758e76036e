"""Issue #42 item 8: an ONNX Runtime diff whose every op is within the combined tolerance says so; it
said "175 of 175 ops differ", and its rows gave a raw relative difference (2.9 % of a value near 0)."""
from __future__ import annotations

import numpy as np

from engine.onnx.export import ValueDiff, compare
from netviz.overlays import diff_header


def _row(i: int, a: np.ndarray, b: np.ndarray) -> ValueDiff:
    mx, rel, ok = compare(a, b, 1e-4, 1e-4)
    return ValueDiff(i, "Conv", f"y{i}", f"y{i}", mx, rel, ok)


def test_rounding_on_every_op_reads_within_tolerance() -> None:
    a = np.array([2.0, 1e-6], np.float32)
    near_zero = a * np.array([1.0, 1.029], np.float32)  # the near-zero element 2.9 % off
    rows = [_row(i, a, near_zero) if i % 2 else _row(i, a, a + np.float32(1e-6)) for i in range(175)]
    assert all(r.ok for r in rows) and max(r.max_rel for r in rows) > 0.02  # 2.9 % of the near-zero element...
    head = diff_header(rows)
    assert "all 175 ops within tolerance (175 differ by float rounding" in head and "of 175 ops differ" not in head


def test_an_op_over_the_tolerance_is_counted_and_named_first() -> None:
    a = np.ones(3, np.float32)
    rows = [_row(0, a, a), _row(1, a, a + 0.5), _row(2, a, a + 1e-6), _row(3, a, a + 2.0)]
    head = diff_header(rows)
    assert "2 of 4 ops over the tolerance, first over the tolerance: op #1 Conv 'y1'" in head
    assert "worst op #3 Conv 'y3' (abs 2)" in head
