"""Detection ops (Detectron exports): GenerateProposals, BoxWithNMSLimit, RoIAlign, BBoxTransform…"""
from __future__ import annotations

from engine.grad_makers import should_not_do_gradient, simple
from engine.registry import gradient
from engine.registry import shape
from engine.shapes import TensorInfo, dims, join_layout, same_as, split_layout

# ---- kernels ----

# ---- gradients ----
should_not_do_gradient("GenerateProposals", "GenerateProposalsCPP", "BoxWithNMSLimit", "BBoxTransform")
gradient("RoIAlign", "RoIAlignRotated")(simple("{T}Gradient", "I0 I1 GO0", "GI0"))


# ---- shapes ----

@shape("RoIAlign")
def roi_align_shape(x, rois, *, pooled_h: int = 1, pooled_w: int = 1, order: str = "NCHW"):
    # NOTE: one pooled map per RoI; the RoI count is data-dependent unless `rois` is known.
    r, c = dims(rois)[0], split_layout(dims(x), order)[1]
    return TensorInfo(join_layout(r, c, (pooled_h, pooled_w), order), x.dtype)


shape("RoIAlignGradient")(same_as(0))
