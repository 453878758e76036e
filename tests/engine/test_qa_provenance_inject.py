"""A NaN the user injected (``i``) is named as injected (QA pass over the user's path): the walk read the
blob's value from the op that wrote it before the injection and said the next op "made nan from finite
inputs", with the old value's range beside it."""
from __future__ import annotations

import numpy as np

from engine.debugger import Debugger
from engine.debugger.provenance import explain_debugger
from engine.model.modelio import Model
from engine.model.opdef import create_operator as op
from proto import caffe2_pb2


def _net() -> caffe2_pb2.NetDef:
    net = caffe2_pb2.NetDef(name="chain", op=[op("Relu", "x", "h"), op("Sigmoid", "h", "y"), op("Tanh", "y", "z")])
    net.external_input.append("x")
    return net


def test_an_injected_nan_is_the_origin_not_the_op_reading_it() -> None:
    dbg = Debugger(Model(_net()), {"x": np.array([1.0, -2.0, 3.0], np.float32)})
    dbg.step()  # Relu ran: h = [1, 0, 3]
    dbg.inject("h", np.float32(np.nan))
    with np.errstate(all="ignore"):
        dbg.continue_()
    assert explain_debugger(dbg) == [
        "op#2 Tanh: z[0] = nan ← Tanh(y[0] = nan)",
        "op#1 Sigmoid: y[0] = nan ← Sigmoid(h[0] = nan)",
        "origin: h[0] = nan was injected (i), not made by an op"]


def test_without_an_injection_the_walk_is_unchanged() -> None:
    dbg = Debugger(Model(_net()), {"x": np.array([np.nan, 1.0], np.float32)})
    with np.errstate(all="ignore"):
        dbg.continue_()
    assert explain_debugger(dbg)[-1] == "origin: x[0] = nan is a net input (no op wrote it)"
