"""The graph canvas's adapter to :mod:`netviz.layout`: a net → DOT sized in character cells →
graphviz ``dot`` → a :class:`Scene` of node boxes and box-drawing edges on a character grid.

No Textual here: scenes are built in a worker thread and only drawn by
:class:`~netviz.widgets.graph_canvas.GraphCanvas`.  Edges follow graphviz's spline through its
on-curve points, drawn as vertical-horizontal-vertical runs whose junctions merge (``┬ ┼ ╯``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine.optypes import CONTROL_FLOW
from netviz.layout import layout_dot

CW, CH = 8.0, 16.0  # points per character cell (graphviz works in points)
BIG_NET = 150
U, D, L, R, ARROW_DOWN, ARROW_UP = 1, 2, 4, 8, 16, 32

#: zoom level → (name, blob nodes drawn, scale)
ZOOMS = (("detail", True, 1.0), ("ops", False, 1.0), ("overview", False, 0.5), ("map", False, 0.25))

_BOX = {0: " ", U: "│", D: "│", U | D: "│", L: "─", R: "─", L | R: "─", U | L: "╯", U | R: "╰",
        D | L: "╮", D | R: "╭", U | D | L: "┤", U | D | R: "├", U | L | R: "┴", D | L | R: "┬",
        U | D | L | R: "┼"}
LUT = np.array([_BOX[m & 15] for m in range(64)], dtype="<U1")
LUT[ARROW_DOWN:ARROW_UP] = "▼"
LUT[ARROW_UP:] = "▲"


@dataclass(slots=True)
class SceneNode:
    """A node on the grid: top-left ``(x, y)`` and size in cells; `op` or `blob` names what it is."""

    kind: str                      # "op" | "blob"
    label: str
    x: int
    y: int
    w: int
    h: int
    style: str                     # "op" | "control" | "backward" | "blob" | "grad"
    op: int | None = None
    blob: tuple[str, int | None] | None = None

    def contains(self, cx: int, cy: int) -> bool:
        return self.x <= cx < self.x + self.w and self.y <= cy < self.y + self.h

    @property
    def center(self) -> tuple[int, int]:
        return self.x + self.w // 2, self.y + self.h // 2


@dataclass
class Scene:
    """A laid-out net on a character grid: `mask` holds edge directions, `backward` edge colour."""

    width: int
    height: int
    nodes: list[SceneNode]
    mask: np.ndarray
    backward: np.ndarray
    rows: dict[int, list[int]] = field(default_factory=dict)
    by_op: dict[int, int] = field(default_factory=dict)

    def index(self) -> Scene:
        for k, n in enumerate(self.nodes):
            for y in range(n.y, n.y + n.h):
                self.rows.setdefault(y, []).append(k)
            if n.op is not None:
                self.by_op[n.op] = k
        return self

    def node_at(self, x: int, y: int) -> SceneNode | None:
        return next((self.nodes[k] for k in self.rows.get(y, ()) if self.nodes[k].contains(x, y)), None)

    def edge_chars(self, row: int, x0: int, x1: int) -> str:
        return "".join(LUT[self.mask[row, x0:x1]]) if 0 <= row < self.height else ""


def _clip_left(text: str, n: int) -> str:
    return text if len(text) <= n else "…" + text[len(text) - n + 1:] if n > 1 else text[:n]


def _op_label(op, i: int, blobs: bool) -> str:
    if blobs:
        return f"{op.type} #{i}"
    return f"{op.type} → {_clip_left(op.output[0], 22)}" if op.output else op.type


def build_dot(net, ssa_list, n_forward: int, ssa: bool, blobs: bool) -> tuple[str, dict[str, dict]]:
    """DOT text for a net (ops, and blobs when `blobs`) with node sizes in cells, and node metadata."""
    meta: dict[str, dict] = {}
    # NOTE: dot's network-simplex and crossing passes are superlinear; big nets get capped effort.
    effort = ", nslimit=1, mclimit=0.3, splines=line" if len(net.op) > BIG_NET else ""
    lines = ["digraph G {", f'graph [rankdir=TB, nodesep={2 * CW / 72:.3f}, ranksep={3 * CH / 72:.3f}{effort}];',
             "node [shape=box, fixedsize=true, label=\"\"];"]
    blob_ids: dict[tuple[str, int | None], str] = {}
    last_writer: dict[str, str] = {}

    def node(nid: str, w: int, h: int, **m) -> None:
        meta[nid] = {"w": w, "h": h, **m}
        lines.append(f'{nid} [width={w * CW / 72:.3f}, height={h * CH / 72:.3f}];')

    def blob(name: str, v: int) -> str:
        key = (name, v if ssa else None)
        if key not in blob_ids:
            nid = blob_ids[key] = f"b{len(blob_ids)}"
            label = _clip_left(f"{name}@{v}" if ssa else name, 30)
            node(nid, len(label) + 2, 1, kind="blob", label=label, blob=key,
                 style="grad" if name.endswith("_grad") else "blob")
        return blob_ids[key]

    for i, (op, (ins, outs)) in enumerate(zip(net.op, ssa_list)):
        oid, bwd = f"o{i}", i >= n_forward
        label = _op_label(op, i, blobs)
        style = "backward" if bwd else "control" if op.type in CONTROL_FLOW else "op"
        node(oid, len(label) + 4, 3 if blobs else 1, kind="op", label=label, op=i, style=style)
        if blobs:
            lines.extend(f"{blob(b, v)} -> {oid};" for b, v in ins)
            lines.extend(f"{oid} -> {blob(b, v)};" for b, v in outs)
        else:
            srcs = dict.fromkeys(last_writer[b] for b, _ in ins if b in last_writer)
            lines.extend(f"{s} -> {oid};" for s in srcs)
            last_writer.update({b: oid for b, _ in outs})
    lines.append("}")
    return "\n".join(lines), meta


def build_scene(net, ssa_list, n_forward: int, ssa: bool, zoom: int, timeout: float = 30.0) -> Scene:
    """Lay out a net at a zoom level (see :data:`ZOOMS`); blocks, call from a worker."""
    _, blobs, scale = ZOOMS[zoom]
    dot, meta = build_dot(net, ssa_list, n_forward, ssa, blobs)
    lay = layout_dot(dot, timeout)
    width = int(lay.width / CW * scale) + 4
    height = int(lay.height / CH * scale) + 4

    def cell(px: float, py: float) -> tuple[int, int]:
        return (min(width - 1, max(0, int(px / CW * scale) + 1)),
                min(height - 1, max(0, int((lay.height - py) / CH * scale) + 1)))

    nodes: list[SceneNode] = []
    ids: dict[str, SceneNode] = {}
    for nid, box in lay.nodes.items():
        m = meta[nid]
        w = m["w"] if scale == 1 else max(1, min(m["w"], round(m["w"] * scale * 1.5)))
        h = m["h"] if scale == 1 else 1
        cx, cy = cell(box.x, box.y)
        n = SceneNode(m["kind"], m["label"], max(0, cx - w // 2), max(0, cy - h // 2), w, h, m["style"],
                      m.get("op"), m.get("blob"))
        nodes.append(n)
        ids[nid] = n
    mask = np.zeros((height, width), np.uint8)
    bwd = np.zeros((height, width), np.bool_)
    for e in lay.edges:
        t, h = ids.get(e.tail), ids.get(e.head)
        if t is None or h is None:
            continue
        pts = [cell(*p) for p in e.points[3:-1:3]]
        down = h.y >= t.y + t.h
        start = (t.center[0], t.y + t.h if down else t.y - 1)
        end = (h.center[0], h.y - 1 if down else h.y + h.h)
        _draw_path(mask, bwd, [start, *pts, end], "backward" in (t.style, h.style), down)
    return Scene(width, height, nodes, mask, bwd).index()


def _draw_path(mask: np.ndarray, bwd: np.ndarray, pts: list[tuple[int, int]], backward: bool,
               down: bool) -> None:
    height, width = mask.shape
    pts = [(min(max(x, 0), width - 1), min(max(y, 0), height - 1)) for x, y in pts]
    for (ax, ay), (bx, by) in zip(pts, pts[1:]):
        my = (ay + by) // 2
        _vline(mask, bwd, ax, ay, my, backward)
        _hline(mask, bwd, my, ax, bx, backward)
        _vline(mask, bwd, bx, my, by, backward)
    ex, ey = pts[-1]
    mask[ey, ex] |= ARROW_DOWN if down else ARROW_UP
    bwd[ey, ex] |= backward


def _vline(mask, bwd, x: int, y0: int, y1: int, backward: bool) -> None:
    if y0 == y1:
        return
    a, b = min(y0, y1), max(y0, y1)
    mask[a, x] |= D
    mask[a + 1:b, x] |= U | D
    mask[b, x] |= U
    bwd[a:b + 1, x] |= backward


def _hline(mask, bwd, y: int, x0: int, x1: int, backward: bool) -> None:
    if x0 == x1:
        return
    a, b = min(x0, x1), max(x0, x1)
    mask[y, a] |= R
    mask[y, a + 1:b] |= L | R
    mask[y, b] |= L
    bwd[y, a:b + 1] |= backward
