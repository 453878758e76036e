"""The layout memo (:mod:`netviz.ladder_memo`): a piece it serves from an earlier piece's drawing is byte for
byte the SVG ``dot`` gives for that piece laid out alone (the first graph of a ``dot`` process: later ones vary
run to run), on a repetitive net (where it serves most pieces) and on the zoo's nets (where it serves few or
none); a piece that differs in anything but its texts' digits goes to ``dot``."""
from __future__ import annotations

import math
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from benchmarks.bench_graph import grad_chain
from netviz import ladder, ladder_memo, ladder_svg
from netviz.drawing import DrawOptions, Drawing, draw_net, ops_only
from netviz.export import BIG_DRAWING, backward_drawing_net
from netviz.graphviz_support import find_program
from tests.netviz.test_export_ladder import ROOT, backward_drawing, chain_training

pytestmark = pytest.mark.skipif(find_program("dot") is None, reason="graphviz dot not installed")


def alone(dot: str) -> bytes:
    """`dot`'s SVG of one graph laid out alone (a fresh process: reproducible)."""
    return subprocess.run([find_program("dot") or "dot", "-Tsvg"], input=dot.encode(), capture_output=True,
                          check=True).stdout


def memo_run(dots: list[str]) -> tuple[dict[int, str], list[int]]:
    """Each piece's SVG through the memo (the pieces it sends laid out alone, one by one), and the pieces sent."""
    sent: list[int] = []
    got: dict[int, str] = {}

    def stream(texts: Iterable[str], take: Callable[[int, bytes | str], None]) -> None:
        for j, text in enumerate(texts):
            sent.append(dots.index(text))
            take(j, alone(text))

    def take(k: int, out: bytes | str | ladder_memo.Served) -> None:
        got[k] = out.text() if isinstance(out, ladder_memo.Served) else out.decode() if isinstance(out, bytes) else out

    ladder_memo.memoized(stream)(dots, take)
    return got, sent


def pieces(d: Drawing) -> list[str]:
    """The piece DOTs an SVG export of `d` lays out (ops-only when big, as :func:`netviz.export._lay_out` cuts)."""
    d = ops_only(d) if len(d.nodes) > BIG_DRAWING and d.options.mode != "minimal" else d
    return ladder.piece_dots(d, ladder.split(d, math.ceil(len(d.nodes) / ladder.PIECE_NODES)))


def check_served_as_dot_draws(dots: list[str]) -> int:
    """Every piece the memo serves is ``dot``'s own SVG of it; returns how many it served."""
    got, sent = memo_run(dots)
    assert sorted(got) == list(range(len(dots)))
    served = [k for k in range(len(dots)) if k not in sent]
    for k in served:
        assert got[k] == alone(dots[k]).decode(), f"piece {k}"
    return len(served)


def chain_drawing(n: int) -> Drawing:
    """The bench's chain (`n` - 1 Relus and a loss) with its backward pass, drawn."""
    net, n_fwd, origin = backward_drawing_net(grad_chain(n), "loss")
    return draw_net(net, DrawOptions(), n_fwd, origin)


def test_memo_serves_the_chains_repeated_pieces_exactly_as_dot_draws_them() -> None:
    dots = pieces(chain_drawing(1000))
    assert len(dots) == 16 and check_served_as_dot_draws(dots) == 8


def test_memo_serves_a_training_chain_with_its_optimizer_column() -> None:
    dots = pieces(chain_training(300))
    assert len(dots) == 24 and check_served_as_dot_draws(dots) == 9


@pytest.mark.parametrize("net", ["resnet50", "inception_v2", "lstm"])
def test_memo_on_real_nets_gives_what_dot_gives(zoo: Path, net: str) -> None:
    """What it serves on a real net (ResNet-50's pieces are all different graphs) is dot's own drawing."""
    path = ROOT / "examples" / "lstm" / "predict_net.pb" if net == "lstm" else zoo / net / "predict_net.pbtxt"
    check_served_as_dot_draws(pieces(backward_drawing(path)))


def test_a_piece_differing_in_more_than_its_texts_digits_goes_to_dot() -> None:
    base = 'digraph "p1" {{ node [fontsize="{size}"]; "op{a}" [label="Relu (op#{a})", id="n{a}"]; ' \
           '"op{b}" [label="b{b}", id="n{b}"]; "op{a}" -> "op{b}" [id="e{a}"]; }}'
    same = base.format(size=10, a=11, b=12)
    dots = [same, base.format(size=10, a=21, b=22),  # served: its texts' digits alone differ
            base.format(size=12, a=31, b=32),        # a font size differs: laid out by dot
            base.format(size=10, a=44, b=44),        # op11 and op12 both op44: one node, not two
            base.format(size=10, a=51, b=52).replace("op#51", "op#59")]  # 11 is 51 in a name, 59 in a label
    got, sent = memo_run(dots)
    assert sent == [0, 2, 3, 4]
    assert got[1] == alone(dots[1]).decode() and "op#21" in got[1] and "op#11" not in got[1]


def test_a_piece_in_another_font_than_the_probed_one_goes_to_dot() -> None:
    """The probe measured the drawings' font (ladder_memo.FONT) only: a repeated piece naming another goes to dot."""
    base = 'digraph "p1" {{ node [fontname="{font}"]; "op{a}" [label="Relu (op#{a})"]; }}'
    dots = [base.format(font=f, a=a) for f in (ladder_memo.FONT, "Courier") for a in (11, 22)]
    assert memo_run(dots)[1] == [0, 2, 3]


def test_no_memo_where_digits_are_not_tabular(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ladder_memo, "digits_are_tabular", lambda fontname="Helvetica": False)
    dots = pieces(chain_drawing(1000))  # NOTE: 8 of its 16 pieces are served where digits are tabular
    assert memo_run(dots)[1] == list(range(len(dots)))


def test_digits_are_tabular_in_the_font_dot_uses_here() -> None:
    """The memo's premise, measured (DejaVu Sans, what pango gives for Helvetica here, has tabular digits)."""
    assert ladder_memo.digits_are_tabular()


@pytest.mark.parametrize("text", ["x&#49;y", "caf\u00e9 1", "<b>1</b>"])
def test_texts_the_memo_cannot_map_go_to_dot(text: str) -> None:
    label = text if text.startswith("<") else f'"{text}"'
    assert ladder_memo.piece_key(f'digraph "p" {{ "a1" [label={label}]; }}') is None


def test_export_with_and_without_memo_draws_every_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The export through the memo writes every node and edge of the chain, titled by its own name."""
    from tests.netviz.test_export_ladder_svg import node_boxes
    from netviz.export import export_drawing
    d = chain_drawing(400)
    titles = []
    for memo in (True, False):
        monkeypatch.setattr(ladder_svg, "MEMO", memo)
        out = tmp_path / f"c{memo}.svg"
        export_drawing(d, out)
        titles.append(sorted(node_boxes(out)))
    assert titles[0] == titles[1] == sorted(ops_only(d).nodes)


def test_the_font_is_probed_only_when_a_piece_repeats(zoo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ResNet-50's pieces are all different graphs: its export runs no probe ``dot`` for the memo."""
    probes: list[str] = []
    monkeypatch.setattr(ladder_memo, "digits_are_tabular", lambda fontname="Helvetica": probes.append(fontname) or True)
    got, sent = memo_run(pieces(backward_drawing(zoo / "resnet50" / "predict_net.pbtxt")))
    assert sent == list(range(len(got))) and probes == []
    memo_run(pieces(chain_drawing(1000)))
    assert probes


def test_an_unnamed_graph_goes_to_dot() -> None:
    """graphviz titles a graph without a name ``%3``: a number the memo would take for the text ``a3``'s."""
    dots = [f'digraph {{ "a{i}" [label="x{i}"]; "a{i}" -> "b{i}"; }}' for i in (3, 4)]
    got, sent = memo_run(dots)
    assert sent == [0, 1] and got[1] == alone(dots[1]).decode()


@pytest.mark.parametrize("drawing", [lambda: chain_drawing(1000), lambda: chain_training(300)], ids=["chain", "training"])
def test_a_served_piece_reread_from_its_source_is_what_reading_its_svg_gives(drawing: Callable[[], Drawing]) -> None:
    """:func:`ladder_svg.reread` maps what was read from a served piece's source; reading the piece's own SVG
    (:func:`ladder_svg.read_piece`) gives the same boxes, names and element bodies."""
    d = drawing()
    d = ops_only(d) if len(d.nodes) > BIG_DRAWING else d
    p = ladder.split(d, math.ceil(len(d.nodes) / ladder.PIECE_NODES))
    dots = ladder.piece_dots(d, p)
    read: dict[int, tuple] = {}
    served: list[int] = []

    def take(k: int, out: bytes | str | ladder_memo.Served) -> None:
        if isinstance(out, ladder_memo.Served):
            served.append(k)
            bodies = out.cut("\x00".join(rest for _, _, rest in read[out.source][1]))
            mapped = ladder_svg.reread(read[out.source], out, bodies, p.index)
            assert mapped == ladder_svg.read_piece(d, out.text(), p.index), f"piece {k}"
            read[k] = mapped
        else:
            read[k] = ladder_svg.read_piece(d, out.decode() if isinstance(out, bytes) else out, p.index)

    ladder_memo.memoized(lambda texts, got: [got(j, alone(t)) for j, t in enumerate(texts)])(dots, take)
    assert sorted(read) == list(range(len(dots))) and len(served) >= len(dots) // 3
