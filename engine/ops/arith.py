"""Elementwise arithmetic with Caffe2 broadcasting: Add, Sub, Mul, Div, Sum, WeightedSum, Scale, Exp, Log, Sqr, Sqrt, Negative, Abs, Pow, Mean, comparisons, logical ops."""
from __future__ import annotations

# ---- kernels ----

# ---- gradients ----

# ---- shapes ----
