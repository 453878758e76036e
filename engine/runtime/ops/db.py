"""Model and data files: Save, Load, Checkpoint, DBExists, EstimateAllBlobSizes, CreateDB, TensorProtosDBInput.

The on-disk format is Caffe2's ``minidb`` (see :mod:`engine.runtime.blobio`), byte-compatible with real
Caffe2 both ways.  Relative paths are taken from the workspace's root folder, as in Caffe2
(``absolute_path=1`` uses them as given).  Other DB types (lmdb, leveldb, rocksdb) stop with a
one-line error naming the type.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from engine.runtime import blobio
from engine.errors import ExecutionError
from engine.runtime.grad_makers import no_gradient, should_not_do_gradient
from engine.runtime.ops.stateful import CppObject, _kept
from engine.catalogue.registry import kernel
from engine.catalogue.registry import shape
from engine.runtime.shapes import BOOL, INT64, TensorInfo, opaque
from proto import caffe2_pb2

DB_TYPES = ("minidb", "lmdb")  # NOTE: lmdb through the `lmdb` package when installed; leveldb/rocksdb: none


def _where(ctx) -> str:
    return f"{ctx.net_name or 'net'}: op #{ctx.index} {ctx.op.type} '{ctx.op.name}'"


def _path(ctx, db: str, absolute_path: bool) -> str:
    return db if absolute_path else os.path.join(getattr(ctx.workspace, "root_folder", "."), db)


def _check_type(ctx, db_type: str) -> None:
    if db_type not in DB_TYPES:
        raise ExecutionError(f"{_where(ctx)}: DB type {db_type!r} is not supported by netviz "
                             f"(supported: {', '.join(DB_TYPES)})")


def _read(ctx, path: str, db_type: str = "minidb") -> list[tuple[str, bytes]]:
    return list(_stream(ctx, path, db_type))


def _stream(ctx, path: str, db_type: str = "minidb") -> Iterator[tuple[str, bytes]]:
    """The DB's records one at a time: Load holds a record only while it merges it, so a DB bigger
    than memory loads (minidb through a memory map, engine.runtime.blobio.read_minidb)."""
    try:
        yield from blobio.READERS[db_type](path)
    except FileNotFoundError:
        raise ExecutionError(f"{_where(ctx)}: cannot open db {path}: no such file") from None
    except ExecutionError as e:
        raise ExecutionError(f"{_where(ctx)}: {e}") from None
    except Exception as e:  # noqa: BLE001 - the lmdb package's own errors
        raise ExecutionError(f"{_where(ctx)}: cannot read {db_type} db {path}: {e}") from None


def _write(ctx, path: str, db_type: str, records) -> None:
    try:
        blobio.WRITERS[db_type](path, records)
    except ExecutionError as e:
        raise ExecutionError(f"{_where(ctx)}: {e}") from None


def _strip(name: str, prefix: str) -> str:
    """Caffe2's strip_prefix: drop everything up to and including its first occurrence."""
    at = name.find(prefix) if prefix else -1
    return name[at + len(prefix):] if at >= 0 else name


def _texts(xs) -> list[str]:
    return [x.decode() if isinstance(x, bytes) else str(x) for x in xs]


def _options(ctx, options, chunk_size) -> list:
    """Save's BlobSerializationOptions, in order; a ``chunk_size`` argument is a last catch-all
    (its old meanings swapped into the options': -1 the default size, 0 no chunking)."""
    opts = caffe2_pb2.SerializationOptions()
    if options:
        try:
            opts.ParseFromString(options.encode("utf-8", "surrogateescape") if isinstance(options, str) else options)
        except Exception:  # noqa: BLE001 - protobuf's DecodeError
            raise ExecutionError(f"{_where(ctx)}: unable to parse serialization options") from None
    if chunk_size is not None:
        size = {-1: 0, 0: blobio.NO_CHUNKING}.get(int(chunk_size), int(chunk_size))
        opts.options.add(chunk_size=size)
    return list(opts.options)


def _chunk_option(name: str, options: list) -> int:
    """The chunk_size of the first option whose blob_name_regex is empty or matches all of `name`."""
    return next((o.chunk_size for o in options if not o.blob_name_regex or re.fullmatch(o.blob_name_regex, name)), 0)


# ---- kernels ----

@kernel("Save", needs_context=True)
def save(xp, *xs, ctx, db: str = "", db_type: str = "", absolute_path: bool = False, strip_prefix: str = "",
         blob_name_overrides: list = (), chunk_size: int | None = None, options: str = "", db_options: str = ""):
    where = _where(ctx)
    if not db_type:
        raise ExecutionError(f"{where}: Must specify a db type.")
    _check_type(ctx, db_type)
    names = _texts(blob_name_overrides)
    if names and len(names) != len(xs):
        raise ExecutionError(f"{where}: Number of blobs and blob_name_overrides mismatch.")
    if names and strip_prefix:
        raise ExecutionError(f"{where}: strip_prefix and blob_name_overrides are mutually exclusive.")
    if not db:
        raise ExecutionError(f"{where}: Must specify a db name.")
    opts = _options(ctx, options, chunk_size)
    if not names:
        names = [_strip(n, strip_prefix) for n in ctx.op.input]
        dup = next((n for k, n in enumerate(names) if n in names[:k]), None)
        if dup is not None:
            raise ExecutionError(f"{where}: Duplicated input: {dup}")
    records = []
    try:
        for name, x in zip(names, xs):
            size = np.asarray(x).size if hasattr(x, "shape") else 0
            per = blobio.chunk_elements(_chunk_option(name, opts), size)
            records.extend(blobio.save_records([(name, x)], per))
    except ExecutionError as e:
        raise ExecutionError(f"{where}: {e}") from None
    _write(ctx, _path(ctx, db, absolute_path), db_type, records)
    return ()


@kernel("Checkpoint", "Snapshot", needs_context=True)  # NOTE: Snapshot is Caffe2's old name of Checkpoint
def checkpoint(xp, it, *xs, ctx, db: str = "", db_type: str = "", absolute_path: bool = False, every: int = 1,
               strip_prefix: str = "", blob_name_overrides: list = (), chunk_size: int | None = None,
               options: str = ""):
    """Every `every` iterations, a Save of all the inputs (the iteration blob too, as Caffe2) to `db`
    formatted with the iteration (``%d``)."""
    if not db or every <= 0:
        raise ExecutionError(f"{_where(ctx)}: " + ("Must specify a checkpoint file pattern." if not db
                                                   else "Checkpoint interval should be positive."))
    i = int(np.asarray(it).reshape(-1)[0])
    if i % every == 0:
        save(xp, it, *xs, ctx=ctx, db=db % i if "%" in db else db, db_type=db_type, absolute_path=absolute_path,
             strip_prefix=strip_prefix, blob_name_overrides=blob_name_overrides, chunk_size=chunk_size,
             options=options)
    return ()


@dataclass
class _Loaded:
    """What Load has read of one blob: its value and how many of its elements (Caffe2's BlobState)."""

    value: object
    total: int
    got: int
    tensor: bool


def _take(where: str, state: dict[str, _Loaded], key: str, proto) -> bool:
    """Merge one record (a BlobProto) into `state`; True when it completes blob `key`."""
    old = state.get(key)
    if not proto.HasField("tensor"):
        if old is not None:
            raise ExecutionError(f"{where}: Blob duplicated: {key}")
        state[key] = _Loaded(blobio.blob_value(proto), 1, 1, False)
        return True
    t = proto.tensor
    part = t.segment.end - t.segment.begin if t.HasField("segment") else None
    if old is None:
        total = int(np.prod(t.dims, dtype=np.int64))
        state[key] = _Loaded(blobio.blob_value(proto), total, total if part is None else part, True)
    else:
        if not old.tensor:
            raise ExecutionError(f"{where}: Must be tensor {key}")
        if old.got >= old.total:
            raise ExecutionError(f"{where}: Found an extra part for an already filled tensor: {key}")
        if part is None:
            raise ExecutionError(f"{where}: Partial tensor must have a segment: {key}")
        old.got += part
        if old.got > old.total:
            raise ExecutionError(f"{where}: Tensor parts are bigger than target size for tensor: {key}")
        whole = old.value if isinstance(old.value, np.ndarray) else None
        old.value = blobio.blob_value(proto, whole)
    return state[key].got == state[key].total


@kernel("Load", needs_context=True)
def load(xp, *readers, ctx, db: str = "", dbs: list = (), db_type: str = "", absolute_path: bool = False,
         add_prefix: str = "", strip_prefix: str = "", keep_device: bool = False, load_all: bool = False,
         allow_incomplete: bool = False, source_blob_names: list = (), db_options: str = ""):
    """Blobs from DB readers (inputs) or from DB files: every blob (``load_all``) or the op's
    outputs, matched by key (``source_blob_names`` renames); chunks are reassembled."""
    where, outputs = _where(ctx), list(ctx.op.output)
    files = _texts(dbs)
    if not readers:
        if not db_type:
            raise ExecutionError(f"{where}: Must specify a db type.")
        _check_type(ctx, db_type)
        if not files and not db:
            raise ExecutionError(f"{where}: Must specify a db name.")
        dup = next((f for k, f in enumerate(files) if f in files[:k]), None)
        if dup is not None or "" in files:
            raise ExecutionError(f"{where}: " + (f"Duplicated db name: {dup}" if dup is not None
                                                 else "Db name should not be empty."))
        files = files or [db]
    sources = _texts(source_blob_names)
    if sources and len(sources) != len(outputs):
        raise ExecutionError(f"{where}: Number of output blobs and source_blob_names mismatch.")
    if sources and strip_prefix:
        raise ExecutionError(f"{where}: strip_prefix and source_blob_names are mutually exclusive.")
    if sources and load_all:
        raise ExecutionError(f"{where}: cannot load_all_ while using source_blob_names.")
    index: dict[str, int] = {}
    if not load_all:
        for k, name in enumerate(sources or outputs):
            if name in index:
                raise ExecutionError(f"{where}: Duplicated source blob name: {name}")
            index[name] = k
    state: dict[str, _Loaded] = {}
    db_of: dict[str, int] = {}
    done = 0
    for d in range(len(readers) or len(files)):
        records = readers[d].records if readers else _stream(ctx, _path(ctx, files[d], absolute_path), db_type)
        for db_key, value in records:
            key = add_prefix + _strip(db_key.split(blobio.CHUNK_SEPARATOR, 1)[0], strip_prefix)
            if not load_all and key not in index:
                continue
            if db_of.setdefault(key, d) != d:
                raise ExecutionError(f"{where}: Duplicate Key {key} is found!")
            try:
                proto = caffe2_pb2.BlobProto.FromString(value)
            except Exception:  # noqa: BLE001 - protobuf's DecodeError
                raise ExecutionError(f"{where}: Couldn't parse Proto of key {db_key}") from None
            done += _take(where, state, key, proto)
            if not load_all and done == len(outputs):
                break
    bad = next((k for k, s in state.items() if s.got != s.total), None)
    if bad is not None:
        raise ExecutionError(f"{where}: Data size mismatch for blob {bad}. Expected: {state[bad].total} "
                             f"Read: {state[bad].got}")
    ws = ctx.workspace
    if load_all:
        missing = next((o for o in outputs if o not in state), None)
        if missing is not None:
            raise ExecutionError(f"{where}: Output blob name {missing} does not exist in the db(s).")
        for name, s in state.items():
            ws.values[name], ws.devices[name] = s.value, 0
        return tuple(state[o].value for o in outputs)
    if done != len(outputs) and not allow_incomplete:
        raise ExecutionError(f"{where}: Expected to load {len(outputs)} blobs, got {done} only.")
    kept = iter(_kept(ctx, [o for n, o in zip(sources or outputs, outputs) if n not in state]))
    return tuple(state[n].value if n in state else next(kept) for n in sources or outputs)


@kernel("DBExists", needs_context=True)
def db_exists(xp, *, ctx, db_name: str = "", db_type: str = "", absolute_path: bool = False):
    return np.array(os.path.exists(_path(ctx, db_name, absolute_path)))


@kernel("EstimateAllBlobSizes", needs_context=True)
def estimate_all_blob_sizes(xp, *, ctx, include_shared: bool = True, options: str = ""):
    """Names and Caffe2's estimated serialized sizes (bytes) of every blob of the workspace.

    NOTE: the two outputs count themselves, already sized to the blob count (as Caffe2 resizes
    them before estimating); C++ objects without a size estimate are 0.
    """
    ws = ctx.workspace
    names = ws.blobs() if include_shared or ws.parent is None else sorted(ws.values.local)
    names += [o for o in ctx.op.output if o not in names]
    opts, n = _options(ctx, options, None), len(names)
    outs = dict(zip(ctx.op.output, (np.zeros(n, object), np.zeros(n, np.int64))))
    sizes = [blobio.estimate_size(b, outs[b] if b in outs else ws.values[b], _chunk_option(b, opts)) for b in names]
    return np.array([b.encode() for b in names], dtype=object), np.array(sizes, dtype=np.int64)


@dataclass(eq=False)
class DBReader(CppObject):
    """An open DB (Caffe2's ``DBReader``): its records and a cursor that wraps at the end."""

    source: str
    db_type: str
    records: list[tuple[str, bytes]] = field(default_factory=list)
    pos: int = 0
    cpp_type = "caffe2::db::DBReader"

    def read(self, ctx=None) -> tuple[str, bytes]:
        if not self.records:
            raise ExecutionError(f"db {self.source} is empty")
        rec = self.records[self.pos]
        self.pos = (self.pos + 1) % len(self.records)
        return rec



@kernel("CreateDB", needs_context=True)
def create_db(xp, *, ctx, db: str = "", db_type: str = "", num_shards: int = 1, shard_id: int = 0):
    # NOTE: Caffe2 opens `db` as given (relative to the process's directory), not the root folder.
    _check_type(ctx, db_type)
    return DBReader(db, db_type, _read(ctx, db, db_type))


@dataclass(eq=False)
class QueueDBReader(CppObject):
    """Caffe2's BlobsQueueDB: a DB whose next record is dequeued from a blobs queue (waiting for
    one, at most `timeout_secs` when > 0)."""

    queue: object
    key_index: int = -1
    value_index: int = 0
    timeout_secs: float = 0.0
    cpp_type = "std::unique_ptr<caffe2::db::DBReader>"

    def read(self, ctx=None) -> tuple[str, bytes]:
        rec = self.queue.read(ctx, self.timeout_secs if self.timeout_secs > 0 else None)
        if rec is None:
            raise ExecutionError(f"{_where(ctx)}: the blobs queue behind the DB is closed and empty (or timed out)")
        key = rec[self.key_index] if self.key_index >= 0 else b""
        value = _bytes(rec[self.value_index])
        return (key.decode() if isinstance(key, bytes) else str(key)), value


def _bytes(value) -> bytes:
    """A record's value: a string blob, or the first element of a string tensor."""
    value = value if isinstance(value, (bytes, str)) else np.asarray(value).reshape(-1)[0]
    return value.encode("utf-8", "surrogateescape") if isinstance(value, str) else bytes(value)


@kernel("CreateBlobsQueueDB", needs_context=True)
def create_blobs_queue_db(xp, queue, *, ctx, key_blob_index: int = -1, value_blob_index: int = 0,
                          timeout_secs: float = 0.0):
    if not hasattr(queue, "read"):
        raise ExecutionError(f"{_where(ctx)}: input blob '{ctx.op.input[0]}' is not a blobs queue")
    return QueueDBReader(queue, int(key_blob_index), int(value_blob_index), float(timeout_secs))


@kernel("TensorProtosDBInput", needs_context=True)
def tensor_protos_db_input(xp, reader, *, ctx, batch_size: int = 0):
    """One TensorProtos record per item; output k stacks the k-th protos of `batch_size` records."""
    if not isinstance(reader, (DBReader, QueueDBReader)):
        raise ExecutionError(f"{_where(ctx)}: input blob '{ctx.op.input[0]}' is not a DB reader")
    items = []
    for _ in range(max(batch_size, 1)):
        protos = caffe2_pb2.TensorProtos.FromString(reader.read(ctx)[1]).protos
        if len(protos) != len(ctx.op.output):
            raise ExecutionError(f"{_where(ctx)}: a record holds {len(protos)} tensors for "
                                 f"{len(ctx.op.output)} outputs")
        items.append([blobio.tensor_from_proto(p).reshape(tuple(p.dims)) for p in protos])
    if batch_size == 0:
        return tuple(items[0])
    return tuple(np.stack(col) for col in zip(*items))


# ---- gradients ----
should_not_do_gradient("Checkpoint", "DBExists")
no_gradient("CreateDB", "TensorProtosDBInput")


# ---- shapes ----

shape("DBExists")(lambda: TensorInfo((), BOOL))
shape("EstimateAllBlobSizes")(lambda: (TensorInfo((None,), None), TensorInfo((None,), INT64)))
# NOTE: a DB handle, or blobs whose shapes only the DB file knows; Save/Checkpoint/Snapshot write nothing.
shape("CreateDB", "CreateBlobsQueueDB", "Load", "TensorProtosDBInput", "Save", "Checkpoint", "Snapshot")(opaque)
