"""Convolutions through oneDNN's C API (ctypes), when its CPU library is installed: optional, never required.

oneDNN's JIT AVX-512/AVX2 direct convolutions are what PyTorch's CPU convs run; OpenBLAS reaches only
60-85 % of its peak on ResNet's GEMM shapes, so the im2col/implicit-GEMM paths of
:mod:`engine.runtime.ops.conv` stay behind it however they are arranged.  This module binds the few
calls a float32 convolution needs (engine, stream, memory descriptors, the forward / backward-data /
backward-weights primitive descriptors and primitives, memory objects on NumPy's own buffers,
execute) and nothing else; the NumPy path stays the reference (``tests/engine/test_onednn.py``
compares the two).  Training batch normalization is bound too (:func:`bn_forward`, :func:`bn_backward`,
``tests/engine/test_onednn_bn.py``); norm.py routes NHWC training SpatialBN to it, not NCHW, where it is
slower than NumPy's row passes (benchmarks/README.md, round 3b).  The binary primitive and its post-ops (SpatialBN's per-channel affine
pass, ReluGradient) are bound here and used by :mod:`engine.runtime.onednn_eltwise`.

Where the library comes from: ``pip install netviz[fast]`` (the ``onednn-cpu-gomp`` wheel puts
``libdnnl.so.3`` in ``<prefix>/lib``; its CPU runtime is GNU OpenMP).  NOTE: the newer ``onednn``
wheels (2025+) are SYCL builds whose CPU engine needs a SYCL CPU device; without one
``dnnl_engine_create`` fails and :func:`available` is False.  Only versions 3.2-3.13, whose enum values
and signatures were checked against their headers, are used.

Threads: oneDNN's OpenMP team gets :data:`engine.runtime.parallel.THREADS` threads, and waits
passively (``OMP_WAIT_POLICY=PASSIVE`` unless set): spinning OpenMP threads would steal a core from
the NumPy ops between two convolutions on a small machine.  ``NETVIZ_ONEDNN=0`` turns the path off.

Layout: the user's NCHW (or NHWC) buffers are handed to oneDNN as they are (plain strided memory
descriptors, no copy), or (:data:`LAYOUT`) oneDNN picks a blocked layout (the dW primitive's pick, for
the forward and dX too) and reorders copy the data in and out around it, as PyTorch 1.10 eager does.
Under "auto" with ``NETVIZ_CONV_TUNE=1`` the forward's layout is measured instead (:func:`_fastest`, :data:`TUNE`): built on each of
the user's buffers, the dW pick and format `any`, timed a few times on the first call's buffers, the
fastest kept (no one rule wins on every map, batch and CPU: benchmarks/README.md, session 11).
Primitives are cached per (kind, shapes, strides, geometry, group, layout).
"""
from __future__ import annotations

import copy
import ctypes
import math
import os
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from engine.runtime import parallel

_P = ctypes.c_void_p
_DIMS = ctypes.c_int64 * 12  # dnnl_dims_t (DNNL_MAX_NDIMS = 12)

# enum values of oneDNN v3.2-v3.13 (dnnl_types.h / dnnl_common_types.h)
_F32, _TAG_ANY, _CPU, _STREAM_IN_ORDER = 3, 1, 1, 1
_FWD_TRAINING, _FWD_INFERENCE, _CONV_DIRECT = 64, 96, 1
_Q_SRC, _Q_DIFF_SRC, _Q_WEIGHTS, _Q_DIFF_WEIGHTS, _Q_DST, _Q_DIFF_DST = 129, 130, 131, 132, 133, 134
_Q_IMPL_INFO_STR = 8
_Q_SCRATCHPAD = 136  # dnnl_query_scratchpad_md
ARG_SCRATCHPAD = 80
_SCRATCHPAD_USER = 1  # dnnl_scratchpad_mode_user
ARG_SRC, ARG_DST, ARG_WEIGHTS, ARG_BIAS = 1, 17, 33, 41
ARG_DIFF_SRC, ARG_DIFF_DST, ARG_DIFF_WEIGHTS = 129, 145, 161
_ARG_FROM, _ARG_TO = 1, 17
# batch normalization (dnnl_normalization_flags_t, dnnl_prop_kind_t, DNNL_ARG_*)
_BACKWARD, _USE_SCALE, _USE_SHIFT = 128, 0x2, 0x4
ARG_MEAN, ARG_VARIANCE, ARG_SCALE, ARG_SHIFT = 49, 50, 51, 52
ARG_DIFF_SCALE, ARG_DIFF_SHIFT = 255, 256
_RUNTIME_OMP = 2  # dnnl_version_t.cpu_runtime of an OpenMP build (DNNL_RUNTIME_OMP)
# dnnl_cpu_isa_t values (the same in 3.2 and 3.13), named by :func:`describe`; ONEDNN_MAX_CPU_ISA=AVX2 caps them
ISA = {"SSE41": 0x1, "AVX": 0x3, "AVX2": 0x7, "AVX2_VNNI": 0xf, "AVX2_VNNI_2": 0x1f, "AVX512_CORE": 0x27,
       "AVX512_CORE_VNNI": 0x67, "AVX512_CORE_BF16": 0xe7, "AVX512_CORE_FP16": 0x1ef, "AVX512_CORE_AMX": 0xfef,
       "AVX512_CORE_AMX_FP16": 0x1fef}

_BOUND = ((3, 2), (3, 13))  # the versions whose ABI this module was written against

# NOTE: "blocked": format `any` + reorders per call (PyTorch 1.10's way); "plain": the user's buffers as they
# are (oneDNN then runs its own im2col + JIT sgemm); "auto": blocked for KxK kernels, plain for 1x1 (whose
# big inputs cost more to reorder than the blocked kernel saves: measured, benchmarks/README.md round 3)
LAYOUT = "auto"
ENABLED = os.environ.get("NETVIZ_ONEDNN", "") not in ("0", "off", "false")  # NOTE: read per call: tests flip it
CALLS = {"forward": 0, "backward": 0, "bn_forward": 0, "bn_backward": 0, "eltwise": 0}  # primitives run, for tests and benchmarks: proof the path ran


class _ExecArg(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_int), ("memory", _P)]


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("patch", ctypes.c_int),
                ("hash", ctypes.c_char_p), ("cpu_runtime", ctypes.c_uint), ("gpu_runtime", ctypes.c_uint)]


_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "dnnl_version": (ctypes.POINTER(_Version), []),
    "dnnl_engine_create": (ctypes.c_int, [ctypes.POINTER(_P), ctypes.c_int, ctypes.c_size_t]),
    "dnnl_stream_create": (ctypes.c_int, [ctypes.POINTER(_P), _P, ctypes.c_uint]),
    "dnnl_stream_wait": (ctypes.c_int, [_P]),
    "dnnl_memory_desc_create_with_strides": (ctypes.c_int, [ctypes.POINTER(_P), ctypes.c_int, _DIMS, ctypes.c_int,
                                                            _DIMS]),
    "dnnl_memory_desc_create_with_tag": (ctypes.c_int, [ctypes.POINTER(_P), ctypes.c_int, _DIMS, ctypes.c_int,
                                                        ctypes.c_int]),
    "dnnl_memory_desc_destroy": (ctypes.c_int, [_P]),
    "dnnl_memory_desc_equal": (ctypes.c_int, [_P, _P]),
    "dnnl_memory_desc_get_size": (ctypes.c_size_t, [_P]),
    "dnnl_convolution_forward_primitive_desc_create": (
        ctypes.c_int, [ctypes.POINTER(_P), _P, ctypes.c_int, ctypes.c_int, _P, _P, _P, _P, _DIMS, _DIMS, _DIMS, _DIMS,
                       _P]),
    "dnnl_convolution_backward_data_primitive_desc_create": (
        ctypes.c_int, [ctypes.POINTER(_P), _P, ctypes.c_int, _P, _P, _P, _DIMS, _DIMS, _DIMS, _DIMS, _P, _P]),
    "dnnl_convolution_backward_weights_primitive_desc_create": (
        ctypes.c_int, [ctypes.POINTER(_P), _P, ctypes.c_int, _P, _P, _P, _P, _DIMS, _DIMS, _DIMS, _DIMS, _P, _P]),
    "dnnl_batch_normalization_forward_primitive_desc_create": (
        ctypes.c_int, [ctypes.POINTER(_P), _P, ctypes.c_int, _P, _P, ctypes.c_float, ctypes.c_uint, _P]),
    "dnnl_batch_normalization_backward_primitive_desc_create": (
        ctypes.c_int, [ctypes.POINTER(_P), _P, ctypes.c_int, _P, _P, _P, ctypes.c_float, ctypes.c_uint, _P, _P]),
    "dnnl_reorder_primitive_desc_create": (ctypes.c_int, [ctypes.POINTER(_P), _P, _P, _P, _P, _P]),
    "dnnl_primitive_desc_query_md": (_P, [_P, ctypes.c_int, ctypes.c_int]),
    "dnnl_primitive_attr_create": (ctypes.c_int, [ctypes.POINTER(_P)]),
    "dnnl_primitive_attr_set_scratchpad_mode": (ctypes.c_int, [_P, ctypes.c_int]),
    "dnnl_primitive_desc_query": (ctypes.c_int, [_P, ctypes.c_int, ctypes.c_int, _P]),
    "dnnl_primitive_desc_destroy": (ctypes.c_int, [_P]),
    "dnnl_primitive_create": (ctypes.c_int, [ctypes.POINTER(_P), _P]),
    "dnnl_primitive_destroy": (ctypes.c_int, [_P]),
    "dnnl_primitive_execute": (ctypes.c_int, [_P, _P, ctypes.c_int, ctypes.POINTER(_ExecArg)]),
    "dnnl_memory_create": (ctypes.c_int, [ctypes.POINTER(_P), _P, _P, _P]),
    "dnnl_memory_set_data_handle": (ctypes.c_int, [_P, _P]),
    "dnnl_memory_destroy": (ctypes.c_int, [_P]),
    "dnnl_get_effective_cpu_isa": (ctypes.c_int, []),
    "dnnl_primitive_attr_destroy": (ctypes.c_int, [_P]),
    "dnnl_primitive_attr_set_post_ops": (ctypes.c_int, [_P, _P]),
    "dnnl_post_ops_create": (ctypes.c_int, [ctypes.POINTER(_P)]),
    "dnnl_post_ops_append_binary": (ctypes.c_int, [_P, ctypes.c_int, _P]),
    "dnnl_post_ops_append_eltwise": (ctypes.c_int, [_P, ctypes.c_int, ctypes.c_float, ctypes.c_float]),
    "dnnl_post_ops_destroy": (ctypes.c_int, [_P]),
    "dnnl_binary_primitive_desc_create": (ctypes.c_int, [ctypes.POINTER(_P), _P, ctypes.c_int, _P, _P, _P, _P]),
}


class OneDNNError(RuntimeError):
    """A oneDNN call refused (status code and call named); the caller falls back to the NumPy path."""


class _Lib:
    """The loaded library: its functions, one CPU engine and one in-order stream."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        for name, (res, args) in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
            setattr(self, name[5:], fn)
        v = self.version().contents
        self.version_tuple, self.openmp = (v.major, v.minor, v.patch), v.cpu_runtime == _RUNTIME_OMP
        if not _BOUND[0] <= (v.major, v.minor) <= _BOUND[1]:
            raise OneDNNError(f"oneDNN {v.major}.{v.minor}.{v.patch}: only {_BOUND[0]}-{_BOUND[1]} are bound")
        self.engine, self.stream = _P(), _P()
        check(self.engine_create(ctypes.byref(self.engine), _CPU, 0), "dnnl_engine_create(cpu)")
        check(self.stream_create(ctypes.byref(self.stream), self.engine, _STREAM_IN_ORDER), "dnnl_stream_create")
        # NOTE: the library's own scratchpad belongs to the thread that created a primitive (a primitive built
        # on one TUI worker and run on another wrote into freed memory: a segfault); ours is passed at each run
        self.attr = _P()
        check(self.primitive_attr_create(ctypes.byref(self.attr)), "dnnl_primitive_attr_create")
        check(self.primitive_attr_set_scratchpad_mode(self.attr, _SCRATCHPAD_USER),
              "dnnl_primitive_attr_set_scratchpad_mode")


def check(status: int, what: str) -> None:
    """Raise :class:`OneDNNError` naming the call when `status` is not dnnl_success."""
    if status:
        raise OneDNNError(f"oneDNN {what} failed (status {status})")


def _lib_paths() -> list[str]:
    return [os.path.join(p, "lib", "libdnnl.so.3") for p in dict.fromkeys((sys.prefix, sys.base_prefix))] + [
        "libdnnl.so.3"]


def _dlopen(path: str) -> ctypes.CDLL:
    """Load `path` with libgomp's settings in the environment while it loads (libgomp reads them once, when
    libdnnl brings it in), then put the environment back: processes netviz starts later (the benchmarks'
    PyTorch reference) must not inherit them."""
    saved = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    os.environ.setdefault("OMP_NUM_THREADS", str(parallel.THREADS))
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        return ctypes.CDLL(path)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _load() -> _Lib | None:
    """The library, or None (not installed, switched off, an unbound version, no CPU engine)."""
    for path in _lib_paths():
        try:
            loaded = _Lib(_dlopen(path))
        except (OSError, AttributeError, OneDNNError):
            continue
        try:
            gomp = ctypes.CDLL("libgomp.so.1", mode=os.RTLD_NOLOAD)  # only the one libdnnl brought in
            loaded.omp_set_num_threads = gomp.omp_set_num_threads
            loaded.omp_set_num_threads.argtypes = [ctypes.c_int]
        except (OSError, AttributeError):
            loaded.omp_set_num_threads = None
        return loaded
    return None


_omp = threading.local()
SERIAL_FLOPS = 1e8  # NOTE: a conv below this many FLOPs runs its primitives on one thread (measured: README round 3)


def _team_size(flops: float) -> int:
    """Give this thread's OpenMP team :data:`parallel.THREADS` threads, or one for a conv under
    :data:`SERIAL_FLOPS` (waking a sleeping OpenMP thread costs more than it saves on a small one), and
    return that number: primitives are created for the team they run with, so it is in their cache key.
    NOTE: an OpenMP setting is per calling thread (the TUI's workers have their own)."""
    n = 1 if flops < SERIAL_FLOPS else parallel.THREADS
    if getattr(_omp, "n", None) != n:
        if lib().omp_set_num_threads is not None:
            lib().omp_set_num_threads(n)
        _omp.n = n
    return n


_LIB: _Lib | None = None
_LOADED = False
_lock = threading.Lock()


def lib() -> _Lib | None:
    """The library, loaded on first use (importing this module loads nothing)."""
    global _LIB, _LOADED
    if not _LOADED:
        with _lock:
            if not _LOADED:
                _LIB, _LOADED = _load(), True
    return _LIB


def available() -> bool:
    """Whether convolutions run through oneDNN here (installed, loaded, and not switched off)."""
    return ENABLED and lib() is not None


def describe() -> str:
    """One line naming the conv backend, for benchmark notes: oneDNN's version, ISA and threads, or NumPy."""
    if not available():
        return "NumPy/OpenBLAS convs" + ("" if ENABLED else " (NETVIZ_ONEDNN=0)")
    isa = {v: k for k, v in ISA.items()}.get(lib().get_effective_cpu_isa(), hex(lib().get_effective_cpu_isa()))
    how = "auto, forward measured" if tuned() else LAYOUT
    return f"oneDNN {'.'.join(map(str, version()))} convs ({isa}, {parallel.THREADS} threads, layout {how})"


def version() -> tuple[int, int, int] | None:
    """(major, minor, patch) of the loaded library, or None."""
    return None if lib() is None else lib().version_tuple


# ---- memory descriptors and cached primitives ----

def _dims(v: Sequence[int]) -> Any:
    return _DIMS(*v)


_OUTPUTS = frozenset({ARG_DST, ARG_DIFF_SRC, ARG_DIFF_WEIGHTS})
_SCRATCH: dict[int, np.ndarray] = {}  # per exec arg: the blocked copy's buffer, reused (under _run_lock)


def _aligned(nbytes: int, arg: int) -> np.ndarray:
    """`nbytes` at a 64-byte boundary in `arg`'s reused scratch buffer (a fresh buffer of many MB is
    page-faulted on every call: a 25 MB reorder measured 4 ms into a fresh one)."""
    raw = _SCRATCH.get(arg)
    if raw is None or raw.nbytes < nbytes + 64:
        raw = np.empty(nbytes + 64, np.uint8)
        if nbytes <= parallel.SCRATCH_MAX:  # NOTE: bigger ones (VGG's first maps at batch 32) are not kept
            _SCRATCH[arg] = raw
    off = -raw.ctypes.data % 64
    return raw[off:off + nbytes]


def _memory(md: _P) -> _P:
    mem = _P()
    check(lib().memory_create(ctypes.byref(mem), md, lib().engine, None), "dnnl_memory_create")
    return mem


class _Primitive:
    """One primitive: memory objects on the user's (plain) descriptors, re-pointed at each call's
    arrays, and for an argument whose primitive layout differs, a scratch memory and the reorder
    into it (inputs) or out of it (outputs)."""

    def __init__(self, pd: _P, user: dict[int, tuple[_P, int]]) -> None:
        L = lib()
        self.prim = _P()
        check(L.primitive_create(ctypes.byref(self.prim), pd), "dnnl_primitive_create")
        self.mem = {arg: _memory(md) for arg, (md, _) in user.items()}
        self.inner: dict[int, tuple[_P, _P, int, _Primitive]] = {}  # arg -> (md, memory, bytes, reorder)
        for arg, (md, query) in user.items():
            inner = L.primitive_desc_query_md(pd, query, 0) if query else None
            if inner and not L.memory_desc_equal(inner, md):
                reorder = _reorder(inner, md) if arg in _OUTPUTS else _reorder(md, inner)
                self.inner[arg] = (inner, _memory(inner), L.memory_desc_get_size(inner), reorder)
        pad = L.primitive_desc_query_md(pd, _Q_SCRATCHPAD, 0)
        pad_size = L.memory_desc_get_size(pad) if pad else 0
        self.scratchpad = (_memory(pad), pad_size) if pad_size else None
        self.args = (_ExecArg * (len(user) + 1))()
        self.layout = ""  # NOTE: the layout :func:`_fastest` chose it on, for tests and benchmark notes

    def run(self, buffers: dict[int, np.ndarray], ready: frozenset[int] = frozenset()) -> None:
        """Execute on `buffers` (arg -> array, each alive for the call; outputs written in place).  An
        input arg in `ready` is already in its scratch buffer in this primitive's layout (the previous
        primitive's reorder of the same array): not copied again."""
        L = lib()
        held = []  # NOTE: a scratch too big to be kept by _aligned must live until the stream is done
        for i, (arg, a) in enumerate(buffers.items()):
            mem = self.mem[arg]
            L.memory_set_data_handle(mem, a.ctypes.data)
            if arg in self.inner:
                _, imem, size, reorder = self.inner[arg]
                held.append(_aligned(size, arg))
                L.memory_set_data_handle(imem, held[-1].ctypes.data)
                if arg not in _OUTPUTS and arg not in ready:
                    reorder.reorder(mem, imem)
                mem = imem
            self.args[i].arg, self.args[i].memory = arg, mem
        n = len(buffers)
        if self.scratchpad:
            self.args[n].arg, self.args[n].memory = ARG_SCRATCHPAD, self._scratchpad(held)
            n += 1
        check(L.primitive_execute(self.prim, L.stream, n, self.args), "dnnl_primitive_execute")
        for arg in buffers.keys() & self.inner.keys() & _OUTPUTS:
            self.inner[arg][3].reorder(self.inner[arg][1], self.mem[arg])
        check(L.stream_wait(L.stream), "dnnl_stream_wait")
        del held

    def _scratchpad(self, held: list[np.ndarray]) -> _P:
        """This primitive's scratchpad memory pointed at the shared scratch buffer (kept alive in `held`)."""
        mem, size = self.scratchpad
        held.append(_aligned(size, ARG_SCRATCHPAD))
        lib().memory_set_data_handle(mem, held[-1].ctypes.data)
        return mem

    def reorder(self, src: _P, dst: _P) -> None:
        """A reorder primitive's run: `src` memory into `dst` memory."""
        held: list[np.ndarray] = []
        args = [_ExecArg(_ARG_FROM, src), _ExecArg(_ARG_TO, dst)]
        if self.scratchpad:
            args.append(_ExecArg(ARG_SCRATCHPAD, self._scratchpad(held)))
        check(lib().primitive_execute(self.prim, lib().stream, len(args), (_ExecArg * len(args))(*args)),
              "dnnl_primitive_execute(reorder)")

    def destroy(self) -> None:
        """Free the primitive, its memory objects and its reorders (a layout :func:`_fastest` measured
        and dropped: its JIT code is tens of kB).  The descriptors belong to their :class:`_Mds`."""
        L = lib()
        for _, mem, _, reorder in self.inner.values():
            check(L.memory_destroy(mem), "dnnl_memory_destroy")
            reorder.destroy()
        for mem in [*self.mem.values(), *(self.scratchpad or ())[:1]]:
            check(L.memory_destroy(mem), "dnnl_memory_destroy")
        check(L.primitive_destroy(self.prim), "dnnl_primitive_destroy")

    def same_inner(self, other: _Primitive, arg: int) -> bool:
        """Whether both primitives read `arg` in the same (non-user) layout."""
        return arg in self.inner and arg in other.inner and bool(
            lib().memory_desc_equal(self.inner[arg][0], other.inner[arg][0]))


def _reorder(src: _P, dst: _P) -> _Primitive:
    L, pd = lib(), _P()
    check(L.reorder_primitive_desc_create(ctypes.byref(pd), src, L.engine, dst, L.engine, L.attr),
          "dnnl_reorder_primitive_desc_create")
    return _Primitive(pd, {})


def _md(shape: Sequence[int], strides: Sequence[int] | None) -> _P:
    """A float32 descriptor: plain with `strides` (in elements), or format `any` when None."""
    md = _P()
    if strides is None:
        check(lib().memory_desc_create_with_tag(ctypes.byref(md), len(shape), _dims(shape), _F32, _TAG_ANY),
              "dnnl_memory_desc_create_with_tag")
    else:
        check(lib().memory_desc_create_with_strides(ctypes.byref(md), len(shape), _dims(shape), _F32,
                                                    _dims(strides)), "dnnl_memory_desc_create_with_strides")
    return md


def _estrides(a: np.ndarray) -> tuple[int, ...]:
    return tuple(s // a.itemsize for s in a.strides)


def _memory_order(a: np.ndarray) -> list[int]:
    """`a`'s axes from the outermost in memory to the innermost (NHWC seen as NCHW: [0, 2, 3, 1])."""
    return sorted(range(a.ndim), key=lambda i: -a.strides[i])


def _dense(a: np.ndarray) -> bool:
    """Whether `a`'s axes are some dense permutation (NCHW, or an NCHW view of NHWC): one layout oneDNN reads."""
    return a.transpose(_memory_order(a)).flags.c_contiguous


def empty_as(a: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """A new float32 array of `shape` whose axes lie in memory in the order of `a`'s (an NCHW view of
    an NHWC array gives an NCHW view of a new NHWC array), so oneDNN reads and writes one layout."""
    perm = _memory_order(a)
    return np.empty([shape[i] for i in perm], np.float32).transpose(np.argsort(perm))


class Geometry:
    """One convolution's geometry as oneDNN takes it: strides, dilations (minus one), pads per side."""

    def __init__(self, s: Sequence[int], pb: Sequence[int], pe: Sequence[int], d: Sequence[int], group: int) -> None:
        self.s, self.pb, self.pe, self.d, self.group = tuple(s), tuple(pb), tuple(pe), tuple(d), group
        self.dims = (_dims(self.s), _dims([v - 1 for v in self.d]), _dims(self.pb), _dims(self.pe))

    def key(self) -> tuple:
        return self.s, self.pb, self.pe, self.d, self.group

    def out(self, sp: Sequence[int], k: Sequence[int]) -> tuple[int, ...]:
        """Output spatial sizes (Caffe2's floor rule, as oneDNN's) for input sizes `sp` and kernel `k`."""
        return tuple((i + b + e - dd * (kk - 1) - 1) // s + 1
                     for i, kk, s, b, e, dd in zip(sp, k, self.s, self.pb, self.pe, self.d))


def _weights(w: np.ndarray, group: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """oneDNN's weights shape and strides for Caffe2's (M, C/g, *k) array: (g, M/g, C/g, *k) when grouped."""
    st = _estrides(w)
    if group == 1:
        return w.shape, st
    return (group, w.shape[0] // group) + w.shape[1:], (st[0] * (w.shape[0] // group),) + st


ONE_BY_ONE = True  # NOTE: whether 1x1 convs go through oneDNN too (in the plain layout under "auto")
MIN_1X1_PIXELS = 128  # output pixels per image below which a 1x1 conv keeps NumPy's batch-folded GEMM


def wanted(k: Sequence[int], out: Sequence[int], forward: bool = False) -> bool:
    """Whether a conv with kernel `k` and output map `out` should go through oneDNN at all: KxK always;
    1x1 (:data:`ONE_BY_ONE`) on maps of at least :data:`MIN_1X1_PIXELS` (ResNet's 7x7 stage's gradients
    measured up to 1.2x slower through oneDNN than through the NumPy path's GEMMs over the whole batch), and
    a `forward` one on any map when its layout is measured (:func:`tuned`): on ResNet's 7x7 maps the faster
    of oneDNN's layouts beat NumPy's GEMM at every batch measured (benchmarks/README.md, session 11)."""
    if math.prod(k) > 1:
        return True
    return ONE_BY_ONE and (forward and tuned() or math.prod(out) >= MIN_1X1_PIXELS)


def blocked(k: Sequence[int], channels: int, data_grad: bool = False) -> bool:
    """Whether a primitive of a conv with kernel `k` runs on oneDNN's own layout (reorders around it)
    under :data:`LAYOUT`.  "auto": KxK kernels yes, 1x1 no (reordering their big maps costs more than
    the blocked kernel saves), and dX of a layer with under 16 input `channels` no (the blocked dX pads
    conv1's 3 channels to 16: 73 ms against 28 ms plain, measured at batch 8)."""
    if LAYOUT != "auto":
        return LAYOUT == "blocked"
    return math.prod(k) > 1 and (not data_grad or channels >= 16)


class _Mds:
    """The plain (user) descriptors of one convolution's x, w, b, y, and the ones its primitives are
    created with: x and y the same, or format `any` when `blocked`; w always `any` (a small reorder: with
    NHWC's OHWI weights as they are, oneDNN offered only its reference conv, 12 s for a 1x1 layer).
    Never destroyed: they live in the cache."""

    def __init__(self, x: np.ndarray, w: np.ndarray, y: np.ndarray, group: int, any_: bool) -> None:
        ws, wst = _weights(w, group)
        self.x, self.w, self.y = _md(x.shape, _estrides(x)), _md(ws, wst), _md(y.shape, _estrides(y))
        self.b, self.pw = _md((w.shape[0],), (1,)), _md(ws, None)
        self.px, self.py = (_md(x.shape, None), _md(y.shape, None)) if any_ else (self.x, self.y)

    def chosen(self, pd: _P) -> _Mds:
        """A copy whose x and y descriptors are the layouts the backward-weights primitive `pd` picked for its
        src and diff_dst (nChw16c on AVX-512, nChw8c on AVX2).  NOTE: format `any` gave the forward an NHWC
        brgconv whose NCHW<->NHWC reorders cost more than the blocked kernel saves on 56x56 maps, and the
        strided dX an NHWC one that reordered dY a second time (measured: benchmarks/README.md, session 10)."""
        got = copy.copy(self)
        got.px, got.py = (lib().primitive_desc_query_md(pd, q, 0) for q in (_Q_SRC, _Q_DIFF_DST))
        return got


ALLOW_REF = False  # NOTE: the tests set it, to run every drawn shape through the binding


def _fast(pd: _P) -> _P:
    """`pd` when oneDNN chose one of its optimised implementations; its reference ones ("ref:any", plain
    loops, what it offers for odd cases such as a single input channel) can be far slower than the NumPy
    path, so they are refused unless :data:`ALLOW_REF`."""
    name = ctypes.c_char_p()
    check(lib().primitive_desc_query(pd, _Q_IMPL_INFO_STR, 0, ctypes.cast(ctypes.byref(name), _P)),
          "dnnl_primitive_desc_query(impl_info_str)")
    if not ALLOW_REF and (name.value or b"ref").startswith(b"ref"):
        raise OneDNNError(f"oneDNN offers only its reference convolution ({(name.value or b'?').decode()})")
    return pd


_CACHE: dict[tuple, tuple[_Primitive, ...]] = {}
_CACHE_MAX = 256
_run_lock = threading.Lock()


def _cached(key: tuple, build: Any) -> tuple[_Primitive, ...]:
    """The primitives under `key`, built on first use; a problem oneDNN refused is remembered as refused
    (empty), so the NumPy path takes it at once the next time."""
    ent = _CACHE.get(key)
    if ent is None:
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.clear()  # NOTE: dropped primitives keep their few handles: rare and bounded
        try:
            ent = _CACHE[key] = build()
        except OneDNNError:
            _CACHE[key] = ()
            raise
    if not ent:
        raise OneDNNError(f"oneDNN refused {key[0]} {key[-3:]}")
    return ent


def _forward_pd(m: _Mds, bias: bool, geo: Geometry, prop: int) -> _P:
    L, pd = lib(), _P()
    check(L.convolution_forward_primitive_desc_create(ctypes.byref(pd), L.engine, prop, _CONV_DIRECT, m.px, m.pw,
                                                      m.b if bias else None, m.py, *geo.dims, L.attr),
          "dnnl_convolution_forward_primitive_desc_create")
    return pd


def _weights_pd(m: _Mds, geo: Geometry) -> _P:
    """The backward-weights primitive descriptor of `m`'s convolution (its forward as the hint)."""
    L, pd = lib(), _P()
    check(L.convolution_backward_weights_primitive_desc_create(
        ctypes.byref(pd), L.engine, _CONV_DIRECT, m.px, m.pw, None, m.py, *geo.dims,
        _forward_pd(m, False, geo, _FWD_TRAINING), L.attr), "dnnl_convolution_backward_weights_primitive_desc_create")
    return pd


def _in_weights_layout(m: _Mds, geo: Geometry, make: Any, pdw: _P | None = None) -> _Primitive:
    """``make(m)`` on the blocked x and y layouts the backward-weights primitive picks (:meth:`_Mds.chosen`;
    `pdw` when already made), or on format `any` where oneDNN has no fast kernel for those or the dW
    primitive runs on the user's plain layout.  NOTE: a grouped conv of 4 channels a group gets a plain
    GEMM dW; its forward there took 22 ms against 10 ms blocked (8, 128, 56, 56), measured."""
    try:
        picked = m.chosen(_weights_pd(m, geo) if pdw is None else pdw)
        if picked.px and picked.py and not lib().memory_desc_equal(picked.px, m.x):
            return make(picked)
    except OneDNNError:
        pass
    return make(m)


def fits(geo: Geometry, *arrays: np.ndarray | None) -> bool:
    """Whether oneDNN takes this problem: the library here and on, float32 arrays of 1-3 spatial dims,
    positive pads, strides and dilations (anything else stays on the NumPy path)."""
    x = arrays[0]
    return (available() and isinstance(x, np.ndarray) and 3 <= x.ndim <= 5 and x.shape[0] > 0
            and all(isinstance(a, np.ndarray) and a.dtype == np.float32 for a in arrays if a is not None)
            and min(geo.pb + geo.pe) >= 0 and min(geo.s + geo.d) >= 1)


def _plain(a: np.ndarray) -> np.ndarray:
    """`a` as it is when its axes are some dense permutation (NCHW, or an NHWC view), else a copy."""
    return a if _dense(a) else np.ascontiguousarray(a)


def forward(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, geo: Geometry) -> np.ndarray | None:
    """``conv(x, w) + b`` for float32 NCHW `x` (NHWC views welcome) and (M, C/g, *k) `w`, the result in
    `x`'s memory order; None where oneDNN refuses the problem (the caller runs its own path)."""
    x, w = _plain(x), _plain(w)
    out = geo.out(x.shape[2:], w.shape[2:])
    if min(out) < 1 or w.shape[1] * geo.group != x.shape[1] or w.shape[0] % geo.group:
        return None
    y = empty_as(x, (x.shape[0], w.shape[0]) + out)
    lay = blocked(w.shape[2:], x.shape[1])
    bufs = {ARG_SRC: x, ARG_WEIGHTS: w, ARG_DST: y}
    if b is not None:
        bufs[ARG_BIAS] = np.ascontiguousarray(b).reshape(-1)

    def make(m: _Mds) -> _Primitive:
        return _Primitive(_fast(_forward_pd(m, b is not None, geo, _FWD_INFERENCE)), {
            ARG_SRC: (m.x, _Q_SRC), ARG_WEIGHTS: (m.w, _Q_WEIGHTS), ARG_BIAS: (m.b, 0), ARG_DST: (m.y, _Q_DST)})

    def build() -> tuple[_Primitive, ...]:
        if tuned():
            return (_fastest({name: lambda any_=any_, pick=pick: _forward_on(x, w, y, geo, make, any_, pick)
                              for name, any_, pick in _FORWARD_LAYOUTS}, bufs),)
        return (_forward_on(x, w, y, geo, make, lay, lay),)
    try:
        with _run_lock:
            team = _team_size(2.0 * y.size * w[0].size)
            key = ("fwd", "tuned" if tuned() else lay, team, geo.key(), b is not None) + _layouts(x, w, y)
            (prim,) = _cached(key, build)
            prim.run(bufs)
    except OneDNNError:
        return None
    CALLS["forward"] += 1
    return y


def _forward_on(x: np.ndarray, w: np.ndarray, y: np.ndarray, geo: Geometry, make: Any, any_: bool,
                pick: bool) -> _Primitive:
    """The forward primitive ``make(m)`` on the user's plain x and y (`any_` False), on format `any`, or
    (`pick`) on the dW primitive's blocked layouts (:func:`_in_weights_layout`)."""
    m = _Mds(x, w, y, geo.group, any_)
    return _in_weights_layout(m, geo, make) if pick else make(m)


# NOTE: the forward layouts :func:`_fastest` measures: the user's buffers (oneDNN's GEMM kernels), the dW
# primitive's blocked pick (nChw16c on AVX-512) and format `any` (an NHWC brgconv on AVX-512).  Which wins
# depends on the map, the channels, the batch and the CPU (benchmarks/README.md, session 11).
_FORWARD_LAYOUTS = (("plain", False, False), ("blocked", True, True), ("any", True, False))
TUNE = os.environ.get("NETVIZ_CONV_TUNE", "0") == "1"
"""``NETVIZ_CONV_TUNE=1``: under LAYOUT "auto", the forward's layout is measured per problem on its first call.
Off by default: the measuring makes a net's first run several times slower (ResNet-50 batch 8: 6.4 s against
1.9 s, measured under load), and the pick depends on timings, so two processes may run a conv in different
layouts whose sums round differently (up to ~2e-6 relative); it gains ~2 % on repeated forward runs."""
TUNE_ROUNDS = 3
TUNE_BUDGET_S = 0.5  # NOTE: seconds of measuring per problem after which no further round starts


def tuned() -> bool:
    """Whether the forward's layout is measured (:func:`_fastest`) rather than set by :func:`blocked`."""
    return TUNE and LAYOUT == "auto"


def _timed(prim: _Primitive, bufs: dict[int, np.ndarray]) -> float:
    """Seconds of one run of `prim` on `bufs` (reorders in and out included)."""
    t = time.perf_counter()
    prim.run(bufs)
    return time.perf_counter() - t


def _fastest(builds: dict[str, Any], bufs: dict[int, np.ndarray]) -> _Primitive:
    """The fastest of the primitives `builds` makes (name -> build; the ones oneDNN refuses are skipped),
    timed on the call's own buffers in :data:`TUNE_ROUNDS` rounds of alternating order, best of its rounds
    kept: a burst of another job's load then hits each of them alike, and the first round's page faults
    and warm-up fall out of the best.  A conv whose rounds have taken :data:`TUNE_BUDGET_S`
    stops there (a big one is measured once or twice).  The winner's name is its ``layout``."""
    made = {}
    for name, build in builds.items():
        try:
            made[name] = build()
        except OneDNNError:
            continue
        made[name].layout = name
    if not made:
        raise OneDNNError("oneDNN refused every layout")
    best, spent = dict.fromkeys(made, float("inf")), 0.0
    for r in range(TUNE_ROUNDS if len(made) > 1 else 0):
        for name in (list(made) if r % 2 else list(made)[::-1]):
            t = _timed(made[name], bufs)
            best[name], spent = min(best[name], t), spent + t
        if spent > TUNE_BUDGET_S:
            break
    won = min(best, key=best.__getitem__)
    for name, prim in made.items():
        if name != won:
            prim.destroy()
    return made[won]


def _layouts(*arrays: np.ndarray) -> tuple:
    return tuple((a.shape, a.strides) for a in arrays)


def backward(x: np.ndarray, w: np.ndarray, dy: np.ndarray, geo: Geometry, need_db: bool, need_dx: bool
             ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None] | None:
    """(dW, db, dX) of ``conv(x, w)`` given `dy` (db and dX None unless asked), dW in `w`'s memory
    order, dX in `x`'s; None where oneDNN refuses the problem.  NOTE: db is NumPy's sum (pairwise): oneDNN's
    fused one adds 25k float32 terms in a row on ResNet's 56x56 maps, 3e-6 off (NumPy's 1e-7), measured."""
    x, w, dy = _plain(x), _plain(w), _plain(dy)
    if dy.shape[2:] != geo.out(x.shape[2:], w.shape[2:]) or w.shape[1] * geo.group != x.shape[1]:
        return None
    dw = empty_as(w, w.shape)
    dx = empty_as(x, x.shape) if need_dx else None
    lay_w, lay_d = blocked(w.shape[2:], x.shape[1]), blocked(w.shape[2:], x.shape[1], data_grad=True)

    def data(m: _Mds) -> _Primitive:
        L, pdd = lib(), _P()
        check(L.convolution_backward_data_primitive_desc_create(
            ctypes.byref(pdd), L.engine, _CONV_DIRECT, m.px, m.pw, m.py, *geo.dims,
            _forward_pd(m, False, geo, _FWD_TRAINING), L.attr), "dnnl_convolution_backward_data_primitive_desc_create")
        return _Primitive(_fast(pdd), {ARG_DIFF_DST: (m.y, _Q_DIFF_DST), ARG_WEIGHTS: (m.w, _Q_WEIGHTS),
                                       ARG_DIFF_SRC: (m.x, _Q_DIFF_SRC)})

    def build() -> tuple[_Primitive, ...]:
        m = _Mds(x, w, dy, geo.group, lay_w)
        pdw = _weights_pd(m, geo)
        prims = [_Primitive(_fast(pdw), {ARG_SRC: (m.x, _Q_SRC), ARG_DIFF_DST: (m.y, _Q_DIFF_DST),
                                         ARG_DIFF_WEIGHTS: (m.w, _Q_DIFF_WEIGHTS)})]
        if need_dx:  # NOTE: dX on the dW primitive's layouts: dY's reorder serves both
            prims.append(_in_weights_layout(m, geo, data, pdw) if lay_d and lay_w else
                         data(m if lay_d == lay_w else _Mds(x, w, dy, geo.group, lay_d)))
        return tuple(prims)
    bufs = {ARG_SRC: x, ARG_DIFF_DST: dy, ARG_DIFF_WEIGHTS: dw}
    try:
        with _run_lock:
            team = _team_size(2.0 * dy.size * w[0].size * (1 + need_dx))
            prims = _cached(("bwd", lay_w, lay_d, team, geo.key(), need_dx) + _layouts(x, w, dy), build)
            prims[0].run(bufs)
            if dx is not None:  # NOTE: dY's reorder, when both read the same layout, is done once
                ready = frozenset({ARG_DIFF_DST}) if prims[0].same_inner(prims[1], ARG_DIFF_DST) else frozenset()
                prims[1].run({ARG_DIFF_DST: dy, ARG_WEIGHTS: w, ARG_DIFF_SRC: dx}, ready)
    except OneDNNError:
        return None
    CALLS["backward"] += 1
    return dw, dy.sum(axis=(0,) + tuple(range(2, dy.ndim))) if need_db else None, dx


# ---- batch normalization: routed by norm.py for NHWC maps only (benchmarks/README.md, round 3b) ----
# NOTE: on ResNet's NCHW maps oneDNN offers only its generic plain-layout kernel (ncsp_bnorm), 1.7x slower
# than norm.py's row passes forward and even backward; its JIT kernel wants NHWC or blocked maps.

def bn_fits(x: np.ndarray, *more: np.ndarray) -> bool:
    """Whether oneDNN takes a batch normalization problem: the library here and on, 4-D float32 arrays of
    one shape and one dense memory order (NCHW, or an NCHW view of NHWC), with pixels."""
    return (available() and isinstance(x, np.ndarray) and x.ndim == 4 and x.size > 0
            and all(isinstance(a, np.ndarray) and a.dtype == np.float32 and a.shape == x.shape
                    and a.strides == x.strides for a in (x, *more))
            and _dense(x))


def _bn_forward_pd(md: _P, epsilon: float) -> _P:
    L, pd = lib(), _P()
    check(L.batch_normalization_forward_primitive_desc_create(ctypes.byref(pd), L.engine, _FWD_TRAINING, md, md,
                                                              epsilon, _USE_SCALE | _USE_SHIFT, L.attr),
          "dnnl_batch_normalization_forward_primitive_desc_create")
    return pd


def _vector(v: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(v, np.float32).reshape(-1)


def _bn_run(kind: str, x: np.ndarray, epsilon: float, build: Any, bufs: dict[int, np.ndarray]) -> bool:
    """Run the cached `kind` primitive (`build` on first use) on `bufs`; False where oneDNN refused."""
    try:
        with _run_lock:
            team = _team_size(20.0 * x.size)  # NOTE: a few passes over X: serial below SERIAL_FLOPS / 20
            (prim,) = _cached((kind, team, float(epsilon)) + _layouts(x), build)
            prim.run(bufs)
    except OneDNNError:
        return False
    CALLS[kind] += 1
    return True


def bn_forward(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, epsilon: float
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Training batch normalization of `x` (:func:`bn_fits`): (Y in `x`'s memory order, batch mean,
    batch BIASED variance); None where oneDNN refuses (the caller runs NumPy)."""
    y, c = empty_as(x, x.shape), x.shape[1]
    mean, var = np.empty(c, np.float32), np.empty(c, np.float32)

    def build() -> tuple[_Primitive, ...]:
        md, vmd = _md(x.shape, _estrides(x)), _md((c,), (1,))
        return (_Primitive(_fast(_bn_forward_pd(md, epsilon)), {
            ARG_SRC: (md, 0), ARG_DST: (md, 0), ARG_MEAN: (vmd, 0), ARG_VARIANCE: (vmd, 0), ARG_SCALE: (vmd, 0),
            ARG_SHIFT: (vmd, 0)}),)
    ok = _bn_run("bn_forward", x, epsilon, build, {ARG_SRC: x, ARG_DST: y, ARG_MEAN: mean, ARG_VARIANCE: var,
                                                   ARG_SCALE: _vector(scale), ARG_SHIFT: _vector(bias)})
    return (y, mean, var) if ok else None


def bn_backward(x: np.ndarray, scale: np.ndarray, dy: np.ndarray, mean: np.ndarray, var: np.ndarray,
                epsilon: float) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(dX in `x`'s memory order, dscale, dbias) of training batch normalization given `dy`, the batch
    `mean` and BIASED `var` (:func:`bn_fits` on `x` and `dy`); None where oneDNN refuses."""
    c = x.shape[1]
    dx, dscale, dbias = empty_as(x, x.shape), np.empty(c, np.float32), np.empty(c, np.float32)

    def build() -> tuple[_Primitive, ...]:
        L, md, vmd, pd = lib(), _md(x.shape, _estrides(x)), _md((c,), (1,)), _P()
        check(L.batch_normalization_backward_primitive_desc_create(
            ctypes.byref(pd), L.engine, _BACKWARD, md, md, md, epsilon, _USE_SCALE | _USE_SHIFT,
            _bn_forward_pd(md, epsilon), L.attr), "dnnl_batch_normalization_backward_primitive_desc_create")
        return (_Primitive(_fast(pd), {ARG_SRC: (md, 0), ARG_DIFF_DST: (md, 0), ARG_MEAN: (vmd, 0),
                                       ARG_VARIANCE: (vmd, 0), ARG_SCALE: (vmd, 0), ARG_DIFF_SRC: (md, 0),
                                       ARG_DIFF_SCALE: (vmd, 0), ARG_DIFF_SHIFT: (vmd, 0)}),)
    ok = _bn_run("bn_backward", x, epsilon, build, {
        ARG_SRC: x, ARG_DIFF_DST: dy, ARG_MEAN: _vector(mean), ARG_VARIANCE: _vector(var), ARG_SCALE: _vector(scale),
        ARG_DIFF_SRC: dx, ARG_DIFF_SCALE: dscale, ARG_DIFF_SHIFT: dbias})
    return (dx, dscale, dbias) if ok else None
