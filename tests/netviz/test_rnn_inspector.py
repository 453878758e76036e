"""The TUI's blob inspector on an RNN net shows each version of a state buffer with the rows the
step wrote through its link views (issue 35.2): the running-sum cell h_t = h_{t-1} + x_t, T = 3."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.model.modelio import save_net
from netviz.app import NetvizApp
from netviz.session import BlobRef, OpRef, Session
from tests.engine.test_debugger_rnn_versions import H0, STATES, X, expected_states, running_sum_net
from tests.netviz.waiting import asynctest, continue_to_end, ready, text_of

STEP = ((0, "step_net"),)  # the RecurrentNetwork's timestep program: 3 links, then the Add


def rnn_app(tmp_path: Path) -> NetvizApp:
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "h0.npy", H0)
    path = save_net(running_sum_net(False), tmp_path / "running_sum.pbtxt")
    return NetvizApp(Session.open(path, inputs=[f"X={tmp_path / 'X.npy'}", f"h0={tmp_path / 'h0.npy'}"]))


@asynctest
async def test_the_inspector_shows_the_state_buffer_rows_of_each_version(tmp_path: Path) -> None:
    app = rnn_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await continue_to_end(pilot, app)
        want = expected_states()
        # version 2 (the link of h, op 1): the last timestep's Add wrote row 3 through the link's view
        # version 1 (the link of h_prev, op 0): rows 0..2 only, the buffer as it was at that link
        for version, op_index, rows in ((2, 1, want), (1, 0, np.concatenate([want[:3], 0 * want[3:]]))):
            app.main.select(OpRef(STEP, op_index))
            app.main.select_blob(BlobRef(STEP, STATES, version))
            await pilot.pause()
            shown = text_of(app.main.query_one("#blob-values"))
            assert f"{rows.min():.4g} / {rows.max():.4g}" in shown, shown
            assert f"zeros    {np.count_nonzero(rows == 0)} of {rows.size}" in shown, shown
