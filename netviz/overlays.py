"""Overlays: the debugger's per-op records (time, NaN/Inf, gradient norm, update ratio) as colours on ops.

Pure functions over records, no Textual: :func:`overlay_colors` gives each op of a net a colour
and a short tag (``3.2ms``), :func:`legend` the one-line key the breadcrumb shows.  Times and
norms are coloured by quantile among the ops that ran, so one slow conv does not wash out the rest.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rich.text import Text

OVERLAYS = ("none", "time", "NaN", "grad-norm")


def value_of(mode: str, r: Any) -> float | None:
    """An op's overlay value: its time, or (``grad-norm``) the norm of the gradients it wrote and,
    for an optimizer update of a training net, the update ratio ‖ΔW‖/‖W‖ of its parameter."""
    if mode == "time":
        return r.wall_s
    ratio = getattr(r, "update_ratio", None)
    return ratio if ratio is not None else r.grad_norm
def loss_seed_note(loss: str, shape: tuple[int, ...] | None) -> str | None:
    """A warning when the loss to differentiate is not a scalar, else None.

    Caffe2's ``AddGradientOperators`` (and :func:`engine.autodiff.gradient_ir.backward_net`) seeds a
    loss with ``ConstantFill(loss, value=1.0)``: ones of the loss's shape, so the gradients are those
    of the sum of its elements.  For a softmax output that sum is constant, and every ‖g‖ is 0.
    """
    if shape is None or all(d == 1 for d in shape):
        return None
    return (f"loss {loss!r} is {'×'.join(map(str, shape))}, not a scalar: its gradient seed is ones of that shape "
            "(as Caffe2's AddGradientOperators), so ‖g‖ is of the sum of its elements (0 for a softmax's); "
            "g again, then name a scalar loss")


#: cool → hot
HEAT = ("#1565C0", "#00897B", "#9E9D24", "#EF6C00", "#C62828")
NAN, CLEAN, STALE = "#8E24AA", "#2E7D32", "#616161"


def _buckets(values: dict[int, float]) -> dict[int, int]:
    """Op → heat bucket 0..4 by rank among `values`."""
    order = sorted(values, key=values.__getitem__)
    n = len(order)
    return {op: min(len(HEAT) - 1, k * len(HEAT) // max(n, 1)) for k, op in enumerate(order)}


def overlay_colors(mode: str, records: Sequence[Any | None], stale: Sequence[bool] = ()
                   ) -> dict[int, tuple[str, str]]:
    """Op index → (background colour, tag) for overlay `mode`; ops without a record are left out."""
    if mode == "none":
        return {}
    out: dict[int, tuple[str, str]] = {}
    if mode == "NaN":
        for i, r in enumerate(records):
            if r is not None:
                out[i] = (NAN, "NaN") if r.has_inf_or_nan else (CLEAN, "ok")
    else:
        values = {i: v for i, r in enumerate(records) if r is not None and (v := value_of(mode, r)) is not None
                  and math.isfinite(v)}
        for i, b in _buckets(values).items():
            out[i] = (HEAT[b], _tag(mode, values[i]))
    for i, s in enumerate(stale):
        if s and i in out:
            out[i] = (STALE, out[i][1] + "~")
    return out


def _tag(mode: str, v: float) -> str:
    if mode == "time":
        return _seconds(v)
    return f"{v:.2g}"


def _seconds(v: float) -> str:
    """A run time as a person writes it, two significant digits and never an exponent:
    ``850µs``, ``3.2ms``, ``160ms``, ``1.6s``, ``75s``."""
    for scale, unit in ((1e6, "µs"), (1e3, "ms"), (1.0, "s")):
        x = float(f"{v * scale:.2g}")  # rounded first, so 999.7µs reads 1ms
        if x < 1000 or unit == "s":
            return f"{x:g}{unit}" if x < 1e6 else f"{x:.0f}{unit}"
    raise AssertionError("unreachable")


def legend(mode: str, records: Sequence[Any | None]) -> Text:
    """``overlay time  ■■■■■ 0.01–12ms`` (empty for ``none``)."""
    if mode == "none":
        return Text()
    text = Text.assemble(("  ·  overlay ", "dim"), (mode, "bold"), " ")
    if mode == "NaN":
        return text.append_text(Text.assemble(("■", NAN), (" NaN/Inf ", "dim"), ("■", CLEAN), (" finite", "dim")))
    for c in HEAT:
        text.append("■", c)
    vals = [v for r in records if r is not None and (v := value_of(mode, r)) is not None and math.isfinite(v)]
    if vals:
        text.append(f" {_tag(mode, min(vals))}–{_tag(mode, max(vals))}", "dim")
    else:
        text.append(" (nothing ran yet)" if mode == "time" else " (no backward op ran yet)", "dim")
    return text


# ---- engine vs ONNX Runtime, per op ----------------------------------------------------
#: an op whose worst value is over the tolerance, one that differs within it (float rounding), one equal
OVER, ROUNDING = "#C62828", "#9E9D24"
ONNX_SIDE = "ONNX Runtime vs engine"


def worst_per_op(rows: Sequence[Any]) -> dict[int, Any]:
    """Op index → its worst compared value (rows of :func:`engine.onnx.export.diff_against_runtime`):
    one over the tolerance before any within it, then the largest absolute difference."""
    out: dict[int, Any] = {}
    for r in rows:
        cur = out.get(r.op_index)
        if cur is None or (not r.ok, r.max_abs) > (not cur.ok, cur.max_abs):
            out[r.op_index] = r
    return out


def diff_colors(rows: Sequence[Any]) -> dict[int, tuple[str, str]]:
    """Op index → (colour, tag) of a per-op comparison: red over the tolerance, olive for a
    difference within it, green for equal; the tag is the worst blob's max abs difference."""
    return {i: (CLEAN if r.max_abs == 0 else ROUNDING if r.ok else OVER, f"Δ{r.max_abs:.2g}")
            for i, r in worst_per_op(rows).items()}


def diff_header(rows: Sequence[Any], side: str | None = None) -> str:
    """What a per-op comparison found, in one line: how many ops differ, the worst (op and blob), and
    the first op (in run order) over the tolerance, or that none is."""
    side = side or (f"{rows[0].label} (own error per op)" if rows and hasattr(rows[0], "label") else ONNX_SIDE)
    worst = worst_per_op(rows)
    differ = [r for r in worst.values() if r.max_abs > 0]
    if not differ:
        return f"{side}: all {len(worst)} ops equal ({len(rows)} values)"
    top = max(differ, key=lambda r: r.max_abs)
    first = next((r for r in rows if not r.ok), None)
    if first is None:  # NOTE: "175 of 175 ops differ" read as alarming when every one is float rounding
        return (f"{side}: all {len(worst)} ops within tolerance ({len(differ)} differ by float rounding, "
                f"largest op #{top.op_index} {top.op_type} '{top.blob}': abs {top.max_abs:.3g})")
    over = sum(not r.ok for r in worst.values())
    return (f"{side}: {over} of {len(worst)} ops over the tolerance, first over the tolerance: op #{first.op_index} "
            f"{first.op_type} '{first.blob}'; worst op #{top.op_index} {top.op_type} '{top.blob}' (abs {top.max_abs:.3g})")


def diff_row(r: Any) -> str:
    """One op's line in the comparison's list: its worst value's difference and whether it is within the
    tolerance (no raw relative difference: 3 % of a value near 0 is rounding); a run diff's row gives
    the op's own error, its output's difference and what it inherited."""
    verdict = "over tol" if not r.ok else "within tol" if r.max_abs else "equal"
    if hasattr(r, "inherited"):
        return (f"#{r.op_index} {r.op_type}  {r.blob}  own {r.max_abs:.3g}  out {r.out:.3g}  "
                f"inherited {r.inherited:.3g}  {verdict}")
    return f"#{r.op_index} {r.op_type}  {r.blob}  abs {r.max_abs:.3g}  {verdict}"


def diff_label(rows: Sequence[Any]) -> str:
    """Which comparison made `rows`: ``run diff`` (its rows say so) or ``ONNX diff``."""
    return getattr(rows[0], "label", "ONNX diff") if rows else "ONNX diff"


def diff_legend(rows: Sequence[Any]) -> Text:
    """The breadcrumb's key while a per-op comparison colours the graph."""
    label = diff_label(rows)
    return Text.assemble(("  ·  ", "dim"), (label, "bold"), " ", ("■", OVER), (" over tol ", "dim"),
                         ("■", ROUNDING), (" rounding ", "dim"), ("■", CLEAN), (" equal", "dim"),
                         (f"  ({len(worst_per_op(rows))} ops; m clears)", "dim"))
