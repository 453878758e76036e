"""SpatialBN in training, norm.py's NumPy row passes against oneDNN (issue 46, round 3b).

``python -m benchmarks.bn_onednn [REPEAT]`` prints, per ResNet-50 batch-8 map, the best of REPEAT
alternated runs (ms) of: NumPy forward / backward on NCHW, oneDNN on the same NCHW buffers (what a
router would hand it: its generic ``ncsp`` kernel), oneDNN on NHWC memory (its JIT kernel; the net's
maps are NCHW, so one NCHW->NHWC copy, also timed, would come with each input and output), and the
SpatialBN op of an NHWC net on NumPy (oneDNN off: norm.py's generic path) against oneDNN (what it routes).
"""
from __future__ import annotations

import sys
import time

import numpy as np

from engine.runtime import onednn
from engine.runtime.ops import norm

SHAPES = [(8, 64, 112, 112), (8, 256, 56, 56), (8, 512, 28, 28), (8, 1024, 14, 14), (8, 2048, 7, 7)]
EPS = np.float32(1e-5)


def _numpy_only(call: object) -> object:
    """`call` with oneDNN switched off while it runs (norm.py's own NHWC path)."""
    def run() -> None:
        onednn.ENABLED = False
        try:
            call()
        finally:
            onednn.ENABLED = True
    return run


def _cases(shape: tuple[int, ...]) -> dict[str, object]:
    """name -> a call, on one set of inputs of `shape` (NCHW and an NHWC copy)."""
    rng = np.random.default_rng(0)
    x, dy = (rng.standard_normal(shape, dtype=np.float32) for _ in range(2))
    xh, dyh = (np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2) for a in (x, dy))
    c = shape[1]
    scale, bias, zero, one = rng.random(c, dtype=np.float32) + 0.5, rng.random(c, dtype=np.float32), \
        np.zeros(c, np.float32), np.ones(c, np.float32)
    _, _, _, mean, inv = norm._spatial_bn_train_rows(x, scale, bias, zero, one, EPS, 0.9)
    var = (1 / inv.astype(np.float64) ** 2 - EPS).astype(np.float32)
    nhwc = np.empty_like(xh)
    return {"fwd numpy": lambda: norm._spatial_bn_train_rows(x, scale, bias, zero, one, EPS, 0.9),
            "fwd onednn nchw": lambda: onednn.bn_forward(x, scale, bias, EPS),
            "fwd onednn nhwc": lambda: onednn.bn_forward(xh, scale, bias, EPS),
            "bwd numpy": lambda: norm._spatial_bn_gradient_rows(x, scale, dy, mean, inv),
            "bwd onednn nchw": lambda: onednn.bn_backward(x, scale, dy, mean, var, EPS),
            "bwd onednn nhwc": lambda: onednn.bn_backward(xh, scale, dyh, mean, var, EPS),
            "fwd numpy nhwc": _numpy_only(lambda: norm.spatial_bn(np, xh.transpose(0, 2, 3, 1), scale, bias, zero,
                                                                  one, order="NHWC")),
            "bwd numpy nhwc": _numpy_only(lambda: norm.spatial_bn_gradient(
                np, xh.transpose(0, 2, 3, 1), scale, dyh.transpose(0, 2, 3, 1), mean, inv, order="NHWC")),
            "copy nchw->nhwc": lambda: np.copyto(nhwc.transpose(0, 2, 3, 1), x.transpose(0, 2, 3, 1))}


def main(repeat: int = 9) -> None:
    if not onednn.available():
        sys.exit("oneDNN is not installed (netviz[fast]) or NETVIZ_ONEDNN=0")
    print(f"best of {repeat} alternated runs, ms ({onednn.describe()})")
    for shape in SHAPES:
        cases = _cases(shape)
        best = dict.fromkeys(cases, float("inf"))
        for _ in range(repeat):
            for name, call in cases.items():
                t = time.perf_counter()
                call()
                best[name] = min(best[name], time.perf_counter() - t)
        print(shape, "  ".join(f"{k} {v * 1e3:.2f}" for k, v in best.items()))


if __name__ == "__main__":
    main(*map(int, sys.argv[1:2]))
