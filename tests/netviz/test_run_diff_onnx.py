"""The TUI's `A` with an .onnx side B (netviz/run_diff.py, no Textual): ONNX Runtime is side B, ops get their
own error from their ONNX nodes run alone, the culprit line is the notice, and Enter's detail shows the
op's values with B's nodes re-run on A's inputs."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from netviz import run_diff
from netviz.cli import main
from netviz.session import Session

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

MLP = Path(__file__).resolve().parents[2] / "examples" / "mlp_forward" / "predict_net.pb"


def test_an_onnx_side_b_names_the_fc_whose_weight_the_file_changed(tmp_path: Path) -> None:
    out = tmp_path / "mlp.onnx"
    assert main(["export", str(MLP), "-o", str(out)]) == 0
    model = onnx.load(str(out))
    t = next(t for t in model.graph.initializer if t.name == "fc2_w")
    t.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(t) * np.float32(1.01), "fc2_w"))
    onnx.save(model, str(tmp_path / "bad.onnx"))
    session = Session.open(MLP)
    diff = run_diff.compare(session, str(tmp_path / "bad.onnx"))
    assert diff.notes[0].startswith("culprit: op #2 FC 'fc2': own error 0.01"), diff.notes
    over = [r.op_index for r in diff.rows if not r.ok]
    assert over == [2]  # the SoftmaxWithLoss after it inherits, its own error is rounding
    detail = run_diff.op_detail(session, 2)
    assert detail is not None and detail.startswith("'fc2': B's run 0.01 from A, B's op on A's inputs 0.01"), detail
    clean = run_diff.compare(session, str(out))
    assert clean.notes[0].startswith("no culprit") and all(r.ok for r in clean.rows)


def test_a_missing_onnx_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(Exception, match=r"no such file") as e:
        run_diff.compare(Session.open(MLP), str(tmp_path / "none.onnx"))
    assert "\n" not in str(e.value)
