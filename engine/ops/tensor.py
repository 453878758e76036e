"""Shape and data movement: Concat, Split, Reshape, Transpose, Flatten, FlattenToVec, ExpandDims, Squeeze, Slice, Cast, Alias, ResizeNearest, NCHW2NHWC, NHWC2NCHW, ResizeLike, Shape, Size."""
from __future__ import annotations

# ---- kernels ----

# ---- gradients ----

# ---- shapes ----
