"""Int8 ops (Mask R-CNN2Go int8): Int8Conv, Int8Quantize, Int8Dequantize…"""
from __future__ import annotations

# ---- kernels ----

# ---- gradients ----
# NOTE: Caffe2 registers no gradient maker for any Int8 op; reaching one raises NoGradientMakerError.


# ---- shapes ----
