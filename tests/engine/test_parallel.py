"""engine.runtime.parallel: kernels cut over threads give the single-call results; inputs stay untouched."""
from __future__ import annotations

import numpy as np
import pytest

from engine.runtime import parallel
from engine.runtime.workspace import eval_op
from tests.engine.kernel_cases import randn

CASES = [
    ("Relu", lambda: [randn(4, 3, 5, 6)], {}),
    ("ReluGradient", lambda: [randn(4, 3, 5, 6), randn(4, 3, 5, 6)], {}),
    ("Sum", lambda: [randn(4, 3, 5, 6), randn(4, 3, 5, 6), randn(4, 3, 5, 6)], {}),
    ("SpatialBN", lambda: [randn(4, 3, 5, 6), randn(3), randn(3), randn(3), np.abs(randn(3)) + 0.5], dict(is_test=1)),
    ("SpatialBN", lambda: [randn(1, 6, 5, 6), randn(6), randn(6), randn(6), np.abs(randn(6)) + 0.5], dict(is_test=1)),
    ("SpatialBN", lambda: [randn(4, 6, 5, 6), randn(6), randn(6), randn(6), np.abs(randn(6)) + 0.5],
     dict(is_test=0, n_out=5)),
    ("SpatialBN", lambda: [randn(1, 6, 5, 6), randn(6), randn(6), randn(6), np.abs(randn(6)) + 0.5],
     dict(is_test=0, n_out=5)),
    ("SpatialBNGradient", lambda: [randn(4, 6, 5, 6), randn(6), randn(4, 6, 5, 6), randn(6), np.abs(randn(6)) + 0.5],
     dict(n_out=3)),
    ("MaxPool", lambda: [randn(4, 3, 9, 8)], dict(kernel=3, stride=2, pad=1)),
    ("Conv", lambda: [randn(4, 3, 9, 8), randn(5, 3, 3, 3), randn(5)], dict(kernel=3, pad=1)),
    ("Conv", lambda: [randn(1, 3, 9, 8), randn(5, 3, 3, 3), randn(5)], dict(kernel=3, stride=2)),
    ("Conv", lambda: [randn(3, 6, 40, 40), randn(8, 6, 1, 1), randn(8)], dict(kernel=1)),
    ("Conv", lambda: [randn(3, 6, 40, 40), randn(8, 6, 3, 3), randn(8)], dict(kernel=3, pad=1)),
]


@pytest.mark.parametrize("op, make, args", CASES, ids=lambda c: c if isinstance(c, str) else "")
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_cut_matches_single_call(monkeypatch, op, make, args, threads):
    ins = make()
    monkeypatch.setattr(parallel, "THREADS", 1)
    want = eval_op(op, *ins, **args)
    monkeypatch.setattr(parallel, "THREADS", threads)
    monkeypatch.setattr(parallel, "MIN_BYTES", 0)
    monkeypatch.setattr(parallel, "BLOCK_BYTES", 64)
    copies = [a.copy() for a in ins]
    got = eval_op(op, *ins, **args)
    for a, b in zip(ins, copies):
        np.testing.assert_array_equal(a, b)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_scratch_is_reused_and_big_requests_are_fresh(monkeypatch):
    a = parallel.scratch((4, 5), np.float32)
    b = parallel.scratch((2, 3), np.float32)
    assert np.shares_memory(a, b)
    monkeypatch.setattr(parallel, "SCRATCH_MAX", 8)
    assert not np.shares_memory(parallel.scratch((4, 5), np.float32), a)


def test_matmuls_restores_blas_threads():
    fns = parallel._openblas()
    a = randn(6, 5)
    out = np.empty((6, 7), np.float32)
    b = randn(5, 7)
    before = fns[0]() if fns else None
    parallel.matmuls(parallel.gemm_jobs(a, b, out))
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    assert (fns[0]() if fns else None) == before


@pytest.mark.parametrize("k, stride, pad, hw", [(7, 2, 3, (11, 10)), (5, 2, 1, (9, 12)), (5, 3, 2, (13, 8)), (3, 2, 1, (9, 8)), (3, 2, 0, (40, 38))])
def test_strided_conv_from_phases_matches_direct(monkeypatch, k, stride, pad, hw):
    monkeypatch.setattr(parallel, "MIN_BYTES", 0)
    from tests.engine.test_kernels_nn import conv_ref  # noqa: PLC0415

    x, w, b = randn(3, 2, *hw), randn(4, 2, k, k), randn(4)
    y = eval_op("Conv", x, w, b, kernel=k, stride=stride, pad=pad)[0]
    np.testing.assert_allclose(y, conv_ref(x, w, b, stride=stride, pad=pad), rtol=1e-4, atol=1e-4)
    dw, db, dx = eval_op("ConvGradient", x, w, np.ones_like(y), kernel=k, stride=stride, pad=pad, n_out=3)
    v = randn(*w.shape)  # Y is linear in W: <dW, V> = sum(conv(X, V)) for dY = 1
    np.testing.assert_allclose((dw * v).sum(), conv_ref(x, v, np.zeros(4), stride=stride, pad=pad).sum(), rtol=1e-3)
    u = randn(*x.shape)  # Y is linear in X: <dX, U> = sum(conv(U, W)) for dY = 1
    np.testing.assert_allclose((dx * u).sum(), conv_ref(u, w, np.zeros(4), stride=stride, pad=pad).sum(), rtol=1e-3)
