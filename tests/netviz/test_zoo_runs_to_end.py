"""Every zoo net runs to its end in the TUI (`c`), on random seeded weights where it has none.

The detection nets get a 192×192 image and its ``im_info``; the Mask R-CNN2Go nets run their
``If`` whole.  What a user sees at the end: no error notice, the pc finished, and the net's outputs
in the workspace.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from netviz.app import NetvizApp
from netviz.session import Session
from tests.conftest import zoo_nets
from tests.netviz.waiting import asynctest, continue_to_end, ready

DETECTION = ("detectron", "mask_rcnn")


@pytest.mark.parametrize("path", [pytest.param(p, id=p.parent.name) for p in zoo_nets()])
@asynctest
async def test_zoo_net_runs_to_its_end_in_the_tui(path: Path, tmp_path: Path) -> None:
    inputs = []
    if path.parent.name.startswith(DETECTION):
        np.save(tmp_path / "im_info.npy", np.array([[192, 192, 1.0]], np.float32))
        inputs = ["data=1,3,192,192", f"im_info={tmp_path / 'im_info.npy'}"]
    session = Session.open(path, inputs=inputs)
    app = NetvizApp(session)
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await continue_to_end(pilot, app, timeout=300)
        errors = [n.message for n in app._notifications if n.severity == "error"]
        assert not errors, errors
        for out in session.model.predict.external_output:
            assert session.value(out) is not None, out
