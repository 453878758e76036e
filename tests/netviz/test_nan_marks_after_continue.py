"""A NaN written mid-net is marked on the op that wrote it after a whole-net move, in `netviz run`
and in the TUI (op list, canvas, minimap): DenseNet-121 with one NaN in the scale of op 40 (a Mul).

The debugger counts NaN/Inf when an op is recorded and computes norms when read
(engine.debugger.records.Health); these are the user-facing ends of that.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from netviz.cli import main
from netviz.session import OpRef
from tests.netviz.waiting import asynctest, continue_to_end, ready, wait_for

POISONED, OP = "conv2_4/x1/bn_w", 40  # op 40: Mul(conv2_4/x1/bn, conv2_4/x1/bn_w), 64 channels of 56x56


def nan_scale(tmp_path: Path) -> str:
    """``--input`` spec: the scale op 40 multiplies by, one of its 64 channels NaN."""
    scale = np.ones(64, dtype=np.float32)
    scale[5] = np.nan
    np.save(tmp_path / "scale.npy", scale)
    return f"{POISONED}={tmp_path / 'scale.npy'}"


def rows(out: str) -> dict[int, str]:
    """`netviz run`'s table: op index → its row."""
    got = {}
    for line in out.splitlines():
        head = line.split(maxsplit=1)
        if head and head[0].isdigit() and not head[1].startswith("ops in"):
            got[int(head[0])] = line
    return got


def test_netviz_run_marks_the_op_that_wrote_the_nan(zoo: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    net = str(zoo / "densenet121" / "predict_net.pbtxt")
    assert main(["run", net, "--random-params", "--input", nan_scale(tmp_path)]) == 0
    table = rows(capsys.readouterr().out)
    assert len(table) == 668
    assert f"NaN×{56 * 56}" in table[OP] and "conv2_4/x1/bn_internal[1, 64, 56, 56]" in table[OP]
    assert not [i for i in range(OP) if "NaN" in table[i]], "no op before it wrote a NaN"
    assert "NaN" in table[667]  # it spreads to the end
    assert main(["run", net, "--random-params", "--input", nan_scale(tmp_path), "--break-on-nan"]) == 1
    out = capsys.readouterr().out
    assert f"by op {OP} Mul (conv2_4/x1/bn_internal)" in out and len(rows(out)) == OP + 1


@asynctest
async def test_the_tui_marks_the_op_that_wrote_the_nan_after_c(zoo: Path, tmp_path: Path) -> None:
    from netviz.app import NetvizApp
    from netviz.session import Session
    from netviz.widgets.minimap import Minimap, cells_for

    app = NetvizApp(Session.open(zoo / "densenet121" / "predict_net.pbtxt", inputs=[nan_scale(tmp_path)]))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await continue_to_end(pilot, app, timeout=120)
        main_screen = app.main
        await pilot.pause()
        tree = main_screen.op_tree
        label = {i: str(tree.nodes_by_ref[OpRef((), i)].label) for i in (OP - 1, OP, OP + 1)}
        assert label[OP].startswith("!") and label[OP - 1].startswith("✓") and label[OP + 1].startswith("!"), label
        canvas = main_screen.canvas
        assert OP in canvas.nan_ops and not {i for i in canvas.nan_ops if i < OP}
        minimap = main_screen.query_one(Minimap)
        cells = cells_for(minimap.n_ops(), minimap.size.width)
        at = next(c for c, r in enumerate(cells) if OP in r)
        await wait_for(pilot, lambda: minimap.text()[1][at] == "!", "the minimap's NaN mark")
        assert "!" not in minimap.text()[1][:at]  # the cells before it hold only ops before it
        record = app.session.record(OpRef((), OP))
        assert record.outputs[0].nan_count == 56 * 56 and record.outputs[0].norm is None
        clean = app.session.record(OpRef((), OP - 1))
        assert clean.outputs[0].nan_count == 0 and clean.outputs[0].norm > 0
