"""SpatialBN's affine pass and ReluGradient through oneDNN's binary chains (engine/runtime/onednn_eltwise.py)
against the NumPy paths they replace (issue 46, round 4): odd shapes, 3-5 dims, NCHW and NHWC, is_test 0/1,
NaN and +-inf where NumPy's path gives them, the fused pairs of run_compiled against the ops apart.

Every routed case checks that oneDNN ran (``onednn.CALLS["eltwise"]``); the NumPy side is the same kernel
with :data:`onednn_eltwise.ENABLED` off.  Skipped where oneDNN is not installed (``pip install netviz[fast]``)
or ``NETVIZ_ONEDNN=0``.
"""
from __future__ import annotations

import numpy as np
import pytest

import engine.runtime.ops  # noqa: F401  (fills the kernel table)
from engine.runtime import onednn, onednn_eltwise, parallel
from engine.runtime.ops import activation, arith, norm
from engine.runtime.workspace import eval_op
from tests.engine.test_memory_bound_fast import _fused_and_apart, _net

pytestmark = pytest.mark.skipif(not onednn.available(),
                                reason="oneDNN is not installed (netviz[fast]) or NETVIZ_ONEDNN=0")

SHAPES = [(3, 5, 7, 9), (1, 17, 13, 11), (2, 3, 1, 1), (4, 64, 28, 28), (5, 7, 11), (2, 3, 4, 5, 3)]
SPECIAL = [np.nan, np.inf, -np.inf, -0.0, 0.0]


@pytest.fixture()
def small(monkeypatch, no_jit):
    """Every array counts as big, so the small drawn shapes take the oneDNN paths too (the compiled kernels off).  One thread: NumPy's
    block passes then run in the caller's thread, where the tests' errstate for NaN-making inputs holds."""
    monkeypatch.setattr(onednn, "ALLOW_REF", True)
    monkeypatch.setattr(onednn, "_CACHE", {})
    monkeypatch.setattr(onednn_eltwise, "MIN_BYTES", 0)
    monkeypatch.setattr(norm, "ONEDNN_AFFINE_MIN_BYTES", 0)
    monkeypatch.setattr(parallel, "MIN_BYTES", 0)
    monkeypatch.setattr(parallel, "THREADS", 1)


def _x(shape, seed=0, special=False, nhwc=False):
    """float32 data (channels last in memory when `nhwc`, as NHWC's NCHW view), NaN/inf/zeros sprinkled in."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 2).astype(np.float32)
    if special:
        x.flat[rng.choice(x.size, min(x.size, 10), replace=False)] = np.resize(SPECIAL, min(x.size, 10))
    return np.ascontiguousarray(np.moveaxis(x, 1, -1)).transpose(0, -1, *range(1, x.ndim - 1)) if nhwc else x


def _same(got, ref, what=""):
    """NumPy's values: shape, dtype, NaN and infinities where the reference has them, finite values within
    float32 rounding."""
    assert got.shape == ref.shape and got.dtype == ref.dtype, what
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref), err_msg=f"{what}: NaN")
    np.testing.assert_array_equal(np.where(np.isinf(ref), ref, 0), np.where(np.isinf(got), got, 0), err_msg=what)
    fin = np.isfinite(ref)
    np.testing.assert_allclose(got[fin], ref[fin], rtol=1e-6, atol=1e-6 * float(np.abs(ref[fin]).max(initial=1)),
                               err_msg=what)


def _both(monkeypatch, fn):
    """(oneDNN's outputs, NumPy's outputs, oneDNN elementwise runs) of `fn()`."""
    before = onednn.CALLS["eltwise"]
    got = fn()
    ran = onednn.CALLS["eltwise"] - before
    monkeypatch.setattr(onednn_eltwise, "ENABLED", False)
    ref = fn()
    monkeypatch.setattr(onednn_eltwise, "ENABLED", True)
    return got, ref, ran


@pytest.mark.parametrize("nhwc", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_binary_chain_matches_numpy(small, shape, nhwc):
    """mul by a per-channel vector, add another, max with a full tensor, mul by a scalar: one pass.  NOTE:
    NaN only in the max's operand: x86 MAX drops a NaN in the running value (why relu_inplace is as it is)."""
    x, z = _x(shape, 1, nhwc=nhwc), _x(shape, 2, special=True, nhwc=nhwc)
    a, c = _x((shape[1],), 3), _x((shape[1],), 4)
    y = onednn.empty_as(x, x.shape)
    assert onednn_eltwise.apply("mul", y, x, a, post=(("add", c), ("max", z), ("mul", np.float32([0.5]))))
    bc = (1, -1) + (1,) * (x.ndim - 2)
    with np.errstate(invalid="ignore"):
        ref = np.maximum(x * a.reshape(bc) + c.reshape(bc), z) * np.float32(0.5)
    np.testing.assert_array_equal(y, ref)


def test_a_comparison_post_op_on_a_tensor_is_refused_not_built(small):
    """oneDNN 3.2 fails to build it over a map with a tail and then fails every later build in the thread."""
    x = _x((3, 5, 7, 9), 15)
    assert not onednn_eltwise.apply("mul", onednn.empty_as(x, x.shape), x, x, post=(("gt", x),))
    assert onednn_eltwise.apply("mul", onednn.empty_as(x, x.shape), x, x, post=(("gt", np.float32([0])),))


def test_relu_inplace_keeps_nan_and_infinities(small):
    x = np.array(SPECIAL + [-3.5, 2.25, 1e38, -1e38] * 3, np.float32)
    y = x.copy()
    assert onednn_eltwise.relu_inplace(y)
    np.testing.assert_array_equal(y, np.maximum(x, 0))  # NaN in the same places (assert_array_equal)
    assert np.isnan(y[0]) and y[1] == np.inf and y[2] == 0


@pytest.mark.parametrize("per_channel", [False, True], ids=["flat", "per-channel"])
@pytest.mark.parametrize("shape", SHAPES + [(8, 3, 17, 1), (1, 1, 1, 1)], ids=str)
def test_relu_keeping_nan_chain_is_numpys_maximum_bit_for_bit(small, shape, per_channel):
    """ELU(alpha 0) + 0 after ``x * a + c``: NumPy's ``maximum(x * a + c, 0)`` to the bit (NaN, +-inf, -0.0 -> 0.0)."""
    assert onednn_eltwise.relu_keeps_nan()
    x = _x(shape, 21, special=True)
    x.flat[-min(x.size, 8):] = np.resize(np.float32([-1e-45, 1e-45, -3e38, 3e38, -104.0, 89.0, -0.0, np.nan]),
                                         min(x.size, 8))
    a, c = (_x((shape[1],), 22), _x((shape[1],), 23)) if per_channel else (np.float32([1.5]), np.float32([-0.25]))
    y = onednn.empty_as(x, x.shape)
    assert onednn_eltwise.apply("mul", y, x, a, post=(("add", c),) + onednn_eltwise.RELU_KEEPS_NAN)
    bc = (1, -1) + (1,) * (x.ndim - 2) if per_channel else (1,)
    with np.errstate(invalid="ignore", over="ignore"):
        ref = np.maximum(x * a.reshape(bc) + c.reshape(bc), 0)
    np.testing.assert_array_equal(y.view(np.uint32), ref.view(np.uint32))


@pytest.mark.parametrize("keeps_nan", [True, False], ids=["chain", "chain-refused"])
@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
def test_spatial_bn_relu_is_one_pass_on_big_maps(small, monkeypatch, order, keeps_nan):
    """is_test SpatialBN + Relu from ONE_PASS_RELU_MIN_BYTES: one oneDNN pass with NaN and -inf as NumPy's;
    where the self-check found the chain inexact, two passes (the same values)."""
    monkeypatch.setattr(onednn_eltwise, "ONE_PASS_RELU_MIN_BYTES", 0)
    monkeypatch.setattr(onednn_eltwise, "_KEEPS_NAN", [keeps_nan])
    x, scale, bias, mean, var = _bn_inputs((3, 6, 9, 7), 24, True)
    x[0, :, 0, 0] = [np.nan, -np.inf, np.inf, 1.0, -0.0, -1e-45]
    if order == "NHWC":
        x = np.ascontiguousarray(np.moveaxis(x, 1, -1))
    args = dict(is_test=1, epsilon=1e-5, momentum=0.9, order=order, num_batches=1)
    with np.errstate(invalid="ignore", over="ignore"):
        got, ref, ran = _both(monkeypatch, lambda: norm.spatial_bn_relu(np, x, scale, bias, mean, var, **args))
    assert ran == (1 if keeps_nan else 2)
    np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("nhwc", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_sum_relu_is_one_pass_with_numpys_values(small, monkeypatch, shape, nhwc, n):
    """The fused Sum + Relu: NumPy's additions in its order, then maximum(., 0), bit for bit (NaN, +-inf)."""
    monkeypatch.setattr(onednn_eltwise, "ONE_PASS_RELU_MIN_BYTES", 0)
    xs = [_x(shape, 30 + i, special=True, nhwc=nhwc) for i in range(n)]
    with np.errstate(invalid="ignore", over="ignore"):
        got, ref, ran = _both(monkeypatch, lambda: arith.sum_relu_inplace(np, *xs))
    assert ran == 1 and got.strides == xs[0].strides
    np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))


def test_sum_relu_of_odd_inputs_stays_on_numpy(small, monkeypatch):
    """Mixed layouts, strided views, float64, one input, small maps: NumPy's pass, its values."""
    monkeypatch.setattr(onednn_eltwise, "ONE_PASS_RELU_MIN_BYTES", 0)
    x = _x((3, 5, 7, 9), 40)
    for xs in ((x, _x((3, 5, 7, 9), 41, nhwc=True)), (x[:, :, :6:2], x[:, :, 1::2]), (x.astype(np.float64),) * 2, (x,)):
        got, ref, ran = _both(monkeypatch, lambda: arith.sum_relu_inplace(np, *xs))
        assert ran == 0
        np.testing.assert_array_equal(got, ref)
    monkeypatch.setattr(onednn_eltwise, "ONE_PASS_RELU_MIN_BYTES", x.nbytes + 1)
    assert _both(monkeypatch, lambda: arith.sum_relu_inplace(np, x, x))[2] == 0


def test_fused_sum_relu_matches_the_ops_apart(small, monkeypatch):
    monkeypatch.setattr(onednn_eltwise, "ONE_PASS_RELU_MIN_BYTES", 0)
    net = _net(("Sum", ["a", "b"], ["s"], {}), ("Relu", ["s"], ["s"], {}))
    before = onednn.CALLS["eltwise"]
    got = _fused_and_apart(net, dict(a=_x((3, 6, 9, 7), 42, special=True), b=_x((3, 6, 9, 7), 43)), [True, False])
    assert onednn.CALLS["eltwise"] > before and (got["s"] == 0).any() and np.isnan(got["s"]).any()


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_relu_gradient_matches_numpy(small, monkeypatch, shape):
    """dY * (Y > 0): Y NaN gives dY * 0 (NaN only for an infinite or NaN dY), as NumPy's."""
    y, dy = np.maximum(_x(shape, 5, special=True), 0), _x(shape, 6, special=True)
    y.flat[:3], dy.flat[:3] = np.nan, [1.5, np.inf, np.nan]
    with np.errstate(invalid="ignore"):
        got, ref, ran = _both(monkeypatch, lambda: eval_op("ReluGradient", y, dy)[0])
    assert ran == 1
    _same(got, ref, "dX")
    assert got.flat[0] == 0 and np.isnan(got.flat[1]) and np.isnan(got.flat[2])


def test_relu_gradient_of_channels_last_and_strided_arrays(small, monkeypatch):
    """Dense NHWC-as-NCHW views run through oneDNN (one layout for both); strided slices stay on NumPy."""
    y, dy = (_x((3, 8, 5, 7), s, special=True, nhwc=True) for s in (7, 8))
    for ys, dys, routed in ((y, dy, 1), (y[:, :, ::2], dy[:, :, ::2], 0)):
        with np.errstate(invalid="ignore"):
            got, ref, ran = _both(monkeypatch, lambda: activation.relu_gradient(np, ys, dys))
        assert ran == routed
        _same(got, ref)


def _bn_inputs(shape, seed, special):
    c = shape[1]
    rng = np.random.default_rng(seed)
    return (_x(shape, seed, special), (rng.random(c) + 0.5).astype(np.float32), rng.standard_normal(c).astype(np.float32),
            rng.standard_normal(c).astype(np.float32), (rng.random(c) + 0.5).astype(np.float32))


@pytest.mark.parametrize("special", [False, True], ids=["finite", "nan-inf"])
@pytest.mark.parametrize("relu", [False, True], ids=["bn", "bn+relu"])
@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
@pytest.mark.parametrize("is_test", [0, 1])
@pytest.mark.parametrize("shape", [(3, 5, 7, 9), (1, 17, 13, 11), (4, 64, 28, 28), (2, 3, 4, 5, 3)], ids=str)
def test_spatial_bn_matches_numpy(small, monkeypatch, shape, is_test, order, relu, special):
    x, scale, bias, mean, var = _bn_inputs(shape, 9, special)
    if order == "NHWC":
        x = np.ascontiguousarray(np.moveaxis(x, 1, -1))
    kernel = norm.spatial_bn_relu if relu else norm.spatial_bn
    args = dict(is_test=is_test, epsilon=1e-5, momentum=0.9, order=order, num_batches=1)
    with np.errstate(invalid="ignore", over="ignore"):
        got, ref, ran = _both(monkeypatch, lambda: kernel(np, x, scale, bias, mean, var, **args))
    got, ref = (got, ref) if is_test else (got[0], ref[0])
    _same(got, ref, "Y")
    if is_test or order == "NCHW":  # NOTE: training NHWC is oneDNN's batch normalization (round 3b)
        # one pass; a ReLU is a second one unless training made the vectors from X itself and X is finite
        assert ran == 1 + (relu and (is_test or special))


@pytest.mark.parametrize("special", [False, True], ids=["finite", "nan-inf"])
@pytest.mark.parametrize("shape", [(3, 5, 7, 9), (1, 17, 13, 11), (4, 64, 28, 28), (2, 3, 4, 5, 3), (4, 6, 1, 1)],
                         ids=str)
def test_spatial_bn_gradient_matches_numpy(small, monkeypatch, shape, special):
    """The row path's dX pass as two oneDNN passes: the same values (the same roundings), NaN where NumPy's."""
    x, scale, _, _, _ = _bn_inputs(shape, 16, False)
    dy = _x(shape, 17, special)
    axes = (0, *range(2, x.ndim))
    mean, inv = x.mean(axis=axes), (1 / x.std(axis=axes)).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        got, ref, ran = _both(monkeypatch, lambda: norm.spatial_bn_gradient(np, x, scale, dy, mean, inv))
    assert ran == 2
    for g, r, name in zip(got, ref, ("dX", "dscale", "dbias")):
        _same(g, r, name)


def test_spatial_bn_relu_of_nan_inf_is_numpys(small, monkeypatch):
    """Relu(BN(NaN)) stays NaN, Relu(BN(-inf)) is 0 (oneDNN's own ReLU would give 0 and 0)."""
    x, scale, bias, mean, var = _bn_inputs((2, 4, 6, 6), 10, False)
    x[0, :, 0, 0] = [np.nan, -np.inf, np.inf, 1.0]
    y = norm.spatial_bn_relu(np, x, np.abs(scale), bias, mean, var, is_test=1, epsilon=1e-5, momentum=0.9,
                             order="NCHW", num_batches=1)
    assert np.isnan(y[0, 0, 0, 0]) and y[0, 1, 0, 0] == 0 and y[0, 2, 0, 0] == np.inf


@pytest.mark.parametrize("is_test", [0, 1])
def test_fused_pairs_match_the_ops_apart(small, is_test):
    bn_out = ["y"] + ([] if is_test else ["rm", "rv", "sm", "si"])
    net = _net(("SpatialBN", ["x", "s", "b", "rm", "rv"], bn_out, dict(is_test=is_test)), ("Relu", ["y"], ["y"], {}),
               ("ReluGradient", ["y", "g"], ["g"], {}),
               ("SpatialBNGradient", ["x", "s", "g", "rm", "rv"], ["dx", "ds", "db"], {}))
    x, s, b, rm, rv = _bn_inputs((3, 6, 9, 7), 11, False)
    before = onednn.CALLS["eltwise"]
    got = _fused_and_apart(net, dict(x=x, s=s, b=b, rm=rm, rv=rv, g=_x(x.shape, 12)), [True, False, True, False])
    assert onednn.CALLS["eltwise"] > before and (got["y"] == 0).any()


def test_off_small_and_float64_stay_on_numpy(monkeypatch):
    """NETVIZ_ONEDNN=0 (onednn.ENABLED), arrays under the size floors and float64 never reach oneDNN."""
    big = _x((8, 64, 56, 56), 13)
    for x in (_x((2, 8, 4, 4), 14), big.astype(np.float64)):
        before = onednn.CALLS["eltwise"]
        norm.spatial_bn(np, x, *(np.ones(x.shape[1], x.dtype) for _ in range(4)), is_test=1)
        activation.relu_gradient(np, x, x)
        assert onednn.CALLS["eltwise"] == before
    monkeypatch.setattr(onednn, "ENABLED", False)
    before = onednn.CALLS["eltwise"]
    activation.relu_gradient(np, big, big)
    assert onednn.CALLS["eltwise"] == before and not onednn_eltwise.fits(big)


def test_fp_exception_mode_stays_on_numpy(small):
    """Caffe2's throw-if-fp-exceptions mode (NumPy's errstate "raise"): oneDNN would not report inf * 0."""
    y, dy = np.zeros((2, 3, 4, 5), np.float32), np.full((2, 3, 4, 5), np.inf, np.float32)
    before = onednn.CALLS["eltwise"]
    with np.errstate(invalid="raise"), pytest.raises(FloatingPointError):
        activation.relu_gradient(np, y, dy)
    assert onednn.CALLS["eltwise"] == before


def test_empty_maps_stay_on_numpy(small):
    """No pixels or no images: NumPy's path, even with every size counting as big."""
    for shape in ((0, 3, 4, 5), (2, 3, 0, 5)):
        x, v = np.zeros(shape, np.float32), np.ones(3, np.float32)
        before = onednn.CALLS["eltwise"]
        assert norm.spatial_bn(np, x, v, v, v, v, is_test=1).shape == shape
        assert activation.relu_gradient(np, x, x).shape == shape
        assert onednn.CALLS["eltwise"] == before


@pytest.mark.parametrize("special", [False, True], ids=["finite", "nan-inf"])
@pytest.mark.parametrize("shape", [(3, 5, 7, 9), (2, 64, 28, 28), (4, 6, 1, 1), (2, 3, 4, 5, 3)], ids=str)
def test_relu_gradient_then_spatial_bn_gradient_is_numpys_bit_for_bit(small, monkeypatch, shape, special):
    """The fused ReluGradient -> SpatialBNGradient with G from oneDNN's one pass (maps from
    norm.ONEDNN_RELU_GRAD_MIN_BYTES) and with G made block by block (float32 mask): G, dX, dscale and dbias
    bit for bit those of NumPy's ``dY * (Y > 0)`` and then the gradient's row path, NaN and -0.0 included."""
    x, scale, _, _, _ = _bn_inputs(shape, 21, False)
    y, dy = _x(shape, 22, special), _x(shape, 23, special)
    if special:
        y.flat[::7], dy.flat[::11] = -0.0, -np.nan
    axes = (0, *range(2, x.ndim))
    mean, inv = x.mean(axis=axes), (1 / x.std(axis=axes)).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        g_ref = dy * (y > 0)
        ref = norm._spatial_bn_gradient_rows(x, scale, g_ref, mean, inv)
        for floor, runs in ((0, 1), (1 << 62, 0)):
            monkeypatch.setattr(norm, "ONEDNN_RELU_GRAD_MIN_BYTES", floor)
            before = onednn.CALLS["eltwise"]
            g, got = norm.relu_gradient_then_spatial_bn_gradient(y, dy, x, scale, mean, inv)
            # NOTE: the dX pass runs 2 oneDNN passes either way; G's pass is the one counted on top
            assert onednn.CALLS["eltwise"] - before == 2 + runs
            for a, r in zip((g, *got), (g_ref, *ref)):
                assert a.dtype == r.dtype and a.shape == r.shape
                np.testing.assert_array_equal(a.view(np.uint32), r.view(np.uint32))
