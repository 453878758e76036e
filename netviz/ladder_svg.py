"""The folded ladder's SVG, composed from the pieces' own ``dot -Tsvg`` drawings: no whole-graph render.

Why: ``neato -n2`` over the whole placed drawing (:func:`netviz.ladder.compose`) was the one stage whose
cost grew faster than the net (0.10 s on a 1k-op chain with its backward pass, 1.12 s on the 10k one:
cgraph's name dictionaries), and at ~140 µs an op the costliest after ``dot`` itself.  Each piece's ``dot``
run now writes its SVG right after its json0 layout (``-Tjson0 -Tsvg``, one process per batch as
before); netviz places the pieces from the json0 (:func:`netviz.ladder.place`) and moves each piece's
elements there with a ``translate`` on the element's own group (rewriting every coordinate instead cost
~165 µs an op in Python, more than the render it replaces).  The edges between pieces, and between a
piece's columns once they moved apart, are drawn here as graphviz draws a straight edge (path, arrowhead,
name), and the legend is the drawing ``dot`` makes of it in the same batch (:data:`LEGEND_DOT`), put on
top.  Each element keeps graphviz's class and title; ids are numbered anew (``node1``, ``edge1``,
``clust1``, …: unique over the whole file).  Every step is linear in the net.
"""
from __future__ import annotations

import html
import json
from collections.abc import Callable, Iterable, Sequence
from itertools import chain
from typing import Any

from netviz import style as S
from netviz.drawing import DrawEdge, Drawing
from netviz.ladder import (Box, Pieces, Placement, column_role, column_shifts, dot_quote, iter_piece_dots, place,
                           straight_points)

__all__ = ["LEGEND_DOT", "read_json0_svg", "draw_svg", "piece_elements", "compose_svg"]

#: the legend alone, as the graph label of an empty graph (top left, as on every export)
LEGEND_DOT = (f"digraph {dot_quote('legend')} {{ graph [label={S.legend_html()}, labelloc=\"t\", labeljust=\"l\", "
              f"fontname={dot_quote(S.GRAPH_ATTRS['fontname'])}, fontsize=\"10\"]; }}")
_FONT = "Helvetica,sans-Serif"  # what graphviz writes for fontname=Helvetica
_PREFIX = {"node": "node", "edge": "edge", "cluster": "clust"}


def read_json0_svg(out: bytes) -> tuple[dict, str]:
    """One graph's ``dot -Tjson0 -Tsvg`` output (:func:`netviz.layout.run_graphviz_stream` hands them over one
    at a time): its json0 and its SVG."""
    s = out.decode()
    g, i = json.JSONDecoder().raw_decode(s, len(s) - len(s.lstrip()))
    return g, s[i:].strip()


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


def draw_svg(d: Drawing, p: Pieces, stream: Callable[[Iterable[str], Callable[[int, bytes], None]], None]) -> list[str]:
    """The SVG of `d` cut into `p`: `stream` (:func:`netviz.layout.run_graphviz_stream`, bound to its limits)
    lays out and draws the pieces and the legend while they are written, each one read as it comes back."""
    parts: list[tuple[dict, Any]] = [({}, [])] * (p.count + 1)

    def take(k: int, out: bytes) -> None:
        g, text = read_json0_svg(out)
        parts[k] = (g, text if k == p.count else piece_elements(d, text, column_shifts(g)))

    stream(chain(iter_piece_dots(d, p), [LEGEND_DOT]), take)
    legend = parts.pop()
    placed = place(d, p, [g for g, _ in parts])
    return compose_svg(d, placed, [items for _, items in parts], legend)


def piece_elements(d: Drawing, svg: str, cs: dict[str, float]) -> list[tuple[str, str, str]]:
    """The element groups of one piece's SVG as ``(class, role whose column shift moves it, the group after its
    opening tag)``; edges between columns that `cs` moves apart are left out (drawn straight)."""
    out = []
    for c in _elements(svg):
        q = c.index('"')
        cls_end = c.index('"', q + 9)  # NOTE: c is 'node1" class="node">…'
        cls, rest = c[q + 9:cls_end], c[cls_end + 2:]
        t0 = rest.index("<title>") + 7
        name = rest[t0:rest.index("</title>", t0)]
        if cls == "node":
            n = d.nodes.get(html.unescape(name))
            role = n.role if n is not None else ""
        elif cls == "edge":
            e = d.edges[int(c[1:q])]
            role, rt = d.nodes[e.source].role, d.nodes[e.target].role
            if cs and role != rt:
                continue  # NOTE: its columns moved apart: drawn straight
            if cs and e.kind == "data" and role == "gradient":  # written reversed (dir=back): title it as it runs
                rest = rest.replace(name, f"{_xml(e.source)}&#45;&gt;{_xml(e.target)}", 1)
        else:
            role = column_role(html.unescape(name)) or ""
        out.append((cls, role, rest))
    return out


def compose_svg(d: Drawing, placed: Placement, pieces: Sequence[list[tuple[str, str, str]]],
                legend: tuple[dict, str] | None, title: str = "") -> list[str]:
    """The lines of one SVG of `d` (never joined here: it is written a part at a time): each piece's elements (:func:`piece_elements`, in piece order) moved where `placed` put
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
        for cls, role, rest in elements:
            count[cls] = count.get(cls, 0) + 1
            group = (f'<g id="{_PREFIX.get(cls, cls)}{count[cls]}" class="{cls}" '
                     f'transform="translate({dx + cs.get(role, 0.0):.2f},{-dy:.2f})">{rest}')
            (clusters if cls == "cluster" else items).append(group)
    looks: dict[tuple, tuple[str, str, str]] = {}
    for i in placed.straight:
        count["edge"] += 1
        e = d.edges[i]
        items.append(_straight_svg(e, placed.pos[e.source], placed.pos[e.target], count["edge"], looks))
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


def _looks(e: DrawEdge, a: dict[str, str], looks: dict[tuple, tuple[str, str, str]]) -> tuple[str, str, str]:
    """(stroke attributes of the line, of its arrowhead, arrowhead kind) of edge `e` (its attributes `a`), as
    graphviz writes them; kept per look in `looks` for one export (an ops-only edge's style is its own: its name)."""
    key = (a.get("color", "black"), a.get("penwidth", "1"), e.style.dashed, a.get("arrowhead", "normal"))
    if key not in looks:
        color, alpha = _paint(key[0])
        width = f' stroke-width="{key[1]}"' if key[1] != "1" else ""
        fade = f' stroke-opacity="{alpha}"' if alpha else ""
        dash = ' stroke-dasharray="5,2"' if key[2] else ""
        fill_fade = f' fill-opacity="{alpha}"' if alpha else ""
        line = f'fill="none" stroke="{color}"{width}{dash}{fade}'
        head = f'fill="{color}"{fill_fade} stroke="{color}"{width}{fade}'
        looks[key] = (line, head, key[3])
    return looks[key]


def _straight_svg(e: DrawEdge, a: Box, b: Box, n: int, looks: dict[tuple, tuple[str, str, str]]) -> str:
    """Edge `e` drawn straight from box `a` to box `b` as graphviz's SVG draws an edge (group ``edge<n>``)."""
    (ex, ey), pts = straight_points(a, b)
    attrs = e.style.attrs()
    line, head, kind = _looks(e, attrs, looks)
    (x0, y0), *rest = pts
    parts = [f'<g id="edge{n}" class="edge">', f"<title>{_xml(e.source)}&#45;&gt;{_xml(e.target)}</title>",
             f'<path {line} d="M{x0:.2f},{-y0:.2f}C' + " ".join(f"{x:.2f},{-y:.2f}" for x, y in rest) + '"/>']
    px, py = pts[-1]
    norm = ((ex - px) ** 2 + (ey - py) ** 2) ** 0.5 or 1.0
    ux, uy = (ex - px) / norm, (ey - py) / norm
    if kind == "dot":
        parts.append(f'<ellipse {head} cx="{ex - 4 * ux:.2f}" cy="{-(ey - 4 * uy):.2f}" rx="4" ry="4"/>')
    elif kind != "none":
        bx, by, wx, wy = ex - 10 * ux, ey - 10 * uy, -3.5 * uy, 3.5 * ux
        wing = f"{bx + wx:.2f},{-(by + wy):.2f}"
        parts.append(f'<polygon {head} points="{wing} {ex:.2f},{-ey:.2f} {bx - wx:.2f},{-(by - wy):.2f} {wing}"/>')
    text = attrs.get("xlabel") or attrs.get("label")
    if text:
        size = float(attrs.get("fontsize", "8"))
        mx, my = (a[0] + b[0]) / 2, (a[1] + b[1]) / 2
        ink, _ = _paint(attrs.get("fontcolor", "black"))
        parts.append(f'<text text-anchor="middle" x="{mx:.2f}" y="{-my + 0.2375 * size:.2f}" font-family="{_FONT}" '
                     f'font-size="{size:.2f}" fill="{ink}">{_xml(text)}</text>')
    parts.append("</g>")
    return "\n".join(parts)
