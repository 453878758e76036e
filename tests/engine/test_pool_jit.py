"""The compiled 2-D MaxPool and MaxPoolGradient kernels (engine/runtime/ops/pool_jit.py, issue 46) against the
NumPy paths they replace (the compiled kernels off: ``jit.enable(False)``).

The gradient must be the NumPy path's bit for bit: Caffe2's rule gives a window's dY to EVERY element equal
to its max, so after a ReLU (zeros) one dX element sums several windows' dY, and the compiled kernel must add
them in the same kernel-position order.  Inputs: odd sizes, batch 1, kernels 1..4, strides 1..3, per-side
pads, ties, NaN and +-inf in X and dY, float32 and float64, NCHW and NHWC, plane ranges over three threads.
"""
from __future__ import annotations

import contextlib
import warnings

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import engine.runtime.ops  # noqa: F401  (fills the kernel table)
from engine.runtime import jit, parallel
from engine.runtime.ops import pool
from engine.runtime.workspace import eval_op

pytest.importorskip("numba")


@contextlib.contextmanager
def _compiled(monkeypatch):
    """Every map counts as big (the compiled kernels take tiny test maps; plane ranges over three threads);
    yields the list of compiled calls made, so a test can check that the kernels ran."""
    monkeypatch.setattr(pool, "JIT_MIN_ELEMENTS", 0)
    monkeypatch.setattr(parallel, "MIN_BYTES", 0)
    monkeypatch.setattr(parallel, "THREADS", 3)
    calls: list[str] = []
    for name in ("_max_pool_jit", "_max_pool_gradient_jit"):
        real = getattr(pool, name)
        monkeypatch.setattr(pool, name, lambda *a, _real=real, _name=name: calls.append(_name) or _real(*a))
    old = jit.enable(True)
    assert jit.load("pool") is not None, jit.WHY_NOT
    try:
        yield calls
    finally:
        jit.enable(old)


@pytest.fixture
def taken(monkeypatch):
    """The compiled kernels forced on (:func:`_compiled`) for the test."""
    with _compiled(monkeypatch) as calls:
        yield calls


def _plain(op, *inputs, **args):
    """`op` by the NumPy path (the compiled kernels off; its RuntimeWarning on ``inf * 0`` silenced: the
    pytest configuration makes engine warnings errors, and the compiled kernels do not warn)."""
    old = jit.enable(False)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return eval_op(op, *inputs, **args)[0]
    finally:
        jit.enable(old)


def _same_bits(got, want):
    """Equal values, NaN where NaN, and the same sign on every zero."""
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(np.signbit(got[ok]), np.signbit(want[ok]))


def _both(taken, x, dy_seed, specials, **args):
    """MaxPool and its gradient compiled and plain on `x`; the gradient of the plain Y with a dY holding
    `specials` (NaN, +-inf) when asked."""
    want_y = _plain("MaxPool", x, **args)
    got_y = eval_op("MaxPool", x, **args)[0]
    np.testing.assert_array_equal(got_y, want_y)
    assert got_y.shape == want_y.shape and got_y.dtype == want_y.dtype
    rng = np.random.default_rng(dy_seed)
    dy = rng.standard_normal(want_y.shape).astype(x.dtype)
    if specials:
        flat = dy.reshape(-1)
        flat[rng.integers(0, flat.size, 3)] = [np.nan, np.inf, -np.inf]
    want = _plain("MaxPoolGradient", x, want_y, dy, **args)
    got = eval_op("MaxPoolGradient", x, want_y, dy, **args)[0]
    _same_bits(got, want)
    assert taken == ["_max_pool_jit", "_max_pool_gradient_jit"]
    taken.clear()
    return got, want_y, dy


def _tie_heavy(rng, shape, dtype, specials):
    """A ReLU'd map on a coarse grid (many zeros and equal values: ties in most windows), with NaN and
    +-inf dropped in when asked."""
    x = np.maximum(np.round(rng.standard_normal(shape) * 2) / 2, 0).astype(dtype)
    if specials:
        flat = x.reshape(-1)
        flat[rng.integers(0, flat.size, 3)] = [np.nan, np.inf, -np.inf]
    return x


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 3), c=st.integers(1, 4), h=st.integers(1, 13), w=st.integers(1, 13), kh=st.integers(1, 4),
       kw=st.integers(1, 4), sh=st.integers(1, 3), sw=st.integers(1, 3), pads=st.tuples(*[st.integers(0, 3)] * 4),
       nhwc=st.booleans(), f64=st.booleans(), specials=st.booleans(), seed=st.integers(0, 999))
def test_compiled_pool_equals_numpy(n, c, h, w, kh, kw, sh, sw, pads, nhwc, f64, specials, seed):
    # NOTE: pads under the kernel (Caffe2 wants pad < kernel: no window all padding), clamped rather than
    # filtered (filtering them out made hypothesis's filter_too_much health check fail now and then)
    t, b, l, r = min(pads[0], kh - 1), min(pads[1], kh - 1), min(pads[2], kw - 1), min(pads[3], kw - 1)
    assume(h + t + b >= kh and w + l + r >= kw)  # an output
    rng = np.random.default_rng(seed)
    x = _tie_heavy(rng, (n, c, h, w), np.float64 if f64 else np.float32, specials)
    order = "NCHW"
    if nhwc:
        x, order = np.ascontiguousarray(np.moveaxis(x, 1, -1)), "NHWC"
    with pytest.MonkeyPatch.context() as mp, _compiled(mp) as calls:
        _both(calls, x, seed, specials, kernel_h=kh, kernel_w=kw, stride_h=sh, stride_w=sw, pad_t=t, pad_l=l,
              pad_b=b, pad_r=r, order=order)


@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
def test_resnet_stem_pool_over_many_plane_ranges(taken, order):
    """ResNet's 3x3 / 2 pad-1 pool after its first ReLU (ties at zero in most windows), batch 2, its plane
    ranges over three threads; Caffe2's rule checked directly: each window's dY reaches every tied element,
    so dX's total is the sum of dY times each window's tie count."""
    rng = np.random.default_rng(7)
    x = _tie_heavy(rng, (2, 6, 21, 20), np.float32, False)
    if order == "NHWC":
        x = np.ascontiguousarray(np.moveaxis(x, 1, -1))
    args = dict(kernel=3, stride=2, pad=1, order=order)
    dx, y, dy = _both(taken, x, 3, False, **args)
    xc = x if order == "NCHW" else np.moveaxis(x, -1, 1)
    yc, dyc = (a if order == "NCHW" else np.moveaxis(a, -1, 1) for a in (y, dy))
    xpad = np.pad(xc, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    ties = sum((xpad[:, :, i:i + 2 * yc.shape[2]:2, j:j + 2 * yc.shape[3]:2] == yc) for i in range(3) for j in range(3))
    assert ties.max() > 1  # the input does have ties
    np.testing.assert_allclose(dx.astype(np.float64).sum(), (dyc.astype(np.float64) * ties).sum(), rtol=1e-4)


def test_global_pool_unit_kernel_and_windows_all_padding(taken):
    """Global pooling (the kernel is the whole image), a 1x1 kernel of stride 3 (most of X gets nothing) and
    pads as wide as the kernel (windows all padding: -inf, as the NumPy path's -inf pad gives)."""
    x = _tie_heavy(np.random.default_rng(1), (2, 3, 7, 5), np.float32, False)
    _both(taken, x, 1, False, global_pooling=1)
    _, y, _ = _both(taken, x, 4, False, kernel=2, stride=1, pad=2)
    assert np.isneginf(y[:, :, 0]).all() and np.isfinite(y[:, :, 1, 1:-1]).all()
    dx, _, _ = _both(taken, x, 2, False, kernel=1, stride=3)
    hit = np.zeros(x.shape, bool)
    hit[:, :, ::3, ::3] = True
    assert not dx[~hit].any() and dx[hit].any()


def test_nan_window_takes_no_gradient_but_inf_dy_spreads_nan(taken):
    """A NaN in a window makes its max NaN, which no element equals: the window gives its dY to nobody; an
    infinite dY gives NaN (inf * 0) to every element of its window, as NumPy's dY * (X == Y) does."""
    x = np.zeros((1, 1, 4, 4), np.float32)
    x[0, 0, 0, 0], x[0, 0, 3, 3] = np.nan, 1
    y = eval_op("MaxPool", x, kernel=2, stride=2)[0]
    assert np.isnan(y[0, 0, 0, 0]) and y[0, 0, 1, 1] == 1 and y[0, 0, 0, 1] == y[0, 0, 1, 0] == 0
    dy = np.ones_like(y)
    dy[0, 0, 1, 1] = np.inf
    dx = eval_op("MaxPoolGradient", x, y, dy, kernel=2, stride=2)[0]
    assert (dx[0, 0, :2, :2] == 0).all() and (dx[0, 0, :2, 2:] == 1).all() and dx[0, 0, 3, 3] == np.inf
    assert np.isnan(dx[0, 0, 2:, 2:]).sum() == 3
    _same_bits(dx, _plain("MaxPoolGradient", x, y, dy, kernel=2, stride=2))


def test_throw_if_fp_exceptions_keeps_the_numpy_paths_error(taken, monkeypatch):
    """Under Caffe2's --caffe2_operator_throw_if_fp_exceptions the op fails on ``inf * 0`` as the NumPy path
    does (the compiled kernels would make the NaN silently); without it, the compiled kernel runs."""
    from engine.errors import ExecutionError  # noqa: PLC0415
    from engine.runtime import executor  # noqa: PLC0415

    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    y = eval_op("MaxPool", x, kernel=2, stride=2)[0]
    dy = np.full_like(y, np.inf)
    taken.clear()
    monkeypatch.setattr(executor, "THROW_IF_FP_EXCEPTIONS", [True])
    monkeypatch.setattr(parallel, "THREADS", 1)  # NOTE: NumPy's errstate does not reach the pool's threads
    with pytest.raises(ExecutionError, match="float arithmetic failed"):
        eval_op("MaxPoolGradient", x, y, dy, kernel=2, stride=2)
    assert "_max_pool_gradient_jit" not in taken
    monkeypatch.setattr(executor, "THROW_IF_FP_EXCEPTIONS", [False])
    assert np.isnan(eval_op("MaxPoolGradient", x, y, dy, kernel=2, stride=2)[0]).sum() == 12
    assert taken[-1] == "_max_pool_gradient_jit"


def test_small_maps_and_other_ranks_keep_the_numpy_paths(monkeypatch):
    """Below JIT_MIN_ELEMENTS, 1-D / 3-D pools and dtypes other than float32/64 never import the kernels."""
    calls = []
    monkeypatch.setattr(pool, "_max_pool_gradient_jit", lambda *a: calls.append(a))
    x = np.ones((1, 2, 8, 8), np.float32)
    y = eval_op("MaxPool", x, kernel=2, stride=2)[0]
    eval_op("MaxPoolGradient", x, y, y, kernel=2, stride=2)
    x3 = np.ones((2, 4, 16, 16, 16), np.float32)
    y3 = eval_op("MaxPool", x3, kernel=2, stride=2)[0]
    eval_op("MaxPoolGradient", x3, y3, y3, kernel=2, stride=2)
    xi = np.ones((4, 8, 32, 32), np.int32)
    eval_op("MaxPool", xi, kernel=2, stride=2)
    assert not calls
    assert pool._jit_kernels(np, xi, [2, 2], [2, 2], [0, 0], [0, 0]) is None


def test_jit_off_takes_the_numpy_path(no_jit, monkeypatch):
    """NETVIZ_JIT=0 (or jit.enable(False)): the plane-block NumPy path, whatever the map's size."""
    monkeypatch.setattr(pool, "_max_pool_gradient_jit", lambda *a: pytest.fail("compiled kernel with jit off"))
    x = np.ones((2, 8, 32, 32), np.float32)
    y = eval_op("MaxPool", x, kernel=3, stride=2, pad=1)[0]
    assert (eval_op("MaxPoolGradient", x, y, y, kernel=3, stride=2, pad=1)[0] > 0).all()
