"""One accumulating float32 GEMM straight from the OpenBLAS that NumPy ships (ctypes, no new dependency).

``np.matmul`` can neither accumulate into its output (BLAS's ``beta = 1``) nor take a matrix whose
rows overlap another's: exactly what an implicit-GEMM convolution needs (K² GEMMs over shifted
views of one padded image, summed in place: :mod:`engine.runtime.ops.conv`).  :func:`sgemm` is
None where NumPy's BLAS is not an OpenBLAS exporting ``cblas_sgemm`` (MKL builds, CuPy): callers
then keep their plain NumPy path.  The call releases the GIL (``ctypes.CDLL``), so GEMMs of
different images run on different cores.
"""
from __future__ import annotations

import ctypes
import glob
import os
from collections.abc import Callable

import numpy as np

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112

# (symbol, integer type): scipy-openblas's ILP64 build first (NumPy 2 wheels), then the LP64 ones
_SYMBOLS = (("scipy_cblas_sgemm64_", ctypes.c_int64), ("cblas_sgemm64_", ctypes.c_int64),
            ("scipy_cblas_sgemm", ctypes.c_int), ("cblas_sgemm", ctypes.c_int))

Sgemm = Callable[..., None]


def _load() -> Sgemm | None:
    libdir = os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs")
    for path in glob.glob(os.path.join(libdir, "*openblas*")):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name, int_t in _SYMBOLS:
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.argtypes = [int_t] * 6 + [ctypes.c_float, ctypes.c_void_p, int_t, ctypes.c_void_p, int_t,
                                             ctypes.c_float, ctypes.c_void_p, int_t]
                fn.restype = None
                return fn
    return None


_CBLAS = _load()


def sgemm(a: int, lda: int, b: int, ldb: int, c: int, ldc: int, m: int, n: int, k: int, *,
          beta: float = 0.0, trans_b: bool = False) -> None:
    """``C = A @ op(B) + beta * C`` on raw float32 pointers (row-major; `lda`, `ldb`, `ldc` in
    elements): A is m x k, op(B) is k x n (B itself n x k when `trans_b`), C is m x n.
    NOTE: the caller keeps the arrays behind the pointers alive and checks every extent."""
    _CBLAS(_ROW_MAJOR, _NO_TRANS, _TRANS if trans_b else _NO_TRANS, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc)


def available() -> bool:
    """Whether :func:`sgemm` can run here (NumPy's BLAS is an OpenBLAS with cblas_sgemm)."""
    return _CBLAS is not None
