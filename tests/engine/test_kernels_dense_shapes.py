"""Shape rules of the dense kernel families agree with what real Caffe2 produced.

Every recorded case of the ``math``, ``reduce``, ``norm`` and ``tensor`` oracle families
(``tests/golden/kernels_<family>/``) that ran in Caffe2 is inferred statically from its input
shapes and dtypes; each output the rule knows must have Caffe2's shape (unknown dims are allowed)
and, when the rule gives one, Caffe2's dtype.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format

from engine.runtime.blobio import data_type_of
from engine.runtime.shapes import TensorInfo, inference_is_not_run
from engine.runtime.inference import infer_op
from proto import caffe2_pb2

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
FAMILIES = ("math", "reduce", "norm", "tensor")
CASES = sorted(p for f in FAMILIES for p in (GOLDEN / f"kernels_{f}").glob("*.json")
               if '"error"' not in p.read_text())


@pytest.mark.parametrize("path", CASES, ids=lambda p: f"{p.parent.name[len('kernels_'):]}/{p.stem}")
def test_shape_rule_matches_caffe2(path: Path) -> None:
    data = json.loads(path.read_text())
    if not data.get("npz"):
        pytest.skip("no arrays recorded")
    with np.load(path.with_name(data["npz"])) as z:
        arrays = {k: z[k] for k in z.files}
    if data.get("extra_ops"):
        pytest.skip("inputs made by extra ops")
    op = text_format.Parse(data["op"], caffe2_pb2.OperatorDef())
    if inference_is_not_run(op):
        pytest.skip("the rule is Caffe2's shape inference, which differs from its kernel's output (docs/fidelity.md)")
    ins = [TensorInfo(arrays[f"in{i}"].shape, data_type_of(arrays[f"in{i}"])) for i in range(len(data["inputs"]))]
    got = infer_op(op, ins, where=path.stem)
    for k, info in enumerate(got):
        ref = arrays.get(f"out{k}")
        if ref is None or info.shape is None:
            continue
        assert len(info.shape) == ref.ndim, f"output {k}: rank of {info} vs Caffe2's {ref.shape}"
        assert all(d is None or d == r for d, r in zip(info.shape, ref.shape)), f"output {k}: {info} vs {ref.shape}"
        if info.dtype is not None:
            assert info.dtype == data_type_of(ref), f"output {k}: dtype {info} vs Caffe2's {ref.dtype}"
