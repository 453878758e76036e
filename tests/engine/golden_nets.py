"""Whole nets recorded from real Caffe2 (``tests/golden/<folder>/<name>.pb`` + ``.npz``), ready to run.

The ``.npz`` holds the net's inputs under ``in/<blob>`` and Caffe2's results under other prefixes.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.caffe2.workspace import Workspace
from proto import caffe2_pb2

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def names(folder: str) -> list[str]:
    """The nets recorded in `folder`."""
    return sorted(p.stem for p in (GOLDEN / folder).glob("*.pb"))


def load(folder: str, name: str) -> tuple[caffe2_pb2.NetDef, dict[str, np.ndarray], Workspace]:
    """The net, every recorded array, and a workspace fed with the net's ``in/`` arrays."""
    net = caffe2_pb2.NetDef()
    net.ParseFromString((GOLDEN / folder / f"{name}.pb").read_bytes())
    with np.load(GOLDEN / folder / f"{name}.npz") as z:
        data = {k: z[k] for k in z.files}
    ws = Workspace(folder)
    for k, v in data.items():
        if k.startswith("in/"):
            ws.feed_blob(k[3:], v)
    return net, data, ws
