"""Optional compiled kernels (numba) for memory-bound ops that NumPy can only do in several passes.

A training step's SpatialBN, ReluGradient -> SpatialBNGradient and MaxPoolGradient read and write their
maps many times over in NumPy (one ufunc pass per term) and pay a call per pass; a compiled loop per
channel reads each map once while the channel is in cache (benchmarks/README.md, session 11).  numba is
an optional dependency (the ``fast`` extra): without it, or with ``NETVIZ_JIT=0``, every op runs its
NumPy path, which stays the reference that the compiled kernels are tested against.

The kernels live beside their op family (``engine/runtime/ops/<family>_jit.py``) and are imported only
when an op first wants them, so neither the CLI nor the TUI pays numba's import (~0.2 s) or a
compilation (cached on disk by numba after the first run on a machine) unless a big enough map runs.
Imports nothing from netviz; numba only inside :func:`load`.
"""
from __future__ import annotations

import importlib
import os
import threading
from types import ModuleType

import numpy as np

ENABLED = os.environ.get("NETVIZ_JIT", "1") != "0"
"""``NETVIZ_JIT=0`` turns the compiled kernels off (docs/files.md)."""

_loaded: dict[str, ModuleType | None] = {}
_lock = threading.Lock()
WHY_NOT: dict[str, str] = {}
"""Family -> why its compiled kernels are not in use (off, numba missing or not importable, a compilation failed),
for reports and tests."""


def load(family: str) -> ModuleType | None:
    """``engine.runtime.ops.<family>_jit``, imported on first use, or None when the kernels are off or
    numba does not import (the op then takes its NumPy path).  NOTE: a failure is remembered, so an op
    asks once per process, not per call."""
    mod = _loaded.get(family, _loaded)
    if mod is not _loaded:
        return mod  # type: ignore[return-value]
    with _lock:
        if family not in _loaded:
            _loaded[family] = _import(family)
    return _loaded[family]


def _import(family: str) -> ModuleType | None:
    if not ENABLED:
        WHY_NOT[family] = "NETVIZ_JIT=0"
        return None
    try:
        mod = importlib.import_module(f"engine.runtime.ops.{family}_jit")
    except ImportError as e:  # numba absent or built for another NumPy
        WHY_NOT[family] = f"numba not usable: {e}"
        return None
    try:
        mod.warm()
    except Exception as e:  # noqa: BLE001  (a numba that cannot compile here: the NumPy paths, not a failed op)
        WHY_NOT[family] = f"numba could not compile the {family} kernels: {type(e).__name__}: {e}"
        return None
    return mod


def enable(on: bool) -> bool:
    """Turn the compiled kernels on or off for this process, as ``NETVIZ_JIT`` does at start (tests run an
    op both ways); returns the previous setting."""
    global ENABLED
    old, ENABLED = ENABLED, on
    with _lock:
        _loaded.clear()
        WHY_NOT.clear()
    return old


def fp_raises() -> bool:
    """Whether NumPy raises on an invalid or overflowing float operation here (Caffe2's
    ``--caffe2_operator_throw_if_fp_exceptions``, executor.call_kernel's errstate): the compiled kernels make
    NaN and inf silently, so an op asks this and takes its NumPy path, which fails as that flag asks."""
    err = np.geterr()
    return err["invalid"] == "raise" or err["over"] == "raise" or err["divide"] == "raise"
