"""Caffe2's runtime ops for one process: mutexes, atomics, counters, stats and timers, workspace ops,
blob queues, indexes, maps.

Every Caffe2-built training net has some (``optimizer.build_sgd`` puts ``CreateMutex`` in the init
net and ``AtomicIter`` in the train net).  The non-tensor blobs they make (a mutex, a counter, a
stat registry, a queue) are small Python objects.  Threads share them as in Caffe2: a plan's
concurrent substeps and Python feeder threads meet at blob queues, whose reads and writes block
(:mod:`engine.runtime.blocking`, which turns a wait nobody can end into a one-line error), and AtomicIter
holds its mutex.  Counters, indexes and maps serialize as Caffe2's C++ serializers do.
"""
from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from engine.runtime import blobio, blocking
from engine.runtime.device import to_host as dev_host
from engine.errors import ExecutionError
from engine.runtime.grad_makers import should_not_do_gradient
from engine.runtime.plans import EMPTY, UNCHANGED
from engine.catalogue.registry import kernel
from engine.catalogue.registry import shape
from engine.runtime.shapes import BOOL, INT32, INT64, OPAQUE, TensorInfo, dim_op, dims, opaque, same_as
from proto import caffe2_pb2


class CppObject:
    """A blob value standing for one of Caffe2's C++ objects; `cpp_type` is what FetchBlob names."""

    cpp_type: str

    def describe(self, name: str) -> bytes:
        """Caffe2's FetchBlob text for a blob that is not a tensor."""
        return f"{name}, a C++ native class of type {self.cpp_type}.".encode()


@dataclass(eq=False)
class NativeBlob(CppObject):
    """A blob holding a C++ object of a type given per blob (mutexes, atomics, ...)."""

    cpp_type: str
    value: object = None

    def blob_proto(self, name: str) -> caffe2_pb2.BlobProto:
        """Of these Caffe2 serializes only a mutex: its type and no content (layer models'
        checkpoints hold one per AtomicIter / ReservoirSampling); loading makes a new mutex."""
        if self.cpp_type != _MUTEX:
            raise ExecutionError(f"blob '{name}': Caffe2 has no serializer for {self.cpp_type}")
        return caffe2_pb2.BlobProto(name=name, type=_MUTEX, content=b"")


@dataclass(eq=False)
class StatRegistry(CppObject):
    """Named int64 stats (Caffe2's StatRegistry); ``export`` returns keys, values, timestamps."""

    stats: dict[str, int] = field(default_factory=dict)
    cpp_type = "std::unique_ptr<caffe2::StatRegistry>"

    def add(self, key: str, value: int) -> None:
        with _STATE_LOCK:
            self.stats[key] = self.stats.get(key, 0) + int(value)

    def export(self, reset: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        with _STATE_LOCK:
            keys = np.array([k.encode() for k in self.stats], dtype=object)
            values = np.array(list(self.stats.values()), dtype=np.int64)
            if reset:
                self.stats = dict.fromkeys(self.stats, 0)
        stamp = time.time_ns()
        return keys, values, np.full(len(keys), stamp, dtype=np.int64)


GLOBAL_STATS = StatRegistry()
"""The process-wide registry (``StatRegistry::get()``): stat ops without a handle input use it."""


def _scalar(x) -> object:
    return np.asarray(x).reshape(-1)[0]


def _where(ctx) -> str:
    return f"{ctx.net_name or 'net'}: op #{ctx.index} {ctx.op.type} '{ctx.op.name}'"


def _native(ctx, blob, cpp_type: str) -> NativeBlob:
    if not isinstance(blob, NativeBlob) or blob.cpp_type != cpp_type:
        raise ExecutionError(f"{_where(ctx)}: input blob '{ctx.op.input[0]}' is not a {cpp_type}")
    return blob


_STATE_LOCK = threading.RLock()


def _serialized(fn):
    """A kernel that read-modify-writes a shared C++ object (counter, cursor, stats) runs under one
    lock: Caffe2 guards each with a mutex, so threads never interleave their updates."""
    @functools.wraps(fn)
    def locked(*args, **kwargs):
        with _STATE_LOCK:
            return fn(*args, **kwargs)
    return locked


# ---- kernels ----

_MUTEX = "std::unique_ptr<std::mutex>"


@kernel("CreateMutex")
def create_mutex(xp):
    return NativeBlob(_MUTEX, threading.Lock())


blobio.DESERIALIZERS[_MUTEX] = lambda b: create_mutex(None)


def atomic_increment(ctx, it) -> np.ndarray:
    """AtomicIter: the int64 counter + 1, counted in the ``atomic_iter/stats/<blob>/num_iter`` stat
    (the executor holds the op's mutex around it and the store: engine.runtime.executor.MUTEX_OPS)."""
    GLOBAL_STATS.add(f"atomic_iter/stats/{ctx.op.input[1]}/num_iter", 1)
    return (np.asarray(it) + 1).astype(np.int64)


@kernel("AtomicFetchAdd", "AtomicFetchAdd64")
def atomic_fetch_add(xp, _mutex, a, b):
    # NOTE: outputs (a + b, a) as 0-d tensors of a's type (int32, int64 for the 64 variant).
    old = np.asarray(_scalar(a))
    return (old + _scalar(b)).astype(old.dtype), old.copy()


@kernel("CreateAtomicBool")
def create_atomic_bool(xp):
    return NativeBlob("std::unique_ptr<std::atomic<bool>>", False)


@kernel("ConditionalSetAtomicBool", needs_context=True)
def conditional_set_atomic_bool(xp, flag, cond, *, ctx):
    if bool(_scalar(cond)):
        _native(ctx, flag, "std::unique_ptr<std::atomic<bool>>").value = True
    return ()


@kernel("CheckAtomicBool", needs_context=True)
def check_atomic_bool(xp, flag, *, ctx):
    return np.array([bool(_native(ctx, flag, "std::unique_ptr<std::atomic<bool>>").value)])


_COUNTER = "std::unique_ptr<caffe2::Counter<long>>"


@dataclass(eq=False)
class Counter(NativeBlob):
    """Caffe2's ``Counter<int64_t>``; it serializes as a one-element int64 tensor of its count."""

    blob_type = "std::unique_ptr<Counter<int64_t>>"

    def blob_proto(self, name: str) -> caffe2_pb2.BlobProto:
        b = caffe2_pb2.BlobProto(name=name, type=self.blob_type)
        b.tensor.dims.append(1)
        b.tensor.data_type, b.tensor.name = caffe2_pb2.TensorProto.INT64, name
        b.tensor.int64_data.append(int(self.value))
        return b


blobio.DESERIALIZERS[Counter.blob_type] = lambda b: Counter(_COUNTER, int(b.tensor.int64_data[0]))


@kernel("CreateCounter")
def create_counter(xp, *, init_count: int = 0):
    return Counter(_COUNTER, int(init_count))


@kernel("CountDown", needs_context=True)
@_serialized
def count_down(xp, counter, *, ctx):
    # NOTE: done once the count was already <= 0 before this decrement (it keeps going negative).
    c = _native(ctx, counter, _COUNTER)
    c.value -= 1
    return np.array(c.value + 1 <= 0)


@kernel("CountUp", needs_context=True)
@_serialized
def count_up(xp, counter, *, ctx):
    c = _native(ctx, counter, _COUNTER)
    c.value += 1
    return np.array(c.value - 1, dtype=np.int64)


@kernel("CheckCounterDone", needs_context=True)
def check_counter_done(xp, counter, *, ctx):
    return np.array(_native(ctx, counter, _COUNTER).value <= 0)


@kernel("RetrieveCount", needs_context=True)
def retrieve_count(xp, counter, *, ctx):
    return np.array(_native(ctx, counter, _COUNTER).value, dtype=np.int64)


@kernel("ResetCounter", needs_context=True)
@_serialized
def reset_counter(xp, counter, *, ctx, init_count: int = 0):
    c = _native(ctx, counter, _COUNTER)
    old, c.value = c.value, int(init_count)
    return np.array(old, dtype=np.int64)


# -- stats and timers ---------------------------------------------------------------------
@kernel("StatRegistryCreate")
def stat_registry_create(xp):
    return StatRegistry()


def _registry(handle) -> StatRegistry:
    return handle if isinstance(handle, StatRegistry) else GLOBAL_STATS


@kernel("StatRegistryUpdate")
def stat_registry_update(xp, keys, values, handle=None):
    reg = _registry(handle)
    for k, v in zip(np.asarray(keys).reshape(-1), np.asarray(values).reshape(-1)):
        reg.add(k.decode() if isinstance(k, bytes) else str(k), int(v))
    return ()


@kernel("StatRegistryExport")
def stat_registry_export(xp, handle=None, *, reset: bool = True):
    return _registry(handle).export(bool(reset))


@dataclass(eq=False)
class Timer(CppObject):
    """A started timer (``TimerInstance``); its elapsed nanoseconds go to ``<name>/time_ns``."""

    name: str
    start: int = field(default_factory=time.perf_counter_ns)
    cpp_type = "caffe2::TimerInstance*"

    def elapsed(self) -> int:
        return time.perf_counter_ns() - self.start

    def end(self) -> int:
        ns = self.elapsed()
        GLOBAL_STATS.add(f"{self.name}/time_ns/sum", ns)
        GLOBAL_STATS.add(f"{self.name}/time_ns/count", 1)
        return ns


@kernel("TimerBegin", needs_context=True)
def timer_begin(xp, *, ctx, counter_name: str = ""):
    # NOTE: without counter_name the timer is named after its output blob.
    return Timer(counter_name or ctx.op.output[0])


@kernel("TimerEnd")
def timer_end(xp, timer):
    timer.end()
    return ()


@kernel("TimerGetAndEnd")
def timer_get_and_end(xp, timer):
    return np.array([timer.end()], dtype=np.int64)  # NOTE: shape (1,), TimerGet gives a 0-d tensor


@kernel("TimerGet")
def timer_get(xp, timer):
    return np.array(timer.elapsed(), dtype=np.int64)


@kernel("WallClockTime")
def wall_clock_time(xp):
    return np.array(time.time_ns(), dtype=np.int64)


def _put(ctx, x, stat_name: str, magnitude_expand: int, bound: bool, default_value: float = 0.0) -> tuple[str, int]:
    """(key, value): the stat is named `stat_name` (default: input 0) + "/stat_value"; the value is
    the input (`default_value` for an empty one) times magnitude_expand truncated to int64 (clamped
    to int64's range when `bound`)."""
    flat = np.asarray(dev_host(x), np.float64).reshape(-1)
    v = float(flat[0] if flat.size else default_value) * magnitude_expand
    if bound or not np.isfinite(v):
        v = min(max(v, -2.0**63), 2.0**63 - 1024)
        if v >= 2.0**63 - 1024:
            return f"{stat_name or ctx.op.input[0]}/stat_value", 2**63 - 1
    return f"{stat_name or ctx.op.input[0]}/stat_value", int(v)


@kernel("AveragePut", needs_context=True)
def average_put(xp, x, *, ctx, stat_name: str = "", magnitude_expand: int = 1, bound: bool = False,
                default_value: float = 0.0):
    key, v = _put(ctx, x, stat_name, magnitude_expand, bound, default_value)
    GLOBAL_STATS.add(key + "/sum", v)
    GLOBAL_STATS.add(key + "/count", 1)
    return ()


@kernel("IncrementPut", needs_context=True)
def increment_put(xp, x, *, ctx, stat_name: str = "", magnitude_expand: int = 1, bound: bool = False,
                  default_value: float = 0.0):
    key, v = _put(ctx, x, stat_name, magnitude_expand, bound, default_value)
    GLOBAL_STATS.add(key, v)
    return ()


@kernel("StdDevPut", needs_context=True)
def std_dev_put(xp, x, *, ctx, stat_name: str = "", magnitude_expand: int = 1, bound: bool = False,
                default_value: float = 0.0):
    # NOTE: Caffe2 1.10 exports sumoffset and sumsqoffset but leaves both at 0 (measured).
    key, v = _put(ctx, x, stat_name, magnitude_expand, bound, default_value)
    for part, add in (("/sum", v), ("/count", 1), ("/sumoffset", 0), ("/sumsqoffset", 0)):
        GLOBAL_STATS.add(key + part, add)
    return ()


# -- workspace ops ------------------------------------------------------------------------
@kernel("FeedBlob")
def feed_blob(xp, *, value: str = ""):
    return value.encode() if isinstance(value, str) else value


@kernel("GetAllBlobNames", needs_context=True)
def get_all_blob_names(xp, *, ctx, include_shared: bool = True):
    ws = ctx.workspace
    names = ws.blobs() if include_shared or ws.parent is None else sorted(ws.values.local)
    return np.array([n.encode() for n in names], dtype=object)


@kernel("Free", needs_context=True)
def free(xp, *xs, ctx):
    return tuple(EMPTY for _ in ctx.op.output)


@kernel("AliasWithName", needs_context=True)
def alias_with_name(xp, x, *, ctx, name: str = "", is_backward: bool = False):
    if not name:
        raise ExecutionError(f"{_where(ctx)}: You have to specify argument name")
    return x


@kernel("Crash", "LogFatal", "ThrowException", "ThrowChildThreadException", needs_context=True)
def throw(xp, *xs, ctx, message: str = ""):
    """These ops exist to fail; netviz reports the failure as one line instead of aborting."""
    raise ExecutionError(f"{_where(ctx)}: {ctx.op.type} stops the net by design"
                         f"{': ' + message if message else ''}")


# -- queues: blocking as in Caffe2 (engine.runtime.blocking: threads fill and drain them) ------------
@dataclass(eq=False)
class _Queue(CppObject):
    """What both queue kinds share: at most `capacity` records (of `num_blobs` values) under a
    condition variable, and a close that wakes every waiter."""

    capacity: int
    num_blobs: int
    records: list = field(default_factory=list)
    closed: bool = False
    cond: threading.Condition = field(default_factory=threading.Condition, repr=False)

    def close(self) -> None:
        with self.cond:
            self.closed = True
            blocking.notify_all(self.cond)

    def wait(self, ctx, ready, what: str, timeout: float | None = None) -> bool:
        """Wait (holding ``cond``) until `ready()`; False once closed first or timed out."""
        return blocking.wait_until(self.cond, ready, stop=lambda: self.closed, timeout=timeout,
                                   deadlock=lambda: _would_block(ctx, what))

    def put(self, rows: list) -> None:
        self.records.extend(rows)
        blocking.notify_all(self.cond)

    def take(self, n: int) -> list:
        rows, self.records[:n] = self.records[:n], []
        blocking.notify_all(self.cond)
        return rows


class BlobsQueue(_Queue):
    """Caffe2's BlobsQueue: whole records go in and out."""

    cpp_type = "std::shared_ptr<caffe2::BlobsQueue>"

    def write(self, ctx, xs) -> bool:
        """Caffe2's blockingWrite: waits for room; False when closed and full."""
        with self.cond:
            # NOTE: Caffe2 still writes to a closed queue that has room; only a full closed queue refuses.
            if not self.wait(ctx, lambda: len(self.records) < self.capacity,
                             f"queue '{ctx.op.input[0]}' is full ({self.capacity} records)"):
                return False
            self.put([tuple(xs)])
            return True

    def read(self, ctx, timeout: float | None = None) -> tuple | None:
        """Caffe2's blockingRead: the oldest record, waiting for one; None once closed and empty
        (or after `timeout` seconds)."""
        with self.cond:
            if not self.wait(ctx, lambda: bool(self.records), f"queue '{ctx.op.input[0]}' is empty and open",
                             timeout):
                return None
            return self.take(1)[0]


def _queue(ctx, q, k: int = 0):
    if not isinstance(q, _Queue):
        raise ExecutionError(f"{_where(ctx)}: input blob '{ctx.op.input[k]}' is not a queue")
    return q


def _would_block(ctx, what: str) -> ExecutionError:
    return ExecutionError(f"{_where(ctx)}: {what}, and no other thread can change that: it would wait forever")


@kernel("CreateBlobsQueue")
def create_blobs_queue(xp, *, capacity: int = 1, num_blobs: int = 1, enforce_unique_name: bool = False,
                       field_names: list = ()):
    return BlobsQueue(int(capacity), int(num_blobs))


def _kept(ctx, names) -> list:
    """Outputs an op leaves as they were (a refused dequeue, a blob Load did not find): not stored
    again, so a write by another thread meanwhile stays; a blob that does not exist yet is created empty."""
    values = ctx.workspace.values
    return [UNCHANGED if o in values else EMPTY for o in names]


@kernel("EnqueueBlobs", needs_context=True)
def enqueue_blobs(xp, q, *xs, ctx):
    """The blobs move into the queue (Caffe2 swaps them): the inputs are left uninitialized."""
    if not _queue(ctx, q).write(ctx, xs):
        raise ExecutionError(f"{_where(ctx)}: queue '{ctx.op.input[0]}' is closed and full")
    return tuple(EMPTY for _ in xs)


@kernel("SafeEnqueueBlobs", needs_context=True)
def safe_enqueue_blobs(xp, q, *xs, ctx):
    # NOTE: the last output is a 0-d bool status: true when nothing could be enqueued.
    ok = _queue(ctx, q).write(ctx, xs)
    return (*(EMPTY for _ in xs), np.array(not ok))  # NOTE: swapped out even when refused (measured)


@kernel("DequeueBlobs", needs_context=True)
def dequeue_blobs(xp, q, *, ctx, timeout_secs: float = 0.0):
    """The oldest record; waits for one (at most `timeout_secs` when > 0); fails once closed and empty."""
    rec = _queue(ctx, q).read(ctx, float(timeout_secs) if timeout_secs > 0 else None)
    if rec is None:
        why = "is closed and empty" if q.closed else f"gave no record in {timeout_secs} secs (timed out)"
        raise ExecutionError(f"{_where(ctx)}: queue '{ctx.op.input[0]}' {why}")
    return rec


@kernel("SafeDequeueBlobs", needs_context=True)
def safe_dequeue_blobs(xp, q, *, ctx, num_records: int = 1):
    """Up to `num_records` records (each read waits), each blob concatenated along dim 0; the status
    (last output) is true when not even one record came (closed and empty: the outputs keep theirs)."""
    if num_records < 1:
        raise ExecutionError(f"{_where(ctx)}: num_records must be > 0, got {num_records}")
    q, got = _queue(ctx, q), []
    while len(got) < num_records and (rec := q.read(ctx)) is not None:
        got.append(rec)
    n_out = len(ctx.op.output) - 1
    if not got:
        return (*_kept(ctx, ctx.op.output[:n_out]), np.array(True))
    cols = [np.concatenate([np.asarray(r[k]) for r in got]) if len(got) > 1 else got[0][k] for k in range(n_out)]
    return (*cols, np.array(False))


@kernel("WeightedSampleDequeueBlobs", needs_context=True)
def weighted_sample_dequeue_blobs(xp, *queues, ctx, weights: list = (), table_idx_blob: int = -1):
    """Dequeue from one queue picked with probability proportional to `weights`; the last output is
    the status, and output `table_idx_blob` (when >= 0) is overwritten with the picked queue's index."""
    w = np.asarray(weights or [1.0] * len(queues), np.float32)
    if len(w) != len(queues) or not w.sum() > 0:
        raise ExecutionError(f"{_where(ctx)}: {len(w)} weights for {len(queues)} queues, summing to {w.sum()}")
    cum = np.cumsum(w / w.sum(), dtype=np.float32)
    cum[-1] = np.float32(1.0001)  # NOTE: as Caffe2, so r = 1.0 still finds a queue
    k = int(np.searchsorted(cum, np.float32(ctx.rng.random()), side="left"))
    rec = _queue(ctx, queues[k], k).read(ctx)
    n_out = len(ctx.op.output) - 1
    outs = list(rec) if rec is not None else _kept(ctx, ctx.op.output[:n_out])
    if table_idx_blob >= 0:
        outs[table_idx_blob] = np.array([k], np.int32)
    return (*outs, np.array(rec is None))


@kernel("CloseBlobsQueue", "CloseRebatchingQueue", needs_context=True)
def close_blobs_queue(xp, q, *rest, ctx):
    _queue(ctx, q).close()
    return ()


class RebatchingQueue(_Queue):
    """Caffe2's RebatchingQueue: rows of `num_blobs` tensors, re-batched on dequeue."""

    cpp_type = "std::unique_ptr<caffe2::RebatchingQueue>"


@kernel("CreateRebatchingQueue")
def create_rebatching_queue(xp, *, capacity: int = 1, num_blobs: int = 1):
    return RebatchingQueue(int(capacity), int(num_blobs))


@kernel("EnqueueRebatchingQueue", needs_context=True)
def enqueue_rebatching_queue(xp, q, *xs, ctx, enqueue_batch: bool = False):
    """Rows go in as room appears (a batch may be split between waits); closing meanwhile fails the op."""
    q = _queue(ctx, q)
    rows = list(zip(*[np.asarray(x) for x in xs])) if enqueue_batch else [tuple(np.asarray(x) for x in xs)]
    rows = [tuple(np.array(v) for v in r) for r in rows]
    with q.cond:
        while rows:
            if q.closed or not q.wait(ctx, lambda: len(q.records) < q.capacity,
                                      f"queue '{ctx.op.input[0]}' holds {q.capacity} rows"):
                raise ExecutionError(f"{_where(ctx)}: queue '{ctx.op.input[0]}' is closed")
            room = q.capacity - len(q.records)
            q.put(rows[:room])
            rows = rows[room:]
    return ()


@kernel("DequeueRebatchingQueue", needs_context=True)
def dequeue_rebatching_queue(xp, q, *, ctx, num_elements: int = 1):
    """`num_elements` rows stacked on a new first dim, taken as they arrive; fewer once it is closed."""
    q, rows = _queue(ctx, q), []
    with q.cond:
        while len(rows) < num_elements and q.wait(ctx, lambda: bool(q.records),
                                                  f"queue '{ctx.op.input[0]}' has {len(rows)} of "
                                                  f"{num_elements} rows"):
            rows += q.take(num_elements - len(rows))
    if not rows:
        raise ExecutionError(f"{_where(ctx)}: queue '{ctx.op.input[0]}' is closed and empty")
    return tuple(np.stack([r[k] for r in rows]) for k in range(q.num_blobs))


# -- index ops ---------------------------------------------------------------------------
@dataclass(eq=False)
class Index(CppObject):
    """Caffe2's Index: keys get ids 1, 2, … in order of arrival; 0 is 'unknown' (frozen or full)."""

    dtype: object
    max_elements: int
    ids: dict = field(default_factory=dict)
    frozen: bool = False
    cpp_type = "std::unique_ptr<caffe2::IndexBase>"

    def get(self, key) -> int:
        if key in self.ids:
            return self.ids[key]
        if self.frozen:
            return 0
        if self.max_elements and len(self.ids) + 1 >= self.max_elements:
            raise ExecutionError("Dict max size reached")
        self.ids[key] = len(self.ids) + 1
        return self.ids[key]


    def blob_proto(self, name: str) -> caffe2_pb2.BlobProto:
        """Its keys in id order as an unnamed tensor; content ``"<max_elements> <frozen>"``."""
        b = caffe2_pb2.BlobProto(name=name, type=self.cpp_type, content=f"{self.max_elements} {int(self.frozen)}".encode())
        b.tensor.CopyFrom(blobio.tensor_proto("", np.array(sorted(self.ids, key=self.ids.get), dtype=self.dtype)))
        b.tensor.ClearField("name")
        return b


def _load_index(b: caffe2_pb2.BlobProto) -> Index:
    max_elements, frozen = (int(v) for v in b.content.split())
    keys = blobio.tensor_from_proto(b.tensor)
    dtype = keys.dtype.type if keys.dtype != object else object
    return Index(dtype, max_elements, {_key(k): i + 1 for i, k in enumerate(keys)}, bool(frozen))


blobio.DESERIALIZERS[Index.cpp_type] = _load_index

kernel("IntIndexCreate")(lambda xp, *, max_elements=2**31 - 1: Index(np.int32, int(max_elements)))
kernel("LongIndexCreate")(lambda xp, *, max_elements=2**31 - 1: Index(np.int64, int(max_elements)))
kernel("StringIndexCreate")(lambda xp, *, max_elements=2**31 - 1: Index(object, int(max_elements)))


def _index(ctx, h) -> Index:
    if not isinstance(h, Index):
        raise ExecutionError(f"{_where(ctx)}: input blob '{ctx.op.input[0]}' is not an index")
    return h


def _key(v):
    """A hashable key: numpy scalars as Python values, text as UTF-8 bytes (Caffe2 keeps std::string)."""
    v = v.item() if hasattr(v, "item") else v
    return v.encode() if isinstance(v, str) else v


@kernel("IndexGet", needs_context=True)
def index_get(xp, h, keys, *, ctx):
    h, keys = _index(ctx, h), np.asarray(keys)
    return np.array([h.get(_key(k)) for k in keys.reshape(-1)], np.int64).reshape(keys.shape)


@kernel("IndexFreeze", needs_context=True)
def index_freeze(xp, h, *, ctx):
    _index(ctx, h).frozen = True
    return h


@kernel("IndexLoad", needs_context=True)
def index_load(xp, h, items, *, ctx, skip_first_entry: int = 0):
    h = _index(ctx, h)
    for k in np.asarray(items).reshape(-1)[int(bool(skip_first_entry)):]:
        key = _key(k)
        if key in h.ids:
            raise ExecutionError(f"{_where(ctx)}: duplicate key {key!r} in the items to load")
        h.ids[key] = len(h.ids) + 1
    return h


@kernel("IndexStore", needs_context=True)
def index_store(xp, h, *, ctx):
    h = _index(ctx, h)
    keys = sorted(h.ids, key=h.ids.get)
    return np.array(keys, dtype=h.dtype)


@kernel("IndexSize", needs_context=True)
def index_size(xp, h, *, ctx):
    return np.array(len(_index(ctx, h).ids) + 1, np.int64)  # NOTE: counts the reserved id 0


# -- maps: std::unordered_map, with libstdc++'s iteration order ------------------------------
#: libstdc++'s bucket counts (``__prime_list``): a table grows to the first one >= what it needs.
_PRIMES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97, 103,
           109, 113, 127, 137, 139, 149, 157, 167, 179, 193, 199, 211, 227, 241, 257, 277, 293, 313, 337, 359, 383,
           409, 439, 467, 503, 541, 577, 619, 661, 709, 761, 823, 887, 953, 1031, 1109, 1193, 1289, 1381, 1493,
           1613, 1741, 1879, 2029, 2179, 2357, 2549, 2753, 2971, 3209, 3469, 3739, 4027, 4349, 4703, 5087, 5503,
           5953, 6427, 6949, 7517, 8123, 8783, 9497, 10273, 11113, 12011, 12983, 14033, 15173, 16411, 17749, 19183,
           20753, 22447, 24281, 26267, 28411, 30727, 33223, 35933, 38873, 42043, 45481, 49201, 53201, 57557, 62233,
           67307, 72817, 78779, 85229, 92203, 99733, 107897, 116731, 126271, 136607, 147793, 159871, 172933,
           187091, 202409, 218971, 236897, 256279, 277261, 299951, 324503, 351061, 379787, 410857, 444487, 480881,
           520241, 562841, 608903, 658753, 712697, 771049, 834181, 902483, 976369, 1056323, 1142821, 1236397,
           1337629, 1447153, 1565659, 1693859, 1832561, 1982627, 2144977, 2320627, 2510653, 2716249, 2938679,
           3179303, 3439651, 3721303, 4026031, 4355707, 4712381, 5098259, 5515729, 5967347, 6456007, 6984629,
           7556579, 8175383, 8844859, 9569143, 10352717)
_FAST_BUCKETS = (2, 2, 2, 3, 5, 5, 7, 7, 11, 11, 11, 11, 13, 13)
_CPP_INT = {np.dtype(np.int32): "int", np.dtype(np.int64): "long int"}
_C2_INT = {np.dtype(np.int32): "int32_t", np.dtype(np.int64): "int64_t"}
_HEAD = object()


@dataclass(eq=False)
class UnorderedMap(CppObject):
    """Caffe2's map blob (``std::unordered_map<K, V>`` of int32/int64), iterated in libstdc++'s order.

    Why simulate the hash table: MapToKeyValue and the map's serialized bytes list the entries in
    the container's order, which is neither insertion nor key order (e.g. small maps come out newest
    key first).  The table here is libstdc++'s: one singly linked list grouped by bucket (a new
    bucket's node goes to the front, a node joins the front of its bucket's group), buckets from its
    prime list (11 on the first insert, then at least doubling when the load factor passes 1).
    Beyond the primes listed (maps over ~10 million keys) the order is a best effort.
    """

    key_dtype: np.dtype
    value_dtype: np.dtype
    values: dict = field(default_factory=dict)
    _next: dict = field(default_factory=dict)
    _before: dict = field(default_factory=dict)  # bucket -> the node before its first node (_HEAD: the list head)
    _buckets: int = 1
    _next_resize: int = 0

    @property
    def cpp_type(self) -> str:
        k, v = _CPP_INT[self.key_dtype], _CPP_INT[self.value_dtype]
        return f"std::unordered_map<{k}, {v}, std::hash<{k}>, std::equal_to<{k}>, " \
               f"std::allocator<std::pair<const {k}, {v}> > >"

    @property
    def blob_type(self) -> str:
        return f"(std::unordered_map<{_C2_INT[self.key_dtype]}, {_C2_INT[self.value_dtype]}>)"

    def _bucket(self, key: int, n: int) -> int:
        return (key % 2**64) % n  # NOTE: std::hash of an integer is the value as size_t

    def _link(self, node, after) -> None:
        self._next[node] = self._next.get(after)
        self._next[after] = node

    def _grow_to(self, need: int) -> None:
        """libstdc++'s _Prime_rehash_policy: rehash once `need` elements pass the resize mark."""
        if need <= self._next_resize:
            return
        min_buckets = max(need, 0 if self._next_resize else 11)  # NOTE: the first insert asks for 11
        if min_buckets < self._buckets:
            self._next_resize = self._buckets
            return
        want = max(min_buckets + 1, self._buckets * 2)
        n = _FAST_BUCKETS[want] if want < len(_FAST_BUCKETS) else \
            next((p for p in _PRIMES[6:] if p >= want), 0) or _next_prime(want)
        order, self._next, self._before = self.keys(), {}, {}
        self._buckets = self._next_resize = n
        head_bucket = None
        for node in order:  # relinked in list order: as libstdc++'s rehash walks it
            b = self._bucket(node, n)
            if b in self._before:
                self._link(node, self._before[b])
                continue
            self._link(node, _HEAD)
            self._before[b] = _HEAD
            if self._next[node] is not None:
                self._before[head_bucket] = node
            head_bucket = b

    def emplace(self, key, value) -> None:
        """Insert `key` unless present (std::unordered_map::emplace)."""
        key = int(key)
        if key in self.values:
            return
        self._grow_to(len(self.values) + 1)
        self.values[key] = value
        b = self._bucket(key, self._buckets)
        if b in self._before:
            self._link(key, self._before[b])
            return
        first = self._next.get(_HEAD)
        self._link(key, _HEAD)
        if first is not None:
            self._before[self._bucket(first, self._buckets)] = key
        self._before[b] = _HEAD

    def erase(self, key) -> None:
        """Remove `key` if present (std::unordered_map::erase): unlinked from the list; a bucket
        it began hands its predecessor to the next node's bucket or empties; no rehash."""
        key = int(key)
        if key not in self.values:
            return
        b = self._bucket(key, self._buckets)
        prev = self._before[b]
        while self._next[prev] != key:
            prev = self._next[prev]
        nxt = self._next.pop(key)
        nb = None if nxt is None else self._bucket(nxt, self._buckets)
        if prev == self._before[b]:  # NOTE: the bucket's first node
            if nb != b:
                if nxt is not None:
                    self._before[nb] = self._before[b]
                del self._before[b]
        elif nb is not None and nb != b:
            self._before[nb] = prev
        self._next[prev] = nxt
        del self.values[key]

    def keys(self) -> list[int]:
        """The keys in the container's iteration order."""
        out, node = [], self._next.get(_HEAD)
        while node is not None:
            out.append(node)
            node = self._next[node]
        return out

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        keys = self.keys()
        return np.array(keys, self.key_dtype), np.array([self.values[k] for k in keys], self.value_dtype)

    def blob_proto(self, name: str) -> caffe2_pb2.BlobProto:
        """Keys and values as two unnamed tensors of a TensorProtos in the content."""
        protos = caffe2_pb2.TensorProtos()
        for a in self.arrays():
            t = protos.protos.add()
            t.CopyFrom(blobio.tensor_proto("", a))
            t.ClearField("name")
        return caffe2_pb2.BlobProto(name=name, type=self.blob_type, content=protos.SerializeToString())


def _next_prime(n: int) -> int:
    while any(n % d == 0 for d in range(2, int(n**0.5) + 1)):
        n += 1
    return n


def _load_map(b: caffe2_pb2.BlobProto) -> UnorderedMap:
    keys, values = (blobio.tensor_from_proto(t) for t in caffe2_pb2.TensorProtos.FromString(b.content).protos)
    m = UnorderedMap(keys.dtype, values.dtype)
    for k, v in zip(keys.tolist(), values.tolist()):
        m.emplace(k, v)
    return m


for _k in (np.int32, np.int64):
    for _v in (np.int32, np.int64):
        blobio.DESERIALIZERS[UnorderedMap(np.dtype(_k), np.dtype(_v)).blob_type] = _load_map


# -- communicators (gloo/MPI) for a world of one process ----------------------------------
@dataclass(eq=False)
class CommonWorld(CppObject):
    size: int = 1
    rank: int = 0
    cpp_type = "std::shared_ptr<::gloo::Context>"


@kernel("CreateCommonWorld", needs_context=True)
def create_common_world(xp, *kv, ctx, size: int = 1, rank: int = 0, timeout_ms: int = -1, transport: str = "tcp",
                        interface: str = "", mpi_rendezvous: bool = False, status_blob: str = ""):
    if size != 1:
        raise ExecutionError(f"{_where(ctx)}: netviz runs one process; a common world of size {size} needs "
                             f"{size} processes")
    return CommonWorld(1, int(rank))


kernel("CloneCommonWorld")(lambda xp, comm, *rest: CommonWorld(comm.size, comm.rank))
kernel("DestroyCommonWorld")(lambda xp, comm, *rest: comm)


@kernel("Allreduce", "Broadcast", "Reduce", "Allgather", "ReduceScatter", needs_context=True)
def collective(xp, comm, *xs, ctx, root: int = 0, status_blob: str = ""):
    """With one process every collective leaves each tensor as it is."""
    if not isinstance(comm, CommonWorld) or comm.size != 1:
        raise ExecutionError(f"{_where(ctx)}: input blob '{ctx.op.input[0]}' is not a common world of size 1")
    return tuple(x.copy() if hasattr(x, "copy") else x for x in xs)


@kernel("Barrier")
def barrier(xp, comm, *rest):
    return ()


@kernel("SendTensor", "ReceiveTensor", needs_context=True)
def send_receive(xp, *xs, ctx, **_):
    raise ExecutionError(f"{_where(ctx)}: {ctx.op.type} needs a peer process; netviz runs a world of one")


# -- stores (a key-value store shared by the processes of a job; here, by the threads of this one) --
_STORES: dict[str, dict] = {}
_STORE_CHANGED = threading.Condition()
"""Notified on every StoreSet/StoreAdd: StoreGet/StoreWait block until their keys are there."""


@dataclass(eq=False)
class StoreHandler(CppObject):
    path: str
    prefix: str = ""
    cpp_type = "std::unique_ptr<caffe2::StoreHandler>"

    @property
    def data(self) -> dict:
        return _STORES.setdefault(f"{self.path}/{self.prefix}", {})

    def wait_for(self, ctx, keys: list[str]) -> None:
        """Block (holding _STORE_CHANGED) until every key is set by another thread."""
        blocking.wait_until(_STORE_CHANGED, lambda: all(k in self.data for k in keys), stop=lambda: False,
                            timeout=None, deadlock=lambda: _would_block(
                                ctx, f"keys {[k for k in keys if k not in self.data]} are not in the store"))


@kernel("FileStoreHandlerCreate")
def file_store_handler_create(xp, *, path: str = "", prefix: str = ""):
    return StoreHandler(path, prefix)


@kernel("StoreSet", needs_context=True)
def store_set(xp, h, value, *, ctx, blob_name: str = ""):
    with _STORE_CHANGED:
        h.data[blob_name or ctx.op.input[1]] = value.copy() if hasattr(value, "copy") else value
        blocking.notify_all(_STORE_CHANGED)
    return ()


@kernel("StoreGet", needs_context=True)
def store_get(xp, h, *, ctx, blob_name: str = ""):
    key = blob_name or ctx.op.output[0]
    with _STORE_CHANGED:
        h.wait_for(ctx, [key])
        return h.data[key]


@kernel("StoreAdd", needs_context=True)
def store_add(xp, h, *, ctx, blob_name: str = "", add_value: int = 1):
    with _STORE_CHANGED:
        h.data[blob_name] = int(h.data.get(blob_name, 0)) + int(add_value)
        blocking.notify_all(_STORE_CHANGED)
        return np.array(h.data[blob_name], np.int64)


@kernel("StoreWait", needs_context=True)
def store_wait(xp, h, *names, ctx, blob_names: list = ()):
    want = [n.decode() if isinstance(n, bytes) else str(n) for n in (np.asarray(names[0]).reshape(-1) if names
                                                                     else blob_names)]
    with _STORE_CHANGED:
        h.wait_for(ctx, want)
    return ()


@kernel("AsyncNetBarrier", "DataCouple")
def pass_through(xp, *xs, cross_device: bool = False):
    return xs


# -- datasets: a tree of fields (``a``, ``b:lengths``, ``b:values``…) read by a cursor -------
def _domains(fields: list[str]) -> tuple[list[int], list[int]]:
    """Per field its domain (0 = top-level records; k + 1 = items of the k-th lengths field),
    and per lengths field the field index that holds it (Caffe2's TreeIterator layout)."""
    lengths = [i for i, f in enumerate(fields) if f.split(":")[-1] == "lengths"]
    prefixes = [fields[i][:-len("lengths")] for i in lengths]
    dom = []
    for i, f in enumerate(fields):
        best = 0
        for k, (li, pre) in enumerate(zip(lengths, prefixes)):
            if i != li and f.startswith(pre) and len(pre) > len(prefixes[best - 1] if best else ""):
                best = k + 1
        dom.append(best)
    return dom, lengths


@dataclass(eq=False)
class TreeCursor(CppObject):
    """Caffe2's TreeCursor: the offset reached in each domain of a dataset's fields."""

    fields: list
    offsets: list = field(default_factory=list)
    cpp_type = "std::unique_ptr<caffe2::dataset_ops::TreeCursor>"


    blob_type = "std::unique_ptr<TreeCursor>"

    def blob_proto(self, name: str) -> caffe2_pb2.BlobProto:
        """Its fields space-terminated in the content; its offsets (once it has read) as an int64 tensor."""
        b = caffe2_pb2.BlobProto(name=name, type=self.blob_type, content="".join(f + " " for f in self.fields).encode())
        if self.offsets:
            b.tensor.CopyFrom(blobio.tensor_proto("", np.array(self.offsets, np.int64)))
            b.tensor.ClearField("name")
        return b


blobio.DESERIALIZERS[TreeCursor.blob_type] = lambda b: TreeCursor(
    [f.decode() for f in b.content.split()],
    blobio.tensor_from_proto(b.tensor).tolist() if b.HasField("tensor") else [])


@kernel("CreateTreeCursor")
def create_tree_cursor(xp, *, fields: list = ()):
    return TreeCursor([f.decode() if isinstance(f, bytes) else f for f in fields])


def _advance(ctx, cursor: TreeCursor, data, num: int) -> tuple[list[int], list[int]]:
    """(start offsets, sizes) per domain for the next `num` top-level records, and move the cursor."""
    dom, lengths = _domains(cursor.fields)
    if len(data) != len(cursor.fields):
        raise ExecutionError(f"{_where(ctx)}: {len(data)} field blobs for {len(cursor.fields)} cursor fields")
    n_dom = len(lengths) + 1
    if not cursor.offsets:
        cursor.offsets = [0] * n_dom
    limits = [np.asarray(data[dom.index(0)]).shape[0] if 0 in dom else 0] + \
        [int(np.asarray(data[li]).sum()) for li in lengths]
    start = list(cursor.offsets)
    sizes = [0] * n_dom
    sizes[0] = max(0, min(num, limits[0] - start[0]))
    for k, li in enumerate(lengths):
        p = dom[li]
        seg = np.asarray(data[li]).reshape(-1)[start[p]:start[p] + sizes[p]]
        sizes[k + 1] = int(seg.sum())
    cursor.offsets = [o + z for o, z in zip(start, sizes)]
    return start, sizes


def _slices(data, dom, start, sizes):
    return tuple(np.asarray(d)[start[dom[i]]:start[dom[i]] + sizes[dom[i]]] for i, d in enumerate(data))


@kernel("ReadNextBatch", needs_context=True)
@_serialized
def read_next_batch(xp, cursor, *data, ctx, batch_size: int = 1, enforce_batch_size: bool = False):
    """The next `batch_size` top-level records of every field (empty slices once the data ends)."""
    dom, _ = _domains(cursor.fields)
    before = list(cursor.offsets)
    start, sizes = _advance(ctx, cursor, data, batch_size)
    if enforce_batch_size and sizes[0] < batch_size:
        cursor.offsets = before or cursor.offsets
        sizes = [0] * len(sizes)
    return _slices(data, dom, start, sizes)


@kernel("ResetCursor")
@_serialized
def reset_cursor(xp, cursor):
    cursor.offsets = []
    return ()


@kernel("GetCursorOffset")
def get_cursor_offset(xp, cursor):
    return np.array(cursor.offsets or [0], np.int32)


@kernel("ComputeOffset", needs_context=True)
def compute_offset(xp, cursor, *data, ctx):
    """Per top-level record (and one past the end) the offset of its data in every domain."""
    probe = TreeCursor(cursor.fields)
    rows = []
    while True:
        start, sizes = _advance(ctx, probe, data, 1)
        rows.append(start)
        if sizes[0] == 0:
            break
    return np.array(rows, np.int64)


@kernel("CheckDatasetConsistency", needs_context=True)
def check_dataset_consistency(xp, *data, ctx, fields: list = ()):
    names = [f.decode() if isinstance(f, bytes) else f for f in fields]
    dom, lengths = _domains(names)
    for k, li in enumerate(lengths):
        total = int(np.asarray(data[li]).sum())
        for i, d in enumerate(dom):
            if d == k + 1 and np.asarray(data[i]).shape[0] != total:
                raise ExecutionError(f"{_where(ctx)}: field '{names[i]}' has {np.asarray(data[i]).shape[0]} "
                                     f"items, its lengths '{names[li]}' sum to {total}")
    return ()


@kernel("Append", needs_context=True)
def append(xp, a, b, *, ctx):
    a, b = np.asarray(a), np.asarray(b)
    if a.shape[1:] != b.shape[1:]:
        raise ExecutionError(f"{_where(ctx)}: cannot append {b.shape} to {a.shape}")
    return np.concatenate([a, b])


@kernel("AtomicAppend", needs_context=True)
def atomic_append(xp, _mutex, *ab, ctx):
    n = len(ab) // 2
    return tuple(append(xp, a, b, ctx=ctx) for a, b in zip(ab[:n], ab[n:]))


@kernel("TrimDataset", needs_context=True)
def trim_dataset(xp, *data, ctx, fields: list = (), multiple_of: int = 1):
    """Keep the first top-level records, a multiple of `multiple_of` of them."""
    cursor = TreeCursor([f.decode() if isinstance(f, bytes) else f for f in fields])
    dom, _ = _domains(cursor.fields)
    total = np.asarray(data[dom.index(0)]).shape[0] if 0 in dom else 0
    start, sizes = _advance(ctx, cursor, data, total - total % max(multiple_of, 1))
    return _slices(data, dom, start, sizes)


@kernel("PackRecords", needs_context=True)
def pack_records(xp, *data, ctx, fields: list = ()):
    """One object per top-level record: the slice of every field that belongs to it."""
    cursor = TreeCursor([f.decode() if isinstance(f, bytes) else f for f in fields])
    dom, _ = _domains(cursor.fields)
    records = []
    while True:
        start, sizes = _advance(ctx, cursor, data, 1)
        if sizes[0] == 0:
            break
        records.append(_slices(data, dom, start, sizes))
    out = np.empty(len(records), dtype=object)
    out[:] = records
    return out


@kernel("UnPackRecords", needs_context=True)
def unpack_records(xp, packed, *protos, ctx, fields: list = ()):
    n = len(ctx.op.output)
    if any(rec is None for rec in packed):
        # NOTE: a loaded pack: Caffe2 serializes no record contents (blobio.PACKED_RECORD) and crashes here
        raise ExecutionError(f"{_where(ctx)}: '{ctx.op.input[0]}' holds null records (loaded from a serialized pack)")
    if len(packed) == 0:
        return tuple(np.asarray(p)[:0] if protos else np.zeros(0, np.float32) for p in (protos or [None] * n))
    return tuple(np.concatenate([rec[k] for rec in packed]) for k in range(n))


_MINSTD_M = 2**31 - 1
_MINSTD_RANGE = _MINSTD_M - 2  # max() - min() of std::minstd_rand0 (1 .. 2^31 - 2)


def _minstd_uniform(state: list[int], hi: int) -> int:
    """libstdc++'s uniform_int_distribution(0, hi) on std::minstd_rand0 (`state` = [x]): scale down,
    rejecting draws past the last whole bucket."""
    buckets = hi + 1
    scaling = _MINSTD_RANGE // buckets
    while True:
        state[0] = state[0] * 16807 % _MINSTD_M
        draw = state[0] - 1
        if draw < buckets * scaling:
            return draw // scaling


def _cpp_shuffle(v: list) -> list:
    """``std::shuffle(v, std::default_random_engine())`` as libstdc++ does it (a fresh engine, seed 1;
    two swap positions from one draw while the range allows), checked on the oracle for 2..33 items."""
    n, state = len(v), [1]
    if n < 2:
        return v
    i = 1
    if n % 2 == 0:
        j = _minstd_uniform(state, 1)
        v[i], v[j] = v[j], v[i]
        i += 1
    while i < n:
        pair = _minstd_uniform(state, (i + 1) * (i + 2) - 1)
        for j in divmod(pair, i + 2):
            v[i], v[j] = v[j], v[i]
            i += 1
    return v


@kernel("SortAndShuffle", needs_context=True)
def sort_and_shuffle(xp, cursor, *data, ctx, sort_by_field_idx: int = 1, batch_size: int = 1,
                     shuffle_size: int = 1):
    """Caffe2's record order: sorted by a top-level field (-1: none), shuffled within windows of
    batch_size * shuffle_size, then whole batches shuffled; the leftover records stay last.

    NOTE: Caffe2's shuffles use a fresh std::default_random_engine each time, so the order is the
    same on every run (emulated by :func:`_cpp_shuffle`); its std::sort is stable only up to 16
    records, here ties keep their order at any size.
    """
    if batch_size <= 0 or shuffle_size <= 0:
        raise ExecutionError(f"{_where(ctx)}: batch_size and shuffle_size must be > 0")
    key = np.asarray(data[sort_by_field_idx if sort_by_field_idx >= 0 else 0]).reshape(-1)
    size = key.shape[0]
    order = np.argsort(key, kind="stable").tolist() if sort_by_field_idx >= 0 else list(range(size))
    if batch_size * shuffle_size > size:
        shuffle_size = size // batch_size
    window = batch_size * shuffle_size
    if window > 1:
        for start in range(0, size - window, window):  # NOTE: windows that end before the last record
            order[start:start + window] = _cpp_shuffle(order[start:start + window])
    n_batches = size // batch_size
    picked = [order[b * batch_size:(b + 1) * batch_size] for b in _cpp_shuffle(list(range(n_batches)))]
    return np.array(sum(picked, []) + order[n_batches * batch_size:], np.int64)


@kernel("ReadRandomBatch", needs_context=True)
@_serialized
def read_random_batch(xp, cursor, idx, offsets, *data, ctx, batch_size: int = 1, enforce_batch_size: bool = False,
                      loop_over: bool = False):
    """The records named by `idx[cursor: cursor + batch_size]` (offsets from ComputeOffset), concatenated."""
    dom, _ = _domains(cursor.fields)
    idx, offsets = np.asarray(idx).reshape(-1), np.asarray(offsets)
    # NOTE: Caffe2 keeps one offset and always moves it by batch_size (an incomplete batch under
    # enforce_batch_size reads nothing); loop_over restarts once it has passed the end.
    pos = next_pos = cursor.offsets[0] if cursor.offsets else 0
    if enforce_batch_size and pos + batch_size > idx.size:
        pos = idx.size
    if loop_over and pos >= idx.size:
        pos = next_pos = 0
    take = idx[pos:pos + batch_size]
    cursor.offsets = [next_pos + batch_size]
    out = []
    for i, d in enumerate(data):
        k, arr = dom[i], np.asarray(d)
        parts = [arr[offsets[r, k]:offsets[r + 1, k]] for r in take]
        out.append(np.concatenate(parts) if parts else arr[:0])
    return tuple(out)


# -- tensor vectors ----------------------------------------------------------------------
@kernel("CreateTensorVector")
def create_tensor_vector(xp):
    return NativeBlob("std::unique_ptr<std::vector<caffe2::Tensor>>", [])


kernel("TensorVectorSize")(lambda xp, vec: np.array(len(vec.value), np.int32))


@kernel("ConcatTensorVector")
def concat_tensor_vector(xp, vec):
    return np.concatenate([np.asarray(v) for v in vec.value]) if vec.value else np.zeros(0, np.float32)


@kernel("CollectTensor", needs_context=True)
def collect_tensor(xp, *ins, ctx, num_to_collect: int = 1):
    """Reservoir sampling of the given tensors into the tensor vectors (first half of the inputs)."""
    n = len(ins) // 2
    vecs, xs = ins[:n], ins[n:]
    seen = getattr(vecs[0], "seen", 0) + 1
    for v in vecs:
        v.seen = seen
    slot = len(vecs[0].value) if len(vecs[0].value) < num_to_collect else int(ctx.rng.integers(seen))
    if slot < num_to_collect:
        for v, x in zip(vecs, xs):
            if slot < len(v.value):
                v.value[slot] = np.array(x)
            else:
                v.value.append(np.array(x))
    return vecs


# -- text file reader ---------------------------------------------------------------------
@dataclass(eq=False)
class TextFileReader(CppObject):
    filename: str
    num_passes: int
    field_types: list
    rows: list = field(default_factory=list)
    pos: int = 0
    passes: int = 0
    cpp_type = "std::unique_ptr<caffe2::TextFileReaderInstance>"


@kernel("CreateTextFileReader", needs_context=True)
def create_text_file_reader(xp, *, ctx, filename: str = "", num_passes: int = 1, field_types: list = ()):
    try:
        with open(filename, encoding="utf-8") as f:  # NOTE: closed here, not at GC (a ResourceWarning)
            lines = f.read().splitlines()
    except OSError as e:
        raise ExecutionError(f"{_where(ctx)}: cannot read {filename}: {e.strerror}") from None
    return TextFileReader(filename, int(num_passes), list(field_types), [ln.split("\t") for ln in lines if ln])


@kernel("TextFileReaderRead", needs_context=True)
def text_file_reader_read(xp, reader, *, ctx, batch_size: int = 1):
    """Up to `batch_size` tab-separated rows, one output per field, typed by the reader's field_types."""
    from engine.runtime.blobio import _TYPES  # noqa: PLC0415

    rows = []
    while len(rows) < batch_size and reader.passes < reader.num_passes and reader.rows:
        rows.append(reader.rows[reader.pos])
        reader.pos += 1
        if reader.pos == len(reader.rows):
            reader.pos, reader.passes = 0, reader.passes + 1
    out = []
    for k, t in enumerate(reader.field_types):
        np_type = _TYPES[int(t)][0]
        col = [r[k] for r in rows]
        out.append(np.array([c.encode() for c in col], dtype=object) if np_type is object
                   else np.array(col, dtype=np.float64).astype(np_type))
    return tuple(out)


# ---- gradients ----
should_not_do_gradient("CreateMutex", "AtomicFetchAdd", "CreateAtomicBool", "ConditionalSetAtomicBool",
                       "CheckAtomicBool", "CreateCounter", "CountDown", "CountUp", "RetrieveCount", "ResetCounter",
                       "FeedBlob", "LogFatal", "ThrowException", "ThrowChildThreadException")


# ---- shapes ----

shape("AtomicFetchAdd", "AtomicFetchAdd64")(lambda m, a, b: (TensorInfo((), a.dtype), TensorInfo((), a.dtype)))
shape("CheckAtomicBool")(lambda f: TensorInfo((1,), BOOL))
shape("CountDown", "CheckCounterDone")(lambda c: TensorInfo((), BOOL))
shape("CountUp", "RetrieveCount", "ResetCounter", "TimerGet", "WallClockTime")(lambda *_: TensorInfo((), INT64))
shape("TimerGetAndEnd")(lambda t: TensorInfo((1,), INT64))
shape("AliasWithName")(same_as(0))

# NOTE: what these make is an object (queue, DB, reader, mutex, index, timer, common world) or whatever
# data passes through it at run time: Caffe2's inference knows nothing there either.
shape("CreateAtomicBool", "CreateBlobsQueue", "CreateCommonWorld", "CloneCommonWorld", "CreateCounter", "CreateMutex",
      "CreateRebatchingQueue", "CreateTensorVector", "CreateTextFileReader", "CreateTreeCursor",
      "FileStoreHandlerCreate", "IntIndexCreate", "LongIndexCreate", "StringIndexCreate", "StatRegistryCreate",
      "TimerBegin", "IndexFreeze", "IndexLoad", "DequeueBlobs", "WeightedSampleDequeueBlobs",
      "DequeueRebatchingQueue", "ReadNextBatch", "ReadRandomBatch", "ReceiveTensor", "TextFileReaderRead",
      "UnPackRecords", "PackRecords", "CollectTensor", "ConcatTensorVector", "StoreGet", "FeedBlob", "Free",
      "Allgather", "ReduceScatter", "EnqueueBlobs", "EnqueueRebatchingQueue",
      # no outputs at all
      "Barrier", "CloseBlobsQueue", "CloseRebatchingQueue", "Crash", "DestroyCommonWorld", "IncrementPut",
      "AveragePut", "StdDevPut", "LogFatal", "SendTensor", "StoreSet", "StoreWait", "ThrowException",
      "ThrowChildThreadException", "TimerEnd", "StatRegistryUpdate", "ResetCursor", "CheckDatasetConsistency",
      "ConditionalSetAtomicBool")(opaque)


@shape("SafeDequeueBlobs", "SafeEnqueueBlobs")
def safe_queue_shape(*_, n_out):
    # NOTE: the records (or the moved-out inputs) are the queue's business; the last output is a 0-d status.
    return (OPAQUE,) * (n_out - 1) + (TensorInfo((), BOOL),)


def _appended(a: TensorInfo, b: TensorInfo) -> TensorInfo:
    ad, bd = dims(a), dims(b)
    return TensorInfo((dim_op(lambda x, y: x + y, ad[0], bd[0]), *ad[1:]), a.dtype)


shape("Append")(_appended)
shape("AtomicAppend")(lambda mutex, *ab: tuple(_appended(a, b) for a, b in zip(ab[:len(ab) // 2], ab[len(ab) // 2:])))
shape("TrimDataset")(lambda *data: tuple(TensorInfo((None, *dims(d)[1:]), d.dtype) for d in data))
shape("SortAndShuffle")(lambda cursor, *data: TensorInfo((None,), INT64))
shape("ComputeOffset")(lambda cursor, *data: TensorInfo((None, None), INT64))
shape("GetCursorOffset")(lambda cursor: TensorInfo((None,), INT32))
shape("IndexGet")(lambda h, keys: TensorInfo(keys.shape, INT64))  # NOTE: Caffe2's inference says 0-d; its kernel keys' shape
shape("IndexSize", "StoreAdd")(lambda *_: TensorInfo((), INT64))
shape("IndexStore")(lambda h: TensorInfo((None,), None))
shape("TensorVectorSize")(lambda vec: TensorInfo((), INT32))
shape("GetAllBlobNames")(lambda: TensorInfo((None,), None))
shape("StatRegistryExport")(lambda *_: (TensorInfo((None,), None), TensorInfo((None,), INT64), TensorInfo((None,), INT64)))
shape("AsyncNetBarrier", "DataCouple")(lambda *xs: xs)
shape("Allreduce", "Broadcast", "Reduce")(lambda comm, *xs: xs)  # NOTE: one process: each tensor as it was
shape("Onnxifi")(opaque)  # NOTE: the ONNXIFI backend library decides; netviz has none
