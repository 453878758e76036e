"""Gradients of Do / If / While vs Caffe2 1.10.2 goldens (structure and values) and numeric checks."""
from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format

from engine.caffe2 import control, core
from engine.caffe2 import workspace as wsmod
from engine.runtime.control_ops_grad import dedupe_g_output, gen_do_gradient
from engine.errors import GradientError
from engine.runtime.executor import run_net
from engine.caffe2.gradient_checker import NetGradientChecker
from engine.autodiff.gradient_ir import IR
from engine.model.opdef import create_operator as op
from engine.caffe2.workspace import Workspace
from proto import caffe2_pb2

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
sys.path.insert(0, str(GOLDEN.parent / "oracle"))
from setcompare import normalize  # noqa: E402

CASES = ["do_fc_relu", "do_two_outputs_fanout", "if_else_passthrough", "if_nested_in_loss", "if_then_else",
         "if_then_only_fed_y", "while_hand_built"]
CAFFE2_WRONG = ["if_cond_name_chars_bug", "while_counter_accumulate", "while_no_cond_net"]
_COUNTED = re.compile(r'name: "((?:do_(?:then|else|loop_body|loop_condition)_net|gradient_loop_cond_net)(?:_\d+)?)')


def _case(name):
    d = json.load(open(GOLDEN / "control" / f"{name}.json"))
    return d, np.load(GOLDEN / "control" / d["npz"])


def _parse(text):
    return text_format.Parse(text, caffe2_pb2.NetDef())


def _canon(text):
    """Text of a NetDef with empty op names unset, Caffe2's counted net names and tags dropped."""
    net = _parse(re.sub(r"(gradient_loop_cond_net)(_\d+)?", r"\1", text))

    def walk(n):
        for o in n.op:
            if not o.name:
                o.ClearField("name")
            del o.device_option.extra_info[:]
            if not o.HasField("device_option") or o.device_option.ByteSize() == 0:
                o.ClearField("device_option")
            for a in o.arg:
                if a.HasField("n"):
                    if _COUNTED.match(f'name: "{a.n.name}"'):
                        a.n.name = re.sub(r"_\d+$", "", a.n.name) if not a.n.name.endswith("_grad") else \
                            re.sub(r"_\d+_grad$", "_grad", a.n.name)
                    walk(a.n)
    walk(net)
    return text_format.MessageToString(net)


def _backward(d):
    fwd = _parse(d["forward_net"])
    ops, gmap = IR(fwd.op).GetBackwardPass(d["ys"])
    return fwd, ops, gmap


@pytest.mark.parametrize("name", CASES)
def test_gradient_ops_match_caffe2(name):
    d, _ = _case(name)
    _, ops, gmap = _backward(d)
    mine = copy.deepcopy(d)
    g = caffe2_pb2.NetDef(name=_parse(d["backward"]["grad_net"]).name)
    g.op.extend(ops)
    mine["backward"]["grad_net"] = text_format.MessageToString(g)
    a, b = (normalize(c, _parse, text_format.MessageToString) for c in (mine, d))
    assert _canon(a["backward"]["grad_net"]) == _canon(b["backward"]["grad_net"])
    assert {k: str(v) for k, v in gmap.items()} == d["backward"]["grad_map"]


def _run(d, z, label, fwd, ops):
    ws = Workspace("t")
    for k in z.files:
        kind, blob = k.split("/", 2)[1:]
        if k.startswith(label + "/") and kind == "input":
            ws.feed_blob(blob, z[k])
    run_net(fwd, ws)
    for k in z.files:
        if k.startswith(label + "/output_grad/"):
            ws.feed_blob(k.split("/", 2)[2], z[k])
    run_net(caffe2_pb2.NetDef(name="g", op=ops), ws)
    return ws


@pytest.mark.parametrize("name", CASES + ["if_cond_name_chars_bug"])
def test_forward_and_gradient_values_match_caffe2(name):
    d, z = _case(name)
    for r in d["runs"]:
        fwd, ops, _ = _backward(d)
        ws = _run(d, z, r["label"], fwd, ops)
        for k in z.files:
            label, kind, blob = k.split("/", 2)
            if label == r["label"] and kind in ("forward", "grad"):
                np.testing.assert_allclose(ws.fetch_blob(blob), z[k], rtol=1e-4, atol=1e-5, err_msg=k)


def test_if_gradient_lists_one_character_inputs():
    d, _ = _case("if_cond_name_chars_bug")
    _, ops, _ = _backward(d)
    grad_if = next(o for o in ops if o.type == "If")
    assert {"c", "d"} <= set(grad_if.input) and list(grad_if.input).count("cond") == 1


def _inputs(d, z):
    label = d["runs"][0]["label"]
    return {k.split("/", 2)[2]: z[k] for k in z.files if k.startswith(label + "/input/")}


@pytest.fixture(autouse=True)
def fresh():
    wsmod.SwitchWorkspace("control_grad_test", True)
    wsmod.ResetWorkspace()
    yield
    wsmod.ResetWorkspace()
    wsmod.SwitchWorkspace("default")


def _check(net, ys, values, names):
    for n in names:
        NetGradientChecker.Check(net, ys, values, n, step_size=1e-3, threshold=0.02, print_net=False)


@pytest.mark.parametrize("name,checked", [("while_counter_accumulate", ["acc", "W", "b"]),
                                          ("while_no_cond_net", ["x", "y"]),
                                          ("while_hand_built", ["X", "W", "b"])])
def test_loops_caffe2_cannot_differentiate_have_correct_gradients(name, checked):
    d, z = _case(name)
    ys = d["ys"] if isinstance(d["ys"], list) else list(d["ys"])
    _check(_parse(d["forward_net"]), ys, _inputs(d, z), checked)


@pytest.mark.parametrize("cond", [True, False])
@pytest.mark.parametrize("name", ["if_then_else", "if_nested_in_loss"])
def test_if_numeric_gradient_each_branch(name, cond):
    d, z = _case(name)
    values = _inputs(d, z)
    values["cond"] = np.array([cond])
    net = _parse(d["forward_net"])
    loss = "loss" if isinstance(d["ys"], list) else None
    if loss is None:
        core_net = core.Net(net)
        core_net.AveragedLoss("Y", "loss")
        net = core_net.Proto()
    _check(net, ["loss"], values, ["X", "W", "b"])


def _while_net(n_iter, rng):
    """acc <- Tanh(FC(acc, W, b)), n_iter times (cond net counts)."""
    net, body, cond = core.Net("w"), core.Net("w_body"), core.Net("w_cond")
    body.Tanh(body.FC(["acc", "W", "b"], "h"), "acc")
    cond.LT([cond.Add(["i", "one"], "i"), "n"], "cond")
    scope = {"cond", "acc", "W", "b", "i", "one", "n"}
    net.AddExternalInput(*sorted(scope))
    control.While(net, "cond", body, cond, lexical_scope=scope)
    net.AveragedLoss("acc", "loss")
    values = {"acc": rng.standard_normal((2, 3)).astype(np.float32), "W": 0.5 * rng.standard_normal((3, 3)).astype(np.float32),
              "b": rng.standard_normal(3).astype(np.float32), "i": np.array([0], np.int32),
              "one": np.array([1], np.int32), "n": np.array([n_iter + 1], np.int32), "cond": np.array([True])}
    return net, values


@pytest.mark.parametrize("n_iter", [0, 1, 5])
def test_while_numeric_gradient_with_loop_carried_state(n_iter):
    net, values = _while_net(n_iter, np.random.default_rng(n_iter))
    _check(net, ["loss"], values, ["acc", "W", "b"] if n_iter else ["acc"])


def test_while_zero_iterations_passes_gradient_through():
    net, values = _while_net(0, np.random.default_rng(0))
    ops, gmap = IR(net.Proto().op).GetBackwardPass(["loss"])
    ws = Workspace("z")
    for k, v in values.items():
        ws.feed_blob(k, v)
    run_net(net.Proto(), ws)
    run_net(caffe2_pb2.NetDef(name="g", op=ops), ws)
    np.testing.assert_allclose(ws.fetch_blob(gmap["acc"]), np.full((2, 3), 1 / 6), rtol=1e-6)


def test_if_without_else_numeric_gradient():
    rng = np.random.default_rng(7)
    net, then = core.Net("ife"), core.Net("ife_then")
    then.Relu(then.FC(["X", "W", "b"], "h"), "Y")
    net.AddExternalInput("cond", "X", "W", "b")
    control.If(net, "cond", then, lexical_scope={"cond", "X", "W", "b", "Y"})
    net.AveragedLoss("Y", "loss")
    values = {"X": rng.standard_normal((2, 3)).astype(np.float32), "W": rng.standard_normal((4, 3)).astype(np.float32),
              "b": rng.standard_normal(4).astype(np.float32), "cond": np.array([True])}
    _check(net, ["loss"], values, ["X", "W", "b"])


def _one_sided_if_net(with_else):
    """Y = Sigmoid(X), Z = Tanh(X); If(cond) {Y = Relu(FC(X, W, b))} [else {Z = Relu(X)}]; loss of Y + Z."""
    net, then, other = core.Net("ovw"), core.Net("ovw_then"), core.Net("ovw_else")
    then.Relu(then.FC(["X", "W", "b"], "h"), "Y")
    other.Relu("X", "Z")
    net.AddExternalInput("cond", "X", "W", "b")
    net.Sigmoid("X", "Y")
    net.Tanh("X", "Z")
    control.If(net, "cond", then, other if with_else else None, lexical_scope={"cond", "X", "W", "b", "Y", "Z"})
    net.AveragedLoss(net.Add(["Y", "Z"], "S"), "loss")
    return net


@pytest.mark.parametrize("cond", [True, False])
@pytest.mark.parametrize("with_else", [False, True], ids=["then_only", "with_else"])
def test_if_overwriting_an_earlier_blob_in_one_branch_numeric_gradient(with_else, cond):
    """Caffe2 raises a version error (docs/fidelity.md): the branch that overwrites Y (or Z)
    zeroes its earlier version's gradient, the other passes it through."""
    rng = np.random.default_rng(11)
    values = {"X": rng.standard_normal((2, 3)).astype(np.float32), "W": rng.standard_normal((3, 3)).astype(np.float32),
              "b": rng.standard_normal(3).astype(np.float32), "cond": np.array([cond])}
    _check(_one_sided_if_net(with_else), ["loss"], values, ["X", "W", "b"])


def test_if_overwriting_an_earlier_blob_keeps_the_forward_op_and_caffe2s_other_errors():
    net = _one_sided_if_net(False).Proto()
    ir = IR(net.op)
    assert ir.ForwardWithSaves()[0] == list(net.op)  # the If's implicit input is the IR's only
    assert "Y" not in net.op[-3].input and "Y" in ir.ssa[len(net.op) - 3].op.input
    plain = [op("Sigmoid", "X", "Y"), op("Relu", "X", "Y"), op("AveragedLoss", "Y", "loss")]
    with pytest.raises(GradientError, match='needs output "Y" at version 0, but currently we have version 1'):
        IR(plain).GetBackwardPass(["loss"])


@pytest.mark.parametrize("example", ["do_net", "nested_if_in_while"])
def test_examples_numeric_gradients(example):
    from examples.build import EXAMPLES

    predict, init = EXAMPLES[example]()
    ws = Workspace("e")
    ws.run_net_once(init)
    values = {b: ws.fetch_blob(b) for b in ws.blobs()}
    fwd = caffe2_pb2.NetDef(name=predict.name)
    first_grad = next(k for k, o in enumerate(predict.op) if o.output and o.output[0] == "loss_autogen_grad")
    fwd.op.extend(predict.op[:first_grad])
    floats = [b for b, v in values.items() if v.dtype == np.float32]
    _check(fwd, ["loss"], values, floats)


@pytest.mark.parametrize("reuse", [False, True])
def test_do_numeric_gradient_with_and_without_reuse_workspace(reuse):
    rng = np.random.default_rng(3)
    net, sub = core.Net("d"), core.Net("d_inner")
    sub.Sigmoid(sub.FC(["x", "w", "b"], "h"), "y")
    net.AddExternalInput("X", "W", "B")
    control.Do(net, sub, ["X", "W", "B"], ["Y"], bindings={"x": "X", "w": "W", "b": "B", "y": "Y"}, reuse_workspace=reuse)
    net.AveragedLoss("Y", "loss")
    values = {"X": rng.standard_normal((2, 3)).astype(np.float32), "W": rng.standard_normal((2, 3)).astype(np.float32),
              "B": rng.standard_normal(2).astype(np.float32)}
    _check(net, ["loss"], values, ["X", "W", "B"])


def test_dedupe_g_output_copies_a_repeated_gradient():
    fwd = op("Do", ["A", "ws"], ["P", "Q", "ws"])
    ops, g = dedupe_g_output(fwd, ["G", "G", None])
    assert g == ["G", "Q_G_DEDUP", None]
    assert [(o.type, list(o.input), list(o.output)) for o in ops] == [("Copy", ["G"], ["Q_G_DEDUP"])]


def test_gradient_do_names_and_saved_blobs():
    body = caffe2_pb2.NetDef(name="body", op=[op("FC", ["x", "w", "b"], "h"), op("Relu", "h", "y")])
    do = op("Do", ["X", "W", "B", "ws"], ["Y", "ws"], net=body, inner_blobs=["x", "w", "b", "y"],
            outer_blobs_idx=[0, 1, 2, 3])
    (g,), g_in = gen_do_gradient(do, ["Y_grad", None])
    net = next(a.n for a in g.arg if a.name == "net")
    assert net.name == "body_grad" and g.is_gradient_op and g_in == ["X_grad", "W_grad", "B_grad"]
    assert [o.output[0] for o in net.op if o.type == "Copy"] == [f"{n}/_DO_OPERATOR_INNER_GRAD_COPY_" for n in "xwb"]
    assert "y/_DO_OPERATOR_INNER_GRAD_" in [s.decode() for a in g.arg if a.name == "inner_blobs" for s in a.strings]
    assert [a.strings for a in g.arg if a.name == "saved_fwd_blobs"][0] == []
