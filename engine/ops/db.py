"""Model and data files: Save, Load, Checkpoint, DBExists, EstimateAllBlobSizes, CreateDB, TensorProtosDBInput.

The on-disk format is Caffe2's ``minidb`` (see :mod:`engine.blobio`), byte-compatible with real
Caffe2 both ways.  Relative paths are taken from the workspace's root folder, as in Caffe2
(``absolute_path=1`` uses them as given).  Other DB types (lmdb, leveldb, rocksdb) stop with a
one-line error naming the type.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from engine import blobio
from engine.errors import ExecutionError
from engine.grad_makers import no_gradient, should_not_do_gradient
from engine.ops.runtime import CppObject
from engine.registry import kernel
from engine.registry import shape
from engine.shapes import BOOL, INT64, TensorInfo

DB_TYPES = ("minidb", "lmdb")  # NOTE: lmdb through the `lmdb` package when installed; leveldb/rocksdb: none


def _where(ctx) -> str:
    return f"{ctx.net_name or '<op>'}: op #{ctx.index} {ctx.op.type} '{ctx.op.name}'"


def _path(ctx, db: str, absolute_path: bool) -> str:
    return db if absolute_path else os.path.join(getattr(ctx.workspace, "root_folder", "."), db)


def _check_type(ctx, db_type: str) -> None:
    if db_type not in DB_TYPES:
        raise ExecutionError(f"{_where(ctx)}: DB type {db_type!r} is not supported by netviz "
                             f"(supported: {', '.join(DB_TYPES)})")


def _read(ctx, path: str, db_type: str = "minidb") -> list[tuple[str, bytes]]:
    try:
        return list(blobio.READERS[db_type](path))
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
    return name[len(prefix):] if prefix and name.startswith(prefix) else name


# ---- kernels ----

@kernel("Save", needs_context=True)
def save(xp, *xs, ctx, db: str = "", db_type: str = "", absolute_path: bool = False, strip_prefix: str = "",
         blob_name_overrides: list = (), chunk_size: int = blobio.DEFAULT_CHUNK_SIZE):
    _check_type(ctx, db_type)
    names = [b.decode() if isinstance(b, bytes) else b for b in blob_name_overrides] or \
        [_strip(n, strip_prefix) for n in ctx.op.input]
    if len(names) != len(xs):
        raise ExecutionError(f"{_where(ctx)}: blob_name_overrides has {len(names)} names for {len(xs)} inputs")
    try:
        records = list(blobio.save_records(zip(names, xs), chunk_size))
    except ExecutionError as e:
        raise ExecutionError(f"{_where(ctx)}: {e}") from None
    _write(ctx, _path(ctx, db, absolute_path), db_type, records)
    return ()


@kernel("Checkpoint", "Snapshot", needs_context=True)  # NOTE: Snapshot is Caffe2's old name of Checkpoint
def checkpoint(xp, it, *xs, ctx, db: str = "", db_type: str = "", absolute_path: bool = False,
               every: int = 1):
    """Save inputs 1.. every `every` iterations to `db` formatted with the iteration (``%d``)."""
    i = int(np.asarray(it).reshape(-1)[0])
    if i % max(every, 1) == 0:
        _check_type(ctx, db_type)
        name = db % i if "%" in db else db
        records = blobio.save_records(zip(ctx.op.input[1:], xs))
        _write(ctx, _path(ctx, name, absolute_path), db_type, records)
    return ()


@kernel("Load", needs_context=True)
def load(xp, *xs, ctx, db: str = "", dbs: list = (), db_type: str = "", absolute_path: bool = False,
         add_prefix: str = "", strip_prefix: str = "", keep_device: bool = False, load_all: bool = False,
         allow_incomplete: bool = False, source_blob_names: list = ()):
    """Blobs from one or more DBs: every blob (``load_all``) or the op's outputs, by name."""
    _check_type(ctx, db_type)
    files = [d.decode() if isinstance(d, bytes) else d for d in dbs] or [db]
    found: dict[str, object] = {}
    for f in files:
        for name, value in blobio.load_blobs(_read(ctx, _path(ctx, f, absolute_path), db_type)).items():
            found[add_prefix + _strip(name, strip_prefix)] = value
    if load_all:
        ws = ctx.workspace
        for name, value in found.items():
            ws.values[name], ws.devices[name] = value, 0
        return tuple(found[o] for o in ctx.op.output)
    sources = [s.decode() if isinstance(s, bytes) else s for s in source_blob_names] or list(ctx.op.output)
    out = []
    for o, s in zip(ctx.op.output, sources):
        key = add_prefix + _strip(s, strip_prefix) if source_blob_names else o
        if key not in found:
            if allow_incomplete:
                out.append(ctx.workspace.values.get(o))
                continue
            raise ExecutionError(f"{_where(ctx)}: blob '{key}' not found in db {', '.join(files)}")
        out.append(found[key])
    return tuple(out)


@kernel("DBExists", needs_context=True)
def db_exists(xp, *, ctx, db_name: str = "", db_type: str = "", absolute_path: bool = False):
    return np.array(os.path.exists(_path(ctx, db_name, absolute_path)))


@kernel("EstimateAllBlobSizes", needs_context=True)
def estimate_all_blob_sizes(xp, *, ctx, include_shared: bool = True, options=None):
    """Names and serialized sizes (bytes) of every tensor blob of the workspace."""
    names, sizes = [], []
    for n in ctx.workspace.blobs():
        v = ctx.workspace.values[n]
        if hasattr(v, "shape") or isinstance(v, bytes):
            names.append(n.encode())
            sizes.append(len(blobio.serialize_blob(n, v)))
    return np.array(names, dtype=object), np.array(sizes, dtype=np.int64)


@dataclass(eq=False)
class DBReader(CppObject):
    """An open DB (Caffe2's ``DBReader``): its records and a cursor that wraps at the end."""

    source: str
    db_type: str
    records: list[tuple[str, bytes]] = field(default_factory=list)
    pos: int = 0
    cpp_type = "caffe2::db::DBReader"

    def read(self) -> tuple[str, bytes]:
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
    """Caffe2's BlobsQueueDB: a DB whose next record is dequeued from a blobs queue."""

    queue: object
    key_index: int = -1
    value_index: int = 0
    cpp_type = "std::unique_ptr<caffe2::db::DBReader>"

    def read(self) -> tuple[str, bytes]:
        if not self.queue.records:
            raise ExecutionError("the queue behind the DB is empty: in one process this would wait forever")
        rec = self.queue.records.pop(0)
        key = rec[self.key_index] if self.key_index >= 0 else b""
        value = rec[self.value_index]
        value = value if isinstance(value, bytes) else bytes(np.asarray(value).reshape(-1)[0])
        return (key.decode() if isinstance(key, bytes) else str(key)), value



@kernel("CreateBlobsQueueDB", needs_context=True)
def create_blobs_queue_db(xp, queue, *, ctx, key_blob_index: int = -1, value_blob_index: int = 0,
                          timeout_secs: float = 0.0):
    if not hasattr(queue, "records"):
        raise ExecutionError(f"{_where(ctx)}: input blob '{ctx.op.input[0]}' is not a blobs queue")
    return QueueDBReader(queue, int(key_blob_index), int(value_blob_index))


@kernel("TensorProtosDBInput", needs_context=True)
def tensor_protos_db_input(xp, reader, *, ctx, batch_size: int = 0):
    """One TensorProtos record per item; output k stacks the k-th protos of `batch_size` records."""
    if not isinstance(reader, (DBReader, QueueDBReader)):
        raise ExecutionError(f"{_where(ctx)}: input blob '{ctx.op.input[0]}' is not a DB reader")
    from proto import caffe2_pb2  # noqa: PLC0415

    items = []
    for _ in range(max(batch_size, 1)):
        protos = caffe2_pb2.TensorProtos.FromString(reader.read()[1]).protos
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
