"""run_compiled's inline path for simple CPU ops (issue 46: per-op dispatch overhead) against run_bound."""
from __future__ import annotations

import numpy as np
import pytest

from engine.caffe2.workspace import Workspace
from engine.errors import ExecutionError
from engine.model.opdef import create_operator
from engine.runtime import executor
from proto import caffe2_pb2


def _net(*ops: caffe2_pb2.OperatorDef) -> caffe2_pb2.NetDef:
    net = caffe2_pb2.NetDef(name="n")
    net.op.extend(ops)
    return net


def _ops():
    return (create_operator("Scale", "x", "a", scale=-2.0), create_operator("Relu", "a", "b"),
            create_operator("Split", "x", ["s0", "s1"], split=[2, 1], axis=0),
            create_operator("Conv", ["img", "w"], "y", kernel=3), create_operator("Sum", ["b", "a"], "b"))


def _workspace():
    ws = Workspace("w")
    r = np.random.default_rng(0)
    ws.feed_blob("x", np.array([-1.0, 0.5, 2.0], np.float32))
    ws.feed_blob("img", r.standard_normal((1, 2, 5, 5)).astype(np.float32))
    ws.feed_blob("w", r.standard_normal((3, 2, 3, 3)).astype(np.float32))
    return ws


def test_inline_ops_are_the_simple_cpu_ones():
    c = executor.compile_net(_net(*_ops()), _workspace())
    assert [b.direct for b in c.ops] == [True, True, False, False, True]  # Split: 2 outputs; Conv: a context


def test_compiled_run_equals_op_by_op_run():
    fast, slow = _workspace(), _workspace()
    executor.run_compiled(executor.compile_net(_net(*_ops()), fast), fast)
    for b in executor.compile_net(_net(*_ops()), slow).ops:
        executor.run_bound(b, slow)
    for name in ("a", "b", "s0", "s1", "y"):
        np.testing.assert_array_equal(fast.fetch_blob(name), slow.fetch_blob(name))
        assert fast.devices[name] == slow.devices[name]


def test_inline_op_failure_is_the_same_one_line_error():
    ws = _workspace()
    c = executor.compile_net(_net(create_operator("Relu", "missing", "out")), ws)
    with pytest.raises(ExecutionError, match=r"n: op #0 Relu '': input blob 'missing' not found"):
        executor.run_compiled(c, ws)
    assert "out" not in ws.values
