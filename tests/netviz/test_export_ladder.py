"""The backward ladder, read back from the exported SVG's coordinates: each gradient op on its forward op's
rank, forward edges running down and gradient edges up inside each piece, optimizer ops a third column in
their own colour, the pieces cut small enough that ``dot`` never sees the whole net, one legend everywhere."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from engine.model.modelio import load_net
from netviz import ladder
from netviz import style as S
from netviz.cli import main
from netviz.drawing import DrawOptions, Drawing, draw_net, ops_only
from netviz.export import BIG_DRAWING, backward_drawing_net, build_agraph, export_drawing
from tests.netviz.test_export_big import training_net

SVG = "{http://www.w3.org/2000/svg}"
ROOT = Path(__file__).resolve().parents[2]
COLUMN = re.compile(r"cluster_(\d+)_(forward|gradient|optimizer)")


TRANSLATE = re.compile(r"translate\((-?[\d.]+)[ ,](-?[\d.]+)\)")


def placed_groups(el: ET.Element, at: tuple[float, float] = (0.0, 0.0)) -> list[tuple[ET.Element, tuple[float, float]]]:
    """Every ``<g>`` under `el` with where its contents are drawn: the sum of its and its ancestors' ``translate``s
    (a composed SVG moves each piece's elements by their group's transform)."""
    out = []
    for c in el:
        if c.tag == f"{SVG}g":
            m = TRANSLATE.search(c.get("transform", ""))
            here = (at[0] + float(m.group(1)), at[1] + float(m.group(2))) if m else at
            out += [(c, here), *placed_groups(c, here)]
    return out


def svg_boxes(path: Path) -> tuple[dict[str, tuple[float, float]], dict[str, tuple[float, float, float, float]],
                                   dict[str, str]]:
    """(node id → centre, cluster name → (x0, y0, x1, y1), node id → fill) in SVG units (y grows down)."""
    nodes, clusters, fills = {}, {}, {}
    for g, (tx, ty) in placed_groups(ET.parse(path).getroot()):
        shape = next((c for c in g if c.tag in (f"{SVG}polygon", f"{SVG}path", f"{SVG}ellipse")), None)
        if shape is None or g.get("class") not in ("node", "cluster"):
            continue
        if shape.tag == f"{SVG}ellipse":
            cx, cy = float(shape.get("cx", 0)), float(shape.get("cy", 0))
            pts = [(cx, cy)]
        else:
            pts = [(float(a), float(b)) for a, b in
                   re.findall(r"(-?[\d.]+),(-?[\d.]+)", shape.get("points") or shape.get("d") or "")]
        xs, ys = [x + tx for x, _ in pts], [y + ty for _, y in pts]
        title = g.findtext(f"{SVG}title") or ""
        if g.get("class") == "node":
            nodes[title] = ((min(xs) + max(xs)) / 2, (min(ys) + max(ys)) / 2)
            fills[title] = (shape.get("fill") or "").upper()
        else:
            clusters[title] = (min(xs), min(ys), max(xs), max(ys))
    return nodes, clusters, fills


def piece_of(nodes: dict[str, tuple[float, float]], clusters: dict[str, tuple[float, float, float, float]]
             ) -> dict[str, tuple[int, str]]:
    """Node id → (piece, column) by the column cluster its centre lies in."""
    cols = [(int(m.group(1)), m.group(2), box) for name, box in clusters.items() if (m := COLUMN.fullmatch(name))]
    out = {}
    for nid, (x, y) in nodes.items():
        for k, role, (x0, y0, x1, y1) in cols:
            if x0 <= x <= x1 and y0 <= y <= y1:
                out[nid] = (k, role)
    return out


def check_ladder(d: Drawing, svg: Path) -> None:
    """The ladder's promises on `d` as drawn in `svg` (the assertions of both nets below)."""
    nodes, clusters, _ = svg_boxes(svg)
    assert set(nodes) == set(d.nodes)
    where = piece_of(nodes, clusters)
    joins = set(ladder.joining_ops(d))
    assert {d.nodes[j].op_type for j in joins} <= {"Sum"}
    links = [e for e in d.edges if e.kind == "forward_link" and e.source not in joins]
    assert links
    for e in links:  # each gradient op on the rank of the forward op it differentiates, to its right
        (gx, gy), (fx, fy) = nodes[e.source], nodes[e.target]
        assert abs(gy - fy) < 0.5 and gx > fx, (d.nodes[e.source].label, d.nodes[e.target].label)
        assert where[e.source][0] == where[e.target][0] and where[e.source][1] == "gradient"
    counted = {"forward": 0, "gradient": 0}
    for e in d.edges:
        s, t = d.nodes[e.source], d.nodes[e.target]
        if (e.kind != "data" or s.role != t.role or s.role not in counted or s.path or t.path
                or where.get(e.source, (None,))[0] != where.get(e.target, (None,))[0]):
            continue
        dy = nodes[e.target][1] - nodes[e.source][1]
        assert (dy > 0) if s.role == "forward" else (dy < 0), (s.role, s.label, t.label, dy)
        counted[s.role] += 1
    assert counted["forward"] > 10 and counted["gradient"] > 10, counted


def backward_drawing(path: Path) -> Drawing:
    """The drawing `netviz export PATH --backward` lays out (ops-only, names on edges, when big)."""
    net, n_fwd, origin = backward_drawing_net(load_net(path), None)
    d = draw_net(net, DrawOptions(), n_fwd, origin)
    return ops_only(d) if len(d.nodes) > BIG_DRAWING else d


def test_resnet50_backward_ladder_from_svg(zoo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, out = zoo / "resnet50" / "predict_net.pbtxt", tmp_path / "r50.svg"
    assert main(["export", str(path), "--backward", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "ladder in" in err and "sfdp" not in err
    d = backward_drawing(path)
    assert not any(n.kind == "blob" and n.blob.endswith("_grad") and n.version for n in d.nodes.values()
                   if any(e.source == n.id for e in d.edges))  # ops-only: read blobs are edge names
    check_ladder(d, out)
    assert len(ladder.joining_ops(d)) == 16  # the Sums of the 16 residual joins


def test_lstm_backward_ladder_from_svg(tmp_path: Path) -> None:
    """The LSTM training net (its own backward pass and SGD): ladder as ResNet-50's, optimizer ops gold, right."""
    path, out = ROOT / "examples" / "lstm" / "predict_net.pb", tmp_path / "lstm.svg"
    assert main(["export", str(path), "--backward", "-o", str(out)]) == 0
    d = backward_drawing(path)
    check_ladder(d, out)
    nodes, clusters, fills = svg_boxes(out)
    opt = [n for n in d.ops() if n.role == "optimizer" and not n.path]
    grad = [n for n in d.ops() if n.role == "gradient" and not n.path]
    assert opt and all(fills[n.id] == S.GOLD for n in opt) and all(fills[n.id] == S.RED for n in grad)
    assert min(nodes[n.id][0] for n in opt) > max(nodes[n.id][0] for n in grad)


def chain_training(n: int) -> Drawing:
    """`n` FC+Relu layers, their backward pass and an SGD step per parameter (test_export_big's net), drawn."""
    net, n_fwd, origin = training_net(n)
    return draw_net(net, DrawOptions(), n_fwd, origin)


def test_pieces_stay_small_and_every_node_is_placed(tmp_path: Path) -> None:
    """A 300-layer net is cut into pieces of at most ~PIECE_NODES nodes each (dot never sees the whole), and
    the composed SVG still holds every node, each forward op and its gradient op in one piece."""
    d = chain_training(300)
    p = ladder.split(d, None)
    sizes = [list(p.of.values()).count(k) for k in range(p.count)]
    assert p.count >= len(d.nodes) // ladder.PIECE_NODES and max(sizes) <= 2 * ladder.PIECE_NODES, sizes
    links = [e for e in d.edges if e.kind == "forward_link"]
    assert all(p.of[e.source] == p.of[e.target] for e in links)
    r = export_drawing(d, tmp_path / "c.svg")
    assert "ladder in" in r.layout and set(svg_boxes(r.path)[0]) == set(ops_only(d).nodes)


def test_one_legend_in_svg_and_dot(tmp_path: Path) -> None:
    d = chain_training(2)
    path = export_drawing(d, tmp_path / "c.svg").path
    svg = " ".join(ET.parse(path).getroot().itertext()) + path.read_text()
    dot = build_agraph(d).string()
    for name, *_ in S.LEGEND:
        assert name.split()[-1] in svg and name.split()[-1] in dot
    assert S.GOLD.lower() in svg.lower() and "⚑" in svg and "⚑" in dot


def test_help_says_what_the_layout_does(capsys: pytest.CaptureFixture[str]) -> None:
    """``export --help`` names dot's real share of the budget (it said half, a quarter with --backward)."""
    from netviz.export import DOT_SHARE
    with pytest.raises(SystemExit):
        main(["export", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"{round(DOT_SHARE * 100)} % of the time budget" in text
    assert "half" not in text and "quarter" not in text and "no `sfdp` fallback" in text


def test_caffe2_fix_mark_on_linted_ops(tmp_path: Path) -> None:
    """Ops the lint flags (Caffe2 computes other values or refuses) end in ⚑ in the export, as in the op list."""
    out = tmp_path / "lstm.svg"
    assert main(["export", str(ROOT / "examples" / "lstm" / "predict_net.pb"), "--backward", "-o", str(out)]) == 0
    labels = [t for t in ET.parse(out).getroot().itertext() if "(op#" in t]
    assert any(t.startswith("RecurrentNetwork (op#") and t.endswith(S.FIX_MARK) for t in labels)
    assert sum(t.endswith(S.FIX_MARK) for t in labels) < len(labels) / 2


def test_densenet121_backward_once_written_out_of_place(zoo: Path) -> None:
    """The zoo DenseNet-121 is refused (each batch norm's affine Add overwrites the blob its Mul read, which
    the Mul's gradient needs; Caffe2's AddGradientOperators refuses it as well); the bench's row draws it with
    those 121 Adds writing fresh names, and then its backward pass builds: 1,395 ops, as Caffe2 builds it."""
    from benchmarks.bench_graph import out_of_place
    from engine.errors import GradientError

    net = load_net(zoo / "densenet121" / "predict_net.pbtxt")
    with pytest.raises(GradientError, match="conv5_blk/bn"):
        backward_drawing_net(net, None)
    fixed, renamed = out_of_place(net)
    full, n_forward, _ = backward_drawing_net(fixed, None)
    assert renamed == 121 and {op.type for op, old in zip(fixed.op, net.op) if op.output != old.output} == {"Add", "Relu"}
    assert n_forward == len(net.op) == 668 and len(full.op) == 1395
    assert out_of_place(load_net(zoo / "resnet50" / "predict_net.pbtxt"))[1] == 0  # nothing to rewrite there


def test_columns_come_from_the_sections_alone() -> None:
    """The ladder's columns (top_roles) read only the training sections (sections_of, no pairing of backward
    ops: that regenerated the gradient pass, a third of drawing a 10k-op chain's backward); they are the
    sections split_training_net gives, on a training net with an optimizer and on a regenerated backward pass."""
    from engine.autodiff.training import OPTIMIZER, sections_of, split_training_net
    from netviz.drawing import top_roles

    lstm = load_net(ROOT / "examples" / "lstm" / "predict_net.pb")
    regenerated = chain_training(3)
    for net, n_fwd in ((lstm, split_training_net(lstm).sections.index("backward")),
                       (backward_drawing_net(load_net(ROOT / "examples" / "mlp" / "predict_net.pb"), None)[0], None)):
        sections = split_training_net(net).sections
        assert sections_of(net) == sections
        n_fwd = sections.index("backward") if n_fwd is None else n_fwd
        roles = top_roles(net, n_fwd)
        assert [r == "optimizer" for r in roles[n_fwd:]] == [s == OPTIMIZER for s in sections[n_fwd:]]
    assert "optimizer" in top_roles(lstm, split_training_net(lstm).sections.index("backward"))
    assert {n.role for n in regenerated.ops()} == {"forward", "gradient", "optimizer"}


class _CountedSizes(list):
    """A list of piece sizes that counts how often it is walked."""

    walks = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        type(self).walks += 1
        return super().__iter__()


def _grid_by_definition(sizes: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Every candidate row length's corners built and scored: what :func:`ladder._grid` must choose."""
    import math
    best = None
    for per_row in range(1, len(sizes) + 1):
        corners, x, y, row_h, width = [], 0.0, 0.0, 0.0, 0.0
        for k, (w, h) in enumerate(sizes):
            if k and k % per_row == 0:
                x, y, row_h = 0.0, y + row_h + ladder.GAP_Y, 0.0
            corners.append((x, y))
            x += w + ladder.GAP_X
            width, row_h = max(width, x - ladder.GAP_X), max(row_h, h)
        score = abs(math.log(max(width, 1.0) / max(y + row_h, 1.0) / ladder.RATIO))
        if best is None or score < best[0]:
            best = (score, corners)
        if width > ladder.RATIO * (y + row_h) * 2:
            break
    return best[1] if best else []


def test_grid_places_pieces_as_defined_walking_them_a_few_times() -> None:
    """The pieces' grid is the best-scoring row length's, and the sizes are walked a fixed number of times,
    not once per candidate (155 pieces of a 10k-op chain's ladder: ~50 candidates, quadratic)."""
    import random
    rng = random.Random(43)
    for _ in range(300):
        sizes = [(rng.choice([0.0, rng.uniform(0, 900)]), rng.choice([0.0, rng.uniform(0, 9000)]))
                 for _ in range(rng.randint(0, 40))]
        assert ladder._grid(sizes) == _grid_by_definition(sizes)
    tall = _CountedSizes([(290.0, 4550.0)] * 155)
    corners = ladder._grid(tall)
    assert corners == _grid_by_definition(list(tall)) and len({x for x, _ in corners}) > 20
    assert _CountedSizes.walks <= 4 + 1  # NOTE: + the reference's own walk above


class _CountingNodes(dict):
    """A drawing's node dict that counts look-ups by name (``d.nodes[nid]``)."""

    looked_up = 0

    def __getitem__(self, key: str) -> object:
        type(self).looked_up += 1
        return super().__getitem__(key)


def test_ladder_stages_look_nodes_up_by_number_not_by_name(tmp_path: Path) -> None:
    """Cutting, writing each piece's DOT and placing the pieces look no node up by name in the drawing: a
    look-up in a 20k-60k-entry dict left the L2 cache at 10k ops (its cost per op grew with the net); the
    stages work on :class:`ladder.Index`'s numbers, and the drawing they give is the one the names gave."""
    import subprocess

    from netviz import ladder_svg
    d = ops_only(chain_training(40))
    _CountingNodes.looked_up = 0
    d.nodes = _CountingNodes(d.nodes)
    p = ladder.split(d, 3)
    dots = ladder.piece_dots(d, p)
    svgs = [subprocess.run(["dot", "-Tsvg"], input=t.encode(), stdout=subprocess.PIPE, check=True).stdout.decode()
            for t in dots]
    parts = [ladder_svg.read_piece(d, s, p.index) for s in svgs]
    placed = ladder.place(d, p, [g for g, _ in parts])
    lines = ladder_svg.compose_svg(d, placed, [items for _, items in parts], None)
    assert _CountingNodes.looked_up == 0
    assert p.count == 3 and len(dots) == 3 and all(f'id="n{p.index.ids.index(nid)}"' in "".join(dots) for nid in d.nodes)
    assert all(b is not None for b in placed.pos) and sum(line.count('class="node"') for line in lines) == len(d.nodes)
    ends = {(e.source, e.target) for e in d.edges}
    assert {(p.index.ids[s], p.index.ids[t]) for s, t in zip(p.index.src, p.index.dst)} == ends


def test_ops_only_numbers_what_it_keeps_without_looking_names_up() -> None:
    """:func:`ops_only_indexed` walks the drawing by node number (no look-up by name: see the test above) and
    hands the export the :class:`Index` of what it drew, the one :func:`index` makes of it."""
    from netviz.drawing import index, ops_only_indexed
    d = chain_training(40)
    _CountingNodes.looked_up = 0
    d.nodes = _CountingNodes(d.nodes)
    out, ix = ops_only_indexed(d)
    assert _CountingNodes.looked_up == 0
    assert ix == index(out) and len(ix.src) == len(out.edges) > 0
    read = {e.source for e in out.edges if e.kind == "data"}
    assert not any(n.kind == "blob" and n.version and n.id in read for n in out.nodes.values())  # names on edges
    named = [e for e in out.edges if dict(e.style.extra).get("xlabel")]
    assert named and all(out.nodes[e.source].kind == "op" for e in named)


def test_edge_names_stay_inside_the_drawing(zoo: Path, tmp_path: Path) -> None:
    """ResNet-50 --backward (ops-only, blob names on the edges): every text starts right of the drawing's left
    edge.  The forward column's edge names lie left of its box; stacking the columns' boxes alone put 18 of
    them at negative x, cut off in every viewer (width taken at 0.45 em a character: an underestimate)."""
    out = tmp_path / "r50.svg"
    assert main(["export", str(zoo / "resnet50" / "predict_net.pbtxt"), "--backward", "-o", str(out)]) == 0
    root = ET.parse(out).getroot()
    graph = next(c for c in root if c.tag == f"{SVG}g")
    ox = float(TRANSLATE.search(graph.get("transform", "")).group(1))
    outside = []
    for g, (tx, _) in placed_groups(graph):
        for t in g.findall(f"{SVG}text"):
            if t.get("text-anchor") == "middle":
                left = float(t.get("x", 0)) + tx + ox - 0.45 * float(t.get("font-size", 10)) * len(t.text or "") / 2
                if left < 0:
                    outside.append((t.text, round(left)))
    assert not outside, outside


def test_edge_names_stay_inside_the_composed_png_drawing(zoo: Path) -> None:
    """The PNG/PDF path (json0 pieces composed for ``neato -n2``): each edge name's left end is right of the
    drawing's left edge (ResNet-50 --backward had them centred at x 13-16, their left halves cut off)."""
    import math
    import subprocess
    d = backward_drawing(zoo / "resnet50" / "predict_net.pbtxt")
    p = ladder.split(d, max(1, math.ceil(len(d.nodes) / ladder.PIECE_NODES)))
    layouts = ladder.run_pieces(ladder.piece_dots(d, p), lambda batches: [
        subprocess.run(["dot", "-Tjson0"], input=b.encode(), stdout=subprocess.PIPE, check=True).stdout
        for b in batches])
    lines = ladder.compose(d, p, layouts).splitlines()
    found = [re.search(r'xlabel="([^"]*)".*xlp="(-?[\d.]+),', line) for line in lines]
    lefts = [float(m.group(2)) - 0.45 * 8 * len(m.group(1)) / 2 for m in found if m]
    assert len(lefts) > 100 and min(lefts) >= 0, min(lefts)
