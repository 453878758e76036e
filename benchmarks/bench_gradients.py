"""Backward-pass generation time (``GradientRegistry.GetBackwardPass``) on 1k/10k/100k-op nets.

The synthetic net repeats a residual block, ``FC -> Relu (in place) -> Add(h, x)``, so every
block input fans out (one ``Sum`` and one ``_autosplit_`` rename per block) and in-place
versions climb.  Targets: 10k ops <= 0.3 s, 100k/10k time ratio <= 10.5.  When Caffe2 1.10.2
is installed in ``.venv-caffe2`` the full run also times it on every size as a reference.
``python -m benchmarks.bench_gradients [--quick]`` prints the rows.
"""
from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from engine.autodiff.gradient_ir import GradientRegistry
from proto import caffe2_pb2

ROOT = Path(__file__).resolve().parent.parent
CAFFE2_PY = ROOT / ".venv-caffe2" / "bin" / "python"
SIZES = (1_000, 10_000, 100_000)
TARGET_10K_S = 0.3
TARGET_RATIO = 10.5


def residual_net(n_ops: int) -> caffe2_pb2.NetDef:
    """``n_ops`` ops in blocks of FC, in-place Relu, Add, ending in AveragedLoss."""
    net = caffe2_pb2.NetDef(name=f"residual_{n_ops}", external_input=["x0"])
    x = "x0"
    for i in range((n_ops - 1) // 3):
        h, y = f"h{i}", f"x{i + 1}"
        net.op.add(type="FC", input=[x, f"W{i}", f"b{i}"], output=[h])
        net.op.add(type="Relu", input=[h], output=[h])
        net.op.add(type="Add", input=[h, x], output=[y])
        x = y
    net.op.add(type="AveragedLoss", input=[x], output=["loss"])
    return net


def _time(n: int, repeat: int) -> float:
    net = residual_net(n)
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        GradientRegistry.GetBackwardPass(net.op, ["loss"])
        best = min(best, time.perf_counter() - t)
    return best


_CAFFE2_SNIPPET = """
import time
from caffe2.python import core
from caffe2.proto import caffe2_pb2
net = caffe2_pb2.NetDef(); net.ParseFromString(open({path!r}, "rb").read())
t = time.perf_counter(); core.GradientRegistry.GetBackwardPass(net.op, ["loss"]); print(time.perf_counter() - t)
"""


def _caffe2_time(n: int) -> float | None:
    """Caffe2 1.10.2's own time on the same net, or None when it is not installed."""
    if not CAFFE2_PY.exists():
        return None
    with tempfile.NamedTemporaryFile(suffix=".pb") as f:
        f.write(residual_net(n).SerializeToString())
        f.flush()
        try:
            out = subprocess.run([str(CAFFE2_PY), "-c", _CAFFE2_SNIPPET.format(path=f.name)],
                                 capture_output=True, text=True, timeout=300, check=True)
            return float(out.stdout.strip().splitlines()[-1])
        except (subprocess.SubprocessError, ValueError, IndexError):
            return None


def run(quick: bool) -> list[dict[str, Any]]:
    sizes = SIZES[:1] if quick else SIZES
    times = {n: _time(n, 1 if n >= 100_000 else 3) for n in sizes}
    rows, refs = [], {n: None if quick else _caffe2_time(n) for n in sizes}
    for n, secs in times.items():
        ref = {"caffe2-1.10.2": refs[n]}
        has_target = n == 10_000
        rows.append({"name": f"backward pass {n // 1000}k ops", "netviz_s": secs,
                     "reference": {k: v for k, v in ref.items() if v is not None},
                     "target": f"<= {TARGET_10K_S} s" if has_target else "",
                     "ok": secs <= TARGET_10K_S if has_target else None})
    if 100_000 in times:
        ratio = times[100_000] / times[10_000]
        c2 = {"caffe2-1.10.2": refs[100_000] / refs[10_000]} if refs[100_000] and refs[10_000] else {}
        rows.append({"name": "backward pass 100k/10k time ratio", "netviz_s": ratio, "reference": c2,
                     "target": f"<= {TARGET_RATIO} (ratio)", "ok": ratio <= TARGET_RATIO})
    return rows


if __name__ == "__main__":
    import sys
    for row in run(quick="--quick" in sys.argv):
        print(f"{row['name']:<40} {row['netviz_s']:9.4f}  {row['target']:<18} "
              f"{ {True: 'ok', False: 'SLOW', None: ''}[row['ok']]}  {row['reference']}")
