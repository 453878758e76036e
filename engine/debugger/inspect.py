"""Looking at a blob: statistics, a histogram, a value slice — never the whole of a huge tensor.

Statistics run in the blob's own array namespace (on the GPU for CuPy arrays) and only
scalars cross to the host; a value slice is capped at :data:`MAX_SLICE_ELEMENTS`.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.runtime import device as dev
from engine.errors import NetvizError

MAX_SLICE_ELEMENTS = 10_000
HIST_BINS = 20
_INDEX_ITEM = re.compile(r"^\s*(-?\d+)?\s*(?::\s*(-?\d+)?\s*)?(?::\s*(-?\d+)?\s*)?$")


class InspectError(NetvizError):
    """A blob cannot be inspected as asked (bad index string, not an array, cannot save)."""


@dataclass(frozen=True, slots=True)
class BlobStats:
    """What the inspector shows for one blob value."""

    name: str
    kind: str                       # "tensor", "bytes", "object", "empty"
    shape: tuple[int, ...] = ()
    dtype: str = ""
    device: str = "CPU"
    nbytes: int = 0
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    std: float | None = None
    nan_count: int = 0
    inf_count: int = 0
    zero_count: int = 0
    histogram: tuple[tuple[int, ...], tuple[float, ...]] | None = None  # (counts, bin edges)
    summary: str = ""               # for non-tensors: type and a short repr

    @property
    def healthy(self) -> bool:
        """No NaN and no Inf."""
        return not (self.nan_count or self.inf_count)

    def __str__(self) -> str:
        """What ``print(dbg.inspect("h"))`` shows: a few readable lines, not the dataclass repr.

        >>> print(BlobStats("h", "tensor", (2, 3), "float32", "CPU", 24, -1.0, 2.0, 0.5, 1.0, 0, 0, 1))
        h: float32 2×3 on CPU (24 bytes)
          min -1  max 2  mean 0.5  std 1
          NaN 0  Inf 0  zeros 1 of 6
        """
        if self.kind != "tensor":
            return f"{self.name}: {self.kind}" + (f" {self.summary}" if self.summary else "")
        size = int(np.prod(self.shape)) if self.shape else 1
        lines = [f"{self.name}: {self.dtype} {'×'.join(map(str, self.shape)) or 'scalar'} on {self.device} "
                 f"({self.nbytes} bytes)"]
        if self.min is not None:
            lines.append(f"  min {self.min:.6g}  max {self.max:.6g}  mean {self.mean:.6g}  std {self.std:.6g}")
        lines.append(f"  NaN {self.nan_count}  Inf {self.inf_count}  zeros {self.zero_count} of {size}")
        if self.histogram is not None:
            counts, edges = self.histogram
            lines.append(f"  histogram {edges[0]:.3g} … {edges[-1]:.3g} in {len(counts)} bins: "
                         + " ".join(map(str, counts)))
        return "\n".join(lines)


def _device_name(arr: Any) -> str:
    return {dev.CPU: "CPU", dev.CUDA: "CUDA", dev.HIP: "HIP"}.get(dev.device_of_array(arr), "?")


def blob_stats(name: str, value: Any, *, histogram: bool = True) -> BlobStats:
    """Statistics of `value` (finite elements only for min/max/mean/std)."""
    if isinstance(value, (bytes, str)):
        return BlobStats(name, "bytes", nbytes=len(value), summary=repr(value[:80]))
    if not hasattr(value, "shape") or not hasattr(value, "dtype"):
        return BlobStats(name, "object", summary=f"{type(value).__name__}")
    shape, dtype = tuple(int(d) for d in value.shape), str(value.dtype)
    base = dict(name=name, kind="tensor", shape=shape, dtype=dtype, device=_device_name(value),
                nbytes=int(value.nbytes))
    if value.size == 0 or value.dtype.kind not in "biufc":
        return BlobStats(**base)
    xp = dev.array_module(value)
    numeric = value.astype(np.float64) if value.dtype.kind in "bc" else value
    if value.dtype.kind in "fc":
        finite_mask = xp.isfinite(numeric)
        nan, inf = int(xp.count_nonzero(xp.isnan(numeric))), int(xp.count_nonzero(xp.isinf(numeric)))
        finite = numeric[finite_mask] if (nan or inf) else numeric.reshape(-1)
    else:
        nan = inf = 0
        finite = numeric.reshape(-1)
    stats = dict(nan_count=nan, inf_count=inf, zero_count=int(value.size - xp.count_nonzero(value)))
    if finite.size:
        stats.update(min=float(finite.min()), max=float(finite.max()), mean=float(finite.mean(dtype=np.float64)),
                     std=float(finite.std(dtype=np.float64)))
        if histogram:
            counts, edges = xp.histogram(finite.astype(np.float64), bins=HIST_BINS)
            stats["histogram"] = (tuple(int(c) for c in dev.to_host(counts)),
                                  tuple(float(e) for e in dev.to_host(edges)))
    return BlobStats(**base, **stats)


def parse_index(text: str) -> tuple[Any, ...]:
    """Parse a NumPy-style index string (``"[0, :5, 2]"``, ``"..., -1"``) without ``eval``.

    Raises
    ------
    InspectError
        For anything but integers, slices, ``...`` and ``None``/``newaxis``.

    Examples
    --------
    >>> parse_index("[0, :5, ::2]")
    (0, slice(None, 5, None), slice(None, None, 2))
    """
    body = text.strip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    if not body.strip():
        return ()
    items: list[Any] = []
    for part in body.split(","):
        p = part.strip()
        if p == "...":
            items.append(Ellipsis)
        elif p in ("None", "newaxis"):
            items.append(None)
        elif (m := _INDEX_ITEM.match(p)) and p:
            if ":" not in p:
                items.append(int(ast.literal_eval(p)))
            else:
                start, stop, step = (int(g) if g is not None else None for g in m.groups())
                items.append(slice(start, stop, step))
        else:
            raise InspectError(f"index {text!r}: cannot read {p!r} (use integers, slices, ...)")
    return tuple(items)


def value_slice(name: str, value: Any, index: str = "") -> tuple[np.ndarray, bool]:
    """``value[index]`` on the host, at most :data:`MAX_SLICE_ELEMENTS`; True when truncated."""
    if not hasattr(value, "shape"):
        raise InspectError(f"blob '{name}' is not a tensor ({type(value).__name__})")
    try:
        part = value[parse_index(index)] if index.strip() else value
    except (IndexError, TypeError) as e:
        raise InspectError(f"blob '{name}' {tuple(value.shape)}: index {index!r}: {e}") from None
    flat = part.reshape(-1)
    truncated = flat.size > MAX_SLICE_ELEMENTS
    host = np.asarray(dev.to_host(flat[:MAX_SLICE_ELEMENTS] if truncated else part))
    return host, truncated


def save_blob(name: str, value: Any, path: str | Path) -> Path:
    """Write `value` to a ``.npy`` file (no pickles: object arrays are refused)."""
    path = Path(path)
    if not hasattr(value, "shape") or getattr(value, "dtype", np.dtype(object)) == object:
        raise InspectError(f"blob '{name}' is not a numeric tensor; cannot save it as .npy")
    try:
        np.save(path, np.asarray(dev.to_host(value)), allow_pickle=False)
    except OSError as e:
        raise InspectError(f"{path}: cannot write blob '{name}': {e.strerror}") from None
    return path
