"""Helpers shared by the benchmark modules: best-of timing, BLAS thread count, reference runs.

References run under the oracle venv (``.venv-caffe2``: Caffe2 1.10.2 + PyTorch 1.10.2, Python 3.9)
in a subprocess with the same thread count as netviz's BLAS; absent venv means no reference.
"""
from __future__ import annotations

import ctypes
import glob
import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
CAFFE2_PY = ROOT / ".venv-caffe2" / "bin" / "python"


def best(fn: Callable[[], Any], repeat: int) -> float:
    """Minimum wall time of `repeat` calls (other engineers share the cores: the min is the signal)."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def blas_threads() -> int:
    """Threads NumPy's BLAS uses: threadpoolctl when installed, else ask the bundled OpenBLAS."""
    try:
        from threadpoolctl import threadpool_info  # noqa: PLC0415
        return max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")
    except (ImportError, ValueError):
        pass
    libdir = os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs")
    for lib in glob.glob(os.path.join(libdir, "*openblas*")):
        so = ctypes.CDLL(lib)
        for sym in ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_", "openblas_get_num_threads"):
            if hasattr(so, sym):
                return int(getattr(so, sym)())
    return int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)


def reference_env() -> dict[str, str]:
    """Environment for a reference subprocess: the same thread count as netviz's BLAS."""
    n = str(blas_threads())
    return dict(os.environ, OMP_NUM_THREADS=n, MKL_NUM_THREADS=n, OPENBLAS_NUM_THREADS=n)


def run_reference(args: list[str], timeout: int = 600) -> dict[str, Any] | None:
    """Run ``.venv-caffe2/bin/python ARGS`` (it prints one JSON line last); None when unavailable."""
    if not CAFFE2_PY.exists():
        return None
    try:
        out = subprocess.run([str(CAFFE2_PY), *args], capture_output=True, text=True, timeout=timeout,
                             env=reference_env(), cwd=ROOT)
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError):
        return None
