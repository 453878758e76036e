"""The fast convolution paths against the plain im2col path (issue 46).

`conv.FAST_CONV = False` (env NETVIZ_PLAIN_CONV=1) is the reference; the fast paths must agree to
float32 tolerance over shapes, strides, pads, groups, dilations, orders and odd sizes.  The
pixel threshold of the implicit GEMM is lowered to 1 so that small hypothesis shapes take it, and
each differential test checks the fast path really ran (a test of a path never taken cannot fail).
oneDNN (tests/engine/test_onednn.py) is switched off here: it would take these shapes first.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine.runtime.ops  # noqa: F401  (fills the kernel table)
from engine.runtime import blas, onednn
from engine.runtime import parallel
from engine.runtime.ops import conv as conv_ops
from engine.runtime.ops import conv_strided
from engine.runtime.workspace import eval_op

pytestmark = pytest.mark.skipif(not blas.available(), reason="NumPy's BLAS is not an OpenBLAS with cblas_sgemm")

#: (module, kernel) of every fast path a spy counts
FAST_KERNELS = ((conv_ops, "conv_implicit"), (conv_ops, "conv_implicit_dw"), (conv_ops, "gemm_1x1_gradient"),
                (conv_strided, "conv_strided"), (conv_strided, "conv_strided_gradient"))


@pytest.fixture(autouse=True)
def _numpy_paths(monkeypatch):
    """The NumPy fast paths are what this file checks: oneDNN, when installed, stays out of the way."""
    monkeypatch.setattr(onednn, "ENABLED", False)


class Calls(list):
    """Input shapes of every fast-kernel call, and per kernel name in `.by`."""

    def __init__(self):
        super().__init__()
        self.by: dict[str, list[tuple]] = {}

    def clear(self):
        super().clear()
        self.by.clear()


def _spy(monkeypatch) -> Calls:
    """The list every call of the fast kernels appends its input's shape to."""
    calls = Calls()

    def wrap(name, real):
        def spied(x, *a, **kw):
            calls.append(x.shape)
            calls.by.setdefault(name, []).append(x.shape)
            return real(x, *a, **kw)
        return spied
    for mod, name in FAST_KERNELS:
        monkeypatch.setattr(mod, name, wrap(name, getattr(mod, name)))
    return calls


@pytest.fixture
def counted(monkeypatch):
    """Every shape takes the fast path when it applies; returns the list its calls are counted in."""
    monkeypatch.setattr(conv_ops, "_IMPLICIT_MIN_PIXELS", 1)
    monkeypatch.setattr(conv_ops, "_IMPLICIT_MIN_CHANNELS", 1)
    monkeypatch.setattr(conv_ops, "_IMPLICIT_DW_MIN_PIXELS", 1)
    monkeypatch.setattr(conv_ops, "_CHAIN_MIN_PIXELS", 1)
    return _spy(monkeypatch)


def _both(monkeypatch, op_type, *inputs, n_out=1, **args):
    """(plain, fast) outputs of one op."""
    monkeypatch.setattr(conv_ops, "FAST_CONV", False)
    plain = eval_op(op_type, *inputs, n_out=n_out, **args)
    monkeypatch.setattr(conv_ops, "FAST_CONV", True)
    return plain, eval_op(op_type, *inputs, n_out=n_out, **args)


def _close(plain, fast):
    for a, b in zip(plain, fast):
        assert a.shape == b.shape and a.dtype == b.dtype
        scale = max(1.0, float(np.abs(a).max(initial=0)))
        np.testing.assert_allclose(b, a, rtol=0, atol=2e-5 * scale)


geometries = st.fixed_dictionaries({
    "n": st.integers(1, 3), "c": st.integers(1, 6), "m": st.integers(1, 7), "group": st.sampled_from([1, 1, 2]),
    "h": st.integers(1, 13), "w": st.integers(1, 13), "kh": st.integers(1, 4), "kw": st.integers(1, 4),
    "stride": st.sampled_from([1, 1, 1, 2]), "dilation": st.sampled_from([1, 1, 2]),
    "pads": st.tuples(*[st.integers(0, 2)] * 4), "order": st.sampled_from(["NCHW", "NHWC"]),
    "bias": st.booleans(), "seed": st.integers(0, 2 ** 16)})


def _out_hw(g):
    return (g["h"] + g["pads"][0] + g["pads"][2] - g["dilation"] * (g["kh"] - 1),
            g["w"] + g["pads"][1] + g["pads"][3] - g["dilation"] * (g["kw"] - 1))


#: drawn geometries that leave at least one output pixel
cases = geometries.filter(lambda g: min(_out_hw(g)) >= 1)


def _case(g):
    """Inputs and args of one drawn Conv."""
    c, m = g["c"] * g["group"], g["m"] * g["group"]
    r = np.random.default_rng(g["seed"])
    x = r.standard_normal((g["n"], c, g["h"], g["w"])).astype(np.float32)
    w = r.standard_normal((m, c // g["group"], g["kh"], g["kw"])).astype(np.float32)
    if g["order"] == "NHWC":
        x, w = x.transpose(0, 2, 3, 1).copy(), w.transpose(0, 2, 3, 1).copy()
    ins = [x, w] + ([r.standard_normal(m).astype(np.float32)] if g["bias"] else [])
    args = dict(kernel_h=g["kh"], kernel_w=g["kw"], stride=g["stride"], dilation=g["dilation"], order=g["order"],
                group=g["group"], pad_t=g["pads"][0], pad_l=g["pads"][1], pad_b=g["pads"][2], pad_r=g["pads"][3])
    return ins, args


def _takes_fast_path(g):
    return g["group"] == 1 and g["stride"] == 1 and g["kh"] * g["kw"] > 1


def _takes_strided_path(g):
    """conv_strided's rule: stride 2 here, no dilation, a kernel of at least 3x the stride's area."""
    return g["group"] == 1 and g["stride"] == 2 and g["dilation"] == 1 and g["kh"] * g["kw"] >= 12 \
        and min(g["kh"], g["kw"]) >= 2


def _takes_chain_path(g):
    """gemm_1x1_gradient's rule: an unpadded, undilated 1x1 conv and a batch of at least THREADS."""
    return g["group"] == 1 and g["kh"] == g["kw"] == 1 and not any(g["pads"]) and g["n"] >= parallel.THREADS


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(g=cases)
def test_conv_forward_fast_equals_plain(monkeypatch, counted, g):
    ins, args = _case(g)
    counted.clear()
    plain, fast = _both(monkeypatch, "Conv", *ins, **args)
    _close(plain, fast)
    assert bool(counted.by.get("conv_implicit")) == _takes_fast_path(g)
    assert bool(counted.by.get("conv_strided")) == _takes_strided_path(g)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(g=cases)
def test_conv_gradient_fast_equals_plain(monkeypatch, counted, g):
    ins, args = _case(g)
    y = eval_op("Conv", *ins, **args)[0]
    dy = np.random.default_rng(g["seed"] + 1).standard_normal(y.shape).astype(np.float32)
    n_out = 3 if g["bias"] else 2
    if not g["bias"]:
        args["no_bias"] = 1
    counted.clear()
    plain, fast = _both(monkeypatch, "ConvGradient", ins[0], ins[1], dy, n_out=n_out, **args)
    _close(plain, fast)
    # NOTE: dX is a full conv of dY (fast) only when no pad exceeds the kernel's reach d * (k - 1)
    reach = (g["dilation"] * (g["kh"] - 1), g["dilation"] * (g["kw"] - 1)) * 2
    implicit = bool(counted.by.get("conv_implicit")) or bool(counted.by.get("conv_implicit_dw"))
    assert implicit == (_takes_fast_path(g) and all(p <= r for p, r in zip(g["pads"], reach)))
    assert bool(counted.by.get("conv_strided_gradient")) == _takes_strided_path(g)
    assert bool(counted.by.get("gemm_1x1_gradient")) == _takes_chain_path(g)


def test_resnet_shape_takes_the_implicit_gemm_at_the_default_threshold(monkeypatch):
    """A ResNet 3x3 layer (big map) takes the fast path without any lowered threshold; a 7x7 map does not."""
    calls = _spy(monkeypatch)
    r = np.random.default_rng(0)
    for hw, expect in ((28, True), (7, False)):
        calls.clear()
        x = r.standard_normal((2, 16, hw, hw)).astype(np.float32)
        w = r.standard_normal((8, 16, 3, 3)).astype(np.float32)
        b = r.standard_normal(8).astype(np.float32)
        plain, fast = _both(monkeypatch, "Conv", x, w, b, kernel=3, pad=1)
        _close(plain, fast)
        assert bool(calls) == expect


def test_one_big_image_with_bias_cut_over_channels(monkeypatch):
    """A single image whose output passes parallel.MIN_BYTES: its bias pass is cut along channels."""
    r = np.random.default_rng(2)
    x, w = r.standard_normal((1, 8, 130, 130)).astype(np.float32), r.standard_normal((16, 8, 3, 3)).astype(np.float32)
    b = r.standard_normal(16).astype(np.float32)
    calls = _spy(monkeypatch)
    plain, fast = _both(monkeypatch, "Conv", x, w, b, kernel=3, pad=1)
    _close(plain, fast)
    assert calls


@pytest.mark.parametrize("n, c, h, w, m, k, pad, dilation", [(2, 3, 11, 9, 5, 3, 1, 1), (1, 8, 16, 13, 16, 3, 2, 2),
                                                              (3, 5, 7, 20, 4, 5, 2, 1)])
def test_column_blocks_equal_plain(monkeypatch, counted, n, c, h, w, m, k, pad, dilation):
    """Big output grids run in blocks of columns (all taps per block); forced here with blocks of 7."""
    monkeypatch.setattr(conv_ops, "_GRID_FLOATS", 0)
    monkeypatch.setattr(conv_ops, "_CHUNK_FLOATS", 1)
    monkeypatch.setattr(conv_ops, "_MIN_CHUNK", 7)
    r = np.random.default_rng(n * h)
    x, wt = r.standard_normal((n, c, h, w)).astype(np.float32), r.standard_normal((m, c, k, k)).astype(np.float32)
    plain, fast = _both(monkeypatch, "Conv", x, wt, r.standard_normal(m).astype(np.float32), kernel=k, pad=pad,
                        dilation=dilation)
    _close(plain, fast)
    assert counted


def test_float64_keeps_the_plain_path(monkeypatch, counted):
    r = np.random.default_rng(1)
    x, w = r.standard_normal((1, 3, 9, 9)), r.standard_normal((4, 3, 3, 3))
    plain, fast = _both(monkeypatch, "Conv", x, w, kernel=3)
    np.testing.assert_allclose(fast[0], plain[0], rtol=1e-12)
    assert not counted


@pytest.mark.parametrize("n, c, h, w, m, k, s, pad, order, need_dx", [
    (2, 3, 31, 27, 8, 7, 2, 3, "NCHW", True),   # conv1's 7x7/2, odd sizes
    (1, 3, 29, 30, 5, 7, 2, 3, "NHWC", True),   # one image: its row blocks go to both threads, each its own dX phases
    (3, 2, 17, 19, 4, 6, 3, 1, "NCHW", True),   # stride 3, uneven phases
    (1, 4, 23, 21, 6, 4, 2, 0, "NCHW", False),  # dW only
])
def test_strided_blocks_equal_plain(monkeypatch, counted, n, c, h, w, m, k, s, pad, order, need_dx):
    """conv1-like strided convs (column blocks from stride phases): forward, dW, db and dX against the
    plain path, with blocks of 64 bytes forcing many row blocks, the last one short."""
    monkeypatch.setattr(conv_strided, "BLOCK_BYTES", 64)
    r = np.random.default_rng(n + h)
    x, wt = r.standard_normal((n, c, h, w)).astype(np.float32), r.standard_normal((m, c, k, k)).astype(np.float32)
    if order == "NHWC":
        x, wt = x.transpose(0, 2, 3, 1).copy(), wt.transpose(0, 2, 3, 1).copy()
    args = dict(kernel=k, stride=s, pad=pad, order=order)
    plain, fast = _both(monkeypatch, "Conv", x, wt, **args)
    _close(plain, fast)
    dy = r.standard_normal(fast[0].shape).astype(np.float32)
    plain, fast = _both(monkeypatch, "ConvGradient", x, wt, dy, n_out=3 if need_dx else 2, **args)
    _close(plain, fast)
    assert counted.by.get("conv_strided") and counted.by.get("conv_strided_gradient")


@pytest.mark.parametrize("stride, order", [(1, "NCHW"), (2, "NCHW"), (1, "NHWC"), (2, "NHWC")])
def test_1x1_gradient_chain_equals_plain(monkeypatch, counted, stride, order):
    """A 1x1 conv's gradient by per-thread chains of per-image GEMMs, both GEMM orientations
    (C above M, and M above C), strided (dX on every other pixel, zeros between) and NHWC."""
    r = np.random.default_rng(stride)
    for c, m in ((24, 10), (6, 20)):
        x = r.standard_normal((5, c, 13, 12)).astype(np.float32)
        wt = r.standard_normal((m, c, 1, 1)).astype(np.float32)
        if order == "NHWC":
            x, wt = x.transpose(0, 2, 3, 1).copy(), wt.transpose(0, 2, 3, 1).copy()
        y = eval_op("Conv", x, wt, kernel=1, stride=stride, order=order)[0]
        dy = r.standard_normal(y.shape).astype(np.float32)
        counted.clear()
        plain, fast = _both(monkeypatch, "ConvGradient", x, wt, dy, n_out=3, kernel=1, stride=stride, order=order)
        _close(plain, fast)
        assert counted.by.get("gemm_1x1_gradient")


@pytest.mark.parametrize("n, c, hw, m, dilation", [(3, 5, 11, 4, 1), (2, 16, 9, 7, 2), (1, 6, 12, 5, 1)])
def test_blocked_dw_equals_per_tap_dw(monkeypatch, counted, n, c, hw, m, dilation):
    """The implicit GEMM's dW by cached im2col blocks (one GEMM per block) against its per-tap GEMMs
    and the plain path, with blocks of 7 grid columns (many blocks, a short last one); one image:
    the grid's columns cut over the threads."""
    monkeypatch.setattr(conv_ops, "_MIN_CHUNK", 7)
    monkeypatch.setattr(conv_ops, "_DW_BLOCK_BYTES", 0)
    r = np.random.default_rng(c)
    x, wt = r.standard_normal((n, c, hw, hw)).astype(np.float32), r.standard_normal((m, c, 3, 3)).astype(np.float32)
    dy = r.standard_normal((n, m, hw, hw)).astype(np.float32)
    args = dict(kernel=3, pad=dilation, dilation=dilation, no_bias=1)
    plain, blocked = _both(monkeypatch, "ConvGradient", x, wt, dy, **args)
    monkeypatch.setattr(conv_ops, "DW_BLOCKED", False)
    per_tap = eval_op("ConvGradient", x, wt, dy, **args)
    _close(plain, blocked)
    _close(per_tap, blocked)
    assert len(counted.by.get("conv_implicit_dw", [])) == 2


@pytest.mark.parametrize("stride, order", [(1, "NCHW"), (2, "NCHW"), (1, "NHWC")])
def test_1x1_small_maps_fold_the_batch(monkeypatch, stride, order):
    """A 1x1 conv on a small map is ONE GEMM over the whole batch on the fast path (the plain path
    multiplies image by image); both agree."""
    folds: list[int] = []
    real = conv_ops._batch_gemm
    monkeypatch.setattr(conv_ops, "_batch_gemm", lambda w2, cols, n, out: folds.append(n) or real(w2, cols, n, out))
    r = np.random.default_rng(stride)
    x, wt = r.standard_normal((3, 12, 9, 7)).astype(np.float32), r.standard_normal((10, 12, 1, 1)).astype(np.float32)
    if order == "NHWC":
        x, wt = x.transpose(0, 2, 3, 1).copy(), wt.transpose(0, 2, 3, 1).copy()
    monkeypatch.setattr(conv_ops, "FAST_CONV", False)
    plain = eval_op("Conv", x, wt, kernel=1, stride=stride, order=order)
    assert not folds
    monkeypatch.setattr(conv_ops, "FAST_CONV", True)
    _close(plain, eval_op("Conv", x, wt, kernel=1, stride=stride, order=order))
    assert folds == [3]


@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("c", [8, 116])
@pytest.mark.parametrize("kernel, stride, hw", [(1, 1, 13), (1, 2, 6), (3, 1, 5), (3, 2, 9), (7, 2, 15)])
def test_outputs_never_live_in_scratch(n, c, kernel, stride, hw):
    """A kernel's outputs must be its own memory: the thread's scratch is overwritten by the next conv
    (a one-image 1x1 ConvGradient once returned its dX columns in scratch: ShuffleNet v2 trained wrong)."""
    r = np.random.default_rng(kernel * 10 + stride + n)
    x = r.standard_normal((n, c, hw, hw)).astype(np.float32)
    w = r.standard_normal((c, c, kernel, kernel)).astype(np.float32)
    pad = kernel // 2
    y = eval_op("Conv", x, w, kernel=kernel, stride=stride, pad=pad)[0]
    dy = r.standard_normal(y.shape).astype(np.float32)
    outs = eval_op("ConvGradient", x, w, dy, n_out=3, kernel=kernel, stride=stride, pad=pad)
    kept = [o.copy() for o in (y, *outs)]
    big = r.standard_normal((2, 16, 40, 40)).astype(np.float32)  # churns the scratch of every path
    for k in (1, 3, 7):
        wb = r.standard_normal((16, 16, k, k)).astype(np.float32)
        yb = eval_op("Conv", big, wb, kernel=k, stride=2, pad=k // 2)[0]
        eval_op("ConvGradient", big, wb, np.ones_like(yb), n_out=3, kernel=k, stride=2, pad=k // 2)
    for before, after in zip(kept, (y, *outs)):
        np.testing.assert_array_equal(before, after)
