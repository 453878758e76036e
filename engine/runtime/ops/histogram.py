"""Histograms and feature transforms: AccumulateHistogram, Histogram, SelfBinningHistogram,
Percentile, BisectPercentile, Quantile, PiecewiseLinearTransform, BatchBoxCox, StumpFunc(Index).

Statistics ops run on the host (Caffe2 has CPU kernels only); elementwise transforms use ``xp``.
"""
from __future__ import annotations

import numpy as np

from engine.runtime import device as dev
from engine.runtime.grad_makers import no_gradient, should_not_do_gradient
from engine.runtime.ops.lengths import host_lengths, offsets_of
from engine.catalogue.registry import kernel, shape
from engine.runtime.shapes import INT64, TensorInfo, same_as

# ---- kernels ----


def _all_values(xs, absolute=False):
    """Every input flattened into one host vector (Caffe2 requires one dtype for all inputs)."""
    if any(x.dtype != xs[0].dtype for x in xs):
        raise TypeError("all inputs must have the same type")
    v = np.concatenate([dev.to_host(x).reshape(-1) for x in xs]) if xs else np.zeros(0)
    return np.abs(v) if absolute else v


@kernel("AccumulateHistogram")
def accumulate_histogram(xp, x, *, lower_bound: float = 0.0, upper_bound: float = 1.0, num_buckets: int = 1):
    # NOTE: num_buckets + 2 buckets: [-inf, lower), num_buckets equal ones, [upper, inf). Caffe2
    # accumulates AccHist over the runs of one op instance; each run here starts a fresh one.
    if num_buckets <= 0 or upper_bound <= lower_bound:
        raise ValueError("AccumulateHistogram needs num_buckets > 0 and upper_bound > lower_bound")
    v = dev.to_host(x).reshape(-1).astype(np.float64)
    width = (upper_bound - lower_bound) / num_buckets
    b = np.where(v < lower_bound, 0, np.where(v >= upper_bound, num_buckets + 1,
                                                 1 + ((v - lower_bound) / width).astype(np.int64)))
    b = np.minimum(b, num_buckets + 1)
    cur = np.bincount(b.astype(np.int64), minlength=num_buckets + 2).astype(np.int64)
    return xp.asarray(cur), xp.asarray(cur.copy())


@kernel("Histogram")
def histogram(xp, *xs, bin_edges=()):
    edges = np.asarray(bin_edges, np.float64)
    if edges.size < 2:
        raise ValueError("Number of bin edges must be greater than or equal to 2")
    if (np.diff(edges) <= 0).any():
        raise ValueError("bin_edges must be a strictly increasing sequence of values")
    v = _all_values(xs).astype(np.float64)
    # NOTE: bucket i holds edges[i] <= v < edges[i + 1]; values outside the edges are not counted.
    k = np.searchsorted(edges, v, side="right") - 1
    k = k[(k >= 0) & (k < edges.size - 1)]
    return xp.asarray(np.bincount(k, minlength=edges.size - 1).astype(np.int64))


@kernel("SelfBinningHistogram")
def self_binning_histogram(xp, *xs, num_bins: int = 0, bin_spacing: str = "linear",
                           logspace_start: float = 1e-24, abs: int = 0):  # noqa: A002 - Caffe2's name
    if num_bins < 1:
        raise ValueError("Number of bins must be greater than or equal to 1.")
    if bin_spacing not in ("linear", "logarithmic") or logspace_start <= 0:
        raise ValueError("bin_spacing must be linear or logarithmic and logspace_start > 0")
    v = _all_values(xs, bool(abs))
    t = v.dtype.type if v.dtype.kind == "f" else np.float32
    edges_n = num_bins + 1
    if v.size == 0:
        return xp.zeros(edges_n, dtype=t), xp.zeros(edges_n, dtype=np.int64)
    lo, hi = t(v.min()), t(v.max())
    ratio = (np.arange(edges_n) / t(num_bins)).astype(t)
    if bin_spacing == "linear":
        top = t(lo + (hi - lo) * t(1.0001))
        edges = (lo + ratio * (top - lo)).astype(t)
    else:
        lo, hi = max(lo, t(logspace_start)), max(hi, t(logspace_start))
        top = t(lo + t((hi - lo) * t(1.0001)))
        edges = (lo * np.exp(t(np.log(top) - np.log(lo)) * ratio)).astype(t)
    counts = np.zeros(edges_n, np.int64)
    if edges[-1] <= hi:
        # NOTE: an empty range (min == max): one last edge above it, every value in bin 0.
        edges[-1] = top
        counts[0] = v.size
    else:
        k = np.searchsorted(edges, v.astype(t), side="right")
        np.add.at(counts, np.where(k == 0, 0, k - 1)[k < edges_n], 1)
    return xp.asarray(edges), xp.asarray(counts)


def _interp_segments(v, cols, keys, vals, lengths, lower=None, upper=None):
    """Map value v of column j through the sorted (key, value) segment j of the mapping."""
    n = host_lengths(lengths)
    starts = offsets_of(n)
    out = np.zeros(v.shape, np.float32)
    for j in range(v.shape[1]):   # NOTE: one searchsorted per feature column
        lo_, hi_ = starts[cols[j]], starts[cols[j]] + n[cols[j]]
        k, m = keys[lo_:hi_], vals[lo_:hi_]
        lw = m if lower is None else lower[lo_:hi_]
        up = m if upper is None else upper[lo_:hi_]
        x = v[:, j]
        at = np.searchsorted(k, x, side="left")
        exact = (at < k.size) & (k[np.minimum(at, k.size - 1)] == x)
        left = np.clip(at - 1, 0, max(k.size - 2, 0))
        right = np.minimum(left + 1, k.size - 1)
        span = np.where(k[right] == k[left], 1, k[right] - k[left])
        y = up[left] + (lw[right] - up[left]) / span * (x - k[left])
        y = np.where(exact, m[np.minimum(at, k.size - 1)], y)
        y = np.where(x < k[0], 0.0, np.where(x > k[-1], 1.0, y))
        out[:, j] = y
    return out


@kernel("Percentile")
def percentile(xp, original, value_to_pct, lengths):
    v = dev.to_host(original).astype(np.float32)
    if v.ndim == 1:
        v = v[:, None]
    table = dev.to_host(value_to_pct).astype(np.float32).reshape(-1, 2)
    n = host_lengths(lengths)
    if n.size != v.shape[1] or int(n.sum()) != table.shape[0]:
        raise ValueError("value_to_pct_map and lengths do not match the input's columns")
    out = _interp_segments(v, np.arange(v.shape[1]), table[:, 0], table[:, 1], lengths)
    return xp.asarray(out.reshape(original.shape))


@kernel("BisectPercentile")
def bisect_percentile(xp, raw, *, percentile_raw=(), percentile_mapping=(), percentile_lower=(),
                      percentile_upper=(), lengths=()):
    v = dev.to_host(raw).astype(np.float32)
    if v.ndim != 2 or len(lengths) != v.shape[1]:
        raise ValueError(f"raw_values of shape {v.shape} for {len(lengths)} lengths")
    f = [np.asarray(a, np.float32) for a in (percentile_raw, percentile_mapping, percentile_lower, percentile_upper)]
    if any(a.size != sum(lengths) for a in f):
        raise ValueError("percentile_raw/mapping/lower/upper must each hold sum(lengths) values")
    out = _interp_segments(v, np.arange(v.shape[1]), f[0], f[1], np.asarray(lengths), f[2], f[3])
    return xp.asarray(out)


@kernel("Quantile")
def quantile(xp, *xs, quantile: float = -1.0, abs: int = 1, tol: float = 1e-3):  # noqa: A002
    # NOTE: Caffe2's bisection between the min and max of the values; the result is the first
    # midpoint with exactly ceil(n * quantile) values <= it, else the upper end once the bracket
    # is within tol relative width.
    if not 0 <= quantile <= 1 or tol <= 0:
        raise ValueError("Quantile needs 0 <= quantile <= 1 and tol > 0")
    v = _all_values(xs, bool(abs))
    if v.size == 0:
        raise ValueError("Quantile of no values")
    t = v.dtype.type
    target = int(np.ceil(v.size * np.float32(quantile)))
    lo, hi = t(v.min()), t(v.max())
    if target == 0:
        return xp.asarray(np.array([lo], t))
    if target == v.size:
        return xp.asarray(np.array([hi], t))
    s = np.sort(v)

    def count(th):
        return int(np.searchsorted(s, th, side="right"))
    if count(lo) >= target:
        return xp.asarray(np.array([lo], t))
    while np.abs(hi - lo) > t(tol) * (np.abs(hi) + np.abs(lo)):
        mid = t(lo + (hi - lo) / t(2))
        c = count(mid)
        if c > target:
            if hi == mid:
                raise ValueError("numeric precision at limit, unable to continue bisect")
            hi = mid
        elif c < target:
            if lo == mid:
                raise ValueError("numeric precision at limit, unable to continue bisect")
            lo = mid
        else:
            return xp.asarray(np.array([mid], t))
    return xp.asarray(np.array([hi], t))



def _piecewise_params(args, ins, d):
    """(bounds, slopes, intercepts) per column from the arguments or the inputs 1..3."""
    if ins:
        b, s, c = (dev.to_host(x).astype(np.float32).reshape(-1) for x in ins)
    else:
        b, s, c = (np.asarray(a, np.float32) for a in args)
    groups = s.size and max(1, d)
    if s.size % groups or b.size != s.size + groups or c.size != s.size:
        raise ValueError("bounds must have one more value per group than slopes and intercepts")
    return b.reshape(groups, -1), s.reshape(groups, -1), c.reshape(groups, -1)


def _piecewise(x, b, s, c):
    n = s.size
    xc = np.clip(x, b[0], b[-1])
    k = np.clip(np.searchsorted(b, xc, side="left") - 1, 0, n - 1)
    return (s[k] * xc + c[k]).astype(np.float32)


@kernel("PiecewiseLinearTransform")
def piecewise_linear_transform(xp, x, *params, bounds=(), slopes=(), intercepts=(), binary: int = 0):
    # NOTE: column j uses the j-th group of pieces; binary predictions (N, 2) use one group on the
    # positive column and give 1 - y for the negative one; (N,) or (N, 1) is the positive column alone.
    h = dev.to_host(x).astype(np.float32)
    if binary:
        b, s, c = _piecewise_params((bounds, slopes, intercepts), params, 1)
        if h.ndim == 2 and h.shape[1] not in (1, 2):
            raise ValueError(f"binary PiecewiseLinearTransform needs (N, 2) or (N, 1) predictions, got {h.shape}")
        two = h.ndim == 2 and h.shape[1] == 2
        y = _piecewise(h[:, 1] if two else h.reshape(-1), b[0], s[0], c[0])
        return xp.asarray(np.stack([1 - y, y], axis=1) if two else y.reshape(h.shape))
    cols = h.reshape(h.shape[0], int(np.prod(h.shape[1:]))) if h.ndim > 1 else h.reshape(-1, 1)
    b, s, c = _piecewise_params((bounds, slopes, intercepts), params, cols.shape[1])
    out = np.stack([_piecewise(cols[:, j], b[j], s[j], c[j]) for j in range(cols.shape[1])], axis=1)
    return xp.asarray(out.reshape(h.shape))


@kernel("BatchBoxCox")
def batch_box_cox(xp, data, lambda1, lambda2):
    # NOTE: y = ((x + l2)^l1 - 1) / l1, or log(x + l2) where l1 == 0; x + l2 is kept >= 1e-6.
    if data.ndim != 2 or lambda1.size != data.shape[1] or lambda2.size != data.shape[1]:
        raise ValueError("BatchBoxCox needs data (N, D) and lambdas of D values")
    l1, l2 = lambda1.reshape(1, -1), lambda2.reshape(1, -1)
    base = xp.maximum(data + l2, data.dtype.type(1e-6))
    zero = l1 == 0
    safe = xp.where(zero, xp.ones_like(l1), l1)
    return xp.where(zero, xp.log(base), (xp.power(base, safe) - 1) / safe).astype(data.dtype)


@kernel("StumpFunc")
def stump_func(xp, x, *, threshold: float = 0.0, low_value: float = 0.0, high_value: float = 0.0):
    return xp.where(x <= threshold, x.dtype.type(low_value), x.dtype.type(high_value))


@kernel("StumpFuncIndex")
def stump_func_index(xp, x, *, threshold: float = 0.0):
    h = dev.to_host(x).reshape(-1)
    return xp.asarray(np.flatnonzero(h <= threshold).astype(np.int64)), \
        xp.asarray(np.flatnonzero(h > threshold).astype(np.int64))


# ---- gradients ----

should_not_do_gradient("AccumulateHistogram", "Histogram", "SelfBinningHistogram", "Quantile",
                       "PiecewiseLinearTransform")
no_gradient("Percentile", "BisectPercentile", "StumpFunc", "StumpFuncIndex")


# ---- shapes ----

shape("Percentile", "BatchBoxCox", "StumpFunc", "PiecewiseLinearTransform", "BisectPercentile")(same_as(0))


@shape("Histogram")
def histogram_shape(*xs, bin_edges=()):
    return TensorInfo((max(len(bin_edges) - 1, 0),), INT64)


@shape("AccumulateHistogram")
def accumulate_histogram_shape(x, *, num_buckets: int = 1):
    return TensorInfo((num_buckets + 2,), INT64), TensorInfo((num_buckets + 2,), INT64)


shape("Quantile")(lambda *xs: TensorInfo((1,), xs[0].dtype))
shape("StumpFuncIndex")(lambda x: (TensorInfo((None,), INT64), TensorInfo((None,), INT64)))



@shape("SelfBinningHistogram")
def self_binning_histogram_shape(*xs, num_bins: int = 0):
    return TensorInfo((num_bins + 1,), xs[0].dtype), TensorInfo((num_bins + 1,), INT64)
