"""The TUI through the int8 Mask R-CNN with 0 boxes (issue #42 item 1).

An im_info too small for any proposal leaves no RoIs: the box and mask heads then run their Int8
convs on an empty batch, which stopped with "cannot reshape array of size 0" and blamed the random
weights.  Caffe2 runs them to empty outputs; so must the TUI, at both sizes the issue names.
"""
from __future__ import annotations

import numpy as np
import pytest

from netviz.app import NetvizApp
from netviz.session import Session
from tests.netviz.waiting import asynctest, continue_to_end, notified, ready


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
@asynctest
async def test_int8_mask_rcnn_with_no_boxes_runs_to_the_end(zoo, tmp_path, size):
    np.save(tmp_path / "im_info.npy", np.array([[0.3, 0.2, 1.0]], np.float32))
    session = Session.open(zoo / "mask_rcnn_2go_int8" / "model.pbtxt",
                           inputs=["data=1,3,192,192", f"im_info={tmp_path / 'im_info.npy'}"])
    app = NetvizApp(session)
    async with app.run_test(size=size) as pilot:
        await ready(pilot)
        await continue_to_end(pilot, app, timeout=120)
        assert session.value("roi_features").shape == (0, 6, 6, 16)
        assert session.value("bbox_pred").shape[0] == 0
        assert not app.errors and not notified(app, "cannot reshape") and not notified(app, "--random-params")
