"""Array namespaces per device: ``numpy`` for CPU, ``cupy`` (imported lazily) for CUDA.

Kernels are written once against ``xp``; :func:`namespace` picks it from a device type.
A NumPy-backed stand-in "fake CUDA" (:func:`use_fake_cuda`) lets CPU-only tests run
CUDA-tagged nets through the same dispatch; ``device="cpu"`` runs map every op to CPU.
"""
from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

import numpy as np

from engine.errors import ExecutionError

CPU, CUDA, HIP = 0, 1, 6
GPU_TYPES = frozenset({CUDA, HIP})

_state: dict[str, Any] = {"cupy": None, "fake": False}


class FakeCudaArray(np.ndarray):
    """A NumPy array that says it lives on the stand-in GPU (the plumbing tests look at it)."""


def _fake_namespace() -> types.ModuleType:
    ns = types.ModuleType("fake_cuda")
    ns.__dict__.update({k: getattr(np, k) for k in dir(np) if not k.startswith("__")})
    ns.asnumpy = lambda a: np.asarray(a).view(np.ndarray)
    ns.asarray = lambda a, dtype=None: np.asarray(a, dtype=dtype).view(FakeCudaArray)
    ns.is_fake = True
    return ns


_FAKE: types.ModuleType | None = None  # NOTE: made on first use: reading every NumPy attribute imports
# NumPy's lazy submodules (0.1-0.6 s), and every `import engine` (the TUI's start-up) paid for it


def cupy_module() -> Any:
    """The ``cupy`` module when it imports and sees a GPU, else None (cached)."""
    if _state["cupy"] is None:
        try:
            import cupy  # noqa: PLC0415

            _state["cupy"] = cupy if cupy.cuda.runtime.getDeviceCount() > 0 else False
        except Exception:  # ImportError, CUDARuntimeError without driver
            _state["cupy"] = False
    return _state["cupy"] or None


def has_gpu() -> bool:
    """True when CUDA ops can run: real CuPy with a GPU, or the stand-in is active."""
    return bool(_state["fake"]) or cupy_module() is not None


def namespace(device_type: int, *, force_cpu: bool = False) -> Any:
    """The array module for `device_type`: numpy for CPU, cupy (or the stand-in) for GPUs.

    Raises
    ------
    ExecutionError
        For a GPU device when neither CuPy with a GPU nor the stand-in is available.
    """
    if force_cpu or device_type not in GPU_TYPES:
        return np
    if _state["fake"]:
        global _FAKE
        if _FAKE is None:
            _FAKE = _fake_namespace()
        return _FAKE
    cp = cupy_module()
    if cp is None:
        raise ExecutionError("CUDA op needs CuPy and a GPU, none found (run on the CPU: device='cpu', "
                             "`--device cpu` on the command line)")
    return cp


def is_cpu_namespace(xp: Any) -> bool:
    """True for plain numpy."""
    return xp is np


def to_device(arr: Any, xp: Any) -> Any:
    """`arr` as an array of namespace `xp` (host copy for numpy, device copy for cupy)."""
    if xp is np:
        return to_host(arr)
    return xp.asarray(arr)


def to_host(arr: Any) -> Any:
    """A NumPy array for any array (cupy → host copy, stand-in → plain ndarray view)."""
    if isinstance(arr, np.ndarray):
        return arr.view(np.ndarray) if type(arr) is not np.ndarray else arr
    get = getattr(arr, "get", None)
    return get() if get is not None and not isinstance(arr, (str, bytes)) else np.asarray(arr)


def device_of_array(arr: Any) -> int:
    """The device type an array lives on (CPU for numpy arrays and non-arrays)."""
    if isinstance(arr, FakeCudaArray):
        return CUDA
    cp = _state["cupy"]
    return CUDA if cp and isinstance(arr, cp.ndarray) else CPU


@contextlib.contextmanager
def use_fake_cuda() -> Iterator[None]:
    """Run CUDA ops on the NumPy-backed stand-in for the duration of the block."""
    old, _state["fake"] = _state["fake"], True
    try:
        yield
    finally:
        _state["fake"] = old


def array_module(arr: Any) -> Any:
    """The namespace that owns `arr`: cupy for CuPy arrays, numpy otherwise (stand-in included)."""
    cp = _state["cupy"]
    return cp if cp and isinstance(arr, cp.ndarray) else np
