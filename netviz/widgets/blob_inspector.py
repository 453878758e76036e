"""BlobInspector: one blob — shape, dtype, device, producers/consumers, stats, histogram, sliced values."""
from __future__ import annotations

import re
from typing import Any

import numpy as np
from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Input, Static

from netviz.session import BlobRef, Session

BARS = " ▏▎▍▌▋▊▉█"


def parse_slice(text: str) -> tuple[Any, ...]:
    """``0, :, 1:5:2`` → ``(0, slice(None), slice(1, 5, 2))``; raises ValueError when malformed."""
    out: list[Any] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if part == "...":
            out.append(Ellipsis)
        elif re.fullmatch(r"-?\d+", part):
            out.append(int(part))
        elif re.fullmatch(r"(-?\d+)?:(-?\d+)?(:(-?\d+)?)?", part):
            out.append(slice(*(int(x) if x else None for x in (part.split(":") + [""])[:3])))
        else:
            raise ValueError(f"bad index {part!r} (use ints, a:b:c, ...)")
    return tuple(out)


def histogram(arr: np.ndarray, bins: int = 10, width: int = 16) -> Table:
    flat = arr[np.isfinite(arr)].ravel() if arr.dtype.kind == "f" else arr.ravel()
    table = Table.grid(padding=(0, 1))
    if flat.size == 0:
        return table
    counts, edges = np.histogram(flat, bins=bins)
    top = counts.max() or 1
    for c, lo in zip(counts, edges):
        cells = c / top * width
        bar = "█" * int(cells) + (BARS[int((cells % 1) * 8)] if cells % 1 else "")
        table.add_row(Text(f"{lo:>9.3g}", "dim"), Text(bar.ljust(width), "#4285F4"), Text(str(c), "dim"))
    return table


def stats(arr: np.ndarray) -> Table:
    t = Table.grid(padding=(0, 1))
    t.add_column(style="dim")
    t.add_column()
    if arr.dtype.kind in "fiub" and arr.size:
        a = arr.astype(np.float64)
        fin = a[np.isfinite(a)]
        t.add_row("min/max", f"{fin.min():.4g} / {fin.max():.4g}" if fin.size else "-")
        t.add_row("mean/std", f"{fin.mean():.4g} / {fin.std():.4g}" if fin.size else "-")
        t.add_row("nan/inf", f"{int(np.isnan(a).sum())} / {int(np.isinf(a).sum())}")
        t.add_row("zeros", f"{int((a == 0).sum())} of {a.size}")
    return t


def values_table(arr: np.ndarray, rows: int = 12, cols: int = 6) -> Table:
    a = np.atleast_2d(arr)
    while a.ndim > 2:
        a = a[0]
    t = Table(box=None, padding=(0, 1), show_header=True, header_style="dim")
    t.add_column("", style="dim")
    for j in range(min(cols, a.shape[1])):
        t.add_column(str(j), justify="right")
    for i in range(min(rows, a.shape[0])):
        t.add_row(str(i), *(f"{v:.4g}" if isinstance(v, (float, np.floating)) else str(v) for v in a[i, :cols]))
    return t


class BlobInspector(Vertical):
    """Facts always; stats, histogram and a value table with a slice box once the blob has a value."""

    def compose(self) -> ComposeResult:
        yield Static(id="blob-facts")
        yield Input(placeholder="slice: 0,:,:4", id="blob-slice")
        yield Static(id="blob-values")

    def show(self, session: Session, ref: BlobRef | None) -> None:
        self.session, self.ref = session, ref
        self.display = ref is not None
        if ref is None:
            return
        info = session.blob_info(ref.name)
        facts = Table.grid(padding=(0, 1))
        facts.add_column(style="dim")
        facts.add_column(overflow="fold")
        facts.add_row("blob", Text(ref.label(), "bold"))
        facts.add_row("shape", "?" if info["shape"] is None else "×".join(map(str, info["shape"])) or "scalar")
        facts.add_row("dtype", info["dtype"] or "?")
        facts.add_row("from", info["source"])
        prod = session.producers(ref.path, ref.name)
        cons = session.consumers(ref.path, ref.name)
        facts.add_row("written", ", ".join(f"#{i}→@{v}" for i, v in prod[:6]) or "external input")
        facts.add_row("read", ", ".join(f"#{i}(@{v})" for i, v in cons[:6]) or "-")
        self.query_one("#blob-facts", Static).update(facts)
        self.render_values()

    def render_values(self) -> None:
        box = self.query_one("#blob-values", Static)
        arr = self.session.value(self.ref.name) if self.ref else None
        self.query_one("#blob-slice", Input).display = arr is not None
        if arr is None or not hasattr(arr, "shape"):
            box.update(Text("no value yet (run or inject it)", style="dim"))
            return
        arr = np.asarray(arr)
        try:
            index = parse_slice(self.query_one("#blob-slice", Input).value)
            part = arr[index] if index else arr
        except (ValueError, IndexError, TypeError) as e:
            box.update(Text(f"slice: {e}", style="red"))
            return
        parts: list[Any] = [stats(arr)]
        if arr.dtype.kind in "fiu" and arr.size:
            parts += [Text("histogram", style="dim"), histogram(arr)]
        parts += [Text(f"values {list(np.shape(part))}", style="dim"), values_table(np.asarray(part))]
        box.update(Group(*parts))

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.render_values()
