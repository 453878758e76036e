"""The folded ladder: a drawing cut into pieces that ``dot`` lays out one by one, placed by netviz.

Why: one ``dot`` run over a whole net grows faster than the net (ResNet-50 with its backward pass,
1,100+ nodes, ran past a minute), and a backward pass drawn by ``dot`` as it likes is a scatter.
Here each piece is a run of consecutive forward ops (cut where fewest blobs cross, e.g. between
residual blocks) with everything that hangs on them:

- the forward ops top-down (column 1), their gradient ops bottom-up beside them (column 2), each
  on the rank of the forward op it differentiates (``rank=same``), gradient edges written reversed
  (``dir=back``) so they rank and point upward; a ``Sum`` joining a blob's gradients ranks between
  the gradient ops it joins;
- optimizer ops in a third column, each on the rank of the gradient op whose output it reads.

Every piece is a small ``dot`` graph (all pieces go through at most :data:`JOBS` ``dot`` processes at
once); netviz then places the pieces side by side in rows, like pages of a book (:func:`place`).  An
SVG is composed from the pieces' own SVGs (:mod:`netviz.ladder_svg`); PNG and PDF go through one DOT
file with every position pinned (:func:`compose`), which ``neato -n2`` renders as it is.  Edges
between pieces are drawn straight.  The legend (:func:`netviz.style.legend_html`) is the
graph's label.

Near 550 lines with a reason: cutting a drawing, writing each piece and placing the pieces read and
write the same piece conventions (cluster names per column, ``e<i>`` edge ids, json0 coordinates).
"""
from __future__ import annotations

import json
import math
import re
from functools import lru_cache, reduce
from operator import add
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from netviz import style as S
from netviz.drawing import DrawEdge, Drawing, DrawNode, Index, index

__all__ = ["anchors", "cut_points", "joining_ops", "rank_pairs", "Pieces", "split", "piece_dot", "piece_dots", "compose",
           "Placement", "place", "Index", "index", "straight_points", "column_role", "column_shifts", "Box",
           "iter_piece_dots", "run_pieces", "read_json0", "dot_quote", "forget_styles", "JOBS",
           "PIECE_NODES"]

#: ``dot`` processes run at once (the pieces are shared out among them)
JOBS = 2
#: a piece holds about this many nodes at most: what ``dot`` lays out in ~0.05 s (its cost grows faster than a piece)
PIECE_NODES = 130
#: points between pieces side by side, and between rows of pieces
GAP_X, GAP_Y = 60.0, 90.0
#: the folded picture aims at this width:height ratio (a screen)
RATIO = 1.5
ROLE_ORDER = ("forward", "gradient", "optimizer")
#: the blob names on an ops-only drawing's edges: the nodes' font, smaller
EDGE_DEFAULTS = {"fontname": S.NODE_DEFAULTS["fontname"], "fontsize": "8"}


def dot_quote(text: str) -> str:
    """`text` as a DOT double-quoted string (a model name may hold ``"`` or ``\\``; newlines break lines)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _attrs(a: dict[str, str]) -> str:
    return ", ".join(f"{k}={v if v.startswith('<') else dot_quote(v)}" for k, v in a.items())


@lru_cache(maxsize=None)
def _style_text(st: S.Style) -> str:
    """A style's DOT attributes, written once per style (a 10k-op drawing writes ~100k attribute lists).

    Emptied after each export (:func:`forget_styles`): an ops-only drawing gives every edge a style of
    its own (its label), so a cache kept for the session held two per op of every net exported (20,007
    after one 10k-op chain).
    """
    return _attrs(st.attrs())


def forget_styles() -> None:
    """Empty the styles' DOT text cache (:func:`_style_text`) once a drawing is written."""
    _style_text.cache_clear()


def _next_ops(nodes: list[DrawNode], i: int, step: dict[int, list[int]]) -> Iterator[int]:
    """The ops one step from node `i` along `step` (through a blob, or straight to an op)."""
    for m in step.get(i, ()):
        yield from (step.get(m, ()) if nodes[m].kind == "blob" else (m,))


def _anchors(d: Drawing, ix: Index) -> list[int]:
    """:func:`anchors` by node number."""
    nodes = ix.nodes
    link: dict[int, int] = {}
    succ: dict[int, list[int]] = {}
    pred: dict[int, list[int]] = {}
    writer: dict[int, int] = {}
    for e, s, t in zip(d.edges, ix.src, ix.dst):
        if e.kind == "forward_link":
            link[s] = t
        elif e.kind == "data":
            succ.setdefault(s, []).append(t)
            pred.setdefault(t, []).append(s)
            if nodes[s].kind == "op":
                writer[t] = s
    a: list[int | None] = [None] * len(nodes)
    ops = [i for i, n in enumerate(nodes) if n.kind == "op" and not n.path]
    for i in ops:
        n = nodes[i]
        if n.role == "forward" and n.op_index is not None:
            a[i] = n.op_index
    for i in ops:
        if i in link and a[link[i]] is not None:
            a[i] = a[link[i]]
    last = 0
    for i in reversed(ops):  # NOTE: a Sum comes before the gradient op reading it: walk back to meet it first
        if a[i] is None and nodes[i].role == "gradient":
            found = [v for m in _next_ops(nodes, i, succ) if (v := a[m]) is not None]
            a[i] = max(found) if found else max((v for m in _next_ops(nodes, i, pred) if (v := a[m]) is not None),
                                                default=-1)
    for i in ops:
        v = a[i]
        if v is None or v < 0:
            found = [w for m in _next_ops(nodes, i, pred) if (w := a[m]) is not None and w >= 0]
            a[i] = v = max(found) if found else last
        last = v
    tops = {nodes[i].op_index: i for i in ops}
    for i, n in enumerate(nodes):
        if a[i] is not None:
            continue
        if n.path:
            top = tops.get(n.path[0][0])
            a[i] = (a[top] if top is not None else None) or 0
        elif i in writer and a[writer[i]] is not None:
            a[i] = a[writer[i]]
        else:
            a[i] = min((v for m in succ.get(i, ()) if (v := a[m]) is not None), default=0)
    for i, n in enumerate(nodes):  # NOTE: a subnet's blobs were skipped above when their op came later
        if n.kind == "blob" and n.path and i in writer:
            a[i] = a[writer[i]]
    return a  # type: ignore[return-value]  # NOTE: every entry is set by now


def anchors(d: Drawing) -> dict[str, int]:
    """Node id → the top-level forward op it hangs on (the ladder rung it belongs to).

    A forward op is its own rung; a gradient op is its forward op's (the dashed ``forward_link``);
    a gradient op without one (a ``Sum``, a seed) takes the rung of the op reading its output, else of
    the op writing its input; an optimizer op the rung of the gradient op whose output it reads; a
    blob its writer's (an input: its first reader's); a subnet's nodes their op's.
    """
    return dict(zip(d.nodes, _anchors(d, index(d))))


def cut_points(d: Drawing, a: dict[str, int], pieces: int) -> list[int]:
    """The first forward op of each piece after the first: `pieces` runs of about equal length, each cut
    moved (within a quarter run) to where the fewest forward blobs are live across it (`a`: :func:`anchors`)."""
    ix = index(d)
    return _cut_points(d, ix, [a[nid] for nid in ix.ids], pieces)


def _cut_points(d: Drawing, ix: Index, a: list[int], pieces: int) -> list[int]:
    """:func:`cut_points` by node number."""
    nodes = ix.nodes
    fwd = sorted({a[i] for i, n in enumerate(nodes) if n.role == "forward" and n.kind == "op"})
    n = len(fwd)
    if pieces <= 1 or n < 2:
        return []
    live = [0] * (n + 1)
    reach: dict[int, int] = {}
    for e, s, t in zip(d.edges, ix.src, ix.dst):
        if e.kind == "data" and nodes[s].role == "forward" and nodes[t].role == "forward":
            reach[s] = max(reach.get(s, a[s]), a[t])
    for i, far in reach.items():
        lo, hi = bisect_right(fwd, a[i]), bisect_right(fwd, far)
        if hi > lo:
            live[lo] += 1
            live[hi] -= 1
    acc = 0
    for k in range(n + 1):
        acc += live[k]
        live[k] = acc
    run, cuts = n / pieces, []
    for p in range(1, pieces):
        ideal = round(p * run)
        lo, hi = max(1, ideal - int(run / 4)), min(n - 1, ideal + int(run / 4))
        best = min(range(lo, hi + 1), key=lambda k: (live[k], abs(k - ideal)), default=ideal)
        if not cuts or fwd[best] > cuts[-1]:
            cuts.append(fwd[best])
    return cuts


@dataclass(frozen=True, slots=True)
class Pieces:
    """Each node's piece number (by node number in `index`), and the number of pieces."""

    piece: list[int]
    count: int
    index: Index

    @property
    def of(self) -> dict[str, int]:
        """Node id → piece number (made when asked for: the export's stages use :attr:`piece`)."""
        return dict(zip(self.index.ids, self.piece))


def split(d: Drawing, pieces: int | None = None, ix: Index | None = None) -> Pieces:
    """Cut `d` into pieces (their number from its size when `pieces` is None: see :data:`PIECE_NODES`);
    `ix` is `d`'s :class:`Index` when the caller has it (:func:`netviz.drawing.ops_only_indexed`)."""
    ix = index(d) if ix is None else ix
    a = _anchors(d, ix)
    n_fwd = len({a[i] for i, n in enumerate(ix.nodes) if n.kind == "op" and n.role == "forward"})
    if pieces is None:
        pieces = max(1, min(max(n_fwd, 1), math.ceil(len(d.nodes) / PIECE_NODES)))
    cuts = _cut_points(d, ix, a, pieces)
    return Pieces([bisect_right(cuts, v) for v in a], len(cuts) + 1, ix)


def _writers(d: Drawing, ix: Index) -> dict[int, int]:
    """Blob → the op (or node) writing it, by node number."""
    nodes = ix.nodes
    return {t: s for e, s, t in zip(d.edges, ix.src, ix.dst) if e.kind == "data" and nodes[t].kind == "blob"}


def _joining_ops(d: Drawing, ix: Index, writer: dict[int, int]) -> list[int]:
    """:func:`joining_ops` by node number."""
    link = {s: t for e, s, t in zip(d.edges, ix.src, ix.dst) if e.kind == "forward_link"}
    out: dict[int, None] = {}  # NOTE: a dict, not a list: `in` on a list made this quadratic in the joins
    for e, s, t in zip(d.edges, ix.src, ix.dst):
        w = writer.get(s, s)
        if e.kind == "data" and t in link and w in link and w != t and link[w] == link[t]:
            out[t] = None
    return list(out)


def joining_ops(d: Drawing) -> list[str]:
    """Gradient ops that read what another gradient op of the same forward op wrote: the ``Sum`` joining a
    multi-use blob's gradients.  They are not pinned to the forward op's rank (its gradient op is) but
    rank just above it, where the gradients join."""
    ix = index(d)
    return [ix.ids[i] for i in _joining_ops(d, ix, _writers(d, ix))]


def _rank_pairs(d: Drawing, ix: Index) -> list[tuple[int, int]]:
    """:func:`rank_pairs` by node number."""
    nodes, writer = ix.nodes, _writers(d, ix)
    joins = set(_joining_ops(d, ix, writer))
    pairs = [(t, s) for e, s, t in zip(d.edges, ix.src, ix.dst) if e.kind == "forward_link" and s not in joins]
    seen: set[int] = set()
    for e, b, o in zip(d.edges, ix.src, ix.dst):
        on = nodes[o]
        if e.kind == "data" and on.role == "optimizer" and not on.path and o not in seen \
                and nodes[b].role == "gradient":
            w = writer.get(b, b)
            if nodes[w].kind == "op":
                pairs.append((w, o))
                seen.add(o)
    return pairs


def rank_pairs(d: Drawing) -> list[tuple[str, str]]:
    """(forward op, gradient op) and (gradient op, optimizer op) pairs that share a rank (joins excepted)."""
    ix = index(d)
    return [(ix.ids[f], ix.ids[g]) for f, g in _rank_pairs(d, ix)]


def _edge_attrs(e: DrawEdge, s: int, t: int, rs: str, rt: str, ladder: bool) -> tuple[int, int, dict[str, str]]:
    """How an edge (ends `s`, `t` by number, their roles `rs`, `rt`) is written in a piece: (tail, head, attrs);
    gradient edges reversed with ``dir=back``."""
    attrs = e.style.attrs()
    if e.kind == "data" and ladder and rs == rt == "gradient":
        return t, s, attrs | {"dir": "back"}
    if e.kind == "data" and ladder and rs != rt:
        attrs["constraint"] = "false"
    return s, t, attrs


def piece_dot(d: Drawing, ix: Index, members: Sequence[int], k: int, edges: Sequence[int],
              pairs: Sequence[tuple[int, int]]) -> str:
    """The DOT of piece `k` (its nodes `members` and `edges` by number in `ix`, in the drawing's order):
    columns by role as clusters, drawing clusters (subnets, scopes) inside them, the ladder's rank `pairs`.
    Each node's ``id`` is its number (``n<i>``: an SVG reader finds the node by it, not by its escaped title),
    each edge's its index in ``d.edges`` (``e<i>``)."""
    nodes, ids = ix.nodes, ix.ids
    roles = {n.role for m in members if (n := nodes[m]).kind == "op"}
    ladder = len(roles) > 1
    tree: dict[tuple[str, str | None], list[int]] = {}
    kids: dict[tuple[str, str | None], list[str]] = {}
    for m in members:  # NOTE: members is in the drawing's order, so each run's dot is stable
        n = nodes[m]
        tree.setdefault((n.role, n.cluster), []).append(m)
        c = n.cluster
        while c is not None and c in d.clusters:
            parent = d.clusters[c].parent
            kids.setdefault((n.role, parent), [])
            if c not in kids[(n.role, parent)]:
                kids[(n.role, parent)].append(c)
            c = parent
    out = [f"digraph {dot_quote(f'p{k}')} {{",
           f"graph [{_attrs(S.GRAPH_ATTRS | {'rankdir': 'TB', 'compound': 'true', 'nodesep': '0.3'})}];",
           f"node [{_attrs(S.NODE_DEFAULTS)}];", f"edge [{_attrs(EDGE_DEFAULTS)}];"]

    for role in ROLE_ORDER:
        if (role, None) not in tree and (role, None) not in kids:
            continue
        if ladder:
            out.append(f"subgraph {dot_quote(f'cluster_{k}_{role}')} {{")
            out.append(f"graph [{_attrs(COLUMN_STYLE | {'label': COLUMN_LABEL[role]})}];")
        _emit_tree(d, ix, tree, kids, k, role, None, " ", out)
        if ladder:
            out.append("}")
    for f, g in pairs if ladder else ():
        out.append(f"{{rank=same; {dot_quote(ids[f])}; {dot_quote(ids[g])};}}")
    src, dst = ix.src, ix.dst
    for i in edges:
        e = d.edges[i]
        s, t = src[i], dst[i]
        tail, head, attrs = _edge_attrs(e, s, t, nodes[s].role, nodes[t].role, ladder)
        if e.kind == "subnet" and "lhead" in attrs:
            attrs.pop("lhead")
        out.append(f"{dot_quote(ids[tail])} -> {dot_quote(ids[head])} [{_attrs(attrs | {'id': f'e{i}'})}];")
    out.append("}")
    return "\n".join(out)


def _emit_tree(d: Drawing, ix: Index, tree: dict[tuple[str, str | None], list[int]],
               kids: dict[tuple[str, str | None], list[str]], k: int, role: str, cid: str | None, indent: str,
               out: list[str]) -> None:
    """The lines of cluster `cid` of column `role` in piece `k`: its sub-clusters, nested, then its nodes
    (with ``id="n<i>"``, their number in `ix`).

    A module function, not a closure in :func:`piece_dot`: a closure that calls itself is a reference
    cycle holding the whole drawing, which then lived on after an export until the garbage collector ran.
    """
    for c in kids.get((role, cid), []):
        cl = d.clusters[c]
        out.append(f"{indent}subgraph {dot_quote(f'cluster_{k}_{role}_{c}')} {{")
        out.append(f"{indent}graph [{_attrs({'label': cl.label} | S.cluster_style(cl.kind).attrs())}];")
        _emit_tree(d, ix, tree, kids, k, role, c, indent + " ", out)
        out.append(f"{indent}}}")
    nodes, ids = ix.nodes, ix.ids
    for m in tree.get((role, cid), []):
        n = nodes[m]
        out.append(f'{indent}{dot_quote(ids[m])} [label={dot_quote(n.label)}, {_style_text(n.style)}, id="n{m}"];')


COLUMN_STYLE = {"style": "dashed,rounded", "color": "#DADCE0", "fontcolor": "#80868B", "fontsize": "9"}
COLUMN_LABEL = {"forward": "forward", "gradient": "gradient (upward)", "optimizer": "optimizer"}


def piece_dots(d: Drawing, p: Pieces) -> list[str]:
    """One DOT graph per piece; edges whose ends are in two pieces are left to :func:`compose`."""
    return list(iter_piece_dots(d, p))


def iter_piece_dots(d: Drawing, p: Pieces) -> Iterator[str]:
    """:func:`piece_dots` one at a time, each made when asked for (``dot`` lays out one while the next is written)."""
    ix, piece = p.index, p.piece
    members: list[list[int]] = [[] for _ in range(p.count)]
    for i, k in enumerate(piece):
        members[k].append(i)
    edges: list[list[int]] = [[] for _ in range(p.count)]
    for i, (s, t) in enumerate(zip(ix.src, ix.dst)):
        if (k := piece[s]) == piece[t]:
            edges[k].append(i)
    pairs: list[list[tuple[int, int]]] = [[] for _ in range(p.count)]
    for f, g in _rank_pairs(d, ix):
        if (k := piece[f]) == piece[g]:
            pairs[k].append((f, g))
    for k, m in enumerate(members):
        yield piece_dot(d, ix, m, k, edges[k], pairs[k])


def read_json0(text: bytes) -> list[dict]:
    """The json0 outputs of one ``dot`` run over several graphs, in order."""
    dec, s, out, i = json.JSONDecoder(), text.decode(), [], 0
    while True:
        while i < len(s) and s[i].isspace():
            i += 1
        if i >= len(s):
            return out
        obj, i = dec.raw_decode(s, i)
        out.append(obj)


_PAIR = re.compile(r"(-?[\d.]+(?:e-?\d+)?),(-?[\d.]+(?:e-?\d+)?)")
#: points between a piece's columns once netviz has put them in order
COLUMN_GAP = 24.0


def _shift(text: str, dx: float, dy: float) -> str:
    """Every ``x,y`` in `text` moved by (dx, dy)."""
    return _PAIR.sub(lambda m: f"{float(m.group(1)) + dx:.1f},{float(m.group(2)) + dy:.1f}", text)


def _reverse_pos(pos: str) -> str:
    """A spline written reversed (``dir=back``, arrow at its start ``s,``) as the true edge (``e,``)."""
    parts = pos.split()
    tip = [p for p in parts if p.startswith("s,")]
    pts = [p for p in parts if not p.startswith(("s,", "e,"))]
    return " ".join(["e," + tip[0][2:]] if tip else []) + (" " if tip else "") + " ".join(reversed(pts))


def column_role(name: str) -> str | None:
    """The role of a piece's cluster: ``cluster_<k>_<role>`` (a column) or ``cluster_<k>_<role>_<id>`` (inside one)."""
    parts = name.split("_", 3)
    return parts[2] if len(parts) >= 3 and parts[0] == "cluster" and parts[2] in ROLE_ORDER else None


def column_shifts(g: dict) -> dict[str, float]:
    """Role → x shift that puts a piece's columns in :data:`ROLE_ORDER`, left to right (``dot`` orders
    clusters as it likes); empty for a piece of one column."""
    boxes: dict[str, tuple[float, float]] = {}
    for o in g.get("objects", []):
        name = o.get("name", "")
        if "bb" in o and name.count("_") == 2 and column_role(name):
            x0, _, x1, _ = (float(v) for v in o["bb"].split(","))
            boxes[name.rsplit("_", 1)[1]] = (x0, x1)
    if len(boxes) < 2:
        return {}
    x, out = min(x0 for x0, _ in boxes.values()), {}
    for role in ROLE_ORDER:
        if role in boxes:
            out[role] = x - boxes[role][0]
            x += boxes[role][1] - boxes[role][0] + COLUMN_GAP
    return out


def _size(g: dict, shifts: dict[str, float]) -> tuple[float, float]:
    """A piece's width and height once its columns are in order."""
    x0, y0, x1, y1 = (float(v) for v in g.get("bb", "0,0,0,0").split(","))
    for o in g.get("objects", []):
        name = o.get("name", "")
        if shifts and "bb" in o and name.count("_") == 2 and column_role(name):
            x1 = max(x1, float(o["bb"].split(",")[2]) + shifts[name.rsplit("_", 1)[1]])
    return x1 - x0, y1 - y0


def _grid(sizes: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Top-left corners (y down) of pieces in rows: the number per row that brings the whole nearest :data:`RATIO`.

    Each candidate row length is scored from its rows' sums and maxima (taken over slices, in C) and only
    the best one's corners are built: building every candidate's corners was O(pieces²) (155 pieces of a
    10k-op chain: ~50 candidates × 155 corners, 3.7 ms against 0.1 ms at 1k)."""
    if not sizes:
        return []
    steps = [w + GAP_X for w, _ in sizes]  # NOTE: added one by one, as the corners are: the same floats
    heights = [h for _, h in sizes]
    best: tuple[float, int] | None = None
    for per_row in range(1, len(sizes) + 1):
        width, y, row_h = 0.0, 0.0, 0.0
        for start in range(0, len(sizes), per_row):
            if start:
                y = y + row_h + GAP_Y
            width = max(width, reduce(add, steps[start:start + per_row], 0.0) - GAP_X)
            row_h = max(max(heights[start:start + per_row]), 0.0)  # NOTE: a row starts at 0.0, as in the corners
        score = abs(math.log(max(width, 1.0) / max(y + row_h, 1.0) / RATIO))
        if best is None or score < best[0]:
            best = (score, per_row)
        if width > RATIO * (y + row_h) * 2:
            break
    per_row = best[1] if best else 1
    corners, x, y, row_h = [], 0.0, 0.0, 0.0
    for k, (w, h) in enumerate(sizes):
        if k and k % per_row == 0:
            x, y, row_h = 0.0, y + row_h + GAP_Y, 0.0
        corners.append((x, y))
        x += w + GAP_X
        row_h = max(row_h, h)
    return corners


Box = tuple[float, float, float, float]  # centre x, centre y, width, height (points)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where :func:`place` put the pieces: each piece's move ``(dx, dy, column shifts)`` in graphviz
    points (y up), the whole's size, every node's box by its number in `index` (None: not drawn), and the
    edges drawn straight (between pieces, or between a piece's columns once they moved apart), by index
    in ``d.edges``."""

    moves: list[tuple[float, float, dict[str, float]]]
    width: float
    height: float
    pos: list[Box | None]
    straight: list[int]
    index: Index

    def box(self, nid: str) -> Box | None:
        """Node `nid`'s box (a look-up by name: for a few nodes, not a walk of the drawing)."""
        return self.pos[self.index.ids.index(nid)]


def place(d: Drawing, p: Pieces, layouts: list[dict]) -> Placement:
    """The pieces' json0 layouts placed by :func:`_grid`, the columns of each in :data:`ROLE_ORDER`."""
    for g in layouts:
        _reach_edge_names(g, p.index)
    shifts = [column_shifts(g) for g in layouts]
    sizes = [_size(g, s) for g, s in zip(layouts, shifts)]
    corners = _grid(sizes)
    total_h = max((c[1] + s[1] for c, s in zip(corners, sizes)), default=0.0)
    total_w = max((c[0] + s[0] for c, s in zip(corners, sizes)), default=0.0)
    ix = p.index
    moves, pos = [], [None] * len(ix.ids)
    for k, g in enumerate(layouts):
        # NOTE: graphviz's y runs up: a piece's top-left (x, y down) moves its points by (x, H - y - h)
        x0, y0 = (float(v) for v in g.get("bb", "0,0").split(",")[:2])
        moves.append((corners[k][0] - x0, total_h - corners[k][1] - sizes[k][1] - y0, shifts[k]))
        _boxes(ix, g, *moves[k], pos)
    straight, piece, nodes = [], p.piece, ix.nodes
    for i, (s, t) in enumerate(zip(ix.src, ix.dst)):
        k = piece[s]
        if k == piece[t] and (not moves[k][2] or nodes[s].role == nodes[t].role):
            continue  # NOTE: inside a piece whose columns kept their places: dot drew it
        if pos[s] is not None and pos[t] is not None:
            straight.append(i)
    return Placement(moves, total_w, total_h, pos, straight, ix)


def _reach_edge_names(g: dict, ix: Index) -> None:
    """Widen each column box of a json0 layout to its edges' names (``xlp``, centred; 0.6 em a character):
    an ops-only edge's name lies beside it, outside the box, and the column shifts stacked the boxes alone,
    so the forward column's names fell left of the drawing (as :func:`netviz.ladder_svg.read_piece` does for
    an SVG piece)."""
    left: dict[str, float] = {}
    for e in g.get("edges", ()):
        if "xlp" in e and "xlabel" in e:
            role = ix.nodes[ix.src[int(e["id"][1:])]].role
            x = text_left(float(e["xlp"].split(",")[0]), float(e.get("fontsize", 14)), e["xlabel"])
            left[role] = min(left.get(role, x), x)
    reach_left(g.get("objects", ()), left)


def text_left(x: float, fontsize: float, text: str) -> float:
    """The left end of `text` drawn centred on `x` at `fontsize` points: 0.6 em a character (graphviz's
    own width estimate is not in its output)."""
    return x - 0.3 * fontsize * len(text)


def reach_left(objects: Iterable[dict], left: dict[str, float]) -> None:
    """Move the left side of each column box (an object with a ``bb``, named ``cluster_<k>_<role>``) out to
    ``left[role]``, the leftmost edge name of its column, where that lies left of it (the SVG path:
    :func:`netviz.ladder_svg.read_piece`; the json0 one: :func:`_reach_edge_names`)."""
    for o in objects:
        name = o.get("name", "")
        if left and "bb" in o and name.count("_") == 2 and (role := column_role(name)) in left:
            x0, rest = o["bb"].split(",", 1)
            if left[role] < float(x0):
                o["bb"] = f"{left[role]},{rest}"


def _json0_number(obj: dict) -> int | None:
    """The node number in the :class:`Index` of a piece's json0 node object: its ``id``, ``n<i>``
    (:func:`piece_dot`), None for anything else.

    Why not its name: graphviz keeps a quoted string's ``\\\\`` as two backslashes, so json0 names a node
    called ``a\\b`` (or one holding a newline) ``a\\\\b``, which no look-up by name finds again: that node got
    no position and ``neato -n2`` refused the whole PNG or PDF."""
    i = obj.get("id", "")
    return int(i[1:]) if i[:1] == "n" and i[1:].isdigit() and "pos" in obj else None


def _boxes(ix: Index, g: dict, dx: float, dy: float, cs: dict[str, float], pos: list[Box | None]) -> None:
    """Each node box of one piece's json0, moved by (dx, dy) and its column's shift, into `pos` (by node
    number: a node read back from an SVG carries it, a json0 one its ``id``, :func:`_json0_number`)."""
    for obj in g.get("objects", []):
        xy = obj.get("xy")
        if xy is not None:  # NOTE: a node read back from a piece's SVG (ladder_svg.read_piece): nothing to parse
            pos[obj["at"]] = (xy[0] + dx + cs.get(obj["role"], 0.0), xy[1] + dy, obj["width"] * 72, obj["height"] * 72)
            continue
        i = _json0_number(obj)
        if i is None:
            continue
        x, y = (float(v) for v in obj["pos"].split(",")[:2])
        pos[i] = (x + dx + cs.get(ix.nodes[i].role, 0.0), y + dy, float(obj["width"]) * 72, float(obj["height"]) * 72)


def compose(d: Drawing, p: Pieces, layouts: list[dict], title: str = "") -> str:
    """One DOT graph of `d` with every node, edge and cluster where :func:`place` put it; edges between
    pieces or columns are straight.  ``neato -n2`` renders it as it is (PNG, PDF)."""
    placed = place(d, p, layouts)
    node_lines: list[str] = []
    edge_lines: list[str] = []
    for k, g in enumerate(layouts):
        dx, dy, cs = placed.moves[k]
        _emit_objects(p.index, g, dx, dy, cs, placed.pos, node_lines)
        for e in g.get("edges", []):
            de = d.edges[int(e["id"][1:])]
            rs, rt = d.nodes[de.source].role, d.nodes[de.target].role
            if cs and rs != rt:
                continue  # NOTE: its columns moved apart: drawn straight below
            path = _shift(e.get("pos", ""), dx + cs.get(rs, 0.0), dy)
            where = {"pos": _reverse_pos(path) if e.get("dir") == "back" else path}
            if "xlp" in e:
                where["xlp"] = _shift(e["xlp"], dx + cs.get(rs, 0.0), dy)
            edge_lines.append(_edge_line(de, where))
    for i in placed.straight:
        e, a, b = d.edges[i], placed.pos[p.index.src[i]], placed.pos[p.index.dst[i]]
        assert a is not None and b is not None  # NOTE: place keeps only edges whose both ends were drawn
        (ax, ay, *_), (bx, by, *_) = a, b
        where = {"pos": _straight(a, b),
                 "xlp": f"{(ax + bx) / 2:.1f},{(ay + by) / 2:.1f}"}
        edge_lines.append(_edge_line(e, where))
    head = {"bb": f"0,0,{placed.width:.1f},{placed.height:.1f}", "label": S.legend_html(), "labelloc": "t",
            "labeljust": "l", "fontname": S.GRAPH_ATTRS["fontname"], "fontsize": "10", "splines": "true"}
    return "\n".join([f"digraph {dot_quote(title or d.name)} {{", f"graph [{_attrs(head)}];",
                      f"node [{_attrs(S.NODE_DEFAULTS)}];", f"edge [{_attrs(EDGE_DEFAULTS)}];", *node_lines,
                      *edge_lines, "}"])


def _edge_line(e: DrawEdge, where: dict[str, str]) -> str:
    """An edge of the composed graph: its style, and where it runs (``pos``; ``xlp`` of its name, if any)."""
    return f"{dot_quote(e.source)} -> {dot_quote(e.target)} [{_style_text(e.style)}, {_attrs(where)}];"


def _emit_objects(ix: Index, g: dict, dx: float, dy: float, cs: dict[str, float], pos: list[Box | None],
                  lines: list[str]) -> None:
    """The nodes (at their boxes in `pos`, by number: :func:`_json0_number`) and clusters of one piece's json0,
    clusters moved by (dx, dy) and their column's shift, pinned."""
    objects = g.get("objects", [])
    for obj in objects:
        i = _json0_number(obj)
        if i is None or (box := pos[i]) is None:
            continue
        x, y, w, h = box
        n = ix.nodes[i]
        lines.append(f'{dot_quote(ix.ids[i])} [label={dot_quote(n.label)}, {_style_text(n.style)}, '
                     f'pos="{x:.1f},{y:.1f}!", width="{w / 72:.3f}", height="{h / 72:.3f}"];')
    inner = {c for obj in objects for c in obj.get("subgraphs", [])}
    for k, obj in enumerate(objects):
        if obj.get("name", "").startswith("cluster") and "bb" in obj and k not in inner:
            _emit_cluster(objects, k, dx, dy, cs, ix.ids, lines)


def _emit_cluster(objects: list[dict], k: int, dx: float, dy: float, cs: dict[str, float], ids: list[str],
                  lines: list[str]) -> None:
    """Cluster `k` of a json0 object list with its box and label pinned, its sub-clusters nested; its nodes
    named by number (`ids`, :func:`_json0_number`), as :func:`_emit_objects` wrote them."""
    obj = objects[k]
    sx = dx + cs.get(column_role(obj["name"]) or "", 0.0)
    a = {key: obj[key] for key in ("label", "style", "color", "fillcolor", "fontcolor", "fontsize") if key in obj}
    a["bb"] = _shift(obj["bb"], sx, dy)
    if "lp" in obj:
        a["lp"] = _shift(obj["lp"], sx, dy)
    kids = [c for c in obj.get("subgraphs", []) if objects[c].get("name", "").startswith("cluster")]
    taken = {n for c in kids for n in objects[c].get("nodes", [])}
    lines.append(f"subgraph {dot_quote(obj['name'])} {{ graph [{_attrs(a)}]; "
                 + " ".join(dot_quote(ids[i]) + ";" for n in obj.get("nodes", [])
                            if n not in taken and (i := _json0_number(objects[n])) is not None))
    for c in kids:
        _emit_cluster(objects, c, dx, dy, cs, ids, lines)
    lines.append("}")


def straight_points(a: Box, b: Box) -> tuple[tuple[float, float], list[tuple[float, float]]]:
    """A straight edge from box `a`'s border to box `b`'s: (arrow tip at `b`, the four spline points ending
    8 points short of it).  Through the top and bottom borders when the boxes are further apart up and
    down than sideways, else through their sides."""
    (ax, ay, aw, ah), (bx, by, bw, bh) = a, b
    if abs(by - ay) - (ah + bh) / 2 >= abs(bx - ax) - (aw + bw) / 2:
        sgn = -1.0 if by < ay else 1.0
        sx, sy, ex, ey = ax, ay + sgn * ah / 2, bx, by - sgn * bh / 2
    else:
        sgn = -1.0 if bx < ax else 1.0
        sx, sy, ex, ey = ax + sgn * aw / 2, ay, bx - sgn * bw / 2, by
    norm = math.hypot(ex - sx, ey - sy) or 1.0
    tx, ty = ex - 8 * (ex - sx) / norm, ey - 8 * (ey - sy) / norm
    return (ex, ey), [(sx + (tx - sx) * t, sy + (ty - sy) * t) for t in (0, 1 / 3, 2 / 3, 1)]


def _straight(a: Box, b: Box) -> str:
    """:func:`straight_points` as a graphviz spline (``pos``), arrow at `b`."""
    (ex, ey), pts = straight_points(a, b)
    return f"e,{ex:.1f},{ey:.1f} " + " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)


def run_pieces(dots: list[str], run: Callable[[list[str]], list[bytes]],
               read: Callable[[bytes], list[Any]] = read_json0) -> list[Any]:
    """Share `dots` out over :data:`JOBS` batches (one ``dot`` process each, several graphs per input);
    `run` runs the batches at once and returns each one's output, `read` splits an output into one
    result per graph; the results come back in the order of `dots`."""
    jobs = max(1, min(JOBS, len(dots)))
    batches = [dots[j::jobs] for j in range(jobs)]
    outs = [read(b) for b in run(["\n".join(b) for b in batches])]
    layouts: list[Any] = [{}] * len(dots)
    for j, out in enumerate(outs):
        for m, g in enumerate(out):
            layouts[j + m * jobs] = g
    return layouts
