"""The fused ends of ResNet's residual blocks (issue 46, executor.TRIPLES): SpatialBN -> Sum -> in-place Relu
(training and is_test) and Sum -> in-place ReluGradient -> SpatialBNGradient as one compiled pass per channel.
run_compiled must leave every blob as the ops run apart leave it (bit for bit: the same kernels' values, NaN and
infinities included), within float32 rounding of the plain NumPy path (no compiled kernels), over odd sizes,
batch 1, 5-D maps, both Sum orders, channel ranges over three threads; and the triples that must not fuse."""
from __future__ import annotations

import functools
from collections import Counter

import numpy as np
import pytest

from engine.runtime import executor, jit, parallel
from engine.runtime.ops import norm
from engine.runtime.workspace import Workspace
from tests.engine.test_memory_bound_fast import _fused_and_apart, _net

pytest.importorskip("numba")

SHAPES = [(3, 5, 7, 9), (1, 4, 5, 3), (2, 3, 1, 1), (2, 3, 4, 5, 3), (4, 32, 13, 11)]


@pytest.fixture(params=["one-thread", "ranges"])
def taken(request, monkeypatch):
    """Every map takes the kernels; 'ranges' cuts the channels over three threads in small blocks."""
    monkeypatch.setattr(norm, "JIT_MIN_ELEMENTS", 0)
    monkeypatch.setattr(parallel, "MIN_BYTES", 0)
    monkeypatch.setattr(parallel, "THREADS", 3 if request.param == "ranges" else 1)
    monkeypatch.setattr(parallel, "BLOCK_BYTES", 256)
    return request.param


def _counted(seen, name, fn, *args):
    seen[name] += 1
    return fn(*args)


@pytest.fixture
def calls(monkeypatch, with_jit):
    """Counts of the runs of the kernels this file tests, by name."""
    k = jit.load("norm")
    assert k is not None, jit.WHY_NOT
    seen = Counter()
    for name in ("train_sum_relu", "affine_sum_relu", "sum_relu_gradient", "affine"):
        monkeypatch.setattr(k, name, functools.partial(_counted, seen, name, getattr(k, name)))
    return seen


def _maps(shape, n, seed, special):
    """`n` float32 maps; `special` puts NaN, +-inf and zeros in the first two."""
    rng = np.random.default_rng(seed)
    maps = [(rng.standard_normal(shape) * 2).astype(np.float32) for _ in range(n)]
    if special:
        maps[0][0, 0].flat[0] = np.nan
        maps[0][-1, -1].flat[-1] = -np.inf
        maps[1].flat[1] = np.inf
        maps[1].flat[2::5] = 0
        maps[1].flat[3] = np.nan
    return maps


def _stats(c, seed):
    rng = np.random.default_rng(seed)
    return dict(s=(rng.standard_normal(c) + 1).astype(np.float32), b=rng.standard_normal(c).astype(np.float32),
                rm=rng.standard_normal(c).astype(np.float32), rv=(rng.random(c) + 0.5).astype(np.float32))


def _apart_without_jit(net, feeds):
    """The blobs after the ops run apart on the plain path (no compiled kernels)."""
    old = jit.enable(False)
    try:
        ws = Workspace("plain")
        for k, v in feeds.items():
            ws.values[k], ws.devices[k] = v.copy(), 0
        for b in executor.compile_net(net, ws).ops:
            with np.errstate(all="ignore"):
                executor.run_bound(b, ws)
        return ws.values
    finally:
        jit.enable(old)


def _near_plain(got, plain, names):
    """NaN where the plain path has NaN, its infinities, and float32 rounding of its finite values (the
    kernels' float64 sums against its float32 row sums)."""
    for k in names:
        g, p = got[k], plain[k]
        assert g.dtype == p.dtype and g.shape == p.shape, k
        np.testing.assert_array_equal(np.isnan(g), np.isnan(p), err_msg=k)
        fin = np.isfinite(p)
        np.testing.assert_array_equal(g[~fin & ~np.isnan(p)], p[~fin & ~np.isnan(p)], err_msg=k)
        big = max(1.0, float(np.abs(p[fin]).max(initial=0)))
        np.testing.assert_allclose(g[fin], p[fin], rtol=1e-4, atol=1e-4 * big, err_msg=k)


@pytest.mark.parametrize("special", [False, True], ids=["finite", "nan-inf"])
@pytest.mark.parametrize("y_first", [True, False], ids=["sum(y,r)", "sum(r,y)"])
@pytest.mark.parametrize("is_test", [0, 1])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_spatial_bn_sum_relu_fused_equals_the_ops_apart(taken, calls, shape, is_test, y_first, special):
    x, r = _maps(shape, 2, 7, special)
    bn_out = ["y"] + ([] if is_test else ["rm", "rv", "sm", "si"])
    net = _net(("SpatialBN", ["x", "s", "b", "rm", "rv"], bn_out, dict(is_test=is_test, momentum=0.8)),
               ("Sum", ["y", "r"] if y_first else ["r", "y"], ["z"], {}), ("Relu", ["z"], ["z"], {}))
    feeds = dict(x=x, r=r, **_stats(shape[1], 3))
    with np.errstate(all="ignore"):
        got = _fused_and_apart(net, feeds, [True, False, False])
    assert calls["affine_sum_relu" if is_test else "train_sum_relu"] >= 1
    assert got["z"].dtype == np.float32 and not (got["z"] < 0).any()
    assert special or (got["z"] == 0).any() and (got["z"] > 0).any()
    _near_plain(got, _apart_without_jit(net, feeds), ["z", *bn_out])


@pytest.mark.parametrize("special", [False, True], ids=["finite", "nan-inf"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_sum_relu_gradient_bn_gradient_fused_equals_the_ops_apart(taken, calls, shape, special):
    da, db, x = _maps(shape, 3, 11, special)
    y = np.maximum(_maps(shape, 1, 12, False)[0], 0)
    if special:
        y.flat[4] = np.nan  # NOTE: ReluGradient's dY * (NaN > 0) is dY * 0
    st = _stats(shape[1], 5)
    net = _net(("Sum", ["g", "g2"], ["g"], {}), ("ReluGradient", ["y", "g"], ["g"], {}),
               ("SpatialBNGradient", ["x", "s", "g", "sm", "si"], ["dx", "ds", "db"], {}))
    feeds = dict(g=da, g2=db, y=y, x=x, s=st["s"], sm=st["rm"], si=st["rv"])
    with np.errstate(all="ignore"):
        got = _fused_and_apart(net, feeds, [True, False, False])
    assert calls["sum_relu_gradient"] >= 1
    assert special or (got["g"] == 0).any() and np.abs(got["dx"]).sum() > 0
    _near_plain(got, _apart_without_jit(net, feeds), ["g", "dx", "ds", "db"])


def test_triples_that_must_not_fuse(taken, calls):
    """Marks only where the three ops read each other's outputs as the fused function does; a triple whose
    maps the kernels refuse at run time (a broadcast residual) runs apart with the same values."""
    shape = (2, 3, 4, 5)
    x, r, g, g2, y = _maps(shape, 5, 1, False)
    net = _net(("SpatialBN", ["x", "s", "b", "rm", "rv"], ["y1"], dict(is_test=1)),
               ("Sum", ["y1", "r", "r"], ["z1"], {}), ("Relu", ["z1"], ["z1"], {}),  # three inputs
               ("SpatialBN", ["x", "s", "b", "rm", "rv"], ["y2"], dict(is_test=1)),
               ("Sum", ["y2", "r"], ["z2"], {}), ("Relu", ["z2"], ["z3"], {}),  # Relu not in place
               ("SpatialBN", ["x", "s", "b", "rm", "rv"], ["y3", "rm", "rv", "sm", "si"], {}),
               ("Sum", ["y3", "y3"], ["z4"], {}), ("Relu", ["z4"], ["z4"], {}),  # reads Y twice
               ("SpatialBN", ["x", "s", "b", "m2", "v2"], ["y4"], dict(is_test=1)),
               ("Sum", ["y4", "row"], ["z5"], {}), ("Relu", ["z5"], ["z5"], {}),  # marked; runs apart
               ("Sum", ["g", "g2"], ["h"], {}), ("ReluGradient", ["y", "h"], ["h2"], {}),  # ReluGradient not in place
               ("SpatialBNGradient", ["x", "s", "h2", "sm", "si"], ["dx", "ds", "db"], {}))
    st = _stats(3, 2)
    feeds = dict(x=x, r=r, g=g, g2=g2, y=y, m2=st["rm"].copy(), v2=st["rv"].copy(), row=r[:1, :, :1, :].copy(),
                 **st)
    marks = [False, True, False] + [False] * 3 + [False, True, False] + [True, False, False] + [False, True, False]
    with np.errstate(all="ignore"):
        _fused_and_apart(net, feeds, marks)  # the pairs (Sum -> Relu, ReluGradient -> ...) where no triple fuses
    assert not calls["train_sum_relu"] + calls["affine_sum_relu"] + calls["sum_relu_gradient"]


def test_empty_maps_run_apart_with_the_ops_own_errors(taken):
    """A map of no channels is the op's own error ('no channels'), not an empty result of the fused kernel."""
    from engine.errors import ExecutionError  # noqa: PLC0415

    x = np.zeros((2, 0, 3, 3), np.float32)
    net = _net(("SpatialBN", ["x", "s", "s", "s", "s"], ["y"], dict(is_test=1)),
               ("Sum", ["y", "x"], ["z"], {}), ("Relu", ["z"], ["z"], {}))
    ws = Workspace("fuse")
    for k, v in dict(x=x, s=np.zeros(0, np.float32)).items():
        ws.values[k], ws.devices[k] = v, 0
    c = executor.compile_net(net, ws)
    assert c.ops[0].fused is not None and c.ops[0].fuses == 3
    with pytest.raises(ExecutionError, match=r"op #0 SpatialBN .*no channels"):
        executor.run_compiled(c, ws)
    assert norm.sum_relu_gradient_then_spatial_bn_gradient(x, x, x, x, x[0, :, 0, 0], x[0, :, 0, 0],
                                                           x[0, :, 0, 0]) is None


@pytest.mark.parametrize("special", [False, True], ids=["finite", "nan-inf"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_inference_spatial_bn_relu_compiled_equals_the_plain_path_bit_for_bit(taken, calls, shape, special):
    """is_test SpatialBN + Relu through ``norm_jit.affine``: the plain path's float32 X * a + c and max(., 0)."""
    x = _maps(shape, 2, 3, special)[0]
    st = _stats(shape[1], 4)
    st["rv"][0] = -2.0  # NOTE: a negative running variance: a NaN channel, as in Caffe2

    def run():
        with np.errstate(invalid="ignore"):
            return norm.spatial_bn_relu(np, x, st["s"], st["b"], st["rm"], st["rv"], is_test=1, epsilon=1e-5,
                                        momentum=0.9, order="NCHW", num_batches=1)
    got = run()
    assert calls["affine"]
    old = jit.enable(False)
    try:
        want = run()
    finally:
        jit.enable(old)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype and np.isnan(got[:, 0]).all() and (got == 0).any()
