"""The TUI's engine-vs-ONNX-Runtime comparison: export the loaded net to a temporary .onnx file,
run it in ONNX Runtime on the same inputs and weights as the engine, and compare every top-level
value (:func:`engine.onnx.export.diff_against_runtime`).

No Textual here: the main screen runs :func:`runtime_diff` in a worker and colours the graph with
:func:`netviz.overlays.diff_colors`.  Each stage reports through `progress` and checks `cancel`
before it starts (a stage itself, e.g. one ONNX Runtime session, runs to its end).
"""
from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import ExecutionError


@dataclass(frozen=True)
class RuntimeDiff:
    """The per-value rows (op order), the export's notes (forward section only, made-up weights)."""

    rows: tuple[Any, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)


def runtime_diff(model: Any, feeds: Mapping[str, Any], *, cancel: threading.Event | None = None,
                 progress: Callable[[str], None] = lambda line: None) -> RuntimeDiff:
    """Export `model` (fed `feeds`; weights made up when it has no init net, seeded, as the export
    does) and compare the engine with ONNX Runtime.  Raises NetvizError in one line: onnx or
    onnxruntime missing (how to install them), ops with no ONNX form (every one named, as
    ``netviz export`` says), or ExecutionError when `cancel` is set."""
    from engine.onnx import export as ox  # noqa: PLC0415 - heavy, and only when asked for

    onnx = ox.onnx_module()
    ox.onnxruntime_module()  # NOTE: both missing-package hints before any work is done

    def stage(line: str) -> None:
        if cancel is not None and cancel.is_set():
            raise ExecutionError("ONNX Runtime diff cancelled")
        progress(line)

    where = str(model.path or "net")
    stage("running the net in the engine…")
    src = ox.prepare_model(model, feeds, where=where, random_params=not len(model.init.op))
    stage(f"exporting {len(src.net.op)} ops to ONNX…")
    done = ox.export(src, where=where)
    with tempfile.TemporaryDirectory(prefix="netviz-onnx-") as tmp:
        target = Path(tmp) / "net.onnx"
        onnx.save(done.model, str(target))
        stage(f"running ONNX Runtime ({len(done.model.graph.node)} nodes)…")
        rows = ox.diff_against_runtime(src, onnx.load(str(target)), cancel=cancel)
    stage(f"compared {len(rows)} values")
    return RuntimeDiff(tuple(rows), tuple(src.notes))
