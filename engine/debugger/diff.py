"""Device diff: run one model on a CPU and on a GPU workspace and compare every blob.

Without CuPy and a GPU the GPU run uses the NumPy-backed stand-in device
(:func:`engine.runtime.device.use_fake_cuda`): the plumbing (device options, copies) is exercised; kernels
with another summation order there differ by float rounding.  :meth:`DiffReport.header` says what
the comparison found, never what it should have.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.runtime import device as dev
from engine.debugger.debugger import Debugger
from engine.errors import ExecutionError
from engine.model.modelio import Model


@dataclass(frozen=True, slots=True)
class BlobDiff:
    """Largest absolute and relative difference of one blob between the two runs."""

    name: str
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float


@dataclass(frozen=True, slots=True)
class DiffReport:
    """Per-blob differences worst first, the blobs in the order the CPU run wrote them, and
    whether the GPU side was the stand-in device."""

    diffs: tuple[BlobDiff, ...]
    order: tuple[str, ...]
    stand_in: bool

    def header(self, threshold: float) -> str:
        """What the comparison found, in one line: how many blobs differ, the worst, the first over
        `threshold`; never what it "should" find (the stand-in's float rounding is not 0 everywhere)."""
        side = "the stand-in GPU (NumPy on the host)" if self.stand_in else "the GPU"
        differ = [d for d in self.diffs if d.max_abs > 0]
        first = self.first_over(threshold)
        if not differ:
            return f"cpu vs {side}: all {len(self.diffs)} blobs equal (none over {threshold:g})"
        worst = differ[0]
        return (f"cpu vs {side}: {len(differ)} of {len(self.diffs)} blobs differ, worst {worst.name} "
                f"(abs {worst.max_abs:.3g}); " + (f"first over {threshold:g}: {first.name}" if first
                                                  else f"none over {threshold:g} (float rounding)"))

    def first_over(self, threshold: float) -> BlobDiff | None:
        """The earliest-written blob whose max abs difference exceeds `threshold`."""
        by_name = {d.name: d for d in self.diffs}
        return next((by_name[n] for n in self.order if n in by_name and by_name[n].max_abs > threshold), None)


def device_diff(model: Model, feeds: Mapping[str, Any] | None = None, *, loss: str | None = None,
                synthesize_params: bool = False, seed: int = 0, cancel: threading.Event | None = None) -> DiffReport:
    """Run `model` (forward, and backward when `loss` is given) with every op on the CPU and
    with every op on the GPU (the stand-in when there is none); compare every blob.

    Setting `cancel` (from another thread) stops the run between two ops: ExecutionError."""
    stand_in = dev.cupy_module() is None
    runs, order = [], []
    for device in ("cpu", "gpu"):
        with dev.use_fake_cuda() if device == "gpu" and stand_in else contextlib.nullcontext():
            dbg = Debugger(model, feeds, device=device, loss=loss, record_stats=False, budget_bytes=0,
                           keep_budget=0, synthesize_params=synthesize_params, seed=seed, cancel=cancel)
            if loss is not None:
                dbg.backward()
            stop = dbg.continue_()
        if stop.reason == "cancelled":
            raise ExecutionError("device diff cancelled")
        if stop.reason == "error":
            raise ExecutionError(f"device diff: the {device} run failed: {stop.detail}")
        if device == "cpu":
            order = list(dict.fromkeys(o for r in dbg.records for o in _outputs(dbg, r.path)))
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
        with np.errstate(invalid="ignore"):
            err = np.where(np.isnan(a) & np.isnan(b), 0.0, np.abs(a - b))  # NaN in both runs agrees
            rel = err / np.maximum(np.abs(a), 1e-12)
        diffs.append(BlobDiff(name, a.shape, float(np.nanmax(err, initial=0.0)), float(np.nanmax(rel, initial=0.0))))
    return DiffReport(tuple(sorted(diffs, key=lambda d: -d.max_abs)), tuple(order), stand_in)


def _outputs(dbg: Debugger, path: tuple[Any, ...]) -> list[str]:
    """Output names of the top-level op at `path` (subnet ops write into their own workspaces)."""
    if len(path) != 2:
        return []
    return list(dbg._program().op[path[1]].output)
