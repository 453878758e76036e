"""Examples stay in sync with examples/build.py, load, and do what they claim."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.model.modelio import load_model
from engine.caffe2.workspace import Workspace
from examples.build import EXAMPLES, HERE, build_all


def test_committed_examples_match_the_build_script(tmp_path: Path) -> None:
    for path in build_all(tmp_path):
        committed = HERE / path.relative_to(tmp_path)
        assert committed.is_file(), f"{committed} missing: run `make examples`"
        assert committed.read_bytes() == path.read_bytes(), f"{committed} is stale: run `make examples`"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_runs_from_its_init_net(name: str) -> None:
    model = load_model(HERE / name / "predict_net.pb")
    assert model.init_path == HERE / name / "init_net.pb"
    ws = Workspace(name)
    ws.run_net_once(model.init)
    ws.run_net_once(model.predict)
    for out in model.predict.external_output:
        assert np.all(np.isfinite(ws.fetch_blob(out)))


def test_mlp_trains_for_50_steps_and_its_loss_falls() -> None:
    model = load_model(HERE / "mlp" / "predict_net.pb")
    ws = Workspace("mlp")
    ws.run_net_once(model.init)
    ws.create_net(model.predict)
    losses = []
    for _ in range(50):
        ws.run_net(model.predict.name)
        losses.append(float(ws.fetch_blob("loss")))
    assert losses[-1] < 0.5 * losses[0]
    assert int(ws.fetch_blob("ITER")[0]) == 50
