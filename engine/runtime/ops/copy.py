"""Device copies: Copy, CopyCPUToGPU, CopyGPUToCPU, EnsureCPUOutput, CopyOnDeviceLike."""
from __future__ import annotations

import numpy as np

from engine.runtime import device as dev
from engine.runtime.grad_makers import cc_maker, no_gradient, simple
from engine.catalogue.registry import gradient, kernel
from engine.catalogue.registry import shape
from engine.runtime.shapes import same_as

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
gradient("Copy")(simple("CopyOnDeviceLike", "GO0 I0", "GI0"))  # NOTE: back onto X's device.
no_gradient("EnsureCPUOutput")


def _mirror_copy(grad_type):
    def make(g):
        if not g.is_sparse_go(0):
            return [g.op_(grad_type, [g.GO(0)], [g.GI(0)])]
        return [g.op_(grad_type, [g.GO_I(0)], [g.GI_I(0)]), g.op_(grad_type, [g.GO_V(0)], [g.GI_V(0)])]
    return cc_maker(make)


gradient("CopyGPUToCPU")(_mirror_copy("CopyCPUToGPU"))
gradient("CopyCPUToGPU")(_mirror_copy("CopyGPUToCPU"))


# ---- shapes ----

shape("Copy", "CopyCPUToGPU", "CopyGPUToCPU", "CopyFromCPUInput", "CopyOnDeviceLike", "EnsureCPUOutput")(same_as(0))


# ---- onnx ----
from engine.catalogue.registry import onnx_converter  # noqa: E402


@onnx_converter("Copy", "CopyCPUToGPU", "CopyGPUToCPU", "CopyFromCPUInput", "CopyOnDeviceLike", "EnsureCPUOutput")
def copy_onnx(c):
    """A device copy is a value copy: Identity (ONNX models carry no device)."""
    c.emit("Identity", [c.x(0)], [c.y(0)])
