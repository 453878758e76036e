"""RecurrentNetwork: the recurrent_net / rnn_cell.LSTM builders vs Caffe2's goldens, the kernels
(values vs golden and numeric gradients through T=5), LSTMUnit vs NumPy, step-by-step plans."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format

from engine.caffe2 import core, recurrent, rnn_cell
from engine.runtime import executor
from engine.runtime.workspace import eval_op
from engine.caffe2 import workspace as wsmod
from engine.errors import ExecutionError
from engine.caffe2.gradient_checker import NetGradientChecker, finite_difference_op
from engine.autodiff.gradient_ir import GradientRegistry
from engine.runtime.ops.rnn import StepWorkspaces
from engine.runtime.plans import SubnetRun
from engine.caffe2.workspace import Workspace
from proto import caffe2_pb2

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "control" / "lstm_T5"
COSMETIC = ("order", "use_cudnn", "cudnn_exhaustive_search")  # ModelHelper's arg_scope on FC


@pytest.fixture(autouse=True)
def fresh_net_names():
    """Nested net names (``lstm``, ``RecurrentBackwardStep``) come from Caffe2's global counter."""
    saved = dict(core.Net._net_names_used_counters)
    core.Net._net_names_used_counters.clear()
    yield
    core.Net._net_names_used_counters.clear()
    core.Net._net_names_used_counters.update(saved)


def golden():
    case = json.loads(GOLDEN.with_suffix(".json").read_text())
    z = np.load(GOLDEN.with_suffix(".npz"))
    fwd = text_format.Parse(case["forward_net"], caffe2_pb2.NetDef())
    grad = text_format.Parse(case["backward"]["grad_net"], caffe2_pb2.NetDef())
    return case, z, fwd, grad


def strip_cosmetic(net: caffe2_pb2.NetDef) -> caffe2_pb2.NetDef:
    for op in net.op:
        keep = [a for a in op.arg if a.name not in COSMETIC]
        del op.arg[:]
        op.arg.extend(keep)
        for a in op.arg:
            if a.HasField("n"):
                strip_cosmetic(a.n)
    return net


def build_lstm(net_name="lstm_oracle", **kw) -> core.Net:
    net = core.Net(net_name)
    out = rnn_cell.LSTM(net, "input", "seq_lengths", ("hidden_init", "cell_init"), 3, 4, scope="lstm", **kw)
    net.AveragedLoss([out[0]], ["loss"])
    return net


def fed_workspace(z, name="rnn") -> Workspace:
    ws = Workspace(name)
    for k in z:
        if k.startswith("run/input/"):
            ws.feed_blob(k[len("run/input/"):], z[k])
    return ws


# ---- builders vs Caffe2 -------------------------------------------------------------------

def test_rnn_cell_lstm_builds_caffe2s_forward_net():
    _, _, fwd, _ = golden()
    mine = build_lstm().Proto()
    assert list(mine.op) == list(strip_cosmetic(fwd).op)
    assert list(mine.external_input) == list(fwd.external_input)


def test_backward_ops_of_the_lstm_match_caffe2():
    case, _, fwd, grad = golden()
    ops, grad_map = GradientRegistry.GetBackwardPass(list(fwd.op), case["ys"])
    assert list(ops) == list(grad.op)
    assert {k: str(v) for k, v in grad_map.items()} == case["backward"]["grad_map"]


def test_recurrent_net_backward_step_net_and_links():
    rnn = build_lstm().Proto().op[1]
    args = {a.name: a for a in rnn.arg}
    bwd = args["backward_step_net"].n
    assert [o.type for o in bwd.op] == ["LSTMUnitGradient", "FCGradient", "Sum"]
    assert list(bwd.external_input[:3]) == ["lstm/gates_t", "lstm/hidden_state_grad", "lstm/cell_state_grad"]
    assert list(args["param"].ints) == [3, 4]
    assert [s.decode() for s in args["backward_link_external"].strings][-1] == "lstm/i2h_grad"
    assert list(rnn.output) == ["lstm/hidden_state_all", "lstm/hidden_state_last", "lstm/cell_state_all",
                                "lstm/cell_state_last", "lstm/step_workspaces"]


def test_forward_only_has_no_backward_args():
    rnn = build_lstm(forward_only=True).Proto().op[1]
    names = [a.name for a in rnn.arg]
    assert "backward_step_net" not in names and "param" not in names
    assert names[-1] == "timestep"


def test_memory_optimization_recomputes_gates_on_backward():
    args = {a.name: a for a in build_lstm(memory_optimization=True).Proto().op[1].arg}
    assert [s.decode() for s in args["recompute_blobs_on_backward"].strings] == ["lstm/gates_t"]
    assert [o.type for o in args["backward_step_net"].n.op][:2] == ["FC", "Sum"]


def accumulating_cell():
    """h = tanh(h_prev * w + x); g = g_prev + h*h.  h is an output and used inside the cell,
    so its backward gets the ``h_grad_accum`` rewrite; g0 is a 1-D initial state."""
    net, cell = core.Net("acc"), core.Net("cell")
    x_t, h_prev, g_prev = cell.AddExternalInputs("x_t", "h_prev", "g_prev")
    h = cell.Tanh(cell.Add([cell.Mul([h_prev, "w"], "a", broadcast=1), x_t], "s"), "h")
    g = cell.Add([g_prev, cell.Mul([h, h], "hh")], "g")
    cell.AddExternalOutputs(h, g)
    outs = recurrent.recurrent_net(net, cell, [(x_t, "xs")], [(h_prev, "h0"), (g_prev, "g0")],
                                   {"h_prev": "h", "g_prev": "g"}, scope="rnn", outputs_with_grads=(0, 3))
    net.AveragedLoss(outs[0], "l0")
    net.AveragedLoss(outs[3], "l1")
    return net, outs


def test_outputs_written_inside_the_step_accumulate_with_external_gradients():
    net, outs = accumulating_cell()
    assert [str(o) for o in outs] == ["h_all", "h_last", "g_all", "g_last"]
    bwd = {a.name: a for a in net.Proto().op[0].arg}["backward_step_net"].n
    writes = [(o.type, list(o.output)) for o in bwd.op]
    assert ("Sum", ["h_grad"]) in writes and any("h_grad_accum" in w for _, w in writes)


def test_recurrent_net_takes_one_sequence():
    with pytest.raises(Exception, match="Only one input"):
        recurrent.recurrent_net(core.Net("x"), core.Net("c"), [("a", "A"), ("b", "B")], [], {})


# ---- values ---------------------------------------------------------------------------------

def test_lstm_forward_and_gradients_match_caffe2_values():
    _, z, fwd, grad = golden()
    ws = fed_workspace(z)
    executor.run_net(build_lstm().Proto(), ws)  # netviz's own builder
    executor.run_net(grad, ws)
    for k in z:
        kind, _, blob = k.partition("/")[2].partition("/")
        if kind in ("forward", "grad"):
            np.testing.assert_allclose(ws.fetch_blob(blob), z[k], atol=1e-5, rtol=1e-5, err_msg=blob)


def checker_inputs(rng, T=5, N=2, D=3, H=4):
    f = lambda *s: rng.standard_normal(s) * 0.5  # noqa: E731
    return {"input": f(T, N, D), "hidden_init": f(1, N, H), "cell_init": f(1, N, H), "lstm/i2h_w": f(4 * H, D),
            "lstm/i2h_b": f(4 * H), "lstm/gates_t_w": f(4 * H, H), "lstm/gates_t_b": f(4 * H),
            "seq_lengths": np.array([T, 3], np.int32)}


LSTM_CASES = [({}, ["input", "lstm/gates_t_w", "lstm/gates_t_b", "lstm/i2h_w", "hidden_init", "cell_init"]),
              ({"memory_optimization": True, "drop_states": True, "forget_bias": 0.5, "outputs_with_grads": (0, 1, 3)},
               ["lstm/gates_t_w", "hidden_init", "cell_init"])]


@pytest.mark.parametrize("kw,blobs", LSTM_CASES, ids=["plain", "memopt_drop_last"])
def test_lstm_gradients_match_numeric_over_5_timesteps(kw, blobs):
    net = core.Net("lstm_check")
    outs = rnn_cell.LSTM(net, "input", "seq_lengths", ("hidden_init", "cell_init"), 3, 4, scope="lstm", **kw)
    losses = [net.AveragedLoss(outs[k], f"loss{k}") for k in kw.get("outputs_with_grads", (0,))]
    values = checker_inputs(np.random.default_rng(7))
    old = wsmod.CurrentWorkspace()
    wsmod.SwitchWorkspace("rnn_checker", True)
    try:
        for b in blobs:
            NetGradientChecker.Check(net, [str(x) for x in losses], values, b, step_size=1e-5, threshold=1e-4,
                                     print_net=False)
    finally:
        wsmod.ResetWorkspace()
        wsmod.SwitchWorkspace(old)


def test_accumulating_cell_gradients_match_numeric():
    net, _ = accumulating_cell()
    rng = np.random.default_rng(3)
    values = {"xs": rng.standard_normal((5, 2, 3)), "h0": rng.standard_normal((1, 2, 3)),
              "g0": rng.standard_normal(3), "w": rng.standard_normal(3)}
    old = wsmod.CurrentWorkspace()
    wsmod.SwitchWorkspace("rnn_checker_acc", True)
    try:
        for b in ("w", "xs", "h0", "g0"):
            NetGradientChecker.Check(net, ["l0", "l1"], values, b, step_size=1e-5, threshold=1e-4, print_net=False)
    finally:
        wsmod.ResetWorkspace()
        wsmod.SwitchWorkspace(old)


# ---- LSTMUnit --------------------------------------------------------------------------------

def lstm_unit_numpy(h_prev, c_prev, gates, seq, t, forget_bias=0.0, drop_states=False):
    D = c_prev.shape[-1]
    x = gates.reshape(-1, 4, D)
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    i, f, o, g = sig(x[:, 0]), sig(x[:, 1] + forget_bias), sig(x[:, 2]), np.tanh(x[:, 3])
    c = f * c_prev.reshape(-1, D) + i * g
    h = o * np.tanh(c)
    valid = (t < seq)[:, None] if seq is not None else np.ones((x.shape[0], 1), bool)
    keep_h, keep_c = (0, 0) if drop_states else (h_prev.reshape(-1, D), c_prev.reshape(-1, D))
    return np.where(valid, h, keep_h).reshape(c_prev.shape), np.where(valid, c, keep_c).reshape(c_prev.shape)


@pytest.mark.parametrize("drop", [False, True])
@pytest.mark.parametrize("with_seq", [True, False])
def test_lstm_unit_matches_numpy(drop, with_seq):
    rng = np.random.default_rng(1)
    h, c, gates = rng.standard_normal((1, 3, 2)), rng.standard_normal((1, 3, 2)), rng.standard_normal((1, 3, 8))
    seq, t = np.array([1, 3, 2], np.int32), np.array([2], np.int32)
    ins = [h, c, gates] + ([seq] if with_seq else []) + [t]
    got = eval_op("LSTMUnit", *ins, n_out=2, forget_bias=0.5, drop_states=drop, sequence_lengths=with_seq)
    want = lstm_unit_numpy(h, c, gates, seq if with_seq else None, 2, 0.5, drop)  # 0.5: args are float32
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12)


@pytest.mark.parametrize("drop", [False, True])
def test_lstm_unit_gradient_matches_numeric(drop):
    rng = np.random.default_rng(2)
    h, c, gates = rng.standard_normal((1, 3, 2)), rng.standard_normal((1, 3, 2)), rng.standard_normal((1, 3, 8))
    seq, t = np.array([1, 3, 2], np.int32), np.array([2], np.int32)
    dh, dc = rng.standard_normal((1, 3, 2)), rng.standard_normal((1, 3, 2))
    args = dict(forget_bias=0.3, drop_states=drop)
    ho, co = eval_op("LSTMUnit", h, c, gates, seq, t, n_out=2, **args)
    grads = eval_op("LSTMUnitGradient", h, c, gates, seq, t, ho, co, dh, dc, n_out=3, **args)
    for k, g in enumerate(grads):
        num = (finite_difference_op("LSTMUnit", [h, c, gates, seq, t], k, dh, output=0, n_out=2, **args)
               + finite_difference_op("LSTMUnit", [h, c, gates, seq, t], k, dc, output=1, n_out=2, **args))
        np.testing.assert_allclose(g, num, atol=1e-6)


def test_lstm_unit_gradient_maker_without_seq_lengths():
    op = core.CreateOperator("LSTMUnit", ["h", "c", "g", "t"], ["H", "C"], sequence_lengths=0)
    ops, g_in = GradientRegistry.GetGradientForOp(op, ["H_grad", "C_grad"])
    assert (list(ops[0].input), list(ops[0].output)) == (["h", "c", "g", "t", "H", "C", "H_grad", "C_grad"],
                                                         ["h_grad", "c_grad", "g_grad"])
    assert g_in == ["h_grad", "c_grad", "g_grad", None]


# ---- plans, step workspaces, views ----------------------------------------------------------

def drive_collect(op, ws):
    """Drive a kernel's plan as the debugger would, recording every SubnetRun."""
    b = executor.bind(op, 0, "t", workspace=ws)
    runs, plan = [], executor.call_kernel(b, ws)
    try:
        step = next(plan)
        while True:
            runs.append(step)
            executor.run_net(step.net, step.workspace)
            step = plan.send(None)
    except StopIteration as stop:
        executor.store_outputs(b, ws, stop.value)
    return runs


def test_rnn_kernels_yield_one_subnet_run_per_timestep():
    _, z, fwd, grad = golden()
    ws = fed_workspace(z)
    executor.run_op(fwd.op[0], ws)
    runs = drive_collect(fwd.op[1], ws)
    assert [r.label for r in runs] == [f"timestep {t}" for t in range(5)]
    assert {r.arg for r in runs} == {"step_net"} and all(isinstance(r, SubnetRun) for r in runs)
    assert [o.type for o in runs[0].net.op][:5] == ["rnn_internal_apply_link"] * 5
    assert len({id(r.workspace) for r in runs}) == 5
    executor.run_op(fwd.op[2], ws)
    executor.run_op(grad.op[0], ws)
    executor.run_op(grad.op[1], ws)
    back = drive_collect(grad.op[2], ws)
    assert [r.label for r in back] == [f"timestep {t}" for t in reversed(range(5))]
    assert [r.workspace for r in back] == list(reversed([r.workspace for r in runs]))
    types = [o.type for o in back[0].net.op]
    assert types[-4:] == ["FCGradient", "Sum", "Sum", "Sum"] and "rnn_internal_accumulate_gradient_input" in types
    np.testing.assert_allclose(ws.fetch_blob("lstm/gates_t_w_grad"), z["run/grad/lstm/gates_t_w_grad"], atol=1e-5)


def test_forward_only_cycles_workspaces_and_has_no_gradient():
    _, z, _, _ = golden()
    ws = fed_workspace(z)
    net = build_lstm(forward_only=True).Proto()
    executor.run_net(net, ws)
    scratch = ws.values["lstm/step_workspaces"]
    assert isinstance(scratch, StepWorkspaces) and len(scratch.steps) == 4
    np.testing.assert_allclose(ws.fetch_blob("lstm/hidden_state_all"), z["run/forward/lstm/hidden_state_all"],
                               atol=1e-5)
    grad = text_format.Parse(json.loads(GOLDEN.with_suffix(".json").read_text())["backward"]["grad_net"],
                             caffe2_pb2.NetDef())
    with pytest.raises(ExecutionError, match="step workspaces"):
        executor.run_net(grad, ws)


def test_bind_view_writes_land_in_the_buffer():
    parent = Workspace("p")
    parent.feed_blob("buf", np.zeros((3, 2)))
    step = parent.step_child("s")
    step.bind_view("row", "buf", slice(1, 2))
    seen = step.values["row"]
    step.values["row"] = np.ones((1, 2))
    assert parent.fetch_blob("buf").tolist() == [[0, 0], [1, 1], [0, 0]]
    assert seen.tolist() == [[0, 0]]  # a read is a snapshot: undo can write it back
    step.values["row"] = seen
    assert parent.fetch_blob("buf").tolist() == [[0, 0]] * 3
    with pytest.raises(ExecutionError, match="view of rows 1:2 of 'buf'"):
        step.values["row"] = np.ones((2, 2))


def test_lstm_example_runs_forward_and_backward_and_trains():
    from engine.model.modelio import load_model
    from examples.build import HERE

    model = load_model(HERE / "lstm" / "predict_net.pb")
    ws = Workspace("lstm_example")
    ws.run_net_once(model.init)
    ws.create_net(model.predict)
    losses = []
    for _ in range(10):
        ws.run_net(model.predict.name)
        losses.append(float(ws.fetch_blob("loss")))
    assert {"RecurrentNetwork", "RecurrentNetworkGradient"} <= {o.type for o in model.predict.op}
    assert ws.fetch_blob("lstm/gates_t_w_grad").shape == (16, 4) and np.abs(ws.fetch_blob("input_grad")).sum() > 0
    assert losses[-1] < losses[0]


def test_debugger_steps_into_a_timestep_and_undoes_a_state_write():
    from engine.debugger.debugger import Debugger
    from engine.model.modelio import load_model
    from examples.build import HERE

    d = Debugger(load_model(HERE / "lstm" / "predict_net.pb"))
    d.step()
    d.step_into()
    while d.current_op().type != "LSTMUnit":
        d.step()
    assert d.pc.frames[-1].label == "timestep 0"
    states = "lstm/lstm/hidden_t_prev_states"
    before = d.ws.values[states].copy()
    d.step()
    assert not np.allclose(d.ws.values[states][1], before[1])  # h_0 landed in row 1
    d.step_back()
    np.testing.assert_array_equal(d.ws.values[states], before)
