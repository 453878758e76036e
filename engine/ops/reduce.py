"""Reductions: ReduceSum/Mean/Max/Min, SumElements, ArgMax/ArgMin."""
from __future__ import annotations

# ---- kernels ----

# ---- gradients ----

# ---- shapes ----
