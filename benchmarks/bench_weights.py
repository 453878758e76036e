"""Trained weights at the speed of the disk (issue #41): init nets of GivenTensorFill values, made
by the bench (never committed) in a temporary folder, measured against floors of the same run.

Rows:
- **run ResNet-50 + 128 MB init, extra wall**: ``netviz run`` of Caffe2's builder ResNet-50
  (tests/golden/models/resnet50) with a GivenTensorFill init of random values (Caffe2's own layout:
  unpacked floats, 128 MB) minus the same run with the net's fill-op init; each a fresh process,
  alternated, best of 3.  References: ``np.fromfile`` of the file (warm page cache, best of 3) and
  real Caffe2's ParseFromString + ``RunNetOnce(init)`` (oracle venv; absent: no column).
  Target <= 10x the fromfile time.
- **extra peak RSS**: the same runs' ``ru_maxrss`` (``os.wait4``), extra MB against the file's MB;
  target <= 1.5x.
- **open + read all**, the 128 MB ResNet-50 init (unpacked) and a ~575 MB VGG-19-sized init (packed):
  in a fresh process after its imports, ``load_net`` + the init net run + a sum over every value (so
  every byte is read), best of 3, against ``np.fromfile`` and Caffe2's RunNetOnce; target <= 10x for
  ResNet-50 (what the weights themselves cost, where the run row's difference also holds the fill
  ops' random draws), none for VGG-19 (the issue sets none).
- **TUI first frame, 128 MB init vs fill-op init** (``benchmarks/probes/tui_probe.py``, the same
  arguments, alternated, best of TUI_REPEAT = 5): target <= 1.1x.
- **TUI first n with the 128 MB init**: the key to the complete repaint on op 1 (the first step
  makes the workspace and runs the init net: views of the file, while the worker checks them),
  median of the probes, beside the fill-op init's; target <= 0.5 s.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import CAFFE2_PY, ROOT, best, run_reference
from engine.model.tensorscan import encode_varint as _varint

RESNET = ROOT / "tests" / "golden" / "models" / "resnet50"
NETVIZ = [sys.executable, "-m", "netviz"]
RUN_TARGET, RSS_TARGET, FRAME_TARGET, FIRST_N_TARGET = 10.0, 1.5, 1.1, 0.5
TUI_REPEAT = 5
"""TUI probes of each kind, alternated: the first frame is ~0.5 s, and a shared machine swings it by more
than the 10 % the target allows: the best of 5 is steadier than of 3."""

#: VGG-19's parameter shapes (conv: (out, in, 3, 3) + bias; fc 25088-4096-4096-1000): 143.7 M floats
VGG19 = ([(c_out, c_in, 3, 3) for c_in, c_out in
          [(3, 64), (64, 64), (64, 128), (128, 128), (128, 256)] + [(256, 256)] * 3 + [(256, 512)]
          + [(512, 512)] * 7]
         + [(4096, 25088), (4096, 4096), (1000, 4096)])


def _field(number: int, body: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(body)) + body


def given_fill_bytes(name: str, values: np.ndarray, packed: bool) -> bytes:
    """One ``GivenTensorFill`` OperatorDef's bytes; values unpacked (tag 0x2D before each float, as
    Caffe2 writes proto2 repeated floats) or packed."""
    shape = b"".join(b"\x30" + _varint(d) for d in values.shape)
    flat = np.ascontiguousarray(values, "<f4").reshape(-1)
    if packed:
        data = _field(5, flat.tobytes())
    else:
        rows = np.empty((flat.size, 5), np.uint8)
        rows[:, 0] = 0x2D
        rows[:, 1:] = flat.view(np.uint8).reshape(-1, 4)
        data = rows.tobytes()
    args = _field(5, _field(1, b"shape") + shape) + _field(5, _field(1, b"values") + data)
    return _field(2, name.encode()) + _field(4, b"GivenTensorFill") + args


def write_init(path: Path, params: list[tuple[str, tuple[int, ...]]], packed: bool, seed: int = 0) -> int:
    """Write an init net of random GivenTensorFill values, one op at a time; returns its size."""
    rng = np.random.default_rng(seed)
    with open(path, "wb") as f:
        f.write(_field(1, b"init"))
        for name, shape in params:
            values = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.05)
            f.write(_field(2, given_fill_bytes(name, values, packed)))
    return path.stat().st_size


def resnet_params() -> list[tuple[str, tuple[int, ...]]]:
    """(blob, shape) of every op of the ResNet-50 fill-op init net (its ConstantFill/XavierFill/...)."""
    from engine.model.modelio import load_net  # noqa: PLC0415
    from engine.model.opdef import args_of  # noqa: PLC0415

    return [(op.output[0], tuple(args_of(op)["shape"])) for op in load_net(RESNET / "init_net.pb").op]


def _child(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int]:
    """(wall seconds, peak RSS bytes) of one fresh process (``os.wait4``: its own rusage)."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd[-6:])}: exit {proc.returncode}: {proc.stderr.read().decode()[-300:]}")
    proc.stderr.close()
    return wall, usage.ru_maxrss * 1024


def _fromfile(path: Path, repeat: int = 3) -> float:
    np.fromfile(path, np.uint8)  # NOTE: warm the page cache: the runs read it warm too
    return best(lambda: np.fromfile(path, np.uint8), repeat)


_CAFFE2_INIT = """
import json, sys, time
from caffe2.proto import caffe2_pb2
from caffe2.python import workspace
t = time.perf_counter()
net = caffe2_pb2.NetDef()
net.ParseFromString(open(sys.argv[1], "rb").read())
workspace.RunNetOnce(net)
print(json.dumps({"s": time.perf_counter() - t}))
"""


def caffe2_init_s(path: Path) -> float | None:
    """Real Caffe2's ParseFromString + RunNetOnce(init) of `path`, in the oracle venv; None without it."""
    got = run_reference(["-c", _CAFFE2_INIT, str(path)]) if CAFFE2_PY.exists() else None
    return got["s"] if got else None


_READ_ALL = """
import sys, time
from engine.model.modelio import load_net
from engine.runtime import executor
from engine.runtime.workspace import Workspace
t = time.perf_counter()
ws = Workspace("bench")
executor.run_net(load_net(sys.argv[1]), ws)
total = sum(float(v.sum(dtype="f8")) for v in ws.values.values())
print(time.perf_counter() - t)
"""


def run_rows(folder: Path, quick: bool) -> list[dict[str, Any]]:
    params = resnet_params()
    if quick:
        params = params[:8]
    init = folder / "init_net.pb"
    size = write_init(init, params, packed=False)
    base = [*NETVIZ, "run", str(RESNET / "predict_net.pb"), "--input", "data=1,3,224,224"]
    plain, given = [], []
    for _ in range(1 if quick else 3):
        plain.append(_child([*base, "--init", str(RESNET / "init_net.pb")]))
        given.append(_child([*base, "--init", str(init)]) if not quick else plain[-1])
    extra = min(w for w, _ in given) - min(w for w, _ in plain)
    extra_rss = (min(r for _, r in given) - min(r for _, r in plain)) / 1e6
    ff, c2 = _fromfile(init), (None if quick else caffe2_init_s(init))
    mb = size / 1e6
    return [{"name": f"weights: run resnet50 +{mb:.0f} MB init, extra wall", "netviz_s": extra,
             "reference": {"np.fromfile": ff, "caffe2 RunNetOnce(init)": c2}, "target": f"<= {RUN_TARGET:g}x fromfile",
             "ok": extra <= RUN_TARGET * ff,
             "note": f"runs {min(w for w, _ in given):.2f}s vs {min(w for w, _ in plain):.2f}s (fill-op init)"},
            {"name": f"weights: run resnet50 +{mb:.0f} MB init, extra peak RSS MB", "netviz_s": extra_rss,
             "reference": {"file MB": mb}, "target": f"<= {RSS_TARGET:g}x file (ratio)",
             "ok": extra_rss <= RSS_TARGET * mb,
             "note": f"peak RSS {min(r for _, r in given) / 1e6:.0f} MB vs {min(r for _, r in plain) / 1e6:.0f} MB"}]


def read_all_row(init: Path, label: str, quick: bool, target: float | None) -> dict[str, Any]:
    """Open `init` (the full open of ``netviz run``), run it and sum every value (so every byte is read),
    in a fresh process after its imports; against np.fromfile and Caffe2's RunNetOnce(init)."""
    ff = _fromfile(init)
    runs = [float(subprocess.run([sys.executable, "-c", _READ_ALL, str(init)], capture_output=True, text=True,
                                 cwd=ROOT, check=True).stdout.split()[-1]) for _ in range(1 if quick else 3)]
    c2 = None if quick else caffe2_init_s(init)
    return {"name": f"weights: open + read all, {init.stat().st_size / 1e6:.0f} MB {label}", "netviz_s": min(runs),
            "reference": {"np.fromfile": ff, "caffe2 RunNetOnce(init)": c2},
            "target": None if target is None else f"<= {target:g}x fromfile",
            "ok": None if target is None else min(runs) <= target * ff}


def vgg_row(folder: Path, quick: bool) -> dict[str, Any]:
    shapes = VGG19[:3] if quick else VGG19
    params = [(f"p{k}", s) for k, s in enumerate(shapes)]
    params += [(f"b{k}", (s[0],)) for k, s in enumerate(shapes)]
    init = folder / "vgg19_init_net.pb"
    write_init(init, params, packed=True)
    return read_all_row(init, "VGG-19 init (packed)", quick, None)


def _probe(args: list[str]) -> dict[str, Any]:
    from benchmarks.bench_tui import probe_env  # noqa: PLC0415

    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "benchmarks.probes.tui_probe", *args], capture_output=True,
                         text=True, cwd=ROOT, env=probe_env(), timeout=300)
    got: dict[str, Any] = {}
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            got.update(json.loads(line))
    if "frame" in got:
        got["frame"] -= t0
    return got


def tui_rows(folder: Path, quick: bool) -> list[dict[str, Any]]:
    """First frame and first n with the big init and with the net's fill-op init, the same probe
    arguments for both (``--steps`` itself moves the first frame by ~60 ms), alternated."""
    init = folder / "init_net.pb"
    model = [str(RESNET / "predict_net.pb"), "--input", "data=1,3,224,224"]
    step = ["--steps", "1", "--warmup", "0"]
    frames: dict[str, list] = {"plain": [], "big": []}
    first_n: dict[str, list] = {"plain": [], "big": []}
    for _ in range(1 if quick else TUI_REPEAT):
        for kind, path in (("plain", RESNET / "init_net.pb"), ("big", init)):
            got = _probe([*model, "--init", str(path), *step])
            frames[kind].append(got.get("frame"))
            first_n[kind] += got.get("full_s", [])
    mb = f"{init.stat().st_size / 1e6:.0f} MB"
    if None in frames["plain"] + frames["big"] or not first_n["big"] or not first_n["plain"]:
        return [{"name": f"weights: TUI with {mb} init", "netviz_s": None, "reference": {}, "target": None,
                 "ok": None, "note": "TUI not ready"}]
    big, plain = min(frames["big"]), min(frames["plain"])
    n_big, n_plain = statistics.median(first_n["big"]), statistics.median(first_n["plain"])
    return [{"name": f"weights: TUI first frame, {mb} init", "netviz_s": big, "reference": {"fill-op init": plain},
             "target": f"<= {FRAME_TARGET:g}x", "ok": big <= FRAME_TARGET * plain},
            {"name": f"weights: TUI first n, {mb} init (median)", "netviz_s": n_big,
             "reference": {"fill-op init": n_plain}, "target": f"<= {FIRST_N_TARGET:g} s",
             "ok": n_big <= FIRST_N_TARGET, "note": f"all: {', '.join(f'{s:.3f}' for s in first_n['big'])}"}]


def run(quick: bool = False) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="netviz-weights-") as tmp:
        folder = Path(tmp)
        rows = run_rows(folder, quick)
        rows.append(read_all_row(folder / "init_net.pb", "ResNet-50 init (unpacked)", quick, RUN_TARGET))
        rows += tui_rows(folder, quick)
        rows.append(vgg_row(folder, quick))
    return rows
