"""blob_stats on a big tensor: the same numbers as NumPy over the whole, within memory bounded by a slice
(a 3 GiB weight in the inspector took more than 5 GB with a float64 copy of the whole)."""
from __future__ import annotations

import tracemalloc

import numpy as np

from engine.debugger.inspect import CHUNK, blob_stats


def _big() -> np.ndarray:
    a = np.random.default_rng(0).standard_normal(16 * CHUNK + 7, dtype=np.float32) * 3 + 1
    a[[5, CHUNK + 1]] = np.nan
    a[[2 * CHUNK + 3]] = np.inf
    a[[7, 9 * CHUNK]] = 0
    return a


def test_stats_of_a_tensor_many_slices_long_match_numpy():
    a = _big()
    s = blob_stats("w", a)
    f = a[np.isfinite(a)].astype(np.float64)
    assert (s.nan_count, s.inf_count, s.zero_count) == (2, 1, 2)
    assert (s.min, s.max) == (float(f.min()), float(f.max()))
    assert np.isclose(s.mean, f.mean(), rtol=1e-9, atol=1e-12) and np.isclose(s.std, f.std(), rtol=1e-9)
    counts, edges = np.histogram(f, bins=20)
    assert s.histogram[0] == tuple(int(c) for c in counts)
    assert np.allclose(s.histogram[1], edges)


def test_stats_of_a_big_tensor_copy_no_whole_tensor():
    a = _big()
    tracemalloc.start()
    try:
        blob_stats("w", a)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < a.nbytes // 2, f"peak {peak / 2**20:.0f} MiB for a {a.nbytes / 2**20:.0f} MiB tensor"
