"""The canvas's scene: boxes never overlap, every edge runs from its tail's border to a ▼ above its head."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from netviz.session import Session
from netviz.widgets.graph_scene import ARROW_DOWN, ZOOMS, build_scene
from tests.netviz.tui_nets import mlp, while_net, write


def _scene(tmp_path: Path, net, zoom: int, ssa: bool = True, **kw):
    s = Session.open(write(tmp_path, net.name, net), **kw)
    v = s.view(())
    return build_scene(v.net, v.ssa, v.n_forward, ssa, zoom, shapes=s.shapes(()), params=s.param_names())


@pytest.mark.parametrize("zoom", range(len(ZOOMS)), ids=[z[0] for z in ZOOMS])
@pytest.mark.parametrize("net", [mlp, while_net], ids=["mlp", "while"])
def test_edges_meet_their_nodes_and_boxes_do_not_overlap(tmp_path, net, zoom):
    sc = _scene(tmp_path, net(), zoom)
    cover = np.zeros((sc.height, sc.width), np.int8)
    for n in sc.nodes:
        cover[n.y:n.y + n.h, n.x:n.x + n.w] += 1
    assert cover.max() == 1
    assert sc.edges
    for e in sc.edges:
        t, h = sc.nodes[e.tail], sc.nodes[e.head]
        ys, xs = np.divmod(e.cells, sc.width)
        assert ys.min() == t.y + t.h and ys.max() == h.y - 1
        leave = [x for y, x in zip(ys, xs) if y == t.y + t.h and t.x <= x < t.x + t.w]
        enter = [x for y, x in zip(ys, xs) if y == h.y - 1 and h.x <= x < h.x + h.w]
        assert leave and enter, f"edge {t.label} → {h.label} does not touch both nodes"
        if zoom < 3:
            assert any(sc.mask[h.y - 1, x] & ARROW_DOWN for x in enter)
    assert zoom == 3 or "▼" in "".join(sc.edge_chars(row, 0, sc.width) for row in range(sc.height))


def test_blob_view_labels_ssa_names_with_shapes_and_folds_weights(tmp_path):
    sc = _scene(tmp_path, mlp(), 0, inputs=["X=4,8"])
    blobs = {n.label: n.sub for n in sc.nodes if n.kind == "blob"}
    assert blobs["X@0"] == "~4×8"  # static: marked until the value exists
    assert "W1@0" not in blobs and "b1@0" not in blobs  # FC weights live in the op's inspector
    ops = [n.label for n in sc.nodes if n.kind == "op"]
    assert ops[0] == "FC #0" and "SoftmaxWithLoss #3" in ops


def _view(path: Path, zoom: int = 0):
    from netviz.widgets.graph_scene import view_graph

    s = Session.open(path)
    v = s.view(())
    return view_graph(v.net, v.ssa, v.n_forward, False, zoom, {}, s.param_names())


def test_int8_weights_fold_into_their_op(zoo):
    """Int8Conv/Int8ConvRelu/Int8FC weights (slots ≥ 1) are drawn inside their op like Conv's."""
    g = _view(zoo / "mask_rcnn_2go_int8" / "model.pbtxt")
    blobs = {m["blob"][0] for m in g.meta.values() if m["kind"] == "blob"}
    assert "conv0_conv_w_int8" not in blobs and "conv0_bn_b_int8" not in blobs
    assert "data_int8" in blobs and any(m["label"].startswith("Int8ConvRelu #") for m in g.meta.values())


@pytest.mark.parametrize("net", ["resnet50/predict_net.pbtxt", "mask_rcnn_2go_fp32/model.pbtxt",
                                 "detectron_e2e_faster_rcnn_R-50-C4_1x/predict_net.pbtxt"])
def test_cut_labels_keep_blobs_apart(zoo, net):
    """A long blob name is cut from the left (its distinguishing tail kept): two blobs never share a label."""
    g = _view(zoo / net)
    names: dict[str, set[str]] = {}
    for m in g.meta.values():
        if m["kind"] == "blob":
            names.setdefault(m["label"], set()).add(m["blob"][0])
    assert all(len(v) == 1 for v in names.values()), {k: v for k, v in names.items() if len(v) > 1}


def test_map_zoom_labels_carry_the_op_number(tmp_path):
    sc = _scene(tmp_path, mlp(), 3)
    assert sorted(n.label for n in sc.nodes) == ["FC #0", "FC #2", "Relu #1", "SoftmaxWi… #3"]


def test_a_moved_node_keeps_every_other_field(tmp_path):
    """``SceneNode.moved`` (wrap_scene's fast ``replace``) copies every field but the place: each node
    of a real scene, with blob shapes, ports and SSA versions, moved equals ``replace``'s result."""
    from dataclasses import fields, replace  # noqa: PLC0415

    sc = _scene(tmp_path, while_net(), 0)
    assert {f.name for f in fields(sc.nodes[0])} >= {"sub", "ports", "version", "blob", "op"}
    assert any(n.ports for n in sc.nodes) and any(n.blob for n in sc.nodes)
    for k, n in enumerate(sc.nodes):
        assert n.moved(n.x + k, n.y + 2 * k) == replace(n, x=n.x + k, y=n.y + 2 * k)
