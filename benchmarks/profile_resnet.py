"""Where ResNet-50's time goes: each op's best of R whole-net runs, summed per op kind.

``python -m benchmarks.profile_resnet [resnet50|resnet50_train] [BATCH] [R]`` prints the sum of the
per-op minima and one line per kind (Conv split by kernel/stride, with GFLOP/s).  Per-op minima
cut most of the noise of a shared machine; the README's profiles come from here.
"""
from __future__ import annotations

import sys
import time
from collections import defaultdict

from benchmarks.bench_resnet import backend, prepared
from engine.runtime.executor import run_bound, run_compiled


def kind(op) -> str:
    if "Conv" not in op.type:
        return op.type
    a = {x.name: x.i for x in op.arg}
    return f"{op.type} k{a.get('kernel')}s{a.get('stride', 1)}"


def main(name: str = "resnet50", batch: int = 8, repeat: int = 3) -> None:
    compiled, ws, _ = prepared(name, batch, backward=name.endswith("_train"))
    run_compiled(compiled, ws)
    mins = [float("inf")] * len(compiled.ops)
    for _ in range(repeat):
        for j, b in enumerate(compiled.ops):
            t = time.perf_counter()
            run_bound(b, ws)
            mins[j] = min(mins[j], time.perf_counter() - t)
    secs, flops = defaultdict(float), defaultdict(float)
    for j, b in enumerate(compiled.ops):
        secs[kind(b.op)] += mins[j]
        if b.op.type == "Conv":
            y, w = ws.values[b.op.output[0]], ws.values[b.op.input[1]]
            flops[kind(b.op)] += 2.0 * y.size * w[0].size
    print(f"{name} batch {batch}: sum of per-op minima {sum(mins):.3f} s ({backend()})")
    for k, v in sorted(secs.items(), key=lambda kv: -kv[1]):
        f = flops.get(k.replace("Gradient", ""), 0) * (2 if "Gradient" in k else 1)
        print(f"  {k:<22} {v:7.3f} s" + (f"  {f / v / 1e9:5.0f} GFLOP/s" if f else ""))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "resnet50", *(int(a) for a in sys.argv[2:4]))
