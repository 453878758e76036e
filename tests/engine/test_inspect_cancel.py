"""blob_stats asks `cancelled` between slices: a pass nobody waits for stops within one slice (the TUI's
statistics worker ran its whole pass over a huge tensor after Esc or another blob, then dropped it)."""
from __future__ import annotations

import numpy as np
import pytest

from engine.debugger import inspect
from engine.debugger.inspect import StatsCancelled, blob_stats


def test_a_cancelled_pass_stops_within_one_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inspect, "CHUNK", 10)
    value = np.arange(100, dtype=np.float32)  # ten slices
    asked = []

    def cancelled() -> bool:
        asked.append(1)
        return len(asked) > 3
    with pytest.raises(StatsCancelled):
        blob_stats("x", value, cancelled=cancelled)
    assert len(asked) == 4  # three slices read, the fourth never


def test_a_pass_not_cancelled_gives_the_statistics_of_the_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inspect, "CHUNK", 7)
    value = np.linspace(-3, 5, 100).astype(np.float32)
    s = blob_stats("x", value, cancelled=lambda: False)
    assert s.min == pytest.approx(-3) and s.max == pytest.approx(5)
    assert s.mean == pytest.approx(float(value.mean()), rel=1e-6) and sum(s.histogram[0]) == 100
