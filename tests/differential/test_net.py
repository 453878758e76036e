"""net/*: small multi-op nets vs Caffe2 1.10.2: fan-out, in-place chains, sparse, StopGradient, ys forms, errors."""
from __future__ import annotations

import pytest

from engine.caffe2.core import Net
from engine.model.scope import DeviceScope
from tests.differential.bugs import assert_differs_from_caffe2, check_numeric
from tests.differential.goldens import (assert_same_ops, backward, case_names, check_backward_case,
                                        grad_map_json, load, parse_net)

XFAIL: dict[str, str] = {}
BUGS = {"net/inplace_sqr", "net/two_char_gradient_name"}
IN_DEVICE_SCOPE = {"net/device_scope_autogen": "net/device_option_copy"}  # case -> case whose op device it uses
CASES = [pytest.param(n, marks=pytest.mark.xfail(reason=XFAIL[n], strict=False)) if n in XFAIL else n
         for n in case_names("net_backward") if n not in BUGS and n not in IN_DEVICE_SCOPE]


@pytest.mark.parametrize("name", CASES)
def test_net_matches_caffe2(name):
    check_backward_case(load(name))


@pytest.mark.parametrize("name", sorted(IN_DEVICE_SCOPE))
def test_net_in_device_scope_matches_caffe2(name):
    """GetBackwardPass called inside DeviceScope(d): only the autogen ConstantFill gets d."""
    d = parse_net(load(IN_DEVICE_SCOPE[name])["forward_net"]).op[0].device_option
    with DeviceScope(d):
        check_backward_case(load(name))


def test_add_gradient_operators_skip():
    case = load("net/add_gradient_operators_skip")
    net = Net(parse_net(case["forward_net"]))
    grads = net.AddGradientOperators(case["ys"], skip=case["skip"])
    assert_same_ops(case, "result.net_after", net.Proto())
    got = parse_net(case["result"]["net_after"])
    assert list(net.Proto().external_input) == list(got.external_input)
    assert grad_map_json({str(k): str(v) for k, v in grads.items()}) == case["result"]["grad_map"]


def test_caffe2_bug_inplace_sqr_gradient_is_correct():
    """Sqr's gradient Mul reads a copy of X saved before the in-place Sqr (Caffe2: the new X)."""
    case = load("net/inplace_sqr")
    check_numeric(case, ["X"])
    assert_differs_from_caffe2(case, ["X_grad"])


def test_caffe2_bug_two_char_gradient_name_is_dense():
    """Caffe2 unpacks the 2-character name 'dZ' as a sparse (indices, values) pair and fails;
    netviz treats it as a dense blob: the same ops as with a longer name."""
    case = load("net/two_char_gradient_name")
    assert "is sparse" in case["backward"]["error"]
    ops, grads = backward(case)
    long = dict(case, ys={y: g + "_long" for y, g in case["ys"].items()})
    ops_long, _ = backward(long)
    rename = [str(o).replace("_long", "") for o in ops_long]
    assert [str(o) for o in ops] == rename and grads["Z"] == "dZ"
    check_numeric(case, ["X", "W", "b"], ys=["Z"])
