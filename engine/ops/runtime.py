"""Caffe2's runtime ops for one process: mutexes, atomics, counters, stats and timers, workspace ops.

Every Caffe2-built training net has some (``optimizer.build_sgd`` puts ``CreateMutex`` in the init
net and ``AtomicIter`` in the train net).  The non-tensor blobs they make (a mutex, a counter, a
stat registry) are small Python objects; netviz runs one op at a time, so the "atomic" ones need
no lock, only Caffe2's values and dtypes.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from engine.errors import ExecutionError
from engine.grad_makers import should_not_do_gradient
from engine.registry import kernel
from engine.registry import shape
from engine.shapes import BOOL, INT64, TensorInfo, same_as


@dataclass(eq=False)
class NativeBlob:
    """A blob holding one of Caffe2's C++ objects; `cpp_type` is what Caffe2's FetchBlob names."""

    cpp_type: str
    value: object = None

    def describe(self, name: str) -> bytes:
        """Caffe2's FetchBlob text for a blob that is not a tensor."""
        return f"{name}, a C++ native class of type {self.cpp_type}.".encode()


@dataclass(eq=False)
class StatRegistry:
    """Named int64 stats (Caffe2's StatRegistry); ``export`` returns keys, values, timestamps."""

    stats: dict[str, int] = field(default_factory=dict)
    cpp_type = "std::unique_ptr<caffe2::StatRegistry>"

    def add(self, key: str, value: int) -> None:
        self.stats[key] = self.stats.get(key, 0) + int(value)

    def export(self, reset: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        keys = np.array([k.encode() for k in self.stats], dtype=object)
        values = np.array(list(self.stats.values()), dtype=np.int64)
        if reset:
            self.stats = dict.fromkeys(self.stats, 0)
        stamp = time.time_ns()
        return keys, values, np.full(len(keys), stamp, dtype=np.int64)

    def describe(self, name: str) -> bytes:
        return f"{name}, a C++ native class of type {self.cpp_type}.".encode()


GLOBAL_STATS = StatRegistry()
"""The process-wide registry (``StatRegistry::get()``): stat ops without a handle input use it."""


def _scalar(x) -> object:
    return np.asarray(x).reshape(-1)[0]


def _where(ctx) -> str:
    return f"{ctx.net_name or '<op>'}: op #{ctx.index} {ctx.op.type} '{ctx.op.name}'"


def _native(ctx, blob, cpp_type: str) -> NativeBlob:
    if not isinstance(blob, NativeBlob) or blob.cpp_type != cpp_type:
        raise ExecutionError(f"{_where(ctx)}: input blob '{ctx.op.input[0]}' is not a {cpp_type}")
    return blob


# ---- kernels ----

@kernel("CreateMutex")
def create_mutex(xp):
    return NativeBlob("std::unique_ptr<std::mutex>")


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


@kernel("CreateCounter")
def create_counter(xp, *, init_count: int = 0):
    return NativeBlob(_COUNTER, int(init_count))


@kernel("CountDown", needs_context=True)
def count_down(xp, counter, *, ctx):
    # NOTE: done once the count was already <= 0 before this decrement (it keeps going negative).
    c = _native(ctx, counter, _COUNTER)
    c.value -= 1
    return np.array(c.value + 1 <= 0)


@kernel("CountUp", needs_context=True)
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
class Timer:
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

    def describe(self, name: str) -> bytes:
        return f"{name}, a C++ native class of type {self.cpp_type}.".encode()


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


def _put_key(ctx, name: str) -> str:
    # NOTE: Caffe2 1.10 names the stat after input 0 whatever `name` says (measured).
    return f"{ctx.op.input[0]}/stat_value"


@kernel("AveragePut", needs_context=True)
def average_put(xp, x, *, ctx, name: str = "", magnitude_expand: int = 1, bound: bool = False,
                default_value: float = 0.0):
    key, v = _put_key(ctx, name), int(float(_scalar(x)) * magnitude_expand)
    GLOBAL_STATS.add(key + "/sum", v)
    GLOBAL_STATS.add(key + "/count", 1)
    return ()


@kernel("IncrementPut", needs_context=True)
def increment_put(xp, x, *, ctx, name: str = "", magnitude_expand: int = 1, bound: bool = False,
                  default_value: float = 0.0):
    GLOBAL_STATS.add(_put_key(ctx, name), int(float(_scalar(x)) * magnitude_expand))
    return ()


@kernel("StdDevPut", needs_context=True)
def std_dev_put(xp, x, *, ctx, name: str = "", magnitude_expand: int = 1, bound: bool = False,
                default_value: float = 0.0):
    key, v = _put_key(ctx, name), int(float(_scalar(x)) * magnitude_expand)
    reg = GLOBAL_STATS
    if reg.stats.get(key + "/count", 0) == 0:  # NOTE: the first value is the offset of the sums
        reg.stats[key + "/sumoffset"] = v
        reg.stats[key + "/sumsqoffset"] = v
    off = reg.stats.get(key + "/sumoffset", 0)
    reg.add(key + "/sum", v - off)
    reg.add(key + "/sumsq", (v - off) ** 2)
    reg.add(key + "/count", 1)
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
    from engine.workspace import _EMPTY  # noqa: PLC0415  (engine.workspace imports the executor)
    return tuple(_EMPTY for _ in ctx.op.output)


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
