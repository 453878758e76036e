"""The inspector's iteration history (issue 45): a blob's min, max, mean and norm per write, as sparklines.

One point per version an op wrote: each While iteration, RNN timestep, and each run of the net (``c``
again in a training net).  A replay reads every version from its recording
(:func:`engine.debugger.timetravel.history`, in a worker: it reads values); live, a
:class:`~engine.debugger.timetravel.LiveHistory` listener is attached to the debugger the first time a
blob is shown, so its history starts then (the debugger keeps no per-iteration values to look back at).
"""
from __future__ import annotations

import math
import weakref
from typing import Any

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from netviz.session import BlobRef, Session

#: the eight heights of a sparkline cell, lowest first
BARS = "▁▂▃▄▅▆▇█"
#: at most this many points (the latest): a sparkline wider than the inspector folds into noise
POINTS = 48

#: live: session → {blob: LiveHistory}, one listener per blob shown (weak: a closed session's go with it)
_LIVE: weakref.WeakKeyDictionary[Session, dict[str, Any]] = weakref.WeakKeyDictionary()


def sparkline(values: list[float]) -> Text:
    """``▁▃▅█`` scaled from the finite minimum to the maximum; a NaN/Inf point is a red ``!``."""
    finite = [v for v in values if math.isfinite(v)]
    lo, hi = (min(finite), max(finite)) if finite else (0.0, 0.0)
    out = Text()
    for v in values:
        if not math.isfinite(v):
            out.append("!", style="bold red")
        else:
            out.append(BARS[0 if hi == lo else round((v - lo) / (hi - lo) * (len(BARS) - 1))])
    return out


def live_history(session: Session, name: str) -> Any:
    """The live listener keeping `name`'s statistics, attached now (or when the debugger is made)."""
    from engine.debugger.timetravel import LiveHistory  # noqa: PLC0415

    kept = _LIVE.setdefault(session, {})
    if name not in kept and session.debugger is not None:  # NOTE: none yet: the next show after n attaches
        def attach(dbg: Any) -> None:
            h = LiveHistory(dbg, name)
            dbg.listeners.append(h)
            kept[name] = h
        kept[name] = None
        session._on_debugger(attach)
    return kept.get(name)


def stats_for(session: Session, ref: BlobRef) -> tuple[list[Any], str]:
    """`ref`'s per-write statistics and where they come from (a worker calls it: a replay reads values)."""
    dbg = session.debugger
    if dbg is not None and hasattr(dbg, "rec"):
        from engine.debugger.timetravel import history  # noqa: PLC0415
        return history(dbg.rec, ref.name), "recording"
    h = live_history(session, ref.name)
    return (list(h.stats) if h is not None else []), "live, since first shown"


def history_table(stats: list[Any], source: str) -> Table:
    """Four sparklines (min, max, mean, ‖·‖) with their first and last values, over the last POINTS writes."""
    shown = stats[-POINTS:]
    t = Table.grid(padding=(0, 1))
    t.add_column(style="dim", no_wrap=True, min_width=9)  # NOTE: no_wrap: a narrow pane squeezed it to nothing
    t.add_column(overflow="fold")
    first, last = shown[0], shown[-1]
    t.add_row("per write", Text(f"{len(stats)} writes ({first.iteration} … {last.iteration}; {source})"
                                + (f", last {POINTS} shown" if len(stats) > POINTS else ""), style="dim"))
    for field in ("min", "max", "mean", "norm"):
        values = [getattr(s, field) for s in shown]
        t.add_row(field if field != "norm" else "‖·‖",
                  Text.assemble(sparkline(values), (f"  {values[0]:.4g} → {values[-1]:.4g}", "dim")))
    return t


class IterationHistory(Static):
    """The sparklines under the blob facts; empty (no height) until a blob has two writes or more."""

    DEFAULT_CSS = "IterationHistory { height: auto; }"

    def show(self, session: Session, ref: BlobRef | None) -> None:
        """Compute `ref`'s history in a worker and show it (nothing for None or fewer than two writes)."""
        self.update("")
        if ref is None:
            return

        def work() -> None:
            from engine.errors import NetvizError  # noqa: PLC0415

            if session.running_elsewhere():
                return  # NOTE: a move holds the workspace; the stop's show() comes back here
            try:
                stats, source = stats_for(session, ref)
            except NetvizError as e:
                self.app.call_from_thread(self.update, Text(f"history: {e}", style="dim"))
                return
            if len(stats) > 1:
                self.app.call_from_thread(self.update, history_table(stats, source))
        self.run_worker(work, thread=True, group="history", exclusive=True)
