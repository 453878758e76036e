"""The TUI's "current view" export: the drawing of what the graph canvas shows, not the whole net.

:class:`ViewSpec` is taken on the UI thread at the moment the user chooses (the net on screen,
the ops in the canvas's window or focus set, blob or op-only zoom, SSA labels, the overlay's colours,
the pc, breakpoints, executed and NaN marks); :func:`view_drawing` cuts a full :class:`Drawing`
of that net down to it and marks it, so the layout runs in a worker on plain data.

Marks in the file: the pc op ``→ `` with a thick amber outline, a breakpoint ``● `` with a red
outline, an executed op `` ✓``, an op that wrote NaN/Inf `` NaN`` (purple outline), the overlay's
colour as the op's fill and its tag (``3.2ms``) on a second line, and a title note saying what the
view is (net path, ops shown, overlay).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from netviz import style as S

if TYPE_CHECKING:
    from netviz.drawing import DrawNode, Drawing

PC_COLOR, BREAK_COLOR, NAN_COLOR = S.AMBER, "#C62828", "#8E24AA"


@dataclass(frozen=True, slots=True)
class ViewSpec:
    """What the canvas shows, by op index of the net at `path` (a snapshot: plain, immutable data)."""

    path: tuple[tuple[int, str], ...]
    title: str
    ssa: bool = False
    blobs: bool = True
    ops: frozenset[int] | None = None  # None: every op of the net
    pc: int | None = None
    breakpoints: frozenset[int] = frozenset()
    executed: frozenset[int] = frozenset()
    nan: frozenset[int] = frozenset()
    overlay: str = "none"
    colors: Mapping[int, tuple[str, str]] = field(default_factory=dict)  # op → (fill, tag)


def _top(n: DrawNode) -> int | None:
    """The top-level op a node belongs to (a subnet's ops belong to the op holding the subnet)."""
    return n.path[0][0] if n.path else n.op_index


def view_drawing(d: Drawing, v: ViewSpec) -> Drawing:
    """`d` (a drawing of the net at ``v.path``) cut to the ops of `v` and their blobs, marked as on screen.

    Edges between kept nodes are kept; a blob is kept when an edge joins it to a kept op; clusters
    are kept when a kept node is in them (or in one nested inside)."""
    from netviz.drawing import DrawNode, Drawing  # noqa: PLC0415 (the main screen imports ViewSpec before its first frame)

    keep_op = (lambda n: True) if v.ops is None else (lambda n: _top(n) in v.ops)
    kept = {nid for nid, n in d.nodes.items() if n.kind != "blob" and keep_op(n)}
    for e in d.edges:
        for a, b in ((e.source, e.target), (e.target, e.source)):
            if a in kept and d.nodes[a].kind == "op" and d.nodes[b].kind == "blob":
                kept.add(b)
    out = Drawing(d.name, d.options, shapes=d.shapes)
    note = DrawNode("view:title", "note", v.title, S.Style("plaintext", S.BLACK, None, S.BLACK))
    out.nodes[note.id] = note
    for nid, n in d.nodes.items():
        if nid in kept:
            out.nodes[nid] = _marked(n, v) if n.kind == "op" and not n.path else n
    out.edges = [e for e in d.edges if e.source in kept and e.target in kept]
    used = {n.cluster for n in out.nodes.values() if n.cluster}
    while used:
        cid = used.pop()
        if cid in d.clusters and cid not in out.clusters:
            out.clusters[cid] = d.clusters[cid]
            if d.clusters[cid].parent:
                used.add(d.clusters[cid].parent)
    return out


def _marked(n: DrawNode, v: ViewSpec) -> DrawNode:
    """An op node with the view's marks on its label and outline, and the overlay's fill."""
    i, style, label = n.op_index, n.style, n.label
    extra = dict(style.extra)
    if i in v.colors:
        fill, tag = v.colors[i]
        style = replace(style, fill=fill, color=fill, fontcolor=S.WHITE)
        label += f"\n{tag}"
    if i in v.executed and i not in v.nan:  # NOTE: an op that wrote NaN/Inf is marked NaN, never ✓
        label += " ✓"
    if i in v.nan:
        label += " NaN"
        extra.update(color=NAN_COLOR, penwidth="3")
    if i in v.breakpoints:
        label = "● " + label
        extra.update(color=BREAK_COLOR, penwidth="3")
    if i == v.pc:
        label = "→ " + label
        extra.update(color=PC_COLOR, penwidth="4")
    return replace(n, label=label, style=replace(style, extra=tuple(extra.items())))
