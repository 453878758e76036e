"""Inputs nobody gives, named all at once; a mistyped ``--input`` named with its closest input
(issue 42 items 7 and 19), in the engine and in ``netviz run``."""
from __future__ import annotations

from pathlib import Path

from engine.debugger import Debugger
from engine.debugger.feeds import missing_inputs, stray_inputs
from engine.model.modelio import load_model
from netviz.cli import main

MLP = Path(__file__).resolve().parents[2] / "examples" / "mlp" / "predict_net.pb"


def _empty_init(tmp_path: Path) -> Path:
    (tmp_path / "empty_init.pbtxt").write_text('name: "empty"\n')
    return tmp_path / "empty_init.pbtxt"


def test_every_missing_input_is_found_up_front(tmp_path):
    """The mlp training net without its init net lacks data, label, ITER and ONE: a run stopped at data,
    and four runs were needed to learn the four; with made-up parameters the weights are not asked for."""
    model = load_model(MLP, init=_empty_init(tmp_path))
    assert Debugger(model, synthesize_params=True).missing_inputs() == ["data", "label", "ITER", "ONE"]
    assert Debugger(model).missing_inputs() == ["data", "fc1_w", "fc1_b", "fc2_w", "fc2_b", "label", "ITER", "ONE"]
    assert Debugger(load_model(MLP)).missing_inputs() == []
    given = Debugger(model, {"data": (16, 8), "label": (16,)}, synthesize_params=True)
    assert given.missing_inputs() == ["ITER", "ONE"]
    # read before written only: an input some op writes first is not missing
    assert list(missing_inputs(model.predict, {"data"})) == ["fc1_w", "fc1_b", "fc2_w", "fc2_b", "label", "ITER",
                                                              "ONE"]


def test_run_names_every_missing_input_in_one_error(tmp_path, capsys):
    rc = main(["run", str(MLP), "--init", str(_empty_init(tmp_path)), "--random-params"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "4 inputs of the net are given by neither the init net nor --input: data, label, ITER, ONE" in err
    assert "--input ITER=SHAPE --input ONE=SHAPE" in err


def test_a_mistyped_input_names_the_closest(capsys):
    net = load_model(MLP).predict
    assert stray_inputs(net, ["data", "lable"]) == (["lable"], "did you mean label?")
    assert stray_inputs(net, ["dta", "lbl"])[1] == "did you mean data (for dta), label (for lbl)?"
    assert stray_inputs(net, ["zzzzzz"])[1].startswith("the net's inputs: data, fc1_w")
    assert stray_inputs(net, ["data"]) == ([], "")
    rc = main(["run", str(MLP), "--input", "dta=16,8"])
    assert rc == 0 and "--input dta: not an external input of the net (fed anyway); did you mean data?" in \
        capsys.readouterr().err
