"""`--opset` is checked against the installed onnx and ONNX Runtime at export (issue #42 item 20).

`--opset 99` was written and reported "onnx.checker: ok"; `netviz diff` then failed with ONNX
Runtime's raw multi-line text.
"""
from __future__ import annotations

import types
from pathlib import Path

import pytest

from netviz.cli import main

onnx = pytest.importorskip("onnx")

MLP = Path(__file__).resolve().parent.parent / "examples" / "mlp" / "predict_net.pb"


def _export(capsys: pytest.CaptureFixture[str], out: Path, opset: int) -> tuple[int, str]:
    rc = main(["export", str(MLP), "-o", str(out), "--opset", str(opset)])
    return rc, capsys.readouterr().err


def test_an_opset_onnx_does_not_define_is_refused_in_one_line(tmp_path: Path, capsys):
    newest = onnx.defs.onnx_opset_version()
    rc, err = _export(capsys, tmp_path / "m.onnx", 99)
    assert rc == 2 and not (tmp_path / "m.onnx").exists()
    line = err.strip().splitlines()[-1]
    assert line == f"netviz: --opset 99: the installed onnx {onnx.__version__} defines opsets up to {newest} " \
                   f"(netviz writes 13..{newest})"


def test_an_opset_below_netviz_minimum_is_refused(tmp_path: Path, capsys):
    rc, err = _export(capsys, tmp_path / "m.onnx", 12)
    assert rc == 2 and "--opset 12: netviz writes opset 13 or newer" in err


def test_the_default_opset_still_exports(tmp_path: Path, capsys):
    assert main(["export", str(MLP), "-o", str(tmp_path / "m.onnx")]) == 0
    assert (tmp_path / "m.onnx").exists()


def test_an_opset_onnx_runtime_cannot_load_is_refused():
    """An onnx newer than the runtime: the checker takes the opset, ONNX Runtime would not."""
    ort = pytest.importorskip("onnxruntime")
    from engine.onnx.export import OnnxExportError
    from engine.onnx.opset import check_opset
    newer_onnx = types.SimpleNamespace(__version__="99.0", defs=types.SimpleNamespace(onnx_opset_version=lambda: 500))
    with pytest.raises(OnnxExportError) as e:
        check_opset(newer_onnx, 400, 13)
    assert str(e.value) == (f"--opset 400: the installed ONNX Runtime {ort.__version__} cannot load a model of "
                            "this opset")
    check_opset(newer_onnx, 17, 13)  # NOTE: the runtime loads opset 17: no error
