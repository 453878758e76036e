"""The divergence localizer against ONNX Runtime (issue #44 item 1): `netviz diff NET MODEL.onnx` gives each
op's own error in ONNX Runtime (its ONNX nodes cut out and run alone on the engine's inputs) and names the
op a bug injected into the exported file sits in, also where later ops inherit a larger difference; a
clean export says "no culprit" and exits 0."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from netviz.cli import main

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parents[1]
R50 = ROOT / "tests" / "golden" / "models" / "resnet50" / "predict_net.pb"
MLP = ROOT / "examples" / "mlp_forward" / "predict_net.pb"


@pytest.fixture(scope="module")
def r50_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("r50") / "r50.onnx"
    assert main(["export", str(R50), "-o", str(out)]) == 0
    return out


def _diff(capsys: pytest.CaptureFixture[str], net: Path, model: Path, *opts: str) -> tuple[int, str, dict]:
    """(exit status, text output) of `netviz diff NET MODEL`, and its --json document."""
    rc = main(["diff", str(net), str(model), *opts])
    text = capsys.readouterr().out
    assert main(["diff", str(net), str(model), *opts, "--json"]) == rc
    return rc, text, json.loads(capsys.readouterr().out)


def _edited(src: Path, dst: Path, edit) -> Path:
    model = onnx.load(str(src))
    edit(model)
    onnx.save(model, str(dst))
    return dst


def _scale_initializer(name: str, factor: float):
    def edit(model) -> None:
        t = next(t for t in model.graph.initializer if t.name == name)
        t.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(t) * np.float32(factor), name))
    return edit


def _later_inherit_more(doc: dict, culprit: int) -> None:
    """Later ops differ by more than the culprit's output, by inheritance: their own errors are rounding."""
    c = doc["ops"][culprit]
    later = [r for r in doc["ops"] if r["op"] > culprit and r["out"] is not None]
    assert max(r["out"] for r in later) > c["out"]
    assert all(r["own"] is None or r["own"] < doc["tol"] for r in later)


def test_clean_resnet50_export_has_no_culprit(r50_onnx: Path, capsys) -> None:
    rc, text, doc = _diff(capsys, R50, r50_onnx)
    assert rc == 0 and doc["culprit"] is None, text
    assert text.strip().splitlines()[-1] == "no culprit: all 174 ops within tolerance 0.0001"
    assert "all equal within tolerance" in text  # the whole-model comparison is still there
    own = [r["own"] for r in doc["ops"]]
    assert all(e is not None for e in own) and 0 < max(own) < 1e-5  # every op ran alone in ONNX Runtime


def test_a_scaled_weight_names_its_conv(r50_onnx: Path, tmp_path: Path, capsys) -> None:
    """One Conv weight times 1.01 in the file: that Conv (op #61) is the culprit, own error 0.01."""
    bad = _edited(r50_onnx, tmp_path / "w.onnx", _scale_initializer("comp_5_conv_2_w", 1.01))
    rc, text, doc = _diff(capsys, R50, bad)
    assert rc == 1
    assert text.strip().splitlines()[-1].startswith("culprit: op #61 Conv 'comp_5_conv_2': own error 0.01 ")
    assert doc["culprit"]["op"] == 61 and doc["culprit"]["own"] == pytest.approx(0.01, rel=1e-2)
    assert doc["culprit"]["inherited"] < 1e-4
    assert all(r["own"] < 1e-4 for r in doc["ops"] if r["op"] != 61)


def test_a_changed_epsilon_names_its_batchnorm_where_later_ops_inherit_more(r50_onnx: Path, tmp_path: Path,
                                                                            capsys) -> None:
    """A BatchNormalization's epsilon 1e-5 -> 1e-2 in the file: op #5 differs by 0.005, later ops by up to
    0.0066, inherited; the culprit is op #5."""
    def epsilon(model) -> None:
        node = next(n for n in model.graph.node if n.op_type == "BatchNormalization"
                    and n.output[0] == "comp_0_spatbn_1")
        next(a for a in node.attribute if a.name == "epsilon").f = 1e-2
    bad = _edited(r50_onnx, tmp_path / "eps.onnx", epsilon)
    rc, text, doc = _diff(capsys, R50, bad)
    assert rc == 1 and doc["culprit"]["op"] == 5 and doc["culprit"]["type"] == "SpatialBN", text
    assert "culprit: op #5 SpatialBN 'comp_0_spatbn_1'" in text
    _later_inherit_more(doc, 5)


def test_mlp_clean_then_a_bias_off(tmp_path: Path, capsys) -> None:
    out = tmp_path / "mlp.onnx"
    assert main(["export", str(MLP), "-o", str(out)]) == 0
    rc, text, doc = _diff(capsys, MLP, out, "--all")
    assert rc == 0 and doc["culprit"] is None and "no culprit: all 4 ops within tolerance" in text
    assert [r["type"] for r in doc["ops"]] == ["FC", "Relu", "FC", "SoftmaxWithLoss"]
    bad = _edited(out, tmp_path / "b.onnx", _scale_initializer("fc1_w", 1.01))
    rc, text, doc = _diff(capsys, MLP, bad)
    assert rc == 1 and doc["culprit"]["op"] == 0 and doc["culprit"]["name"] == "fc1", text


def test_an_op_with_no_onnx_value_says_why_in_its_row(tmp_path: Path, capsys) -> None:
    """A file naming no value of op #1 (the Relu) for netviz: its row is `-` with the reason, and the next
    FC's own nodes reach back through the Relu's node to the values the engine made."""
    out = tmp_path / "mlp.onnx"
    assert main(["export", str(MLP), "-o", str(out)]) == 0

    def unname(model) -> None:
        prop = next(p for p in model.metadata_props if p.key == "netviz.values")
        prop.value = json.dumps([row for row in json.loads(prop.value) if row[0] != 1])
    bad = _edited(out, tmp_path / "u.onnx", unname)
    rc, text, doc = _diff(capsys, MLP, bad, "--all")
    relu, fc2 = doc["ops"][1], doc["ops"][2]
    assert relu["out"] is None and relu["own"] is None and relu["note"].startswith("no ONNX value")
    assert fc2["own"] is not None and fc2["own"] < 1e-6
    row = next(ln for ln in text.splitlines() if ln.lstrip().startswith("#1 Relu"))
    assert row.split()[3:5] == ["-", "-"] and "(no ONNX value" in row
    assert rc == 0 and doc["culprit"] is None


@pytest.mark.parametrize("name, control", [("while_net", "While"), ("nested_if_in_while", "While"), ("if_net", "If"),
                                           ("lstm", "RecurrentNetwork")])
def test_control_flow_ops_run_alone_with_their_subgraphs(name: str, control: str, tmp_path: Path, capsys) -> None:
    """A Loop or If node reads outer values inside its body: the cut model feeds them, so the control op
    gets an own error; the workspace scopes before it have no ONNX value and say so."""
    net, out = ROOT / "examples" / name / "predict_net.pb", tmp_path / "m.onnx"
    assert main(["export", str(net), "-o", str(out)]) == 0
    rc, text, doc = _diff(capsys, net, out, "--all")
    row = next(r for r in doc["ops"] if r["type"] == control)
    assert rc == 0 and row["own"] is not None and row["own"] < 1e-6 and not row["note"], text
    for r in doc["ops"]:
        assert (r["own"] is None) == (r["type"] == "CreateScope")
        assert r["type"] != "CreateScope" or r["note"].startswith("no ONNX value")
