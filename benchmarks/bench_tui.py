"""TUI latency as ratios to floors measured in the same run (the cores are shared: absolute times
swing 2-3x with load, ratios much less).  Every probe is a fresh process
(``benchmarks/probes/tui_probe.py``, Textual's ``run_test`` + Pilot) stamped inside the app by a
hook on ``App._display``.

Rows:
- **first frame / bare Textual**: spawn -> the first screen update with the op list and the laid-out
  graph, for DenseNet-121 (zoo, a second opening), ResNet-50 with its init net (Caffe2's builder,
  tests/golden/models) and a 10k-op chain, each beside a bare Textual app (a static screen of the
  same size with a Footer, same Python and Textual, started the same way: ``tui_probe --bare``),
  the two alternated (bare, netviz, bare, netviz, ...); best of each; targets <= 1.5x (<= 2x for
  the chain).
- **key -> complete repaint** while stepping ResNet-50 (pc on the canvas and in the op list, marks,
  status line and op inspector all on the new op): median and worst of 20 presses, beside Textual's
  own refresh interval (1/MAX_FPS) and the bare app's key -> repaint; the note has the pc-only
  frame and 10 queued presses' drain time per step.
- **``c`` through DenseNet-121**: key -> the update showing the end of the net (after one ``n`` and
  ``r``, so the debugger exists and the run starts at op 0), beside the ops time ``netviz run
  --random-params`` prints for the same net (the sum of its ops' own times), alternated; best of each;
  target <= 1.5x.

When the TUI cannot start the rows say ``TUI not ready`` with ``ok=None``.  The load average at each
probe is printed beside its figure.  Benchmarks never assert.
"""
from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_graph import ZOO, chain
from benchmarks.common import ROOT

DENSENET = ZOO / "densenet121" / "predict_net.pbtxt"
RESNET = ROOT / "tests" / "golden" / "models" / "resnet50"
RESNET_ARGS = [str(RESNET / "predict_net.pb"), "--init", str(RESNET / "init_net.pb"), "--input", "data=1,3,224,224"]
BARE = ["--bare"]
CONTINUE_TARGET = 1.5


def probe_env() -> dict[str, str]:
    """The probe's environment: Python's defaults for bytecode, as a user has them.

    ``PYTHONDONTWRITEBYTECODE`` (set in some shells and CI images) makes every start compile all
    ~400 modules again (2-3 s here); the probe drops it and keeps its bytecode under the user
    cache (``PYTHONPYCACHEPREFIX``), never in the checkout.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.setdefault("PYTHONPYCACHEPREFIX", str(Path.home() / ".cache" / "netviz" / "pycache"))
    return env


def warm_up(quick: bool = False) -> None:
    """Compile the modules a probe imports once, so no measured start pays for it, and open
    DenseNet-121 and ResNet-50 once (the parse and drawing caches): the rows are a second opening;
    a first one adds the text parse (0.13-0.25 s in a quiet minute) and the first window's layout."""
    code = "import netviz.app, engine.autodiff.gradient_ir, engine.runtime.ops, benchmarks.probes.tui_probe"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=probe_env(), capture_output=True, timeout=300)
    for args in ([BARE] if quick else [[str(DENSENET)], RESNET_ARGS, BARE]):
        probe(args)


def load() -> float:
    return os.getloadavg()[0]


def probe(args: list[str], timeout: int = 300) -> tuple[float | None, dict[str, Any], str]:
    """(spawn -> first frame seconds, the probe's other JSON lines merged, error text) of one probe process."""
    t0 = time.perf_counter()
    try:
        out = subprocess.run([sys.executable, "-m", "benchmarks.probes.tui_probe", *args], cwd=ROOT,
                             capture_output=True, text=True, timeout=timeout, env=probe_env())
    except subprocess.TimeoutExpired:
        return None, {}, "timed out"
    lines = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    ready = next((x["frame"] - t0 for x in lines if "frame" in x), None)
    got: dict[str, Any] = {k: v for x in lines for k, v in x.items()}
    err = (out.stderr.strip().splitlines() or ["no output"])[-1] if ready is None or out.returncode else ""
    return ready, got, err


def _figures(pairs: list[tuple[float, float]], unit: str = "s") -> str:
    """``0.52 s @2.1, 0.55 s @2.3``: each figure with the load average when it was taken."""
    return ", ".join(f"{t:.2f} {unit} @{la:.1f}" if unit == "s" else f"{t * 1e3:.0f} ms @{la:.1f}" for t, la in pairs)


def first_frame(name: str, args: list[str], target: float, repeat: int) -> dict[str, Any]:
    """netviz's first frame beside the bare Textual app's, alternated, best of `repeat` each."""
    row = {"name": f"TUI first frame {name} / bare Textual", "reference": {}, "target": f"<= {target}x bare"}
    ours: list[tuple[float, float]] = []
    floor: list[tuple[float, float]] = []
    err = ""
    for _ in range(repeat):
        la = load()
        bare, _, _ = probe(BARE)
        if bare is not None:
            floor.append((bare, la))
        la = load()
        got, _, e = probe([*args, "--timeout", "60"])
        if got is None:
            err = e
            break
        ours.append((got, la))
    if not ours or not floor:
        return {**row, "netviz_s": None, "ok": None, "note": f"TUI not ready ({err or 'bare app failed'})"}
    best, base = min(t for t, _ in ours), min(t for t, _ in floor)
    return {**row, "netviz_s": best, "reference": {"bare-textual": base}, "ok": best / base <= target,
            "note": f"netviz {_figures(ours)}; bare {_figures(floor)} (s @ load average)"}


def stepping(presses: int) -> dict[str, Any]:
    """Key -> complete repaint while stepping ResNet-50, beside Textual's refresh interval."""
    from textual import constants

    interval = 1 / constants.MAX_FPS
    la = load()
    _, bare, _ = probe([*BARE, "--steps", "10"])
    la2 = load()
    _, got, err = probe([*RESNET_ARGS, "--steps", str(presses), "--queued", "10"])
    row = {"name": "TUI key -> complete repaint, stepping ResNet-50", "reference": {"textual-refresh": interval},
           "target": "median <= 0.05 s, max <= 0.1 s"}
    full = got.get("full_s", [])
    if not full:
        return {**row, "netviz_s": None, "ok": None, "note": f"TUI not ready ({err})"}
    med, worst = statistics.median(full), max(full)
    pc = got.get("step_s") or [0.0]
    bare_s = bare.get("step_s") or [0.0]
    queued = got.get("queued_s")
    drain = f"; 10 queued n: {queued / 10 * 1e3:.0f} ms per step" if queued else ""
    return {**row, "netviz_s": med, "ok": med <= 0.05 and worst <= 0.1, "max_s": worst,
            "note": f"median of {len(full)} presses, max {worst * 1e3:.0f} ms (pc, marks, status line, inspector); "
                    f"pc frame: median {statistics.median(pc) * 1e3:.0f} ms, max {max(pc) * 1e3:.0f} ms; Textual "
                    f"refresh {interval * 1e3:.1f} ms; bare app key -> repaint median "
                    f"{statistics.median(bare_s) * 1e3:.1f} ms{drain}; load average {la2:.1f} (bare: {la:.1f})"}


RUN_OPS = re.compile(r"^(\d+) ops in ([0-9.]+) ms", re.M)


def run_ops_time() -> tuple[float | None, float]:
    """(the ops time ``netviz run --random-params`` prints for DenseNet-121, the command's wall time)."""
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", "import sys; from netviz.cli import main; sys.exit(main(sys.argv[1:]))",
                          "run", str(DENSENET), "--random-params"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, env=probe_env())
    wall = time.perf_counter() - t
    m = RUN_OPS.search(out.stdout)
    return (float(m.group(2)) / 1e3 if m else None), wall


def continue_through(repeat: int) -> dict[str, Any]:
    """``c`` from op 0 to the end of DenseNet-121 in the app beside ``netviz run``'s ops time, alternated."""
    row = {"name": "TUI c through DenseNet-121 / netviz run ops", "reference": {},
           "target": f"<= {CONTINUE_TARGET}x run ops"}
    ours: list[tuple[float, float]] = []
    theirs: list[tuple[float, float]] = []
    walls, app_ops, err = [], [], ""
    for _ in range(repeat):
        la = load()
        ops, wall = run_ops_time()
        if ops is not None:
            theirs.append((ops, la))
            walls.append(wall)
        la = load()
        _, got, e = probe([str(DENSENET), "--continue"], timeout=600)
        if "continue_s" not in got:
            err = e or "no continue figure"
            break
        ours.append((got["continue_s"], la))
        app_ops.append(got["ops_s"])
    if not ours or not theirs:
        return {**row, "netviz_s": None, "ok": None, "note": f"not measured ({err or 'netviz run failed'})"}
    best, base = min(t for t, _ in ours), min(t for t, _ in theirs)
    return {**row, "netviz_s": best, "reference": {"run-ops": base}, "ok": best / base <= CONTINUE_TARGET,
            "note": f"app {_figures(ours)} (its ops' own times {min(app_ops):.2f}-{max(app_ops):.2f} s); run ops "
                    f"{_figures(theirs)}; run's whole command {min(walls):.2f} s"}


def run(quick: bool) -> list[dict[str, Any]]:
    warm_up(quick)
    with tempfile.TemporaryDirectory() as tmp:
        n = 200 if quick else 10_000
        path = Path(tmp) / "predict_net.pb"
        path.write_bytes(chain(n).SerializeToString())
        probe([str(path)])  # NOTE: a second opening, as for the zoo nets
        rows = [first_frame(f"{n // 1000}k-op chain" if n >= 1000 else f"{n}-op chain", [str(path)],
                            2.0, 1 if quick else 3)]
    if not quick:
        rows.insert(0, first_frame("DenseNet-121", [str(DENSENET)], 1.5, 3))
        rows.insert(1, first_frame("ResNet-50 + init", RESNET_ARGS, 1.5, 3))
        rows.append(stepping(20))
        rows.append(continue_through(3))
    return rows


if __name__ == "__main__":
    for row in run("--quick" in sys.argv):
        print(row)
