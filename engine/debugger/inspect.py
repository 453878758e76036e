"""Looking at a blob: statistics, a histogram, a value slice — never the whole of a huge tensor.

Statistics run in the blob's own array namespace (on the GPU for CuPy arrays) and only
scalars cross to the host; a value slice is capped at :data:`MAX_SLICE_ELEMENTS`.
"""
from __future__ import annotations

import ast
import re
from collections.abc import Callable
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


class StatsCancelled(Exception):  # noqa: N818 - a request honoured, not an error: no notice, no docs/errors.md
    """:func:`blob_stats` stopped between two slices because its `cancelled` said so."""


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


#: elements per slice of a big tensor's statistics: temporaries stay near 8 MB whatever the blob's size
CHUNK = 1 << 20


def _chunks(flat: Any, cancelled: Callable[[], bool] | None = None) -> Any:
    """`flat` in slices of :data:`CHUNK` elements (views: no copy of the tensor); before each slice
    `cancelled` is asked, so a pass nobody waits for any more stops within one slice."""
    for i in range(0, flat.size, CHUNK):
        if cancelled is not None and cancelled():
            raise StatsCancelled
        yield flat[i:i + CHUNK]


def _finite_moments(flat: Any, xp: Any, cancelled: Callable[[], bool] | None = None,
                    ) -> tuple[int, int, int, int, float, float, float, float]:
    """NaN, Inf and zero counts, then finite count, min, max, mean and M2 (sum of squared deviations),
    slice by slice (Chan's merge of per-slice moments): a 3 GiB weight never gets a float64 copy."""
    nan = inf = zeros = n = 0
    lo, hi, mean, m2 = np.inf, -np.inf, 0.0, 0.0
    for part in _chunks(flat, cancelled):
        zeros += int(part.size - xp.count_nonzero(part))
        if part.dtype.kind in "fc" and not bool((fin := xp.isfinite(part)).all()):  # NOTE: all finite: no copy
            nan, inf = nan + int(xp.count_nonzero(xp.isnan(part))), inf + int(xp.count_nonzero(xp.isinf(part)))
            part = part[fin]
        if not part.size:
            continue
        part = part.astype(np.float64) if part.dtype.kind in "bc" else part
        k, m = int(part.size), float(part.mean(dtype=np.float64))
        m2_k = float(part.var(dtype=np.float64)) * k
        lo, hi = min(lo, float(part.min())), max(hi, float(part.max()))
        delta, total = m - mean, n + k
        mean, m2, n = mean + delta * k / total, m2 + m2_k + delta * delta * n * k / total, total
    return nan, inf, zeros, n, lo, hi, mean, m2


def _histogram(flat: Any, xp: Any, bins: int, lo: float, hi: float, cancelled: Callable[[], bool] | None = None,
               ) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """Counts of the finite values in `bins` equal bins over [lo, hi], slice by slice (NumPy's edges)."""
    counts = None
    for part in _chunks(flat, cancelled):
        if part.dtype.kind in "fc" and not bool((fin := xp.isfinite(part)).all()):
            part = part[fin]
        c, edges = xp.histogram(part.astype(np.float64), bins=bins, range=(lo, hi))
        counts = c if counts is None else counts + c
    return tuple(int(c) for c in dev.to_host(counts)), tuple(float(e) for e in dev.to_host(edges))


def blob_stats(name: str, value: Any, *, histogram: bool = True, bins: int = HIST_BINS,
               cancelled: Callable[[], bool] | None = None) -> BlobStats:
    """Statistics of `value` (finite elements only for min/max/mean/std), in slices of :data:`CHUNK`
    elements so that memory stays bounded for a tensor of any size.

    Raises
    ------
    StatsCancelled
        `cancelled()` (asked before each slice) said True: a TUI worker whose blob is no longer shown
        stops within one slice instead of finishing a pass over gigabytes."""
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
    flat = value.reshape(-1)  # NOTE: a view for a contiguous tensor (every blob a kernel writes)
    nan, inf, zeros, n, lo, hi, mean, m2 = _finite_moments(flat, xp, cancelled)
    stats: dict[str, Any] = dict(nan_count=nan, inf_count=inf, zero_count=zeros)
    if n:
        stats.update(min=lo, max=hi, mean=mean, std=float(np.sqrt(m2 / n)))
        if histogram:
            stats["histogram"] = _histogram(flat, xp, bins, lo, hi, cancelled)
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


def check_folder(path: Path) -> None:
    """One line when `path`'s folder is missing, as ``netviz export`` says it (OSError's "No such file or
    directory" names neither the folder nor that it is the folder that is missing)."""
    if not path.parent.is_dir():
        raise InspectError(f"{path}: folder {path.parent} does not exist")


def save_path(target: str | Path, default: str) -> Path:
    """Where a save to `target` writes: the file `default` inside it when it names a folder (one that
    exists, or typed with a trailing ``/``), else `target` itself.  Why: ``Path("out/")`` drops the slash,
    so ``S`` to ``out/`` wrote ``out.npy`` beside the folder, and to ``/tmp`` wrote ``/tmp.npy``."""
    text = str(target)
    path = Path(text).expanduser()
    return path / default if path.is_dir() or text.endswith("/") else path


def save_blob(name: str, value: Any, path: str | Path) -> Path:
    """Write `value` to a ``.npy`` file (no pickles: object arrays are refused)."""
    path = Path(path)
    check_folder(path)
    if not hasattr(value, "shape") or getattr(value, "dtype", np.dtype(object)) == object:
        raise InspectError(f"blob '{name}' is not a numeric tensor; cannot save it as .npy")
    try:
        np.save(path, np.asarray(dev.to_host(value)), allow_pickle=False)
    except OSError as e:
        raise InspectError(f"{path}: cannot write blob '{name}': {e.strerror}") from None
    return path
