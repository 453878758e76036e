"""Convolutions (im2col + GEMM): Conv, Conv1D/2D/3D, ConvTranspose."""
from __future__ import annotations

# ---- kernels ----

# ---- gradients ----

# ---- shapes ----
