"""References from a parsed init net to its values in the memory-mapped file, and back to bytes.

:func:`load_binary_net` is the fast path of :func:`engine.model.modelio.load_net` for binary nets:
:mod:`engine.model.tensorscan` finds the fill values, protobuf parses the rest, and each cut
argument carries a reference (an unknown field, so it survives ``CopyFrom`` and serialisation).
:func:`referenced_values` is what :func:`engine.model.opdef.argument_value` returns for such an
argument: a read-only array over the mapped file (resident memory grows with what is read; a write
goes to a copy, see :func:`engine.runtime.executor.call_kernel`).  :func:`serialize_net` writes a
net with references as the file's own bytes for them, never through Python numbers.
"""
from __future__ import annotations

import mmap
import os
import math
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING
from pathlib import Path

from google.protobuf.unknown_fields import UnknownFieldSet

from engine.errors import ModelError
from engine.model import tensorscan as ts
from proto import caffe2_pb2

if TYPE_CHECKING:  # NOTE: NumPy is imported when a value is made: a quick open (the TUI's first frame) needs none
    import numpy as np

_maps: dict[tuple[str, int, int], mmap.mmap] = {}
_arrays: weakref.WeakValueDictionary[bytes, np.ndarray] = weakref.WeakValueDictionary()
_KNOWN_DTYPES = frozenset(caffe2_pb2.TensorProto.DataType.values())


def _mapping(path: str, size: int, mtime: int) -> mmap.mmap:
    """The read-only mapping of `path`, shared by every reference into that version of the file."""
    key = (path, size, mtime)
    if key not in _maps:
        try:
            st = os.stat(path)
            if (st.st_size, st.st_mtime_ns) != (size, mtime):
                raise ModelError(f"{path}: changed on disk since it was read; open it again")
            with open(path, "rb") as f:
                _maps[key] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as e:
            raise ModelError(f"{path}: cannot read: {e.strerror}") from None
    return _maps[key]


def _piece_array(buf, p: ts.Piece) -> np.ndarray:
    import numpy as np  # noqa: PLC0415

    if p.kind == "f32u":
        return np.ndarray(((p.end - p.start) // 5,), "<f4", buffer=buf, offset=p.start + 1, strides=(5,))
    _, data = ts._varint(buf, p.start, p.end)
    if p.kind != "varu":
        _, data = ts._varint(buf, data, p.end)
    if p.kind == "f32":
        return np.frombuffer(buf, "<f4", count=(p.end - data) // 4, offset=data)
    raw = np.frombuffer(buf, np.uint8, count=p.end - data, offset=data)
    if p.kind == "bytes":
        return raw
    return ts.decode_varints(np.frombuffer(buf, np.uint8, count=p.end - p.start, offset=p.start)
                             if p.kind == "varu" else raw, interleaved=p.kind == "varu")


def pieces_array(buf, pieces) -> np.ndarray:
    """One read-only array of the values in `pieces` (a view when there is one piece of floats/bytes)."""
    import numpy as np  # noqa: PLC0415

    parts = [_piece_array(buf, p) for p in pieces]
    out = parts[0] if len(parts) == 1 else np.concatenate(parts)
    out.flags.writeable = False
    return out


def reference_of(arg: caffe2_pb2.Argument) -> dict | None:
    """The reference `arg` carries instead of its values, or None."""
    for f in UnknownFieldSet(arg):
        if f.field_number == ts.REFERENCE_FIELD:
            return _decode_ref(f.data)
    return None


def _encode_ref(path: str, size: int, mtime: int, field: str, count: int, pieces) -> bytes:
    """A reference's bytes: NUL-separated text (a path holds no NUL), ~10x cheaper than JSON both ways."""
    return "\0".join([path, str(size), str(mtime), field, str(count),
                      *(f"{p.kind}:{p.start}:{p.end}" for p in pieces)]).encode("utf-8", "surrogateescape")


def _decode_ref(data: bytes) -> dict:
    path, size, mtime, field, count, *pieces = data.decode("utf-8", "surrogateescape").split("\0")
    return {"path": path, "size": int(size), "mtime": int(mtime), "field": field, "count": int(count),
            "pieces": [(k, int(b), int(e)) for k, b, e in (p.split(":") for p in pieces)]}


def referenced_values(arg: caffe2_pb2.Argument) -> np.ndarray | None:
    """The values `arg` refers to (read-only; floats and bytes view the mapped file), or None.

    Raises
    ------
    ModelError
        The file changed or vanished since the net was read.
    """
    for f in UnknownFieldSet(arg):
        if f.field_number == ts.REFERENCE_FIELD:
            got = _arrays.get(f.data)
            if got is None:
                ref = _decode_ref(f.data)
                buf = _mapping(ref["path"], ref["size"], ref["mtime"])
                try:
                    got = _arrays[f.data] = pieces_array(buf, [ts.Piece(*p) for p in ref["pieces"]])
                except ts._Corrupt as e:  # NOTE: a quick open counted varints without decoding them
                    raise ModelError(f"{ref['path']}: argument values: {e}") from None
            return got
    return None


def referenced_count(arg: caffe2_pb2.Argument) -> int | None:
    """How many values `arg` refers to, without reading them; None without a reference."""
    ref = reference_of(arg)
    return None if ref is None else ref["count"]


_HIGH_BYTES = bytes(range(0x80, 0x100))


def _count(buf, pieces, quick: bool = False) -> int:
    """How many values `pieces` hold; varints are decoded (a bad one is a load error) unless `quick`,
    which counts their last bytes (checked when the values are made)."""
    n = 0
    for p in pieces:
        if p.kind == "f32u":
            n += (p.end - p.start) // 5
        elif p.kind in ("var", "varu") and quick:
            ends = len(bytes(buf[p.start:p.end]).translate(None, _HIGH_BYTES))
            n += ends // 2 if p.kind == "varu" else ends - 2  # NOTE: without the tag and length varints
        elif p.kind in ("var", "varu"):
            n += _piece_array(buf, p).size
        else:
            _, data = ts._varint(buf, p.start, p.end)
            _, data = ts._varint(buf, data, p.end)
            n += (p.end - data) // (4 if p.kind == "f32" else 1)
    return n


def _check(op: caffe2_pb2.OperatorDef, count: int) -> None:
    """Values against the op's `shape` (when it has no input) and its `dtype`: ValueError saying what
    is wrong (the caller names file, op and blob)."""
    shape = next((list(a.ints) for a in op.arg if a.name == "shape"), None)
    if shape is not None and not len(op.input) and count != math.prod(shape):
        raise ValueError(f"{count} values for shape {tuple(shape)} ({math.prod(shape)} expected)")
    dtype = next((a.i for a in op.arg if a.name == "dtype" and a.HasField("i")), None)
    if op.type == "GivenTensorFill" and dtype is not None and dtype not in _KNOWN_DTYPES:
        raise ValueError(f"unknown dtype {dtype}")


def parse_scanned(buf, path: str, parse, min_bytes: int = ts.MIN_CUT_BYTES, quick: bool = False
                  ) -> tuple[caffe2_pb2.NetDef, list[tuple[ts._Cut, int]]]:
    """The NetDef of binary `buf` parsed without its fill values, and each cut with its value count.

    `parse(bytes, path)` parses the stripped bytes (``modelio._parse_binary``: its checks apply).

    Raises
    ------
    ModelError
        Truncated or corrupt bytes, a count that disagrees with the shape, an unknown dtype:
        one line naming the file, op and blob.
    """
    top, cuts = ts.find_cuts(buf, path, min_bytes, quick)
    net = parse(ts.stripped_bytes(buf, top, cuts), path)
    counted = []
    for c in cuts:
        op = net.op[c.op]
        try:
            count = _count(buf, c.pieces, quick)
            _check(op, count)
        except (ts._Corrupt, ValueError) as e:
            where = ts._where(path, c.op, op.type, op.output[0] if op.output else "")
            raise ModelError(f"{where}: {'argument values: ' if isinstance(e, ts._Corrupt) else ''}{e}") from None
        counted.append((c, count))
    return net, counted


def load_binary_net(path: str | Path, min_bytes: int = ts.MIN_CUT_BYTES, parse=None,
                    quick: bool = False) -> caffe2_pb2.NetDef:
    """Read a binary NetDef through the scanner: fill values referenced in the mapped file, the rest
    parsed (see :func:`parse_scanned`; any size, protobuf's 2 GiB limit does not apply).  `quick`
    reads no value (the TUI: its first frame does not wait for the weights); :func:`bind_values`
    then checks them."""
    path = str(path)
    try:
        st = os.stat(path)
        with open(path, "rb") as f:
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as e:
        raise ModelError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    random = quick and hasattr(mmap, "MADV_RANDOM")
    if random:  # NOTE: no read-ahead while the scan hops from op header to op header (a cold 128 MB init:
        buf.madvise(mmap.MADV_RANDOM)  # 80-140 -> 20-40 ms); the values are read in order after it
    try:
        net, counted = parse_scanned(buf, path, parse, min_bytes, quick)
    finally:
        if random:
            buf.madvise(mmap.MADV_NORMAL)
    if counted:
        _maps[(path, st.st_size, st.st_mtime_ns)] = buf
    for c, count in counted:
        data = _encode_ref(path, st.st_size, st.st_mtime_ns, c.field, count, c.pieces)
        net.op[c.op].arg[c.arg].MergeFromString(ts._REF_TAG + ts.encode_varint(len(data)) + data)
    return net

def _raw(arg: caffe2_pb2.Argument) -> tuple[caffe2_pb2.Argument, bytes] | None:
    """(`arg` without its reference, the file's own bytes of the referenced fields), or None."""
    ref = reference_of(arg) if not arg.floats and not arg.ints and not arg.HasField("s") else None
    if ref is None:
        return None
    buf = _mapping(ref["path"], ref["size"], ref["mtime"])
    bare = caffe2_pb2.Argument()
    bare.CopyFrom(arg)
    bare.DiscardUnknownFields()
    return bare, b"".join(buf[s:e] for _, s, e in ref["pieces"])


def _referring(net: caffe2_pb2.NetDef) -> list[int]:
    return [i for i, op in enumerate(net.op) if op.type in ts.VALUE_FIELDS
            and any(a.name == "values" and len(UnknownFieldSet(a)) for a in op.arg)]


def materialized(net: caffe2_pb2.NetDef) -> caffe2_pb2.NetDef:
    """A copy of `net` with every referenced value back in its Argument (protobuf parses the file's
    bytes of the field: no Python numbers); `net` itself when nothing refers to a file."""
    ops = _referring(net)
    if not ops:
        return net
    out = caffe2_pb2.NetDef()
    out.CopyFrom(net)
    for i in ops:
        for arg in out.op[i].arg:
            if (got := _raw(arg)) is not None:
                bare, raw = got
                arg.CopyFrom(bare)
                arg.MergeFromString(raw)
    return out


def _framed(field: int, body: bytes) -> bytes:
    return bytes([field << 3 | 2]) + ts.encode_varint(len(body)) + body


def serialize_net(net: caffe2_pb2.NetDef) -> bytes:
    """`net` as binary protobuf, referenced values written as the file's bytes (verbatim, packed or not)."""
    ops = set(_referring(net))
    if not ops:
        return net.SerializeToString()
    head = caffe2_pb2.NetDef()
    head.CopyFrom(net)
    del head.op[:]
    parts = [head.SerializeToString()]  # NOTE: fields may come in any order; the ops keep theirs
    for i, op in enumerate(net.op):
        if i not in ops:
            parts.append(_framed(ts._OP, op.SerializeToString()))
            continue
        bare_op = caffe2_pb2.OperatorDef()
        bare_op.CopyFrom(op)
        del bare_op.arg[:]
        body = [bare_op.SerializeToString()]
        for arg in op.arg:
            got = _raw(arg)
            body.append(_framed(ts._ARG, arg.SerializeToString() if got is None
                                else got[0].SerializeToString() + got[1]))
        parts.append(_framed(ts._OP, b"".join(body)))
    return b"".join(parts)


def _unchecked(net: caffe2_pb2.NetDef) -> list[tuple[int, int, dict, int]]:
    """(start, end, reference, op index) of each run of unpacked floats, in file order: what a quick
    open checked only near their ends (packed floats and bytes need no check: they are read when an op
    reads them)."""
    return sorted((b, e, ref, i) for i in _referring(net) for a in net.op[i].arg
                  if (ref := reference_of(a)) for kind, b, e in ref["pieces"] if kind == "f32u")


def referenced_bytes(net: caffe2_pb2.NetDef) -> int:
    """How many bytes :func:`bind_values` reads: `net`'s runs of unpacked floats."""
    return sum(e - b for b, e, _, _ in _unchecked(net))


def bind_values(net: caffe2_pb2.NetDef, progress: Callable[[int, int], None] | None = None,
                cancelled: Callable[[], bool] = lambda: False) -> None:
    """Check each tag of the runs of unpacked floats a quick open checked only near their ends (reading
    them brings their pages in); ``progress(done, total)`` in bytes after each chunk (the TUI's line
    "loading 128 MB of weights … 61 %"); stops early when `cancelled()`.

    Raises
    ------
    ModelError
        A run of floats holds another field (then the net must be opened again, fully checked).
    """
    import numpy as np  # noqa: PLC0415

    todo = _unchecked(net)
    total, done = sum(e - b for b, e, _, _ in todo), 0
    for b, e, ref, i in todo:
        buf = _mapping(ref["path"], ref["size"], ref["mtime"])
        for at in range(b, e, _BIND_CHUNK):
            stop = min(e, at + _BIND_CHUNK)
            raw = np.frombuffer(buf, np.uint8, count=stop - at, offset=at)
            if not (raw[(b - at) % 5::5] == 0x2D).all():
                op = net.op[i]
                raise ModelError(f"{ts._where(ref['path'], i, op.type, op.output[0] if op.output else '')}: "
                                 "argument values: another field inside its floats; open the file again")
            done += stop - at
            if progress is not None:
                progress(done, total)
            if cancelled():
                return


_BIND_CHUNK = 4 << 20
