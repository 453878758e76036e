"""Caffe2's ``Int8TensorCPU`` as a value: :class:`Int8Tensor` (re-exported by :mod:`engine.runtime.blobio`).

Its own module, free of NumPy at import, so a UI can tell a quantized value from an array
(``isinstance``) without importing NumPy and the blob serializer before its first frame.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


@dataclass(eq=False)
class Int8Tensor:
    """Caffe2's ``Int8TensorCPU``: quantised values with their scale and zero point."""

    data: np.ndarray
    scale: float
    zero_point: int

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def size(self) -> int:
        return int(self.data.size)

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    def describe(self) -> str:
        """One line for inspectors: the real value of each integer."""
        return f"Int8 tensor: real = {self.scale:.6g} × (q − {self.zero_point})"

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.data if dtype is None else self.data.astype(dtype)

    def dequantized(self) -> np.ndarray:
        """The real values this tensor stands for (float32)."""
        import numpy as np  # noqa: PLC0415 (the data is an array: numpy is loaded by then)

        return (np.float32(self.scale) * (self.data.astype(np.int32) - self.zero_point)).astype(np.float32)

    def copy(self) -> Int8Tensor:
        return Int8Tensor(self.data.copy(), self.scale, self.zero_point)
