"""Losses: SoftmaxWithLoss, LabelCrossEntropy, CrossEntropy, AveragedLoss, SquaredL2Distance."""
from __future__ import annotations

# ---- kernels ----

# ---- gradients ----

# ---- shapes ----
