"""The folded ladder's SVG, composed from the pieces' own ``dot -Tsvg`` drawings: no whole-graph render.

Why: ``neato -n2`` over the whole placed drawing (:func:`netviz.ladder.compose`) was the one stage whose
cost grew faster than the net (0.10 s on a 1k-op chain with its backward pass, 1.12 s on the 10k one:
cgraph's name dictionaries), and at ~130 µs an op the costliest after ``dot`` itself.  Each piece's ``dot``
run now writes its SVG (``-Tsvg``, the pieces streamed through the processes while they are written:
:func:`netviz.layout.run_graphviz_stream`); netviz reads back from it where the piece's nodes and column
clusters are (:func:`read_piece`: a json0 beside it cost ``dot`` a fifth more), places the pieces
(:func:`netviz.ladder.place`) and moves each piece's elements there with a ``translate`` on the element's
own group (rewriting every coordinate instead cost ~165 µs an op in Python, more than the render it
replaces).  The edges between pieces, and between a piece's columns once they moved apart, are drawn here
as graphviz draws a straight edge (path, arrowhead, name), and the legend is the drawing ``dot`` makes of
it in the same run (:data:`LEGEND_DOT`), put on top.  Each element keeps graphviz's class and title; ids
are numbered anew (``node1``, ``edge1``, ``clust1``, …: unique over the whole file).  Every step is linear
in the net.
"""
from __future__ import annotations

import html
import math
import re
from collections.abc import Callable, Iterable, Sequence
from itertools import chain
from typing import Any

from netviz import style as S
from netviz.drawing import DrawEdge, Drawing
from netviz.ladder_memo import DIGIT_RUN, Served, Stream, Template, memoized
from netviz.ladder import (Box, Index, Pieces, Placement, column_role, column_shifts, dot_quote, iter_piece_dots,
                           place, reach_left, straight_points, text_left)

__all__ = ["LEGEND_DOT", "svg_bb", "draw_svg", "read_piece", "reread", "compose_svg"]

#: the legend alone, as the graph label of an empty graph (top left, as on every export)
LEGEND_DOT = (f"digraph {dot_quote('legend')} {{ graph [label={S.legend_html()}, labelloc=\"t\", labeljust=\"l\", "
              f"fontname={dot_quote(S.GRAPH_ATTRS['fontname'])}, fontsize=\"10\"]; }}")
_FONT = "Helvetica,sans-Serif"  # what graphviz writes for fontname=Helvetica
_PREFIX = {"node": "node", "edge": "edge", "cluster": "clust"}
#: whether :func:`draw_svg` lays out a piece that repeats an earlier one from that one's drawing (the benchmarks
#: turn it off to measure the rest)
MEMO = True


_VIEWBOX = re.compile(r'viewBox="[-\d.]+ [-\d.]+ ([\d.]+) ([\d.]+)"')
_PAIR = re.compile(r"(-?[\d.]+),(-?[\d.]+)")
_SHAPE = re.compile(r' (?:points|d)="([^"]*)"')
_ELLIPSE = re.compile(r'cx="(-?[\d.]+)" cy="(-?[\d.]+)" rx="([\d.]+)" ry="([\d.]+)"')
_TEXT_AT = re.compile(r'<text[^>]* x="(-?[\d.]+)" y="(-?[\d.]+)"')
_FONT_SIZE = re.compile(r'font-size="([\d.]+)"')
#: between element bodies joined for one template (:func:`reread`): no XML text holds it
_SEP = "\x00"


def svg_bb(svg: str) -> str:
    """A graphviz SVG's graph box as json0 writes it (``0,0,w,h``: the SVG is 4 points wider on each side)."""
    m = _VIEWBOX.search(svg)
    return f"0,0,{float(m.group(1)) - 8:.2f},{float(m.group(2)) - 8:.2f}" if m else "0,0,0,0"


def _outline(rest: str) -> tuple[float, float, float, float] | None:
    """The box (x0, y0, x1, y1; SVG y, down) around the shapes of an element group (after its title, before
    its text): polygons' and paths' points, ellipses; None for a shape-less (plaintext) node."""
    head = rest[rest.index("</title>"):]
    head = head[:head.find("<text")] if "<text" in head else head
    xs, ys = [], []
    for points in _SHAPE.findall(head):  # NOTE: only shapes' points: stroke-dasharray="5,2" is a pair too
        for x, y in _PAIR.findall(points):
            xs.append(float(x))
            ys.append(float(y))
    for cx, cy, rx, ry in _ELLIPSE.findall(head):
        xs += [float(cx) - float(rx), float(cx) + float(rx)]
        ys += [float(cy) - float(ry), float(cy) + float(ry)]
    return (min(xs), min(ys), max(xs), max(ys)) if xs else None


def _elements(svg: str) -> list[str]:
    """The element groups of one graphviz SVG (``node1" class="node">…</g>``, each without its ``<g id="``),
    its background and comments left out."""
    start = svg.find('<g id="', svg.index("<polygon"))
    if start < 0:
        return []
    end = svg.rindex("</g>", 0, svg.rindex("</svg>"))  # NOTE: the graph's own group closes last
    return [c[:c.rindex("</g>") + 4] for c in svg[start:end].split('<g id="') if c]


def _xml(text: str) -> str:
    """`text` as graphviz writes it in SVG (``-`` as ``&#45;``, so ``->`` never reads as a comment's end)."""
    return html.escape(text).replace("-", "&#45;")


def draw_svg(d: Drawing, p: Pieces, stream: Stream, memo: bool | None = None) -> list[str]:
    """The SVG of `d` cut into `p`: `stream` (:func:`netviz.layout.run_graphviz_stream`, bound to its limits)
    lays out and draws the pieces and the legend while they are written, each one read as it comes back;
    with `memo` (:data:`MEMO` when None), a piece that is the same graph as an earlier one up to the digits of
    its texts is drawn from that one's SVG, not by ``dot`` (:mod:`netviz.ladder_memo`: repetitive nets).

    ``dot`` writes SVG only: where each piece's nodes and column clusters are is read back from it
    (:func:`read_piece`; a json0 beside it cost ``dot`` a fifth more and Python its decoding)."""
    parts: list[tuple[dict, Any]] = [({}, [])] * (p.count + 1)

    cuts: dict[int, Template] = {}

    def take(k: int, out: bytes | str | Served) -> None:
        if isinstance(out, Served):
            # NOTE: its source piece was read already (the memo hands a piece over after its source): map what
            # was read there, element by element, instead of reading the whole SVG again (~20 µs an op)
            if out.source not in cuts:
                cuts[out.source] = out.cut(_SEP.join(rest for _, _, rest in parts[out.source][1]))
            parts[k] = reread(parts[out.source], out, cuts[out.source], p.index)
            return
        text = out.decode() if isinstance(out, bytes) else out
        parts[k] = ({"bb": svg_bb(text)}, text) if k == p.count else read_piece(d, text, p.index)

    (memoized(stream) if (MEMO if memo is None else memo) else stream)(chain(iter_piece_dots(d, p), [LEGEND_DOT]), take)
    legend = parts.pop()
    placed = place(d, p, [g for g, _ in parts])
    return compose_svg(d, placed, [items for _, items in parts], legend)


def read_piece(d: Drawing, svg: str, ix: Index) -> tuple[dict, list[tuple[str, str, str]]]:
    """One piece's SVG as (its layout in json0's terms: graph box, column clusters' boxes, node boxes (a
    node's centre as numbers, ``xy``, its ``role`` and its number in `ix`, ``at``, in place of json0's
    ``pos`` string); its
    element groups as ``(class, role whose column shift moves it, the group after its opening tag)``).
    Edges between columns that the piece's shifts (:func:`netviz.ladder.column_shifts`) move apart are
    left out (drawn straight); a gradient edge, written reversed (``dir=back``), is titled as it runs.
    A node is found by its group's id (``n<i>``: node `i` of `ix`, :func:`netviz.ladder.piece_dot`), never by
    its title: graphviz leaves a name's ``&amp;`` as it is, so an unescaped title can name another node."""
    objects: list[dict] = []
    found: list[tuple[str, str, str, int]] = []
    labels_left: dict[str, float] = {}  # NOTE: role → the left end of its edges' names (ops-only: outside its box)
    nodes, src, dst, ids = ix.nodes, ix.src, ix.dst, ix.ids
    for c in _elements(svg):
        q = c.index('"')
        cls_end = c.index('"', q + 9)  # NOTE: c is 'node1" class="node">…'
        # NOTE: the group's body without the newline after its opening tag: compose_svg writes the tag it
        # makes and this body as two lines, no copy of the body made to join them
        cls, rest = c[q + 9:cls_end], c[cls_end + 3 if c[cls_end + 2] == "\n" else cls_end + 2:]
        t0 = rest.index("<title>") + 7
        name = rest[t0:rest.index("</title>", t0)]
        e = -1
        if cls == "node":
            m = int(c[1:q])
            role = nodes[m].role
            if _renamed(ids[m]):
                rest = _retitled(rest, t0, _xml(ids[m]))
            box = _outline(rest) or _text_box(rest)
            # NOTE: the centre as numbers, the role and the number (:func:`netviz.ladder._boxes`): a json0 "pos"
            # string was formatted here and parsed back there, and the node looked up again by name
            objects.append({"name": ix.ids[m], "at": m, "xy": ((box[0] + box[2]) / 2, -(box[1] + box[3]) / 2),
                            "role": role, "width": (box[2] - box[0]) / 72, "height": (box[3] - box[1]) / 72})
        elif cls == "edge":
            e = int(c[1:q])
            role = nodes[src[e]].role
            if _renamed(ids[src[e]]) or _renamed(ids[dst[e]]):
                rest = _retitled(rest, t0, f"{_xml(ids[src[e]])}&#45;&gt;{_xml(ids[dst[e]])}")
            if "<text" in rest and (left := _label_left(rest)) < labels_left.get(role, left + 1):
                labels_left[role] = left
        else:
            name = html.unescape(name)
            role = column_role(name) or ""
            if role and name.count("_") == 2 and (box := _outline(rest)) is not None:
                objects.append({"name": name, "bb": f"{box[0]},{-box[3]},{box[2]},{-box[1]}", "role": role})
        found.append((cls, role, rest, e))
    reach_left(objects, labels_left)  # NOTE: a column's box as the shifts see it reaches its edges' names (_label_left)
    g = {"bb": svg_bb(svg), "objects": objects}
    cs = column_shifts(g)
    out = []
    for cls, role, rest, i in found:
        if i >= 0 and cs:
            if role != nodes[dst[i]].role:
                continue  # NOTE: its columns moved apart: drawn straight
            if (e := d.edges[i]).kind == "data" and role == "gradient":
                rest = _retitled(rest, rest.index("<title>") + 7, f"{_xml(e.source)}&#45;&gt;{_xml(e.target)}")
        out.append((cls, role, rest))
    return g, out


def reread(source: tuple[dict, list[tuple[str, str, str]]], served: Served, bodies: Template, ix: Index
           ) -> tuple[dict, list[tuple[str, str, str]]]:
    """What :func:`read_piece` reads from a piece the memo serves (:class:`netviz.ladder_memo.Served`), made from
    what it read from the piece's source: the same boxes and element bodies, its own nodes (by their ids'
    numbers), cluster names and texts (their digits mapped; `bodies` is the source's element bodies joined by
    :data:`_SEP`, as a template: one join and one split a piece, not one fill an element)."""
    g, elements = source
    texts, node_ids = served.maps[0], served.maps[1]
    objects = []
    for o in g["objects"]:
        if "at" in o:
            m = int(node_ids[str(o["at"])])
            objects.append({"name": ix.ids[m], "at": m, "xy": o["xy"], "role": ix.nodes[m].role, "width": o["width"],
                            "height": o["height"]})
        else:
            objects.append({"name": DIGIT_RUN.sub(lambda r: texts.get(r.group(), r.group()), o["name"]), "bb": o["bb"],
                            "role": o["role"]})
    return ({"bb": g["bb"], "objects": objects},
            [(cls, role, rest) for (cls, role, _), rest in zip(elements, served.fill(bodies).split(_SEP))])


def _label_left(rest: str) -> float:
    """The left end of the first text in an edge's body (its name, drawn centred; 0.6 em a character).

    Why: an ops-only edge's name lies beside it, outside its column's box; the column shifts
    (:func:`netviz.ladder.column_shifts`) stacked the boxes alone, so the forward column's names were cut
    off at the drawing's left edge (ResNet-50 --backward: 18 of them)."""
    m = _TEXT_AT.search(rest)
    if m is None:
        return math.inf
    size = _FONT_SIZE.search(rest, m.end())
    text = rest[rest.index(">", m.end()) + 1:rest.index("</text>", m.end())]
    return text_left(float(m.group(1)), float(size.group(1)) if size else 14.0, html.unescape(text))


def _renamed(nid: str) -> bool:
    """Whether graphviz titles node `nid` otherwise than its id: it keeps a quoted ``\\\\`` as two
    backslashes (a newline, written ``\\n``, as those two characters) and leaves ``&amp;`` or ``&#…;``
    in a name as it is, so the title read back would name another node."""
    return "\\" in nid or "&" in nid or "\n" in nid


def _retitled(rest: str, t0: int, title: str) -> str:
    """`rest` (an element group's body, its title's text starting at `t0`) with the title `title` (XML)."""
    return f"{rest[:t0]}{title}{rest[rest.index('</title>', t0):]}"


def _text_box(rest: str) -> tuple[float, float, float, float]:
    """A shape-less node's box: a point where its first text line is (a plaintext note)."""
    m = _TEXT_AT.search(rest)
    x, y = (float(m.group(1)), float(m.group(2))) if m else (0.0, 0.0)
    return x, y, x, y


def compose_svg(d: Drawing, placed: Placement, pieces: Sequence[list[tuple[str, str, str]]],
                legend: tuple[dict, str] | None, title: str = "") -> list[str]:
    """The lines of one SVG of `d` (never joined here: it is written a part at a time): each piece's elements (:func:`read_piece`, in piece order) moved where `placed` put
    it, the straight edges drawn here, `legend` (its json0 and SVG) on top.  Clusters come first, so they
    lie under nodes and edges, as in graphviz's own output."""
    lw, lh = (0.0, 0.0)
    if legend is not None:
        _, _, lw, lh = (float(v) for v in legend[0].get("bb", "0,0,0,0").split(","))
    width, height = max(placed.width, lw), placed.height + lh
    clusters: list[str] = []
    items: list[str] = []
    count = {"node": 0, "edge": 0, "cluster": 0}
    for k, elements in enumerate(pieces):
        dx, dy, cs = placed.moves[k]
        moved = {role: f' transform="translate({dx + shift:.2f},{-dy:.2f})">' for role, shift in cs.items()}
        still = f' transform="translate({dx:.2f},{-dy:.2f})">'
        for cls, role, rest in elements:
            count[cls] = count.get(cls, 0) + 1
            # NOTE: the opening tag and the body as two lines: the body, read long before (cold at 10k ops:
            # 22 MB), is not copied into a new string here, only written out
            (clusters if cls == "cluster" else items).extend(
                (f'<g id="{_PREFIX.get(cls, cls)}{count[cls]}" class="{cls}"{moved.get(role, still)}', rest))
    looks: dict[int, tuple[str, str, str, float, str]] = {}
    pos, src, dst = placed.pos, placed.index.src, placed.index.dst
    for i in placed.straight:
        count["edge"] += 1
        a, b = pos[src[i]], pos[dst[i]]
        assert a is not None and b is not None  # NOTE: place keeps only edges whose both ends were drawn
        items.append(_straight_svg(d.edges[i], a, b, count["edge"], looks))
    if legend is not None:
        body = legend[1]
        body = body[body.index("\n", body.index('<polygon fill="white"')) + 1:body.rindex("</g>", 0, body.rindex("</svg>"))]
        clusters.append(f'<g id="legend" class="legend" transform="translate(0,{-placed.height:.2f})">\n{body}</g>')
    name = _xml(title or d.name)
    return [
        '<?xml version="1.0" encoding="UTF-8" standalone="no"?>',
        '<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN"\n "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd">',
        "<!-- Generated by netviz from graphviz dot's drawings of its pieces -->",
        f'<svg width="{width + 8:.0f}pt" height="{height + 8:.0f}pt"\n viewBox="0.00 0.00 {width + 8:.2f} {height + 8:.2f}" '
        'xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink">',
        f'<g id="graph0" class="graph" transform="scale(1 1) rotate(0) translate(4 {height + 4:.2f})">',
        f"<title>{name}</title>",
        f'<polygon fill="white" stroke="transparent" points="-4,4 -4,{-height - 4:.2f} {width + 4:.2f},{-height - 4:.2f} '
        f'{width + 4:.2f},4 -4,4"/>',
        *clusters, *items, "</g>", "</svg>"]


def _paint(color: str) -> tuple[str, str]:
    """A graphviz colour as SVG: (``#rrggbb`` or a name, the opacity of ``#rrggbbaa``'s alpha or "")."""
    if color.startswith("#") and len(color) == 9:
        return color[:7].lower(), f"{int(color[7:], 16) / 255:.6f}"
    return (color.lower() if color.startswith("#") else color), ""


def _looks(e: DrawEdge, looks: dict[int, tuple[str, str, str, float, str]]) -> tuple[str, str, str, float, str]:
    """(stroke attributes of the line, of its arrowhead, arrowhead kind, the name's font size, its ``<text>``
    after the y) of
    edge `e`, as graphviz writes them; kept per style in `looks` for one export (by the style's id: the styles
    live as long as the drawing; an ops-only edge's style is its own, its name, the cross-column edges share
    two).  Why: the 10k-op chain draws 20k edges straight, and each one built its style's attributes anew."""
    key = id(e.style)
    if key not in looks:
        a = e.style.attrs()
        color, alpha = _paint(a.get("color", "black"))
        width = f' stroke-width="{a["penwidth"]}"' if a.get("penwidth", "1") != "1" else ""
        fade = f' stroke-opacity="{alpha}"' if alpha else ""
        dash = ' stroke-dasharray="5,2"' if e.style.dashed else ""
        fill_fade = f' fill-opacity="{alpha}"' if alpha else ""
        line = f'fill="none" stroke="{color}"{width}{dash}{fade}'
        head = f'fill="{color}"{fill_fade} stroke="{color}"{width}{fade}'
        text = a.get("xlabel") or a.get("label")
        size = float(a.get("fontsize", "8"))
        label = (f'" font-family="{_FONT}" font-size="{size:.2f}" fill="{_paint(a.get("fontcolor", "black"))[0]}">'
                 f'{_xml(text)}</text>\n' if text else "")
        looks[key] = (line, head, a.get("arrowhead", "normal"), size, label)
    return looks[key]


def _straight_svg(e: DrawEdge, a: Box, b: Box, n: int, looks: dict[int, tuple[str, str, str, float, str]]) -> str:
    """Edge `e` drawn straight from box `a` to box `b` as graphviz's SVG draws an edge (group ``edge<n>``)."""
    (ex, ey), ((x0, y0), (x1, y1), (x2, y2), (px, py)) = straight_points(a, b)
    line, head, kind, size, label = _looks(e, looks)
    out = (f'<g id="edge{n}" class="edge">\n<title>{_xml(e.source)}&#45;&gt;{_xml(e.target)}</title>\n'
           f'<path {line} d="M{x0:.2f},{-y0:.2f}C{x1:.2f},{-y1:.2f} {x2:.2f},{-y2:.2f} {px:.2f},{-py:.2f}"/>\n')
    norm = ((ex - px) ** 2 + (ey - py) ** 2) ** 0.5 or 1.0
    ux, uy = (ex - px) / norm, (ey - py) / norm
    if kind == "dot":
        out += f'<ellipse {head} cx="{ex - 4 * ux:.2f}" cy="{-(ey - 4 * uy):.2f}" rx="4" ry="4"/>\n'
    elif kind != "none":
        bx, by, wx, wy = ex - 10 * ux, ey - 10 * uy, -3.5 * uy, 3.5 * ux
        wing = f"{bx + wx:.2f},{-(by + wy):.2f}"
        out += f'<polygon {head} points="{wing} {ex:.2f},{-ey:.2f} {bx - wx:.2f},{-(by - wy):.2f} {wing}"/>\n'
    if label:
        my = (a[1] + b[1]) / 2
        out += f'<text text-anchor="middle" x="{(a[0] + b[0]) / 2:.2f}" y="{-my + 0.2375 * size:.2f}{label}'
    return out + "</g>"
