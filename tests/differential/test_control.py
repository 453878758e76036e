"""control/*: Do / If / While nets built by Caffe2's helpers, and an LSTM, vs Caffe2 1.10.2.

Gradient ops are compared modulo ``compare_as_sets`` and with nested NetDef names blanked
(Caffe2 numbers them from a process-global counter).  Each run (``run`` or ``cond_true`` /
``cond_false``) feeds its inputs, runs the forward net, then the gradient ops in the same
workspace, and compares values within 1e-5 relative (atol 1e-6).
"""
from __future__ import annotations

import pytest

from engine.model import netnames

from tests.differential.bugs import check_numeric
from tests.differential.goldens import (NetvizError, assert_error_matches, assert_same_ops, backward,
                                        case_names, grad_net_of, load, parse_net, run_values)

XFAIL: dict[str, str] = {}
BUGS = {"control/if_cond_name_chars_bug", "control/if_then_only", "control/while_counter_accumulate",
        "control/while_no_cond_net"}


def _param(name: str, reason: str | None) -> object:
    return pytest.param(name, marks=pytest.mark.xfail(reason=reason, strict=False)) if reason else name


@pytest.mark.parametrize("name", [_param(n, XFAIL.get(n)) for n in case_names("control_backward") if n not in BUGS])
def test_control_matches_caffe2(name, monkeypatch):
    monkeypatch.setattr(netnames, "USED", {})  # blob names like gradient_loop_cond_net/cond
    case = load(name)
    net = parse_net(case["forward_net"])
    if "error" in case["backward"]:
        with pytest.raises((NetvizError, AssertionError)) as e:
            backward(case, net)
        assert_error_matches(e.value, case["backward"])
        return
    ops, grads = backward(case, net)
    grad_net = grad_net_of(ops, parse_net(case["backward"]["grad_net"]).name)
    assert_same_ops(case, "backward.grad_net", grad_net, nested_names=False)
    for run in case["runs"]:
        run_values(case, net, grad_net, run["label"] + "/", run)


def test_caffe2_bug_if_gradient_lists_single_char_inputs():
    """Caffe2 builds the gradient If's inputs as [cond] + (inputs - set('cond')), a set of
    characters, so blobs 'c' and 'd' are dropped; netviz lists them, and its gradient is right."""
    case = load("control/if_cond_name_chars_bug")
    ops, _ = backward(case)
    grad_if = next(o for o in ops if o.type == "If")
    assert {"c", "d"} <= set(grad_if.input)
    caffe2_if = next(o for o in parse_net(case["backward"]["grad_net"]).op if o.type == "If")
    assert not {"c", "d"} <= set(caffe2_if.input)
    for label in ("cond_true", "cond_false"):
        check_numeric(case, ["X", "c", "d"], ys=["Y"], prefix=label + "/")


def test_caffe2_bug_if_then_only_overwriting_a_blob_is_differentiable():
    """Caffe2 rejects the Sigmoid gradient's read of Y version 0, which a then-only If replaced;
    netviz lists Y among the If's inputs for the gradient: the then branch zeroes Y_grad after
    its own gradient, the else branch passes it through, so both conditions match central differences."""
    case = load("control/if_then_only")
    assert "needs output \"Y\" at version 0" in case["backward"]["error"]
    ops, grads = backward(case)
    grad_if = next(o for o in ops if o.type == "If")
    assert "Y" in grad_if.input and "Y_grad" in grad_if.output and grads["Y"] == "Y_grad"
    then_net, else_net = (a.n for a in grad_if.arg)
    assert (then_net.op[-1].type, list(then_net.op[-1].input), list(then_net.op[-1].output)) == \
        ("ConstantFill", ["Y"], ["Y_grad"])
    assert all("Y_grad" not in o.output for o in else_net.op)
    assert [o.type for o in ops if o.type != "If"] == ["ConstantFill", "AveragedLossGradient", "SigmoidGradient", "Sum"]
    for label in ("cond_true", "cond_false"):
        check_numeric(case, ["X", "W", "b"], ys=["loss"], prefix=label + "/")


@pytest.mark.parametrize("name, wrt, ys", [("control/while_counter_accumulate", ["acc", "W", "b"], ["loss"]),
                                           ("control/while_no_cond_net", ["x", "y"], ["y"])])
def test_caffe2_bug_while_writing_outer_blob_is_differentiable(name, wrt, ys):
    """Caffe2 cannot differentiate these loops ('Reusage of outer blob name ... in Do op' / a
    version error); netviz must, and its gradient must match central differences."""
    case = load(name)
    assert "error" in case["backward"]
    check_numeric(case, wrt, ys=ys, prefix="run/")
