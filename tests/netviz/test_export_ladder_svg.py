"""The ladder's SVG is composed from the pieces' own ``dot`` drawings (no whole-graph ``neato -n2``), and it is
the same drawing: every node and edge once, each edge running between its two nodes' boxes where netviz placed
them (read back with the groups' transforms), ids unique, the legend on top."""
from __future__ import annotations

import html
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from netviz import ladder
from netviz.drawing import ops_only
from netviz.export import BIG_DRAWING, export_drawing
from tests.netviz.test_export_ladder import SVG, chain_training, placed_groups, svg_boxes

NUMBER_PAIR = re.compile(r"(-?[\d.]+),(-?[\d.]+)")


@pytest.fixture
def no_neato(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``neato`` first on PATH that fails: the SVG must not need it (PNG and PDF still do)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "neato").write_text("#!/bin/sh\necho 'neato must not run' >&2\nexit 3\n")
    (bin_dir / "neato").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def box_distance(p: tuple[float, float], box: tuple[float, float, float, float]) -> float:
    """How far point `p` lies outside `box` (x0, y0, x1, y1); 0 inside."""
    (x, y), (x0, y0, x1, y1) = p, box
    return max(x0 - x, 0.0, x - x1) + max(y0 - y, 0.0, y - y1)


def node_boxes(path: Path) -> dict[str, tuple[float, float, float, float]]:
    """Node id → its outline's bounding box in SVG units, the groups' transforms applied."""
    out = {}
    for g, (tx, ty) in placed_groups(ET.parse(path).getroot()):
        if g.get("class") != "node":
            continue
        pts = [(float(a) + tx, float(b) + ty) for s in g if s.tag == f"{SVG}polygon"
               for a, b in NUMBER_PAIR.findall(s.get("points", ""))]
        if pts:
            xs, ys = [x for x, _ in pts], [y for _, y in pts]
            out[g.findtext(f"{SVG}title") or ""] = (min(xs), min(ys), max(xs), max(ys))
    return out


@pytest.mark.parametrize("layers", [6, 60], ids=["blobs", "ops-only"])
def test_ladder_svg_is_composed_without_neato(no_neato: None, tmp_path: Path, layers: int) -> None:
    d = chain_training(layers)
    drawn = ops_only(d) if len(d.nodes) > BIG_DRAWING else d
    r = export_drawing(d, tmp_path / "c.svg")
    assert "ladder in" in r.layout and (len(drawn.nodes) > BIG_DRAWING) == (layers == 60)
    root = ET.parse(r.path).getroot()
    ids = [g.get("id") for g in root.iter(f"{SVG}g")]
    assert len(ids) == len(set(ids))
    assert set(svg_boxes(r.path)[0]) == set(drawn.nodes)
    boxes = node_boxes(r.path)
    edges = [(g, at) for g, at in placed_groups(root) if g.get("class") == "edge"]
    want = sorted(f"{e.source}->{e.target}" for e in drawn.edges)
    assert sorted(html.unescape(g.findtext(f"{SVG}title") or "") for g, _ in edges) == want
    for g, (tx, ty) in edges:
        a, b = html.unescape(g.findtext(f"{SVG}title") or "").split("->")
        path = next(s for s in g if s.tag == f"{SVG}path")
        pts = [(float(x) + tx, float(y) + ty) for x, y in NUMBER_PAIR.findall(path.get("d", ""))]
        ends = (pts[0], pts[-1])
        # NOTE: either way round: a gradient edge is drawn from its head (dir=back), its arrow at the start
        near = min(box_distance(ends[0], boxes[a]) + box_distance(ends[1], boxes[b]),
                   box_distance(ends[0], boxes[b]) + box_distance(ends[1], boxes[a]))
        assert near <= 24, (a, b, ends, boxes[a], boxes[b])
    columns = {name: box for name, box in svg_boxes(r.path)[1].items() if name.count("_") == 2}
    for name, (_, _, right, _) in columns.items():  # each piece's columns in order, COLUMN_GAP apart
        after = columns.get(name.replace("_forward", "_gradient")) if name.endswith("_forward") else None
        if after is not None:
            assert abs(after[0] - right - ladder.COLUMN_GAP) < 1, (name, right, after)
    assert any(name.endswith("_gradient") for name in columns)
    legend = next(g for g in root.iter(f"{SVG}g") if g.get("class") == "legend")
    assert "legend:" in "".join(legend.itertext())


def test_png_still_goes_through_neato(no_neato: None, tmp_path: Path) -> None:
    """PNG and PDF keep the whole-drawing ``neato -n2`` render (here a failing one, so the export fails)."""
    from netviz.layout import LayoutError
    with pytest.raises(LayoutError, match="neato"):
        export_drawing(chain_training(6), tmp_path / "c.png")


def test_names_graphviz_leaves_as_they_are(tmp_path: Path) -> None:
    """Blob names holding ``&amp;``, ``<``, ``-`` or quotes: every node and every edge of the ladder is drawn
    (a node is found by its group id: graphviz writes a name's ``&amp;`` unescaped, so its title read back
    named another node, whose edges between columns were then dropped)."""
    from engine.model.opdef import create_operator as op
    from netviz.drawing import DrawOptions, draw_net
    from netviz.export import backward_drawing_net
    from proto import caffe2_pb2

    ops = [op("FC", ["data", "w&amp;1", "b-1"], "fc&amp;<1>"), op("Relu", "fc&amp;<1>", 'r"1'),
           op("AveragedLoss", 'r"1', "loss")]
    net, n_fwd, origin = backward_drawing_net(caffe2_pb2.NetDef(name="odd", op=ops), "loss")
    d = draw_net(net, DrawOptions(), n_fwd, origin)
    r = export_drawing(d, tmp_path / "odd.svg")
    kinds = [g.get("class") for g in ET.parse(r.path).getroot().iter(f"{SVG}g")]
    assert "ladder in" in r.layout and kinds.count("node") == len(d.nodes) and kinds.count("edge") == len(d.edges)


def test_read_piece_gives_node_centres_as_numbers_with_their_roles() -> None:
    """Each node read back from a piece's SVG carries its centre as numbers (graphviz's y up) and its role,
    and :func:`ladder.place` puts it there: nothing is formatted into a json0 ``pos`` string and parsed back."""
    import subprocess

    from netviz import ladder_svg
    d = chain_training(4)
    p = ladder.split(d, 1)
    (dot,) = ladder.piece_dots(d, p)
    svg = subprocess.run(["dot", "-Tsvg"], input=dot.encode(), stdout=subprocess.PIPE, check=True).stdout.decode()
    g, _ = ladder_svg.read_piece(d, svg, p.index)
    nodes = [o for o in g["objects"] if "xy" in o]
    assert {o["name"] for o in nodes} == set(d.nodes)
    for o in nodes:
        x, y = o["xy"]
        assert isinstance(x, float) and isinstance(y, float) and y >= 0 and "pos" not in o
        assert o["role"] == d.nodes[o["name"]].role and p.index.ids[o["at"]] == o["name"]
    placed = ladder.place(d, p, [g])
    shifts = placed.moves[0][2]
    for o in nodes:
        cx, cy, w, h = placed.box(o["name"])
        assert cx == pytest.approx(o["xy"][0] + placed.moves[0][0] + shifts.get(o["role"], 0.0))
        assert w == pytest.approx(o["width"] * 72) and h > 0


def test_compose_writes_each_pieces_bodies_as_they_were_read() -> None:
    """compose_svg gives each element its own opening tag (its place) and then the body read from the piece
    as the very string read (no copy: at 10k ops the bodies are 22 MB read long before, out of the cache), and
    the SVG it makes parses, with every node where ``place`` put it."""
    import subprocess

    from netviz import ladder_svg
    d = chain_training(6)
    p = ladder.split(d, 2)
    svgs = [subprocess.run(["dot", "-Tsvg"], input=t.encode(), stdout=subprocess.PIPE, check=True).stdout.decode()
            for t in ladder.piece_dots(d, p)]
    parts = [ladder_svg.read_piece(d, s, p.index) for s in svgs]
    placed = ladder.place(d, p, [g for g, _ in parts])
    lines = ladder_svg.compose_svg(d, placed, [items for _, items in parts], None)
    bodies = [rest for _, items in parts for _, _, rest in items]
    ids = {id(line) for line in lines}
    assert bodies and all(id(rest) in ids for rest in bodies)
    groups = [g for g in ET.fromstring("\n".join(lines)).iter(f"{SVG}g") if g.get("class") == "node"]
    assert len(groups) == len(d.nodes)
