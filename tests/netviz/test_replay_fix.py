"""QA findings fixed by "replay-fix": the ONNX export of a plan, and replay's ``s`` into a control-flow op."""
from __future__ import annotations

from pathlib import Path

import pytest

from netviz.session import Session

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_onnx_export_of_a_plan_writes_the_net_the_plan_trains(tmp_path: Path) -> None:
    """QA: the export dialog's ONNX row on examples/mlp/plan.pbtxt failed with "op ExecutionStep is not a
    Caffe2 op"; the TUI exports ``session.model`` (the plan as a net of its steps) as this test does."""
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from engine.onnx.export import export_file

    session = Session.open(EXAMPLES / "mlp" / "plan.pbtxt")
    target = tmp_path / "plan.onnx"
    line = export_file(session.model, session.values, str(target), random_params=not len(session.model.init.op))
    assert "values equal in ONNX Runtime" in line, line
    ops = {n.op_type for n in onnx.load(str(target)).graph.node}
    assert {"Gemm", "Relu"} <= ops or {"MatMul", "Relu"} <= ops, ops  # mlp_train's FC → Relu → FC
