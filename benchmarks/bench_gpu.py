"""GPU: ResNet-50 forward (batch 8) on CuPy vs PyTorch CUDA, target <= 2x; a skipped row (ok=None)
without CuPy and a CUDA device, which is the case on the 2-core CPU benchmark machine.

The measurement itself is :func:`scripts.gpu_check.bench_resnet50` (the GPU check's benchmark
part, docs/gpu.md), so `make bench` and the one-command GPU check report the same figure."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from engine.runtime import device as dev


def run(quick: bool) -> list[dict[str, Any]]:
    row = {"name": "ResNet-50 forward batch 8, GPU", "netviz_s": None, "reference": {}, "target": "<= 2x PyTorch CUDA"}
    if dev.cupy_module() is None:
        return [{**row, "ok": None, "note": "skipped: no CuPy/GPU"}]
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    import gpu_check  # noqa: PLC0415

    fwd = gpu_check.bench_resnet50(8, 3 if quick else 10, dry_run=False)[0]
    torch_s = fwd.get("torch_cuda_s")
    return [{**row, "netviz_s": fwd["netviz_cupy_s"], "reference": {"pytorch_cuda": torch_s} if torch_s else {},
             "ok": (fwd["netviz_cupy_s"] <= 2 * torch_s) if torch_s else None,
             "note": fwd.get("torch_note", f"max abs vs torch {fwd.get('max_abs_vs_torch')}")}]
