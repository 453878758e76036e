"""Nets built by Caffe2's rnn_cell / gru_cell run in netviz with Caffe2's numbers: the unit kernels
(GRUUnit, LSTMUnit, LayerNorm, ElementwiseLinear, the attention ops) inside a RecurrentNetwork and
its gradient.  Goldens: tests/oracle/gen_kernels_rnn_cells.py (real Caffe2)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.workspace import Workspace
from proto import caffe2_pb2

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "kernels_rnn_cells"
NETS = sorted(p.stem for p in GOLDEN.glob("*.pb"))


@pytest.mark.parametrize("name", NETS)
def test_rnn_cell_net_matches_caffe2(name: str) -> None:
    net = caffe2_pb2.NetDef()
    net.ParseFromString((GOLDEN / f"{name}.pb").read_bytes())
    with np.load(GOLDEN / f"{name}.npz") as z:
        data = {k: z[k] for k in z.files}
    ws = Workspace("rnn_cell")
    for k, v in data.items():
        if k.startswith("in/"):
            ws.feed_blob(k[3:], v)
    ws.run_net_once(net)
    np.testing.assert_allclose(ws.fetch_blob("loss"), data["loss"], rtol=1e-5, atol=1e-5)
    grads = [k for k in data if k.startswith("grad/")]
    assert grads
    for k in grads:
        np.testing.assert_allclose(ws.fetch_blob(k[5:] + "_grad"), data[k], rtol=1e-4, atol=1e-5, err_msg=k)
