"""Training nets built by Caffe2's optimizer.py (dense FC + sparse embedding, several update ops per
net) give Caffe2's parameters after three iterations in netviz.  Goldens:
tests/oracle/gen_kernels_optim_nets.py (real Caffe2)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.workspace import Workspace
from proto import caffe2_pb2

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "kernels_optim_nets"
NETS = sorted(p.stem for p in GOLDEN.glob("*.pb"))


@pytest.mark.parametrize("name", NETS)
def test_optimizer_net_matches_caffe2(name: str) -> None:
    net = caffe2_pb2.NetDef()
    net.ParseFromString((GOLDEN / f"{name}.pb").read_bytes())
    with np.load(GOLDEN / f"{name}.npz") as z:
        data = {k: z[k] for k in z.files}
    ws = Workspace("optimizer_net")
    for k, v in data.items():
        if k.startswith("in/"):
            ws.feed_blob(k[3:], v)
    ws.feed_blob("iteration_mutex", np.zeros(1))  # a mutex in Caffe2, not an array; AtomicIter ignores it
    for _ in range(3):
        ws.run_net_once(net)
    for k in (k for k in data if k.startswith("after/")):
        np.testing.assert_allclose(ws.fetch_blob(k[6:]), data[k], rtol=1e-5, atol=1e-6, err_msg=k)
