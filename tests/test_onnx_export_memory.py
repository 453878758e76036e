"""ONNX export of a net with a big weight holds the weight a bounded number of times: a 128 MB init net
exported at 1.32 GB peak RSS (values copied, the initializers copied into the graph, the graph into the
model, and the whole model serialized for the checker)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import json, resource
import numpy as np
from engine.model.modelio import Model
from engine.model.opdef import create_operator as op
from engine.onnx.export import export, prepare_model
from proto import caffe2_pb2

n = 4096  # W: 64 MiB of float32
predict = caffe2_pb2.NetDef(name="big", op=[op("FC", ["X", "W", "b"], "Y")], external_input=["X", "W", "b"],
                            external_output=["Y"])
init = caffe2_pb2.NetDef(name="big_init", op=[op("ConstantFill", [], "W", shape=[n, n], value=0.5),
                                              op("ConstantFill", [], "b", shape=[n], value=0.0)])
x = np.ones((1, n), np.float32)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
src = prepare_model(Model(predict, init), {"X": x}, where="big")
done = export(src, where="big")
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"grew": peak - before, "weight": n * n * 4, "inits": len(done.model.graph.initializer)}))
"""


def test_export_holds_a_big_weight_a_bounded_number_of_times():
    pytest.importorskip("onnx")
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["inits"] == 2
    # the workspace's W, the model's initializer and one tensor being converted: 3; 4 leaves room for the rest
    assert got["grew"] < 4 * got["weight"], f"peak grew {got['grew'] / got['weight']:.1f}x the weight"


def test_save_model_writes_what_onnx_save_writes(tmp_path):
    """save_model streams the initializers; the file reads back as the same model."""
    onnx = pytest.importorskip("onnx")
    from engine.onnx.export import export, prepare, save_model  # noqa: PLC0415

    mlp = ROOT / "examples" / "mlp_forward"
    done = export(prepare(str(mlp / "predict_net.pb"), init=str(mlp / "init_net.pb"), inputs=["data=16,8"]))
    save_model(onnx, done.model, str(tmp_path / "a.onnx"))
    assert onnx.load(str(tmp_path / "a.onnx")) == done.model
    onnx.checker.check_model(str(tmp_path / "a.onnx"), full_check=True)
