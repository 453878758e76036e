"""Kernels added for the differential gaps: Lengths*/SparseLengths* gradients, LengthsMax, OneHot,
SumReduceLike, and the Python op's clear error; gradients vs central differences."""
from __future__ import annotations

import numpy as np
import pytest

from engine.errors import ExecutionError
from engine.runtime.executor import run_op
from engine.runtime.workspace import eval_op
from engine.caffe2.gradient_checker import finite_difference_op
from engine.model.opdef import create_operator
from engine.caffe2.workspace import Workspace

rng = np.random.default_rng(0)
DATA, LENGTHS = rng.normal(size=(5, 3)), np.array([2, 0, 3], np.int32)


def test_lengths_max_and_its_gradient():
    y = eval_op("LengthsMax", DATA, LENGTHS)[0]
    np.testing.assert_allclose(y, [DATA[:2].max(0), np.zeros(3), DATA[2:].max(0)])
    dy = rng.normal(size=y.shape)
    dx = eval_op("LengthsMaxWithMainInputAndForwardOutputGradient", y, dy, LENGTHS, DATA)[0]
    np.testing.assert_allclose(dx, finite_difference_op("LengthsMax", [DATA, LENGTHS], 0, dy), atol=1e-6)


def test_lengths_mean_gradient_reads_data_for_nothing_but_rows():
    dy = rng.normal(size=(3, 3))
    dx = eval_op("LengthsIndicesInGradientMeanGradient", dy, LENGTHS, DATA)[0]
    np.testing.assert_allclose(dx, finite_difference_op("LengthsMean", [DATA, LENGTHS], 0, dy), atol=1e-6)


def test_sparse_lengths_weighted_sum_gradient_values():
    idx, w = np.array([4, 0, 1, 1, 3]), rng.normal(size=5)
    dy = rng.normal(size=(3, 3))
    values = eval_op("SparseLengthsIndicesInGradientWeightedSumGradient", w, dy, LENGTHS, idx)[0]
    dense = np.zeros_like(DATA)
    np.add.at(dense, idx, values)
    want = finite_difference_op("SparseLengthsWeightedSum", [DATA, w, idx, LENGTHS], 0, dy)
    np.testing.assert_allclose(dense, want, atol=1e-6)


def test_one_hot():
    got = eval_op("OneHot", np.array([2, 0, 3], np.int64), np.array(4, np.int64))[0]
    assert got.dtype == np.float32 and got.tolist() == np.eye(4)[[2, 0, 3]].tolist()


@pytest.mark.parametrize("a, b, args", [((2, 3, 4), (3, 4), {}), ((2, 3, 4, 5), (3,), {"axis": 1}),
                                        ((2, 3, 4), (2, 3, 4), {})])
def test_sum_reduce_like(a, b, args):
    x, like = rng.normal(size=a), np.zeros(b)
    axis = args.get("axis", len(a) - len(b))
    keep = tuple(range(axis, axis + len(b)))
    want = x.sum(axis=tuple(i for i in range(len(a)) if i not in keep))
    np.testing.assert_allclose(eval_op("SumReduceLike", x, like, **args)[0], want)


def test_python_op_without_function_is_a_clear_error():
    """The Python op runs now (engine/runtime/ops/python_op.py); one naming no function is refused, as Caffe2's
    PythonOp enforce does ('requires either pickled_builder or token arg')."""
    ws = Workspace("py")
    ws.feed_blob("X", np.ones(2, np.float32))
    with pytest.raises(ExecutionError, match="Python.*needs a pickled_builder or a token argument"):
        run_op(create_operator("Python", ["X"], ["Y"]), ws)
