"""BlobInspector: one blob — shape, dtype, device, producers/consumers, stats, histogram, sliced values."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Input, Static

from netviz.session import BlobRef, Session
from netviz.style import plain
from netviz.widgets.status_line import random_params

if TYPE_CHECKING:
    import numpy as np

BARS = " ▏▎▍▌▋▊▉█"
BINS = 10  # the inspector's histogram bars
SYNC_STATS_ELEMENTS = 1 << 20
"""Tensors up to this many elements get their statistics and histogram at once (~10 ms); bigger ones in
a worker, with a "computing …" line meanwhile (a 100M-element blob took seconds on the UI thread)."""


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


def histogram(arr: np.ndarray, bins: int = BINS, width: int = 16, computed: Any = None) -> Table:
    """`bins` bars over the finite values (engine.debugger.inspect: in slices, no copy of a huge tensor);
    `computed`: `arr`'s BlobStats with its histogram of `bins` bins, made already (one pass, not two)."""
    from engine.debugger.inspect import blob_stats  # noqa: PLC0415 - imports NumPy: off the first frame

    table = Table.grid(padding=(0, 1))
    hist = (computed or blob_stats("", arr, bins=bins)).histogram
    if hist is None:
        return table
    counts, edges = hist
    top = max(counts) or 1
    for c, lo in zip(counts, edges):
        cells = c / top * width
        bar = "█" * int(cells) + (BARS[int((cells % 1) * 8)] if cells % 1 else "")
        table.add_row(Text(f"{lo:>9.3g}", "dim"), Text(bar.ljust(width), "#4285F4"), Text(str(c), "dim"))
    return table


def stats(arr: np.ndarray, scope: str = "", computed: Any = None, cancelled: Any = None) -> Table:
    """min/max, mean/std, NaN/Inf and zero counts of `arr`; `scope` says what they describe;
    `computed`: `arr`'s BlobStats, made already; `cancelled`: as :func:`engine.debugger.inspect.blob_stats`'s."""
    from engine.debugger.inspect import blob_stats  # noqa: PLC0415 - imports NumPy: off the first frame

    t = Table.grid(padding=(0, 1))
    t.add_column(style="dim")
    t.add_column()
    if arr.dtype.kind in "fiub" and arr.size:  # NOTE: in slices: a 3 GiB weight gets no float64 copy
        s = computed or blob_stats("", arr, histogram=False, cancelled=cancelled)
        t.add_row("min/max", f"{s.min:.4g} / {s.max:.4g}" if s.min is not None else "-")
        t.add_row("mean/std", f"{s.mean:.4g} / {s.std:.4g}" if s.mean is not None else "-")
        t.add_row("nan/inf", f"{s.nan_count} / {s.inf_count}")
        t.add_row("zeros", f"{s.zero_count} of {arr.size}")
    if scope:
        t.add_row("of", plain(scope))
    return t


def _cell(v: Any) -> str:
    import numpy as np  # noqa: PLC0415 - NumPy is off the first frame (the inspector shows values later)
    return f"{v:.4g}" if isinstance(v, (float, np.floating)) else str(v)


def values_table(arr: np.ndarray, rows: int = 10, width: int = 48, col0: int = 0, max_cols: int = 8) -> Table:
    """The first rows of a 2-D view of `arr`, as many whole columns from `col0` as fit `width`
    cells (a value never cut to ``0.1…``), at most `max_cols`; the slice box scrolls further."""
    import numpy as np  # noqa: PLC0415 - NumPy is off the first frame (the inspector shows values later)
    a = np.atleast_2d(arr)
    if not a.size:  # NOTE: a 0×6×6×16 has no a[0] to take a 2-D view of
        empty = Table.grid()
        empty.add_row(Text(f"no values: the shape {'×'.join(map(str, arr.shape))} has a zero dimension", "dim"))
        return empty
    while a.ndim > 2:
        a = a[0]
    shown = a[:rows]
    cells = [[_cell(v) for v in row] for row in shown]
    label_w = len(str(max(len(shown) - 1, 0))) + 1
    used, cols = label_w, []
    for j in range(col0, a.shape[1]):
        w = max([len(str(j))] + [len(r[j]) for r in cells]) + 1
        if cols and (used + w > width or len(cols) >= max_cols):
            break
        cols.append(j)
        used += w
    t = Table(box=None, padding=(0, 1, 0, 0), show_header=True, header_style="dim")
    t.add_column("", style="dim", no_wrap=True)
    for j in cols:
        t.add_column(str(j), justify="right", no_wrap=True)
    for i, r in enumerate(cells):
        t.add_row(str(i), *(Text(r[j]) for j in cols))  # NOTE: Text: a string value's [..] is not markup
    if cols and (cols[0] > 0 or cols[-1] < a.shape[1] - 1):
        t.caption = f"columns {cols[0]}–{cols[-1]} of {a.shape[1]}: slice (e.g. 0,:,{cols[-1] + 1}:) for more"
    return t


def save_value(value: Any, target: str, expr: str = "eval") -> str:
    """Write an eval's value (of `expr`) to ``.npy`` (any array-like; a scalar as a 0-d array); returns the
    path.  As a blob's save: a missing folder is one line naming it (it was a FileNotFoundError), a folder
    gets ``eval.npy`` inside it."""
    import numpy as np  # noqa: PLC0415 - NumPy is off the first frame (the inspector shows values later)

    from engine.debugger.inspect import save_blob, save_path  # noqa: PLC0415 - imports NumPy: off the first frame
    from engine.debugger.repl import parts_of  # noqa: PLC0415 - imports NumPy: off the first frame
    from engine.errors import NetvizError  # noqa: PLC0415

    path = save_path(target, "eval.npy")
    if value is _NO_ARRAY or parts_of(value) is not None:
        raise NetvizError(f"save {path}: the value's parts are no one array; evaluate one part (e.g. (…)[0]) "
                          "and save that")
    return str(save_blob(expr, np.asarray(value), path if path.suffix == ".npy" else path.with_suffix(".npy")))


def value_history(session: Session, ref: BlobRef, limit: int = 12) -> list[tuple[str, Any]]:
    """Each run's summary of the version `ref` names (TB Debugger V2's history), oldest first: one per
    While iteration, RNN timestep or cond check, labelled by it (``iteration 2``).  Only the runs of
    the op that writes that version: ``acc@1`` and ``acc@2`` of one loop body have their own rows, and
    a version no op of the subnet writes (``acc@0``, what the run read) has none."""
    if not ref.path:
        return []
    prefix = ("op", *(x for step in ref.path for x in step))
    writers = {i for i, v in session.producers(ref.path, ref.name) if ref.version is None or v == ref.version}
    rows = []
    for rec in session.state.history:
        if len(rec.path) == len(prefix) + 1 and rec.path[:-1] == prefix and rec.path[-1] in writers:
            label = next((f for f in reversed(getattr(rec, "frames", ())) if f != "net"), rec.label)
            rows += [(label, o) for o in rec.outputs if o.name == ref.name]
    return rows[-limit:]


def _history_table(rows: list[tuple[str, Any]]) -> Table:
    """One row per run; in a narrow pane a long label (``train iteration 3 · net mlp_train``) folds,
    the shape and the norm stay whole (they were cut: the oracle read no norm at 160×48)."""
    t = Table.grid(padding=(0, 1))
    t.add_column(style="dim", overflow="fold")
    t.add_column(no_wrap=True)
    t.add_column(no_wrap=True)
    for label, o in rows:
        health = f"NaN×{o.nan_count} Inf×{o.inf_count}" if o.nan_count or o.inf_count else \
            ("‖·‖ -" if o.norm is None else f"‖·‖ {o.norm:.4g}")
        t.add_row(plain(label), "×".join(map(str, o.shape)) or "scalar",
                  Text(health, style="bold #CE93D8" if o.nan_count or o.inf_count else ""))
    return t


#: :attr:`BlobInspector.result` of an eval whose tuple or list is no one array (its parts are in the facts)
_NO_ARRAY = object()


def _part_text(part: Any) -> Text:
    """One part of a tuple result: ``float32 scalar 0.1234`` or ``float32 2×3  min … max … mean …``."""
    import numpy as np  # noqa: PLC0415 - NumPy is off the first frame (the inspector shows values later)
    try:
        arr = np.asarray(part)
    except (ValueError, TypeError):
        arr = np.asarray(None)
    if arr.dtype == object:
        return plain(repr(part)[:120])
    if arr.size == 1:
        return plain(f"{arr.dtype} {'×'.join(map(str, arr.shape)) or 'scalar'} {_cell(arr.reshape(-1)[0])}")
    head = f"{arr.dtype} {'×'.join(map(str, arr.shape))}"
    if arr.dtype.kind in "fiub" and arr.size:
        fin = arr.astype(np.float64)[np.isfinite(arr.astype(np.float64))]
        if fin.size:
            head += f"  min {fin.min():.4g} max {fin.max():.4g} mean {fin.mean():.4g}"
    return plain(head)


def _summary(arr: np.ndarray, quantized: Any, scope: str, cancelled: Any = None) -> list[Any]:
    """The stats (and a quantized tensor's dequantized ones) and histogram of `arr`: one pass over it
    (:class:`engine.debugger.inspect.StatsCancelled` within a slice of `cancelled` saying so)."""
    from engine.debugger.inspect import blob_stats  # noqa: PLC0415 - imports NumPy: off the first frame

    hist = arr.dtype.kind in "fiu" and arr.size
    computed = (blob_stats("", arr, histogram=bool(hist), bins=BINS, cancelled=cancelled)
                if arr.dtype.kind in "fiub" and arr.size else None)
    parts: list[Any] = [stats(arr, scope, computed)]
    if quantized is not None:
        parts = [Text(quantized.describe(), style="bold"), *parts,
                 stats(quantized.dequantized(), "dequantized (real) values", cancelled=cancelled)]
    if hist:
        parts += [Text("histogram", style="dim"), histogram(arr, computed=computed)]
    return parts


class BlobInspector(Vertical):
    """Facts always; stats, histogram and a value table with a slice box once the blob has a value.

    It also shows an eval's value (:meth:`show_result`, ``:`` on the main screen) the same way."""

    result: Any = None  # the eval value shown instead of a blob (None: a blob)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # NOTE: made here, not in compose: the main screen mounts the inspector after the first frame, or
        # when a blob is chosen before that, and shows it at once (its compose runs a moment later)
        self.facts = Static(id="blob-facts")
        self.slice = Input(placeholder="slice: 0,:,:4", id="blob-slice")
        self.values = Static(id="blob-values")
        from netviz.widgets.history import IterationHistory  # noqa: PLC0415 - issue 45's sparklines
        self.history = IterationHistory(id="blob-history")

    def compose(self) -> ComposeResult:
        yield self.facts
        yield self.history
        yield self.slice
        yield self.values

    def show(self, session: Session, ref: BlobRef | None) -> None:
        self.session, self.ref, self.result = session, ref, None
        self.display = ref is not None
        if ref is None:
            return
        info = session.blob_info(ref.name)
        facts = Table.grid(padding=(0, 1))
        facts.add_column(style="dim")
        facts.add_column(overflow="fold")
        random = ref.name in random_params(session) and not (ref.version or 0)  # NOTE: until an op writes it
        facts.add_row("blob", Text.assemble((ref.label(), "bold"), ("  ⚡ injected" if session.injected(ref.name)
                                                                     else "", "bold #F4B400"),
                                            ("  ⚄ random values (no init net)" if random else "", "bold #DB4437")))
        runtime = session.runtime_shape(ref)
        if runtime is not None:
            shape, _, dtype = runtime.partition(" ")
            info = {**info, "shape": None, "dtype": dtype, "source": "run"}
            facts.add_row("shape", plain(shape))
        else:
            facts.add_row("shape", "?" if info["shape"] is None else "×".join(map(str, info["shape"])) or "scalar")
        facts.add_row("dtype", info["dtype"] or "?")
        facts.add_row("from", plain(info["source"]))
        prod = session.producers(ref.path, ref.name)
        cons = session.consumers(ref.path, ref.name)
        facts.add_row("written", ", ".join(f"#{i}→@{v}" for i, v in prod[:6]) or "external input")
        facts.add_row("read", ", ".join(f"#{i}(@{v})" for i, v in cons[:6]) or "-")
        history = value_history(session, ref)
        if len(history) > 1:
            facts.add_row("history", _history_table(history))
        self.facts.update(facts)
        self.history.show(session, ref)
        self.render_values()

    def show_result(self, session: Session, expr: str, value: Any) -> None:
        """An eval's value: the expression, then stats, histogram and values as for a blob."""
        import numpy as np  # noqa: PLC0415 - NumPy is off the first frame (the inspector shows values later)
        self.session, self.ref, self.result = session, None, value
        self.display = True
        self.history.show(session, None)
        facts = Table.grid(padding=(0, 1))
        facts.add_column(style="dim")
        facts.add_column(overflow="fold")
        facts.add_row("eval", plain(expr, "bold"))
        from engine.debugger.repl import parts_of  # noqa: PLC0415 - imports NumPy: off the first frame

        parts = parts_of(value)
        if parts is not None:  # NOTE: `acc.mean(), W @ b`: no one array; each part is shown on its own row
            self.result = _NO_ARRAY
            facts.add_row("value", plain(f"{type(value).__name__} of {len(parts)}"))
            for label, part in parts:
                facts.add_row(plain(label), _part_text(part))
            self.facts.update(facts)
            self.render_values()
            return
        arr = np.asarray(value) if not isinstance(value, np.ndarray) else value
        kind = f"{arr.dtype} {'×'.join(map(str, arr.shape)) or 'scalar'}"
        if arr.dtype != object and arr.ndim == 0 and arr.dtype.kind in "USV":  # NOTE: no stats to show a str by
            kind = f"{arr.item()!r}"[:200] + f"  ({kind})"
        facts.add_row("value", plain(kind if arr.dtype != object else repr(value)[:200]))
        facts.add_row("save", Text("S writes it to .npy", style="dim"))
        self.facts.update(facts)
        self.render_values()

    _stats_token = 0  # counts what render_values showed: a worker's late statistics of another blob are dropped

    def render_values(self) -> None:
        """Stats of the whole tensor (of the shown SSA version), its histogram, then the slice; a big
        tensor's stats come from a worker (:data:`SYNC_STATS_ELEMENTS`), the rest at once."""
        import numpy as np  # noqa: PLC0415 - NumPy is off the first frame (the inspector shows values later)
        box = self.values
        self._stats_token += 1
        self.workers.cancel_group(self, "blob-stats")
        self._shown_part = None
        if self.result is _NO_ARRAY:
            arr, why = None, "the parts are listed above (one array each: evaluate a part, e.g. (…)[0], to see it)"
        elif self.result is not None:
            arr, why = np.asarray(self.result), ""
            arr = arr if arr.dtype != object else None
        else:
            arr, why = self.session.version_value(self.ref) if self.ref else (None, "")
        self.slice.display = arr is not None
        if arr is None or not hasattr(arr, "shape"):
            box.update(Text(why or "no value yet (run or inject it)", style="dim"))
            return
        from engine.runtime.blobio import Int8Tensor  # noqa: PLC0415 - imports NumPy: off the first frame

        quantized = arr if isinstance(arr, Int8Tensor) else None  # NOTE: integers shown, with scale/zero point
        arr = np.asarray(arr.get() if hasattr(arr, "get") else arr)
        text = self.slice.value
        try:
            index = parse_slice(text)
            part = arr[index] if index else arr
        except (ValueError, IndexError, TypeError) as e:
            box.update(Text(f"slice: {e}", style="red"))
            return
        self._shown_part = np.asarray(part)
        whole = f"the whole {'×'.join(map(str, arr.shape)) or 'scalar'} tensor"
        self._values_label = f"values {list(np.shape(part))}" + (f" of the slice [{text}]" if index else "")
        scope = whole + ("" if not index else f", not the slice [{text}]")
        if arr.size <= SYNC_STATS_ELEMENTS:
            box.update(Group(*_summary(arr, quantized, scope), *self._values_part()))
            return
        box.update(Group(Text(f"computing the statistics of {whole} …", style="dim"), *self._values_part()))
        token = self._stats_token
        self.run_worker(lambda: self._summarize(token, arr, quantized, scope), thread=True, exclusive=True,
                        group="blob-stats", name="blob statistics")

    def _values_part(self) -> list[Any]:
        """The shown part's label and value table, as wide as the inspector is now."""
        width = max(24, (self.size.width or 48) - 2)
        return [Text(self._values_label, style="dim"), values_table(self._shown_part, width=width)]

    def _summarize(self, token: int, arr: np.ndarray, quantized: Any, scope: str) -> None:
        """The worker: the statistics, then the box as :meth:`render_values` shows a small tensor's, unless
        another blob, eval or slice has been shown since (`token`)."""
        from textual.worker import get_current_worker  # noqa: PLC0415

        from engine.debugger.inspect import StatsCancelled  # noqa: PLC0415 - imports NumPy: off the first frame

        worker = get_current_worker()
        try:  # NOTE: asked between slices: Esc or another blob stops a pass over gigabytes within one slice
            parts = _summary(arr, quantized, scope, lambda: worker.is_cancelled or token != self._stats_token)
        except StatsCancelled:
            return
        if not worker.is_cancelled and token == self._stats_token:
            try:
                self.app.call_from_thread(self._summarized, token, parts)
            except RuntimeError:  # NOTE: the app has gone (quit while the worker read a huge tensor)
                pass

    def cancel_stats(self) -> bool:
        """Esc: stop a big tensor's statistics pass (within one slice); True when one was under way."""
        running = [w for w in self.workers.cancel_group(self, "blob-stats") if not w.is_finished]
        if running:
            self._stats_token += 1
            self.values.update(Group(Text("statistics cancelled (Esc): choose the blob again to compute them",
                                          style="dim"), *self._values_part()))
        return bool(running)

    def _summarized(self, token: int, parts: list[Any]) -> None:
        if token == self._stats_token:
            self.values.update(Group(*parts, *self._values_part()))

    def shown_text(self) -> str:
        """The slice shown, as NumPy prints it (for the clipboard)."""
        import numpy as np  # noqa: PLC0415 - NumPy is off the first frame (the inspector shows values later)
        part = getattr(self, "_shown_part", None)
        return "" if part is None else np.array2string(part, threshold=10_000)

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.render_values()
