"""Device diff: run one model on a CPU and on a GPU workspace and compare every blob."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine import device as dev
from engine.debugger.debugger import Debugger
from engine.modelio import Model


@dataclass(frozen=True, slots=True)
class BlobDiff:
    """Largest absolute and relative difference of one blob between the two runs."""

    name: str
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float


def device_diff(model: Model, feeds: Mapping[str, Any] | None = None, *, loss: str | None = None) -> list[BlobDiff]:
    """Run `model` (forward, and backward when `loss` is given) with every op on the CPU and
    with every op on the GPU; return per blob the max abs / rel difference, worst first.

    Without CuPy, run it under :func:`engine.device.use_fake_cuda` to exercise the plumbing.
    """
    runs = []
    for device in ("cpu", "gpu"):
        dbg = Debugger(model, feeds, device=device, loss=loss, record_stats=False, budget_bytes=0)
        if loss is not None:
            dbg.backward()
        stop = dbg.continue_()
        if stop.reason == "error":
            raise dbg_error(device, stop.detail)
        runs.append(dbg.ws.values)
    cpu, gpu = runs
    diffs = []
    for name in sorted(set(cpu) & set(gpu)):
        a, b = cpu[name], gpu[name]
        if not (hasattr(a, "dtype") and hasattr(b, "dtype")) or a.dtype.kind not in "biufc":
            continue
        a, b = np.asarray(dev.to_host(a), np.float64), np.asarray(dev.to_host(b), np.float64)
        if a.shape != b.shape:
            diffs.append(BlobDiff(name, a.shape, float("inf"), float("inf")))
            continue
        err = np.abs(a - b)
        rel = err / np.maximum(np.abs(a), 1e-12)
        diffs.append(BlobDiff(name, a.shape, float(err.max(initial=0.0)), float(rel.max(initial=0.0))))
    return sorted(diffs, key=lambda d: -d.max_abs)


def dbg_error(device: str, detail: str) -> Exception:
    from engine.errors import ExecutionError
    return ExecutionError(f"device diff: the {device} run failed: {detail}")
