"""Caffe2's blob serialisation (BlobProto / TensorProto / QTensorProto) and its ``minidb`` file format.

``serialize_blob`` / ``deserialize_blob`` are what ``workspace.SerializeBlob`` / ``DeserializeBlob``
and the Save / Load ops use; the bytes parse the same in real Caffe2 (tested both ways against
the oracle venv).  A minidb file is a plain sequence of records ``<int32 key length><int32 value
length><key><value>`` (little endian); Save writes one record per tensor chunk keyed
``<blob>#%<chunk id>``, each value a serialised BlobProto whose ``segment`` says which flat range
of the tensor it holds.
"""
from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from engine.runtime import device as dev
from engine.runtime.int8tensor import Int8Tensor
from engine.errors import ExecutionError
from engine.model.tensorscan import decode_varints, encode_varint, encode_varints, fields
from proto import caffe2_pb2

TP = caffe2_pb2.TensorProto
CHUNK_SEPARATOR = "#%"
DEFAULT_CHUNK_SIZE = 1_000_000
"""Elements per chunk of Save (Caffe2's ``caffe2_tensor_chunk_size`` default)."""

#: data_type -> (numpy dtype, TensorProto field).  NOTE: FLOAT16 travels as its uint16 bits in int32_data.
_TYPES: dict[int, tuple[Any, str]] = {
    TP.FLOAT: (np.float32, "float_data"), TP.DOUBLE: (np.float64, "double_data"),
    TP.INT32: (np.int32, "int32_data"), TP.INT64: (np.int64, "int64_data"), TP.BOOL: (np.bool_, "int32_data"),
    TP.UINT8: (np.uint8, "int32_data"), TP.INT8: (np.int8, "int32_data"), TP.INT16: (np.int16, "int32_data"),
    TP.UINT16: (np.uint16, "int32_data"), TP.FLOAT16: (np.float16, "int32_data"), TP.BYTE: (np.uint8, "byte_data"),
    TP.STRING: (object, "string_data")}
_DATA_TYPE = {np.dtype(t): k for k, (t, _) in _TYPES.items() if k not in (TP.BYTE, TP.STRING)}


def data_type_of(a: np.ndarray) -> int:
    """The TensorProto data type of an array (object/bytes arrays are STRING)."""
    if a.dtype.kind in "OSU":
        return TP.STRING
    try:
        return _DATA_TYPE[a.dtype]
    except KeyError:
        raise ExecutionError(f"dtype {a.dtype} has no Caffe2 TensorProto type") from None


PACKED_RECORD = caffe2_pb2.BlobProto(name="", type="std::shared_ptr<std::vector<TensorCPU>>", content=b"")
"""How Caffe2 serializes each record of a PackRecords tensor: its type only, so a loaded pack holds
null records (netviz: ``None``)."""


def is_packed_records(a: np.ndarray) -> bool:
    """Whether `a` is a non-empty PackRecords tensor (objects that are records or null records)."""
    return a.dtype == object and a.size > 0 and all(e is None or isinstance(e, tuple) for e in a.reshape(-1))


def _fill_tensor(t: caffe2_pb2.TensorProto, a: np.ndarray, begin: int, end: int) -> None:
    if is_packed_records(a):
        t.data_type = TP.UNDEFINED
        t.string_data.extend([PACKED_RECORD.SerializeToString()] * (end - begin))
        return
    kind = data_type_of(a)
    t.data_type = kind
    flat = a.reshape(-1)[begin:end]
    field = _TYPES[kind][1]
    if kind == TP.STRING:
        t.string_data.extend(s if isinstance(s, bytes) else str(s).encode() for s in flat)
    elif flat.size:
        _extend_packed(t, field, flat.view(np.uint16) if kind == TP.FLOAT16 else flat)


#: TensorProto's packed numeric fields: name -> (field number, little-endian dtype; None for varints)
_PACKED = {"float_data": (3, "<f4"), "int32_data": (4, None), "double_data": (9, "<f8"), "int64_data": (10, None)}


def _extend_packed(t: caffe2_pb2.TensorProto, field: str, flat: np.ndarray) -> None:
    """Append `flat` to packed field `field` as bytes of its buffer (protobuf parses them in C): no
    Python number per value, so a 100 MB tensor saves at the speed of the disk (issue #41)."""
    number, dtype = _PACKED[field]
    body = np.ascontiguousarray(flat, dtype=dtype).tobytes() if dtype else encode_varints(flat.astype(np.int64))
    t.MergeFromString(bytes([number << 3 | 2]) + encode_varint(len(body)) + body)


def tensor_proto(name: str, a: Any, begin: int = 0, end: int | None = None) -> caffe2_pb2.TensorProto:
    """A TensorProto of `a` (or of its flat range ``begin:end``) laid out as Caffe2's serializer does."""
    a = np.asarray(dev.to_host(a))
    end = a.size if end is None else end
    t = TP()
    t.dims.extend(a.shape)
    _fill_tensor(t, a, begin, end)
    t.name = name
    t.device_detail.device_type = 0
    t.segment.begin, t.segment.end = begin, end
    if t.data_type == TP.FLOAT:
        t.data_format = TP.FMT_PROTOBUF  # NOTE: Caffe2 1.10 writes the field for float tensors only
    return t


def tensor_from_proto(t: caffe2_pb2.TensorProto) -> np.ndarray:
    """The (flat, segment-sized) values of a TensorProto, as numpy."""
    if t.data_type == TP.UNDEFINED and t.string_data and all(
            caffe2_pb2.BlobProto.FromString(r) == PACKED_RECORD for r in t.string_data):
        return np.full(len(t.string_data), None, dtype=object)  # NOTE: null records, as Caffe2 loads them
    np_type, field = _TYPES.get(t.data_type, (None, ""))
    if np_type is None:
        raise ExecutionError(f"TensorProto '{t.name}': data type {t.data_type} is not supported")
    if t.data_type == TP.STRING:
        return np.array(list(t.string_data), dtype=object)
    if t.data_type == TP.BYTE:
        return np.frombuffer(t.byte_data, dtype=np.uint8).copy()
    fast = _packed_numbers(t, field) if t.data_type in _FAST_TYPES else None
    if t.data_type == TP.FLOAT16:
        return (np.array(t.int32_data, dtype=np.uint16) if fast is None else fast.astype(np.uint16)).view(np.float16)
    return np.array(getattr(t, field), dtype=np_type) if fast is None else fast.astype(np_type, copy=False)


_FAST_TYPES = frozenset({TP.FLOAT, TP.DOUBLE, TP.INT32, TP.INT64, TP.FLOAT16})
FAST_MIN_VALUES = 4096
"""Tensors with at least this many values are read from their serialized bytes (:func:`_packed_numbers`)."""


def _packed_numbers(t: caffe2_pb2.TensorProto, field: str) -> np.ndarray | None:
    """The values of packed field `field` of `t`, found in its serialized bytes (a memcpy in protobuf's
    C): ``np.array`` over the repeated field makes a Python number of each value (~0.3 s a million).
    None for small tensors (the plain way is as fast)."""
    if len(getattr(t, field)) < FAST_MIN_VALUES:
        return None
    raw = t.SerializeToString()
    number, dtype = _PACKED[field]
    parts = [np.frombuffer(raw, np.uint8, count=stop - data, offset=data)
             for f, wire, _, data, stop in fields(raw, 0, len(raw)) if f == number and wire == 2]
    flat = parts[0] if len(parts) == 1 else np.concatenate(parts)
    return flat.view(dtype).copy() if dtype else decode_varints(flat)


def blob_protos(name: str, value: Any, chunk_size: int = DEFAULT_CHUNK_SIZE) -> list[caffe2_pb2.BlobProto]:
    """The BlobProtos Save writes for one blob (one per chunk of `chunk_size` elements; <= 0: one)."""
    if isinstance(value, (bytes, str)):
        b = caffe2_pb2.BlobProto(name=name, type="std::string")
        b.content = value.encode() if isinstance(value, str) else value
        return [b]
    if isinstance(value, Int8Tensor):
        b = caffe2_pb2.BlobProto(name=name, type="Int8TensorCPU")
        q, data = b.qtensor, np.asarray(value.data)
        q.dims.extend(data.shape)
        q.precision, q.scale, q.bias, q.is_signed = 8, float(value.scale), float(value.zero_point), False
        q.data.extend(data.reshape(-1).astype(np.int64).tolist())
        q.name, q.data_type = name, data_type_of(data)
        return [b]
    if hasattr(value, "blob_proto"):  # a C++ object with its own serializer (counter, index, map)
        return [value.blob_proto(name)]
    if not hasattr(value, "shape") and not isinstance(value, (int, float, bool, list)):
        raise ExecutionError(f"blob '{name}' holds a {type(value).__name__}, which Caffe2 cannot serialize")
    a = np.asarray(dev.to_host(value))
    step = a.size if chunk_size <= 0 else chunk_size
    out = []
    for begin in range(0, max(a.size, 1), max(step, 1)):
        b = caffe2_pb2.BlobProto(name=name, type="Tensor")
        b.tensor.CopyFrom(tensor_proto(name, a, begin, min(a.size, begin + step)))
        out.append(b)
    return out


DESERIALIZERS: dict[str, Callable[[caffe2_pb2.BlobProto], Any]] = {}
"""BlobProto ``type`` -> value, for C++ objects that serialize themselves (filled by engine.runtime.ops.stateful)."""

NO_CHUNKING = -1
"""``BlobSerializationOptions.chunk_size``: -1 is one chunk, 0 the default (``caffe2_tensor_chunk_size``)."""

#: Caffe2's estimate of serialized bytes per element, by data type (varint fields: a typical width).
_EST_BYTES = {TP.FLOAT: 4, TP.INT32: 4, TP.INT64: 8, TP.STRING: 50, TP.BOOL: 1, TP.UINT8: 2, TP.INT8: 2,
              TP.UINT16: 3, TP.INT16: 3, TP.FLOAT16: 3, TP.DOUBLE: 8}


def chunk_elements(option_chunk: int, numel: int) -> int:
    """Elements per chunk for a ``BlobSerializationOptions.chunk_size`` (see :data:`NO_CHUNKING`)."""
    if option_chunk == NO_CHUNKING:
        return numel + 1  # NOTE: +1 so an empty tensor still makes one chunk
    return DEFAULT_CHUNK_SIZE if option_chunk == 0 else int(option_chunk)


def estimate_size(name: str, value: Any, option_chunk: int = 0) -> int:
    """Caffe2's ``EstimateSerializedBlobSize``: per chunk ``len(name) + 50``, plus a typical width per
    element; a string is ``len(name) + len + 20``; blobs without an estimator (C++ objects) are 0."""
    if isinstance(value, (bytes, str)):
        return len(name) + len(value) + 20
    if isinstance(value, Int8Tensor) or not hasattr(value, "shape"):
        return 0
    a = np.asarray(dev.to_host(value))
    chunk = chunk_elements(option_chunk, a.size)
    return (a.size + chunk - 1) // chunk * (len(name) + 50) + a.size * _EST_BYTES[data_type_of(a)]


def serialize_blob(name: str, value: Any) -> bytes:
    """``workspace.SerializeBlob``: one BlobProto (unchunked) as bytes."""
    return blob_protos(name, value, chunk_size=0)[0].SerializeToString()


def deserialize_blob(data: bytes) -> tuple[str, Any]:
    """``workspace.DeserializeBlob``: (the BlobProto's name, its value) from serialized bytes."""
    b = caffe2_pb2.BlobProto.FromString(data)
    return b.name, blob_value(b)


def blob_value(b: caffe2_pb2.BlobProto, whole: np.ndarray | None = None) -> Any:
    """The value of one BlobProto; for a tensor chunk, its segment is written into `whole`."""
    if b.type == "std::string":
        return b.content
    if b.type == "Int8TensorCPU":
        q = b.qtensor
        dtype = np.uint8 if q.data_type == TP.UINT8 else np.int32
        return Int8Tensor(np.array(q.data, dtype=dtype).reshape(tuple(q.dims)), q.scale, int(q.bias))
    if b.type in DESERIALIZERS:
        return DESERIALIZERS[b.type](b)
    if b.type != "Tensor":
        raise ExecutionError(f"blob '{b.name}': netviz cannot deserialize Caffe2 type {b.type!r}")
    t = b.tensor
    values = tensor_from_proto(t)
    shape = tuple(t.dims)
    if not t.HasField("segment") or (t.segment.begin == 0 and t.segment.end == int(np.prod(shape))):
        return values.reshape(shape)
    if whole is None:
        whole = np.zeros(shape, dtype=values.dtype)
    whole.reshape(-1)[t.segment.begin:t.segment.end] = values
    return whole


# ---- minidb ------------------------------------------------------------------------------
def read_minidb(path: str | Path) -> Iterator[tuple[str, bytes]]:
    """The (key, value) records of a minidb file, in file order (read through a memory map: a DB
    bigger than memory is read a record at a time)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    pos = 0
    while pos + 4 <= len(data):  # NOTE: fewer than 4 bytes left is the end, as Caffe2's fread of a key length
        if pos + 8 > len(data):
            raise ExecutionError(f"minidb {path}: truncated record header at byte {pos}")
        klen, vlen = struct.unpack_from("<ii", data, pos)
        pos += 8
        if klen < 0 or vlen < 0 or pos + klen + vlen > len(data):
            raise ExecutionError(f"minidb {path}: corrupt record at byte {pos - 8}")
        yield data[pos:pos + klen].decode("utf-8", "surrogateescape"), data[pos + klen:pos + klen + vlen]
        pos += klen + vlen


def write_minidb(path: str | Path, records: Iterable[tuple[str, bytes]]) -> None:
    """Write (key, value) records as a minidb file (replacing it)."""
    with open(path, "wb") as f:
        for k, v in records:
            kb = k.encode("utf-8", "surrogateescape")
            f.write(struct.pack("<ii", len(kb), len(v)) + kb + v)


def blob_name_of_key(key: str) -> str:
    """The blob name of a Save record key (``name#%3`` -> ``name``)."""
    i = key.rfind(CHUNK_SEPARATOR)
    return key[:i] if i >= 0 else key


def load_blobs(records: Iterable[tuple[str, bytes]]) -> dict[str, Any]:
    """Blob values of Save records, chunks merged by their segments."""
    out: dict[str, Any] = {}
    for key, value in records:
        b = caffe2_pb2.BlobProto.FromString(value)
        name = blob_name_of_key(key)
        prev = out.get(name)
        out[name] = blob_value(b, prev if isinstance(prev, np.ndarray) else None)
    return out


def save_records(blobs: Iterable[tuple[str, Any]], chunk_size: int = DEFAULT_CHUNK_SIZE) -> Iterator[tuple[str, bytes]]:
    """Save records of (name, value) pairs: ``<name>#%<chunk>`` -> BlobProto bytes."""
    for name, value in blobs:
        for k, b in enumerate(blob_protos(name, value, chunk_size)):
            yield f"{name}{CHUNK_SEPARATOR}{k}", b.SerializeToString()


# ---- lmdb (through the `lmdb` package, when it is installed) ------------------------------
def _lmdb():
    try:
        import lmdb  # noqa: PLC0415
    except ImportError:
        raise ExecutionError("db type 'lmdb' needs the Python package 'lmdb' (pip install lmdb)") from None
    return lmdb


def read_lmdb(path: str | Path) -> Iterator[tuple[str, bytes]]:
    """The (key, value) records of an LMDB directory, in key order (as Caffe2's LMDB cursor)."""
    env = _lmdb().open(str(path), readonly=True, lock=False, subdir=Path(path).is_dir())
    with env.begin() as txn:
        records = [(k.decode("utf-8", "surrogateescape"), bytes(v)) for k, v in txn.cursor()]
    env.close()
    return iter(records)


def write_lmdb(path: str | Path, records: Iterable[tuple[str, bytes]]) -> None:
    """Write (key, value) records into a new LMDB directory (Caffe2 creates it with a 1 TB map)."""
    Path(path).mkdir(parents=True, exist_ok=True)
    env = _lmdb().open(str(path), map_size=1 << 40)
    with env.begin(write=True) as txn:
        for k, v in records:
            txn.put(k.encode("utf-8", "surrogateescape"), v)
    env.close()


READERS = {"minidb": read_minidb, "lmdb": read_lmdb}
WRITERS = {"minidb": write_minidb, "lmdb": write_lmdb}
