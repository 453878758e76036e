"""The divergence localizer (issue #44 item 1): `netviz diff` runs two sides of a net op by op and names
the op whose OWN error starts the difference.  Each test injects one bug into one side: a perturbed
parameter in one init of two, a changed epsilon in a second model file, --fix-caffe2 on one side, and
checks the culprit, also where later ops inherit a larger difference than the culprit's."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.debugger.descend import with_inside
from engine.debugger.divergence import Side, diverge, value_error
from engine.model.modelio import Model, load_model, load_net, save_net
from engine.model.opdef import create_operator as op
from engine.runtime import device as dev
from netviz.cli import main
from proto import caffe2_pb2

ROOT = Path(__file__).resolve().parents[1]
R50 = ROOT / "tests" / "golden" / "models" / "resnet50"
WHILE = ROOT / "examples" / "while_net"


def _set_arg(o: caffe2_pb2.OperatorDef, name: str, value: float) -> None:
    arg = next(a for a in o.arg if a.name == name)
    if len(arg.floats):
        arg.floats[0] = value
    else:
        arg.f = value


def _culprit(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, dict]:
    """(exit status, culprit line) of a text run, and the --json document of the same run."""
    rc = main(["diff", *map(str, argv)])
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert main(["diff", *map(str, argv), "--json"]) == rc
    return rc, line, json.loads(capsys.readouterr().out)


def test_value_error_is_relative_to_the_largest_magnitude_and_absolute_below_one() -> None:
    a = np.array([1e-3, 200.0], np.float32)
    assert value_error(a, a * np.array([1.029, 1.0], np.float32)) == pytest.approx(2.9e-5 / 200, rel=1e-3)
    assert value_error(np.array([1e-3]), np.array([2e-3])) == pytest.approx(1e-3)  # below 1: absolute
    assert value_error(np.array([np.nan, 1.0]), np.array([np.nan, 1.0])) == 0.0
    assert value_error(np.array([np.nan, 1.0]), np.array([0.0, 1.0])) == float("inf")
    assert value_error(np.zeros(2), np.zeros(3)) == float("inf")


def test_a_perturbed_parameter_in_one_init_names_the_op_that_reads_it(tmp_path: Path, capsys) -> None:
    """ResNet-50 (seeded MSRA weights) with one SpatialBN scale 1 -> 1.05 in init B: the culprit is
    that SpatialBN, op #62; every later op differs too, by its input alone (own error 0)."""
    init = load_net(R50 / "init_net.pb")
    _set_arg(next(o for o in init.op if o.output[0] == "comp_5_spatbn_2_s"), "value", 1.05)
    init_b = save_net(init, tmp_path / "init_b.pb")
    rc, line, doc = _culprit(capsys, R50 / "predict_net.pb", "--init-b", init_b)
    assert rc == 1 and line == "culprit: op #62 SpatialBN 'comp_5_spatbn_2': own error 0.05 (inherited 0)"
    assert doc["culprit"]["op"] == 62 and doc["culprit"]["own"] == pytest.approx(0.05, rel=1e-3)
    later = [r for r in doc["ops"] if r["op"] > 62]
    assert all(r["own"] < 1e-5 for r in later) and sum(r["out"] > 1e-4 for r in later) > 50
    assert all(r["out"] == 0 for r in doc["ops"] if r["op"] < 62)
    # both values and their difference where the culprit's re-run differs most: B = 1.05 A (the bias is 0)
    assert doc["detail"][0] == "op #62 output 'comp_5_spatbn_2', where side B's re-run differs most:"
    rows = [ln.split() for ln in doc["detail"][2:]]
    assert len(rows) == 5 and all(float(r[-2]) == pytest.approx(1.05 * float(r[-3]), rel=1e-5) for r in rows)


def test_the_culprit_is_named_where_later_ops_inherit_a_larger_difference(tmp_path: Path, capsys) -> None:
    """FC (W off by 1e-4 in init B) -> Scale x100 -> Relu: the Scale's output differs 100 times more
    than the FC's, and the culprit is still the FC."""
    net = caffe2_pb2.NetDef(name="amp", op=[op("FC", ["X", "W", "b"], ["h"]), op("Scale", ["h"], ["s"], scale=100.0),
                                            op("Relu", ["s"], ["y"])], external_input=["X", "W", "b"],
                            external_output=["y"])
    rng = np.random.default_rng(0)
    x, w = (rng.standard_normal((2, 8)) * 1e-3).astype(np.float32), rng.standard_normal((4, 8)).astype(np.float32)
    inits = []
    for k, dw in enumerate((0.0, 1e-1)):
        init = caffe2_pb2.NetDef(op=[op("GivenTensorFill", [], ["W"], shape=[4, 8], values=(w + dw).ravel().tolist()),
                                     op("GivenTensorFill", [], ["b"], shape=[4], values=[0.0] * 4)])
        inits.append(save_net(init, tmp_path / f"init_{k}.pb"))
    np.save(tmp_path / "x.npy", x)
    path = save_net(net, tmp_path / "predict_net.pb")
    rc, line, doc = _culprit(capsys, path, "--init-a", inits[0], "--init-b", inits[1],
                             "--input", f"X={tmp_path / 'x.npy'}")
    fc, scale, _ = doc["ops"]
    assert rc == 1 and line.startswith("culprit: op #0 FC 'h': own error 0.000")
    assert scale["out"] == pytest.approx(100 * fc["out"], rel=1e-3) and scale["own"] == 0
    assert scale["inherited"] == pytest.approx(fc["out"])


def test_a_changed_epsilon_in_a_second_model_file_is_the_culprit(tmp_path: Path, capsys) -> None:
    """Two model files of ResNet-50, op #65's SpatialBN epsilon 1e-5 -> 0.5 in the second: `--run`."""
    net = load_net(R50 / "predict_net.pb")
    _set_arg(net.op[65], "epsilon", 0.5)
    other = save_net(net, tmp_path / "predict_net.pb")
    (tmp_path / "value_info.json").write_text((R50 / "value_info.json").read_text())
    rc, line, doc = _culprit(capsys, R50 / "predict_net.pb", other, "--run", "--init-b", R50 / "init_net.pb")
    assert rc == 1 and line.startswith("culprit: op #65 SpatialBN 'comp_5_spatbn_3': own error ")
    assert doc["culprit"]["inherited"] == 0 and doc["culprit"]["own"] > 1e-3
    # without --run two nets are compared as structures, as before
    assert main(["diff", str(R50 / "predict_net.pb"), str(other)]) == 1
    assert ": epsilon 1e-05 → 0.5" in capsys.readouterr().out


def test_fix_caffe2_on_one_side_names_the_op_it_changes(tmp_path: Path, capsys) -> None:
    """IntegralImageGradient is one of the ops --fix-caffe2 changes (Caffe2's prefix sums vs the
    adjoint): with the fixes on side B only, it is the culprit, not the Mul after it."""
    net = caffe2_pb2.NetDef(name="ii", op=[op("IntegralImage", ["X"], ["Y"]),
                                           op("ConstantFill", ["Y"], ["dY"], value=1.0),
                                           op("IntegralImageGradient", ["X", "dY"], ["dX"]),
                                           op("Mul", ["dX", "X"], ["Z"])], external_input=["X"], external_output=["Z"])
    np.save(tmp_path / "x.npy", np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4))
    path = save_net(net, tmp_path / "predict_net.pb")
    rc, line, doc = _culprit(capsys, path, "--fix-caffe2-b", "--input", f"X={tmp_path / 'x.npy'}")
    assert rc == 1 and line.startswith("culprit: op #2 IntegralImageGradient 'dX': own error ")
    assert doc["ops"][3]["own"] == 0 and doc["ops"][3]["out"] > 0.5
    assert main(["diff", str(path), "--input", f"X={tmp_path / 'x.npy'}", "--run"]) == 0  # same setting: none
    assert capsys.readouterr().out.strip().endswith("all 4 ops within tolerance 0.0001")


def test_the_loop_of_a_control_flow_net_is_named_as_one_op(tmp_path: Path) -> None:
    """while_net with W off by 0.01 in one init: the forward While (its body reads W) is the culprit."""
    init = load_net(WHILE / "init_net.pb")
    w = next(o for o in init.op if o.output[0] == "W")
    next(a for a in w.arg if a.name == "values").floats[0] += 0.01
    a = load_model(WHILE / "predict_net.pb")
    b = Model(a.predict, init, a.value_info, a.path)
    d = with_inside(diverge(Side(a), Side(b, label="B")))
    assert d.culprit is not None and (d.culprit.index, d.culprit.op_type) == (2, "While")
    # inside: the loop body's Do, and in its net the FC that reads W (first iteration)
    assert [step.split(":")[:2] for step in d.inside] == [["loop_net", " op #0 Do 'acc'"], ["net", " op #0 FC 'h'"]]
    assert d.culprit_line().endswith("; in its loop_net: op #0 Do 'acc': own error 0.00895; in its net: op #0 FC 'h': "
                                     "own error 0.0122")
    assert d.rows[3].op_type == "AveragedLoss" and d.rows[3].own == 0 and d.rows[3].inherited > 1e-4


@pytest.mark.skipif(dev.has_gpu(), reason="a GPU is here")
@pytest.mark.parametrize("side", "ab")
def test_a_gpu_side_without_a_gpu_runs_on_the_stand_in_and_says_so(side: str, capsys) -> None:
    """--device-b gpu was refused while --devices cpu,gpu ran on the stand-in: either side runs there now."""
    assert main(["diff", str(WHILE / "predict_net.pb"), f"--device-{side}", "gpu"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0] == f"note: no CUDA GPU here: --device-{side} gpu ran on the stand-in device (NumPy), so " \
                     "differences are float rounding only"
    assert [ln.endswith("; gpu)") for ln in out[1:3]] == [side == "a", side == "b"] and out[-1].startswith("no culprit")
    assert main(["diff", str(WHILE / "predict_net.pb"), f"--device-{side}", "gpu", "--json"]) == 0
    said = capsys.readouterr()
    assert json.loads(said.out)["culprit"] is None and said.err.startswith("note: no CUDA GPU here")


@pytest.mark.skipif(not dev.has_gpu(), reason="needs a CUDA GPU")
def test_cpu_against_gpu_has_no_culprit_on_resnet50(capsys) -> None:
    main(["diff", str(R50 / "predict_net.pb"), "--device-b", "gpu", "--tol", "1e-3"])  # cuDNN sums differently
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("no culprit")


def test_an_op_only_in_b_is_listed_and_the_others_match_by_ssa_name(tmp_path: Path, capsys) -> None:
    """B inserts an in-place Scale between FC and Relu: FC and Relu still match by their SSA outputs
    (h@1, y@1); Relu inherits the difference but adds none; the Scale is listed as B's alone."""
    fc, relu = op("FC", ["X", "W", "b"], ["h"]), op("Relu", ["h"], ["y"])
    nets = [caffe2_pb2.NetDef(name="n", op=ops, external_input=["X", "W", "b"], external_output=["y"])
            for ops in ([fc, relu], [fc, op("Scale", ["h"], ["h"], scale=2.0), relu])]
    a, b = (save_net(n, tmp_path / f"{k}.pb") for k, n in zip("ab", nets))
    rng = np.random.default_rng(1)
    for name, shape in (("X", (2, 3)), ("W", (4, 3)), ("b", (4,))):
        np.save(tmp_path / f"{name}.npy", rng.standard_normal(shape).astype(np.float32))
    feeds = [f"--input={n}={tmp_path / n}.npy" for n in "XWb"]
    assert main(["diff", str(a), str(b), "--run", "--all", *feeds]) == 1  # outputs apart: not "the same"
    out = capsys.readouterr().out
    assert "1 ops of B match no op of A: #1" in out
    assert out.strip().splitlines()[-1] == (
        "no culprit: no op's own error exceeds 0.0001; 1 ops' outputs differ by more (side B's ops #1 match no op "
        "of A: look there first), first op #1 Relu")
    relu_row = next(ln.split() for ln in out.splitlines() if ln.split()[:2] == ["#1", "Relu"])
    assert relu_row[3] != "0" and relu_row[4] == "0"  # out differs, own is 0


def test_a_random_op_re_run_alone_draws_what_its_run_drew(tmp_path: Path, capsys) -> None:
    """GaussianFill and a training Dropout in the predict net: the same net on both sides has no
    culprit (the re-run of a random op gets the run's random source as it was before that op)."""
    net = caffe2_pb2.NetDef(name="r", op=[op("Dropout", ["X"], ["Y", "mask"], ratio=0.5, is_test=0),
                                          op("GaussianFill", [], ["G"], shape=[4, 5]), op("Add", ["Y", "G"], ["Z"])],
                            external_input=["X"])
    path = save_net(net, tmp_path / "rand.pb")
    np.save(tmp_path / "x.npy", np.ones((4, 5), np.float32))
    assert main(["diff", str(path), "--run", "--input", f"X={tmp_path / 'x.npy'}"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "no culprit: all 3 ops within tolerance 0.0001"


def test_an_rnn_reading_a_changed_weight_is_the_culprit_and_its_gradient_cannot_run_alone(tmp_path: Path,
                                                                                          capsys) -> None:
    """The LSTM example with its gates bias 0 -> 0.01 in init B: RecurrentNetwork (op #1) is the culprit;
    RecurrentNetworkGradient reads the step workspaces its forward op saved, so its own error is `-`
    with the reason, never an internal error."""
    lstm = ROOT / "examples" / "lstm"
    init = load_net(lstm / "init_net.pb")
    next(o for o in init.op if o.output[0] == "lstm/gates_t_b").arg.add(name="value", f=0.01)  # it had none: 0
    init_b = save_net(init, tmp_path / "init_b.pb")
    rc, line, doc = _culprit(capsys, lstm / "predict_net.pb", "--init-b", init_b)
    assert rc == 1 and line.startswith("culprit: op #1 RecurrentNetwork 'lstm/hidden_state_all': own error ")
    grad = next(r for r in doc["ops"] if r["type"] == "RecurrentNetworkGradient")
    assert grad["own"] is None and grad["note"].startswith("re-run alone failed: ") and grad["out"] > 1e-4


def test_an_if_is_followed_into_the_branch_its_condition_chose(tmp_path: Path, capsys) -> None:
    """if_net with W off by 0.01 in init B: the If is the culprit; inside, then_net's Do and its FC."""
    init = load_net(ROOT / "examples" / "if_net" / "init_net.pb")
    next(a for a in next(o for o in init.op if o.output[0] == "W").arg if a.name == "values").floats[0] += 0.01
    init_b = save_net(init, tmp_path / "init_b.pb")
    rc, line, doc = _culprit(capsys, ROOT / "examples" / "if_net" / "predict_net.pb", "--init-b", init_b)
    assert rc == 1 and line.startswith("culprit: op #2 If 'Y': own error ")
    assert line.endswith("; in its then_net: op #0 Do 'Y': own error 0.00652; in its net: op #0 FC 'h_then': "
                         "own error 0.00652")
    assert doc["culprit"]["inside"][-1].startswith("net: op #0 FC 'h_then'")


def test_a_gpu_side_runs_on_the_stand_in_device_without_a_gpu() -> None:
    """The gpu side's plumbing (blobs moved to CUDA, A's values copied to B's device for the re-runs),
    exercised on the NumPy stand-in behind CUDA device options: the same kernels, so no culprit."""
    m = load_model(WHILE / "predict_net.pb")
    with dev.use_fake_cuda():
        d = diverge(Side(m), Side(m, device="gpu", label="B"))
    assert d.culprit is None and all(r.own == 0 or r.note for r in d.rows)
    on_b, on_a = (set(t.start_devices.values()) for t in reversed(d.traces))
    assert dev.CUDA in on_b and dev.CUDA not in on_a
