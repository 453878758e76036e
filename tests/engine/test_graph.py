"""The graph model on hand-built nets (exact nodes and edges) and on every zoo net."""
from __future__ import annotations

import networkx as nx
import pytest

from engine.errors import BlobNotFoundError, GraphError
from engine.graph import (CONTROL_FLOW, blob_id, blobs, consumers, from_model, from_netdef,
                          group_by_scope, neighbourhood, op_id, op_order, ops, producers,
                          scope_of, subnet_view)
from engine.model.modelio import InputInfo, load_model
from engine.model.opdef import create_operator as op
from engine.model.ssa import get_ssa
from proto import caffe2_pb2


def net(*ops_, inputs=(), outputs=(), name="t"):
    return caffe2_pb2.NetDef(name=name, op=list(ops_), external_input=list(inputs),
                             external_output=list(outputs))


INPLACE = net(op("FC", ["X", "W", "b"], "Y"), op("Relu", "Y", "Y"), op("Mul", ["Y", "Y"], "Z"),
              inputs=["X", "W", "b"], outputs=["Z"])


def edges(G):
    return sorted((u, v, k) for u, v, k, kind in G.edges(keys=True, data="kind") if kind != "bind")


def test_ssa_nodes_and_edges_exact():
    G = from_netdef(INPLACE)
    assert sorted(n for n in G if n.startswith("blob:")) == [
        "blob:W@0", "blob:X@0", "blob:Y@1", "blob:Y@2", "blob:Z@1", "blob:b@0"]
    assert edges(G) == sorted([
        ("blob:X@0", "op:0", "in:0"), ("blob:W@0", "op:0", "in:1"), ("blob:b@0", "op:0", "in:2"),
        ("op:0", "blob:Y@1", "out:0"), ("blob:Y@1", "op:1", "in:0"), ("op:1", "blob:Y@2", "out:0"),
        ("blob:Y@2", "op:2", "in:0"), ("blob:Y@2", "op:2", "in:1"), ("op:2", "blob:Z@1", "out:0")])
    relu = G.nodes["op:1"]
    assert (relu["type"], relu["index"], relu["path"], relu["net"], relu["pass"]) == (
        "Relu", 1, ("op", 1), (), "forward")
    assert (relu["inputs"], relu["outputs"], relu["device"], relu["forward_index"]) == (
        ["blob:Y@1"], ["blob:Y@2"], (0, 0), None)
    assert G.edges["blob:Y@2", "op:2", "in:1"] == {"kind": "input", "index": 1}
    x, z = G.nodes["blob:X@0"], G.nodes["blob:Z@1"]
    assert (x["name"], x["version"], x["is_external_input"], x["is_undefined"]) == ("X", 0, True, False)
    assert z["is_external_output"] and not G.nodes["blob:Y@1"]["is_external_output"]
    assert G.graph["blob_versions"] == {"X": 0, "W": 0, "b": 0, "Y": 2, "Z": 1}
    assert nx.is_directed_acyclic_graph(G)


def test_compact_mode_one_node_per_name():
    G = from_netdef(INPLACE, ssa=False)
    assert sorted(n for n in G if n.startswith("blob:")) == [
        "blob:W", "blob:X", "blob:Y", "blob:Z", "blob:b"]
    assert G.nodes["blob:Y"]["version"] is None and G.nodes["op:1"]["inputs"] == ["blob:Y"]
    assert len(edges(G)) == 9 and G.has_edge("op:1", "blob:Y") and G.has_edge("blob:Y", "op:1")
    assert G.nodes["blob:Z"]["is_external_output"] and G.nodes["blob:X"]["is_external_input"]


def test_ids_helpers():
    assert op_id(("op", 12, "then_net", 3)) == "op:12/then_net:3"
    assert blob_id("a/b", 2, ("op", 1, "net")) == "op:1/net/blob:a/b@2"
    assert blob_id("a") == "blob:a"


def test_undefined_inputs_are_marked_not_rejected():
    G = from_netdef(net(op("FC", ["X", "W", "b"], "Y"), op("Relu", "Y", "Y"), inputs=["X", "W"]))
    assert G.nodes["blob:b@0"]["is_undefined"] and not G.nodes["blob:W@0"]["is_undefined"]
    assert G.nodes["op:0"]["has_undefined_input"] and not G.nodes["op:1"]["has_undefined_input"]
    # no declared inputs: every first read is undefined (Caffe2 only logs it)
    G = from_netdef(net(op("Relu", "X", "Y")))
    assert G.nodes["blob:X@0"]["is_undefined"] and not G.nodes["blob:X@0"]["is_external_input"]


def test_params_from_init_net():
    init = net(op("XavierFill", [], "W", shape=[2, 2]), op("ConstantFill", [], "b", shape=[2]))
    predict = net(op("FC", ["X", "W", "b"], "Y"))  # no external inputs declared
    G = from_netdef(predict, init)
    assert G.nodes["blob:W@0"]["is_param"] and G.nodes["blob:b@0"]["is_param"]
    assert not G.nodes["blob:W@0"]["is_undefined"] and G.nodes["blob:X@0"]["is_undefined"]
    assert not G.nodes["blob:X@0"]["is_param"] and G.graph["init_ops"] == []
    G = from_netdef(predict, init, init_ops=True)
    assert G.graph["init_ops"] == ["init:0", "init:1"] and G.nodes["init:1"]["pass"] == "init"
    assert G.nodes["op:0"]["inputs"] == ["blob:X@0", "blob:W@1", "blob:b@1"]
    assert G.nodes["blob:W@1"]["is_param"] and op_order(G) == ["init:0", "init:1", "op:0"]
    assert producers(G, "W") == [] and consumers(G, "W") == [0]
    assert from_netdef(predict, init, ssa=False).nodes["blob:W"]["is_param"]


def test_backward_pass_nodes():
    full = net(op("FC", ["X", "W", "b"], "Y"), op("Relu", "Y", "Y"),
               op("ConstantFill", "Y", "Y_autogen_grad", value=1.0),
               op("ReluGradient", ["Y", "Y_autogen_grad"], "Y_grad"),
               op("FCGradient", ["X", "W", "Y_grad"], ["W_grad", "b_grad", "X_grad"]),
               inputs=["X", "W", "b"])
    G = from_netdef(full, fwd_index=[None, 1, 0])
    assert G.graph["num_forward"] == 2
    assert [G.nodes[n]["pass"] for n in op_order(G)] == ["forward"] * 2 + ["backward"] * 3
    assert [G.nodes[n]["forward_index"] for n in op_order(G)] == [None, None, None, 1, 0]
    assert G.nodes["op:4"]["inputs"] == ["blob:X@0", "blob:W@0", "blob:Y_grad@1"]
    assert G.nodes["blob:W_grad@1"]["is_gradient"] and G.nodes["blob:Y_autogen_grad@1"]["is_gradient"]
    assert not G.nodes["blob:Y@2"]["is_gradient"]
    with pytest.raises(ValueError):
        from_netdef(net(op("Relu", "X", "Y")), fwd_index=[0, 0])


def test_value_info_shapes_and_device_inheritance():
    n = net(op("Relu", "data", "y"), op("Relu", "y", "z", device_option=caffe2_pb2.DeviceOption()),
            inputs=["data"])
    n.device_option.device_type, n.device_option.device_id = caffe2_pb2.CUDA, 1
    G = from_netdef(n, value_info={"data": InputInfo(1, (1, 3, 224, 224))})
    assert (G.nodes["blob:data@0"]["shape"], G.nodes["blob:data@0"]["dtype"]) == ((1, 3, 224, 224), 1)
    assert G.nodes["blob:y@1"]["shape"] is None
    assert G.nodes["op:0"]["device"] == (1, 1) and G.nodes["op:1"]["device"] == (0, 0)


def _if_net():
    loop = net(op("Add", ["acc", "one"], "acc"), op("LT", ["acc", "ten"], "cond"), name="loop")
    then = net(op("While", ["cond", "acc", "one", "ten"], ["acc"], loop_net=loop),
               op("Relu", "acc", "tmp"), name="then")
    other = net(op("Copy", "x", "acc"), name="else")
    return net(op("ConstantFill", [], "acc", value=0.0), op("GT", ["x", "zero"], "cond"),
               op("If", ["cond", "x", "acc", "one", "ten"], ["acc"], then_net=then, else_net=other),
               op("Relu", "acc", "out"), inputs=["x", "zero", "one", "ten"])


def test_nested_control_flow_paths_and_bindings():
    G = from_netdef(_if_net())
    if_op = G.nodes["op:2"]
    assert if_op["subnets"] == {"then_net": ("op", 2, "then_net"), "else_net": ("op", 2, "else_net")}
    assert if_op["args"]["then_net"] == ("op", 2, "then_net")
    assert G.graph["nets"][("op", 2, "then_net")]["ops"] == ["op:2/then_net:0", "op:2/then_net:1"]
    assert G.graph["nets"][("op", 2, "then_net")]["parent"] == "op:2"
    loop_op = "op:2/then_net:0/loop_net:1"
    assert G.nodes[loop_op]["path"] == ("op", 2, "then_net", 0, "loop_net", 1)
    assert G.nodes[loop_op]["outputs"] == ["op:2/then_net:0/loop_net/blob:cond@1"]
    binds = {(u, v): d for u, v, d in G.edges(data=True) if d["kind"] == "bind"}
    # If reads acc@1 and writes acc@2 (its declared output): via_output
    assert binds[("blob:acc@1", "op:2/then_net/blob:acc@0")]["direction"] == "in"
    out = binds[("op:2/then_net/blob:acc@1", "blob:acc@2")]
    assert (out["via_output"], out["op"], out["arg"], out["inner"]) == (True, "op:2", "then_net", "acc")
    # the then-net's own While binds into the loop net one level down
    assert ("op:2/then_net/blob:one@0", "op:2/then_net:0/loop_net/blob:one@0") in binds
    # tmp is local to the then net: no outer blob of that name, so no binding
    assert not any(d["inner"] == "tmp" for d in binds.values())
    assert not G.nodes["op:2/then_net:0/loop_net/blob:ten@0"]["is_undefined"]
    assert subnet_view(G, "op:2", "else_net").number_of_nodes() == 3
    with pytest.raises(GraphError):
        subnet_view(G, "op:2", "loop_net")
    assert G.nodes["op:2"]["type"] in CONTROL_FLOW


def test_do_bindings_follow_inner_blobs():
    body = net(op("Mul", ["a", "a"], "b"), name="body")
    do = op("Do", ["x", "ws"], ["y", "ws"], net=body, inner_blobs=["a", "b"], outer_blobs_idx=[0, 1])
    G = from_netdef(net(op("CreateScope", [], "ws"), do, inputs=["x"]))
    binds = sorted((u, v, d["inner"], d["outer"], d["via_output"])
                   for u, v, d in G.edges(data=True) if d["kind"] == "bind")
    assert binds == [("blob:x@0", "op:1/net/blob:a@0", "a", "x", False),
                     ("op:1/net/blob:b@1", "blob:y@1", "b", "y", True)]


def test_recurrent_step_net_links():
    step = net(op("FC", ["input_t", "W", "b"], "hidden_t"), name="step")
    rnn = op("RecurrentNetwork", ["input", "W", "b"], ["hidden_all"], step_net=step,
             link_internal=["input_t"], link_external=["input"])
    G = from_netdef(net(rnn, inputs=["input", "W", "b"]))
    binds = {(u, v) for u, v, kind in G.edges(data="kind") if kind == "bind"}
    assert ("blob:input@0", "op:0/step_net/blob:input_t@0") in binds
    assert ("blob:W@0", "op:0/step_net/blob:W@0") in binds


def test_neighbourhood_and_queries():
    G = from_netdef(INPLACE)
    assert set(neighbourhood(G, "op:1", 1)) == {"op:1", "blob:Y@1", "blob:Y@2"}
    assert set(neighbourhood(G, "op:1", 2)) == {"op:0", "op:1", "op:2", "blob:Y@1", "blob:Y@2"}
    assert set(neighbourhood(G, "op:1", 0)) == {"op:1"}
    with pytest.raises(GraphError):
        neighbourhood(G, "op:9")
    assert producers(G, "Y") == [0, 1] and consumers(G, "Y") == [1, 2]
    with pytest.raises(BlobNotFoundError):
        producers(G, "nope")
    assert ops(G) == ["op:0", "op:1", "op:2"] and len(blobs(G)) == 6


def test_scope_grouping():
    assert [scope_of(n) for n in ("gpu_0/res2_0_branch2a", "res2_0_branch2a", "conv2_1",
                                  "pool5_7x7_s1", "_[mask]_xif5_0_pw", "prob")] == [
        "gpu_0/", "res2_0", "conv2_1", "pool5", "_[mask]_xif5_0", "prob"]


def test_zoo_net_graph_matches_the_net(zoo_net):
    model = load_model(zoo_net)
    proto = model.predict
    ssa, versions = get_ssa(proto)
    expected = {v for ins, outs in ssa for v in (*ins, *outs)}
    expected |= {(n, 0) for n in proto.external_input}
    expected |= {(n, versions.get(n, 0)) for n in proto.external_output}
    for compact in (False, True):
        G = from_model(model, ssa=not compact)
        top = [d for n, d in G.nodes(data=True) if d["net"] == ()]
        assert sum(d["kind"] == "op" for d in top) == len(proto.op)
        names = {(d["name"], d["version"]) for d in top if d["kind"] == "blob"}
        assert names == ({(n, None) for n, _ in expected} if compact else expected)
        kinds = [k for u, v, k in G.edges(data="kind")
                 if G.nodes[u]["net"] == () and G.nodes[v]["net"] == ()]
        assert kinds.count("input") == sum(len(o.input) for o in proto.op)
        assert kinds.count("output") == sum(len(o.output) for o in proto.op)
        assert op_order(G) == [f"op:{i}" for i in range(len(proto.op))]
    if not any(o.type in CONTROL_FLOW for o in proto.op):
        assert nx.is_directed_acyclic_graph(G := from_model(model))
        assert list(nx.topological_sort(G.subgraph(op_order(G)))) is not None
    for name, info in model.value_info.items():
        assert G.nodes[blob_id(name, 0)]["shape"] == info.shape
    assert sum(len(v) for v in group_by_scope(G).values()) == len(proto.op)


def test_mask_rcnn_int8_if_subnets_are_nested_with_outer_bindings(zoo):
    G = from_model(load_model(zoo / "mask_rcnn_2go_int8" / "model.pbtxt"))
    [if_op] = [n for n, t in G.nodes(data="type") if t == "If"]
    subnets = G.nodes[if_op]["subnets"]
    nets = G.graph["nets"]
    assert set(subnets) == {"then_net", "else_net"}
    assert nets[subnets["then_net"]]["name"] == "emptynet" and nets[subnets["then_net"]]["ops"] == []
    mask = nets[subnets["else_net"]]
    assert mask["name"] == "mask_net" and len(mask["ops"]) == 28 and mask["parent"] == if_op
    assert G.nodes[mask["ops"][0]]["path"] == (*subnets["else_net"], 0)
    binds = [d for u, v, d in G.edges(data=True) if d["kind"] == "bind" and d["op"] == if_op]
    inward = {d["outer"] for d in binds if d["direction"] == "in"}
    outward = {d["outer"]: d["via_output"] for d in binds if d["direction"] == "out"}
    assert {"xif3_6", "bbox_nms", "im_info", "mask_fcn_logits_w_int8"} <= inward
    assert outward == {"mask_fcn_probs": False, "bbox_nms": False}  # If lists no outputs
    inner = [d for n, d in G.nodes(data=True) if d["net"] == subnets["else_net"] and d["kind"] == "blob"]
    assert inner and not any(d["is_undefined"] for d in inner)
    view = subnet_view(G, if_op, "else_net")
    assert sum(d == "op" for _, d in view.nodes(data="kind")) == 28
