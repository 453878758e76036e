"""GPU: ResNet-50 forward (batch 8) on CuPy vs PyTorch CUDA, target <= 2x; a skipped row (ok=None)
without CuPy and a CUDA device, which is the case on the 2-core CPU benchmark machine."""
from __future__ import annotations

from typing import Any




def _gpu() -> bool:
    try:
        import cupy  # noqa: PLC0415
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # ImportError, or CUDA without a device/driver
        return False


def run(quick: bool) -> list[dict[str, Any]]:
    row = {"name": "ResNet-50 forward batch 8, GPU", "netviz_s": None, "reference": {}, "target": "<= 2x PyTorch CUDA"}
    if not _gpu():
        return [{**row, "ok": None, "note": "skipped: no CuPy/GPU"}]
    return [{**row, "ok": None, "note": "skipped: GPU timing not implemented yet (CuPy present)"}]
