"""Sparse ops: Gather, SparseToDense, BatchGather, SparseLengthsSum and the Lengths reducer family."""
from __future__ import annotations

# ---- kernels ----

# ---- gradients ----

# ---- shapes ----
