"""Overlay tags read as a person writes a time: no exponent, a unit that fits (the TUI showed
``1.6e+02ms`` for a 160 ms op)."""
from __future__ import annotations

import pytest

from netviz.overlays import _seconds


@pytest.mark.parametrize(("seconds", "shown"), [
    (3e-7, "0.3µs"), (8.5e-4, "850µs"), (3.2e-3, "3.2ms"), (0.0567, "57ms"), (0.163, "160ms"),
    (0.9997, "1s"), (0.00099951, "1ms"), (1.6, "1.6s"), (75.3, "75s"),
])
def test_time_tags_have_no_exponent(seconds: float, shown: str) -> None:
    assert _seconds(seconds) == shown
    assert "e" not in _seconds(seconds).rstrip("s").replace("µ", "")
