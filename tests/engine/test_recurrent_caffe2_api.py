"""``engine.caffe2.recurrent`` behaves as ``caffe2.python.recurrent`` where Caffe2's own RNN tests look (issue 35.5).

Caffe2's ``recurrent_net`` passes the blobs it is given to ``net.RecurrentNetwork`` as they are:
a BlobReference (already scoped by whoever made it) stays unscoped, a string is scoped once by the
current NameScope (``gru_test``'s cell inside ``NameScope("test_name_scope")`` read
``test_name_scope/test_name_scope/…`` before).  ``retrieve_step_blobs`` copies each step's blobs
into the workspace as ``<prefix>_<blob><t>``, the timestep under the RNN executor's name
``timestep_rnnexec_t<t>`` (``recurrent_network_test::test_extract``).  The conformance harness runs
those Caffe2 test files against this module (``scripts/conformance/harness.py``).
"""
from __future__ import annotations

import numpy as np
import pytest

from engine.caffe2 import core, recurrent, workspace
from proto import caffe2_pb2

T = 3
X = np.arange(2 * T, dtype=np.float32).reshape(T, 1, 2)


@pytest.fixture(autouse=True)
def fresh_workspace():
    workspace.ResetWorkspace()
    yield
    workspace.ResetWorkspace()


def sum_cell(scoped: bool) -> tuple[core.Net, list]:
    """h = h_prev + x_t; its inputs as scoped BlobReferences or plain names."""
    cell = core.Net("sum_cell")
    if scoped:
        x_t, h_prev = cell.AddScopedExternalInputs("x_t", "h_prev")
    else:
        cell.Proto().external_input.extend(["x_t", "h_prev"])
        x_t, h_prev = "x_t", "h_prev"
    h = cell.Add([h_prev, x_t], "h")
    cell.AddExternalOutput(h)
    return cell, [x_t, h_prev, h]


def scoped_in_s(net: core.Net, refs: bool) -> tuple[caffe2_pb2.OperatorDef, list[str]]:
    """recurrent_net called inside NameScope("s"): its op and returned names (Caffe2 gives
    inputs s/X, s/h0, outputs s/h_all, s/h_last, s/rnn/step_workspaces either way)."""
    if not refs:
        cell, _ = sum_cell(scoped=False)
    with core.NameScope("s"):
        if refs:
            xs, h0 = net.AddScopedExternalInputs("X", "h0")
            cell, (x_t, h_prev, h) = sum_cell(scoped=True)
            outs = recurrent.recurrent_net(net, cell, [(x_t, xs)], [(h_prev, h0)], {h_prev: h}, scope="rnn")
        else:
            outs = recurrent.recurrent_net(net, cell, [("x_t", "X")], [("h_prev", "h0")], {"h_prev": "h"},
                                           scope="rnn")
    return net.Proto().op[-1], [str(o) for o in outs]


@pytest.mark.parametrize("refs", [True, False], ids=["blob_references", "strings"])
def test_blobs_in_a_name_scope_are_scoped_once(refs: bool) -> None:
    op, outs = scoped_in_s(core.Net("scoped"), refs)
    assert list(op.input) == ["s/X", "s/h0"]
    assert list(op.output) == ["s/h_all", "s/h_last", "s/rnn/step_workspaces"]
    assert outs == ["s/h_all", "s/h_last"]


def test_retrieve_step_blobs_copies_every_steps_blobs() -> None:
    net = core.Net("extract")
    cell, _ = sum_cell(scoped=False)
    recurrent.recurrent_net(net, cell, [("x_t", "X")], [("h_prev", "h0")], {"h_prev": "h"}, scope="rnn")
    workspace.FeedBlob("X", X)
    workspace.FeedBlob("h0", np.zeros((1, 1, 2), np.float32))
    workspace.RunNetOnce(net)
    names = sorted(n.decode() for n in recurrent.retrieve_step_blobs(net, "pre"))
    want = sorted([f"pre_{b}{t}" for t in range(T) for b in ("x_t", "h_prev", "h")]
                  + [f"pre_timestep_rnnexec_t{t}{t}" for t in range(T)])
    assert names == want
    for t in range(T):
        np.testing.assert_array_equal(workspace.FetchBlob(f"pre_x_t{t}"), X[t:t + 1])
        np.testing.assert_array_equal(workspace.FetchBlob(f"pre_h{t}"), X[:t + 1].sum(axis=0, keepdims=True))
        assert workspace.FetchBlob(f"pre_timestep_rnnexec_t{t}{t}").tolist() == [t]


def test_set_rnn_executor_config_adds_the_executor_arguments() -> None:
    net = core.Net("configured")
    cell, _ = sum_cell(scoped=False)
    recurrent.recurrent_net(net, cell, [("x_t", "X")], [("h_prev", "h0")], {"h_prev": "h"}, scope="rnn")
    op = net.Proto().op[-1]
    recurrent.set_rnn_executor_config(op, num_threads=4, max_cuda_streams=2)
    args = {a.name: a.i for a in op.arg if a.name.startswith("rnn_executor.")}
    assert args == {"rnn_executor.num_threads": 4, "rnn_executor.max_cuda_streams": 2}
