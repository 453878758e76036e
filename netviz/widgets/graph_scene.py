"""The graph canvas's adapter to :mod:`netviz.layout`: a net → DOT sized in character cells →
graphviz ``dot`` → a :class:`Scene` of node boxes and box-drawing edges on a character grid.

No Textual here: scenes are built in a worker thread and only drawn by
:class:`~netviz.widgets.graph_canvas.GraphCanvas`.

One transform maps graphviz points to cells for nodes and edges alike (:class:`_Grid`): a node
``w`` cells wide is ``w * CW`` points wide in the DOT, so its box lands exactly where ``dot``
put it.  Edges are routed orthogonally through the spline ``dot`` drew: they leave the tail's
bottom border (``┬``), run down the columns the spline takes through the rank bands it crosses,
jog sideways only in the free rows between ranks, and end in a ``▼`` just above the head.

A view flows top-to-bottom (``TB``) or left-to-right (``LR``); :func:`estimate_extents` sizes both
from the ranks alone (no ``dot`` run) and :func:`choose_direction` picks the one that shows more
of the drawing in the pane.  An LR scene is routed by the same code on the transposed grid.

A drawing deeper than the pane is folded like a snake into bands one pane long
(:func:`wrap_scene`): TB into columns side by side, LR into lines one under another.  The pane
then always shows consecutive ops, and :func:`fold_scroll` keeps the cursor's whole band in
view as it moves, only ever forwards while stepping.  :func:`build_scene` is a pure function of
(net, SSA list, view options, pane size), so a content-keyed cache can sit in front of it.
"""
from __future__ import annotations

import math
import os
from array import array
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import accumulate
from typing import TYPE_CHECKING, Any

from engine.catalogue import category
from engine.model.opdef import subnets_of
from engine.model.optypes import CONTROL_FLOW

if TYPE_CHECKING:
    import numpy as np

CW, CH = 8.0, 16.0  # points per character cell (graphviz works in points)
BIG_NET = 150
#: nets with more ops than this are laid out a window at a time: WINDOW ops around the cursor,
#: windows starting at multiples of WINDOW_STEP (so a cursor moving along reuses cached layouts)
WINDOW_OPS, WINDOW, WINDOW_STEP = 300, 200, 50
U, D, L, R, ARROW_DOWN, ARROW_UP, ARROW_RIGHT, ARROW_LEFT = 1, 2, 4, 8, 16, 32, 64, 128
DIRECTIONS = ("TB", "LR")

#: zoom level → (name, blob nodes drawn, op box height).  Each level is its own ``dot`` layout
#: with node sizes in cells, never a scaled copy of another, so boxes cannot overlap.
ZOOMS = (("detail", True, 3), ("ops", False, 3), ("overview", False, 1), ("map", False, 1))
#: direction → zoom level → (free cells between ranks, free cells between the nodes of a rank):
#: TB ranks are rows apart, LR ranks columns apart (an LR edge needs columns to jog and end in ▸).
#: One free TB row holds an edge's jog and its ▼ (ResNet-50 at 160×48: 14 ops at detail, 62 at overview,
#: where two rows showed 9 and 30); the backward ladder keeps two (:func:`dot_text`).
SPACING = {"TB": ((1, 2), (1, 2), (1, 1), (1, 1)), "LR": ((4, 1), (4, 1), (4, 1), (3, 1))}
#: inputs ≥ 1 of these ops are weights: in the blob view they are folded into the op (the
#: inspector lists them), so the graph shows the activations that flow.
PARAM_OPS = frozenset({"Conv", "ConvTranspose", "FC", "FCTransposed", "SpatialBN", "LayerNorm", "GroupNorm",
                       "InstanceNorm", "PRelu", "Conv1D", "Conv2D", "Conv3D",
                       # NOTE: quantized twins take their (Int8GivenTensorFill) weights in the same slots
                       "Int8Conv", "Int8ConvRelu", "Int8ConvTranspose", "Int8FC"})

#: the mark of a shape from static inference (no value yet): ``~1×?×112×112``
STATIC_MARK = "~"

_BOX = {0: " ", U: "│", D: "│", U | D: "│", L: "─", R: "─", L | R: "─", U | L: "╯", U | R: "╰",
        D | L: "╮", D | R: "╭", U | D | L: "┤", U | D | R: "├", U | L | R: "┴", D | L | R: "┬",
        U | D | L | R: "┼"}
#: mask byte → its character (a 256-character table for ``str.translate``); ▸, not ▶, which marks the pc
CHARS = "".join(_BOX[m & 15] if m < ARROW_DOWN else "▼" if m < ARROW_UP else "▲" if m < ARROW_RIGHT
                else "▸" if m < ARROW_LEFT else "◂" for m in range(256))


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
    version: int | None = None     # a blob's SSA version (also when the labels do not show it)

    def contains(self, cx: int, cy: int) -> bool:
        return self.x <= cx < self.x + self.w and self.y <= cy < self.y + self.h

    def moved(self, x: int, y: int) -> SceneNode:
        """This node at `x`, `y` (what ``dataclasses.replace`` makes, at a quarter of its cost: a
        first frame folds every node of its cached scene)."""
        return SceneNode(self.kind, self.label, x, y, self.w, self.h, self.style, self.op, self.blob, self.sub,
                         self.ports, self.version)

    @property
    def center(self) -> tuple[int, int]:
        return self.x + self.w // 2, self.y + self.h // 2


@dataclass(slots=True)
class SceneEdge:
    """An edge's cells (flat indices into the mask, an ``array("q")``), to highlight the edges of
    the selected node."""

    tail: int
    head: int
    cells: array


@dataclass
class Scene:
    """A laid-out net on a character grid: `grid` holds each cell's edge directions (one byte per
    cell, row-major: the bits U, D, L, R and the arrows), `back` a 1 where a backward edge passes.

    Plain bytes, not NumPy arrays, so a cached scene is read back and drawn without importing
    NumPy (the TUI's first frame); :attr:`mask` and :attr:`backward` are NumPy views of them for
    the layout code and tests.
    """

    width: int
    height: int
    nodes: list[SceneNode]
    grid: bytearray
    back: bytearray
    edges: list[SceneEdge] = field(default_factory=list)
    prefix: str = ""
    rows: dict[int, list[int]] = field(default_factory=dict)
    by_op: dict[int, int] = field(default_factory=dict)
    window: range | None = None    # the ops laid out, when not the whole net
    direction: str = "TB"          # "TB" or "LR"
    extents: dict[str, tuple[int, int]] = field(default_factory=dict)  # estimate_extents of the view
    columns: int = 1               # bands of a wrapped drawing (wrap_scene)
    band: int = 0                  # their length along the flow (0: not wrapped)
    #: each band's first cell across the flow (wrap_scene): TB bands are as wide as what they draw
    offsets: tuple[int, ...] = ()
    _row_text: dict[int, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if len(self.grid) != self.width * self.height or len(self.back) != len(self.grid):
            raise ValueError(f"a {self.width}x{self.height} scene of {len(self.grid)} / {len(self.back)} cells")

    @property
    def mask(self) -> np.ndarray:
        """`grid` as a (height, width) uint8 array sharing its memory."""
        import numpy as np  # noqa: PLC0415 (not needed to draw a scene)

        return np.frombuffer(self.grid, np.uint8).reshape(self.height, self.width)

    @property
    def backward(self) -> np.ndarray:
        """`back` as a (height, width) bool array sharing its memory."""
        import numpy as np  # noqa: PLC0415

        return np.frombuffer(self.back, np.bool_).reshape(self.height, self.width)

    def backward_flags(self, row: int, x0: int, x1: int) -> bytes:
        """The backward flags (0 / 1) of cells x0..x1 of a row, clipped to the scene."""
        if not 0 <= row < self.height:
            return b""
        start = row * self.width
        return bytes(self.back[start + min(x0, self.width):start + min(max(x0, x1), self.width)])

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
        """The edge characters of cells x0..x1 of a row (each row's text made once, on first use)."""
        if not 0 <= row < self.height:
            return ""
        text = self._row_text.get(row)
        if text is None:
            text = self._row_text[row] = self.grid[row * self.width:(row + 1) * self.width].decode("latin-1") \
                .translate(CHARS)
        return text[x0:x1]

    def edge_cells_of(self, nodes: set[int]) -> dict[int, set[int]]:
        """Row → columns of every edge touching one of `nodes` (scene node indices)."""
        out: dict[int, set[int]] = {}
        for e in self.edges:
            if e.tail in nodes or e.head in nodes:
                for c in e.cells:
                    y, x = divmod(c, self.width)
                    out.setdefault(y, set()).add(x)
        return out


def _clip_right(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n - 1] + "…"


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
    """Blob versions drawn inside their op: version-0 weights of :data:`PARAM_OPS` (or `params`).

    What a control-flow op reads is never folded: a While's loop-carried state (``acc``, ``i``)
    comes from the init net like a weight, but it is what the loop works on."""
    out: set[tuple[str, int]] = set()
    other: set[tuple[str, int]] = set()
    for op, (ins, _) in zip(net.op, ssa_list):
        control = op.type in CONTROL_FLOW
        for k, b in enumerate(ins):
            takes_params = op.type in PARAM_OPS or op.type.removesuffix("Gradient") in PARAM_OPS
            if b[1] == 0 and not control and (b[0] in params or (k >= 1 and takes_params)):
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
    return _span(n_ops, op, WINDOW, WINDOW_STEP)


def _span(n: int, op: int | None, size: int, step: int) -> range:
    """`size` of `n` items around `op`, starting at a multiple of `step` (all `n` when they fit)."""
    if n <= size:
        return range(n)
    op = min(max(op or 0, 0), n - 1)
    start = max(0, (op - step) // step * step)
    start = min(start, -(-(n - size) // step) * step)
    return range(start, min(n, start + size))


def ladder_window(view: Any, op: int | None) -> range | tuple[int, ...]:
    """The ops laid out for a cursor on `op` when the backward pass is shown: a window of the forward ops
    around the cursor's rung (``WINDOW / 2`` of them) and the backward ops from the first gradient op of
    theirs to the last (the Sums and fills between included), in program order.

    Why not :func:`window_of`: a window cut by op index holds gradient ops whose forward ops lie before
    it; the ladder then had nothing to stand them beside, and they ran down the pane in a column of
    their own.  `view` is a :class:`netviz.session.NetView` (``net``, ``n_forward``, ``forward_of``,
    ``grads_of``); a small net, or one without backward ops, gets :func:`window_of`."""
    n, nf = len(view.net.op), view.n_forward
    if n <= WINDOW_OPS or not 0 < nf < n:
        return window_of(n, op)
    op = min(max(op or 0, 0), n - 1)
    anchor = op if op < nf else _rung_of(view, op)
    fwd = _span(nf, anchor, WINDOW // 2, WINDOW_STEP // 2)
    grads = [g for f in fwd for g in view.grads_of.get(f, ())]
    lo = nf if fwd.stop == nf or not grads else min(grads)
    hi = n - 1 if fwd.start == 0 or not grads else max(grads)
    if op >= nf:  # NOTE: the cursor's own op is always laid out (a Sum past the last gradient op of the rungs)
        lo, hi = min(lo, op), max(hi, op)
    return (*fwd, *range(lo, hi + 1))


def window_for(view: Any, op: int | None, ladder: bool) -> range | tuple[int, ...]:
    """The ops the canvas lays out for a cursor on `op`: :func:`ladder_window` when the backward pass is
    shown (`ladder`), else :func:`window_of`."""
    return ladder_window(view, op) if ladder else window_of(len(view.net.op), op)


def describe_window(window: range | tuple[int, ...], n_ops: int) -> str:
    """What the status line says of a window that is not the whole net."""
    if isinstance(window, range):
        return f"ops {window.start}–{window.stop - 1} of {n_ops}"
    gap = next((k for k in range(1, len(window)) if window[k] != window[k - 1] + 1), len(window))
    return (f"ops {window[0]}–{window[gap - 1]} and their gradient ops {window[gap]}–{window[-1]} of {n_ops}"
            if gap < len(window) else f"ops {window[0]}–{window[-1]} of {n_ops}")


def _rung_of(view: Any, op: int) -> int:
    """The forward op whose rung backward op `op` stands on: its own forward op, else the nearest
    backward op's that has one (a Sum, a fill), else the last forward op."""
    n, nf = len(view.net.op), view.n_forward
    for d in range(n):
        for b in (op - d, op + d):
            if nf <= b < n and (f := view.forward_of(b)) is not None:
                return f
        if op - d < nf and op + d >= n:
            break
    return nf - 1


@dataclass
class ViewGraph:
    """The nodes (DOT id → metadata with size ``w``×``h`` in cells) and edges of a view, before layout."""

    meta: dict[str, dict]
    edges: list[tuple[str, str]]
    prefix: str
    zoom: int
    big: bool
    #: (forward op, its gradient op) node ids on one rank: the backward ladder, as the exports draw it
    pairs: list[tuple[str, str]] = field(default_factory=list)


def view_graph(net, ssa_list, n_forward: int, ssa: bool, zoom: int, shapes: Mapping | None = None,
               params: set[str] = frozenset(), ops: range | None = None, ladder: bool = False) -> ViewGraph:
    """The nodes and edges drawn for a net (or the `ops` window of it) at a zoom level, and the
    dropped name scope.  Edges from ops before the window are left out."""
    meta: dict[str, dict] = {}
    edges: list[tuple[str, str]] = []
    _, blobs, op_h = ZOOMS[zoom]
    ops = range(len(net.op)) if ops is None else ops
    prefix = common_scope(net) if blobs else ""
    folded = param_blobs(net, ssa_list, params) if blobs else set()
    blob_ids: dict[tuple[str, int], str] = {}
    last_writer: dict[str, str] = {}

    redirect: dict[tuple[str, int], str] = {}  # a version a subnet rewrote → the node of its new value
    cur: dict[str, int] = {}                    # name → its SSA version before the op being drawn
    done = 0                                    # ops whose writes `cur` holds

    def blob(name: str, v: int, after: int | None = None) -> str:
        if after is None and (name, v) in redirect:
            return redirect[name, v]
        key = (name, v) if after is None else (name, v, after)
        if key not in blob_ids:
            nid = blob_ids[key] = f"b{len(blob_ids)}"
            short = name[len(prefix):] if prefix and name.startswith(prefix) else name
            label = _clip_left(short, 24) + (f"@{v}" if ssa else "")
            # NOTE: a static shape is marked "~" (inferred); the canvas puts the shape of the value
            # there once the op that writes it has run, so room is kept for unknown dims to grow
            sub = STATIC_MARK + (shape_text(shapes.get(key)) or "?") if shapes is not None else ""
            # NOTE: two more cells per unknown dim (a channel count); a wholly unknown shape
            # keeps its size (a value's shape is cut with … rather than widen every such blob)
            room = len(sub) + (2 * sub.count("?") if "×" in sub else 0)
            meta[nid] = {"w": max(len(label), room) + 2, "h": 2 if sub else 1, "kind": "blob", "label": label,
                         "sub": sub, "blob": (name, v if ssa else None), "version": v if after is None else None,
                         "style": "grad" if name.endswith("_grad") else "blob"}
        return blob_ids[key]

    # NOTE: optimizer ops in their own colour, as the exports draw them (not red like gradient ops)
    partner: dict[int, int | None] = {}
    if n_forward < len(net.op):
        from engine.autodiff.training import OPTIMIZER, split_training_net  # noqa: PLC0415 (a backward view only)
        split = split_training_net(net)
        roles = ["optimizer" if k == OPTIMIZER else "gradient" for k in split.sections]
        partner = split.partner
    for i in ops:
        op, (ins, outs) = net.op[i], ssa_list[i]
        oid, bwd = f"o{i}", i >= n_forward
        reads: list[str] = []
        writes: list[str] = []
        if op.type in CONTROL_FLOW and subnets_of(op):
            for _, o in ssa_list[done:i]:
                cur.update(o)
            done = i
            reads, writes = outer_io(net, i, params, cur)
        # NOTE: the map zoom keeps the op number whole and clips the type (a bare 8-letter type
        # said neither which op it was nor told two Conv boxes apart)
        label = f"{op.type} #{i}" if zoom < 3 else f"{_clip_right(op.type, 10)} #{i}"
        style = (("optimizer" if roles[i] == "optimizer" else "backward") if bwd
                 else "control" if op.type in CONTROL_FLOW else category(op.type))
        # NOTE: only the detail zoom pads a label inside its borders (room for the pc and a run's mark); at ops
        # the marks take a border cell, as overview's take a label cell: three folded bands fit 160x48's pane
        meta[oid] = {"w": len(label) + (4 if zoom == 0 else 2 if op_h == 3 or zoom > 2 else 0), "h": op_h,
                     "kind": "op", "label": label, "op": i, "style": style}
        if op.type in CONTROL_FLOW and op_h == 3:  # NOTE: a line for what its run did (the canvas fills it)
            meta[oid].update(h=4, sub=CONTROL_NOTE, w=max(len(label), CONTROL_ROOM) + 4)
        if blobs:
            edges.extend((blob(b, v), oid) for b, v in dict.fromkeys(ins) if (b, v) not in folded)
            edges.extend((blob(b, cur.get(b, 0)), oid) for b in reads)
            edges.extend((oid, blob(b, v)) for b, v in outs)
            for b in writes:  # NOTE: later readers read what the subnet wrote, a node of its own
                v = cur.get(b, 0)
                redirect[b, v] = blob(b, v, after=i)
                edges.append((oid, redirect[b, v]))
        else:
            srcs = dict.fromkeys(last_writer[b] for b in [b for b, _ in ins] + reads if b in last_writer)
            edges.extend((s, oid) for s in srcs if s != oid)
            last_writer.update({b: oid for b, _ in outs})
            last_writer.update({b: oid for b in writes})
    # NOTE: a Sum joining a blob's gradients is not pinned: it ranks where the gradients join
    pairs = [(f"o{j}", f"o{i}") for i, j in partner.items() if ladder and j is not None and f"o{i}" in meta
             and f"o{j}" in meta and net.op[i].type != "Sum"]
    return ViewGraph(meta, edges, prefix, zoom, len(ops) > BIG_NET, pairs)


#: an If/While/Do/RecurrentNetwork box's second line before it ran, and the room kept for what it
#: says after (``else · cond=False``, ``12 iterations``)
CONTROL_NOTE, CONTROL_ROOM = "not run yet", 18


def outer_io(net, i: int, params: set[str] = frozenset(), versions: Mapping[str, int] | None = None
             ) -> tuple[list[str], list[str]]:
    """The outer blobs op `i`'s subnets read and write beyond its own inputs and outputs.

    Reads: names a subnet reads before writing them that the outer net has (its inputs, or a
    version written before op `i`: `versions`), less weights (`params`, and the weight slots of
    :data:`PARAM_OPS`).  Writes: what a subnet declares as output or writes that the outer net
    knows or reads after op `i`.  Caffe2's If/While run their subnets in the op's workspace,
    so these are the blobs the op really consumes and changes (Mask R-CNN's If reads ``xif3_6``,
    ``bbox_nms``, ``im_info`` and writes ``mask_fcn_probs``; none is its declared input).
    """
    op = net.op[i]
    read: dict[str, None] = {}
    wrote: dict[str, None] = {}
    declared: set[str] = set()

    def walk(sub, written: set[str]) -> None:
        declared.update(sub.external_output)
        for o in sub.op:
            weights = o.type in PARAM_OPS
            for k, b in enumerate(o.input):
                if b not in written and not (weights and k >= 1) and b not in params:
                    read.setdefault(b)
            for _, inner in subnets_of(o):
                walk(inner, set(written))
            for b in o.output:
                written.add(b)
                wrote.setdefault(b)

    for _, sub in subnets_of(op):
        walk(sub, set())
    known = set(net.external_input) | set(versions or ())
    later = {b for o in net.op[i + 1:] for b in o.input} | set(net.external_output)
    own_in, own_out = set(op.input), set(op.output)
    reads = [b for b in read if b in known and b not in own_in]
    writes = [b for b in wrote if (b in declared or b in known or b in later) and b not in own_out]
    return reads, writes


def dot_text(g: ViewGraph, direction: str = "TB") -> str:
    """DOT for a view graph flowing `direction`; node sizes are cells in points (see :class:`_Grid`)."""
    ranksep, nodesep = SPACING[direction][g.zoom]
    if g.pairs:  # NOTE: the ladder's edges cross between its columns: two free rows keep their jogs off the arrows
        ranksep = max(ranksep, 2)
    rank_pt, node_pt = (CH, CW) if direction == "TB" else (CW, CH)
    # NOTE: dot's network-simplex and crossing passes are superlinear; big nets get capped effort.
    effort = ", nslimit=1, mclimit=0.3, splines=line" if g.big else ""
    lines = ["digraph G {",
             f"graph [rankdir={direction}, nodesep={nodesep * node_pt / 72:.4f}, "
             f"ranksep={ranksep * rank_pt / 72:.4f}, margin=0, pad=0{effort}];",
             'node [shape=box, fixedsize=true, label=""];', "edge [arrowhead=none];"]
    lines.extend(f"{nid} [width={m['w'] * CW / 72:.4f}, height={m['h'] * CH / 72:.4f}];" for nid, m in g.meta.items())
    lines.extend(_ladder_edge(g.meta, a, b) if g.pairs else f"{a} -> {b};" for a, b in g.edges)
    lines.extend(f"{{rank=same; {f}; {b};}}" for f, b in g.pairs)
    lines.append("}")
    return "\n".join(lines)


_UPWARD = frozenset({"backward", "grad"})


def _ladder_edge(meta: dict[str, dict], a: str, b: str) -> str:
    """An edge of a backward view: gradient edges written reversed (``dir=back``) so they rank and run
    upward beside the forward ops; an edge between a forward and a gradient node does not rank them."""
    up_a, up_b = meta[a]["style"] in _UPWARD, meta[b]["style"] in _UPWARD
    if up_a and up_b:
        return f"{b} -> {a} [dir=back];"
    return f"{a} -> {b} [constraint=false];" if up_a != up_b else f"{a} -> {b};"


def build_dot(net, ssa_list, n_forward: int, ssa: bool, zoom: int, shapes: Mapping | None = None,
              params: set[str] = frozenset(), ops: range | None = None,
              direction: str = "TB") -> tuple[str, dict[str, dict], str]:
    """DOT text, node metadata and dropped name scope of a view (:func:`view_graph` + :func:`dot_text`)."""
    g = view_graph(net, ssa_list, n_forward, ssa, zoom, shapes, params, ops)
    return dot_text(g, direction), g.meta, g.prefix


def estimate_extents(g: ViewGraph) -> dict[str, tuple[int, int]]:
    """Direction → estimated (width, height) in cells of the laid-out view, without running ``dot``.

    Ranks are longest paths from the sources; a source (an input, a weight) sits one rank before
    its first reader, where ``dot``'s shortest-edge ranking puts it.  TB stacks the ranks
    downwards, each as wide as its nodes side by side; LR stacks them rightwards.
    """
    preds: dict[str, list[str]] = {}
    succs: dict[str, list[str]] = {}
    for a, b in g.edges:
        preds.setdefault(b, []).append(a)
        succs.setdefault(a, []).append(b)
    level: dict[str, int] = {}
    # NOTE: meta is in execution order, so every predecessor that has predecessors of its own
    # is ranked before its reader; sources not yet ranked count as rank 0 here.
    for nid in g.meta:
        level[nid] = 1 + max((level.get(p, 0) for p in preds.get(nid, ())), default=-1)
    for nid in g.meta:
        if nid not in preds and nid in succs:
            level[nid] = max(0, min(level[s] for s in succs[nid]) - 1)
    ranks: dict[int, list[dict]] = {}
    for nid, m in g.meta.items():
        ranks.setdefault(level[nid], []).append(m)
    # NOTE: an edge over several ranks takes a slot (a virtual node) in every rank it passes
    passing = [0] * (max(level.values(), default=0) + 2)
    for a, b in g.edges:
        if level[b] - level[a] > 1:
            passing[level[a] + 1] += 1
            passing[level[b]] -= 1
    passing = list(accumulate(passing))
    out = {}
    for d in DIRECTIONS:
        ranksep, nodesep = SPACING[d][g.zoom]
        along, across = ("h", "w") if d == "TB" else ("w", "h")
        depth = sum(max(m[along] for m in r) for r in ranks.values()) + ranksep * (len(ranks) - 1)
        breadth = max((sum(m[across] + nodesep for m in r) - nodesep + int(passing[k]) * (nodesep + 1)
                       for k, r in ranks.items()), default=0)
        out[d] = (breadth, depth) if d == "TB" else (depth, breadth)
    return {d: (w + 2, h + 2) for d, (w, h) in out.items()}


def choose_direction(extents: Mapping[str, tuple[int, int]], pane_w: int, pane_h: int) -> str:
    """The direction whose drawing uses a `pane_w`×`pane_h` pane best.

    When both fit whole, the one whose aspect is nearer the pane's; otherwise the one that shows
    more of the drawing at once (the share of its bounding box in view); TB unless LR shows a quarter more.
    """
    if pane_w <= 0 or pane_h <= 0 or not extents:
        return "TB"
    (tw, th), (lw, lh) = extents["TB"], extents["LR"]
    if min(tw, th, lw, lh) <= 0:  # NOTE: an empty subnet (Mask R-CNN's then_net) draws nothing: no aspect
        return "TB"
    if max(tw, lw) <= pane_w and max(th, lh) <= pane_h:
        aspect = math.log(pane_w / pane_h)
        return "LR" if abs(math.log(lw / lh) - aspect) < abs(math.log(tw / th) - aspect) - 0.1 else "TB"
    seen_tb = min(tw, pane_w) * min(th, pane_h) / (tw * th)
    seen_lr = min(lw, pane_w) * min(lh, pane_h) / (lw * lh)
    return "LR" if seen_lr > 1.25 * seen_tb else "TB"


#: blank cells between the bands of a wrapped drawing: columns between TB columns, rows between LR rows
WRAP_GAP = {"TB": 3, "LR": 2}


def wrap_bands(depth: int, pane_along: int) -> int:
    """How many bands a drawing `depth` cells deep (along its flow) is folded into when each band is
    at most a pane long (`pane_along`): about ``depth / pane_along`` (a cut falls between ranks).

    Every band is one pane long, never the depth shared out over the bands that fit across: a
    band longer than the pane showed its first ranks beside the first ranks of bands far down the
    net (ResNet-50's first frame: ops #0, #60 and #118 side by side)."""
    if pane_along <= 0 or depth <= pane_along:
        return 1
    return math.ceil(depth / pane_along)


def plan_view(extents: Mapping[str, tuple[int, int]], pane_w: int, pane_h: int,
              direction: str = "auto") -> tuple[str, int]:
    """(direction, band length) for a view of `extents` (:func:`estimate_extents`) in a pane.

    A drawing deeper than the pane is folded like a snake into bands one pane long
    (:func:`wrap_scene`): a TB one into columns side by side (scrolled sideways), an LR one into
    rows read like lines of text (scrolled down); either way the pane shows consecutive ops.  It
    is as folded that the two directions compete in :func:`choose_direction` (for ``"auto"``).
    The band length is 0 when the drawing is not folded.
    """
    if not extents:
        return ("TB" if direction == "auto" else direction), 0
    (tw, th), (lw, lh) = extents["TB"], extents["LR"]
    g_tb, g_lr = WRAP_GAP["TB"], WRAP_GAP["LR"]
    if direction == "auto":
        k, j = wrap_bands(th, pane_h), wrap_bands(lw, pane_w)
        wrapped = {"TB": (k * (tw + g_tb) - g_tb, min(th, pane_h)), "LR": (min(lw, pane_w), j * (lh + g_lr) - g_lr)}
        direction = choose_direction(wrapped, pane_w, pane_h)
    return direction, band_length(direction, extents[direction], pane_w, pane_h)


#: the default zoom shows at least this many op boxes around the cursor
MIN_VIEW_OPS = 6
#: cells across one folded band of a chain per zoom level (its widest boxes: a blob with its shape, a type)
_BAND_W = (20, 18, 16, 12)


def default_zoom(pane_w: int, pane_h: int) -> int:
    """The most detailed zoom at which a pane of `pane_w`×`pane_h` cells shows :data:`MIN_VIEW_OPS` ops
    of a chain folded into bands (estimated from box heights and spacing, no layout): a 160×48
    terminal keeps the detail zoom, an 80×24 one (its graph pane about 26×18) starts at overview."""
    if pane_w <= 0 or pane_h <= 0:
        return 0
    for z, (_, blobs, op_h) in enumerate(ZOOMS[:3]):
        gap = SPACING["TB"][z][0]
        rows = op_h + gap + ((2 + gap) if blobs else 0)
        bands = max(1, (pane_w + WRAP_GAP["TB"]) // (_BAND_W[z] + WRAP_GAP["TB"]))
        if (pane_h // rows) * bands >= MIN_VIEW_OPS:
            return z
    return 2


def band_length(direction: str, size: tuple[int, int], pane_w: int, pane_h: int) -> int:
    """The length of the bands a drawing of `size` (width, height) flowing `direction` is folded
    into in a pane: the pane's extent along the flow, or 0 when it fits unfolded."""
    depth, along = (size[1], pane_h) if direction == "TB" else (size[0], pane_w)
    return along if wrap_bands(depth, along) > 1 else 0


def bands_for(sc: Scene, pane_w: int, pane_h: int) -> int:
    """:func:`band_length` for a laid-out scene (its real size, not the estimate) in a pane."""
    return band_length(sc.direction, (sc.width, sc.height), pane_w, pane_h)


def fold_cuts(occupied: list[bool], band: int) -> list[int]:
    """Where to cut a drawing whose rows (along its flow) are `occupied` by boxes into bands at most
    `band` long: each cut is the last free row that keeps its band within the length (the first
    free row after, when a box is longer than a band).  Returns the band starts and the depth."""
    depth = len(occupied)
    free = [i for i, o in enumerate(occupied) if not o]
    cuts = [0]
    while depth - cuts[-1] > band:
        a = cuts[-1]
        after = bisect_right(free, a)        # the first free row past a
        fit = bisect_right(free, a + band)   # past the last free row within the band
        if fit > after:
            cuts.append(free[fit - 1])
        elif after < len(free):
            cuts.append(free[after])
        else:
            break
    cuts.append(depth)
    return cuts


def wrap_scene(sc: Scene, band: int) -> Scene:
    """A scene folded across its flow, at free rows (TB) or columns (LR), into bands at most `band`
    cells long, set side by side (TB: newspaper columns) or one under another (LR: lines of text);
    an edge leaving one band's end enters the next band's start.  `band` 0: the scene as it is.

    Plain Python over the scene's bytes (a first frame folds its cached scene without NumPy):
    a TB row of the result is the bands' rows side by side, an LR row a slice of a scene row."""
    if band <= 0 or not sc.nodes:
        return sc
    lr = sc.direction == "LR"
    width, height = sc.width, sc.height
    depth, breadth = (width, height) if lr else (height, width)
    if depth <= band:
        return sc
    occupied = [False] * depth
    for n in sc.nodes:
        a, k = (n.x, n.w) if lr else (n.y, n.h)
        occupied[a:a + k] = [True] * len(occupied[a:a + k])
    cuts = fold_cuts(occupied, band)
    starts = cuts[:-1]
    spans = list(zip(cuts, cuts[1:]))
    new_depth = max(b - a for a, b in spans)
    gap = WRAP_GAP[sc.direction]
    # NOTE: LR bands are rows one under another: one size keeps their columns lined up
    lows, sizes = _band_extents(sc, spans, same=lr)
    offsets = [0, *accumulate(k + gap for k in sizes[:-1])]
    size = sizes[0]
    step = size + gap
    new_breadth = offsets[-1] + sizes[-1]
    grid, back = bytearray(), bytearray()
    if lr:  # NOTE: band j's rows are the scene's rows lo..lo + size, columns a..b of each, one band under another
        for j, (a, b) in enumerate(spans):
            if j:
                grid += bytes(gap * new_depth)
                back += bytes(gap * new_depth)
            pad = bytes(new_depth - (b - a))
            for y in range(lows[j], lows[j] + size):
                grid += sc.grid[y * width + a:y * width + b] + pad
                back += sc.back[y * width + a:y * width + b] + pad
    else:  # NOTE: row r is row a + r of each band a..b (its columns lo..lo + size), side by side
        sep = bytes(gap)
        for r in range(new_depth):
            rows = [((a + r) * width + lo, k) if a + r < b else (None, k) for (a, b), lo, k in zip(spans, lows, sizes)]
            grid += sep.join(bytes(k) if y is None else sc.grid[y:y + k] for y, k in rows)
            back += sep.join(bytes(k) if y is None else sc.back[y:y + k] for y, k in rows)

    def band_of(along: int) -> int:
        return bisect_right(starts, along) - 1

    nodes = []
    for n in sc.nodes:
        j = band_of(n.x if lr else n.y)
        nodes.append(n.moved(n.x - cuts[j], n.y - lows[j] + j * step) if lr
                     else n.moved(n.x - lows[j] + offsets[j], n.y - cuts[j]))
    edges = []
    for e in sc.edges:
        cells = array("q")
        for c in e.cells:
            y, x = divmod(c, width)
            if lr:  # NOTE: x runs along the flow: band j's columns become row block j
                j = band_of(x)
                cells.append((y - lows[j] + j * step) * new_depth + x - starts[j])
            else:
                j = band_of(y)
                cells.append((y - starts[j]) * new_breadth + x - lows[j] + offsets[j])
        edges.append(SceneEdge(e.tail, e.head, cells))
    new_width, new_height = (new_depth, new_breadth) if lr else (new_breadth, new_depth)
    return Scene(new_width, new_height, nodes, grid, back, edges, sc.prefix, window=sc.window,
                 direction=sc.direction, extents=sc.extents, columns=len(starts), band=band,
                 offsets=tuple(offsets)).index()


def _band_extents(sc: Scene, spans: list[tuple[int, int]], same: bool = False) -> tuple[list[int], list[int]]:
    """(each band's first cell across its flow, each band's cells across): a band is cut to what it
    draws (its boxes and edges) plus a blank cell each side, not the whole drawing's breadth.  Each
    band keeps its own width: one wide band (ResNet-50's downsampling shortcut beside its chain)
    no longer widens every other (at 160x48, ops zoom: 34 cells, then 22 and 22, not 3 × 34).  `same`:
    every band as wide as the widest."""
    lr = sc.direction == "LR"
    breadth = sc.height if lr else sc.width
    lo = [breadth] * len(spans)
    hi = [0] * len(spans)
    starts = [a for a, _ in spans]
    for n in sc.nodes:
        j = bisect_right(starts, n.x if lr else n.y) - 1
        a, k = (n.y, n.h) if lr else (n.x, n.w)
        lo[j], hi[j] = min(lo[j], a), max(hi[j], a + k)
    for e in sc.edges:
        for c in e.cells:
            y, x = divmod(c, sc.width)
            along, a = (x, y) if lr else (y, x)
            j = bisect_right(starts, along) - 1
            lo[j], hi[j] = min(lo[j], a), max(hi[j], a + 1)
    sizes = [min(breadth, h - l + 2) if h > l else 1 for l, h in zip(lo, hi)]
    if same:
        sizes = [max(sizes)] * len(sizes)
    lows = [max(0, min(l - 1, breadth - k)) if h > l else 0 for l, h, k in zip(lo, hi, sizes)]
    return lows, sizes


def fold_scroll(sc: Scene, n: SceneNode, pane_w: int, pane_h: int, now: tuple[int, int],
                lazy: bool) -> tuple[int, int] | None:
    """Where to scroll a folded scene (:func:`wrap_scene`) so that node `n` and its whole band are in
    view; None when the scene is not folded or a band is wider than the pane.

    A node in the first half of its band shows its band at the pane's far side, with the end of
    the band before it; one in the second half at the near side, with the start of the next: the
    view shows consecutive ops around `n` and, as the pc walks along, moves only forwards.
    `lazy`: stay at `now` while the node is wholly in view (a box beside the view's bands, like a
    projection shortcut drawn beside an earlier op, does not pull the view back).
    """
    if sc.band <= 0 or sc.columns <= 1:
        return None
    lr = sc.direction == "LR"
    gap = WRAP_GAP[sc.direction]
    across, pane_across = (sc.height, pane_h) if lr else (sc.width, pane_w)
    offsets = sc.offsets or tuple(k * ((across + gap) // sc.columns) for k in range(sc.columns))
    pos, length = (n.y, n.h) if lr else (n.x, n.w)
    along, along_len, pane_along = (n.x, n.w, pane_w) if lr else (n.y, n.h, pane_h)
    j = bisect_right(offsets, pos) - 1
    start = offsets[j]
    size = (offsets[j + 1] - gap if j + 1 < len(offsets) else across) - start
    if size > pane_across:
        return None
    sx, sy = now
    cur, cur_along = (sy, sx) if lr else (sx, sy)
    in_across = cur <= pos and pos + length <= cur + pane_across
    in_along = cur_along <= along and along + along_len <= cur_along + pane_along
    if lazy and in_across and in_along:
        return now
    first_half = along + along_len / 2 < sc.band / 2
    target = start + size - pane_across if first_half else start
    target = max(0, min(target, across - pane_across))
    target_along = max(0, min(along + along_len // 2 - pane_along // 2, (sc.width if lr else sc.height) - pane_along))
    if in_along:
        target_along = cur_along
    return (target_along, target) if lr else (target, target_along)


class _Grid:
    """Graphviz points → cells: the one transform for node boxes and edge points."""

    def __init__(self, lay) -> None:
        self.x0 = min((n.x - n.width / 2 for n in lay.nodes.values()), default=0.0)
        self.y1 = max((n.y + n.height / 2 for n in lay.nodes.values()), default=0.0)

    def __call__(self, px: float, py: float) -> tuple[float, float]:
        return (px - self.x0) / CW + 1, (self.y1 - py) / CH + 1


@dataclass(frozen=True, slots=True)
class _Bits:
    """Mask bits as the router sees them: TB's own, or LR's on the transposed grid (down → right)."""

    up: int
    down: int
    left: int
    right: int
    arrow_fwd: int
    arrow_back: int


_FRAME = {"TB": _Bits(U, D, L, R, ARROW_DOWN, ARROW_UP), "LR": _Bits(L, R, U, D, ARROW_RIGHT, ARROW_LEFT)}


def build_scene(net, ssa_list, n_forward: int, ssa: bool, zoom: int, timeout: float = 30.0,
                shapes: Mapping | None = None, params: set[str] = frozenset(), ops: range | None = None,
                direction: str = "TB", pane: tuple[int, int] = (0, 0), ladder: bool = False) -> Scene:
    """Lay out a net (or the `ops` window of it) at a zoom level (see :data:`ZOOMS`) flowing
    `direction` ("TB", "LR", or "auto": :func:`choose_direction` for a `pane` of (width, height)
    cells); `ladder` (the backward pass shown): each gradient op on its forward op's rank, gradient
    edges upward, as :mod:`netviz.ladder` draws exports.  Blocks, call from a worker."""
    import numpy as np  # noqa: PLC0415 (a cached scene is drawn without NumPy)

    from netviz.layout import layout_dot  # NOTE: here, not at the top: pygraphviz is not needed for a first frame

    g = view_graph(net, ssa_list, n_forward, ssa, zoom, shapes, params, ops, ladder)
    extents = estimate_extents(g)
    if direction not in DIRECTIONS:
        direction = plan_view(extents, *pane)[0]
    meta = g.meta
    lay = layout_dot(dot_text(g, direction), timeout)
    grid = _Grid(lay)
    nodes: list[SceneNode] = []
    ids: dict[str, int] = {}
    for nid, box in lay.nodes.items():
        m = meta[nid]
        cx, cy = grid(box.x, box.y)
        nodes.append(SceneNode(m["kind"], m["label"], _cell(cx - m["w"] / 2 + 0.5), _cell(cy - m["h"] / 2 + 0.5), m["w"],
                               m["h"], m["style"], m.get("op"), m.get("blob"), m.get("sub", ""),
                               version=m.get("version")))
        ids[nid] = len(nodes) - 1
    width = max((n.x + n.w for n in nodes), default=0) + 2
    height = max((n.y + n.h for n in nodes), default=0) + 2
    mask = np.zeros((height, width), np.uint8)
    bwd = np.zeros((height, width), np.bool_)
    # NOTE: LR is routed as TB on the transposed grid: frame rows are columns, nodes are mirrored.
    lr = direction == "LR"
    frame = mask.T if lr else mask
    framed = [SceneNode(n.kind, n.label, n.y, n.x, n.h, n.w, n.style) for n in nodes] if lr else nodes
    occupied = np.zeros(frame.shape[0], np.bool_)
    for n in framed:
        occupied[n.y:n.y + n.h] = True
    edges: list[SceneEdge] = []
    arrows = SPACING[direction][zoom][0] >= 2 or zoom < 3
    for e in lay.edges:
        t, h = ids.get(e.tail), ids.get(e.head)
        if t is None or h is None or t == h:
            continue
        pts = np.array([grid(*p) for p in _sample(e.points)]) if e.points else np.zeros((0, 2))
        if lr and len(pts):
            pts = pts[:, ::-1]
        up = ("dir", "back") in e.attrs  # NOTE: an upward gradient edge: routed down from its head, ▲ at the head
        rc = _route(frame, occupied, framed[t], framed[h], pts, arrows and not up, _FRAME[direction])
        if up and len(rc) and arrows:
            y, x = rc[-1]
            frame[y, x] |= _FRAME[direction].arrow_back
        cells = np.unique(rc[:, 1] * width + rc[:, 0] if lr else rc[:, 0] * width + rc[:, 1])
        if cells.size:
            bwd.flat[cells] |= "backward" in (nodes[t].style, nodes[h].style)
            edges.append(SceneEdge(t, h, array("q", cells.tolist())))
    window = None if ops is None or len(ops) == len(net.op) else ops
    return Scene(width, height, nodes, bytearray(mask.tobytes()), bytearray(bwd.view(np.uint8).tobytes()),
                 edges, g.prefix, window=window, direction=direction, extents=extents).index()


def _cell(v: float) -> int:
    """The cell holding coordinate `v` (cell c spans [c, c + 1))."""
    return math.floor(v)


def _sample(points: tuple[tuple[float, float], ...], steps: int = 6) -> list[tuple[float, float]]:
    """Points along graphviz's cubic B-spline (``1 + 3n`` control points)."""
    import numpy as np  # noqa: PLC0415 (layout only: a cached scene is drawn without NumPy)

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
           arrows: bool, bits: _Bits = _FRAME["TB"]) -> np.ndarray:
    """Draw one edge tail → head down the rows of `mask` (a TB grid, or an LR grid transposed,
    with `bits` naming the directions); returns its cells as (row, column) pairs of `mask`."""
    import numpy as np  # noqa: PLC0415

    height, width = mask.shape
    cells: list[tuple[int, int]] = []

    def clamp(x: float, n: SceneNode) -> int:
        lo, hi = (n.x + 1, n.x + n.w - 2) if n.w >= 3 else (n.x, n.x + n.w - 1)
        return int(min(max(_cell(x), lo), hi))

    def vline(x: int, y0: int, y1: int) -> None:
        if y0 == y1:
            return
        a, b = min(y0, y1), max(y0, y1)
        mask[a, x] |= bits.down
        mask[a + 1:b, x] |= bits.up | bits.down
        mask[b, x] |= bits.up
        cells.extend((y, x) for y in range(a, b + 1))

    def hline(y: int, x0: int, x1: int) -> None:
        if x0 == x1:
            return
        a, b = min(x0, x1), max(x0, x1)
        mask[y, a] |= bits.right
        mask[y, a + 1:b] |= bits.left | bits.right
        mask[y, b] |= bits.left
        cells.extend((y, x) for x in range(a, b + 1))

    if h.y < t.y + t.h + 1:  # not below the tail (only for a cycle dot had to turn round)
        y = min(t.y + t.h, height - 1)
        x0, x1 = t.center[0], h.center[0]
        hline(y, x0, x1)
        mask[y, x1] |= bits.arrow_back
        return np.array(cells, dtype=np.int64).reshape(-1, 2)
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
    mask[y0, sx] |= bits.up
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
    mask[y_end, x] |= bits.arrow_fwd if arrows else bits.down
    cells.append((y_end, x))
    cells.append((y0, sx))
    return np.array(cells, dtype=np.int64).reshape(-1, 2)
