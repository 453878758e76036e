"""zoo/*: every model-zoo net vs Caffe2 1.10.2: get_ssa, and the backward pass of its final output.

When Caffe2's gradient generation stops at an op without a gradient, netviz must stop at the
same op (``failed_op_index``) with Caffe2's words, and the recorded fallback (the backward
pass of an earlier op's output) must match exactly.
"""
from __future__ import annotations

import pytest

from engine.autodiff.gradient_ir import GradientRegistry
from engine.model.modelio import load_net
from engine.model.ssa import get_ssa
from tests.differential.goldens import (NetvizError, assert_error_matches, assert_same_ops, case_names,
                                        grad_map_json, grad_net_of, load, parse_net)

XFAIL: dict[str, str] = {}


def _check_backward(net, y: str, want: dict, case: dict, key: str) -> None:
    if "error" in want:
        with pytest.raises(NetvizError) as e:
            GradientRegistry.GetBackwardPass(list(net.op), [y])
        assert_error_matches(e.value, want)
        assert getattr(e.value, "op_index", None) == want["failed_op_index"]
        assert net.op[want["failed_op_index"]].type == want["failed_op_type"]
        return
    ops, grads = GradientRegistry.GetBackwardPass(list(net.op), [y])
    assert len(ops) == want["num_grad_ops"]
    assert_same_ops(case, key, grad_net_of(ops, parse_net(want["grad_net"]).name))
    assert grad_map_json(grads) == want["grad_map"]


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(reason=XFAIL[n], strict=False))
                                  if n in XFAIL else n for n in case_names("zoo_net")])
def test_zoo_net_matches_caffe2(name, zoo):
    case = load(name)
    net = load_net(zoo / case["zoo_path"])
    assert (net.name, len(net.op)) == (case["net_name"], case["num_ops"])
    if "ssa_error" in case:
        with pytest.raises(NetvizError) as e:
            get_ssa(net)
        assert_error_matches(e.value, case["ssa_error"])
    else:
        ssa, versions = get_ssa(net)
        assert [[[list(b) for b in ins], [list(b) for b in outs]] for ins, outs in ssa] == case["ssa"]
        assert dict(versions) == case["ssa_blob_versions"]
    _check_backward(net, case["y"], case["backward"], case, "backward.grad_net")
    if "fallback" in case:
        fb = case["fallback"]
        _check_backward(net, fb["y"], fb["backward"], case, "fallback.backward.grad_net")
    for y in case.get("fallback_tried", []):
        with pytest.raises(NetvizError):
            GradientRegistry.GetBackwardPass(list(net.op), [y])
