"""When the compiled kernels load (engine/runtime/jit.py): a whole net run loads what its ops use before its
first op, so its first run takes the same paths as the next; an op stepped alone never waits for numba (it
starts the loading in the background and takes its NumPy path meanwhile), so a debugger step never freezes."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from engine.runtime import executor, jit
from engine.runtime.ops import norm_jit, pool
from engine.runtime.workspace import Workspace
from proto import caffe2_pb2

pytest.importorskip("numba")


def _net() -> caffe2_pb2.NetDef:
    """MaxPool on a map big enough for the pool kernels (4096 values or more)."""
    net = caffe2_pb2.NetDef(name="pooling")
    op = net.op.add(type="MaxPool", input=["x"], output=["y"])
    for name, v in (("kernel", 3), ("stride", 2), ("pad", 1)):
        op.arg.add(name=name, i=v)
    return net


@pytest.fixture
def fresh(monkeypatch):
    """Kernels on, nothing loaded yet; every MaxPool kernel run counted."""
    old = jit.enable(True)
    jit.forget()
    runs = []
    real = pool._max_pool_jit
    monkeypatch.setattr(pool, "_max_pool_jit", lambda *a: runs.append(1) or real(*a))
    yield runs
    jit.enable(old)


def _fed() -> Workspace:
    ws = Workspace("jit_loading")
    ws.feed_blob("x", np.random.default_rng(0).standard_normal((2, 4, 40, 40)).astype(np.float32))
    return ws


def test_a_whole_run_loads_the_kernels_before_its_first_op(fresh):
    ws = _fed()
    executor.run_net(_net(), ws)
    assert fresh == [1] and jit.get("pool") is not None


def test_a_step_never_waits_for_the_loading(fresh, monkeypatch):
    """A slow load (a machine's first compilation) runs behind the step: the step takes the NumPy path at
    once, with the same values; once loaded, the next step runs the kernel."""
    gate = threading.Event()
    real = jit._import
    monkeypatch.setattr(jit, "_import", lambda family: gate.wait(30) and real(family))
    ws = _fed()
    c = executor.compile_net(_net(), ws)
    t = time.perf_counter()
    executor.run_bound(c.ops[0], ws)
    assert time.perf_counter() - t < 5 and fresh == []
    numpy_y = ws.values["y"].copy()
    assert jit.get("pool") is None  # still loading: a second ask starts nothing new
    assert [t.name for t in threading.enumerate()].count("netviz-jit-pool") == 1
    gate.set()
    for t in threading.enumerate():
        if t.name == "netviz-jit-pool":
            t.join(30)
    executor.run_bound(c.ops[0], ws)
    assert fresh == [1]
    np.testing.assert_array_equal(ws.values["y"], numpy_y)


def test_nothing_loads_for_a_net_without_such_ops_or_with_the_kernels_off(fresh):
    net = caffe2_pb2.NetDef(name="relu")
    net.op.add(type="Relu", input=["x"], output=["y"])
    executor.run_net(net, _fed())
    assert "pool" not in jit._loaded and "norm" not in jit._loaded
    jit.enable(False)
    executor.run_net(_net(), _fed())
    assert jit.get("pool") is None and fresh == [] and not any(t.name.startswith("netviz-jit")
                                                               for t in threading.enumerate())


def test_the_families_are_declared_for_their_ops():
    from engine.runtime.ops import norm
    assert {jit._SERVES[k] for k in (norm.spatial_bn, norm.spatial_bn_gradient)} == {"norm"}
    assert {jit._SERVES[k] for k in (pool.max_pool, pool.max_pool_gradient)} == {"pool"}
    assert callable(norm_jit.warm)
