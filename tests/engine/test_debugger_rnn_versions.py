"""The debugger's versions of RNN state buffers hold the rows the step writes through link views
(issue 35.2), checked through ``netviz run --dump`` and the debugger's records.

Cell h_t = h_{t-1} + x_t over T = 3, loss = sum(h_all): the state buffer is h0 followed by the
running sums of X, and its gradient rows are T, T, T-1, …, 1 — what real Caffe2 1.10.2 gives for
``rnn/h_prev_states`` and ``rnn/h_prev_states_grad``, and what the engine's own run gives.  The
version ``rnn_internal_apply_link`` records is completed by the step's ops afterwards (the Add
writes its last row, AddGradient its first gradient row), so the recorded value must be taken
when no later write can reach it.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.caffe2 import core
from engine.runtime import executor
from engine.debugger import Debugger
from engine.debugger.records import VersionFinal
from engine.model.modelio import Model, save_net
from engine.caffe2.recurrent import recurrent_net
from engine.caffe2.workspace import Workspace
from netviz.cli import main
from proto import caffe2_pb2

T = 3
X = np.arange(1, 2 * T + 1, dtype=np.float32).reshape(T, 1, 2)
H0 = np.zeros((1, 1, 2), np.float32)
STATES, GRAD = "rnn/h_prev_states", "rnn/h_prev_states_grad"


def running_sum_net(with_loss: bool) -> caffe2_pb2.NetDef:
    cell = core.Net("cell")
    cell.Proto().external_input.extend(["h_prev", "x_t"])
    cell.AddExternalOutput(cell.Add(["h_prev", "x_t"], "h"))
    net = core.Net("running_sum")
    net.Proto().external_input.extend(["X", "h0"])
    outs = recurrent_net(net, cell, [("x_t", "X")], [("h_prev", "h0")], {"h_prev": "h"}, scope="rnn",
                         forward_only=not with_loss)
    if with_loss:
        net.SumElements([outs[0]], "loss")
    return net.Proto()


def expected_states() -> np.ndarray:
    """Rows h0, h1, h2, h3: the running sums of X (Caffe2: [[0,0],[1,2],[4,6],[9,12]])."""
    return np.concatenate([H0, H0 + np.cumsum(X, axis=0)])


def expected_grad() -> np.ndarray:
    """d sum(h_all) / d state row t: row 0 (h0) gets T, row t >= 1 gets T - t + 1."""
    rows = np.array([T] + list(range(T, 0, -1)), np.float32)
    return np.broadcast_to(rows[:, None, None], (T + 1, 1, 2))


def engine_run(net: caffe2_pb2.NetDef, loss: bool) -> Workspace:
    """The same net run by the executor (with Caffe2's AddGradientOperators for the loss)."""
    ws = Workspace("plain")
    ws.feed_blob("X", X)
    ws.feed_blob("h0", H0)
    run = core.Net(net)
    if loss:
        run.AddGradientOperators(["loss"])
    executor.run_net(run.Proto(), ws)
    return ws


def last_dumped(folder: Path, name: str) -> np.ndarray:
    index = json.loads((folder / "index.json").read_text())
    last = max((e for e in index if e["blob"] == name), key=lambda e: e["version"])
    return np.load(folder / last["file"])


@pytest.fixture()
def nets(tmp_path: Path) -> dict[str, Path]:
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "h0.npy", H0)
    return {"fwd": save_net(running_sum_net(False), tmp_path / "fwd.pbtxt"),
            "train": save_net(running_sum_net(True), tmp_path / "train.pbtxt")}


def test_engine_run_is_the_reference() -> None:
    ws = engine_run(running_sum_net(True), loss=True)
    np.testing.assert_allclose(ws.fetch_blob(STATES), expected_states())
    np.testing.assert_allclose(ws.fetch_blob(GRAD), expected_grad())


def test_run_dump_shows_the_state_buffer_with_its_last_row(nets: dict[str, Path], tmp_path: Path) -> None:
    feeds = ["--input", f"X={tmp_path / 'X.npy'}", "--input", f"h0={tmp_path / 'h0.npy'}"]
    assert main(["run", str(nets["fwd"]), *feeds, "--dump", str(tmp_path / "d")]) == 0
    np.testing.assert_allclose(last_dumped(tmp_path / "d", STATES), expected_states())
    # every version is the buffer as it was when the next one was made: one more row each step
    index = json.loads((tmp_path / "d" / "index.json").read_text())
    versions = sorted((e for e in index if e["blob"] == STATES), key=lambda e: e["version"])
    filled = [int(np.count_nonzero(np.load(tmp_path / "d" / e["file"]).any(axis=(1, 2)))) for e in versions]
    assert filled == [0, 1, 1, 2, 2, 3]


def test_run_dump_shows_row_0_of_the_state_gradient(nets: dict[str, Path], tmp_path: Path) -> None:
    feeds = ["--input", f"X={tmp_path / 'X.npy'}", "--input", f"h0={tmp_path / 'h0.npy'}"]
    assert main(["run", str(nets["train"]), *feeds, "--loss", "loss", "--dump", str(tmp_path / "d")]) == 0
    ws = engine_run(running_sum_net(True), loss=True)
    np.testing.assert_allclose(last_dumped(tmp_path / "d", GRAD), ws.fetch_blob(GRAD))
    np.testing.assert_allclose(last_dumped(tmp_path / "d", STATES), ws.fetch_blob(STATES))


def test_debugger_records_keep_each_versions_own_rows() -> None:
    net = running_sum_net(True)
    dbg = Debugger(Model(net, caffe2_pb2.NetDef(), {}), {"X": X, "h0": H0}, device="cpu", loss="loss")
    finals: list[VersionFinal] = []
    dbg.listeners.append(lambda e: finals.append(e) if isinstance(e, VersionFinal) else None)
    dbg.backward()
    assert dbg.continue_().reason == "end"
    ws = engine_run(net, loss=True)
    # the last forward timestep: the link of h_prev (op 0) saw rows 0..2, the link of h (op 1) all
    step = ("op", 0, "step_net")
    np.testing.assert_allclose(dbg.written_value((*step, 0), STATES)[:T], expected_states()[:T])
    assert not dbg.written_value((*step, 0), STATES)[T].any()
    np.testing.assert_allclose(dbg.written_value((*step, 1), STATES), expected_states())
    # the gradient buffer's last version, and its record's summary, include row 0
    last_grad = max((f for f in finals if f.name == GRAD), key=lambda f: f.version)
    np.testing.assert_allclose(dbg.written_value(last_grad.path, GRAD), ws.fetch_blob(GRAD))
    summary = next(o for o in dbg.records_by_path[last_grad.path].outputs if o.name == GRAD)
    assert summary.norm == pytest.approx(float(np.linalg.norm(ws.fetch_blob(GRAD))), rel=1e-6)
