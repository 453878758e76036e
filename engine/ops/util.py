"""Gradient plumbing and inspection: StopGradient, ZeroGradient, Print, Accuracy."""
from __future__ import annotations

# ---- kernels ----

# ---- gradients ----

# ---- shapes ----
