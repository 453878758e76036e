"""The fixer's pass over qa's findings at the command line: each slip is one line in the user's terms
(the file, op or blob and what is wrong), with exit status 2."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_qa_cli import _cli

ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "examples" / "mlp"


def test_fc_with_the_wrong_width_says_it_in_fc_terms(capsys):
    """FC on 9 columns against an 8-wide W said NumPy's "gufunc signature (n?,k),(k,m?)…"."""
    rc, _, err = _cli(capsys, "run", MLP / "predict_net.pb", "--input", "data=16,9")
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "op #0 FC '': X has 9 columns (flattened at axis 1) but W has 8" in lines[0], lines[0]
    assert "gufunc" not in err and "matmul" not in err


def test_an_unnamed_net_is_called_net_not_a_placeholder(capsys, tmp_path):
    """A NetDef without a name showed "<op>: op #0 Relu …" where the net's name goes."""
    path = tmp_path / "noname.pbtxt"
    path.write_text('op { type: "Relu" input: "x" output: "y" }\n')
    rc, _, err = _cli(capsys, "run", path)
    assert rc == 2
    assert err.strip() == "netviz: net: op #0 Relu '': input blob 'x' not found", err


def test_diff_against_a_missing_onnx_file_says_no_such_file(capsys, tmp_path):
    """`diff NET missing.onnx` said "not an ONNX model ([Errno 2] …)": Python's words, not netviz's."""
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    missing = tmp_path / "missing.onnx"
    rc, _, err = _cli(capsys, "diff", MLP / "predict_net.pb", missing)
    assert rc == 2
    assert err.strip() == f"netviz: {missing}: no such file", err


def test_diff_run_of_two_unrelated_nets_counts_only_aligned_ops(capsys):
    """`diff mlp while_net --run` said "15 ops compared … no culprit: all 15 ops within tolerance" with
    one op aligned: a clean bill for ops never compared."""
    rc, out, _ = _cli(capsys, "diff", MLP / "predict_net.pb", ROOT / "examples" / "while_net" / "predict_net.pb",
                      "--run")
    lines = out.strip().splitlines()
    assert "14 ops of A match no op of B: #0, #1, #2, #3, #5, #6, #7, #8, #9, #10" in lines
    assert "1 ops compared (errors: max|a-b| / max(1, max|a|); tolerance 0.0001)" in lines
    assert lines[-1].startswith("no culprit among the 1 ops that align; 14 ops of A and 9 of B match no op"), out
    assert "within tolerance" not in out
    assert rc == 0


def test_query_history_of_a_blob_not_in_the_recording_is_one_line(capsys, tmp_path):
    """`query while.nvrec --history nope` said "0 versions of nope", exit 0: a typo read as an answer."""
    rec = tmp_path / "while.nvrec"
    assert _cli(capsys, "run", ROOT / "examples" / "while_net" / "predict_net.pb", "--record", rec)[0] == 0
    rc, out, err = _cli(capsys, "query", rec, "--history", "ac")
    assert rc == 2 and "versions" not in out
    assert err.strip() == f"netviz: {rec}: no blob 'ac' in the recording; did you mean 'acc'?", err
    rc, out, _ = _cli(capsys, "query", rec, "--history", "acc")
    assert rc == 0 and out.strip().splitlines()[-1] == "7 versions of acc"


def test_query_history_of_a_parameter_is_no_typo(capsys, tmp_path):
    """A parameter recorded only at @0 (no op wrote it) was called "no blob 'W' in the recording", exit 2."""
    rec = tmp_path / "while.nvrec"
    assert _cli(capsys, "run", ROOT / "examples" / "while_net" / "predict_net.pb", "--record", rec)[0] == 0
    rc, out, err = _cli(capsys, "query", rec, "--history", "W")
    assert rc == 0 and out.strip().splitlines()[-1] == "0 versions of W"
    assert err.strip() == "netviz: note: W: only its starting value @0 is recorded; no op wrote it", err


def test_query_condition_on_a_blob_not_in_the_recording_is_one_line(capsys, tmp_path):
    """`query while.nvrec 'max_abs(acc2) > 0'` said "0 of 59 op runs match", exit 0: a typo read as a fact."""
    rec = tmp_path / "while.nvrec"
    assert _cli(capsys, "run", ROOT / "examples" / "while_net" / "predict_net.pb", "--record", rec)[0] == 0
    rc, out, err = _cli(capsys, "query", rec, "max_abs(acc2) > 0")
    assert rc == 2 and "match" not in out
    assert err.strip() == f"netviz: {rec}: no blob 'acc2' in the recording; did you mean 'acc'?", err
    rc, out, _ = _cli(capsys, "query", rec, "max_abs(acc) > 0")
    assert rc == 0 and "op runs match max_abs(acc) > 0" in out.strip().splitlines()[-1]
