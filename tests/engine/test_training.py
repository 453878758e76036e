"""engine.autodiff.training: sections of nets that hold their backward pass, and the gradient-op pairing."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.caffe2 import core
from engine.errors import GradientError
from engine.autodiff.gradient_ir import backward_net
from engine.model.modelio import load_net
from engine.autodiff.training import (BACKWARD, FORWARD, OPTIMIZER, backward_program, forward_net, is_gradient_name,
                             split_training_net)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("name,counts", [
    ("mlp", {FORWARD: 4, BACKWARD: 5, OPTIMIZER: 6}),
    ("lstm", {FORWARD: 3, BACKWARD: 4, OPTIMIZER: 6}),
    ("if_net", {FORWARD: 4, BACKWARD: 3}),
    ("while_net", {FORWARD: 4, BACKWARD: 6}),  # zero fills and HasScope belong to the backward pass
    ("nested_if_in_while", {FORWARD: 4, BACKWARD: 6}),
    ("do_net", {FORWARD: 3, BACKWARD: 3}),
])
def test_bundled_examples_split_and_pair_like_the_generated_view(name, counts):
    net = load_net(EXAMPLES / name / "predict_net.pb")
    split = split_training_net(net)
    assert split.counts() == counts and split.losses == ["loss"] and split.paired_by == "regenerated"
    fwd = forward_net(net, split)
    _, origin = backward_net(fwd, ["loss"])  # what the generated view pairs
    assert [split.partner[i] for i in split.indices(BACKWARD)] == origin


def _mlp_trainer(optimizer: str, iter_first: bool = False) -> core.Net:
    net = core.Net("trainer")
    if iter_first:
        net.Iter("it", "it")
    h = net.FC(["X", "W", "b"], "h")
    y = net.Relu(h, "y")
    loss = net.AveragedLoss(y, "loss")
    grads = net.AddGradientOperators([loss])
    if not iter_first:
        net.Iter("it", "it")
    lr = net.LearningRate("it", "lr", base_lr=-0.1, policy="fixed")
    for p in ("W", "b"):
        if optimizer == "sgd":
            net.WeightedSum([p, "ONE", grads[p], lr], p)
        elif optimizer == "momentum":
            net.MomentumSGDUpdate([grads[p], f"{p}_m", lr, p], [grads[p], f"{p}_m", p])
        else:  # weight decay on the gradient, then a plain update
            net.WeightedSum([grads[p], "ONE", p, "wd"], grads[p])
            net.Adagrad([p, f"{p}_h", grads[p], lr], [p, f"{p}_h"])
    return net


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adagrad_wd"])
@pytest.mark.parametrize("iter_first", [False, True])
def test_optimizer_ops_and_their_plumbing_form_the_optimizer_section(optimizer, iter_first):
    net = _mlp_trainer(optimizer, iter_first).Proto()
    split = split_training_net(net)
    types = {s: [net.op[i].type for i in split.indices(s)] for s in (FORWARD, BACKWARD, OPTIMIZER)}
    assert types[FORWARD] == ["FC", "Relu", "AveragedLoss"]
    assert types[BACKWARD][:3] == ["ConstantFill", "AveragedLossGradient", "ReluGradient"]
    assert {"Iter", "LearningRate"} <= set(types[OPTIMIZER])
    assert not {"Iter", "LearningRate", "MomentumSGDUpdate", "Adagrad"} & set(types[BACKWARD])
    assert split.paired_by == "regenerated"


def test_backward_program_of_a_training_net_is_the_net_itself():
    net = _mlp_trainer("sgd").Proto()
    prog, origin, losses = backward_program(net)
    assert prog is net and losses == ["loss"]
    assert origin == [None, 2, 1, 0, None, None, None, None]  # fill, grads, then Iter/LR/2 updates
    regen, origin2, _ = backward_program(net, regenerate=True)
    assert [op.type for op in regen.op] == ["FC", "Relu", "AveragedLoss", "ConstantFill",
                                            "AveragedLossGradient", "ReluGradient", "FCGradient"]
    assert origin2 == [None, 2, 1, 0]


def test_forward_only_net_is_untouched_and_backward_only_net_is_refused():
    net = core.Net("f")
    net.Relu("X", "Y")
    split = split_training_net(net.Proto())
    assert not split.has_backward and forward_net(net.Proto(), split) is net.Proto()
    only = core.Net("b")
    only.ReluGradient(["Y", "Y_grad"], "X_grad")
    with pytest.raises(GradientError, match="no forward section"):
        forward_net(only.Proto())


def test_pairing_by_names_when_the_pass_cannot_be_regenerated():
    net = core.Net("hand")
    net.FC(["X", "W", "b"], "h")
    net.Relu("h", "y")
    net.ReluGradient(["y", "y_grad"], "h_grad")  # no autogen fill: the loss is unknown
    net.FCGradient(["X", "W", "h_grad"], ["W_grad", "b_grad", "X_grad"])
    split = split_training_net(net.Proto())
    assert split.paired_by == "names" and split.partner == {2: 1, 3: 0}


@pytest.mark.parametrize("name,grad", [("X_grad", True), ("_X_grad_autosplit_0", True), ("loss_autogen_grad", True),
                                       ("W_grad/_WHILE_ITERATION_GRAD_", True), ("gradient", False),
                                       ("grade", False), ("fc_grads", False)])
def test_gradient_names(name, grad):
    assert is_gradient_name(name) == grad


def test_training_iteration_runs_and_updates_parameters():
    from engine.caffe2 import workspace
    workspace.ResetWorkspace()
    rng = np.random.default_rng(0)
    feeds = {"X": rng.standard_normal((4, 3)), "W": rng.standard_normal((5, 3)), "b": np.zeros(5),
             "ONE": np.ones(1), "it": np.zeros(1, np.int64)}
    for k, v in feeds.items():
        workspace.FeedBlob(k, v.astype(np.int64 if k == "it" else np.float32))
    workspace.RunNetOnce(_mlp_trainer("sgd").Proto())
    w_grad = workspace.FetchBlob("W_grad")
    np.testing.assert_allclose(workspace.FetchBlob("W"), feeds["W"] - 0.1 * w_grad, rtol=1e-5, atol=1e-6)
