"""Training batch normalization through oneDNN (engine/runtime/onednn.py bn_forward / bn_backward) against
Caffe2's SpatialBN / SpatialBNGradient as netviz runs them on NumPy (issue 46, round 3b).

norm.py routes NHWC SpatialBN / SpatialBNGradient in training to oneDNN (its JIT kernel, 2-5x NumPy there)
and keeps NCHW on NumPy (oneDNN's generic kernel is slower there: benchmarks/README.md, round 3b).  The
binding is checked on both orders, the ops as a whole against themselves with oneDNN off.  The statistics
convert as norm.py does: oneDNN's biased batch variance to Caffe2's saved inverse std ``1/sqrt(var + eps)``
and back.  Every test checks
that oneDNN really ran (``onednn.CALLS``).  Skipped where oneDNN is not installed (``pip install netviz[fast]``).
"""
from __future__ import annotations

import numpy as np
import pytest

import engine.runtime.ops  # noqa: F401  (fills the kernel table)
from engine.runtime import onednn
from engine.runtime.ops import norm
from engine.runtime.workspace import eval_op

pytestmark = pytest.mark.skipif(not onednn.available(),
                                reason="oneDNN is not installed (netviz[fast]) or NETVIZ_ONEDNN=0")

EPS = 1e-5
SHAPES = [(2, 3, 5, 7), (1, 17, 13, 11), (3, 8, 1, 1), (8, 64, 28, 28), (4, 256, 7, 7)]


@pytest.fixture(autouse=True)
def _any_impl(monkeypatch):
    monkeypatch.setattr(onednn, "ALLOW_REF", True)  # NOTE: odd shapes may get only the reference kernel
    monkeypatch.setattr(onednn, "_CACHE", {})


def _inputs(shape, nhwc, seed=0):
    """X (NCHW, or an NCHW view of NHWC memory), dY like it, and per-channel scale, bias."""
    rng = np.random.default_rng(seed)
    n, c, h, w = shape

    def arr():
        a = (rng.standard_normal((n, h, w, c) if nhwc else shape) * 3 + 1).astype(np.float32)
        return a.transpose(0, 3, 1, 2) if nhwc else a
    return arr(), arr(), (rng.random(c) + 0.5).astype(np.float32), rng.standard_normal(c).astype(np.float32)


def _close(got, ref, what):
    """Within float32 tolerance of the NumPy path, relative to the output's magnitude."""
    np.testing.assert_allclose(got, ref, rtol=2e-5, atol=2e-5 * float(np.abs(ref).max() or 1), err_msg=what)


def _ran(kind, fn):
    before = onednn.CALLS[kind]
    out = fn()
    assert out is not None and onednn.CALLS[kind] == before + 1, f"oneDNN did not run {kind}"
    return out


@pytest.mark.parametrize("nhwc", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_forward_matches_spatial_bn(shape, nhwc):
    x, _, scale, bias = _inputs(shape, nhwc)
    c, momentum = shape[1], 0.9
    rmean, rvar = np.full(c, 0.2, np.float32), np.full(c, 1.5, np.float32)
    order = "NHWC" if nhwc else "NCHW"
    ref = eval_op("SpatialBN", x.transpose(0, 2, 3, 1) if nhwc else x, scale, bias, rmean, rvar, n_out=5,
                  is_test=0, epsilon=EPS, momentum=momentum, order=order)
    assert onednn.bn_fits(x)
    y, mean, var = _ran("bn_forward", lambda: onednn.bn_forward(x, scale, bias, EPS))
    assert y.strides == x.strides  # NOTE: Y in X's memory order
    cnt = x.size // c
    running_mean = rmean * momentum + mean * (1 - momentum)
    running_var = rvar * momentum + var * (cnt / max(cnt - 1, 1)) * (1 - momentum)
    _close(y.transpose(0, 2, 3, 1) if nhwc else y, ref[0], "Y")
    _close(running_mean, ref[1], "running mean")
    _close(running_var, ref[2], "running var")
    _close(mean, ref[3], "saved mean")
    _close(1 / np.sqrt(var + np.float32(EPS)), ref[4], "saved inv var")


@pytest.mark.parametrize("nhwc", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_backward_matches_spatial_bn_gradient(shape, nhwc):
    x, dy, scale, bias = _inputs(shape, nhwc, seed=1)
    c, order = shape[1], "NHWC" if nhwc else "NCHW"
    as_order = (lambda a: a.transpose(0, 2, 3, 1)) if nhwc else (lambda a: a)
    _, _, _, mean, inv = eval_op("SpatialBN", as_order(x), scale, bias, np.zeros(c, np.float32),
                                 np.ones(c, np.float32), n_out=5, is_test=0, epsilon=EPS, order=order)
    ref = eval_op("SpatialBNGradient", as_order(x), scale, as_order(dy), mean, inv, n_out=3, epsilon=EPS,
                  order=order)
    var = (1 / inv.astype(np.float64) ** 2 - EPS).astype(np.float32)  # NOTE: Caffe2's saved stat to oneDNN's
    assert onednn.bn_fits(x, dy)
    dx, dscale, dbias = _ran("bn_backward", lambda: onednn.bn_backward(x, scale, dy, mean, var, EPS))
    _close(as_order(dx), ref[0], "dX")
    _close(dscale, ref[1], "dscale")
    _close(dbias, ref[2], "dbias")


def test_fits_refuses_what_oneDNN_is_not_given():
    x = np.zeros((2, 3, 4, 5), np.float32)
    assert onednn.bn_fits(x, x.copy())
    assert not onednn.bn_fits(x.astype(np.float64))
    assert not onednn.bn_fits(x[..., 0])  # 3-D
    assert not onednn.bn_fits(x[:, :, ::2])  # not dense
    assert not onednn.bn_fits(x, np.zeros((2, 4, 5, 3), np.float32).transpose(0, 3, 1, 2))  # two orders
    assert not onednn.bn_fits(np.zeros((0, 3, 4, 5), np.float32))


def _ops_both(monkeypatch, order, shape, seed, kinds=("bn_forward", "bn_backward")):
    """(NumPy, oneDNN-enabled) outputs of training SpatialBN and of SpatialBNGradient on its saved stats,
    the fused SpatialBN + Relu's Y, and how many oneDNN BN primitives ran with it enabled."""
    x, dy, scale, bias = _inputs(shape, nhwc=False, seed=seed)
    if order == "NHWC":
        x, dy = (np.ascontiguousarray(a.transpose(0, 2, 3, 1)) for a in (x, dy))
    c = shape[1]
    rmean, rvar = np.full(c, 0.2, np.float32), np.full(c, 1.5, np.float32)
    monkeypatch.setattr(norm, "ONEDNN_MIN_ELEMENTS", 0)  # NOTE: the small maps too
    outs = []
    for enabled in (False, True):
        monkeypatch.setattr(onednn, "ENABLED", enabled)
        before = sum(onednn.CALLS[k] for k in kinds)
        fwd = eval_op("SpatialBN", x, scale, bias, rmean, rvar, n_out=5, is_test=0, epsilon=EPS, momentum=0.9,
                      order=order)
        grad = eval_op("SpatialBNGradient", x, scale, dy, fwd[3], fwd[4], n_out=3, epsilon=EPS, order=order)
        relu = norm.spatial_bn_relu(np, x, scale, bias, rmean, rvar, is_test=0, epsilon=EPS, momentum=0.9,
                                    order=order, num_batches=1)[0]
        outs.append((list(fwd) + list(grad) + [relu], sum(onednn.CALLS[k] for k in kinds) - before))
    return outs[0][0], outs[1][0], outs[1][1]


NAMES = ["Y", "running mean", "running var", "saved mean", "saved inv var", "dX", "dscale", "dbias", "relu Y"]


@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 17, 13, 11), (8, 64, 28, 28), (3, 8, 1, 1)])
def test_nhwc_ops_route_to_onednn_and_agree(monkeypatch, shape):
    ref, got, ran = _ops_both(monkeypatch, "NHWC", shape, seed=2)
    assert ran == 3  # forward, gradient, fused forward
    for r, g, name in zip(ref, got, NAMES):
        assert g.shape == r.shape and g.dtype == r.dtype, name
        _close(g, r, name)


def test_nchw_ops_stay_on_numpy(monkeypatch):
    ref, got, ran = _ops_both(monkeypatch, "NCHW", (2, 16, 9, 9), seed=3)
    assert ran == 0
    for r, g, name in zip(ref, got, NAMES):
        np.testing.assert_array_equal(g, r, err_msg=name)


def test_tiny_nhwc_maps_stay_on_numpy():
    x = np.ones((1, 4, 4, 8), np.float32)
    before = dict(onednn.CALLS)
    eval_op("SpatialBN", x, *(np.ones(8, np.float32) for _ in range(4)), n_out=5, is_test=0, order="NHWC")
    assert onednn.CALLS == before and x.size < norm.ONEDNN_MIN_ELEMENTS


def test_gradient_with_an_inverse_std_no_forward_saved_stays_on_numpy(monkeypatch):
    """An inverse std above 1/sqrt(eps) means a negative variance: oneDNN cannot take it, NumPy uses it."""
    monkeypatch.setattr(norm, "ONEDNN_MIN_ELEMENTS", 0)
    x, dy, scale, _ = (np.ascontiguousarray(a.transpose(0, 2, 3, 1)) if a.ndim == 4 else a
                       for a in _inputs((2, 4, 6, 6), nhwc=False, seed=4))
    mean, inv = np.zeros(4, np.float32), np.full(4, 1000.0, np.float32)
    before = onednn.CALLS["bn_backward"]
    got = eval_op("SpatialBNGradient", x, scale, dy, mean, inv, n_out=3, epsilon=EPS, order="NHWC")
    assert onednn.CALLS["bn_backward"] == before
    monkeypatch.setattr(onednn, "ENABLED", False)
    ref = eval_op("SpatialBNGradient", x, scale, dy, mean, inv, n_out=3, epsilon=EPS, order="NHWC")
    for r, g in zip(ref, got):
        np.testing.assert_array_equal(g, r)
