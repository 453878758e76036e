"""Normalisation and regularisation: SpatialBN, LRN, LayerNorm, Dropout, ChannelShuffle."""
from __future__ import annotations

# ---- kernels ----

# ---- gradients ----

# ---- shapes ----
