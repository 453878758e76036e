"""Nets built by Caffe2's rnn_cell / gru_cell run in netviz with Caffe2's numbers: the unit kernels
(GRUUnit, LSTMUnit, LayerNorm, ElementwiseLinear, the attention ops) inside a RecurrentNetwork and
its gradient.  Goldens: tests/oracle/gen_kernels_rnn_cells.py (real Caffe2)."""
from __future__ import annotations

import numpy as np
import pytest

from tests.engine import golden_nets


@pytest.mark.parametrize("name", golden_nets.names("kernels_rnn_cells"))
def test_rnn_cell_net_matches_caffe2(name: str) -> None:
    net, data, ws = golden_nets.load("kernels_rnn_cells", name)
    ws.run_net_once(net)
    np.testing.assert_allclose(ws.fetch_blob("loss"), data["loss"], rtol=1e-5, atol=1e-5)
    grads = [k for k in data if k.startswith("grad/")]
    assert grads
    for k in grads:
        np.testing.assert_allclose(ws.fetch_blob(k[5:] + "_grad"), data[k], rtol=1e-4, atol=1e-5, err_msg=k)
