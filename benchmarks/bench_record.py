"""Recorded runs (issue 45): what ``netviz run --record`` costs over the run, and its file over ``--dump``'s.

Rows, ResNet-50 (Caffe2's builder net with its init, tests/golden/models/resnet50) at batch 1,
forward + backward (``--loss last_out_L1000``), in this process, alternated, best of 3:
- **recording time**: the debugger's backward() + continue_() with a :class:`Recorder` attached
  (version 0 of every blob, each op's outputs, the index) against the same run without it; target
  <= 2x the run.
- **file size**: the ``.nvrec`` against the bytes ``netviz run --dump`` writes for the same run
  (its .npy files and index.json); target <= 1.2x.
``--quick`` runs the bundled MLP instead (the smoke test keeps the module from rotting).
"""
from __future__ import annotations

import contextlib
import io
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT

RESNET = ROOT / "tests" / "golden" / "models" / "resnet50"
TIME_TARGET, SIZE_TARGET = 2.0, 1.2


def _case(quick: bool) -> tuple[Path, Path, dict[str, Any], str]:
    if quick:
        mlp = ROOT / "examples" / "mlp_forward"
        return mlp / "predict_net.pb", mlp / "init_net.pb", {"data": (16, 8)}, "loss"
    return RESNET / "predict_net.pb", RESNET / "init_net.pb", {"data": (1, 3, 224, 224)}, "last_out_L1000"


def _timed(model: Any, feeds: dict[str, Any], loss: str, record_to: Path | None) -> float:
    """Seconds of backward() + continue_() (with a recorder from before the first op to its close)."""
    from engine.debugger import Debugger
    from engine.debugger.recording import Recorder

    dbg = Debugger(model, feeds, device="cpu", loss=loss)
    t = time.perf_counter()
    rec = Recorder(dbg, record_to) if record_to is not None else None
    dbg.backward()
    stop = dbg.continue_()
    if rec is not None:
        rec.close(stop)
    return time.perf_counter() - t


def _dump_bytes(net: Path, init: Path, feeds: dict[str, Any], loss: str, folder: Path) -> int:
    from netviz.cli import main

    shape = ",".join(map(str, feeds["data"]))
    with contextlib.redirect_stdout(io.StringIO()):
        main(["run", str(net), "--init", str(init), "--input", f"data={shape}", "--loss", loss, "--dump", str(folder)])
    return sum(p.stat().st_size for p in folder.iterdir())


def run(quick: bool = False) -> list[dict[str, Any]]:
    import warnings

    from engine.model.modelio import load_model

    net, init, feeds, loss = _case(quick)
    model = load_model(net, init=init)
    label = "mlp" if quick else "resnet50 b1 fwd+bwd"
    with tempfile.TemporaryDirectory(prefix="netviz-record-") as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        folder = Path(tmp)
        plain, recorded = [], []
        for _ in range(1 if quick else 3):
            plain.append(_timed(model, feeds, loss, None))
            recorded.append(_timed(model, feeds, loss, folder / "run.nvrec"))
        size = (folder / "run.nvrec").stat().st_size
        dump = _dump_bytes(net, init, feeds, loss, folder / "dump")
    run_s, rec_s = min(plain), min(recorded)
    return [{"name": f"record: {label}, recording time", "netviz_s": rec_s, "reference": {"run": run_s},
             "target": f"<= {TIME_TARGET:g}x run", "ok": rec_s <= TIME_TARGET * run_s,
             "note": f"{size / 1e6:.0f} MB written"},
            {"name": f"record: {label}, file size MB", "netviz_s": size / 1e6, "reference": {"dump MB": dump / 1e6},
             "target": f"<= {SIZE_TARGET:g}x dump (ratio)", "ok": size <= SIZE_TARGET * dump}]
