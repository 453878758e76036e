"""`netviz replay`: the TUI on a recording, with the model files gone — moves both ways, values from the file."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from engine.debugger.recorded import Recording
from netviz.app import NetvizApp
from netviz.cli import main
from netviz.commands.replay import session_of
from tests.netviz.waiting import asynctest, wait_for

ROOT = Path(__file__).resolve().parents[2]


@asynctest
async def test_replay_steps_both_ways_without_the_model_files(tmp_path: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(ROOT / "examples" / "while_net", model)
    rec_path = tmp_path / "w.nvrec"
    assert main(["run", str(model / "predict_net.pb"), "--record", str(rec_path)]) == 0
    shutil.rmtree(model)
    app = NetvizApp(session_of(str(rec_path)))
    async with app.run_test(size=(120, 40)) as pilot:
        labels = []
        for key in "nnnuuns":
            before = app.session.last_stop
            await pilot.press(key)
            await wait_for(pilot, lambda: app.main.idle and app.session.last_stop is not before, f"the move {key}")
            labels.append(app.session.pc_label())
        assert labels[:3] == ["main › op#1 CreateScope", "main › op#2 While", "main › op#3 AveragedLoss"]
        # u undoes the whole While, as live; s at the While steps into its first cond_net check, as live (QA)
        assert labels[3:] == ["main › op#2 While", "main › op#1 CreateScope", "main › op#2 While",
                              "main › While op#2 cond_net check 0 › op#0 Do"]
        rec = Recording.open(rec_path)
        version = rec.version_at("acc", app.session.debugger.ran() - 1)
        np.testing.assert_array_equal(app.session.value("acc"), rec.value("acc", version))
