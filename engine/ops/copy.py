"""Device copies: Copy, CopyCPUToGPU, CopyGPUToCPU, EnsureCPUOutput, CopyOnDeviceLike."""
from __future__ import annotations

import numpy as np

from engine import device as dev
from engine.registry import kernel

# ---- kernels ----

@kernel("Copy")
def copy(xp, x):
    return x.copy()


@kernel("CopyCPUToGPU", "CopyFromCPUInput", "CopyOnDeviceLike")
def copy_to_device(xp, x, _like=None):
    # NOTE: the op's device picks xp; CopyOnDeviceLike's 2nd input only names the target device.
    return dev.to_device(x, xp).copy()


@kernel("CopyGPUToCPU", "EnsureCPUOutput")
def copy_to_cpu(xp, x):
    return np.array(dev.to_host(x))


# ---- gradients ----

# ---- shapes ----
