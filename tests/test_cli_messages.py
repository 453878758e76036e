"""No message of ``info``, ``run``, ``grad`` or ``export`` shows raw Python exception text (issue #35 item 8).

Every net of the test corpus (the builders' goldens, the bundled examples, the model zoo) goes through
the four commands as a user runs them on a net they found: ``info --shapes``, ``run --random-params``
(missing data inputs left out, so the hint must be a sentence), ``grad`` on the net's losses (or with
none, which must be refused in words) and ``export``.  Whatever each prints, a traceback or a Python
class name such as ``ValueError`` or ``IndexError`` is a failure: errors are one line naming the
net, op and blob.  Weightless zoo nets also run end to end with ``--random-params`` once their data
inputs are given (issue #30 item 5).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from engine.runtime.workspace import eval_op
from netviz.cli import main
from tests.conftest import zoo_nets

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
EXAMPLES = ROOT / "examples"
CASES = sorted(p.relative_to(GOLDEN).with_suffix("").as_posix() for p in GOLDEN.glob("builders*/*.json"))
EXAMPLE_NETS = sorted(p.parent.name for p in EXAMPLES.glob("*/predict_net.pb"))
RAW = re.compile(r"Traceback|\b(Index|Value|Type|Key|Attribute|Assertion|ZeroDivision|Runtime)Error\b|"
                 r"RuntimeWarning|FloatingPointError|tuple index out of range|list index out of range")


def _cli(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    """Run netviz in-process; an exception escaping ``main`` is itself a raw message."""
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as e:  # argparse
        rc = int(e.code or 0)
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"netviz {' '.join(map(str, argv))}: {type(e).__name__} escaped: {e}")
    out, err = capsys.readouterr()
    raw = RAW.search(out + err)
    assert raw is None, f"netviz {' '.join(map(str, argv))}: raw exception text {raw.group(0)!r} in:\n{err or out}"
    if rc == 2:  # a refusal is one line
        lines = [ln for ln in err.splitlines() if ln.startswith("netviz: ") and "layout" not in ln]
        assert len(lines) == 1, err
    return rc, out, err


def _every_command(capsys, tmp_path: Path, path: Path, losses: list[str], *inputs: str) -> None:
    rc, out, err = _cli(capsys, "info", path, "--shapes")
    assert rc == 0 and "blob versions" in out, err
    _cli(capsys, "run", path, "--random-params", *inputs)
    loss_args = [a for loss in losses for a in ("--loss", loss)]
    rc, _, err = _cli(capsys, "grad", path, *loss_args, "-o", tmp_path / "grad.pb")
    assert rc in (0, 2), err
    rc, _, err = _cli(capsys, "export", path, "-o", tmp_path / "net.dot")
    assert rc == 0, err


@pytest.mark.parametrize("case", CASES)
def test_builder_nets_say_everything_in_words(case, tmp_path, capsys):
    meta = json.loads((GOLDEN / f"{case}.json").read_text())
    _every_command(capsys, tmp_path, GOLDEN / meta["net"], meta.get("losses") or [])


@pytest.mark.parametrize("name", EXAMPLE_NETS)
def test_examples_say_everything_in_words(name, tmp_path, capsys):
    _every_command(capsys, tmp_path, EXAMPLES / name / "predict_net.pb", ["loss"])


@pytest.mark.parametrize("net", [p.parent.name for p in zoo_nets()])
def test_zoo_nets_say_everything_in_words(net, zoo, tmp_path, capsys):
    path = next(p for p in zoo_nets() if p.parent.name == net)
    _every_command(capsys, tmp_path, path, [])


#: the data inputs a weightless zoo net needs beyond value_info.json (the detection nets' image info
#: is height, width, scale, as Detectron feeds it)
ZOO_INPUTS = {"mask_rcnn_2go_fp32": {"data": (1, 3, 192, 192)}, "mask_rcnn_2go_int8": {"data": (1, 3, 192, 192)}}
IM_INFO = {"detectron_e2e_faster_rcnn_R-50-C4_1x": 800, "mask_rcnn_2go_fp32": 192, "mask_rcnn_2go_int8": 192}


@pytest.mark.parametrize("net", [p.parent.name for p in zoo_nets()])
def test_every_weightless_zoo_net_runs_with_random_params(net, zoo, tmp_path, capsys):
    path = next(p for p in zoo_nets() if p.parent.name == net)
    args: list[object] = ["run", path, "--random-params"]
    for name, shape in ZOO_INPUTS.get(net, {}).items():
        args += ["--input", f"{name}={','.join(map(str, shape))}"]
    if net in IM_INFO:
        np.save(tmp_path / "im_info.npy", np.array([[IM_INFO[net], IM_INFO[net], 1.0]], np.float32))
        args += ["--input", f"im_info={tmp_path / 'im_info.npy'}"]
    rc, out, err = _cli(capsys, *args)
    assert rc == 0 and out.splitlines()[-1].endswith("stopped: end"), err


def test_a_run_that_fails_at_once_prints_only_its_one_line(zoo, capsys):
    """It printed an empty table and "0 ops in 0.0 ms; stopped: error" before the line that helps."""
    rc, out, err = _cli(capsys, "run", zoo / "mask_rcnn_2go_fp32" / "model.pbtxt", "--random-params")
    assert rc == 2 and out.strip().splitlines()[-1].startswith("note: no values for")
    assert "stopped:" not in out and "'data'" in err and "--input data=" in err


def test_a_run_that_fails_later_says_why_before_its_table(zoo, capsys):
    rc, out, err = _cli(capsys, "run", zoo / "detectron_e2e_faster_rcnn_R-50-C4_1x" / "predict_net.pbtxt",
                        "--random-params")
    assert rc == 2 and "'im_info' not found" in err and "--input im_info=" in err
    assert out.splitlines()[-1].endswith("stopped: error")


def test_box_nms_on_no_boxes_gives_caffe2s_empty_outputs():
    """A detection net whose proposals all fall away (random weights) stopped in BoxWithNMSLimit on
    NumPy's "cannot reshape array of size 0"; Caffe2 gives empty outputs, one image with 0 boxes."""
    s, b, c, n, keep, sizes = eval_op("BoxWithNMSLimit", np.zeros((0, 3), np.float32),
                                      np.zeros((0, 12), np.float32), n_out=6)
    assert (s.shape, b.shape, c.shape, keep.shape) == ((0,), (0, 4), (0,), (0,))
    assert n.tolist() == [0.0] and sizes.tolist() == [[0, 0, 0]]


def _mtcnn(folder: Path, net_name: str, layers: list[tuple], data: list) -> Path:
    """An MTCNN stage as Caffe2's Caffe translator writes it (Conv, in-place PRelu, legacy-padded
    MaxPool, FC, Softmax) with its init net and a value_info.json declaring `data`."""
    from engine.model.modelio import save_net
    from engine.model.opdef import create_operator as op
    from proto import caffe2_pb2

    net, init = caffe2_pb2.NetDef(name=net_name), caffe2_pb2.NetDef(name=f"{net_name}_init")
    params: dict[str, tuple[int, ...]] = {}
    for kind, x, y, *a in layers:
        if kind == "conv":
            net.op.append(op("Conv", [x, f"{y}_w", f"{y}_b"], y, kernel=a[2], stride=1, pad=0))
            params.update({f"{y}_w": (a[1], a[0], a[2], a[2]), f"{y}_b": (a[1],)})
            net.op.append(op("PRelu", [y, f"{y}_slope"], y))
            params[f"{y}_slope"] = (a[1],)
        elif kind == "pool":
            net.op.append(op("MaxPool", x, y, kernel=a[0], stride=2, legacy_pad=3))
        elif kind == "fc":
            net.op.append(op("FC", [x, f"{y}_w", f"{y}_b"], y))
            params.update({f"{y}_w": (a[1], a[0]), f"{y}_b": (a[1],)})
        else:
            net.op.append(op("Softmax", x, y))
    net.external_input.extend(["data", *params])
    net.external_output.append(net.op[-1].output[0])
    rng = np.random.default_rng(0)
    init.op.extend(op("GivenTensorFill", [], k, shape=list(s), values=rng.random(int(np.prod(s))).tolist())
                   for k, s in params.items())
    folder.mkdir()
    save_net(net, folder / "predict_net.pb")
    save_net(init, folder / "init_net.pb")
    (folder / "value_info.json").write_text(json.dumps({"data": [1, data]}))
    return folder / "predict_net.pb"


P_NET = [("conv", "data", "conv1", 3, 10, 3), ("pool", "conv1", "pool1", 2), ("conv", "pool1", "conv2", 10, 16, 3),
         ("conv", "conv2", "conv3", 16, 32, 3), ("conv", "conv3", "conv4-1", 32, 2, 1), ("softmax", "conv4-1", "prob1")]
R_NET = [("conv", "data", "conv1", 3, 28, 3), ("pool", "conv1", "pool1", 3), ("conv", "pool1", "conv2", 28, 48, 3),
         ("pool", "conv2", "pool2", 3), ("conv", "pool2", "conv3", 48, 64, 2), ("fc", "conv3", "conv4", 576, 128),
         ("fc", "conv4", "conv5-1", 128, 2), ("softmax", "conv5-1", "prob1")]


@pytest.mark.parametrize("stage, layers, data, prob", [
    ("det1", P_NET, [1, 3, 12, 12], "1×2×1×1 float32"), ("det2", R_NET, [1, 3, 24, 24], "1×2 float32"),
    ("det1_any_size", P_NET, [], None), ("det2_any_size", R_NET, [], None)])
def test_info_shapes_on_mtcnn_stages_explains_instead_of_raising(stage, layers, data, prob, tmp_path, capsys):
    """`info --shapes` on the MTCNN nets printed `IndexError: tuple index out of range`: a stage that
    takes any image size declares its data as `[]` (rank 0) and every window rule indexed dims it lacks.
    Now the shapes that follow are printed and the op that cannot take the input is named in one line."""
    path = _mtcnn(tmp_path / stage, stage, layers, data)
    rc, out, err = _cli(capsys, "info", path, "--shapes")
    assert rc == 0, err
    if prob:
        assert f"prob1@1: {prob}" in out and "shape warning" not in out
    else:
        warnings = [ln for ln in out.splitlines() if ln.startswith("shape warning:")]
        assert len(warnings) == 1 and "op Conv" in warnings[0] and "rank 0" in warnings[0]
