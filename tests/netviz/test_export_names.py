"""Exports of a net whose op and blob names hold what DOT, XML and graphviz's escapes treat specially
(``\\``, a newline, ``&``, ``<``, quotes, non-ASCII, spaces, a very long name): every format is written
and holds every node, with and without the backward ladder.

Why: a piece's json0 layout names a node as graphviz read it, and graphviz keeps a quoted string's ``\\\\``
as two backslashes, so a node named with a ``\\`` or a newline was never found by name again: it got no
position and ``neato -n2`` refused the whole PNG or PDF."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from engine.model.opdef import create_operator as op
from netviz import ladder
from netviz.drawing import DrawOptions, draw_net
from netviz.export import backward_drawing_net, export_drawing
from proto import caffe2_pb2

SVG = "{http://www.w3.org/2000/svg}"
NAMES = ["back\\slash", "x\\N\\G\\l", "nl\nhere", "a&b", "x<y>", 'q"uote', "it's", "ünï©ødé→λ", "with space",
         "very_long_name_" * 10, "]};"]


def odd_net(backward: bool) -> tuple[caffe2_pb2.NetDef, int | None, list[int | None]]:
    """An FC+Relu chain whose ops and blobs are named from :data:`NAMES`, with its backward pass if asked."""
    ops, x = [], "in&<>"
    for n in NAMES:
        ops += [op("FC", [x, f"w {n}", f"b{n}"], n, name=f"op {n}"), op("Relu", n, n)]
        x = n
    ops.append(op("AveragedLoss", x, "loss"))
    net = caffe2_pb2.NetDef(name="odd \\ net", op=ops)
    if not backward:
        return net, None, []
    return backward_drawing_net(net, "loss")


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_composed_pieces_place_every_node_whatever_its_name(backward: bool) -> None:
    """:func:`ladder.compose` (the PNG/PDF path) pins every node of every piece: found by its number, not by
    the name graphviz gives back."""
    import subprocess

    net, n_fwd, origin = odd_net(backward)
    d = draw_net(net, DrawOptions(), n_fwd, origin)
    p = ladder.split(d, 2)
    layouts = ladder.run_pieces(ladder.piece_dots(d, p), lambda batches: [
        subprocess.run(["dot", "-Tjson0"], input=b.encode(), stdout=subprocess.PIPE, check=True).stdout
        for b in batches])
    placed = ladder.place(d, p, layouts)
    assert all(b is not None for b in placed.pos)
    composed = ladder.compose(d, p, layouts)
    assert sum(line.endswith('"];') and 'pos="' in line and "->" not in line
               for line in composed.splitlines()) == len(d.nodes)


@pytest.mark.parametrize("fmt", ["svg", "png", "pdf", "dot"])
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_odd_names_export_in_every_format(fmt: str, backward: bool, tmp_path: Path) -> None:
    """Every format is written; an SVG parses, its ids are unique and it draws every node."""
    net, n_fwd, origin = odd_net(backward)
    d = draw_net(net, DrawOptions(), n_fwd, origin)
    r = export_drawing(d, tmp_path / f"odd.{fmt}")
    data = r.path.read_bytes()
    assert len(data) > 1000
    if fmt == "png":
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
    elif fmt == "pdf":
        assert data[:5] == b"%PDF-"
    elif fmt == "svg":
        root = ET.fromstring(data)
        ids = [el.get("id") for el in root.iter() if el.get("id")]
        assert len(ids) == len(set(ids))
        assert sum(g.get("class") == "node" for g in root.iter(f"{SVG}g")) == len(d.nodes)


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_svg_titles_are_the_drawing_ids(backward: bool, tmp_path: Path) -> None:
    """Each node's ``<title>`` is its id in the drawing and each edge's ``source->target``, as the one-run
    (``LR``) SVG titles them: graphviz titles a piece's node ``a\\b`` as ``a\\\\b`` and leaves a name's
    ``&amp;`` unescaped, so a script (or a test) reading the titles found another name or none."""
    names = NAMES + ["&amp;"]
    ops, x = [], "in"
    for n in names:
        ops += [op("FC", [x, f"w{n}", f"b{n}"], n), op("Relu", n, n)]
        x = n
    ops.append(op("AveragedLoss", x, "loss"))
    net = caffe2_pb2.NetDef(name="odd", op=ops)
    n_fwd, origin = None, []
    if backward:
        net, n_fwd, origin = backward_drawing_net(net, "loss")
    d = draw_net(net, DrawOptions(), n_fwd, origin)
    r = export_drawing(d, tmp_path / "odd.svg", rankdir="TB")
    groups = list(ET.parse(r.path).getroot().iter(f"{SVG}g"))
    titles = {g.get("class"): [] for g in groups}
    for g in groups:
        titles[g.get("class")].append(g.findtext(f"{SVG}title"))
    assert sorted(titles["node"]) == sorted(d.nodes)
    assert set(titles["edge"]) <= {f"{e.source}->{e.target}" for e in d.edges}
    assert len(titles["edge"]) == len(d.edges)
