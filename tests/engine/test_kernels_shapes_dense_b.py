"""Shape rules of the conv/pool/image, loss, rnn-unit and optimizer kernels (issue #18 part B) agree
with the shapes and dtypes real Caffe2 produced on every recorded oracle case (tests/golden/kernels_*)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format

import engine.runtime.ops  # noqa: F401  (fills SHAPES)
from engine.runtime.shapes import TensorInfo, inference_is_not_run
from engine.runtime.inference import infer_op
from proto import caffe2_pb2

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
_DT = caffe2_pb2.TensorProto
DTYPES = {"float32": _DT.FLOAT, "int32": _DT.INT32, "int64": _DT.INT64, "float64": _DT.DOUBLE,
          "float16": _DT.FLOAT16, "bool": _DT.BOOL, "uint8": _DT.UINT8}
CASES = [p for fam in ("conv", "loss", "rnn", "optim") for p in sorted((GOLDEN / f"kernels_{fam}").glob("*.json"))
         if '"error"' not in p.read_text()]


@pytest.mark.parametrize("path", CASES, ids=lambda p: f"{p.parent.name[8:]}/{p.stem}")
def test_shape_rule_matches_caffe2(path: Path) -> None:
    data = json.loads(path.read_text())
    with np.load(path.with_suffix(".npz")) as z:
        arrays = {k: z[k] for k in z.files}
    op = text_format.Parse(data["op"], caffe2_pb2.OperatorDef())
    if inference_is_not_run(op):
        pytest.skip("the rule is Caffe2's shape inference, which differs from its kernel's output (docs/fidelity.md)")
    ins = [TensorInfo(arrays[f"in{i}"].shape, DTYPES.get(str(arrays[f"in{i}"].dtype)))
           for i in range(len(data["inputs"]))]
    outs = infer_op(op, ins)
    for k in range(len(data["outputs"])):
        ref, got = arrays[f"out{k}"], outs[k]
        if got.shape is not None:
            assert all(g is None or g == r for g, r in zip(got.shape, ref.shape)) and len(got.shape) == ref.ndim, \
                f"output {k}: rule {got} vs Caffe2 {ref.shape}"
        if got.dtype is not None:
            want = _DT.STRING if ref.dtype.kind == "U" else DTYPES[str(ref.dtype)]  # goldens store strings as str
            assert got.dtype == want, f"output {k}: rule dtype {got.dtype} vs Caffe2 {ref.dtype}"
