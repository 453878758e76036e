"""Zoo detection nets (issue #20) against real Caffe2 on the same parameters and image.

Goldens: ``tests/golden/zoo_detection/<net>/inputs.npz`` (seeded random parameters, image,
im_info) and ``outputs.npz`` written by real Caffe2 (``tests/oracle/gen_zoo_detection.py``).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.runtime.blobio import Int8Tensor
from engine.runtime.executor import run_net
from engine.model.modelio import load_net
from engine.caffe2.workspace import Workspace

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "zoo_detection"


@pytest.mark.parametrize("name", ["faster_rcnn", "mask_rcnn_2go_fp32", "mask_rcnn_2go_int8"])
def test_zoo_detection_net_matches_caffe2(name, zoo):
    """Every output and the RPN/box-head blobs; the int8 net's integer path is bit-exact, so its
    float outputs agree as closely as the fp32 ones."""
    d = GOLDEN / name
    meta = json.loads((d / "outputs.json").read_text())
    net = load_net(Path(zoo) / meta["net"])
    ws = Workspace(name)
    qparams = json.loads((d / "int8.json").read_text()) if (d / "int8.json").exists() else {}
    with np.load(d / "inputs.npz") as z:
        for k in z.files:
            if k.startswith("int8/"):  # an Int8 parameter: integer values + (scale, zero point)
                ws.feed_blob(k[5:], Int8Tensor(z[k], *qparams[k[5:]]))
            else:
                ws.feed_blob(k, z[k])
    run_net(net, ws)
    with np.load(d / "outputs.npz") as z:
        for n in meta["outputs"]:
            got = np.asarray(ws.fetch_blob(n))
            assert got.shape == z[n].shape, (n, got.shape, z[n].shape)
            # NOTE: boxes are pixels up to 320: 2e-3 px is float32 drift through ~100 conv layers
            np.testing.assert_allclose(got, z[n], rtol=1e-3, atol=2e-3, err_msg=n)
