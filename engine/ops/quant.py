"""Int8 ops (Mask R-CNN2Go int8): Int8Conv, Int8Quantize, Int8Dequantize…

An Int8 blob is an :class:`Int8Tensor`: integer values (uint8, or int32 for biases) plus the
scale and zero point that map them to reals, ``real = scale * (q - zero_point)``.
"""
from __future__ import annotations

from engine.blobio import Int8Tensor  # noqa: F401  (the Int8 blob type, defined with its serialisation)
from engine.registry import shape
from engine.shapes import FLOAT, UINT8, TensorInfo


# ---- kernels ----

# ---- gradients ----
# NOTE: Caffe2 registers no gradient maker for any Int8 op; reaching one raises NoGradientMakerError.


# ---- shapes ----

shape("Int8Quantize")(lambda x, *_: TensorInfo(x.shape, UINT8))
shape("Int8Dequantize")(lambda x: TensorInfo(x.shape, FLOAT))
