"""Optional compiled kernels (numba) for memory-bound ops that NumPy can only do in several passes.

A training step's SpatialBN, ReluGradient -> SpatialBNGradient and MaxPoolGradient read and write their
maps many times over in NumPy (one ufunc pass per term) and pay a call per pass; a compiled loop per
channel reads each map once while the channel is in cache (benchmarks/README.md, session 11).  numba is
an optional dependency (the ``fast`` extra): without it, or with ``NETVIZ_JIT=0``, every op runs its
NumPy path, which stays the reference that the compiled kernels are tested against.

The kernels live beside their op family (``engine/runtime/ops/<family>_jit.py``) and are imported only
when a net needs them, so neither the CLI nor the TUI pays numba's import (~0.2 s) or a compilation
(cached on disk by numba after the first run on a machine) for nets without such ops.  Loading them
(~0.5 s, seconds on a machine's first run) never lands inside one op:

- a whole net run (``executor.run_compiled``) loads the families its ops use before its first op
  (:func:`load_for`), so every run of it, the first included, takes the same paths;
- an op run alone (the debugger's steps) uses kernels already loaded, and otherwise starts their loading
  in the background and takes its NumPy path this once (:func:`get`): a step never freezes for numba.

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
_load_lock = threading.Lock()
WHY_NOT: dict[str, str] = {}
"""Family -> why its compiled kernels are not in use (off, numba missing or not importable, a compilation failed),
for reports and tests."""


_SERVES: dict[object, str] = {}
_background: set[str] = set()


def serves(family: str, *kernels: object) -> None:
    """Declare that these op kernels (registry functions) may use `family`'s compiled kernels, so that a
    whole net run loads the family before its first op (:func:`load_for`)."""
    for k in kernels:
        _SERVES[k] = family


def load_for(kernels: object) -> None:
    """Load (waiting) every family that one of `kernels` (a net's op functions) may use; nothing for a net
    without such ops, and nothing at all when the kernels are off."""
    if ENABLED:
        for family in {_SERVES[k] for k in kernels if k in _SERVES}:
            load(family)


def get(family: str) -> ModuleType | None:
    """`family`'s kernels when loaded (or known absent: None); else their loading starts on a background
    thread (once) and this call says None, so the op takes its NumPy path instead of waiting."""
    if not ENABLED:
        return None
    mod = _loaded.get(family, _loaded)
    if mod is not _loaded:
        return mod  # type: ignore[return-value]
    with _lock:
        start = family not in _background and family not in _loaded
        _background.add(family)
    if start:
        threading.Thread(target=load, args=(family,), name=f"netviz-jit-{family}", daemon=True).start()
    return None


def load(family: str) -> ModuleType | None:
    """``engine.runtime.ops.<family>_jit``, imported on first use, or None when the kernels are off or
    numba does not import (the op then takes its NumPy path).  NOTE: a failure is remembered, so an op
    asks once per process, not per call."""
    if not ENABLED:
        WHY_NOT[family] = "NETVIZ_JIT=0"
        return None
    mod = _loaded.get(family, _loaded)
    if mod is not _loaded:
        return mod  # type: ignore[return-value]
    with _load_lock:  # NOTE: not _lock, which get() takes: a step must not wait for a background load
        if family not in _loaded:
            _loaded[family] = _import(family)
    return _loaded[family]


def _import(family: str) -> ModuleType | None:
    WHY_NOT.pop(family, None)
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
    op both ways); returns the previous setting.  What was loaded stays loaded (:func:`forget` drops it)."""
    global ENABLED
    old, ENABLED = ENABLED, on
    return old


def forget() -> None:
    """Drop what was loaded or found missing, as in a fresh process (tests of the loading itself)."""
    with _load_lock, _lock:
        _loaded.clear()
        _background.clear()
        WHY_NOT.clear()


def fp_raises() -> bool:
    """Whether NumPy raises on an invalid or overflowing float operation here (Caffe2's
    ``--caffe2_operator_throw_if_fp_exceptions``, executor.call_kernel's errstate): the compiled kernels make
    NaN and inf silently, so an op asks this and takes its NumPy path, which fails as that flag asks."""
    err = np.geterr()
    return err["invalid"] == "raise" or err["over"] == "raise" or err["divide"] == "raise"
