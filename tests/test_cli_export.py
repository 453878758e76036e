"""`netviz export` and `netviz grad` end to end: files written, maps printed, one-line errors with exit 2."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pygraphviz as pgv
import pytest

from engine.model.modelio import load_net
from netviz.cli import main
from tests.engine.test_modelio import _bad_inputs


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = main(list(args))
    except SystemExit as e:  # argparse usage errors
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_export_svg_and_summary(zoo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.svg"
    code, stdout, _ = cli(capsys, "export", str(zoo / "mask_rcnn_2go_int8" / "model.pbtxt"), "-o", str(out))
    assert code == 0 and out.read_text().lstrip().startswith("<?xml")
    assert stdout.strip() == f"wrote {out} (128 ops, 297 blobs, 450 edges, 2 subnet clusters)"


def test_export_modes_and_flags_read_back(zoo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(zoo / "zfnet512" / "predict_net.pbtxt")
    out = tmp_path / "g.dot"
    assert cli(capsys, "export", path, "-o", str(out), "--mode", "minimal", "--minimal-dependency",
               "--rankdir", "TB")[0] == 0
    g = pgv.AGraph(str(out))
    assert g.number_of_nodes() == 21 and g.number_of_edges() == 20 and g.graph_attr["rankdir"] == "TB"
    assert cli(capsys, "export", path, "-o", str(out), "--backward", "--force")[0] == 0
    g = pgv.AGraph(str(out))
    assert sum(g.get_node(n).attr["fillcolor"] == "#DB4437" for n in g.nodes()) == 22
    assert cli(capsys, "export", path, "-o", str(out), "--focus", "3", "--depth", "1", "-f")[0] == 0
    assert pgv.AGraph(str(out)).number_of_nodes() == 3 + 7  # LRN, MaxPool, Conv and the 7 blobs they touch


def test_export_json_to_stdout(zoo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = zoo / "bvlc_alexnet" / "predict_net.pbtxt"
    code, stdout, _ = cli(capsys, "export", str(path), "--json", "--mode", "minimal")
    j = json.loads(stdout)
    assert code == 0 and len(j["nodes"]) == len(load_net(path).op) and {"source", "target"} <= set(j["edges"][0])


def test_grad_prints_map_and_writes_net(zoo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "g.pbtxt"
    code, stdout, _ = cli(capsys, "grad", str(zoo / "zfnet512" / "predict_net.pbtxt"), "--loss", "gpu_0/softmax",
                          "-o", str(out))
    assert code == 0 and "gpu_0/conv1_w  →  gpu_0/conv1_w_grad" in stdout
    assert stdout.splitlines()[-1] == f"21 forward ops, 22 backward ops; wrote {out}"
    net = load_net(out)
    assert len(net.op) == 43 and net.op[-1].type == "ConvGradient"
    code, stdout, _ = cli(capsys, "grad", str(zoo / "zfnet512" / "predict_net.pbtxt"), "--loss", "gpu_0/softmax",
                          "--json")
    assert json.loads(stdout)["gpu_0/fc8_w"] == "gpu_0/fc8_w_grad"


def _bad_cases(zoo: Path, tmp: Path) -> list[tuple[list[str], str]]:
    zf, mask = str(zoo / "zfnet512" / "predict_net.pbtxt"), str(zoo / "mask_rcnn_2go_int8" / "model.pbtxt")
    (tmp / "exists.svg").write_text("x")
    return [
        (["export", zf, "-o", str(tmp / "g.gif")], "unknown output format 'gif'"),
        (["export", zf], "an output file"),
        (["export", zf, "-o", str(tmp / "exists.svg")], "already exists; pass --force"),
        (["export", zf, "-o", str(tmp / "nodir" / "g.svg")], "does not exist"),
        (["export", zf, "-o", str(tmp / "g.svg"), "--focus", "nothing"], "no op or blob matches"),
        (["export", zf, "-o", str(tmp / "g.svg"), "--backward", "--loss", "nope"], "no op writes loss blob 'nope'"),
        (["export", mask, "-o", str(tmp / "g.svg"), "--backward", "--loss", "score_nms"], "op #96"),
        (["export", zf, "-o", str(tmp / "g.svg"), "--timeout", "0"], "--timeout > 0"),
        (["export", zf, "-o", str(tmp / "g.svg"), "--mode", "huge"], "invalid choice"),
        (["grad", zf, "--loss", "nope"], "no op writes loss blob 'nope'"),
        (["grad", mask, "--loss", "score_nms"], "BoxWithNMSLimit] (op #96)"),
        (["grad", zf, "--loss", "gpu_0/softmax", "-o", str(tmp / "exists.svg")], "already exists"),
        (["grad", zf], "--loss"),
    ]


def test_bad_arguments_exit_2_one_line(zoo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for args, expected in _bad_cases(zoo, tmp_path):
        code, _, err = cli(capsys, *args)
        assert code == 2 and expected in err and err.count("\n") == 1, (args, err)
    r = subprocess.run([sys.executable, "-m", "netviz.cli", *args], capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1
    assert (tmp_path / "exists.svg").read_text() == "x" and not (tmp_path / "g.svg").exists()


@pytest.mark.parametrize("case", ["missing", "directory", "empty", "random", "other message",
                                  "truncated", "text syntax"])
def test_bad_model_exit_2_one_line(tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]) -> None:
    path, expected = _bad_inputs(tmp_path)[case]
    for cmd in (["export", str(path), "-o", str(tmp_path / "o.dot")], ["grad", str(path), "--loss", "x"]):
        code, _, err = cli(capsys, *cmd)
        assert code == 2 and err.count("\n") == 1 and str(path) in err and expected in err


def test_export_shapes_label_blobs_with_inferred_shapes(zoo, tmp_path) -> None:
    import pygraphviz as pgv

    from netviz.cli import main
    out = tmp_path / "zf.dot"
    assert main(["export", str(zoo / "zfnet512" / "predict_net.pbtxt"), "-o", str(out), "--shapes"]) == 0
    graph = pgv.AGraph(str(out))
    labels = [graph.get_node(n).attr["label"] or "" for n in graph.nodes()]
    assert any("1×3×224×224" in lab for lab in labels)          # the input, from value_info.json
    assert any("1×?×109×109" in lab for lab in labels)          # conv1: spatial size known, filters not
