"""engine.runtime.parallel.gemm: FC's GEMMs as single-threaded BLAS jobs on netviz's own threads (an OpenBLAS
worker spins ~0.1 s after each threaded call, on the core the next ops want): NumPy's ``a @ b`` values, the
fallbacks, and FC / FCGradient going through it."""
from __future__ import annotations

import numpy as np
import pytest

from engine.runtime import parallel
from engine.runtime.workspace import eval_op


def _rand(*shape, dtype=np.float32):
    return np.random.default_rng(sum(shape)).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("m, k, n", [(8, 2048, 1000), (1000, 8, 2048), (3, 257, 1001), (130, 70, 29), (64, 64, 64)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemm_gives_matmul_values(m, k, n, dtype):
    a, b = _rand(m, k, dtype=dtype), _rand(k, n, dtype=dtype)
    for x, y in ((a, b), (np.asfortranarray(a), b), (a, np.ascontiguousarray(b.T).T)):
        got = parallel.gemm(x, y)
        assert got.dtype == dtype and got.shape == (m, n) and got.flags.c_contiguous
        np.testing.assert_allclose(got, x @ y, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-4)


@pytest.mark.parametrize("a, b", [
    (np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)),            # tiny: OpenBLAS uses one thread anyway
    (np.ones((80, 70), np.int64), np.ones((70, 60), np.int64)),            # not BLAS
    (_rand(80, 70), _rand(70, 60, dtype=np.float64)),                      # mixed: NumPy's promotion
    (_rand(0, 70), _rand(70, 6000)),                                       # empty
    (_rand(4, 80, 70), _rand(70, 60)),                                     # batched
])
def test_gemm_falls_back_to_matmul(a, b, monkeypatch):
    calls = []
    monkeypatch.setattr(parallel, "matmuls", lambda jobs: calls.append(jobs))
    got = parallel.gemm(a, b)
    assert calls == [] and got.dtype == (a @ b).dtype
    np.testing.assert_array_equal(got, a @ b)


def test_gemm_shape_mismatch_is_numpys_error():
    with pytest.raises(ValueError):
        parallel.gemm(_rand(80, 70), _rand(71, 600))


def test_fc_and_its_gradient_run_as_jobs(monkeypatch):
    """ResNet-50's head (batch 8): FC and FCGradient's GEMMs never wake OpenBLAS's own threads."""
    x, w, b = _rand(8, 2048), _rand(1000, 2048) * 0.02, _rand(1000)
    dy = _rand(8, 1000)
    jobs = []
    real = parallel.matmuls
    monkeypatch.setattr(parallel, "matmuls", lambda js: (jobs.append(len(js)), real(js)))
    (y,) = eval_op("FC", x, w, b)
    np.testing.assert_allclose(y, x.astype(np.float64) @ w.T.astype(np.float64) + b, rtol=1e-4, atol=1e-4)
    dw, db, dx = eval_op("FCGradient", x, w, dy, n_out=3)
    np.testing.assert_allclose(dw, dy.T.astype(np.float64) @ x, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(db, dy.sum(axis=0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dx, dy.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)
    assert jobs == [parallel.THREADS] * 3
    (yt,) = eval_op("FCTransposed", x, np.ascontiguousarray(w.T), b)
    np.testing.assert_allclose(yt, y, rtol=1e-5, atol=1e-5)
    assert len(jobs) == 4
