"""The compiled SpatialBN kernels (engine/runtime/ops/norm_jit.py, issue 46) against the NumPy paths they replace:
training SpatialBN (with and without the fused Relu), SpatialBNGradient and the fused ReluGradient ->
SpatialBNGradient, over odd sizes, batch 1, 5-D maps, NaN and infinities, one thread and channel ranges over
three; and how the kernels turn off (NETVIZ_JIT=0, a numba that cannot compile)."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from engine.runtime import jit, parallel
from engine.runtime.ops import norm
from tests.engine.test_memory_bound_fast import bn_grad_ref, bn_train_ref

pytest.importorskip("numba")

SHAPES = [(3, 5, 7, 9), (1, 4, 5, 3), (2, 3, 1, 1), (8, 16, 13, 11), (2, 3, 4, 5, 3), (4, 64, 28, 28)]


@pytest.fixture(params=["one-thread", "ranges"])
def taken(request, monkeypatch):
    """Every map takes the kernels, and without them NumPy's row path (the kernels' formulas: every map counts
    as big); 'ranges' cuts the channels over three threads in small blocks."""
    monkeypatch.setattr(norm, "JIT_MIN_ELEMENTS", 0)
    monkeypatch.setattr(parallel, "MIN_BYTES", 0)
    if request.param == "ranges":
        monkeypatch.setattr(parallel, "THREADS", 3)
        monkeypatch.setattr(parallel, "BLOCK_BYTES", 256)
    else:
        monkeypatch.setattr(parallel, "THREADS", 1)
    return request.param


@pytest.fixture
def calls(monkeypatch, with_jit):
    """Counts of the kernels' runs: {'train': n, 'gradient': n}."""
    k = jit.load("norm")
    assert k is not None, jit.WHY_NOT
    seen = {"train": 0, "gradient": 0}
    for name in seen:
        fn = getattr(k, name)

        def counted(*a, _fn=fn, _name=name):
            seen[_name] += 1
            return _fn(*a)
        monkeypatch.setattr(k, name, counted)
    return seen


def _data(shape, seed, special=False, mean=0.0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 2 + mean).astype(np.float32)
    if special:  # NOTE: NaN in one channel, +-inf in another, zeros: those channels' outputs are NaN
        x[0, 0].flat[0] = np.nan
        if shape[1] > 1:
            x[-1, 1].flat[-1] = np.inf
        x[:, -1].flat[::3] = 0
    return x


def _without_jit(fn):
    old = jit.enable(False)
    try:
        return fn()
    finally:
        jit.enable(old)


def _agree(got, ref, truth, what):
    """NaN and infinities where the NumPy path has them; elsewhere as close to the float64 `truth` as NumPy's
    row path is, give or take 1e-6 of the output's magnitude, at least 1e-6 (the issue's bound for a compiled
    path; the goldens' absolute floor).  NOTE: the row path's (and Caffe2's) Y = X * alpha + beta loses digits
    to cancellation where a channel's spread is small against its mean; the kernels make the same float32
    steps, from float64 rather than float32 sums."""
    got, ref, truth = np.asarray(got), np.asarray(ref), np.asarray(truth, np.float64)
    assert got.dtype == ref.dtype and got.shape == ref.shape, what
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref), err_msg=what)
    fin = np.isfinite(ref)
    np.testing.assert_array_equal(got[~fin & ~np.isnan(ref)], ref[~fin & ~np.isnan(ref)], err_msg=what)
    fin &= np.isfinite(truth)
    scale = float(np.abs(truth[fin]).max(initial=0))
    off, numpy_off = np.abs(got[fin] - truth[fin]).max(initial=0), np.abs(ref[fin] - truth[fin]).max(initial=0)
    assert off <= numpy_off + 1e-6 * max(scale, 1.0), f"{what}: {off:.3g} from float64, NumPy's path {numpy_off:.3g}"


def _bn_args(shape, seed):
    c = shape[1]
    rng = np.random.default_rng(seed + 100)
    scale, bias = (rng.standard_normal(c) + 1).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    return scale, bias, rng.standard_normal(c).astype(np.float32), (rng.random(c) + 0.5).astype(np.float32)


@pytest.mark.parametrize("special", [False, True], ids=["finite", "nan-inf"])
@pytest.mark.parametrize("relu", [False, True], ids=["bn", "bn+relu"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_training_spatial_bn_equals_the_numpy_path(taken, calls, shape, relu, special):
    x = _data(shape, 1, special, mean=3.0)
    scale, bias, rm, rv = _bn_args(shape, 1)
    kernel = norm.spatial_bn_relu if relu else norm.spatial_bn

    def run():
        with np.errstate(invalid="ignore", over="ignore"):
            return kernel(np, x, scale, bias, rm, rv, is_test=0, epsilon=1e-5, momentum=0.8, order="NCHW",
                          num_batches=1)
    got = run()
    assert calls["train"] >= 1
    ref = _without_jit(run)
    with np.errstate(invalid="ignore", over="ignore"):
        truth = list(bn_train_ref(x, scale, bias, rm, rv, 1e-5, 0.8, "NCHW"))
    truth[0] = np.maximum(truth[0], 0) if relu else truth[0]
    for g, r, t, what in zip(got, ref, truth, ("Y", "running mean", "running var", "saved mean", "saved inv std")):
        _agree(g, r, t, what)
    # NOTE: Y is the NumPy path's float32 X * alpha + beta of the kernel's own statistics, bit for bit
    y, bm, inv = got[0], got[3], got[4]
    sh = (1, -1) + (1,) * (x.ndim - 2)
    alpha = scale * inv
    beta = bias - alpha * bm
    with np.errstate(invalid="ignore", over="ignore"):
        want = x * alpha.reshape(sh) + beta.reshape(sh)
    np.testing.assert_array_equal(y, np.maximum(want, 0) if relu else want)


@pytest.mark.parametrize("special", [False, True], ids=["finite", "nan-inf"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_spatial_bn_gradient_equals_the_numpy_path(taken, calls, shape, special):
    x = _data(shape, 2, mean=-4.0)
    dy = _data(shape, 3, special)
    scale, (mean, inv) = _bn_args(shape, 2)[0], _saved(x)
    with np.errstate(invalid="ignore", over="ignore"):
        got = norm.spatial_bn_gradient(np, x, scale, dy, mean, inv)
    assert calls["gradient"] >= 1
    _gradient_agrees(got, x, scale, dy, mean, inv)


@pytest.mark.parametrize("special", [False, True], ids=["finite", "nan-inf"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_fused_relu_gradient_then_spatial_bn_gradient(taken, calls, shape, special):
    """G is ReluGradient's dY * (Y > 0) bit for bit (NaN * 0 is NaN, -0.0 kept), the BN gradient as apart."""
    x, dy = _data(shape, 4), _data(shape, 5, special)
    y = np.maximum(_data(shape, 6, special), 0)
    y.flat[::5] = 0  # ReLU's ties
    scale, (mean, inv) = _bn_args(shape, 4)[0], _saved(x)
    with np.errstate(invalid="ignore", over="ignore"):
        got = norm.relu_gradient_then_spatial_bn_gradient(y, dy, x, scale, mean, inv)
        want_g = dy * (y > 0)
    assert calls["gradient"] >= 1
    np.testing.assert_array_equal(got[0], want_g)
    assert np.array_equal(np.signbit(got[0]), np.signbit(want_g))
    _gradient_agrees(got[1], x, scale, want_g, mean, inv)


def _saved(x):
    """A forward pass's saved mean and inverse std of `x` (float32)."""
    axes = (0, *range(2, x.ndim))
    return x.mean(axis=axes), (1 / np.sqrt(x.var(axis=axes) + 1e-5)).astype(np.float32)


def _gradient_agrees(got, x, scale, dy, mean, inv):
    """(dX, dscale, dbias) `got` agree with SpatialBNGradient's NumPy path on the same inputs (:func:`_agree`)."""
    with np.errstate(invalid="ignore", over="ignore"):
        apart = _without_jit(lambda: norm.spatial_bn_gradient(np, x, scale, dy, mean, inv))
        truth = bn_grad_ref(x, scale, dy, mean, inv, "NCHW")
    for g, r, t, what in zip(got, apart, truth, ("dX", "dscale", "dbias")):
        _agree(g, r, t, what)


def test_small_maps_and_other_layouts_keep_the_numpy_path(calls):
    """Below JIT_MIN_ELEMENTS, NHWC, float64 and non-contiguous maps: the kernels do not run."""
    scale, bias, rm, rv = _bn_args((2, 3, 4, 5), 7)
    args = dict(is_test=0, epsilon=1e-5, momentum=0.9, num_batches=1)
    norm.spatial_bn(np, _data((2, 3, 4, 5), 7), scale, bias, rm, rv, order="NCHW", **args)
    big = _data((4, 3, 32, 32), 8)
    norm.spatial_bn(np, np.ascontiguousarray(big.transpose(0, 2, 3, 1)), scale, bias, rm, rv, order="NHWC", **args)
    norm.spatial_bn(np, big.astype(np.float64), scale, bias, rm, rv, order="NCHW", **args)
    norm.spatial_bn(np, big[:, :, ::2], scale, bias, rm, rv, order="NCHW", **args)
    assert calls == {"train": 0, "gradient": 0}
    norm.spatial_bn(np, big, scale, bias, rm, rv, order="NCHW", **args)
    assert calls["train"] == 1


def test_a_numba_that_cannot_compile_turns_the_kernels_off(monkeypatch):
    """A failed warm-up (compilation) leaves the NumPy paths, says why once, and the op still runs."""
    import engine.runtime.ops.norm_jit as nj

    def broken():
        raise RuntimeError("no LLVM target here")
    monkeypatch.setattr(nj, "warm", broken)
    old = jit.enable(True)
    jit.forget()
    try:
        assert jit.load("norm") is None
        assert "could not compile the norm kernels" in jit.WHY_NOT["norm"]
        x = _data((4, 8, 32, 32), 9)
        scale, bias, rm, rv = _bn_args(x.shape, 9)
        y = norm.spatial_bn(np, x, scale, bias, rm, rv, is_test=0, epsilon=1e-5, momentum=0.9, order="NCHW")[0]
        assert np.isfinite(y).all() and abs(float(y.mean(axis=(0, 2, 3)).max() - bias.max())) < 1e-3
    finally:
        jit.enable(old)
        monkeypatch.undo()
        jit.forget()


def test_netviz_jit_0_keeps_them_off_in_a_fresh_process():
    code = ("from engine.runtime import jit; import sys; "
            "sys.exit(0 if jit.load('norm') is None and jit.WHY_NOT['norm'] == 'NETVIZ_JIT=0' else 1)")
    env = dict(os.environ, NETVIZ_JIT="0")
    assert subprocess.run([sys.executable, "-c", code], env=env, timeout=120).returncode == 0


def test_throw_if_fp_exceptions_fails_the_op_as_the_numpy_path_does(calls):
    """Under Caffe2's --caffe2_operator_throw_if_fp_exceptions (NumPy's errstate raise) the kernels step aside:
    an infinite X fails training SpatialBN as the NumPy path fails it, instead of giving NaN silently."""
    x = _data((4, 8, 32, 32), 10)
    x[1, 2, 3, 4] = np.inf
    scale, bias, rm, rv = _bn_args(x.shape, 10)
    with np.errstate(divide="raise", over="raise", invalid="raise"), pytest.raises(FloatingPointError):
        norm.spatial_bn(np, x, scale, bias, rm, rv, is_test=0, epsilon=1e-5, momentum=0.9, order="NCHW")
    assert calls["train"] == 0
    with np.errstate(invalid="ignore", over="ignore"):
        y = norm.spatial_bn(np, x, scale, bias, rm, rv, is_test=0, epsilon=1e-5, momentum=0.9, order="NCHW")[0]
    assert calls["train"] == 1 and np.isnan(y[:, 2]).all() and np.isfinite(y[:, 3]).all()
