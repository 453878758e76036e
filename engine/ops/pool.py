"""Pooling: MaxPool, AveragePool (and 1D/2D/3D)."""
from __future__ import annotations

# ---- kernels ----

# ---- gradients ----

# ---- shapes ----
