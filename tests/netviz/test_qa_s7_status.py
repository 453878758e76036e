"""QA sweep s7: the status line at 80 columns kept the tail of the pc's op type (``pc …lBNGradient`` at a
ResNet-50 backward stop) and dropped its op number; the innermost ``op#N`` now stays whole."""
from __future__ import annotations

from netviz.widgets.status_line import cut_pc, fit_status

PC = "main › op#349 SpatialBNGradient"
FLAGS = ["backward", "follow", "overlay:time", "zoom:overview"]


def test_an_80_column_status_line_keeps_the_pcs_op_number() -> None:
    line = fit_status(PC, "resnet50 › op 349", FLAGS, 78).plain  # the widget's width in an 80-column window
    assert line.startswith("pc …op#349 Spa…  │  ") and line.endswith(" ".join(FLAGS)) and len(line) <= 78


def test_the_cut_is_only_as_deep_as_needed() -> None:
    assert cut_pc(PC, 40) == PC
    assert cut_pc(PC, 26) == "… op#349 SpatialBNGradient"  # the whole op shows: cut as before
    assert cut_pc("main › While op#2 iteration 0 › op#1 Tanh", 13) == "… › op#1 Tanh"
    assert cut_pc("main › end", 5) == "… end"
    assert cut_pc(PC, 8) == "…radient"  # no room for "…op#349 X…": cut as before
    for room in range(1, len(PC) + 1):
        assert len(cut_pc(PC, room)) <= room
