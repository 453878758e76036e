"""`netviz extract NET --ops N:M -o DIR` (issue #44 item 2): the folder's repro.py runs the range in real
Caffe2 (the oracle venv) and in netviz to the values captured in the full run, for zoo nets, ResNet-50
and the control-flow examples, subnets included; the init net's values are packed bytes."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.debugger.extract import fill_op_bytes, init_net_bytes, parse_range
from engine.errors import NetvizError
from engine.model.modelio import load_net
from engine.runtime import executor
from engine.runtime.workspace import Workspace
from netviz.cli import main
from proto import caffe2_pb2

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
R50 = ROOT / "tests" / "golden" / "models" / "resnet50" / "predict_net.pb"
CAFFE2 = ROOT / ".venv-caffe2" / "bin" / "python"


def _extract(tmp_path: Path, net: Path, *opts: str) -> Path:
    out = tmp_path / "repro"
    assert main(["extract", str(net), *opts, "-o", str(out)]) == 0
    return out


def _repro(folder: Path, python: Path | str, script: str = "repro.py") -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" or python == sys.executable}
    done = subprocess.run([str(python), script], cwd=folder, capture_output=True, text=True, timeout=300, env=env)
    return done.returncode, done.stdout + done.stderr[-2000:]


def _repro_script(folder: Path, script: str) -> tuple[int, str]:
    return _repro(folder, CAFFE2, script)


def _caffe2_runs_it(folder: Path) -> None:
    if not CAFFE2.is_file():
        pytest.skip("no .venv-caffe2 (real Caffe2) here")
    rc, out = _repro(folder, CAFFE2)
    n = len(np.load(folder / "expected.npz").files)
    assert rc == 0 and f"\nCaffe2: {n} of {n} outputs match expected.npz\n" in out, out


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "bool", "uint8"])
def test_the_init_net_fills_each_value_back(dtype: str) -> None:
    value = (np.arange(-3, 9).reshape(3, 4) * 1.25).astype(dtype)
    data = init_net_bytes("init", {"X": value, "E": np.zeros((0, 2), dtype)})
    ws = Workspace("t")
    executor.run_net(caffe2_pb2.NetDef.FromString(data), ws)
    assert ws.values["X"].dtype == value.dtype and np.array_equal(ws.values["X"], value)
    assert ws.values["E"].shape == (0, 2)


def test_every_dtype_fills_back_in_real_caffe2(tmp_path: Path) -> None:
    """Packed floats and packed varints (negative ints too) parse in Caffe2's C++ protobuf."""
    if not CAFFE2.is_file():
        pytest.skip("no .venv-caffe2 (real Caffe2) here")
    vals = {"i32": np.array([[-3, 5, 70000]], np.int32), "i64": np.array([-2**40, 7]),
            "i16": np.array([-5, 300], np.int16),
            "b": np.array([True, False]), "f": np.array([1.5, -2.25], np.float32), "u8": np.array([1, 255], np.uint8),
            "e": np.zeros((0, 3), np.float32)}
    (tmp_path / "init.pb").write_bytes(init_net_bytes("t", vals))
    np.savez(tmp_path / "want.npz", **vals)
    script = ("import numpy as np\nfrom caffe2.python import workspace\nfrom caffe2.proto import caffe2_pb2\n"
              "workspace.RunNetOnce(caffe2_pb2.NetDef.FromString(open('init.pb', 'rb').read()))\n"
              "z = np.load('want.npz')\nfor k in z.files:\n    got = workspace.FetchBlob(k)\n"
              "    print(k, got.dtype == z[k].dtype and got.shape == z[k].shape and np.array_equal(got, z[k]))\n")
    (tmp_path / "check.py").write_text(script)
    rc, out = _repro_script(tmp_path, "check.py")
    assert rc == 0 and sorted(ln for ln in out.splitlines() if ln.endswith(("True", "False"))) == \
        sorted(f"{k} True" for k in vals), out


def test_float_values_are_one_packed_field_of_the_arrays_bytes() -> None:
    w = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    data = fill_op_bytes("W", w)
    assert w.tobytes() in data and len(data) < w.nbytes + 64  # packed: 4 bytes a value, not 5


def test_a_range_is_a_python_slice() -> None:
    assert parse_range("3:5", 10) == (3, 5) and parse_range("-1", 10) == (9, 10)
    with pytest.raises(NetvizError, match="the net has ops 0..9"):
        parse_range("5:3", 10)


def test_resnet50_range_runs_in_caffe2_and_netviz(tmp_path: Path) -> None:
    out = _extract(tmp_path, R50, "--ops", "10:14")
    net = load_net(out / "predict_net.pb")
    assert [op.type for op in net.op] == ["Conv", "SpatialBN", "Conv", "SpatialBN"]
    assert sorted(np.load(out / "expected.npz").files) == sorted(o for op in net.op for o in op.output)
    rc, text = _repro(out, sys.executable)
    assert rc == 0 and "\nnetviz: 4 of 4 outputs match expected.npz\n" in text, text
    _caffe2_runs_it(out)
    # the check bites: a wrong expected value fails
    exp = dict(np.load(out / "expected.npz"))
    exp["comp_0_conv_3"] = exp["comp_0_conv_3"] + 0.01
    np.savez(out / "expected.npz", **exp)
    rc, text = _repro(out, sys.executable)
    assert rc == 1 and "comp_0_conv_3: (1, 256, 56, 56) error" in text and "DIFFERS" in text


@pytest.mark.parametrize("name, opts", [
    ("while_net", ["--ops", "0:4"]), ("if_net", ["--ops", "0:4"]), ("do_net", ["--ops", "0:3"]),
    ("nested_if_in_while", ["--ops", "0:4"]), ("lstm", ["--ops", "0:4"]),
    ("while_net", ["--subnet", "2/loop_net", "--ops", "0:"]), ("while_net", ["--subnet", "2/cond_net", "--ops", "0:"]),
    ("if_net", ["--subnet", "2/then_net", "--ops", "0:"]), ("do_net", ["--subnet", "1/net", "--ops", "0:"]),
])
def test_control_flow_ranges_and_subnets_run_in_caffe2(tmp_path: Path, name: str, opts: list[str]) -> None:
    _caffe2_runs_it(_extract(tmp_path, EXAMPLES / name / "predict_net.pb", *opts))


@pytest.mark.parametrize("name", ["inception_v1", "densenet121"])
def test_zoo_ranges_around_a_concat_run_in_caffe2(zoo: Path, tmp_path: Path, name: str) -> None:
    path = zoo / name / "predict_net.pbtxt"
    k = next(i for i, op in enumerate(load_net(path).op) if op.type == "Concat")
    out = _extract(tmp_path, path, "--ops", f"{k - 2}:{k + 2}", "--random-params")
    assert "Concat" in [op.type for op in load_net(out / "predict_net.pb").op]
    _caffe2_runs_it(out)


def test_a_subnet_that_does_not_exist_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["extract", str(EXAMPLES / "while_net" / "predict_net.pb"), "--subnet", "2/then_net", "--ops", "0",
                 "-o", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.strip() == ("netviz: --subnet '2/then_net': op #2 While holds loop_net, cond_net")


def test_an_int8_range_runs_in_caffe2_bit_for_bit(zoo: Path, tmp_path: Path) -> None:
    """int8 Mask R-CNN's first Int8ConvRelu/Int8Conv/Int8Sum: Int8 tensors (uint8 weights, int32 biases)
    captured with their scales and zero points; Caffe2's outputs equal the captured ones exactly."""
    out = _extract(tmp_path, zoo / "mask_rcnn_2go_int8" / "model.pbtxt", "--ops", "2:7", "--random-params",
                   "--input", "data=1,3,64,64", "--input", "im_info=1,3")
    types = {op.type for op in caffe2_pb2.NetDef.FromString((out / "init_net.pb").read_bytes()).op}
    assert {"Int8GivenTensorFill", "Int8GivenIntTensorFill"} <= types, types
    _caffe2_runs_it(out)
    rc, text = _repro(out, CAFFE2 if CAFFE2.is_file() else sys.executable)
    assert text.count(" error 0 ok") == 5, text


def test_a_range_reading_a_forward_ops_saved_state_is_refused_in_one_line(capsys, tmp_path: Path) -> None:
    """RecurrentNetworkGradient alone reads the step workspaces RecurrentNetwork saved: no init net
    can make them, so extract says where the range must start (it wrote them as a string tensor)."""
    assert main(["extract", str(EXAMPLES / "lstm" / "predict_net.pb"), "--ops", "5", "-o", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.strip() == (
        "netviz: ops 5:6: blob 'lstm/step_workspaces' is a StepWorkspaces (state an op saved for a later one), "
        "not a value an init net can fill; start the range at op #1, which makes it")
