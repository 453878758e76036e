"""Detection ops (Detectron exports): GenerateProposals, BoxWithNMSLimit, RoIAlign, BBoxTransform…"""
from __future__ import annotations

from engine.grad_makers import should_not_do_gradient, simple
from engine.registry import gradient

# ---- kernels ----

# ---- gradients ----
should_not_do_gradient("GenerateProposals", "GenerateProposalsCPP", "BoxWithNMSLimit", "BBoxTransform")
gradient("RoIAlign", "RoIAlignRotated")(simple("{T}Gradient", "I0 I1 GO0", "GI0"))


# ---- shapes ----
