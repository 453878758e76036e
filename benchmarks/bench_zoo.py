"""Forward speed of three more zoo nets against PyTorch eager: DenseNet-121, Inception v2, VGG-19.

The zoo's predict nets come without weights.  Convs get the published widths where a net's layer
names say them (DenseNet-121: 64-filter stem, 128-filter 1x1 bottlenecks, growth 32, transitions
halve; VGG-19: 64-128-256-512-512), Inception v2's 64 filters per conv; everything else
(SpatialBN, the Mul/Add affine pairs, FC: 1000 outputs) is :func:`engine.runtime.params.synthesize_params`.
The very net and arrays are saved for the reference (``benchmarks/reference/zoo_forward.py`` under
``.venv-caffe2``, same thread count), which runs before and after netviz: best of both.  Each row is
netviz's best of 3 over PyTorch's, measured in the same run.  ``--quick``: DenseNet-121 at batch 1,
one run, no reference.
"""
from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import ROOT, best, blas_threads, run_reference
from engine.caffe2.workspace import Workspace
from engine.model.modelio import load_model
from engine.runtime.executor import compile_net, run_compiled
from engine.runtime.params import synthesize_params

ZOO = Path(os.environ.get("NETVIZ_MODEL_ZOO", "/work/shared/models/caffe2-model-zoo"))
REFERENCE = ROOT / "benchmarks" / "reference" / "zoo_forward.py"

Widths = Callable[[str, int], int]


def densenet_width(w: str, cin: int) -> int:
    """DenseNet-121's filters for conv weight `w` given `cin` input channels."""
    if w == "conv1_w":
        return 64
    if w.endswith("/x1_w"):
        return 128
    if w.endswith("/x2_w"):
        return 32
    return 1000 if w.startswith("fc") else cin // 2  # NOTE: conv<k>_blk: a transition halves


def vgg_width(w: str, cin: int) -> int:
    """VGG-19's filters: conv<stage>_<i>_w has 64 << (stage - 1), at most 512."""
    return min(512, 64 << (int(re.match(r"conv(\d)", w).group(1)) - 1))


#: (zoo net, batch, conv widths or one width for every conv)
NETS: dict[str, tuple[int, Widths | int]] = {"densenet121": (8, densenet_width), "inception_v2": (8, 64),
                                             "vgg19": (4, vgg_width)}


def conv_weights(net: Any, widths: Widths, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """He-scaled float32 filters (and zero biases) of every Conv, channels followed op by op
    (Concat sums its inputs', every other non-Conv op keeps its first input's)."""
    ch, out = {"data": 3}, {}
    for op in net.op:
        if op.type == "Conv":
            cin, k = ch[op.input[0]], next(a.i for a in op.arg if a.name == "kernel")
            m = widths(op.input[1], cin)
            out[op.input[1]] = (rng.standard_normal((m, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))).astype(np.float32)
            if len(op.input) > 2:
                out[op.input[2]] = np.zeros(m, np.float32)
            ch[op.output[0]] = m
        elif op.input:
            ch[op.output[0]] = sum(ch[i] for i in op.input) if op.type == "Concat" else ch.get(op.input[0], 0)
    return out


def prepared(name: str, batch: int, widths: Widths | int) -> tuple[Any, dict[str, np.ndarray]]:
    """(predict net, every array it reads: parameters and ``data``)."""
    net = load_model(ZOO / name / "predict_net.pbtxt").predict
    rng = np.random.default_rng(0)
    known = {"data": rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)}
    if callable(widths):
        known.update(conv_weights(net, widths, rng))
    made = synthesize_params(net, known, width=widths if isinstance(widths, int) else 16)
    return net, {**known, **{k: np.asarray(v, np.float32) for k, v in made.items()}}


def timed(net: Any, arrays: dict[str, np.ndarray], repeat: int) -> float:
    ws = Workspace("bench_zoo")
    for k, v in arrays.items():
        ws.feed_blob(k, v)
    compiled = compile_net(net, ws)
    run_compiled(compiled, ws)  # warm-up
    return best(lambda: run_compiled(compiled, ws), repeat)


def gflops(net: Any, arrays: dict[str, np.ndarray]) -> float:
    """Conv + FC GFLOP of one forward, from the filter shapes and a shape-only walk of the outputs."""
    ws = Workspace("bench_zoo_flops")
    for k, v in arrays.items():
        ws.feed_blob(k, v)
    run_compiled(compile_net(net, ws), ws)
    total = 0.0
    for op in net.op:
        if op.type in ("Conv", "FC"):
            total += 2.0 * ws.values[op.output[0]].size * np.prod(ws.values[op.input[1]].shape[1:])
    return total / 1e9


def row(name: str, quick: bool) -> dict[str, Any]:
    batch, widths = NETS[name]
    batch = 1 if quick else batch
    net, arrays = prepared(name, batch, widths)
    if quick:
        return {"name": f"{name} forward batch 1", "netviz_s": timed(net, arrays, 1), "reference": {},
                "target": "", "ok": None, "note": "quick: no reference"}
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "net.pb").write_bytes(net.SerializeToString())
        np.savez(Path(tmp) / "params.npz", **arrays)
        args = [str(REFERENCE), str(Path(tmp) / "net.pb"), str(Path(tmp) / "params.npz"),
                "--threads", str(blas_threads())]
        before = run_reference(args) or {}
        secs = timed(net, arrays, 3)
        after = run_reference(args) or {}
    torch_s = min((r["pytorch"] for r in (before, after) if "pytorch" in r), default=None)
    return {"name": f"{name} forward batch {batch}", "netviz_s": secs,
            "reference": {"pytorch": torch_s} if torch_s else {}, "target": "<= PyTorch",
            "ok": secs <= torch_s if torch_s else None,
            "note": f"{gflops(net, arrays):.1f} GFLOP (Conv+FC); random params, same arrays both tools; "
                    f"load {os.getloadavg()[0]:.1f}"}


def run(quick: bool) -> list[dict[str, Any]]:
    return [row(name, quick) for name in (["densenet121"] if quick else NETS)]


if __name__ == "__main__":
    import sys

    for r in run("--quick" in sys.argv):
        print(r)
