"""Quantised embedding storage and fp16: fused row-wise 8/4/2-bit conversion (and its HalfScaleBias,
Half* and Fake forms), the row-wise 8-bit pair, the SparseLengths* reducers over those tables,
GatherFused8BitRowwise, random row-wise quantisation, QuantDecode, ByteWeightDequant and fp16 casts/fills.

Layouts (one row per table row, little-endian):

* fused 8-bit: ``uint8[D]`` then scale and bias as float32 (8 bytes), or as float16 (4 bytes) for
  the ``HalfScaleBias`` forms;
* fused n-bit (4, 2): ``8/n`` values per byte, low bits first, then fp16 scale and fp16 bias;
* fake n-bit: one value per byte (``uint8[D]``) then float32 scale and bias.

Numerics follow Caffe2's CPU kernels in float32: min/max per row, ``lrintf`` (round half to even,
NumPy's ``rint``) for the fused forms, round half away from zero for ``FloatToRowwiseQuantized8Bits``.
"""
from __future__ import annotations

import numpy as np

from engine.runtime import device as dev
from engine.runtime.grad_makers import cc_maker, no_gradient, simple
from engine.runtime.ops.lengths import host_lengths
from engine.catalogue.registry import gradient, kernel, shape
from engine.runtime.shapes import FLOAT, UINT8, TensorInfo, dims
from proto import caffe2_pb2

F32, F16 = np.float32, np.float16
FLOAT16 = caffe2_pb2.TensorProto.FLOAT16

# ---- kernels ----


def _rows(x):
    """The input as float32 host rows over its last axis."""
    h = dev.to_host(x)
    if h.ndim < 1:
        raise ValueError("input must have at least one dimension")
    return h.reshape(int(np.prod(h.shape[:-1])), h.shape[-1]).astype(F32)  # NOTE: no -1: a row may be empty


def _bytes_of(v, dtype):
    """A per-row scalar column as its little-endian bytes."""
    return np.ascontiguousarray(v.astype(dtype).reshape(-1, 1)).view(np.uint8)


def _empty_rows(x, half: bool):
    """Fused rows of a 0-wide input: Caffe2's min/max start at FLT_MAX / lowest and nothing moves them,
    so the scale is (lowest - FLT_MAX) / 255 = -inf and the bias FLT_MAX (+inf as fp16)."""
    n = int(np.prod(x.shape[:-1]))
    scale, bias = np.full(n, -np.inf, F32), np.full(n, np.finfo(F32).max, F32)
    tail = ([_bytes_of(scale, F16), _bytes_of(np.full(n, np.inf, F32), F16)] if half
            else [_bytes_of(scale, F32), _bytes_of(bias, F32)])
    return np.concatenate(tail, axis=1).reshape(tuple(x.shape[:-1]) + (8 // (1 + half),))


def _fused8(x, half_scale_bias):
    if x.shape[-1] == 0:
        return _empty_rows(x, half_scale_bias)
    rows = _rows(x)
    lo, hi = rows.min(axis=1, initial=np.inf), rows.max(axis=1, initial=-np.inf)
    rng = (hi - lo).astype(F32)
    scale, bias = (rng / F32(255)).astype(F32), lo
    if half_scale_bias:
        # NOTE: the n-bit recipe with 8 bits: fp16 min and scale, the data quantised with those.
        scale, bias, inv = _nbit_params(rows, 8)
        q = np.rint((rows - bias[:, None]) * inv[:, None])
        tail = np.concatenate([_bytes_of(scale, F16), _bytes_of(bias, F16)], axis=1)
    else:
        inv = (F32(255) / (rng + F32(1e-8))).astype(F32)
        q = np.rint((rows - lo[:, None]) * inv[:, None])
        tail = np.concatenate([_bytes_of(scale, F32), _bytes_of(bias, F32)], axis=1)
    q = np.clip(q, 0, 255).astype(np.uint8)
    out = np.concatenate([q, tail], axis=1)
    return out.reshape(tuple(x.shape[:-1]) + (out.shape[1],))


def _greedy_loss(rows, lo, hi, bits):
    """L2 error of quantising each row with range [lo, hi] (fp16 min and scale, as Caffe2 rounds)."""
    lo = lo.astype(F16).astype(F32)
    rng = (hi - lo).astype(F32)
    top = F32((1 << bits) - 1)
    scale = np.where(rng == 0, F32(1), (rng / top).astype(F16).astype(F32)).astype(F32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.clip(np.rint((rows - lo[:, None]) * (F32(1) / scale)[:, None]), 0, top)
    err = rows - (q * scale[:, None] + lo[:, None]).astype(F32)
    return np.sqrt((err * err).sum(axis=1, dtype=F32))


def _greedy_range(rows, lo, hi, bits, n_bins=200, ratio=0.16):
    """Caffe2's ``param_search_greedy`` for every row at once: shrink [lo, hi] one bin at a time
    from the side whose move loses less, keeping the best local optimum seen."""
    step = ((hi - lo) / F32(n_bins)).astype(F32)
    thr = (F32(int(n_bins * (1 - ratio))) * step).astype(F32)
    cur_lo, cur_hi = lo.copy(), hi.copy()
    best_lo, best_hi = lo.copy(), hi.copy()
    cur = best = _greedy_loss(rows, lo, hi, bits)
    active = cur_lo + thr < cur_hi
    while active.any():   # NOTE: at most n_bins * ratio steps; every row moves in the same step
        left = _greedy_loss(rows, (cur_lo + step).astype(F32), cur_hi, bits)
        right = _greedy_loss(rows, cur_lo, (cur_hi - step).astype(F32), bits)
        better = active & (cur < left) & (cur < right) & (cur < best)
        best = np.where(better, cur, best)
        best_lo, best_hi = np.where(better, cur_lo, best_lo), np.where(better, cur_hi, best_hi)
        go_left = left < right
        cur_lo = np.where(active & go_left, (cur_lo + step).astype(F32), cur_lo)
        cur_hi = np.where(active & ~go_left, (cur_hi - step).astype(F32), cur_hi)
        cur = np.where(active, np.where(go_left, left, right), cur)
        active = cur_lo + thr < cur_hi
    return best_lo.astype(F32), best_hi.astype(F32)


def _nbit_params(rows, bits, greedy=False):
    """fp16-rounded (scale, bias) per row and the float32 inverse scale, as Caffe2's SBHalf kernels
    (``greedy``: the row range found by the GREEDY engine's search instead of min and max)."""
    lo = rows.min(axis=1) if rows.shape[1] else np.zeros(rows.shape[0], F32)
    hi = rows.max(axis=1) if rows.shape[1] else np.zeros(rows.shape[0], F32)
    if greedy:
        lo, hi = _greedy_range(rows, lo, hi, bits)
    lo = lo.astype(F16).astype(F32)
    rng = (hi - lo).astype(F32)
    scale = np.where(rng == 0, F32(1), (rng / F32((1 << bits) - 1)).astype(F16).astype(F32)).astype(F32)
    with np.errstate(divide="ignore"):
        inv = (F32(1) / scale).astype(F32)
    bad = (scale == 0) | np.isinf(inv)
    scale, inv = np.where(bad, F32(1), scale), np.where(bad, F32(1), inv)
    return scale, lo, inv


def _quantise(rows, lo, inv, bits):
    q = np.rint((rows - lo[:, None]) * inv[:, None])
    return np.clip(q, 0, (1 << bits) - 1).astype(np.uint8)


def _fused_nbit(x, bits, greedy=False):
    per = 8 // bits
    if x.shape[-1] % per:
        raise ValueError(f"the number of columns must be a multiple of {per}")
    if x.shape[-1] == 0 and not greedy:
        return _empty_rows(x, half=True)
    rows = _rows(x)
    scale, lo, inv = _nbit_params(rows, bits, greedy)
    q = _quantise(rows, lo, inv, bits).reshape(rows.shape[0], rows.shape[1] // per, per).astype(np.uint16)
    packed = (q << (np.arange(per) * bits)).sum(axis=2).astype(np.uint8)
    out = np.concatenate([packed, _bytes_of(scale, F16), _bytes_of(lo, F16)], axis=1)
    return out.reshape(tuple(x.shape[:-1]) + (out.shape[1],))


def _fake_nbit(x, bits, greedy=False):
    if x.ndim != 2:
        raise ValueError("Expect input to be a matrix")
    rows = _rows(x)
    scale, lo, inv = _nbit_params(rows, bits, greedy)
    inv = np.where(np.isinf(inv), inv, (F32(1) / scale).astype(F32))
    q = _quantise(rows, lo, inv, bits)
    return np.concatenate([q, _bytes_of(scale, F32), _bytes_of(lo, F32)], axis=1)


def _unfuse(data, bits, half_scale_bias):
    """(values as float32 rows of the last axis, scale, bias) of a fused table."""
    h = dev.to_host(data)
    if h.dtype != np.uint8:
        raise TypeError(f"fused data must be uint8, got {h.dtype}")
    rows = h.reshape(int(np.prod(h.shape[:-1])), h.shape[-1])
    sb = 4 if (bits < 8 or half_scale_bias) else 8
    sbt = F16 if sb == 4 else F32
    if rows.shape[1] < sb:
        raise ValueError(f"rows of {rows.shape[1]} bytes cannot hold the {sb}-byte scale and bias")
    body, tail = rows[:, :-sb], np.ascontiguousarray(rows[:, -sb:])
    scale, bias = tail[:, :sb // 2].copy().view(sbt)[:, 0], tail[:, sb // 2:].copy().view(sbt)[:, 0]
    if bits < 8:
        per = 8 // bits
        width = body.shape[1] * per
        body = ((body[:, :, None] >> (np.arange(per) * bits).astype(np.uint8)) & ((1 << bits) - 1))
        body = body.reshape(rows.shape[0], width)
    return body.astype(F32), scale.astype(F32), bias.astype(F32), tuple(h.shape[:-1])


def _dequant(data, bits, half_scale_bias=False):
    body, scale, bias, lead = _unfuse(data, bits, half_scale_bias)
    return (body * scale[:, None] + bias[:, None]).astype(F32).reshape(lead + (body.shape[1],))


def _table(data, bits):
    """A fused table dequantised to float32 rows (rows, values per row), empty tables too."""
    body, scale, bias, _ = _unfuse(data, bits, False)
    return (body * scale[:, None] + bias[:, None]).astype(F32)


def _reg_fused8():
    for t, half_in, hsb in (("FloatToFused8BitRowwiseQuantized", False, False),
                            ("FloatToFused8BitRowwiseQuantizedHalfScaleBias", False, True),
                            ("HalfFloatToFused8BitRowwiseQuantized", True, False),
                            ("HalfFloatToFused8BitRowwiseQuantizedHalfScaleBias", True, True)):
        def fn(xp, x, _half=half_in, _hsb=hsb):
            want = F16 if _half else F32
            if x.dtype != want:
                raise TypeError(f"input must be {np.dtype(want).name}, got {x.dtype}")
            return xp.asarray(_fused8(x, _hsb))
        kernel(t)(fn)
    for t, hsb, out in (("Fused8BitRowwiseQuantizedToFloat", False, F32),
                        ("Fused8BitRowwiseQuantizedHalfScaleBiasToFloat", True, F32),
                        ("Fused8BitRowwiseQuantizedToHalfFloat", False, F16),
                        ("Fused8BitRowwiseQuantizedHalfScaleBiasToHalfFloat", True, F32)):
        # NOTE: Caffe2 registers the HalfScaleBias "ToHalfFloat" op with a float32 output.
        kernel(t)(lambda xp, x, _hsb=hsb, _out=out: xp.asarray(_dequant(x, 8, _hsb).astype(_out)))


def _nbit_kernel(bits, want, conv):
    def fn(xp, x, *, ctx=None):
        # NOTE: engine GREEDY searches each row's range first (Caffe2's _ENGINE_GREEDY ops).
        if x.dtype != want:
            raise TypeError(f"input must be {np.dtype(want).name}, got {x.dtype}")
        return xp.asarray(conv(x, bits, ctx.op.engine == "GREEDY"))
    return fn


def _reg_nbit():
    for bits in (4, 2):
        for src, want in (("Float", F32), ("Half", F16)):
            kernel(f"{src}ToFused{bits}BitRowwiseQuantized", needs_context=True)(_nbit_kernel(bits, want, _fused_nbit))
            kernel(f"{src}ToFused{bits}BitFakeRowwiseQuantized", needs_context=True)(
                _nbit_kernel(bits, want, _fake_nbit))
        kernel(f"Fused{bits}BitRowwiseQuantizedToFloat")(
            lambda xp, x, _bits=bits: xp.asarray(_dequant(x, _bits)))
        kernel(f"Fused{bits}BitRowwiseQuantizedToHalf")(
            lambda xp, x, _bits=bits: xp.asarray(_dequant(x, _bits).astype(F16)))


_reg_fused8()
_reg_nbit()


@kernel("FloatToRowwiseQuantized8Bits")
def float_to_rowwise_quantized_8bits(xp, x):
    rows = dev.to_host(x).astype(F32).reshape(x.shape[0], int(np.prod(x.shape[1:])))  # NOTE: no -1: N may be 0
    lo = rows.min(axis=1) if rows.shape[1] else np.zeros(rows.shape[0], F32)
    hi = rows.max(axis=1) if rows.shape[1] else np.zeros(rows.shape[0], F32)
    flat = (hi - lo) < F32(1e-10)
    scale = np.where(flat, F32(1), ((hi - lo) / F32(255)).astype(F32)).astype(F32)
    v = ((rows - lo[:, None]) * (F32(1) / scale)[:, None]).astype(F32)
    r = np.floor(v)
    q = np.where(flat[:, None], 0, r + (v - r >= 0.5))  # NOTE: Eigen round(): half away from zero
    return xp.asarray(q.astype(np.uint8).reshape(x.shape)), xp.asarray(np.stack([scale, lo], axis=1))


@kernel("Rowwise8BitQuantizedToFloat")
def rowwise_8bit_quantized_to_float(xp, q, scale_bias):
    if scale_bias.ndim != 2 or scale_bias.shape[1] != 2 or scale_bias.shape[0] != q.shape[0]:
        raise ValueError(f"scale_bias of shape {tuple(scale_bias.shape)} for {q.shape[0]} rows (expected (N, 2))")
    col = (-1,) + (1,) * (q.ndim - 1)
    return q.astype(F32) * scale_bias[:, 0].reshape(col) + scale_bias[:, 1].reshape(col)


def _lookup(xp, table, indices, lengths, weights=None, mean=False, mapping=None):
    """Sum (weighted, mean) of the rows of a dequantised `table` picked by `indices` per segment.

    With `mapping` (the *RowwiseSparse forms) an index goes through it first; -1 rows add nothing.
    A mapping of the single value 0 means the table is not pruned.
    """
    if mapping is not None and mapping.size == 1 and int(dev.to_host(mapping).reshape(-1)[0]) == 0:
        mapping = None
    idx = dev.to_host(indices).astype(np.int64).reshape(-1)
    n = host_lengths(lengths)
    if int(n.sum()) != idx.size:
        raise ValueError(f"LENGTHS sum to {int(n.sum())} but there are {idx.size} indices")
    bound = table.shape[0] if mapping is None else dev.to_host(mapping).size
    if idx.size and (idx.min() < 0 or idx.max() >= bound):
        raise IndexError(f"index out of range [0, {bound}) in INDICES")
    seg = np.repeat(np.arange(n.size), n)
    w = np.ones(idx.size, F32) if weights is None else dev.to_host(weights).astype(F32).reshape(-1)
    if w.size != idx.size:
        raise ValueError(f"{w.size} weights for {idx.size} indices")
    if mapping is not None:
        idx = dev.to_host(mapping).astype(np.int64).reshape(-1)[idx]
        keep = idx >= 0
        idx, seg, w = idx[keep], seg[keep], w[keep]
    out = np.zeros((n.size, table.shape[1]), F32)
    np.add.at(out, seg, table[idx] * w[:, None])
    if mean:
        out /= np.maximum(n, 1).astype(F32)[:, None]
    return xp.asarray(out)


def _reg_lookups():
    for bits, name in ((8, "Fused8BitRowwise"), (4, "Fused4BitRowwise"), (2, "Fused2BitRowwise")):
        def plain(xp, data, indices, lengths, _b=bits):
            return _lookup(xp, _table(data, _b), indices, lengths)

        def mean(xp, data, indices, lengths, _b=bits):
            return _lookup(xp, _table(data, _b), indices, lengths, mean=True)

        def weighted(xp, data, weights, indices, lengths, _b=bits):
            return _lookup(xp, _table(data, _b), indices, lengths, weights)
        kernel(f"SparseLengthsSum{name}")(plain)
        kernel(f"SparseLengthsMean{name}")(mean)
        kernel(f"SparseLengthsWeightedSum{name}")(weighted)

        def s_plain(xp, data, indices, lengths, mapping, _b=bits):
            return _lookup(xp, _table(data, _b), indices, lengths, mapping=mapping)

        def s_mean(xp, data, indices, lengths, mapping, _b=bits):
            return _lookup(xp, _table(data, _b), indices, lengths, mean=True,
                           mapping=mapping)

        def s_weighted(xp, data, weights, indices, lengths, mapping, _b=bits):
            return _lookup(xp, _table(data, _b), indices, lengths, weights,
                           mapping=mapping)
        kernel(f"SparseLengthsSum{bits}BitRowwiseSparse")(s_plain)
        kernel(f"SparseLengthsMean{bits}BitRowwiseSparse")(s_mean)
        kernel(f"SparseLengthsWeightedSum{bits}BitRowwiseSparse")(s_weighted)


_reg_lookups()


def _rowwise8_table(data, scale_bias):
    q = dev.to_host(data)
    sb = dev.to_host(scale_bias)
    if sb.ndim != 2 or sb.shape != (q.shape[0], 2):
        raise ValueError(f"scale_bias of shape {sb.shape} for {q.shape[0]} rows (expected (N, 2))")
    rows = q.reshape(q.shape[0], -1).astype(F32)
    return rows * sb[:, :1].astype(F32) + sb[:, 1:].astype(F32)


@kernel("SparseLengthsSum8BitsRowwise")
def sparse_lengths_sum_8bits_rowwise(xp, data, indices, lengths, scale_bias):
    return _shaped(_lookup(xp, _rowwise8_table(data, scale_bias), indices, lengths), data)


@kernel("SparseLengthsMean8BitsRowwise")
def sparse_lengths_mean_8bits_rowwise(xp, data, indices, lengths, scale_bias):
    return _shaped(_lookup(xp, _rowwise8_table(data, scale_bias), indices, lengths, mean=True), data)


@kernel("SparseLengthsWeightedSum8BitsRowwise")
def sparse_lengths_weighted_sum_8bits_rowwise(xp, data, weights, indices, lengths, scale_bias):
    return _shaped(_lookup(xp, _rowwise8_table(data, scale_bias), indices, lengths, weights), data)


@kernel("SparseLengthsWeightedMean8BitsRowwise")
def sparse_lengths_weighted_mean_8bits_rowwise(xp, data, weights, indices, lengths, scale_bias):
    return _shaped(_lookup(xp, _rowwise8_table(data, scale_bias), indices, lengths, weights, mean=True), data)


def _shaped(out, data):
    return out.reshape((out.shape[0],) + tuple(data.shape[1:]))


@kernel("SparseLengthsSumSparseLookup")
def sparse_lengths_sum_sparse_lookup(xp, indices, lengths, mapping, weights=None):
    # NOTE: indices go through the compression mapping; pruned ones (-1) drop out of their segment.
    idx = dev.to_host(indices).astype(np.int64).reshape(-1)
    n = host_lengths(lengths)
    m = dev.to_host(mapping).astype(np.int64).reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= m.size):
        raise IndexError(f"index out of range [0, {m.size}) in INDICES")
    if int(n.sum()) > idx.size:
        raise ValueError(f"LENGTHS sum to {int(n.sum())} but there are {idx.size} indices")
    new = m[idx]
    keep = new >= 0
    seg = np.repeat(np.arange(n.size), n)
    outs = [xp.asarray(new[keep].astype(indices.dtype)),
            xp.asarray(np.bincount(seg[keep], minlength=n.size).astype(lengths.dtype))]
    if weights is not None:
        outs.append(xp.asarray(dev.to_host(weights).reshape(-1)[keep]))
    return tuple(outs)


@kernel("GatherFused8BitRowwise")
def gather_fused_8bit_rowwise(xp, data, indices):
    # NOTE: the gathered rows come out dequantised (float32), not as fused bytes.
    idx = dev.to_host(indices).reshape(-1).astype(np.int64)
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= data.shape[0]):
        raise IndexError(f"index out of range [0, {data.shape[0]}) in INDICES")
    return xp.asarray(_dequant(dev.to_host(data)[idx], 8))


def _rand_layout(cols, bits):
    """(values per byte, bytes of data, unused buckets) of the random-quantised row format."""
    if bits not in (1, 2, 4, 8):
        raise ValueError(f"bitwidth must be 1, 2, 4 or 8, got {bits}")
    per = 8 // bits
    seg = (cols + per - 1) // per
    return per, seg, (per - cols % per) % per


@kernel("FloatToFusedRandRowwiseQuantized", needs_context=True)
def float_to_fused_rand_rowwise_quantized(xp, x, *, bitwidth: int = 8, random: int = 1, ctx=None):
    # NOTE: row = [bitwidth, tail, min (f32), max (f32), data]; element j sits in byte j % S at bit
    # (j // S) * bitwidth, S = ceil(cols / (8 / bitwidth)). Levels min + k * gap; `random` rounds
    # up with probability equal to the fraction past the lower level (unbiased), else to nearest.
    if x.ndim != 2:
        raise ValueError("Expect input to be a matrix")
    rows = dev.to_host(x).astype(F32)
    per, seg, tail = _rand_layout(rows.shape[1], bitwidth)
    lo = rows.min(axis=1) if rows.shape[1] else np.full(rows.shape[0], np.inf, F32)
    hi = rows.max(axis=1) if rows.shape[1] else np.full(rows.shape[0], -np.inf, F32)
    top = (1 << bitwidth) - 1
    gap = ((hi - lo) / F32(top)).astype(F32)
    inv = (1.0 / (gap.astype(np.float64) + 1e-8)).astype(F32)
    t = ((rows - lo[:, None]) * inv[:, None]).astype(F32)
    if random:
        q = np.floor(t + ctx.rng.random(t.shape, dtype=np.float32))
    else:
        q = np.rint(np.clip(t, 0, top))
    q = np.clip(q, 0, top).astype(np.uint16)
    data = np.zeros((rows.shape[0], seg), np.uint16)
    j = np.arange(rows.shape[1])
    if rows.shape[1]:
        np.add.at(data.T, j % seg, (q << ((j // seg) * bitwidth).astype(np.uint16)).T)  # disjoint bits: + is |
    head = np.zeros((rows.shape[0], 2), np.uint8)
    head[:, 0], head[:, 1] = bitwidth, tail
    out = np.concatenate([head, _bytes_of(lo, F32), _bytes_of(hi, F32), data.astype(np.uint8)], axis=1)
    return xp.asarray(out)


@kernel("FusedRandRowwiseQuantizedToFloat")
def fused_rand_rowwise_quantized_to_float(xp, q):
    h = dev.to_host(q)
    if h.ndim != 2 or h.size < 4:
        raise ValueError("Expect input to be a matrix of at least 4 bytes")
    bits, tail = int(h[0, 0]), int(h[0, 1])
    per, _, _ = _rand_layout(0, bits)
    seg = h.shape[1] - 10
    cols = seg * per - tail
    mm = np.ascontiguousarray(h[:, 2:10]).view(F32)
    lo, hi = mm[:, 0], mm[:, 1]
    gap = ((hi - lo) / F32((1 << bits) - 1)).astype(np.float64) + 1e-8
    j = np.arange(cols)
    vals = (h[:, 10 + j % seg] >> ((j // seg) * bits).astype(np.uint8)) & ((1 << bits) - 1)
    return xp.asarray((vals * gap.astype(F32)[:, None] + lo[:, None]).astype(F32))


@kernel("QuantDecode")
def quant_decode(xp, codebook, *codes):
    cb = codebook.reshape(-1)
    return tuple(xp.take(cb, c.astype(np.int64)) for c in codes)


@kernel("QuantDecodeGradient")
def quant_decode_gradient(xp, codebook, *codes_and_grads):
    half = len(codes_and_grads) // 2
    out = xp.zeros(codebook.size, dtype=codebook.dtype)
    for c, g in zip(codes_and_grads[:half], codes_and_grads[half:]):
        xp.add.at(out, c.reshape(-1).astype(np.int64), g.reshape(-1).astype(codebook.dtype))
    return out.reshape(codebook.shape)


@kernel("ByteWeightDequant")
def byte_weight_dequant(xp, w, *, min: float = 0.0, max: float = 1.0, shape=()):  # noqa: A002 - Caffe2's names
    if w.dtype != np.uint8:
        raise TypeError(f"ByteWeightDequant needs uint8 input, got {w.dtype}")
    if int(np.prod(shape)) != w.size:
        raise ValueError(f"shape {list(shape)} does not hold {w.size} values")
    return (F32(min) + w.astype(F32) * F32((max - min) / 255.0)).reshape(tuple(shape))


@kernel("FloatToHalf")
def float_to_half(xp, x, *, clip: int = 0):
    if x.dtype != F32:
        raise TypeError(f"FloatToHalf needs float32 input, got {x.dtype}")
    if clip:
        x = xp.clip(x, -65504.0, 65504.0)
    # NOTE: without clip a value beyond float16's range becomes +-inf, as in Caffe2: no warning.
    with np.errstate(over="ignore"):
        return x.astype(F16)


@kernel("HalfToFloat")
def half_to_float(xp, x):
    if x.dtype != F16:
        raise TypeError(f"HalfToFloat needs float16 input, got {x.dtype}")
    return x.astype(F32)


@kernel("Float16ConstantFill")
def float16_constant_fill(xp, *, value: float = 0.0, shape=()):
    return xp.full(tuple(shape), value, dtype=F16)


@kernel("Float16UniformFill", needs_context=True)
def float16_uniform_fill(xp, *, shape=(), min: float = 0.0, max: float = 1.0, ctx=None):  # noqa: A002
    if min > max:
        raise ValueError(f"min {min} greater than max {max}")
    return xp.asarray(ctx.rng.uniform(min, max, size=tuple(shape)).astype(F32).astype(F16))


# ---- gradients ----

gradient("FloatToHalf")(simple("HalfToFloat", "GO0", "GI0"))
gradient("HalfToFloat")(simple("FloatToHalf", "GO0", "GI0"))


@gradient("QuantDecode")
@cc_maker
def quant_decode_maker(g):
    """One QuantDecodeGradient over the codebook, every code blob and every output's gradient."""
    n = len(g.op.output)
    return [g.op_("QuantDecodeGradient", [g.I(k) for k in range(n + 1)] + [g.GO(k) for k in range(n)],
                  [g.GI(0)])]


no_gradient("FloatToFused8BitRowwiseQuantized", "FloatToFused8BitRowwiseQuantizedHalfScaleBias",
            "HalfFloatToFused8BitRowwiseQuantized", "HalfFloatToFused8BitRowwiseQuantizedHalfScaleBias",
            "Fused8BitRowwiseQuantizedToFloat", "Fused8BitRowwiseQuantizedToHalfFloat",
            "Fused8BitRowwiseQuantizedHalfScaleBiasToFloat", "Fused8BitRowwiseQuantizedHalfScaleBiasToHalfFloat",
            "FloatToRowwiseQuantized8Bits", "Rowwise8BitQuantizedToFloat",
            "Float16ConstantFill", "Float16UniformFill", "SparseLengthsSumSparseLookup",
            "FloatToFusedRandRowwiseQuantized", "FusedRandRowwiseQuantizedToFloat",
            "SparseLengthsSum8BitsRowwise", "SparseLengthsMean8BitsRowwise",
            "SparseLengthsWeightedSum8BitsRowwise", "SparseLengthsWeightedMean8BitsRowwise",
            *(f"{s}ToFused{b}Bit{f}RowwiseQuantized" for s in ("Float", "Half") for b in (4, 2) for f in ("", "Fake")),
            *(f"Fused{b}BitRowwiseQuantizedTo{t}" for b in (4, 2) for t in ("Float", "Half")),
            *(f"SparseLengths{r}{b}BitRowwiseSparse" for r in ("Sum", "Mean", "WeightedSum") for b in (8, 4, 2)),
            *(f"SparseLengths{r}Fused{b}BitRowwise" for r in ("Sum", "Mean", "WeightedSum") for b in (8, 4, 2)))


# ---- shapes ----

@shape("FloatToFused8BitRowwiseQuantized", "HalfFloatToFused8BitRowwiseQuantized")
def fused8_shape(x):
    d = dims(x)
    return TensorInfo((*d[:-1], None if d[-1] is None else d[-1] + 8), UINT8)


@shape("Fused8BitRowwiseQuantizedToFloat")
def unfused8_shape(x):
    d = dims(x)
    return TensorInfo((*d[:-1], None if d[-1] is None else d[-1] - 8), FLOAT)


shape("FloatToRowwiseQuantized8Bits")(lambda x: (TensorInfo(dims(x), UINT8), TensorInfo((dims(x)[0], 2), FLOAT)))
shape("Rowwise8BitQuantizedToFloat")(lambda q, sb: TensorInfo(dims(q), FLOAT))
shape("FloatToHalf")(lambda x: TensorInfo(dims(x), FLOAT16))
shape("HalfToFloat")(lambda x: TensorInfo(dims(x), FLOAT))
shape("Float16ConstantFill", "Float16UniformFill")(lambda *, shape=(): TensorInfo(tuple(shape), FLOAT16))



def _last(x, fn, dtype):
    """Rule that maps only the last dim (unknown stays unknown)."""
    d = dims(x)
    return TensorInfo((*d[:-1], None if d[-1] is None else fn(d[-1])), dtype)


for _b in (4, 2):
    shape(*(f"{s}ToFused{_b}BitRowwiseQuantized" for s in ("Float", "Half")))(
        lambda x, _p=8 // _b: _last(x, lambda c: (c + _p - 1) // _p + 4, UINT8))
    shape(*(f"{s}ToFused{_b}BitFakeRowwiseQuantized" for s in ("Float", "Half")))(
        lambda x: _last(x, lambda c: c + 8, UINT8))
    shape(f"Fused{_b}BitRowwiseQuantizedToFloat")(lambda x, _p=8 // _b: _last(x, lambda c: (c - 4) * _p, FLOAT))
    shape(f"Fused{_b}BitRowwiseQuantizedToHalf")(lambda x, _p=8 // _b: _last(x, lambda c: (c - 4) * _p, FLOAT16))
shape("FloatToFused8BitRowwiseQuantizedHalfScaleBias", "HalfFloatToFused8BitRowwiseQuantizedHalfScaleBias")(
    lambda x: _last(x, lambda c: c + 4, UINT8))
shape("Fused8BitRowwiseQuantizedHalfScaleBiasToFloat", "Fused8BitRowwiseQuantizedHalfScaleBiasToHalfFloat")(
    lambda x: _last(x, lambda c: c - 4, FLOAT))
shape("Fused8BitRowwiseQuantizedToHalfFloat")(lambda x: _last(x, lambda c: c - 8, FLOAT16))
shape("GatherFused8BitRowwise")(
    lambda data, idx: TensorInfo((*dims(idx), *_last(data, lambda c: c - 8, FLOAT).shape[1:]), FLOAT))
shape("QuantDecode")(lambda cb, *codes: tuple(TensorInfo(dims(c), cb.dtype) for c in codes))
shape("QuantDecodeGradient")(lambda cb, *rest: cb)
shape("ByteWeightDequant")(lambda w, *, shape=(): TensorInfo(tuple(shape), FLOAT))


for _b, _w in ((8, lambda c: None if c is None else c - 8), (4, lambda c: None if c is None else (c - 4) * 2),
               (2, lambda c: None if c is None else (c - 4) * 4)):
    shape(*(f"SparseLengths{r}Fused{_b}BitRowwise" for r in ("Sum", "Mean")))(
        lambda data, idx, lengths, _w=_w: TensorInfo((dims(lengths)[0], _w(dims(data)[-1])), FLOAT))
    shape(f"SparseLengthsWeightedSumFused{_b}BitRowwise")(
        lambda data, w, idx, lengths, _w=_w: TensorInfo((dims(lengths)[0], _w(dims(data)[-1])), FLOAT))
    shape(*(f"SparseLengths{r}{_b}BitRowwiseSparse" for r in ("Sum", "Mean")))(
        lambda data, idx, lengths, m, _w=_w: TensorInfo((dims(lengths)[0], _w(dims(data)[-1])), FLOAT))
    shape(f"SparseLengthsWeightedSum{_b}BitRowwiseSparse")(
        lambda data, w, idx, lengths, m, _w=_w: TensorInfo((dims(lengths)[0], _w(dims(data)[-1])), FLOAT))
shape("SparseLengthsSum8BitsRowwise", "SparseLengthsMean8BitsRowwise")(
    lambda data, idx, lengths, sb: TensorInfo((dims(lengths)[0], *dims(data)[1:]), FLOAT))
shape("SparseLengthsWeightedSum8BitsRowwise", "SparseLengthsWeightedMean8BitsRowwise")(
    lambda data, w, idx, lengths, sb: TensorInfo((dims(lengths)[0], *dims(data)[1:]), FLOAT))
shape("SparseLengthsSumSparseLookup")(
    lambda idx, lengths, m, w=None: (TensorInfo((None,), idx.dtype), lengths,
                                     *([TensorInfo((None,), w.dtype)] if w else [])))


@shape("FloatToFusedRandRowwiseQuantized")
def fused_rand_shape(x, *, bitwidth: int = 8):
    p = 8 // bitwidth if bitwidth in (1, 2, 4, 8) else 1
    return _last(x, lambda c: 10 + (c + p - 1) // p, UINT8)


shape("FusedRandRowwiseQuantizedToFloat")(lambda q: TensorInfo((dims(q)[0], None), FLOAT))


# ---- onnx ----
from engine.catalogue.registry import onnx_converter  # noqa: E402
from engine.runtime.ops.sparse import _onnx_segment_sum  # noqa: E402

#: fused-table lookups -> (bits, Sum | Mean | WeightedSum); the pruned (*RowwiseSparse) forms map indices first
_FUSED = {f"SparseLengths{kind}Fused{bits}BitRowwise": (bits, kind) for bits in (8, 4, 2)
          for kind in ("Sum", "Mean", "WeightedSum")}
_PRUNED = {f"SparseLengths{kind}{bits}BitRowwiseSparse": (bits, kind) for bits in (8, 4, 2)
           for kind in ("Sum", "Mean", "WeightedSum")}
#: lookups over a uint8 table and its (N, 2) scale_bias input -> (weighted, mean)
_ROWWISE8 = {"SparseLengthsSum8BitsRowwise": (False, False), "SparseLengthsMean8BitsRowwise": (False, True),
             "SparseLengthsWeightedSum8BitsRowwise": (True, False),
             "SparseLengthsWeightedMean8BitsRowwise": (True, True)}


def _onnx_lookup(c, q, scale, bias, indices, lengths, weights=None, mean=False, mapping=None):
    """Gather the indexed rows of the uint8 values and of the per-row (K, 1) scale and bias, dequantise
    them (q * scale + bias in float32, the kernel's table), weight them, and sum (mean) each segment.
    `mapping` (a pruned table): an index reads row mapping[index]; a -1 row adds nothing (a mean still
    counts it, as the kernel divides by the segment's length)."""
    keep = None
    if mapping is not None:
        mapped = c.emit("Cast", [c.emit("Gather", [mapping, indices], axis=0)], to=7)
        keep = c.emit("Unsqueeze", [c.emit("GreaterOrEqual", [mapped, c.ints([0])]), c.ints([1])])
        indices = c.emit("Max", [mapped, c.ints([0])])
    rows = c.emit("Cast", [c.emit("Gather", [q, indices], axis=0)], to=1)
    rows = c.emit("Add", [c.emit("Mul", [rows, c.emit("Gather", [scale, indices], axis=0)]),
                          c.emit("Gather", [bias, indices], axis=0)])
    if weights is not None:
        rows = c.emit("Mul", [rows, c.emit("Reshape", [c.emit("Cast", [weights], to=1), c.ints([-1, 1])])])
    if keep is not None:
        rows = c.emit("Where", [keep, rows, c.const(np.zeros((1, 1), F32), "zero")])
    return _onnx_segment_sum(c, rows, lengths, mean)


@onnx_converter(*_FUSED, *_PRUNED)
def sparse_lengths_fused_onnx(c):
    """Gather, dequantise, segment-reduce.  The fused table is split at export into its values (uint8;
    4- and 2-bit ones unpacked, low bits first) and its per-row scale and bias as float32 initializers:
    ONNX cannot reinterpret a row's trailing bytes as floats, so the table must be fixed in the model
    (an init-net fill or a weight).  The pruned forms' COMPRESSED_INDICES_MAPPING (a single 0: not
    pruned) maps each index first."""
    bits, kind = _FUSED.get(c.op.type) or _PRUNED[c.op.type]
    table = c.const_value(0)
    if table is None:
        raise c.refuse(f"the fused table '{c.op.input[0]}' is computed in the net (only a fixed table exports)")
    body, scale, bias, _ = _unfuse(table, bits, False)
    w = kind == "WeightedSum"
    mapping = c.x(3 + w) if c.op.type in _PRUNED else None
    if mapping is not None:  # NOTE: fixed, as the table: a single 0 given at run time would mean "not pruned"
        fixed = c.const_value(3 + w)
        if fixed is None:
            raise c.refuse(f"the index mapping '{c.op.input[3 + w]}' is computed in the net (only a fixed one exports)")
        mapping = None if fixed.size == 1 and int(fixed.reshape(-1)[0]) == 0 else mapping
    out = _onnx_lookup(c, c.const(body.astype(np.uint8), "q"), c.const(scale[:, None], "scale"),
                       c.const(bias[:, None], "bias"), c.x(1 + w), c.x(2 + w), c.x(1) if w else None, kind == "Mean",
                       mapping)
    c.emit("Identity", [out], [c.y(0)])


@onnx_converter(*_ROWWISE8)
def sparse_lengths_8bits_rowwise_onnx(c):
    """The same lookup over DATA (uint8, rows flattened to 2-D) and its SCALE_BIAS input (N, 2); the
    result shaped as DATA's rows."""
    w, mean = _ROWWISE8[c.op.type]
    sb = c.emit("Cast", [c.x(3 + w)], to=1)
    scale, bias = (c.emit("Slice", [sb, c.ints([k]), c.ints([k + 1]), c.ints([1])]) for k in (0, 1))
    out = _onnx_lookup(c, c.emit("Flatten", [c.x(0)], axis=1), scale, bias, c.x(1 + w), c.x(2 + w),
                       c.x(1) if w else None, mean)
    tail = c.emit("Slice", [c.shape_of(c.x(0)), c.ints([1]), c.ints([np.iinfo(np.int64).max])])
    c.emit("Reshape", [out, c.emit("Concat", [c.ints([-1]), tail], axis=0)], [c.y(0)])


@onnx_converter("SparseLengthsSumSparseLookup")
def sparse_lengths_sum_sparse_lookup_onnx(c):
    """Each index through COMPRESSED_INDICES_MAPPING; the pruned ones (-1) dropped (Compress), with their
    weights, and each segment's length recounted (a segment sum of the kept flags)."""
    idx = c.emit("Cast", [c.emit("Reshape", [c.x(0), c.ints([-1])])], to=7)
    mapping = c.emit("Cast", [c.emit("Reshape", [c.x(2), c.ints([-1])])], to=7)
    new = c.emit("Gather", [mapping, idx], axis=0)
    keep = c.emit("GreaterOrEqual", [new, c.ints([0])])
    c.emit("Cast", [c.emit("Compress", [new, keep], axis=0)], [c.y(0)], to=c.dtype(c.np_dtype(0)))
    flags = c.emit("Reshape", [c.emit("Cast", [keep], to=1), c.ints([-1, 1])])
    counts = c.emit("Reshape", [_onnx_segment_sum(c, flags, c.x(1)), c.ints([-1])])
    c.emit("Cast", [counts], [c.y(1)], to=c.dtype(c.np_dtype(1)))
    if c.n_out > 2:
        c.emit("Compress", [c.emit("Reshape", [c.x(3), c.ints([-1])]), keep], [c.y(2)], axis=0)
