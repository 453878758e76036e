"""Caffe2 runtime semantics outside single kernels: string blobs are bytes, GlobalInit's FP-exception
flag, op instance state over RunOperatorMultiple, UnsafeCoalesce's shared memory (values checked
against real Caffe2 1.10.2 by hand; see each test)."""
from __future__ import annotations

import numpy as np
import pytest

from engine.caffe2 import core, workspace
from engine.errors import ExecutionError


@pytest.fixture(autouse=True)
def _fresh_workspace():
    workspace.ResetWorkspace()
    yield
    core.GlobalInit(["caffe2", "--caffe2_operator_throw_if_fp_exceptions=0"])
    workspace.ResetWorkspace()


@pytest.mark.parametrize("fed", [np.array(["a", "bé"]), np.array(["a", "bé"], dtype=object),
                                 np.array([b"a", "bé".encode()]), np.array(["a", b"b\xc3\xa9"], dtype=object)])
def test_string_tensors_come_back_as_bytes(fed):
    # Caffe2: every one of these fetches as array([b'a', b'b\xc3\xa9'], dtype=object)
    workspace.FeedBlob("s", fed)
    got = workspace.FetchBlob("s")
    assert got.dtype == object and got.tolist() == [b"a", "bé".encode()]


def test_cast_to_string_and_kernel_made_strings_fetch_as_bytes():
    workspace.FeedBlob("i", np.array([1, -2], np.int32))
    workspace.RunOperatorOnce(core.CreateOperator("Cast", ["i"], ["o"], to=core.DataType.STRING))
    assert workspace.FetchBlob("o").tolist() == [b"1", b"-2"]


def test_fp_exception_flag_makes_division_by_zero_fail():
    workspace.FeedBlob("one", np.array([1.0], np.float32))
    workspace.FeedBlob("zero", np.array([0.0], np.float32))
    div = core.CreateOperator("Div", ["one", "zero"], ["out"])
    core.GlobalInit(["caffe2", "--caffe2_operator_throw_if_fp_exceptions=1"])
    with pytest.raises(ExecutionError, match="divide by zero"):
        workspace.RunOperatorOnce(div)
    core.GlobalInit(["caffe2", "--caffe2_operator_throw_if_fp_exceptions=0"])
    with np.errstate(divide="ignore"):
        workspace.RunOperatorOnce(div)
    assert np.isinf(workspace.FetchBlob("out")).all()


def test_run_operator_multiple_keeps_the_op_instance():
    # Caffe2 1.10: a row holding an invalid (negative) index is counted per op instance; the 3rd run of one
    # instance with max_skipped_indices=3 fails, while separate RunOperatorOnce calls never do.
    op = core.CreateOperator("SparseToDenseMask", ["i", "v", "d"], ["o"], mask=[1, 2], max_skipped_indices=3)
    workspace.FeedBlob("i", np.array([-1, 1], np.int32))
    workspace.FeedBlob("v", np.array([3.0, 4.0], np.float32))
    workspace.FeedBlob("d", np.array(0.0, np.float32))
    for _ in range(4):
        workspace.RunOperatorOnce(op)
    assert workspace.FetchBlob("o").tolist() == [4.0, 0.0]
    workspace.RunOperatorMultiple(op, 2)
    with pytest.raises(ExecutionError, match="Too many rows with invalid sparse indices"):
        workspace.RunOperatorMultiple(op, 3)


def test_unsafe_coalesce_outputs_share_memory_with_the_buffer():
    xs = [np.arange(6, dtype=np.float32).reshape(2, 3), np.ones(2, np.float32)]
    names = ["x0", "x1"]
    for n, x in zip(names, xs):
        workspace.FeedBlob(n, x)
    workspace.RunOperatorOnce(core.CreateOperator("UnsafeCoalesce", names, names + ["buf"]))
    assert workspace.FetchBlob("buf").tolist() == [0, 1, 2, 3, 4, 5, 1, 1]
    workspace.FeedBlob("buf", np.full(8, -2.0, np.float32))
    assert (workspace.FetchBlob("x0") == -2).all() and workspace.FetchBlob("x0").shape == (2, 3)
    assert (workspace.FetchBlob("x1") == -2).all()
    workspace.FeedBlob("x0", np.zeros((2, 3), np.float32))  # an ordinary blob: replaced, the buffer keeps -2
    assert (workspace.FetchBlob("buf") == -2).all()
