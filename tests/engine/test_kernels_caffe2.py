"""Kernel outputs vs goldens recorded from real Caffe2 1.10.2 (tests/golden/kernels/).

The goldens came from ``tests/golden/kernels/gen_caffe2_kernels.py`` run under ``.venv-caffe2``;
each case is one op on fixed inputs, outputs compared at rtol 1e-4 with dtype and shape equal.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.runtime.workspace import eval_op

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "kernels"
META = json.loads((GOLDEN / "caffe2_1_10_2.json").read_text())
DATA = np.load(GOLDEN / "caffe2_1_10_2.npz")


@pytest.mark.parametrize("case", META, ids=lambda c: f"{c['type']}-{c['case']}")
def test_kernel_matches_caffe2(case):
    i = case["case"]
    inputs = [DATA[f"c{i}_in{j}"] for j in range(case["n_in"])]
    got = eval_op(case["type"], *inputs, n_out=case["n_out"], **case["args"])
    for k, g in enumerate(got):
        ref = DATA[f"c{i}_out{k}"]
        g = np.asarray(g)
        assert g.dtype == ref.dtype and g.shape == ref.shape, (k, g.dtype, ref.dtype, g.shape, ref.shape)
        np.testing.assert_allclose(g, ref, rtol=1e-4, atol=1e-5)
