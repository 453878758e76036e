"""AveragePool's per-position adds against its reference window reduction (issue 46).

`pool.FAST_POOL = False` (env NETVIZ_PLAIN_CONV=1) is the reference; both agree to float32
tolerance over kernels, strides, per-side pads, count_include_pad, orders and odd sizes, and on
inputs big enough to be cut over the cores.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import engine.runtime.ops  # noqa: F401  (fills the kernel table)
from engine.runtime.ops import pool as pool_ops
from engine.runtime.workspace import eval_op


def _both(monkeypatch, x, **args):
    monkeypatch.setattr(pool_ops, "FAST_POOL", False)
    plain = eval_op("AveragePool", x, **args)[0]
    monkeypatch.setattr(pool_ops, "FAST_POOL", True)
    fast = eval_op("AveragePool", x, **args)[0]
    assert fast.shape == plain.shape and fast.dtype == plain.dtype
    np.testing.assert_allclose(fast, plain, rtol=1e-5, atol=1e-6)
    return fast


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 3), c=st.integers(1, 5), h=st.integers(1, 12), w=st.integers(1, 12), kh=st.integers(1, 4),
       kw=st.integers(1, 4), stride=st.integers(1, 3), pads=st.tuples(*[st.integers(0, 1)] * 4),
       include=st.sampled_from([0, 1]), nhwc=st.booleans(), seed=st.integers(0, 999))
def test_average_pool_fast_equals_plain(n, c, h, w, kh, kw, stride, pads, include, nhwc, seed):
    if h + pads[0] + pads[2] < kh or w + pads[1] + pads[3] < kw or max(pads[0::2]) >= kh or max(pads[1::2]) >= kw:
        return  # NOTE: no output, or a window all padding (Caffe2 wants pad < kernel)
    x = np.random.default_rng(seed).standard_normal((n, h, w, c) if nhwc else (n, c, h, w)).astype(np.float32)
    with pytest.MonkeyPatch.context() as mp:
        _both(mp, x, kernel_h=kh, kernel_w=kw, stride=stride, pad_t=pads[0], pad_l=pads[1], pad_b=pads[2],
              pad_r=pads[3], count_include_pad=include, order="NHWC" if nhwc else "NCHW")


def test_average_pool_big_input_cut_over_cores(monkeypatch):
    """Inception v2's 3x3/1 pad-1 pool on an input over parallel.MIN_BYTES (its blocks run on both cores)."""
    x = np.random.default_rng(0).standard_normal((4, 32, 40, 40)).astype(np.float32)
    y = _both(monkeypatch, x, kernel=3, stride=1, pad=1)
    np.testing.assert_allclose(y[0, 0, 1, 1], x[0, 0, :3, :3].mean(), rtol=1e-5)
    np.testing.assert_allclose(y[0, 0, 0, 0], x[0, 0, :2, :2].mean(), rtol=1e-5)  # pads not counted
