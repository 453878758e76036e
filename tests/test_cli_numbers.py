"""`netviz run` says numbers' trouble in its own words (issue #42 items 1 and 16).

Run as a child process: pytest captures warnings in-process, so only a real run shows whether
NumPy's RuntimeWarnings (with their source paths) reach stderr.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

NAN_NET = """name: "nan"
op { input: "X" output: "L" type: "Log" }
op { input: "L" output: "Y" type: "Relu" }
external_input: "X"
external_output: "Y"
"""

RESHAPE_NET = """name: "fc_reshape"
op { input: "X" input: "W" input: "b" output: "Y" type: "FC" }
op { input: "X" output: "Z" output: "old" type: "Reshape" arg { name: "shape" ints: 1 ints: -1 ints: 0 } }
external_input: "X"
external_input: "W"
external_input: "b"
external_output: "Z"
"""


def _run(*argv: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "netviz", "run", *map(str, argv)], capture_output=True, text=True,
                          timeout=300)


def test_nan_warnings_become_one_note(tmp_path: Path):
    """NumPy printed "RuntimeWarning: invalid value encountered in log" with its own file path."""
    (tmp_path / "nan.pbtxt").write_text(NAN_NET)
    np.save(tmp_path / "x.npy", np.array([[-1.0, 0.0, 2.0]], np.float32))
    p = _run(tmp_path / "nan.pbtxt", "--input", f"X={tmp_path / 'x.npy'}")
    assert p.returncode == 0, p.stderr
    assert "RuntimeWarning" not in p.stderr and "site-packages" not in p.stderr
    assert p.stderr == "netviz: note: 2 ops made NaN/Inf, first op 0 Log; --break-on-nan stops there\n"
    assert p.stdout.splitlines()[-1].endswith("stopped: end")


def test_a_reshape_error_is_in_the_ops_terms_and_does_not_blame_made_up_weights(tmp_path: Path):
    """A Reshape of a given input (no made-up weight before it) failed with NumPy's text and blamed
    --random-params."""
    (tmp_path / "net.pbtxt").write_text(RESHAPE_NET)
    p = _run(tmp_path / "net.pbtxt", "--random-params", "--input", "X=3,4")
    assert p.returncode == 2
    err = p.stderr.strip()
    assert len(err.splitlines()) == 1 and "op #1 Reshape" in err and "shape [1, -1, 0]" in err, err
    assert "newaxis" not in err and "--random-params" not in err and "Traceback" not in err


def test_int8_mask_rcnn_with_no_boxes_runs_to_the_end(zoo: Path, tmp_path: Path):
    """An im_info too small for any proposal leaves 0 boxes: Int8ConvRelu on (0, 6, 6, 16) and the
    rest run on the empty batch as in Caffe2 (it stopped with "cannot reshape array of size 0")."""
    np.save(tmp_path / "im_info.npy", np.array([[0.3, 0.2, 1.0]], np.float32))
    p = _run(zoo / "mask_rcnn_2go_int8" / "model.pbtxt", "--random-params", "--input", "data=1,3,192,192",
             "--input", f"im_info={tmp_path / 'im_info.npy'}")
    assert p.returncode == 0, p.stderr
    assert "roi_features[0, 6, 6, 16]" in p.stdout and p.stdout.splitlines()[-1].endswith("stopped: end")


def test_check_grad_keeps_numpy_warnings_off_stderr(tmp_path: Path):
    """A loss through Log of a negative input: NumPy warned on stderr with its paths; the FAIL row says it."""
    (tmp_path / "log.pbtxt").write_text('name: "lognet"\nop { input: "X" output: "L" type: "Log" }\n'
                                        'op { input: "L" output: "S" type: "SumElements" }\n'
                                        'external_input: "X"\nexternal_output: "S"\n')
    np.save(tmp_path / "x.npy", np.array([[-1.0, 0.5, 2.0]], np.float32))
    p = subprocess.run([sys.executable, "-m", "netviz", "check-grad", str(tmp_path / "log.pbtxt"), "--loss", "S",
                        "--input", f"X={tmp_path / 'x.npy'}"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 1 and "FAIL" in p.stdout
    assert "RuntimeWarning" not in p.stderr and "site-packages" not in p.stderr
