"""Training nets built by Caffe2's optimizer.py (dense FC + sparse embedding, several update ops per
net) give Caffe2's parameters after three iterations in netviz.  Goldens:
tests/oracle/gen_kernels_optim_nets.py (real Caffe2)."""
from __future__ import annotations

import numpy as np
import pytest

from tests.engine import golden_nets


@pytest.mark.parametrize("name", golden_nets.names("kernels_optim_nets"))
def test_optimizer_net_matches_caffe2(name: str) -> None:
    net, data, ws = golden_nets.load("kernels_optim_nets", name)
    ws.feed_blob("iteration_mutex", np.zeros(1))  # a mutex in Caffe2, not an array; AtomicIter ignores it
    for _ in range(3):
        ws.run_net_once(net)
    for k in (k for k in data if k.startswith("after/")):
        np.testing.assert_allclose(ws.fetch_blob(k[6:]), data[k], rtol=1e-5, atol=1e-6, err_msg=k)
