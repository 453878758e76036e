"""Device copies: Copy, CopyCPUToGPU, CopyGPUToCPU, EnsureCPUOutput, CopyOnDeviceLike."""
from __future__ import annotations

# ---- kernels ----

# ---- gradients ----

# ---- shapes ----
