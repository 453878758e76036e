"""What netviz supports of each Caffe2 op: schema, kernel, maker, gradient kernels, shape rule, marker.

Counted live from ``engine.catalogue.registry`` (so kernels added by any family show up at once) against
the catalogue. ``python -m engine.caffe2 --coverage`` prints the totals and writes
``docs/ops.md`` and the known-gaps allow-list (makers whose gradient ops lack kernels).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from google.protobuf import text_format

from engine.catalogue.category import category
from engine.catalogue.docs import description
from engine.catalogue.facts import MARKER_STATUSES, OpFacts, facts, forward_ops, gradient_ops
from proto import caffe2_pb2

ROOT = Path(__file__).resolve().parents[2]
GAPS = Path(__file__).resolve().parents[1] / "catalogue" / "known_gaps.txt"


@dataclass(frozen=True, slots=True)
class Row:
    """One op's support in netviz (``maker`` is None for ops whose Caffe2 status is a marker)."""

    type: str
    category: str
    gradient: str  # Caffe2's status
    kernel: bool
    shape: bool
    maker: bool | None = None  # has_gradient ops: netviz has a maker
    probe_ok: bool | None = None  # its output on the probe is byte-identical to Caffe2's
    grad_kernels: bool | None = None  # every op type it emits on the probe has a kernel
    marker_ok: bool | None = None  # marker ops: netviz registers Caffe2's marker


def _parse(text: str) -> caffe2_pb2.OperatorDef:
    return text_format.Parse(text, caffe2_pb2.OperatorDef())


def _grad_json(g: object) -> object:
    if g is None or isinstance(g, str):
        return g
    return {"indices": g.indices, "values": g.values}  # type: ignore[attr-defined]


#: Gradient ops whose input/output lists Caffe2 builds in Python set order (docs/fidelity.md):
#: compared as sets, the first input (the condition) kept in place.
SET_ORDER = frozenset({"While"})


def comparable(texts: list[str]) -> list[object]:
    """Text-proto gradient ops, with :data:`SET_ORDER` ops' name lists turned into sets."""
    out: list[object] = []
    for t in texts:
        op = _parse(t)
        out.append((op.input[0], sorted(op.input[1:]), sorted(op.output), [a.name for a in op.arg])
                   if op.type in SET_ORDER else t)
    return out


def run_probe(f: OpFacts) -> tuple[list[caffe2_pb2.OperatorDef], list[object]]:
    """netviz's ``GetGradientForOp`` on the oracle's probe op, with fresh net-name counters
    (control-flow makers name their nets ``gradient_loop_cond_net``, ``_1``, … per process)."""
    from engine.caffe2.core import Net  # noqa: PLC0415
    from engine.autodiff.gradient_ir import GradientRegistry  # noqa: PLC0415 - pulls in every maker

    p = f.probe or {}
    saved = dict(Net._net_names_used_counters)
    Net._net_names_used_counters.clear()
    try:
        return GradientRegistry.GetGradientForOp(_parse(p["op"]), p["g_output"])
    finally:
        Net._net_names_used_counters.clear()
        Net._net_names_used_counters.update(saved)


def probe_result(f: OpFacts) -> tuple[bool, list[str]]:
    """Run netviz's maker on the oracle's probe op: (identical to Caffe2's output, op types emitted)."""
    p = f.probe or {}
    try:
        ops, g_input = run_probe(f)
    except Exception:  # noqa: BLE001 - any failure means "does not match"
        return "error" in p, []
    got = [text_format.MessageToString(g) for g in ops]
    same = ("grad_ops" in p and comparable(got) == comparable(p["grad_ops"])
            and [_grad_json(g) for g in g_input] == p["g_input"])
    return same, [g.type for g in ops]


def row(op_type: str) -> Row:
    """The coverage row of a forward op type."""
    from engine.runtime.grad_makers import MARKERS  # noqa: PLC0415
    from engine.catalogue.registry import GRADIENTS, KERNELS, SHAPES  # noqa: PLC0415

    f = facts(op_type)
    assert f is not None, op_type
    base = Row(op_type, category(op_type), f.gradient, op_type in KERNELS, op_type in SHAPES)
    maker = GRADIENTS.get(op_type)
    if f.gradient in MARKER_STATUSES:
        return replace(base, marker_ok=maker is MARKERS[f.gradient])
    if f.gradient != "has_gradient":
        return base
    if maker is None or maker in MARKERS.values():
        return replace(base, maker=False, probe_ok=False, grad_kernels=False)
    ok, emitted = probe_result(f)
    return replace(base, maker=True, probe_ok=ok, grad_kernels=all(t in KERNELS for t in emitted))


def rows() -> list[Row]:
    """One row per Caffe2 CPU forward op type (629)."""
    return [row(t) for t in forward_ops()]


def gaps(rs: list[Row]) -> list[str]:
    """Forward ops with a kernel whose maker emits an op type without one (backward cannot run)."""
    return sorted(r.type for r in rs if r.kernel and r.maker and r.grad_kernels is False)


def totals(rs: list[Row]) -> dict[str, str]:
    """The headline numbers, ``"have/of"`` each."""
    from engine.catalogue.registry import KERNELS, SHAPES  # noqa: PLC0415

    status = Counter(r.gradient for r in rs)
    grads = gradient_ops()
    makers = [r for r in rs if r.gradient == "has_gradient"]
    markers = [r for r in rs if r.gradient in MARKER_STATUSES]
    return {
        "forward op types with a schema": f"{sum(facts(r.type).has_schema for r in rs)}/{len(rs)}",
        "forward op types with a kernel": f"{sum(r.kernel for r in rs)}/{len(rs)}",
        "forward op types with a shape rule": f"{sum(r.shape for r in rs)}/{len(rs)}",
        "gradient op types with a schema": f"{sum(facts(t).has_schema for t in grads)}/{len(grads)}",
        "gradient op types with a kernel": f"{sum(t in KERNELS for t in grads)}/{len(grads)}",
        "gradient op types with a shape rule": f"{sum(t in SHAPES for t in grads)}/{len(grads)}",
        "gradient makers": f"{sum(bool(r.maker) for r in makers)}/{len(makers)}",
        "makers identical to Caffe2 on the probe": f"{sum(bool(r.probe_ok) for r in makers)}/{len(makers)}",
        "makers whose gradient ops all have kernels": f"{sum(bool(r.grad_kernels) for r in makers)}/{len(makers)}",
        "Caffe2 markers": f"{sum(bool(r.marker_ok) for r in markers)}/{len(markers)} "
                          f"({', '.join(f'{s} {status[s]}' for s in MARKER_STATUSES)})",
        "ops without a maker in Caffe2": f"{status['no_maker']}",
    }


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("*", "\\*")


def _mark(v: bool | None) -> str:
    return "" if v is None else ("yes" if v else "**no**")


def markdown(rs: list[Row]) -> str:
    """``docs/ops.md``: totals, then one table row per forward op and per gradient op."""
    from engine.catalogue.registry import KERNELS, SHAPES  # noqa: PLC0415

    out = ["# Caffe2 ops in netviz", "",
           "Generated by `python -m engine.caffe2 --coverage` (do not edit). Facts come from real",
           "Caffe2 1.10.2 (`engine/catalogue/ops.json`, written by `tests/oracle/gen_catalogue.py`);",
           "descriptions are netviz's own (`engine/catalogue/descriptions.tsv`). `maker = Caffe2`: netviz's",
           "gradient maker emits byte-identical ops on the oracle's probe op.", "", "## Totals", ""]
    out += [f"- {k}: {v}" for k, v in totals(rs).items()]
    out += ["", "## Forward ops (629)", "",
            "| op | category | description | kernel | shape | gradient (Caffe2) | maker = Caffe2 | grad kernels |",
            "|---|---|---|---|---|---|---|---|"]
    for r in rs:
        grad = r.gradient if r.marker_ok is None else f"{r.gradient} {'(yes)' if r.marker_ok else '(**missing**)'}"
        out.append(f"| {r.type} | {r.category} | {_cell(description(r.type))} | {_mark(r.kernel)} | {_mark(r.shape)} "
                   f"| {grad} | {_mark(r.probe_ok)} | {_mark(r.grad_kernels)} |")
    why = dict(ln.split("\t", 1) for ln in (ROOT / "engine" / "catalogue" / "no_kernel.tsv").read_text().splitlines()
               if "\t" in ln)  # NOTE: one line per forward op left without a kernel, and why
    missing = [r.type for r in rs if r.kernel is False]
    out += ["", f"## Forward ops without a kernel ({len(missing)})", "", "| op | why |", "|---|---|"]
    out += [f"| {t} | {_cell(why.get(t, '**no reason recorded**'))} |" for t in missing]
    for ln in (ROOT / "engine" / "catalogue" / "no_kernel.tsv").read_text().splitlines():
        out += ["", ln[2:]] if ln.startswith("# ") else []
    out += ["", "## Gradient ops (186)", "", "| op | category | description | kernel | shape |", "|---|---|---|---|---|"]
    for t in gradient_ops():
        out.append(f"| {t} | {category(t)} | {_cell(description(t))} | {_mark(t in KERNELS)} | {_mark(t in SHAPES)} |")
    return "\n".join(out) + "\n"


def write(rs: list[Row]) -> None:
    """Write ``docs/ops.md`` and the known-gaps allow-list."""
    (ROOT / "docs" / "ops.md").write_text(markdown(rs))
    GAPS.write_text("# Forward ops with a kernel whose gradient ops lack one (regenerate with "
                    "`python -m engine.caffe2 --coverage`; must only shrink)\n"
                    + "".join(f"{t}\n" for t in gaps(rs)))


def known_gaps() -> set[str]:
    """The allow-list written by :func:`write`."""
    return {ln.strip() for ln in GAPS.read_text().splitlines() if ln.strip() and not ln.startswith("#")}
