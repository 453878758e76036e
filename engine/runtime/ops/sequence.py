"""Sequences and padding: AddPadding/RemovePadding/GatherPadding, PadEmptySamples, Pack/UnpackSegments,
Pack/UnpackRNNSequence, ReversePackedSegs, VariableLengthSequencePadding, BooleanMask(Lengths),
BooleanUnmask and SequenceMask, with their gradients.

Variable-length batches are rows of segments (LENGTHS) or time-major padded blocks ``(T, B, ...)``;
every kernel turns the lengths into flat row positions on the host once and moves the data with a
single ``xp`` gather or scatter.
"""
from __future__ import annotations

import numpy as np

from engine.runtime import device as dev
from engine.runtime.grad_makers import cc_maker, no_gradient, simple
from engine.runtime.ops.lengths import host_lengths, offsets_of, segment_rows
from engine.catalogue.registry import gradient, kernel, shape
from engine.runtime.shapes import BOOL, INT32, INT64, TensorInfo, dims, same_as

# ---- kernels ----


def _padding_lengths(data, lengths):
    """LENGTHS, or one segment over every row when absent."""
    n = np.array([data.shape[0]], np.int64) if lengths is None else host_lengths(lengths)
    if int(n.sum()) != data.shape[0]:
        raise ValueError(f"LENGTHS sum to {int(n.sum())} but the data has {data.shape[0]} rows")
    return n


def _pad_block(xp, pad, width, tail, dtype):
    """`width` rows of the padding (zeros when no padding blob is given)."""
    if pad is None:
        return xp.zeros((width,) + tail, dtype=dtype)
    if tuple(pad.shape) != tail:
        raise ValueError(f"padding of shape {tuple(pad.shape)} for rows of shape {tail}")
    return xp.broadcast_to(pad.astype(dtype), (width,) + tail)


@kernel("AddPadding")
def add_padding(xp, data, lengths=None, start=None, end=None, *, padding_width: int = 1,
                end_padding_width: int = -1):
    pw = padding_width
    ew = pw if end_padding_width < 0 else end_padding_width
    n = _padding_lengths(data, lengths)
    end = start if end is None else end
    tail = tuple(data.shape[1:])
    new = n + pw + ew
    out = xp.empty((int(new.sum()),) + tail, dtype=data.dtype)
    seg, pos = segment_rows(n)
    starts = offsets_of(new)
    out[xp.asarray(starts[seg] + pw + pos)] = data
    head_rows = (starts[:, None] + np.arange(pw)[None, :]).reshape(-1)
    tail_rows = (starts[:, None] + pw + n[:, None] + np.arange(ew)[None, :]).reshape(-1)
    out[xp.asarray(head_rows)] = xp.tile(_pad_block(xp, start, pw, tail, data.dtype), (n.size,) + (1,) * len(tail))
    out[xp.asarray(tail_rows)] = xp.tile(_pad_block(xp, end, ew, tail, data.dtype), (n.size,) + (1,) * len(tail))
    out_lengths = new.astype(np.int32) if lengths is None else new.astype(lengths.dtype)
    return out, xp.asarray(out_lengths)


def _strip(n, pw, ew):
    """Rows kept by RemovePadding and the padding rows of each segment (host positions)."""
    if (n < pw + ew).any():
        raise ValueError(f"segment of length {int(n.min())} shorter than its padding {pw} + {ew}")
    seg, pos = segment_rows(n)
    keep = (pos >= pw) & (pos < n[seg] - ew)
    return seg, pos, keep


@kernel("RemovePadding")
def remove_padding(xp, data, lengths=None, *, padding_width: int = 1, end_padding_width: int = -1):
    pw = padding_width
    ew = pw if end_padding_width < 0 else end_padding_width
    n = _padding_lengths(data, lengths)
    _, _, keep = _strip(n, pw, ew)
    out_lengths = (n - pw - ew).astype(np.int32 if lengths is None else lengths.dtype)
    return xp.take(data, xp.asarray(np.flatnonzero(keep)), axis=0), xp.asarray(out_lengths)


@kernel("GatherPadding", needs_context=True)
def gather_padding(xp, data, lengths, *, padding_width: int = 1, end_padding_width: int = -1, ctx=None):
    # NOTE: sums of the padding rows over all segments, by position: start padding and end padding;
    # with a single output the end padding is added into the start padding's sum.
    pw = padding_width
    ew = pw if end_padding_width < 0 else end_padding_width
    n = _padding_lengths(data, lengths)
    seg, pos = segment_rows(n)  # NOTE: start and end padding may overlap in short segments
    tail = tuple(data.shape[1:])
    head = xp.zeros((pw,) + tail, dtype=data.dtype)
    foot = xp.zeros((ew,) + tail, dtype=data.dtype)
    hi = np.flatnonzero(pos < pw)
    xp.add.at(head, xp.asarray(pos[hi]), data[xp.asarray(hi)])
    ei = np.flatnonzero(pos >= n[seg] - ew)
    xp.add.at(foot, xp.asarray(pos[ei] - (n[seg][ei] - ew)), data[xp.asarray(ei)])
    head, foot = head.sum(axis=0), foot.sum(axis=0)
    if len(ctx.op.output) == 1:
        return head + foot
    return head, foot


@kernel("PadEmptySamples")
def pad_empty_samples(xp, lengths, *features):
    # NOTE: every empty segment gets one row of zeros in every feature.
    n = host_lengths(lengths)
    new = np.maximum(n, 1)
    seg, pos = segment_rows(n)
    outs = [xp.asarray(new.astype(lengths.dtype))]
    dest = offsets_of(new)[seg] + pos
    for f in features:
        if f.shape[0] != n.sum():
            raise ValueError(f"feature of {f.shape[0]} rows for lengths summing to {int(n.sum())}")
        out = xp.zeros((int(new.sum()),) + tuple(f.shape[1:]), dtype=f.dtype)
        out[xp.asarray(dest)] = f
        outs.append(out)
    return tuple(outs)


def _pack_positions(n, max_length):
    """(rows kept, their segment, their position) for packing into ``max_length`` slots."""
    seg, pos = segment_rows(n)
    keep = pos < max_length
    return np.flatnonzero(keep), seg[keep], pos[keep]


@kernel("PackSegments")
def pack_segments(xp, lengths, data, *, max_length: int = -1, pad_minf: int = 0, return_presence_mask: int = 0):
    n = host_lengths(lengths)
    if int(n.sum()) != data.shape[0]:
        raise ValueError(f"LENGTHS sum to {int(n.sum())} but the data has {data.shape[0]} rows")
    width = int(n.max()) if n.size else 0
    if max_length != -1:
        width = max_length  # NOTE: longer segments are cut to max_length
    rows, seg, pos = _pack_positions(n, width)
    fill = -np.inf if pad_minf else 0
    out = xp.full((n.size, width) + tuple(data.shape[1:]), fill, dtype=data.dtype)
    out[xp.asarray(seg), xp.asarray(pos)] = xp.take(data, xp.asarray(rows), axis=0)
    mask = np.zeros((n.size, width), bool)
    mask[seg, pos] = True
    return out, xp.asarray(mask)


@kernel("UnpackSegments")
def unpack_segments(xp, lengths, packed, *, max_length: int = -1):
    n = host_lengths(lengths)
    if max_length != -1:
        n = np.minimum(n, max_length)
    if n.size != packed.shape[0] or (n.size and n.max() > packed.shape[1]):
        raise ValueError(f"LENGTHS {n.tolist()} do not fit a packed tensor of shape {tuple(packed.shape)}")
    seg, pos = segment_rows(n)
    return packed[xp.asarray(seg), xp.asarray(pos)]


@kernel("PackRNNSequence")
def pack_rnn_sequence(xp, values, lengths):
    # NOTE: time-major: output[t, b] is step t of sequence b; steps past its length are 0.
    if values.ndim < 2:
        raise ValueError("PackRNNSequence needs values of rank >= 2")
    n = host_lengths(lengths)
    if int(n.sum()) != values.shape[0]:
        raise ValueError(f"LENGTHS sum to {int(n.sum())} but values have {values.shape[0]} rows")
    seg, pos = segment_rows(n)
    out = xp.zeros((int(n.max()) if n.size else 0, n.size) + tuple(values.shape[1:]), dtype=values.dtype)
    out[xp.asarray(pos), xp.asarray(seg)] = values
    return out


@kernel("UnpackRNNSequence")
def unpack_rnn_sequence(xp, values, lengths):
    n = host_lengths(lengths)
    if n.size and (values.ndim < 2 or n.size != values.shape[1] or n.max() > values.shape[0]):
        raise ValueError(f"LENGTHS {n.tolist()} do not fit a packed tensor of shape {tuple(values.shape)}")
    seg, pos = segment_rows(n)
    return values[xp.asarray(pos), xp.asarray(seg)]


@kernel("ReversePackedSegs")
def reverse_packed_segs(xp, data, lengths):
    # NOTE: data is time-major (T, B, ...); the first lengths[b] steps of column b are reversed,
    # steps past the length are copied as they are.
    n = host_lengths(lengths)
    if data.ndim < 3 or n.size != data.shape[1]:
        raise ValueError(f"{n.size} lengths for data of shape {tuple(data.shape)} (expected (T, B, ...))")
    if n.size and n.max() > data.shape[0]:
        raise ValueError(f"length {int(n.max())} longer than the {data.shape[0]} steps of the data")
    t = np.arange(data.shape[0])[:, None]
    src = np.where(t < n[None, :], n[None, :] - 1 - t, t)
    return data[xp.asarray(src), xp.asarray(np.arange(n.size))[None, :]]


@kernel("VariableLengthSequencePadding")
def variable_length_sequence_padding(xp, data, lengths):
    # NOTE: (T, B, ...): steps at or past lengths[b] become 0.
    n = host_lengths(lengths)
    keep = np.arange(data.shape[0])[:, None] < n[None, :]
    return data * xp.asarray(keep.reshape(keep.shape + (1,) * (data.ndim - 2))).astype(data.dtype)


def _mask(mask, rows):
    m = dev.to_host(mask).reshape(-1)
    if m.dtype != bool:
        raise TypeError(f"mask must be bool, got {m.dtype}")
    if m.size != rows:
        raise ValueError(f"mask of {m.size} entries for {rows} rows")
    return m


@kernel("BooleanMask")
def boolean_mask(xp, data, mask):
    m = _mask(mask, data.shape[0])
    idx = np.flatnonzero(m)
    return xp.take(data, xp.asarray(idx), axis=0), xp.asarray(idx.astype(np.int64))


@kernel("BooleanMaskGradient")
def boolean_mask_gradient(xp, mask, dy):
    # NOTE: dX has DATA's rows: the masked rows get dY, the others 0. Caffe2 shapes dX like the
    # mask and fills it from the flat dY, wrong for rows of more than one element (docs/fidelity.md).
    m = _mask(mask, dev.to_host(mask).size)
    dx = xp.zeros((m.size,) + tuple(dy.shape[1:]), dtype=dy.dtype)
    dx[xp.asarray(np.flatnonzero(m))] = dy
    return dx


@kernel("BooleanMaskLengths")
def boolean_mask_lengths(xp, lengths, mask):
    n = host_lengths(lengths)
    m = _mask(mask, int(n.sum()))
    return xp.asarray(np.bincount(np.repeat(np.arange(n.size), n)[m], minlength=n.size).astype(lengths.dtype))


@kernel("BooleanUnmask")
def boolean_unmask(xp, *pairs):
    # NOTE: (mask_i, data_i) pairs, mask first; row j of the output is data_i's next row where mask_i[j].
    masks, datas = pairs[0::2], pairs[1::2]
    for m in masks:
        if m.dtype != bool or m.ndim != 1:
            raise TypeError(f"masks must be 1-D bool, got {m.dtype} of rank {m.ndim}")
    for d in datas:
        if d.ndim != 1:
            raise ValueError(f"values must be 1-D, got rank {d.ndim}")
    masks = [dev.to_host(m) for m in masks]
    size = masks[0].size
    out = xp.zeros((size,) + tuple(datas[0].shape[1:]), dtype=datas[0].dtype)
    hit = np.zeros(size, int)
    for d, m in zip(datas, masks):
        if m.size != size:
            raise ValueError("all masks must have the same size")
        if int(m.sum()) != d.shape[0]:
            raise ValueError(f"mask with {int(m.sum())} set entries for data of {d.shape[0]} rows")
        out[xp.asarray(np.flatnonzero(m))] = d.reshape((d.shape[0],) + tuple(out.shape[1:]))
        hit += m
    if (hit != 1).any():
        raise ValueError("every position must be set by exactly one mask")
    return out


def _canonical_axis(value: int, ndim: int, name: str) -> int:
    """`value` counted from the end when negative, as Caffe2's canonical_axis_index does."""
    if not -ndim <= value < ndim:
        raise ValueError(f"SequenceMask {name}={value} is out of range for {ndim} dims")
    return value % ndim


@kernel("SequenceMask")
def sequence_mask(xp, x, seq=None, *, mode: str | None = None, axis: int = 1, grad: int = 0,
                  radius: int = 10, batch: int | None = None, repeat_from_axis: int | None = None,
                  fill_val: float = -np.inf):
    # NOTE: X is viewed as [before, between, after] (batch dims | axis): masked entries get
    # fill_val (0 in the gradient). sequence: j >= len[i]; window: |j - center[i]| > radius;
    # upper/lower(diag): j > i, j < i (j >= i, j <= i) on the [left, right] view at `axis`.
    if mode is None:
        raise ValueError("SequenceMask needs the argument 'mode'")
    axis = axis % x.ndim
    # NOTE: `batch` and `repeat_from_axis` count from the end when negative (Caffe2
    # canonicalises any given value); only an absent argument means "no batch" / "no repeat".
    batch = -1 if batch is None else _canonical_axis(batch, x.ndim, "batch")
    if repeat_from_axis is not None:
        repeat_from_axis = _canonical_axis(repeat_from_axis, x.ndim, "repeat_from_axis")
    else:
        repeat_from_axis = -1
    if batch >= 0 and batch >= axis:
        raise ValueError(f"SequenceMask batch axis {batch} must come before axis {axis}")
    fill = 0 if grad else fill_val
    shape = tuple(x.shape)
    if mode in ("sequence", "window"):
        if seq is None:
            raise ValueError(f"SequenceMask mode '{mode}' needs a second input")
        s = dev.to_host(seq).astype(np.int64).reshape(-1)
        before = int(np.prod(shape[:batch + 1])) if batch >= 0 else 1
        between = int(np.prod(shape[batch + 1 if batch >= 0 else 0:axis]))
        after = int(np.prod(shape[axis:]))
        if repeat_from_axis >= 0:
            after = int(np.prod(shape[axis:repeat_from_axis]))
        if s.size != between:
            raise ValueError(f"{s.size} lengths for {between} sequences")
        j = np.arange(after)[None, :]
        c = s[:, None]
        masked = j >= c if mode == "sequence" else (j > c + radius) | (j < c - radius)
        rep = int(np.prod(shape[repeat_from_axis:])) if repeat_from_axis >= 0 else 1
        masked = np.repeat(masked, rep, axis=1)
        masked = np.broadcast_to(masked[None], (before,) + masked.shape).reshape(shape)
    else:
        # NOTE: with `batch`, each of the `before` batch entries gets the same triangle over [between, after]
        before = int(np.prod(shape[:batch + 1])) if batch >= 0 else 1
        left, right = int(np.prod(shape[batch + 1 if batch >= 0 else 0:axis])), int(np.prod(shape[axis:]))
        i, j = np.arange(left)[:, None], np.arange(right)[None, :]
        rules = {"upper": j > i, "lower": j < i, "upperdiag": j >= i, "lowerdiag": j <= i}
        if mode not in rules:
            raise ValueError(f"unknown SequenceMask mode '{mode}'")
        masked = np.broadcast_to(rules[mode][None], (before, left, right)).reshape(shape)
    return xp.where(xp.asarray(masked), xp.asarray(np.array(fill, dtype=x.dtype)), x)


# ---- gradients ----

@gradient("AddPadding")
@cc_maker
def add_padding_maker(g):
    """RemovePadding of dY; with padding blobs, GatherPadding sums their gradients."""
    ins = [g.GO(0)] + ([g.O(1)] if len(g.op.input) > 1 else [])
    ops = [g.op_("RemovePadding", ins, [g.GI(0)])]
    if len(g.op.input) > 2:
        outs = [g.GI(2)] + ([g.GI(3)] if len(g.op.input) > 3 else [])
        ops.append(g.op_("GatherPadding", ins, outs))
    return ops


@gradient("RemovePadding")
@cc_maker
def remove_padding_maker(g):
    ins = [g.GO(0)] + ([g.O(1)] if len(g.op.input) > 1 else [])
    return [g.op_("AddPadding", ins, [g.GI(0)])]


gradient("PackSegments")(simple("UnpackSegments", "I0 GO0", "GI1"))
gradient("UnpackSegments")(simple("PackSegments", "I0 GO0", "GI1"))
gradient("PackRNNSequence")(simple("UnpackRNNSequence", "GO0 I1", "GI0"))
gradient("UnpackRNNSequence")(simple("PackRNNSequence", "GO0 I1", "GI0"))
gradient("ReversePackedSegs")(simple("ReversePackedSegs", "GO0 I1", "GI0"))
gradient("BooleanMask")(simple("BooleanMaskGradient", "I1 GO0", "GI0"))


@gradient("SequenceMask")
@cc_maker(copy_args=False)
def sequence_mask_maker(g):
    """SequenceMask of dY with ``grad=1`` (masked entries get 0), the second input reused.

    Caffe2 lists the forward op's arguments first and ``grad`` after them.
    """
    ins = [g.GO(0)] + ([g.I(1)] if len(g.op.input) > 1 else [])
    op = g.op_("SequenceMask", ins, [g.GI(0)])
    op.arg.extend(g.op.arg)
    op.arg.extend(g.op_("", [], [], grad=True).arg)
    return [op]


no_gradient("BooleanMaskLengths", "BooleanUnmask")


# ---- shapes ----

shape("SequenceMask", "ReversePackedSegs", "VariableLengthSequencePadding")(same_as(0))
shape("BooleanMaskGradient")(lambda mask, dy: TensorInfo((*dims(mask)[:1], *dims(dy)[1:]), dy.dtype))
shape("BooleanMask")(lambda data, mask: (TensorInfo((None, *dims(data)[1:]), data.dtype), TensorInfo((None,), INT64)))
shape("BooleanMaskLengths")(same_as(0))


@shape("PackSegments")
def pack_segments_shape(lengths, data, *, max_length: int = -1):
    width = None if max_length == -1 else max_length
    n = dims(lengths)[0]
    return TensorInfo((n, width, *dims(data)[1:]), data.dtype), TensorInfo((n, width), BOOL)


shape("UnpackSegments")(lambda lengths, packed: TensorInfo((None, *dims(packed)[2:]), packed.dtype))


def _padded(data, lengths=None, *pads):
    """AddPadding/RemovePadding: rows change with the lengths, the row shape and lengths' do not."""
    return (TensorInfo((None, *dims(data)[1:]), data.dtype),
            lengths if lengths is not None else TensorInfo((1,), INT32))


shape("AddPadding", "RemovePadding")(_padded)


@shape("GatherPadding")
def gather_padding_shape(data, lengths):
    row = TensorInfo(tuple(dims(data)[1:]), data.dtype)
    return row, row


shape("PadEmptySamples")(lambda lengths, *fs: (lengths, *(TensorInfo((None, *dims(f)[1:]), f.dtype) for f in fs)))
shape("PackRNNSequence")(lambda v, lengths: TensorInfo((None, *dims(lengths)[:1], *dims(v)[1:]), v.dtype))
shape("UnpackRNNSequence")(lambda v, lengths: TensorInfo((None, *dims(v)[2:]), v.dtype))
shape("BooleanUnmask")(lambda *pairs: TensorInfo((dims(pairs[0])[0], *dims(pairs[1])[1:]), pairs[1].dtype))


# ---- onnx ----
from engine.catalogue.registry import onnx_converter  # noqa: E402


@onnx_converter("SequenceMask")
def sequence_mask_onnx(c):
    """Mode "sequence": on X viewed as (dims before `axis`, the rest), entries at or past each row's
    length become fill_val (0 for the gradient form).  Other modes, `batch` and `repeat_from_axis`
    are refused."""
    if c.arg("mode") != "sequence" or c.has("batch") or c.has("repeat_from_axis"):
        raise c.refuse(f"mode {c.arg('mode')!r} with these arguments")
    shape, axis = c.shape(0), c.arg("axis", 1) % c.rank(0)
    between, after = int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))
    x2 = c.emit("Reshape", [c.x(0), c.ints([between, after])])
    cols = c.const(np.arange(after, dtype=np.int64).reshape(1, -1), "cols")
    lengths = c.emit("Reshape", [c.emit("Cast", [c.x(1)], to=7), c.ints([-1, 1])])
    fill = c.const(np.array(0 if c.arg("grad", 0) else c.arg("fill_val", -np.inf), c.np_dtype(0)), "fill")
    y2 = c.emit("Where", [c.emit("GreaterOrEqual", [cols, lengths]), fill, x2])
    c.emit("Reshape", [y2, c.ints(list(shape))], [c.y(0)])


@onnx_converter("ReversePackedSegs")
def reverse_packed_segs_onnx(c):
    """ONNX ReverseSequence over the time axis 0, batch axis 1: each column's first lengths[b] steps
    reversed, the rest kept, as Caffe2 (both ask for lengths no longer than the steps)."""
    n = c.emit("Cast", [c.emit("Reshape", [c.x(1), c.ints([-1])])], to=7)
    c.emit("ReverseSequence", [c.x(0), n], [c.y(0)], time_axis=0, batch_axis=1)
