"""Both cores for big memory-bound NumPy kernels: one array, cut along its batch (or channel) axis.

NumPy releases the GIL inside ufunc loops and copies, so the parts of one op run on a small shared
thread pool (:data:`THREADS`, env ``NETVIZ_THREADS``, default the CPU count, capped at 8) while BLAS
already uses every core for the GEMMs.  Only arrays of at least :data:`MIN_BYTES` are cut: a tiny op
pays one size check, nothing else.  Each op is still one kernel call writing its own new outputs;
the split is invisible outside the kernel.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

THREADS = max(1, min(int(os.environ.get("NETVIZ_THREADS") or os.cpu_count() or 1), 8))
MIN_BYTES = 1 << 20  # below this a thread hand-off costs more than it saves
BLOCK_BYTES = 2 << 20  # parts are cut into blocks of about this size, so a kernel's passes stay in cache

SCRATCH_MAX = 1 << 28  # the largest scratch buffer kept alive per thread

KEEP_FREED_MMAP_THRESHOLD = 32 << 20  # glibc's largest (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit)
KEEP_FREED_TRIM_THRESHOLD = 1 << 30
_GLIBC_OWN = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_", "GLIBC_TUNABLES")


def keep_freed_memory() -> bool:
    """Have glibc's malloc serve arrays up to 32 MB from its heap and keep what they free (``mallopt``
    M_MMAP_THRESHOLD 32 MB, M_TRIM_THRESHOLD 1 GB); True when set.  Why: a net's run allocates each output
    while the last run's is still alive, and by default malloc maps arrays over a growing threshold afresh
    and gives freed heap back, so a run's outputs keep landing on fresh pages: ResNet-50 batch 8's second
    run faulted 7,550 pages and took 0.71-0.87 s against 0.39-0.43 with this (benchmarks/README.md,
    session 10).  Not where the environment sets glibc's own knobs (they win), nor off glibc."""
    if any(k in os.environ for k in _GLIBC_OWN):
        return False
    try:
        import ctypes  # noqa: PLC0415

        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    return bool(mallopt(-3, KEEP_FREED_MMAP_THRESHOLD) and mallopt(-1, KEEP_FREED_TRIM_THRESHOLD))  # M_MMAP_, M_TRIM_


KEPT_FREED_MEMORY = keep_freed_memory()

_pool: list[ThreadPoolExecutor] = []
_local = threading.local()
_blas_lock = threading.Lock()

Take = Callable[[Any], Any]


def _executor() -> ThreadPoolExecutor:
    if not _pool:
        _pool.append(ThreadPoolExecutor(THREADS - 1, thread_name_prefix="netviz-kernel"))
    return _pool[0]


def split(fn: Callable[[Take], Any], shape: tuple[int, ...], nbytes: int, axis: int | None = None, *,
          block_bytes: int = BLOCK_BYTES) -> None:
    """Call ``fn(take)`` once per block of an array of `shape` (`nbytes` big), blocks spread over
    :data:`THREADS` threads; ``take(a)`` is `a`'s block along the cut axis (axis 0, else 1, the first
    with at least THREADS entries), or `a` itself where that axis has another size (a broadcast 1).
    Small arrays: one call with ``take`` the identity.  `axis` forces the cut axis (per-channel
    statistics cut along channels: each block then owns its channels).  `block_bytes` sizes the
    blocks: a kernel making several passes over three or four arrays per block wants smaller ones, so
    all of them stay in a core's L2.  Threads take the next block as they come free, so a helper thread
    that another process keeps off its core delays the call by one block at most, never by its share
    (and a split inside a pool thread cannot wait on itself).  Exceptions propagate."""
    ax = next((a for a, v in enumerate(shape[:2]) if v >= THREADS), None) if axis is None else \
        axis if shape[axis] >= THREADS else None
    if THREADS < 2 or nbytes < MIN_BYTES or ax is None or nbytes == 0:
        fn(lambda a: a)
        return
    n = shape[ax]
    blocks = _blocks(n, nbytes, block_bytes)

    def take_of(lo: int, hi: int) -> Take:
        idx = (slice(None),) * ax + (slice(lo, hi),)
        return lambda a: a[idx] if a.shape[ax] == n else a

    _run([lambda lo=lo, hi=hi: fn(take_of(lo, hi)) for lo, hi in blocks])


def ranges(fn: Callable[[int, int], Any], n: int, nbytes: int, *, block_bytes: int = BLOCK_BYTES) -> None:
    """Call ``fn(lo, hi)`` for consecutive ranges covering ``0..n`` (an axis of `n` entries over an array
    of `nbytes`), the ranges spread over :data:`THREADS` threads as :func:`split` spreads its blocks;
    one call ``fn(0, n)`` for a small array.  For compiled kernels (:mod:`engine.runtime.jit`) that take
    whole arrays and the range of channels to do: a sliced view would cost them their unit stride."""
    if THREADS < 2 or nbytes < MIN_BYTES or n < THREADS:
        fn(0, n)
        return
    _run([lambda lo=lo, hi=hi: fn(lo, hi) for lo, hi in _blocks(n, nbytes, block_bytes)])


def _blocks(n: int, nbytes: int, block_bytes: int) -> list[tuple[int, int]]:
    """`n` entries of an `nbytes` array cut into ranges of about `block_bytes`, at least one a thread."""
    step = max(1, min(n // THREADS, int(n * block_bytes // nbytes)))
    return [(lo, min(lo + step, n)) for lo in range(0, n, step)]


def _run(calls: list[Callable[[], Any]]) -> None:
    """Run every call, the pool's threads and the caller's taking the next as they come free."""
    todo, lock, errors = iter(calls), threading.Condition(), []
    busy = [0]

    def work() -> None:
        while True:
            with lock:
                call = next(todo, None)
                if call is None:
                    return
                busy[0] += 1
            try:
                call()
            except BaseException as e:  # noqa: BLE001  (raised again in the caller's thread)
                errors.append(e)
            finally:
                with lock:
                    busy[0] -= 1
                    lock.notify_all()

    for _ in range(min(THREADS, len(calls)) - 1):
        _executor().submit(work)
    work()
    with lock:  # NOTE: wait only for blocks in progress: a helper the OS has not scheduled yet finds
        while busy[0]:  # no block left and takes none (the caller does them all on a loaded machine)
            lock.wait()
    if errors:
        raise errors[0]


def scratch(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialised array of `shape` in this thread's reusable scratch memory (the previous
    scratch array is overwritten: only for temporaries a kernel drops before it returns, never an
    output).  NOTE: a fresh buffer of >32 MB is mmapped and page-faulted on every call (2.5x the
    cost of filling a reused one)."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    if nbytes > SCRATCH_MAX:
        return np.empty(shape, dtype)
    buf = getattr(_local, "buf", None)
    if buf is None or buf.nbytes < nbytes:
        buf = _local.buf = np.empty(nbytes, np.uint8)
    return buf[:nbytes].view(dtype).reshape(shape)


def _openblas() -> Any:
    """(get, set) of the OpenBLAS bundled with NumPy, or None (other BLAS: leave its threads alone)."""
    if not hasattr(_openblas, "fns"):
        import ctypes  # noqa: PLC0415
        import glob  # noqa: PLC0415

        _openblas.fns = None
        libdir = os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs")
        for lib in glob.glob(os.path.join(libdir, "*openblas*")):
            so = ctypes.CDLL(lib)
            for pre in ("scipy_openblas_", "openblas_"):
                for suf in ("64_", ""):
                    if hasattr(so, f"{pre}set_num_threads{suf}"):
                        get, set_ = getattr(so, f"{pre}get_num_threads{suf}"), getattr(so, f"{pre}set_num_threads{suf}")
                        set_.argtypes = [ctypes.c_int]
                        _openblas.fns = (get, set_)
                        return _openblas.fns
    return _openblas.fns


def matmuls(jobs: list[tuple[Any, Any, Any]]) -> None:
    """``np.matmul(a, b, out=o)`` for every (a, b, o), the jobs spread over :data:`THREADS` threads,
    each GEMM on a single-threaded BLAS.  NOTE: independent GEMMs on their own cores scale better than
    OpenBLAS's own threads on small GEMMs, and far better when another process shares the cores
    (OpenBLAS's threads spin-wait on each other).  Without OpenBLAS: one after another."""
    blas_calls([lambda a=a, b=b, o=o: np.matmul(a, b, out=o) for a, b, o in jobs])


def blas_calls(calls: list[Callable[[], Any]]) -> None:
    """Run every BLAS-bound call, the calls spread over :data:`THREADS` threads with OpenBLAS at one
    thread (see :func:`matmuls`); nested in a pool thread or without OpenBLAS: one after another."""
    nested = threading.current_thread().name.startswith("netviz-kernel")
    fns = _openblas() if THREADS > 1 and len(calls) > 1 and not nested else None
    if fns is None:
        for call in calls:
            call()
        return
    get, set_ = fns
    per = -(-len(calls) // THREADS)
    parts = [calls[i:i + per] for i in range(0, len(calls), per)]

    def work(part: list[Callable[[], Any]]) -> None:
        for call in part:
            call()

    with _blas_lock:  # one caller at a time changes BLAS's thread count
        old = get()
        set_(1)
        try:
            futures = [_executor().submit(work, p) for p in parts[1:]]
            try:
                work(parts[0])
            finally:
                for f in futures:
                    f.result()
        finally:
            set_(old)


OWN_THREADS_MIN = 1 << 18
"""m * n * k from which OpenBLAS runs a GEMM on its own threads (its GEMM_MULTITHREAD_THRESHOLD 4 x
SMP_THRESHOLD_MIN 65536); below it, one thread either way."""


def gemm(a: Any, b: Any) -> Any:
    """``a @ b``; for 2-D float32/float64 NumPy arrays big enough to wake OpenBLAS's own threads, as
    :func:`matmuls` jobs (single-threaded GEMMs on this module's threads) instead.  NOTE: after each
    threaded call OpenBLAS's worker spins (``OPENBLAS_THREAD_TIMEOUT``, ~0.1 s) on the core the next
    ops want: after ResNet-50's FC, the next run's first ops took 86 ms of CPU for 44 (benchmarks/
    README.md, session 10); these threads sleep when idle."""
    if (type(a) is not np.ndarray or type(b) is not np.ndarray or a.ndim != 2 or b.ndim != 2
            or a.dtype != b.dtype or a.dtype not in (np.float32, np.float64)
            or a.shape[0] * b.shape[1] * a.shape[1] < OWN_THREADS_MIN or a.shape[1] != b.shape[0]):
        return a @ b
    out = np.empty((a.shape[0], b.shape[1]), a.dtype)
    matmuls(gemm_jobs(a, b, out))
    return out


def gemm_jobs(a: Any, b: Any, out: Any) -> list[tuple[Any, Any, Any]]:
    """``a @ b -> out`` (2-D) cut into :data:`THREADS` jobs along its larger side (rows of a or columns of b)."""
    m, n = out.shape
    if THREADS < 2 or max(m, n) < 2 * THREADS:
        return [(a, b, out)]
    if n >= m:
        cuts = [n * i // THREADS for i in range(THREADS + 1)]
        return [(a, b[:, lo:hi], out[:, lo:hi]) for lo, hi in zip(cuts, cuts[1:])]
    cuts = [m * i // THREADS for i in range(THREADS + 1)]
    return [(a[lo:hi], b, out[lo:hi]) for lo, hi in zip(cuts, cuts[1:])]
