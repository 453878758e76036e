"""Shape rules of the sparse, segment, sequence, feature, histogram, quantised-storage, sampling and
string kernels (issue #19) agree with the shapes and dtypes real Caffe2 produced on every recorded
oracle case; the check itself is the dense families' (tests/engine/test_kernels_shapes_dense_b.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.engine.test_kernels_shapes_dense_b import GOLDEN
from tests.engine.test_kernels_shapes_dense_b import test_shape_rule_matches_caffe2 as check_shape_rule

FAMILIES = ("segment", "lengths", "sequence", "features", "histogram", "rowwise_quant", "sampling")
CASES = [p for fam in FAMILIES for p in sorted((GOLDEN / f"kernels_{fam}").glob("*.json"))
         if '"error"' not in p.read_text() and not json.loads(p.read_text())["extra_ops"]  # fed = what ran
         and not p.stem.startswith("String")]  # NOTE: the shared check has no string dtype


@pytest.mark.parametrize("path", CASES, ids=lambda p: f"{p.parent.name[8:]}/{p.stem}")
def test_sparse_shape_rule_matches_caffe2(path: Path) -> None:
    check_shape_rule(path)
