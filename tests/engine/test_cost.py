"""engine.analysis.cost against Caffe2's own cost inference (golden from tests/oracle/gen_costs.py).

Every row is an op Caffe2 1.10.2 ran ``workspace.GetOperatorCost`` on; netviz must give the same
``(flops, bytes_written, bytes_read)``, or refuse where Caffe2 refuses.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format

from engine.caffe2 import workspace
from engine.errors import ExecutionError
from proto import caffe2_pb2

CASES = json.loads((Path(__file__).resolve().parents[1] / "golden" / "costs" / "cases.json").read_text())["cases"]


def _case_id(row: dict) -> str:
    op = text_format.Parse(row["op"], caffe2_pb2.OperatorDef())
    return f"{op.type}-" + "x".join("_".join(map(str, i["shape"])) + i["dtype"] for i in row["inputs"])


@pytest.mark.parametrize("row", CASES, ids=[f"{i}-{_case_id(r)}" for i, r in enumerate(CASES)])
def test_cost_matches_caffe2(row: dict) -> None:
    op = text_format.Parse(row["op"], caffe2_pb2.OperatorDef())
    workspace.ResetWorkspace()
    for name, spec in zip(op.input, row["inputs"]):
        workspace.FeedBlob(name, np.zeros(spec["shape"], spec["dtype"]))
    if "error" in row:
        with pytest.raises(ExecutionError, match="Cost inference function not defined"):
            workspace.GetOperatorCost(op, op.input)
        return
    assert list(workspace.GetOperatorCost(op, op.input)) == row["cost"]


def test_every_costed_op_type_is_checked_against_caffe2() -> None:
    """No cost rule in engine.analysis.cost goes without a Caffe2 row (Conv has its own oracle cases)."""
    from engine.analysis.cost import COSTS
    checked = {text_format.Parse(r["op"], caffe2_pb2.OperatorDef()).type for r in CASES if "cost" in r}
    assert set(COSTS) - checked - {"Conv", "Conv1D", "Conv2D", "Conv3D"} == set()
