"""Layout: dot positions, edge polylines and cluster boxes, caching, and the time limit."""
from __future__ import annotations

from pathlib import Path

import pytest

from engine.model.modelio import load_net
from engine.model.opdef import create_operator as op
from netviz.drawing import DrawOptions, draw_net
from netviz.export import build_agraph
from engine.errors import GraphError
from netviz.layout import (LayoutError, LayoutTimeout, clear_cache, layout_agraph, layout_dot, layout_net,
                            run_graphviz)
from proto import caffe2_pb2


def chain_with_if() -> caffe2_pb2.NetDef:
    then = caffe2_pb2.NetDef(name="then", op=[op("Relu", "Y", "Z")])
    return caffe2_pb2.NetDef(name="n", op=[op("Relu", "X", "Y"), op("If", "c", [], then_net=then),
                                           op("Relu", "Y", "W")])


def test_positions_edges_and_clusters() -> None:
    d = draw_net(chain_with_if(), DrawOptions("minimal", rankdir="LR"))
    lay = layout_agraph(build_agraph(d))
    assert set(lay.nodes) == set(d.nodes)
    assert lay.nodes["op0"].x < lay.nodes["op2"].x  # LR: data flows rightwards
    assert lay.nodes["op0"].label == "Relu (op#0)" and lay.nodes["op0"].width > 0
    assert sorted((e.tail, e.head) for e in lay.edges) == sorted((e.source, e.target) for e in d.edges)
    assert all(len(e.points) >= 4 and e.arrow for e in lay.edges)
    (cluster,) = lay.clusters
    x0, y0, x1, y1 = cluster.bbox
    inner = lay.nodes["op1:then_net/op0"]
    assert cluster.label == "If op#1 then_net: then" and x0 < inner.x < x1 and y0 < inner.y < y1
    assert 0 < lay.width and 0 < lay.height


def test_rankdir_tb_flows_down() -> None:
    lay = layout_agraph(build_agraph(draw_net(chain_with_if(), DrawOptions("minimal", rankdir="TB"))))
    assert lay.nodes["op0"].y > lay.nodes["op2"].y  # graphviz y grows upwards


def test_cached_by_dot_text() -> None:
    clear_cache()
    dot = build_agraph(draw_net(chain_with_if())).string()
    assert layout_dot(dot) is layout_dot(dot)


def test_time_limit(zoo: Path) -> None:
    dot = build_agraph(draw_net(load_net(zoo / "densenet121" / "predict_net.pbtxt"))).string()
    with pytest.raises(LayoutTimeout, match="longer than 0.05 s"):
        layout_dot(dot, timeout=0.05)


def test_graphviz_errors_are_one_line() -> None:
    with pytest.raises(LayoutError, match="not found on PATH"):
        run_graphviz("digraph { a }", "svg", prog="no-such-graphviz-prog")
    with pytest.raises(LayoutError, match="failed") as e:
        run_graphviz("digraph { a -> }", "svg")
    assert "\n" not in str(e.value)


def test_graphviz_error_over_lines_says_what_failed() -> None:
    """``neato -n2`` reports an unplaced node over two lines; the one-line error holds both (the node's name
    and why), not just the last line."""
    with pytest.raises(LayoutError) as e:
        run_graphviz('digraph g { "a\\b" [pos="1,1!"]; c [label=x]; }', "svg", prog="neato", extra=["-n2"])
    msg = str(e.value)
    assert "\n" not in msg and "node c" in msg and "no position" in msg and "-n flag" in msg


def test_layout_per_subnet(zoo: Path) -> None:
    net = load_net(zoo / "mask_rcnn_2go_int8" / "model.pbtxt")
    lay = layout_net(net, [(99, "else_net")])
    assert sum(name.startswith("op") for name in lay.nodes) == 28 and not lay.clusters
    assert layout_net(net, [(99, "else_net")]) is lay
    assert len(layout_net(net, [(99, "then_net")]).nodes) == 0
    with pytest.raises(GraphError, match="op #98 has no subnet 'then_net'"):
        layout_net(net, [(98, "then_net")])


def test_stream_reads_finished_graphs_while_the_next_are_written() -> None:
    """run_graphviz_stream hands graph 0's drawing back before graph 3 is even written (both cores work: the
    pieces' dot runs used to start only once every piece was written), every output whole and in its slot."""
    import time

    from netviz.layout import run_graphviz_stream

    events: list[str] = []
    outs: dict[int, bytes] = {}

    def dots():
        for k in range(6):
            if k == 2:
                time.sleep(1.0)  # NOTE: graph 0 is long drawn by now; it must come back before graph 3 is made
            events.append(f"made {k}")
            yield f'digraph "g{k}" {{ a{k} -> b{k}; }}'

    def take(k: int, out: bytes) -> None:
        events.append(f"took {k}")
        outs[k] = out

    run_graphviz_stream(dots(), take, 2, "svg", timeout=30)
    assert events.index("took 0") < events.index("made 3"), events
    assert sorted(outs) == list(range(6))
    assert all(out.rstrip().endswith(b"</svg>") and f"<title>g{k}</title>".encode() in out for k, out in outs.items())


def test_stream_reports_a_failing_program(tmp_path: Path) -> None:
    """A graph dot refuses fails the stream in one line, as run_graphviz_many does."""
    from netviz.layout import run_graphviz_stream
    with pytest.raises(LayoutError, match="graphviz 'dot' failed"):
        run_graphviz_stream(iter(["digraph { a -> }"]), lambda k, out: None, 1, "svg", timeout=30)


def test_stream_keeps_its_time_limit_while_outputs_keep_coming() -> None:
    """The limit holds even when each graph comes back within the poll interval: the clock was read only
    when no output had come for 50 ms, so a stream of quick pieces ran past any --timeout."""
    from netviz.layout import run_graphviz_stream

    chain = " ".join(f"n{i} -> n{i + 1};" for i in range(150))
    dots = [f'digraph "g{k}" {{ {chain} }}' for k in range(80)]
    with pytest.raises(LayoutTimeout):
        run_graphviz_stream(iter(dots), lambda k, out: None, 2, "svg", timeout=0.1)
