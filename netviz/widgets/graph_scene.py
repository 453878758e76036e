"""The graph canvas's adapter to :mod:`netviz.layout`: a net → DOT sized in character cells →
graphviz ``dot`` → a :class:`Scene` of node boxes and box-drawing edges on a character grid.

No Textual here: scenes are built in a worker thread and only drawn by
:class:`~netviz.widgets.graph_canvas.GraphCanvas`.

One transform maps graphviz points to cells for nodes and edges alike (:class:`_Grid`): a node
``w`` cells wide is ``w * CW`` points wide in the DOT, so its box lands exactly where ``dot``
put it.  Edges are routed orthogonally through the spline ``dot`` drew: they leave the tail's
bottom border (``┬``), run down the columns the spline takes through the rank bands it crosses,
jog sideways only in the free rows between ranks, and end in a ``▼`` just above the head.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from engine.catalogue import category
from engine.optypes import CONTROL_FLOW

CW, CH = 8.0, 16.0  # points per character cell (graphviz works in points)
BIG_NET = 150
#: nets with more ops than this are laid out a window at a time: WINDOW ops around the cursor,
#: windows starting at multiples of WINDOW_STEP (so a cursor moving along reuses cached layouts)
WINDOW_OPS, WINDOW, WINDOW_STEP = 300, 200, 50
U, D, L, R, ARROW_DOWN, ARROW_UP = 1, 2, 4, 8, 16, 32

#: zoom level → (name, blob nodes drawn, op box height).  Each level is its own ``dot`` layout
#: with node sizes in cells, never a scaled copy of another, so boxes cannot overlap.
ZOOMS = (("detail", True, 3), ("ops", False, 3), ("overview", False, 1), ("map", False, 1))
#: zoom level → (free rows between ranks, free columns between nodes)
SPACING = ((2, 2), (2, 2), (2, 2), (1, 1))
#: inputs ≥ 1 of these ops are weights: in the blob view they are folded into the op (the
#: inspector lists them), so the graph shows the activations that flow.
PARAM_OPS = frozenset({"Conv", "ConvTranspose", "FC", "FCTransposed", "SpatialBN", "LayerNorm", "GroupNorm",
                       "InstanceNorm", "PRelu", "Conv1D", "Conv2D", "Conv3D"})

_BOX = {0: " ", U: "│", D: "│", U | D: "│", L: "─", R: "─", L | R: "─", U | L: "╯", U | R: "╰",
        D | L: "╮", D | R: "╭", U | D | L: "┤", U | D | R: "├", U | L | R: "┴", D | L | R: "┬",
        U | D | L | R: "┼"}
LUT = np.array([_BOX[m & 15] for m in range(64)], dtype="<U1")
LUT[ARROW_DOWN:ARROW_UP] = "▼"
LUT[ARROW_UP:] = "▲"


@dataclass(slots=True)
class SceneNode:
    """A node on the grid: top-left ``(x, y)`` and size in cells; `op` or `blob` names what it is.

    `sub` is a second, dimmer line (a blob's shape); `ports` the bottom-border columns edges leave by.
    """

    kind: str                      # "op" | "blob"
    label: str
    x: int
    y: int
    w: int
    h: int
    style: str                     # "op" | "control" | "backward" | "blob" | "grad"
    op: int | None = None
    blob: tuple[str, int | None] | None = None
    sub: str = ""
    ports: set[int] = field(default_factory=set)

    def contains(self, cx: int, cy: int) -> bool:
        return self.x <= cx < self.x + self.w and self.y <= cy < self.y + self.h

    @property
    def center(self) -> tuple[int, int]:
        return self.x + self.w // 2, self.y + self.h // 2


@dataclass(slots=True)
class SceneEdge:
    """An edge's cells (flat indices into the mask), to highlight the edges of the selected node."""

    tail: int
    head: int
    cells: np.ndarray


@dataclass
class Scene:
    """A laid-out net on a character grid: `mask` holds edge directions, `backward` edge colour."""

    width: int
    height: int
    nodes: list[SceneNode]
    mask: np.ndarray
    backward: np.ndarray
    edges: list[SceneEdge] = field(default_factory=list)
    prefix: str = ""
    rows: dict[int, list[int]] = field(default_factory=dict)
    by_op: dict[int, int] = field(default_factory=dict)
    window: range | None = None    # the ops laid out, when not the whole net

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

    def edge_cells_of(self, nodes: set[int]) -> dict[int, set[int]]:
        """Row → columns of every edge touching one of `nodes` (scene node indices)."""
        out: dict[int, set[int]] = {}
        for e in self.edges:
            if e.tail in nodes or e.head in nodes:
                for y, x in zip(*np.divmod(e.cells, self.width)):
                    out.setdefault(int(y), set()).add(int(x))
        return out


def _clip_left(text: str, n: int) -> str:
    return text if len(text) <= n else "…" + text[len(text) - n + 1:] if n > 1 else text[:n]


def common_scope(net) -> str:
    """The name scope every blob of `net` shares (``gpu_0/``), dropped from blob labels."""
    names = {b for op in net.op for b in (*op.input, *op.output)}
    if len(names) < 2:
        return ""
    prefix = os.path.commonprefix(sorted(names)[:1] + sorted(names)[-1:])
    return prefix[: prefix.rfind("/") + 1]


def shape_text(info) -> str:
    """``1×64×112×112`` (unknown dims ``?``), or "" when nothing is known."""
    if info is None or info.shape is None:
        return ""
    return "×".join("?" if d is None else str(d) for d in info.shape) or "scalar"


def param_blobs(net, ssa_list, params: set[str] = frozenset()) -> set[tuple[str, int]]:
    """Blob versions drawn inside their op: version-0 weights of :data:`PARAM_OPS` (or `params`)."""
    out: set[tuple[str, int]] = set()
    other: set[tuple[str, int]] = set()
    for op, (ins, _) in zip(net.op, ssa_list):
        for k, b in enumerate(ins):
            takes_params = op.type in PARAM_OPS or op.type.removesuffix("Gradient") in PARAM_OPS
            if b[1] == 0 and (b[0] in params or (k >= 1 and takes_params)):
                out.add(b)
            else:
                other.add(b)
    return out - other


def window_of(n_ops: int, op: int | None) -> range:
    """The ops laid out for a cursor on `op`: all of a small net, else a :data:`WINDOW` around it.

    The cursor stays at least ``WINDOW_STEP`` ops from a window edge the net does not end at.
    """
    if n_ops <= WINDOW_OPS:
        return range(n_ops)
    op = min(max(op or 0, 0), n_ops - 1)
    start = max(0, (op - WINDOW_STEP) // WINDOW_STEP * WINDOW_STEP)
    start = min(start, -(-(n_ops - WINDOW) // WINDOW_STEP) * WINDOW_STEP)
    return range(start, min(n_ops, start + WINDOW))


def build_dot(net, ssa_list, n_forward: int, ssa: bool, zoom: int, shapes: Mapping | None = None,
              params: set[str] = frozenset(), ops: range | None = None) -> tuple[str, dict[str, dict], str]:
    """DOT text for a net (or the `ops` window of it) with node sizes in cells, node metadata,
    and the dropped name scope.  Edges from ops before the window are left out."""
    meta: dict[str, dict] = {}
    _, blobs, op_h = ZOOMS[zoom]
    ranksep, nodesep = SPACING[zoom]
    # NOTE: dot's network-simplex and crossing passes are superlinear; big nets get capped effort.
    ops = range(len(net.op)) if ops is None else ops
    effort = ", nslimit=1, mclimit=0.3, splines=line" if len(ops) > BIG_NET else ""
    lines = ["digraph G {",
             f"graph [rankdir=TB, nodesep={nodesep * CW / 72:.4f}, ranksep={ranksep * CH / 72:.4f}, "
             f"margin=0, pad=0{effort}];",
             'node [shape=box, fixedsize=true, label=""];', "edge [arrowhead=none];"]
    prefix = common_scope(net) if blobs else ""
    folded = param_blobs(net, ssa_list, params) if blobs else set()
    blob_ids: dict[tuple[str, int], str] = {}
    last_writer: dict[str, str] = {}

    def node(nid: str, w: int, h: int, **m) -> None:
        meta[nid] = {"w": w, "h": h, **m}
        lines.append(f"{nid} [width={w * CW / 72:.4f}, height={h * CH / 72:.4f}];")

    def blob(name: str, v: int) -> str:
        key = (name, v)
        if key not in blob_ids:
            nid = blob_ids[key] = f"b{len(blob_ids)}"
            short = name[len(prefix):] if prefix and name.startswith(prefix) else name
            label = _clip_left(short, 24) + (f"@{v}" if ssa else "")
            sub = shape_text(shapes.get(key)) if shapes else ""
            node(nid, max(len(label), len(sub)) + 2, 2 if sub else 1, kind="blob", label=label, sub=sub,
                 blob=(name, v if ssa else None), style="grad" if name.endswith("_grad") else "blob")
        return blob_ids[key]

    for i in ops:
        op, (ins, outs) = net.op[i], ssa_list[i]
        oid, bwd = f"o{i}", i >= n_forward
        label = f"{op.type} #{i}" if zoom < 3 else op.type[:8]
        style = "backward" if bwd else "control" if op.type in CONTROL_FLOW else category(op.type)
        node(oid, len(label) + (4 if op_h == 3 else 2), op_h, kind="op", label=label, op=i, style=style)
        if blobs:
            lines.extend(f"{blob(b, v)} -> {oid};" for b, v in dict.fromkeys(ins) if (b, v) not in folded)
            lines.extend(f"{oid} -> {blob(b, v)};" for b, v in outs)
        else:
            srcs = dict.fromkeys(last_writer[b] for b, _ in ins if b in last_writer)
            lines.extend(f"{s} -> {oid};" for s in srcs if s != oid)
            last_writer.update({b: oid for b, _ in outs})
    lines.append("}")
    return "\n".join(lines), meta, prefix


class _Grid:
    """Graphviz points → cells: the one transform for node boxes and edge points."""

    def __init__(self, lay) -> None:
        self.x0 = min((n.x - n.width / 2 for n in lay.nodes.values()), default=0.0)
        self.y1 = max((n.y + n.height / 2 for n in lay.nodes.values()), default=0.0)

    def __call__(self, px: float, py: float) -> tuple[float, float]:
        return (px - self.x0) / CW + 1, (self.y1 - py) / CH + 1


def build_scene(net, ssa_list, n_forward: int, ssa: bool, zoom: int, timeout: float = 30.0,
                shapes: Mapping | None = None, params: set[str] = frozenset(), ops: range | None = None) -> Scene:
    """Lay out a net (or the `ops` window of it) at a zoom level (see :data:`ZOOMS`); blocks,
    call from a worker."""
    from netviz.layout import layout_dot  # NOTE: here, not at the top: pygraphviz is not needed for a first frame

    dot, meta, prefix = build_dot(net, ssa_list, n_forward, ssa, zoom, shapes, params, ops)
    lay = layout_dot(dot, timeout)
    grid = _Grid(lay)
    nodes: list[SceneNode] = []
    ids: dict[str, int] = {}
    for nid, box in lay.nodes.items():
        m = meta[nid]
        cx, cy = grid(box.x, box.y)
        nodes.append(SceneNode(m["kind"], m["label"], _cell(cx - m["w"] / 2 + 0.5), _cell(cy - m["h"] / 2 + 0.5), m["w"],
                               m["h"], m["style"], m.get("op"), m.get("blob"), m.get("sub", "")))
        ids[nid] = len(nodes) - 1
    width = max((n.x + n.w for n in nodes), default=0) + 2
    height = max((n.y + n.h for n in nodes), default=0) + 2
    occupied = np.zeros(height, np.bool_)
    for n in nodes:
        occupied[n.y:n.y + n.h] = True
    mask = np.zeros((height, width), np.uint8)
    bwd = np.zeros((height, width), np.bool_)
    edges: list[SceneEdge] = []
    arrows = SPACING[zoom][0] >= 2
    for e in lay.edges:
        t, h = ids.get(e.tail), ids.get(e.head)
        if t is None or h is None or t == h:
            continue
        pts = np.array([grid(*p) for p in _sample(e.points)]) if e.points else np.zeros((0, 2))
        cells = _route(mask, occupied, nodes[t], nodes[h], pts, arrows)
        if cells.size:
            bwd.flat[cells] |= "backward" in (nodes[t].style, nodes[h].style)
            edges.append(SceneEdge(t, h, cells))
    window = None if ops is None or len(ops) == len(net.op) else ops
    return Scene(width, height, nodes, mask, bwd, edges, prefix, window=window).index()


def _cell(v: float) -> int:
    """The cell holding coordinate `v` (cell c spans [c, c + 1))."""
    return int(np.floor(v))


def _sample(points: tuple[tuple[float, float], ...], steps: int = 6) -> list[tuple[float, float]]:
    """Points along graphviz's cubic B-spline (``1 + 3n`` control points)."""
    p = np.asarray(points, dtype=float)
    if len(p) < 4:
        return [tuple(q) for q in p]
    out = [p[0]]
    t = np.linspace(0, 1, steps + 1)[1:, None]
    for k in range(0, len(p) - 3, 3):
        a, b, c, d = p[k:k + 4]
        out.extend((1 - t) ** 3 * a + 3 * (1 - t) ** 2 * t * b + 3 * (1 - t) * t ** 2 * c + t ** 3 * d)
    return [tuple(q) for q in out]


def _route(mask: np.ndarray, occupied: np.ndarray, t: SceneNode, h: SceneNode, pts: np.ndarray,
           arrows: bool) -> np.ndarray:
    """Draw one edge tail → head; returns its cells (flat indices)."""
    height, width = mask.shape
    cells: list[tuple[int, int]] = []

    def clamp(x: float, n: SceneNode) -> int:
        lo, hi = (n.x + 1, n.x + n.w - 2) if n.w >= 3 else (n.x, n.x + n.w - 1)
        return int(min(max(_cell(x), lo), hi))

    def vline(x: int, y0: int, y1: int) -> None:
        if y0 == y1:
            return
        a, b = min(y0, y1), max(y0, y1)
        mask[a, x] |= D
        mask[a + 1:b, x] |= U | D
        mask[b, x] |= U
        cells.extend((y, x) for y in range(a, b + 1))

    def hline(y: int, x0: int, x1: int) -> None:
        if x0 == x1:
            return
        a, b = min(x0, x1), max(x0, x1)
        mask[y, a] |= R
        mask[y, a + 1:b] |= L | R
        mask[y, b] |= L
        cells.extend((y, x) for x in range(a, b + 1))

    if h.y < t.y + t.h + 1:  # not below the tail (only for a cycle dot had to turn round)
        y = min(t.y + t.h, height - 1)
        x0, x1 = t.center[0], h.center[0]
        hline(y, x0, x1)
        mask[y, x1] |= ARROW_UP
        return np.array([yy * width + xx for yy, xx in cells], dtype=np.int64)
    if len(pts) and pts[0, 1] > pts[-1, 1]:
        pts = pts[::-1]
    sx = clamp(pts[0, 0] if len(pts) else t.center[0], t)
    ex = clamp(pts[-1, 0] if len(pts) else h.center[0], h)
    y0, y_end = t.y + t.h, h.y - 1
    # the rows in between: free channels, and rank bands a long edge passes through
    runs: list[tuple[int, int, bool]] = []  # (first row, last row, free)
    for y in range(y0, y_end + 1):
        free = not occupied[y]
        if runs and runs[-1][2] == free:
            runs[-1] = (runs[-1][0], y, free)
        else:
            runs.append((y, y, free))

    def band_x(a: int, b: int) -> int:
        x = float(np.interp((a + b + 1) / 2, pts[:, 1], pts[:, 0])) if len(pts) else ex
        return int(min(max(_cell(x), 0), width - 1))

    # NOTE: jogs happen only in free rows; a free run heads for the next band's column when
    # another free run follows that band, else straight for the head.
    targets: dict[int, int] = {}
    free_idx = [k for k, r in enumerate(runs) if r[2]]
    for j, k in enumerate(free_idx):
        nxt = free_idx[j + 1] if j + 1 < len(free_idx) else None
        targets[k] = band_x(*runs[k + 1][:2]) if nxt is not None else ex
    if all(free for *_, free in runs):  # a short edge: one column when both ends allow it
        lo, hi = max(t.x + 1, h.x + 1), min(t.x + t.w - 2, h.x + h.w - 2)
        if lo <= hi and abs(sx - ex) <= 2:
            sx = ex = min(max((sx + ex) // 2, lo), hi)
    x, y = sx, y0
    if t.h >= 3:
        t.ports.add(sx - t.x)
    mask[y0, sx] |= U
    for k, (a, b, free) in enumerate(runs):
        if not free:
            vline(x, y, b)
            y = b
            continue
        top = b - 1 if b == y_end and arrows and b > a else b
        if abs(targets[k] - x) == 1 and (targets[k] != ex or h.x + 1 <= x <= h.x + h.w - 2):
            targets[k] = x  # NOTE: a one-column wobble is rounding, not routing
        jog = a + (top - a) // 2 if targets[k] != x else y
        vline(x, y, jog)
        hline(jog, x, targets[k])
        x, y = targets[k], jog
    if x != ex and not (h.x <= x < h.x + h.w):
        hline(y, x, ex)
        x = ex
    vline(x, y, y_end)
    mask[y_end, x] |= ARROW_DOWN if arrows else D
    cells.append((y_end, x))
    cells.append((y0, sx))
    return np.array(sorted({yy * width + xx for yy, xx in cells}), dtype=np.int64)
