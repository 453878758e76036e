"""Fused SparseLengths*-gradient Adagrad ops equal their two-op composition (the segment gradient
expanded to one row per index, then SparseAdagrad / RowWiseSparseAdagrad, both checked against
Caffe2 by the oracle), with --fix-caffe2 on segments that Caffe2 1.10's WeightedSum form gets wrong
(docs/fidelity.md); by default the fused op weights rows as Caffe2 does (the oracle checks that)."""
from __future__ import annotations

import numpy as np
import pytest

import engine.runtime.ops  # noqa: F401  (fills the kernel table)
from engine.runtime.workspace import eval_op
from engine.analysis.lint import fix_caffe2

R = np.random.RandomState(5)
P, H1, HR = R.randn(6, 3).astype("f4"), R.uniform(0.1, 1, (6, 3)).astype("f4"), R.uniform(0.1, 1, 6).astype("f4")
W, G = R.randn(5).astype("f4"), R.randn(3, 3).astype("f4")
I, L, LR = np.array([1, 4, 1, 0, 5], "i4"), np.array([2, 0, 3], "i4"), np.array([-0.1], "f4")
SEG = np.repeat(np.arange(3), L)


@pytest.mark.parametrize("rowwise", ["", "RowWise"])
@pytest.mark.parametrize("kind", ["Sum", "WeightedSum", "Mean"])
def test_fused_equals_composition(rowwise, kind):
    h = HR if rowwise else H1
    rows = G[SEG] * (W[:, None] if kind == "WeightedSum" else 1) / (L[SEG][:, None] if kind == "Mean" else 1)
    want = eval_op(f"{rowwise}SparseAdagrad", P, h, I, rows.astype("f4"), LR, n_out=2, epsilon=1e-4)
    ins = (P, h, W, I, G, LR, L) if kind == "WeightedSum" else (P, h, I, G, LR, L)
    with fix_caffe2():
        got = eval_op(f"{rowwise}SparseAdagradFusedWithSparseLengths{kind}Gradient", *ins,
                      n_out=3 if kind == "WeightedSum" else 2, epsilon=1e-4)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6, atol=1e-6)
    if kind == "WeightedSum":  # d(loss)/d(weight i) = <segment gradient, the index's row before the update>
        np.testing.assert_allclose(got[2], (G[SEG] * P[I]).sum(axis=1), rtol=1e-6)
