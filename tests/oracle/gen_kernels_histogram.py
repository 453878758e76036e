"""Oracle cases for histograms and feature transforms (engine/runtime/ops/histogram.py)."""
from __future__ import annotations

import numpy as np

from kernel_oracle import Case, record, rng_for

I32, I64, F32, F64 = np.int32, np.int64, np.float32, np.float64


def _f(name, *shape):
    return rng_for(name).randn(*shape).astype(F32)


def cases():
    x = _f("h", 20)
    yield Case("AccumulateHistogram", "AccumulateHistogram", {"X": x}, ["C", "A"],
               args={"lower_bound": -1.0, "upper_bound": 1.0, "num_buckets": 4})
    yield Case("AccumulateHistogram_default", "AccumulateHistogram", {"X": rng_for("u").rand(7).astype(F32)},
               ["C", "A"])
    yield Case("Histogram", "Histogram", {"X": x, "X2": _f("h2", 3, 2)}, ["Y"], args={"bin_edges": [-1.0, 0.0, 0.5, 2.0]})
    yield Case("Histogram_edges_hit", "Histogram", {"X": np.array([-1, 0, 0.5, 2, 3, -4], F32)}, ["Y"],
               args={"bin_edges": [-1.0, 0.0, 0.5, 2.0]})
    yield Case("Histogram_bad_edges", "Histogram", {"X": x}, ["Y"], args={"bin_edges": [1.0, 0.0]})
    for sp in ("linear", "logarithmic"):
        yield Case("SelfBinningHistogram_" + sp, "SelfBinningHistogram", {"X": np.abs(x), "X2": np.abs(_f("h3", 4))},
                   ["V", "C"], args={"num_bins": 5, "bin_spacing": sp})
    yield Case("SelfBinningHistogram_abs", "SelfBinningHistogram", {"X": x}, ["V", "C"], args={"num_bins": 4, "abs": 1})
    yield Case("SelfBinningHistogram_neg", "SelfBinningHistogram", {"X": x.astype(F64)}, ["V", "C"],
               args={"num_bins": 3})
    yield Case("SelfBinningHistogram_const", "SelfBinningHistogram", {"X": np.ones(5, F32)}, ["V", "C"],
               args={"num_bins": 4})
    yield Case("SelfBinningHistogram_empty", "SelfBinningHistogram", {"X": np.zeros(0, F32)}, ["V", "C"],
               args={"num_bins": 4})
    yield Case("Percentile", "Percentile",
               {"O": np.array([[3, 5], [5, 1], [6, 7], [0, 9]], F32),
                "M": np.array([[1, 0.1], [5, 0.5], [6, 0.8], [1, 0.2], [4, 0.4], [8, 0.9]], F32),
                "L": np.array([3, 3], I32)}, ["Y"])
    yield Case("BisectPercentile", "BisectPercentile", {"X": np.array([[1, 2.5], [3.5, 9], [0, 4], [2, 6]], F32)},
               ["Y"], args={"percentile_raw": [1.0, 2.0, 3.0, 2.0, 4.0, 6.0], "percentile_mapping": [0.1, 0.5, 0.9, 0.2, 0.5, 0.8],
                            "percentile_lower": [0.05, 0.4, 0.85, 0.1, 0.45, 0.75],
                            "percentile_upper": [0.15, 0.6, 0.95, 0.3, 0.55, 0.85], "lengths": [3, 3]})
    q = _f("q", 50)
    for qq, ab in ((0.5, 0), (0.9, 1), (0.0, 0), (1.0, 1), (0.02, 0)):
        yield Case(f"Quantile_{qq}_{ab}", "Quantile", {"X": q, "X2": _f("q2", 3, 3)}, ["Y"],
                   args={"quantile": qq, "abs": ab, "tol": 1e-3})
    yield Case("Quantile_no_arg", "Quantile", {"X": q}, ["Y"])
    yield Case("Quantile_f64", "Quantile", {"X": q.astype(F64)}, ["Y"], args={"quantile": 0.3, "tol": 1e-2})
    p = rng_for("pw").rand(6, 2).astype(F32)
    yield Case("PiecewiseLinearTransform", "PiecewiseLinearTransform", {"X": p}, ["Y"],
               args={"bounds": [0.1, 0.4, 0.8, 0.0, 0.5, 1.0], "slopes": [1.0, -2.0, 0.5, 3.0],
                     "intercepts": [0.0, 1.0, -0.5, 0.2]})
    yield Case("PiecewiseLinearTransform_binary", "PiecewiseLinearTransform", {"X": p}, ["Y"],
               args={"bounds": [0.1, 0.4, 0.8], "slopes": [1.0, -2.0], "intercepts": [0.0, 1.0], "binary": 1})
    yield Case("PiecewiseLinearTransform_binary_1d", "PiecewiseLinearTransform", {"X": p[:, 0].copy()}, ["Y"],
               args={"bounds": [0.1, 0.4, 0.8], "slopes": [1.0, -2.0], "intercepts": [0.0, 1.0], "binary": 1})
    yield Case("PiecewiseLinearTransform_binary_n1", "PiecewiseLinearTransform", {"X": p[:, :1].copy()}, ["Y"],
               args={"bounds": [0.1, 0.4, 0.8], "slopes": [1.0, -2.0], "intercepts": [0.0, 1.0], "binary": 1})
    yield Case("PiecewiseLinearTransform_inputs", "PiecewiseLinearTransform",
               {"X": p, "B": np.array([0.1, 0.4, 0.8, 0.0, 0.5, 1.0], F32), "S": np.array([1, -2, 0.5, 3], F32),
                "I": np.array([0, 1, -0.5, 0.2], F32)}, ["Y"])
    bx = np.abs(_f("bc", 4, 3)) * 3
    bx[0, 0] = -1.0
    yield Case("BatchBoxCox", "BatchBoxCox", {"D": bx, "L1": np.array([0.5, 0, -1.5], F32),
                                              "L2": np.array([0, 1.5, 0.2], F32)}, ["Y"])
    yield Case("BatchBoxCox_f64", "BatchBoxCox", {"D": bx.astype(F64), "L1": np.array([0.5, 0, 2], F64),
                                                  "L2": np.array([0, 1.5, 0.2], F64)}, ["Y"])
    yield Case("StumpFunc", "StumpFunc", {"X": np.array([-1, 0.5, 0.5001, 3], F32)}, ["Y"],
               args={"threshold": 0.5, "low_value": -2.0, "high_value": 7.0})
    yield Case("StumpFuncIndex", "StumpFuncIndex", {"X": np.array([-1, 0.5, 0.5001, 3], F32)}, ["L", "H"],
               args={"threshold": 0.5})


if __name__ == "__main__":
    print(record("histogram", cases()), "cases")
