"""Pointwise activations: Relu, Sigmoid, Tanh, Softmax, LeakyRelu, PRelu, Clip, Elu, Softplus."""
from __future__ import annotations

# ---- kernels ----

# ---- gradients ----

# ---- shapes ----
