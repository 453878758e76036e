"""NaN/Inf provenance where the user hunts NaNs (issue #44 item 3): `x` in the TUI and
`netviz run --break-on-nan` name the first bad element and the input elements it came from."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.model.modelio import save_net
from engine.model.opdef import create_operator as op
from netviz.app import NetvizApp
from netviz.cli import main
from netviz.session import Session
from proto import caffe2_pb2
from tests.netviz.waiting import asynctest, notified, ready, wait_for

CHAIN = ["op#2 Relu: z[0, 0] = nan ← Relu(fc[0, 0] = nan)",
         "op#1 FC: fc[0, 0] = nan ← FC(y[0, :] ∋ y[0, 2] = nan, W[0, :] = [-1, 0, 1], b[0] = 0.5)",
         "op#0 Log: y[0, 2] = nan ← Log(X[0, 2] = -1)",
         "origin: op#0 Log made nan from finite inputs"]


@pytest.fixture
def log_fc_net(tmp_path: Path) -> Path:
    """Log of a negative input element, then FC and Relu: one NaN that spreads along a row."""
    fill = [("X", [2, 3], [1.0, 2.0, -1.0, 0.5, 3.0, 4.0]), ("W", [2, 3], [-1.0, 0.0, 1.0, 2.0, 2.0, 2.0]),
            ("b", [2], [0.5, 0.5])]
    init = caffe2_pb2.NetDef(name="init", op=[op("GivenTensorFill", [], n, shape=s, values=v) for n, s, v in fill])
    net = caffe2_pb2.NetDef(name="net", op=[op("Log", "X", "y"), op("FC", ["y", "W", "b"], "fc"), op("Relu", "fc", "z")])
    net.external_input.extend(["X", "W", "b"])
    save_net(init, tmp_path / "init_net.pb")
    return save_net(net, tmp_path / "predict_net.pb")


def test_break_on_nan_prints_the_provenance(log_fc_net: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with np.errstate(all="ignore"):
        assert main(["run", str(log_fc_net), "--break-on-nan"]) == 1
    out = capsys.readouterr().out
    assert f"  {CHAIN[2]}\n  {CHAIN[3]}\n" in out


@pytest.mark.filterwarnings("ignore:invalid value encountered in log:RuntimeWarning")
@asynctest
async def test_x_notifies_the_first_bad_element_and_where_it_came_from(log_fc_net: Path) -> None:
    app = NetvizApp(Session.open(log_fc_net))
    async with app.run_test(size=(140, 44), notifications=True) as pilot:
        await ready(pilot)
        await pilot.press("x")
        await wait_for(pilot, lambda: app.main.idle and notified(app, "← Log("), "the NaN notification")

        assert notified(app, CHAIN[2]) and notified(app, CHAIN[3])
        await pilot.press("x")  # the next op writing NaN: FC, traced back through Log
        await wait_for(pilot, lambda: app.main.idle and notified(app, "← FC("), "the second NaN notification")
        assert notified(app, "\n".join(CHAIN[1:]))


def test_a_fed_blob_the_init_net_also_makes_is_a_net_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The mlp example's init net fills `data`; fed with --input it is the user's input, not a parameter."""
    data = np.ones((16, 8), np.float32)
    data[2, 3] = np.nan
    np.save(tmp_path / "nan.npy", data)
    example = Path(__file__).resolve().parents[2] / "examples" / "mlp" / "predict_net.pb"
    assert main(["run", str(example), "--input", f"data={tmp_path / 'nan.npy'}", "--break-on-nan"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2] == "  origin: data[2, 3] = nan is a net input (no op wrote it)"
    assert lines[-3].startswith("  op#0 FC: fc1[2, 0] = nan ← FC(data[2, :] ∋ data[2, 3] = nan, fc1_w[0, :] in [")
    assert lines[-1].startswith("netviz: NaN/Inf produced by op 0 FC (fc1)")


def test_a_plan_with_break_on_nan_prints_the_provenance(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A PlanDef steps in the plan debugger: the same walk names the iteration's op that overflowed."""
    from google.protobuf import text_format

    from engine.caffe2 import core

    init, grow = core.Net("init"), core.Net("grow")
    init.ConstantFill([], "x", shape=[2], value=1.0)
    grow.Scale(["x"], "x", scale=1e30)
    plan = core.Plan("blowup")
    plan.AddStep(core.execution_step("init", init))
    plan.AddStep(core.execution_step("grow", grow, num_iter=5))
    path = tmp_path / "plan.pbtxt"
    path.write_text(text_format.MessageToString(plan.Proto()))
    with np.errstate(over="ignore"):
        assert main(["run", str(path), "--break-on-nan"]) == 1
    lines = capsys.readouterr().out.splitlines()
    # NOTE: core.Net names are unique per process (Caffe2's registry): another test's "grow" makes this one grow_1
    assert lines[-3].endswith(f"grow iteration 1 · net {grow.Name()} › op#0 Scale: x[0] = inf ← Scale(x[0] = 1e+30)")
    assert lines[-2].endswith("› op#0 Scale made inf from finite inputs") and lines[-1].startswith("netviz: NaN/Inf")
