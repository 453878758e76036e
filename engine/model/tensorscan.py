"""The values of an init net's fill ops, found in the protobuf wire format and viewed in the file.

A trained init net is mostly ``GivenTensor*Fill`` values: millions of floats that protobuf would
turn into a repeated field and NumPy then into an array, one Python float at a time (issue #41).
:func:`load_binary_net` memory-maps the file, walks the wire format down to each fill op's
``values`` argument, cuts those fields out and lets protobuf parse only the rest (so a net over
protobuf's 2 GiB limit opens too).  Each cut argument gets a small *reference* instead: an unknown
field (number :data:`REFERENCE_FIELD`) naming the file, its size and mtime and the byte ranges of
the values.  It travels with the op through copies and serialisation, and
:func:`referenced_values` turns it into a read-only NumPy array viewing the mapped file (floats,
packed or not, and byte strings) or decoded from its varints (ints) without Python numbers;
:func:`serialize_net` writes the referenced bytes back verbatim.

Encodings (proto2 writes repeated scalars unpacked: Caffe2's own files have a 0x2D tag before
every float, which is a view with a 5-byte stride):

=========  ======================================  ==========================================
kind       wire form                               value
=========  ======================================  ==========================================
``f32``    ``floats`` packed (wire type 2)         ``<f4`` view
``f32u``   ``floats`` unpacked (tag + 4 bytes)     ``<f4`` view, stride 5
``var``    ``ints`` packed varints                 int64, decoded vectorised
``varu``   ``ints`` unpacked (tag + varint)        int64, decoded vectorised
``bytes``  ``s`` or a single ``strings`` entry     uint8 view
=========  ======================================  ==========================================
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from engine.errors import ModelError

# NOTE: NumPy is imported by the functions that need it: a quick open (the TUI's) needs none, and the
# TUI's first frame imports no NumPy
if TYPE_CHECKING:
    import numpy as np

REFERENCE_FIELD = 536_870_001
"""Field number of the reference an Argument carries instead of its values (no Caffe2 field uses it)."""
_REF_TAG = bytes([(REFERENCE_FIELD << 3 | 2) >> (7 * k) & 0x7F | (0x80 if k < 4 else 0) for k in range(5)])

#: op type -> (Argument field of its values, element kind): which values are cut out and how they read
VALUE_FIELDS: dict[str, tuple[str, str]] = {
    **{t: ("floats", "float32") for t in ("GivenTensorFill", "GivenTensorDoubleFill")},
    **{t: ("ints", "int64") for t in ("GivenTensorIntFill", "GivenTensorInt64Fill", "GivenTensorInt16Fill",
                                      "GivenTensorBoolFill", "Int8GivenIntTensorFill")},
    "Int8GivenTensorFill": ("s", "uint8"), "GivenTensorByteStringToUInt8Fill": ("strings", "uint8")}
_FIELD_NO = {"floats": 5, "ints": 6, "s": 4, "strings": 7}
MIN_CUT_BYTES = 256
"""Values smaller than this stay in the proto (a reference costs ~150 bytes and a file mapping)."""
_ARG, _OP = 5, 2  # OperatorDef.arg, NetDef.op


class _Corrupt(Exception):
    """Where the wire format stops making sense (turned into a ModelError naming op and blob)."""


def _varint(buf, pos: int, end: int) -> tuple[int, int]:
    """(value, next position) of the varint at `pos`; :class:`_Corrupt` past `end` or over 10 bytes."""
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise _Corrupt("truncated varint" if pos >= end else "varint longer than 10 bytes")
        b = buf[pos]
        value |= (b & 0x7F) << shift
        pos += 1
        if b < 0x80:
            return value, pos
        shift += 7


def fields(buf, start: int, end: int):
    """Yield ``(field number, wire type, field start, data start, data end)`` of a message's bytes."""
    pos = start
    while pos < end:
        key = buf[pos]  # NOTE: one-byte keys and lengths read inline: the TUI's first frame walks ~2k fields
        key, data = (key, pos + 1) if key < 0x80 else _varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if wire == 0:
            stop = _varint(buf, data, end)[1]
        elif wire == 1 or wire == 5:
            stop = data + (8 if wire == 1 else 4)
        elif wire == 2:
            n = buf[data] if data < end else 0x80
            n, data = (n, data + 1) if n < 0x80 else _varint(buf, data, end)
            stop = data + n
        else:
            raise _Corrupt(f"wire type {wire} (groups are not used by caffe2.proto)")
        if stop > end:
            raise _Corrupt(f"field {field} needs {stop - data} bytes, {end - data} left: truncated")
        yield field, wire, pos, data, stop
        pos = stop


def _run_end(buf, pos: int, end: int, tag: int, stride: int, quick: bool = False) -> int:
    """End of the run of fixed-size fields `tag` starting at `pos` (unpacked floats), vectorised.

    `quick` checks, of a run that fills the rest of the message (what every protobuf writer makes of
    a values argument), only the tags within :data:`EDGE_BYTES` of its two ends: the pages beside the
    op headers the scan reads anyway.  So a quick open reads the same few pages whatever the values'
    size, and from a cold page cache too (64 tags spread over each run read ~100 ms of a cold 128 MB
    ResNet-50 init): a field inside the floats shifts every tag after it, which the last ones show.
    :func:`engine.model.valueref.bind_values` checks every tag later (the TUI's worker)."""
    k = (end - pos) // stride
    if quick and k * stride == end - pos:
        edge = min(k, EDGE_BYTES // stride) * stride  # NOTE: C-speed strided slices, no NumPy
        head, tail = buf[pos:pos + edge:stride], buf[end - edge:end:stride]
        if head.count(tag) == len(head) and tail.count(tag) == len(tail):
            return end
    import numpy as np  # noqa: PLC0415

    tags = np.frombuffer(buf, np.uint8, count=k * stride, offset=pos)[::stride]
    for first in range(0, k, _CHUNK):  # NOTE: in chunks: small temporaries stay in the cache
        part = tags[first:first + _CHUNK]
        if not (part == tag).all():
            return pos + stride * (first + int(np.argmax(part != tag)))
    return pos + stride * k


_CHUNK = 1 << 16
EDGE_BYTES = 4096
"""A quick open checks the unpacked floats' tags this near to each end of their run (:func:`_run_end`)."""
_SMALL_RUN = 1 << 12


def decode_varints(raw: np.ndarray, interleaved: bool = False) -> np.ndarray:
    """The int64 values of a stream of varints (every second one when `interleaved`: unpacked ints,
    whose tags are varints too), vectorised; :class:`_Corrupt` on a cut-off or over-long varint."""
    import numpy as np  # noqa: PLC0415

    ends = np.flatnonzero(raw < 0x80)
    if raw.size and (not ends.size or ends[-1] != raw.size - 1):
        raise _Corrupt("truncated varint")
    starts = np.r_[0, ends[:-1] + 1] if ends.size else ends
    lengths = ends - starts + 1
    if lengths.size and lengths.max() > 10:
        raise _Corrupt("varint longer than 10 bytes")
    values = (raw[starts] & 0x7F).astype(np.uint64)
    for k in range(1, int(lengths.max()) if lengths.size else 0):  # NOTE: a pass per byte place, not per byte
        on = np.flatnonzero(lengths > k)
        values[on] |= (raw[starts[on] + k] & 0x7F).astype(np.uint64) << np.uint64(7 * k)
    return (values[1::2] if interleaved else values).view(np.int64)


class Piece(NamedTuple):
    """Where one run of values lies: the whole fields ``[start, end)``, their `kind` (module table).

    A NamedTuple, not a dataclass: the module is imported on the TUI's first frame, and a frozen
    slotted dataclass costs ~0.5 ms to make at import."""

    kind: str
    start: int
    end: int


def _arg_pieces(buf, start: int, end: int, field_name: str, quick: bool = False) -> tuple[str, list[Piece]]:
    """The arg's name and the pieces of its `field_name` values (vectorised over unpacked runs)."""
    name, pieces, strings, number = "", [], 0, _FIELD_NO[field_name]
    pos = start
    while pos < end:
        field, wire, fstart, data, stop = next(fields(buf, pos, end))
        if field == 5 == number and wire == 5:
            stop = _run_end(buf, fstart, end, 0x2D, 5, quick)
            pieces.append(Piece("f32u", fstart, stop))
        elif field == 6 == number and wire == 0:
            stop = _int_run_end(buf, fstart, end)
            pieces.append(Piece("varu", fstart, stop))
        elif field == number and wire == 2:
            if number == 5 and (stop - data) % 4:
                raise _Corrupt(f"{stop - data} bytes of packed floats is not a whole number of floats")
            strings += number in (4, 7)  # NOTE: several: protobuf's own rules (last `s` wins) apply
            pieces.append(Piece({5: "f32", 6: "var"}.get(number, "bytes"), fstart, stop))
        elif field == 1 and wire == 2:
            name = bytes(buf[data:stop]).decode("utf-8", "replace")
        pos = stop
    return name, ([] if strings > 1 else pieces)


def _int_run_end(buf, pos: int, end: int) -> int:
    """End of the run of unpacked ``ints`` fields (tag 0x30, varint) starting at `pos` (a field at a
    time for a small run, vectorised for a big one)."""
    if end - pos <= _SMALL_RUN:
        while pos < end and buf[pos] == 0x30:
            pos = _varint(buf, pos + 1, end)[1]
        return pos
    import numpy as np  # noqa: PLC0415

    raw = np.frombuffer(buf, np.uint8, count=end - pos, offset=pos)
    ends = np.flatnonzero(raw < 0x80)
    starts = np.r_[0, ends[:-1] + 1]
    tags_ok = (raw[starts[0::2]] == 0x30)[: ends[1::2].size]
    n = int(np.argmin(tags_ok)) if tags_ok.size and not tags_ok.all() else tags_ok.size
    if n == 0:
        raise _Corrupt("truncated varint")
    return pos + int(ends[2 * n - 1]) + 1


class _Cut(NamedTuple):
    """One op's values to cut: op index, arg index, the arg's field range and its pieces."""

    op: int
    arg: int
    field: str
    arg_range: tuple[int, int, int]  # field start, data start, end
    pieces: tuple[Piece, ...]


def _op_info(buf, start: int, end: int) -> tuple[str, str, list[tuple[int, int, int]]]:
    """(type, first output, arg field ranges) of an OperatorDef's bytes (best effort when cut off)."""
    op_type, out, args = "", "", []
    try:
        for field, wire, fstart, data, stop in fields(buf, start, end):
            if wire == 2 and field in (2, 4):
                text = bytes(buf[data:stop]).decode("utf-8", "replace")
                op_type = text if field == 4 else op_type
                out = out or (text if field == 2 else "")
            elif field == _ARG and wire == 2:
                args.append((fstart, data, stop))
    except _Corrupt:
        if not args and not op_type:
            raise
    return op_type, out, args


def _shown(text: str | bytes, most: int = 60) -> str:
    """`text` on one line: control characters escaped, cut to `most` characters (a corrupt name can
    be anything)."""
    text = text.decode("utf-8", "replace") if isinstance(text, bytes) else text  # NOTE: protobuf's non-UTF-8
    text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text[: most + 1])
    return text if len(text) <= most else text[:most] + "…"


def _where(path: str, i: int, op_type: str, out: str) -> str:
    return f"{path}: op #{i} {_shown(op_type) or '?'} '{_shown(out)}'"


def find_cuts(buf, path: str = "<bytes>", min_bytes: int = MIN_CUT_BYTES, quick: bool = False
              ) -> tuple[list[tuple[int, int, int]], list[_Cut]]:
    """The NetDef's top-level field ranges and the fill values to cut out of them (`quick`: see
    :func:`_run_end`).

    Raises
    ------
    ModelError
        Truncated or corrupt bytes, naming the op and its output blob where known.
    """
    top, cuts, n_op = [], [], 0
    try:
        for field, wire, fstart, data, stop in fields(buf, 0, len(buf)):
            top.append((fstart, data, stop))
            if field != _OP or wire != 2:
                continue
            op_type, out, args = _op_info(buf, data, stop)
            if op_type in VALUE_FIELDS:
                cuts += _cuts_of(buf, n_op, op_type, out, args, path, min_bytes, quick)
            n_op += 1
    except _Corrupt as e:
        op_type, out = _cut_off_op(buf, top[-1][2] if top else 0)
        where = _where(path, n_op, op_type, out) if op_type or out else f"{path}: op #{n_op}"
        raise ModelError(f"{where}: not a valid binary NetDef: {e}") from None
    return top, cuts


def _cut_off_op(buf, at: int) -> tuple[str, str]:
    """Type and output of the op whose field starts at `at` and runs past the end, read as far as it goes."""
    try:
        key, data = _varint(buf, at, len(buf))
        if key != (_OP << 3 | 2):
            return "", ""
        _, data = _varint(buf, data, len(buf))
        return _op_info(buf, data, len(buf))[:2]
    except _Corrupt:
        return "", ""


def _cuts_of(buf, i: int, op_type: str, out: str, args, path: str, min_bytes: int, quick: bool) -> list[_Cut]:
    field = VALUE_FIELDS[op_type][0]
    cuts = []
    for k, (fstart, data, stop) in enumerate(args):
        if _named_other(buf, data, stop):
            continue
        try:
            name, pieces = _arg_pieces(buf, data, stop, field, quick)
        except _Corrupt as e:
            raise ModelError(f"{_where(path, i, op_type, out)}: argument values: {e}") from None
        if name == "values" and pieces and sum(p.end - p.start for p in pieces) >= min_bytes:
            cuts.append(_Cut(i, k, field, (fstart, data, stop), tuple(pieces)))
    return cuts


_NAME_KEY, _VALUES = 0x0A, b"values"


def _named_other(buf, data: int, stop: int) -> bool:
    """Whether an Argument's bytes start with a `name` other than "values" (what every writer puts
    first): such an argument (`shape`, `dtype`) is not walked field by field; one named later or
    named twice is walked (an argument not cut is parsed by protobuf: right, only slower)."""
    if data + 1 >= stop or buf[data] != _NAME_KEY or buf[data + 1] >= 0x80:
        return False
    n = buf[data + 1]
    return data + 2 + n <= stop and buf[data + 2:data + 2 + n] != _VALUES


def encode_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append(n & 0x7F | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _without(buf, start: int, end: int, holes) -> bytes:
    """Bytes ``[start, end)`` of `buf` with the ``(start, end, replacement)`` holes replaced (sorted)."""
    parts, pos = [], start
    for s, e, new in holes:
        parts += [buf[pos:s], new]
        pos = e
    parts.append(buf[pos:end])
    return b"".join(bytes(p) for p in parts)


def stripped_bytes(buf, top, cuts: list[_Cut]) -> bytes:
    """The NetDef's bytes without the cut values (each op and arg re-framed with its new length)."""
    by_op: dict[int, list[_Cut]] = {}
    for c in cuts:
        by_op.setdefault(c.op, []).append(c)
    holes, n_op = [], 0
    for fstart, data, stop in top:
        if buf[fstart] != (_OP << 3 | 2):
            continue
        if n_op in by_op:
            arg_holes = []
            for c in by_op[n_op]:
                a0, a1, a2 = c.arg_range
                body = _without(buf, a1, a2, [(p.start, p.end, b"") for p in c.pieces])
                arg_holes.append((a0, a2, bytes([_ARG << 3 | 2]) + encode_varint(len(body)) + body))
            body = _without(buf, data, stop, arg_holes)
            holes.append((fstart, stop, bytes([_OP << 3 | 2]) + encode_varint(len(body)) + body))
        n_op += 1
    return _without(buf, 0, len(buf), holes)


def encode_varints(values: np.ndarray) -> bytes:
    """The packed varint bytes of int64 `values` (two's complement, as protobuf writes int64), vectorised."""
    import numpy as np  # noqa: PLC0415

    v = np.ascontiguousarray(values, dtype=np.int64).reshape(-1).view(np.uint64)
    lengths = np.ones(v.size, np.int64)
    for k in range(1, 10):
        lengths += v >= np.uint64(1 << (7 * k))
    out = np.empty(int(lengths.sum()), np.uint8)
    starts = np.cumsum(lengths) - lengths
    for k in range(10):
        on = lengths > k
        if not on.any():
            break
        byte = (v[on] >> np.uint64(7 * k)) & np.uint64(0x7F)
        out[starts[on] + k] = byte.astype(np.uint8) | np.where(lengths[on] > k + 1, 0x80, 0).astype(np.uint8)
    return out.tobytes()


def packed_field(field: int, values: np.ndarray) -> bytes:
    """A packed repeated field of an Argument (``floats`` 5 as ``<f4``, ``ints`` 6 as varints) from an
    array's buffer: what protobuf parses in C, never a Python number per value."""
    import numpy as np  # noqa: PLC0415

    body = (np.ascontiguousarray(values, dtype="<f4").tobytes() if field == 5 else encode_varints(values))
    return bytes([field << 3 | 2]) + encode_varint(len(body)) + body
