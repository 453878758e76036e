"""Detection ops (Detectron exports): GenerateProposals, BoxWithNMSLimit, RoIAlign, BBoxTransform…"""
from __future__ import annotations

# ---- kernels ----

# ---- gradients ----

# ---- shapes ----
