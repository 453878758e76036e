"""Optimizer ops of training nets: Iter, LearningRate, WeightedSum updates, MomentumSGDUpdate, Adagrad, Adam."""
from __future__ import annotations

# ---- kernels ----

# ---- gradients ----

# ---- shapes ----
