"""Export: net_drawer-compatible node/edge counts per mode, styles, clusters, focus, files that parse."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

import pygraphviz as pgv
import pytest

from engine.errors import BlobNotFoundError, GraphError
from engine.model.modelio import load_net
from engine.model.opdef import create_operator as op
from netviz import style as S
from netviz.drawing import MODES, DrawOptions, draw_net, focus
from netviz.export import ExportError, build_agraph, drawing_json, export_drawing, export_net
from proto import caffe2_pb2

SVG = "{http://www.w3.org/2000/svg}"


def tiny(*ops: caffe2_pb2.OperatorDef, name: str = "tiny") -> caffe2_pb2.NetDef:
    return caffe2_pb2.NetDef(name=name, op=list(ops))


def net_drawer_counts(net: caffe2_pb2.NetDef) -> tuple[int, int, int, int]:
    """(full nodes, full edges, minimal edges, minimal_dependency edges) by net_drawer's own algorithm."""
    nodes, counts, edges = {}, defaultdict(int), 0
    producer: dict[str, int] = {}
    ancestors: dict[int, set[int]] = {}
    minimal = dependency = 0
    for i, o in enumerate(net.op):
        for name in o.input:
            nodes.setdefault(name, f"{name}{counts[name]}")
            edges += 1
        for name in o.output:
            if name in nodes:
                counts[name] += 1
            nodes[name] = f"{name}{counts[name]}"
            edges += 1
        parents = {producer[n] for n in o.input if n in producer}
        ancestors[i] = set(parents).union(*(ancestors[p] for p in parents))
        minimal += len(parents)
        dependency += sum(all(p not in ancestors[q] for q in parents) for p in parents)
        producer.update(dict.fromkeys(o.output, i))
    n_blobs = sum(counts[n] + 1 for n in nodes)
    return len(net.op) + n_blobs, edges, minimal, dependency


def dot_counts(path: Path) -> tuple[int, int]:
    g = pgv.AGraph(str(path))
    return g.number_of_nodes(), g.number_of_edges()


def test_zoo_counts_per_mode_match_net_drawer(zoo_net: Path, tmp_path: Path) -> None:
    net = load_net(zoo_net)
    nodes, edges, minimal, dependency = net_drawer_counts(net)
    for mode, dep, want in [("full", False, (nodes, edges)), ("ssa", False, (nodes, edges)),
                            ("minimal", False, (len(net.op), minimal)),
                            ("minimal", True, (len(net.op), dependency))]:
        out = tmp_path / f"{mode}{dep}.dot"
        export_net(net, out, DrawOptions(mode, dep, subnets="none"))
        assert dot_counts(out) == want, (mode, dep)


def test_ssa_labels_carry_caffe2_versions() -> None:
    d = draw_net(tiny(op("FC", ["X", "W", "b"], "Y"), op("Relu", "Y", "Y")), DrawOptions("ssa"))
    assert [n.label for n in d.blobs()] == ["X@0", "W@0", "b@0", "Y@1", "Y@2"]
    assert [n.label for n in draw_net(tiny(op("Relu", "Y", "Y"))).blobs()] == ["Y", "Y"]


def test_op_labels_and_styles_are_net_drawers() -> None:
    d = draw_net(tiny(op("Conv", ["X", "w"], "Y", name="conv1"), op("Relu", "Y", "Z")))
    assert [n.label for n in d.ops()] == ["conv1/Conv (op#0)", "Relu (op#1)"]
    a = build_agraph(d)
    conv = a.get_node("op0").attr
    assert (conv["shape"], conv["color"], conv["style"], conv["fontcolor"]) == ("box", "#0F9D58", "filled", "#FFFFFF")
    assert a.get_node("X@0").attr["shape"] == "octagon" and a.graph_attr["rankdir"] == "LR"


def test_minimal_dependency_drops_implied_edges() -> None:
    net = tiny(op("Relu", "X", "A"), op("Relu", "A", "B"), op("Add", ["A", "B"], "C"), op("Sum", ["B", "B"], "D"))
    assert len(draw_net(net, DrawOptions("minimal")).edges) == 4
    kept = {(e.source, e.target) for e in draw_net(net, DrawOptions("minimal", True)).edges}
    assert kept == {("op0", "op1"), ("op1", "op2"), ("op1", "op3")}


def test_backward_ops_are_coloured_and_linked_to_forward(zoo: Path) -> None:
    net = load_net(zoo / "zfnet512" / "predict_net.pbtxt")
    d = draw_net(*_backward(net))
    bw = [n for n in d.ops() if n.backward]
    assert len(bw) == 22 and all(n.style.fill == S.RED for n in bw)
    assert all(n.style.fill == S.GREEN for n in d.ops() if not n.backward)
    inplace = [n for n in d.ops() if n.op_type.startswith("Relu")]  # Relu(X) -> X and its gradient
    assert inplace and all(("peripheries", "2") in n.style.extra for n in inplace)
    assert {n.blob for n in d.blobs() if n.backward} >= {"gpu_0/conv1_w_grad", "gpu_0/softmax_autogen_grad"}
    links = [e for e in d.edges if e.kind == "forward_link"]
    assert len(links) == 21 and all(d.nodes[e.target].op_type + "Gradient" == d.nodes[e.source].op_type
                                    for e in links if d.nodes[e.source].op_type.endswith("Gradient"))
    a = build_agraph(d)
    assert a.get_node(links[0].source).attr["fillcolor"] == S.RED
    assert a.get_edge(links[0].source, links[0].target).attr["style"] == "dashed"


def _backward(net: caffe2_pb2.NetDef) -> tuple:
    from netviz.export import backward_drawing_net
    full, n, origin = backward_drawing_net(net, None)
    return full, DrawOptions(), n, origin


def test_backward_bad_loss_is_blob_not_found(zoo: Path) -> None:
    with pytest.raises(BlobNotFoundError, match="nope"):
        export_net(load_net(zoo / "zfnet512" / "predict_net.pbtxt"), None, backward=True, loss="nope", fmt="json")


def test_int8_mask_rcnn_if_subnets_are_clusters(zoo: Path, tmp_path: Path) -> None:
    net = load_net(zoo / "mask_rcnn_2go_int8" / "model.pbtxt")
    export_net(net, tmp_path / "m.dot")
    a = pgv.AGraph(str(tmp_path / "m.dot"))
    clusters = {s.graph_attr["label"]: s for s in a.subgraphs()}
    assert set(clusters) == {"If op#99 then_net: emptynet", "If op#99 else_net: mask_net"}
    assert len([n for n in clusters["If op#99 else_net: mask_net"].nodes() if n.startswith("op99:")
                and n.attr["shape"] == "box"]) == 28
    assert clusters["If op#99 then_net: emptynet"].number_of_nodes() == 1  # the "(empty then_net)" note
    inline = draw_net(net, DrawOptions(subnets="inline"))
    assert not inline.clusters and len(inline.ops()) == 128
    # inner ops read the outer blobs: xif3_6 is drawn once, before the If
    assert [n.id for n in draw_net(net).blobs() if n.blob == "xif3_6"] == ["xif3_6@1"]


def test_group_scopes_nest_clusters() -> None:
    net = tiny(op("Relu", "X", "a/b/Y"), op("Relu", "a/b/Y", "a/Z"), op("Relu", "a/Z", "W"))
    d = draw_net(net, DrawOptions(group_scopes=True))
    assert [(c.label, c.kind) for c in d.clusters.values()] == [("a/", "scope"), ("b/", "scope")]
    assert d.nodes["op0"].cluster == "|scope:a/b" and d.nodes["op1"].cluster == "|scope:a"
    assert d.nodes["op2"].cluster is None
    assert len(build_agraph(d).subgraphs()[0].subgraphs()) == 1


def test_focus_keeps_the_neighbourhood() -> None:
    net = tiny(*(op("Relu", f"B{i}", f"B{i + 1}") for i in range(6)))
    d = focus(draw_net(net, DrawOptions("minimal")), "#3", 1)
    assert sorted(d.nodes) == ["op2", "op3", "op4"] and d.nodes["op3"].style.color == S.AMBER
    d = focus(draw_net(net), "B3", 1)
    assert sorted(n.label for n in d.ops()) == ["Relu (op#2)", "Relu (op#3)"]
    with pytest.raises(GraphError, match="no op or blob matches"):
        focus(draw_net(net), "nothing", 1)


def test_json_is_net_drawer_shaped() -> None:
    j = drawing_json(draw_net(tiny(op("Conv", ["X", "w"], "Y", name="c1"), op("Relu", "Y", "Y"))))
    assert j["nodes"][0] == {"id": "op0", "label": "c1/Conv", "type": "op", "op_id": 0}
    assert {"id": "Y@2", "label": "Y", "type": "blob"} in j["nodes"]
    assert {"source": "op1", "target": "Y@2"} in j["edges"] and len(j["edges"]) == 5


@pytest.mark.parametrize("model,mode", [("zfnet512/predict_net.pbtxt", "full"),
                                        ("mask_rcnn_2go_int8/model.pbtxt", "ssa"),
                                        ("bvlc_alexnet/predict_net.pbtxt", "minimal")])
def test_svg_has_one_node_group_per_node(zoo: Path, tmp_path: Path, model: str, mode: str) -> None:
    d = draw_net(load_net(zoo / model), DrawOptions(mode))
    export_drawing(d, tmp_path / "g.svg")
    groups = [g for g in ET.parse(tmp_path / "g.svg").iter(f"{SVG}g") if g.get("class") == "node"]
    assert len(groups) == len(d.nodes)
    assert len([g for g in ET.parse(tmp_path / "g.svg").iter(f"{SVG}g") if g.get("class") == "cluster"]) \
        == len(d.clusters)


def test_densenet_every_mode_and_the_dot_fallback(zoo: Path, tmp_path: Path) -> None:
    net = load_net(zoo / "densenet121" / "predict_net.pbtxt")
    for mode in MODES:
        r = export_net(net, tmp_path / f"{mode}.dot", DrawOptions(mode))
        assert dot_counts(r.path)[0] == (668 if mode == "minimal" else 668 + 1575)
    r = export_net(net, tmp_path / "dn.svg", timeout=0.05)
    assert r.timed_out and r.path == tmp_path / "dn.dot" and not (tmp_path / "dn.svg").exists()
    assert "dot -Tsvg" in r.note and dot_counts(r.path)[0] == 668 + 1575


def test_refuses_to_overwrite_and_unknown_formats(tmp_path: Path) -> None:
    out = tmp_path / "g.dot"
    out.write_text("keep")
    d = draw_net(tiny(op("Relu", "X", "Y")))
    with pytest.raises(ExportError, match="already exists; pass --force"):
        export_drawing(d, out)
    assert out.read_text() == "keep"
    export_drawing(d, out, force=True)
    assert pgv.AGraph(str(out)).number_of_nodes() == 3
    with pytest.raises(ExportError, match="unknown output format"):
        export_drawing(d, tmp_path / "g.gif")
    export_drawing(d, tmp_path / "g.json")
    assert json.loads((tmp_path / "g.json").read_text())["nodes"][0]["type"] == "op"


def test_progress_line_says_a_budget_under_a_second(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--timeout 0.5`` gives the pieces 0.425 s; the progress line said ``up to 0 s``."""
    from netviz.cli import main
    root = Path(__file__).resolve().parents[2]
    main(["export", str(root / "examples" / "mlp" / "predict_net.pb"), "-o", str(tmp_path / "m.svg"), "--timeout", "0.5"])
    first = next(line for line in capsys.readouterr().err.splitlines() if "layout:" in line)
    assert "up to 0.425 s" in first, first
