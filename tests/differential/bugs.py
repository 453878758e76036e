"""Goldens marked ``caffe2_bug``: netviz is checked against the mathematics, not against Caffe2.

The correct gradient comes from netviz's numeric checker (``NetGradientChecker``: central
differences of the plain sum of the outputs, in float64); then netviz is run with Caffe2's
own inputs and output gradients and must give a different answer from the recorded one.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from engine.caffe2.gradient_checker import NetGradientChecker
from engine.analysis.lint import fix_caffe2
from engine.caffe2.workspace import Workspace
from engine.autodiff.gradient_ir import IR
from tests.differential.goldens import arrays, feed, grad_net_of, parse_net, ys_of

STEP, THRESHOLD = 1e-3, 1e-3  # float64 central differences: truncation error ~ step**2


def check_numeric(case: dict[str, Any], wrt: list[str], ys: list[str] | None = None, prefix: str = "") -> None:
    """netviz's backward of `ys` (default: the case's ys keys) matches central differences at
    the inputs ``<prefix>input/*`` of the case."""
    net = parse_net(case["forward_net"])
    data = arrays(case)
    start = prefix + "input/"
    values = {k[len(start):]: v.astype(np.float64) if v.dtype.kind == "f" else v
              for k, v in data.items() if k.startswith(start)}
    ys = ys or list(case["ys"])
    with fix_caffe2():  # NOTE: the default, Caffe2-exact mode reproduces Caffe2's wrong values
        for blob in wrt:
            NetGradientChecker.Check(net, ys, values, blob, step_size=STEP, threshold=THRESHOLD, print_net=False)


def assert_differs_from_caffe2(case: dict[str, Any], blobs: list[str]) -> None:
    """With Caffe2's inputs and fed output gradients, netviz's `blobs` (with --fix-caffe2) differ from Caffe2's."""
    ir = IR(list(parse_net(case["forward_net"]).op), save_inputs=True)
    ops, _ = ir.GetBackwardPass(ys_of(case))
    data = arrays(case)
    ws = Workspace("caffe2_bug")
    feed(ws, data, "input/")
    ws.run_net_once(grad_net_of(ir.ForwardWithSaves()[0], "forward"))  # saves of in-place inputs too
    feed(ws, data, "output_grad/")
    with fix_caffe2():
        ws.run_net_once(grad_net_of(ops, "grad"))
    for b in blobs:
        got, theirs = ws.fetch_blob(b), data["grad/" + b]
        assert not np.allclose(got, theirs, rtol=1e-4, atol=1e-5), f"{b}: netviz equals Caffe2's wrong value"
