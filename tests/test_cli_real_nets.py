"""The headless commands on every real net we have, as a user runs them (issues #21 and #23).

Nets: the oracle corpus built by Caffe2's own builders (``tests/golden/builders*``: ResNet,
ResNeXt, ShuffleNet, rnn_cell and seq2seq nets, layer models, ONNX exports — most of them training
nets with Caffe2's backward pass and optimizer inside) and the bundled examples.  Per net: ``info
--json`` counts what the file holds, ``lint`` prints one line per finding, ``grad -o`` writes a net
whose every op has a kernel and whose gradient names are the ones Caffe2's builder made, a short
``run`` (the net's own init, missing inputs fed from the golden's arrays) executes every top-level
op, and ``export`` draws every op.  Refusals are one line naming the net and what is wrong, never a
traceback.  Everything runs in-process (``netviz.cli.main``) to stay fast.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from engine.model.modelio import load_net
from engine.model.opdef import subnets_of
from engine.runtime.plandef import load_plan
from engine.catalogue.registry import KERNELS
from engine.autodiff.training import split_training_net
from netviz.cli import main

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
EXAMPLES = ROOT / "examples"
#: every builders case: "<folder>/<case>" (its .json names net, init, losses, params, inputs)
CASES = sorted(p.relative_to(GOLDEN).with_suffix("").as_posix() for p in GOLDEN.glob("builders*/*.json"))
EXAMPLE_NETS = sorted(p.parent.name for p in EXAMPLES.glob("*/predict_net.pb"))
#: cases Caffe2 itself cannot run (recorded by the oracle): the one line netviz must refuse them with
REFUSED_RUNS = {"builders_onnx/onnx_mlp_grad": "SpatialBNGradient: X has 2 dimensions; Caffe2 needs >= 3"}


def _meta(case: str) -> dict:
    return json.loads((GOLDEN / f"{case}.json").read_text())


def _total_ops(net) -> int:
    return len(net.op) + sum(_total_ops(sub) for op in net.op for _, sub in subnets_of(op))


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "Traceback" not in out
    return rc, out, err


def _one_line_error(err: str) -> str:
    lines = [ln for ln in err.splitlines() if not ln.startswith("netviz: layout")]
    assert len(lines) == 1 and lines[0].startswith("netviz: "), err
    return lines[0]


def _inputs(case: str, tmp: Path) -> list[str]:
    """``--input`` arguments for the external inputs neither the init net nor the net makes: the
    golden's own arrays (labels keep their int32), or the drawn shape for the big cases."""
    meta = _meta(case)
    net = load_net(GOLDEN / meta["net"])
    made = {o for op in load_net(GOLDEN / meta["init"]).op for o in op.output} if meta.get("init") else set()
    wanted = [b for b in net.external_input if b not in made]
    args: list[str] = []
    with np.load(GOLDEN / f"{case}.npz") as z:
        for b in wanted:
            if f"in/{b}" in z.files:
                path = tmp / f"{case.replace('/', '_')}__{len(args)}.npy"
                np.save(path, z[f"in/{b}"])
                args += ["--input", f"{b}={path}"]
            elif b in meta.get("drawn", {}):
                args += ["--input", f"{b}={','.join(map(str, meta['drawn'][b]['shape']))}"]
    return args


@pytest.mark.parametrize("case", CASES)
def test_info_lint_grad_run_on_builder_nets(case, tmp_path, capsys):
    meta = _meta(case)
    path, net = GOLDEN / meta["net"], load_net(GOLDEN / meta["net"])

    rc, out, _ = _cli(capsys, "info", path, "--json")
    info = json.loads(out)
    assert rc == 0 and info["op_count"] == len(net.op)
    assert info["op_types"] == dict(Counter(op.type for op in net.op))
    split = split_training_net(net)
    if split.has_backward:  # the sections cover the net, and the forward section is the builder's
        assert sum(info["sections"]["ops"].values()) == len(net.op)
        assert info["sections"]["ops"]["forward"] == meta["num_forward_ops"]

    rc, out, err = _cli(capsys, "info", path, "--shapes")
    assert rc == 0 and "blob versions):" in out, err

    rc, out, _ = _cli(capsys, "lint", path)
    findings = [ln for ln in out.splitlines() if ln.startswith("op #")]
    assert rc in (0, 1) and out.splitlines()[-1].startswith(f"{len(findings)} findings, ")
    if meta.get("num_gradient_ops"):  # Caffe2 generated this net's backward pass: it did not refuse it
        assert "two-char-gradient-name" not in out

    if meta.get("losses"):
        losses = [a for loss in meta["losses"] for a in ("--loss", loss)]
        grads = tmp_path / "grad.pb"
        rc, out, _ = _cli(capsys, "grad", path, *losses, "--json")
        assert rc == 0
        made = json.loads(out)
        dense = {p: g for p, g in meta["grad_map"].items() if isinstance(g, str)}
        assert {p: made[p] for p in dense} == dense  # Caffe2's own gradient names
        rc, _, _ = _cli(capsys, "grad", path, *losses, "-o", grads)
        written = load_net(grads)
        assert rc == 0 and {op.type for op in written.op} <= set(KERNELS)
        assert sum(not op.is_gradient_op for op in written.op) >= len(split.indices("forward"))

    rc, out, err = _cli(capsys, "run", path, "--random-params", *_inputs(case, tmp_path))
    if case in REFUSED_RUNS:
        assert rc == 2 and REFUSED_RUNS[case] in _one_line_error(err)
        return
    assert rc == 0, err
    rows = out.splitlines()[1:-1]
    assert sum("/" not in row.split()[0] for row in rows) == len(net.op)  # every top-level op ran once
    assert out.splitlines()[-1].endswith("stopped: end")


@pytest.mark.parametrize("case", [c for c in CASES if len(load_net(GOLDEN / _meta(c)["net"]).op) <= 40])
def test_export_draws_every_op_of_small_builder_nets(case, tmp_path, capsys):
    net = load_net(GOLDEN / _meta(case)["net"])
    rc, out, _ = _cli(capsys, "export", GOLDEN / _meta(case)["net"], "-o", tmp_path / "net.dot")
    assert rc == 0 and f"({_total_ops(net)} ops," in out and (tmp_path / "net.dot").stat().st_size > 0


@pytest.mark.parametrize("name", EXAMPLE_NETS)
def test_every_command_on_the_examples(name, tmp_path, capsys):
    path = EXAMPLES / name / "predict_net.pb"
    net = load_net(path)
    rc, out, _ = _cli(capsys, "info", path, "--json")
    assert rc == 0 and json.loads(out)["op_count"] == len(net.op)
    rc, out, _ = _cli(capsys, "lint", path)
    assert rc in (0, 1) and " findings, " in out.splitlines()[-1]
    rc, out, _ = _cli(capsys, "grad", path, "--loss", "loss", "-o", tmp_path / "g.pb")
    assert rc == 0 and {op.type for op in load_net(tmp_path / "g.pb").op} <= set(KERNELS)
    rc, out, err = _cli(capsys, "run", tmp_path / "g.pb", "--init", EXAMPLES / name / "init_net.pb")
    assert rc == 0 and out.splitlines()[-1].endswith("stopped: end"), err
    rc, out, err = _cli(capsys, "run", path, "--break-on-nan")
    assert rc == 0 and out.splitlines()[-1].endswith("stopped: end"), err
    rc, out, _ = _cli(capsys, "export", path, "-o", tmp_path / "net.svg", "--backward")
    assert rc == 0 and (tmp_path / "net.svg").read_text().lstrip().startswith(("<?xml", "<svg"))
    # every op on the GPU (the stand-in without one) includes subnet and backward ops
    rc, out, err = _cli(capsys, "diff", path, "--loss", "loss")
    assert rc == 0 and "none differs by more than" in out.splitlines()[-1], err


@pytest.mark.parametrize("case", ["builders/rnn_lstm", "builders/rnn_gru"])
def test_device_diff_of_rnn_nets_keeps_the_timestep_on_the_cpu(case, tmp_path, capsys):
    """LSTMUnit/GRUUnit and the RNN link ops read the step's timestep as a CPU tensor, as in Caffe2;
    the GPU run used to stop on 'input blob timestep is on device 0, op runs on device 1'."""
    rc, out, err = _cli(capsys, "diff", GOLDEN / f"{case}.pb", *_inputs(case, tmp_path), "--loss", "loss")
    assert rc == 0 and "none differs by more than" in out.splitlines()[-1], err


def test_lp_norm_gradient_has_the_shape_of_its_input(capsys):
    """multitask_reg's L1 regularisation: LpNormGradient's dX is fc/w's 4×7 (it was the loss's (1,),
    and `info --shapes` then failed on the Sum accumulating fc/w_grad)."""
    rc, out, _ = _cli(capsys, "info", GOLDEN / "builders_layers" / "multitask_reg.pb", "--shapes", "--json")
    shapes = json.loads(out)["shapes"]
    assert rc == 0 and shapes["fc/w_grad@1"]["shape"] == shapes["fc/w@0"]["shape"] == [4, 7]


def test_diff_of_a_train_net_and_its_test_net_lists_what_changes(capsys):
    """`netviz diff train.pb test.pb`: create_resnet_32x32 with is_test=1 changes each SpatialBN's
    is_test and outputs (no running stats written), nothing else; a net against itself is the same."""
    train, test = GOLDEN / "builders" / "resnet32x32_train.pb", GOLDEN / "builders" / "resnet32x32_test.pb"
    rc, out, _ = _cli(capsys, "diff", train, test)
    bns = sum(op.type in ("SpatialBN", "SpatialBNGradient") for op in load_net(train).op)
    assert rc == 1 and sum(": is_test 0 → 1" in ln for ln in out.splitlines()) == bns
    assert out.splitlines()[-1].startswith(f"0 ops only in {train}, 0 only in {test}, ")
    rc, out, _ = _cli(capsys, "diff", train, train)
    assert rc == 0 and out.splitlines()[-1].endswith("the nets are the same")
    rc, _, err = _cli(capsys, "diff", train, test, "--loss", "loss")
    assert rc == 2 and "--loss: diff of two nets compares their ops and runs neither" in _one_line_error(err)


@pytest.mark.parametrize("loss", [[], ["--loss", "loss"]])
def test_run_marks_backward_and_optimizer_rows_by_section(loss, capsys):
    """A training net's own backward ops read ∇ and its optimizer ops Δ, with or without --loss
    (with --loss the optimizer rows were marked ∇, without it no row was)."""
    path = EXAMPLES / "mlp" / "predict_net.pb"
    rc, out, _ = _cli(capsys, "run", path, *loss)
    sections = split_training_net(load_net(path)).sections
    marks = {"forward": "", "backward": "∇", "optimizer": "Δ"}
    rows = out.splitlines()[1:-1]
    assert rc == 0 and len(rows) == len(sections)
    assert [row.split()[1] if row.split()[1] in "∇Δ" else "" for row in rows] == [marks[s] for s in sections]


def test_check_grad_says_when_it_checks_caffe2s_own_wrong_gradient(tmp_path, capsys):
    """The ONNX-exported CNN's BatchNorm is SpatialBN is_test=1, whose Caffe2 gradient is wrong: the
    exact-mode check fails and says why (naming the op as `lint` does); --fix-caffe2 passes."""
    path, x = GOLDEN / "builders_onnx" / "onnx_cnn.pb", _inputs("builders_onnx/onnx_cnn", tmp_path)
    args = ["check-grad", path, "--loss", "y", "--elements", "3", *x]
    rc, out, _ = _cli(capsys, *args)
    bn = next(i for i, op in enumerate(load_net(path).op) if op.type == "SpatialBN")
    assert rc == 1 and f"(#{bn} SpatialBN; `netviz lint`); --fix-caffe2 checks" in out.splitlines()[-1]
    rc, out, _ = _cli(capsys, *args, "--fix-caffe2")
    assert rc == 0 and out.splitlines()[-1].endswith(" passed, 0 failed")


def test_a_training_nets_own_gradient_is_not_a_loss(capsys):
    """`X_grad` is written by the net's backward section: the line says so and names the real loss."""
    rc, _, err = _cli(capsys, "grad", EXAMPLES / "do_net" / "predict_net.pb", "--loss", "X_grad")
    assert rc == 2 and _one_line_error(err) == (
        "netviz: do_net: loss blob 'X_grad' is written only by the net's backward ops; give a blob of its "
        "forward section (its backward pass is for loss)")
    rc, _, err = _cli(capsys, "check-grad", EXAMPLES / "mlp" / "predict_net.pb", "--loss", "fc2_b")
    assert rc == 2 and "'fc2_b' is written only by the net's optimizer ops" in _one_line_error(err)


def test_a_plan_given_to_a_netdef_command_is_named(capsys):
    plan = EXAMPLES / "mlp" / "plan.pbtxt"
    for cmd in (["lint"], ["grad", "--loss", "loss"], ["export", "-o", "x.svg"]):
        rc, _, err = _cli(capsys, cmd[0], plan, *cmd[1:])
        assert rc == 2 and "a PlanDef (nets 'mlp_init', 'mlp_train')" in _one_line_error(err)
    rc, out, _ = _cli(capsys, "info", plan)
    assert rc == 0 and "mlp_train" in out
    rc, out, _ = _cli(capsys, "info", plan, "--json")  # --json printed the text tree
    info, parsed = json.loads(out), load_plan(plan)
    assert rc == 0 and [n["op_count"] for n in info["nets"]] == [len(n.op) for n in parsed.network]
    assert [s.get("num_iter") for s in info["steps"]] == [s.num_iter if s.HasField("num_iter") else None
                                                        for s in parsed.execution_step]
    rc, _, err = _cli(capsys, "info", plan, "--shapes")
    assert rc == 2 and "a PlanDef; --shapes infers one net's blobs" in _one_line_error(err)
    rc, _, err = _cli(capsys, "run", plan, "--dump", "out", "--loss", "loss")  # were silently ignored
    assert rc == 2 and _one_line_error(err).endswith("--loss, --dump cannot apply (give one of its nets instead)")


def test_a_missing_input_says_how_to_feed_it(capsys):
    """Builder nets have no value_info.json: the data and label inputs must be fed, and one line names
    both (not one per run) and says how."""
    rc, _, err = _cli(capsys, "run", GOLDEN / "builders" / "mlp_sgd.pb")
    assert rc == 2 and _one_line_error(err).endswith(
        "2 inputs of the net are given by neither the init net nor --input: data, label; "
        "feed them with --input data=SHAPE --input label=SHAPE (or NAME=FILE.npy)")


def test_float_labels_are_refused_as_caffe2_refuses_them(capsys):
    """`--input label=5` makes float32 labels; Caffe2's SoftmaxWithLoss reads int32 and refuses them
    ("Tensor type mismatch"), so a loss from them would be silent wrong output."""
    rc, _, err = _cli(capsys, "run", GOLDEN / "builders" / "mlp_sgd.pb", "--input", "data=5,6", "--input", "label=5")
    assert rc == 2 and "op #3 SoftmaxWithLoss" in _one_line_error(err) and "labels must be int32" in err
    rc, out, err = _cli(capsys, "run", GOLDEN / "builders" / "mlp_sgd.pb", "--input", "data=5,6", "--input", "label=5:int32")
    assert rc == 0 and out.splitlines()[-1].endswith("stopped: end"), err


def test_an_in_place_overwrite_names_the_op_that_did_it(zoo, capsys):
    """AlexNet's Dropout runs in place on fc7 after the Relu whose gradient reads it: Caffe2's own
    version error, plus which op overwrote the blob and that Caffe2 refuses the net too."""
    rc, _, err = _cli(capsys, "grad", zoo / "bvlc_alexnet" / "predict_net.pbtxt", "--loss", "prob")
    assert rc == 2 and _one_line_error(err) == (
        'netviz: AlexNet: op #19 Relu: Gradient operator needs output "fc7" at version 1, but currently we have '
        'version 2. (op #20 Dropout overwrote it in place; Caffe2 refuses this net too)')


def test_forward_only_rnn_refuses_gradients_in_one_line(capsys):
    """rnn_cell's forward_only=True RecurrentNetwork has no backward step net: Caffe2's maker refuses."""
    rc, _, err = _cli(capsys, "grad", GOLDEN / "builders" / "rnn_lstm_forward_only.pb", "--loss", "loss")
    assert rc == 2 and "[RecurrentNetwork] (op #1): outputs_with_grads must not be empty" in _one_line_error(err)


def test_bad_run_outputs_and_batch_mismatch_are_one_line(tmp_path, capsys):
    """--dump onto a file was a FileExistsError traceback; 3 data rows with 16 labels an IndexError."""
    (tmp_path / "afile").write_text("")
    rc, _, err = _cli(capsys, "run", EXAMPLES / "mlp" / "predict_net.pb", "--dump", tmp_path / "afile")
    assert rc == 2 and _one_line_error(err).endswith("--dump needs a folder, and this is a file")
    rc, _, err = _cli(capsys, "run", EXAMPLES / "mlp" / "predict_net.pb", "--input", "data=3,8")
    assert rc == 2 and "SoftmaxWithLoss '': inputs it cannot take: 16 labels for 3 rows of logits" in _one_line_error(err)


def test_a_mistyped_name_is_named(capsys):
    """--only with no such input said 'no float input gets a gradient'; --input of a non-input passed unseen."""
    path = EXAMPLES / "mlp" / "predict_net.pb"
    rc, _, err = _cli(capsys, "check-grad", path, "--loss", "loss", "--only", "fc1_wt")
    assert rc == 2 and _one_line_error(err).startswith("netviz: --only fc1_wt: no such float input of ")
    rc, out, err = _cli(capsys, "run", path, "--input", "dta=16,8")
    assert rc == 0 and "--input dta: not an external input of the net (fed anyway)" in err


def test_break_on_nan_names_the_op_that_made_it(tmp_path, capsys):
    """The stop line named the next op (Relu) as if it had made the NaN; FC #0 made it from the fed data."""
    data = np.ones((16, 8), np.float32)
    data[2, 3] = np.nan
    np.save(tmp_path / "nan.npy", data)
    rc, out, _ = _cli(capsys, "run", EXAMPLES / "mlp" / "predict_net.pb", "--input", f"data={tmp_path / 'nan.npy'}",
                      "--break-on-nan")
    assert rc == 1 and out.splitlines()[-1] == "netviz: NaN/Inf produced by op 0 FC (fc1); stopped before main › op#1 Relu"


def test_input_spec_takes_a_dtype_for_random_integer_inputs():
    """`NAME=SHAPE:DTYPE` makes 0/1 integers (labels, lengths) where a shape alone makes floats."""
    from engine.debugger.feeds import FeedError, RandomSpec, parse_input_spec
    assert parse_input_spec("label=5:int32") == ("label", RandomSpec((5,), "int32"))
    assert parse_input_spec("data=2x3") == ("data", (2, 3))
    with pytest.raises(FeedError, match="dtype 'int8' is not one of"):
        parse_input_spec("label=5:int8")
