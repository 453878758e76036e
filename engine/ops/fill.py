"""Fill ops (init nets): ConstantFill, GaussianFill, XavierFill, MSRAFill, UniformFill, GivenTensor*Fill, RangeFill…"""
from __future__ import annotations

# ---- kernels ----

# ---- gradients ----

# ---- shapes ----
