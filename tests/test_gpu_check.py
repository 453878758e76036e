"""scripts/gpu_check.sh, the one command for a lent GPU machine (issue 32), dry-run on the stand-in
GPU here so its plumbing is tested in CI; the real-device run is a GPU-marked test that skips
without CuPy and a CUDA device."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.runtime import device as dev

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import gpu_check  # noqa: E402


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory, zoo) -> Path:
    out = tmp_path_factory.mktemp("gpu_check")
    done = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--dry-run", str(out)],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:] + (out / "check.log").read_text()[-2000:]
    return out


def test_dry_run_writes_every_part(dry_run):
    results = json.loads((dry_run / "results.json").read_text())
    assert results["env"]["dry_run"] is True
    nets = {r["net"]: r for r in results["nets"]}
    examples = {f"examples/{p.parent.name}" for p in (ROOT / "examples").glob("*/predict_net.pb")}
    assert examples | {"zoo/resnet50"} <= set(nets)
    for name, row in nets.items():
        assert row["ok"], (name, row)
        assert row["stepping"]["last"] == "end" and row["stepping"]["stops"] > 1, (name, row["stepping"])
    assert results["fallbacks"]["op_types_run"] > 20 and not results["fallbacks"]["errors"]
    rows = {r["name"]: r for r in results["bench"]}
    assert {"ResNet-50 forward batch 1", "ResNet-50 forward+backward batch 1"} <= set(rows)
    assert all(r["netviz_cupy_s"] > 0 for r in rows.values())


def test_dry_run_summary_and_logs(dry_run):
    summary = (dry_run / "summary.md").read_text()
    assert "| zoo/resnet50 | yes |" in summary and "| examples/while_net | yes |" in summary
    kernels = (dry_run / "pytest_kernels.log").read_text()
    assert "ran on the stand-in GPU" in kernels and " passed" in kernels.splitlines()[-1]
    assert sorted(p.name for p in dry_run.iterdir()) == ["check.log", "pytest_gpu.log", "pytest_kernels.log",
                                                         "results.json", "summary.md"]


def test_a_gpu_kernel_that_differs_is_named(monkeypatch):
    """The check can fail: a GPU-side Relu that adds 0.5 makes the MLP's GPU run differ from its
    CPU run, in the device diff and in lockstep stepping."""
    original = gpu_check.executor.call_kernel

    def skewed(b, ws):
        out = original(b, ws)
        return out + 0.5 if b.op.type == "Relu" and not dev.is_cpu_namespace(b.xp) else out

    monkeypatch.setattr(gpu_check.executor, "call_kernel", skewed)
    row = gpu_check.check_net("mlp", ROOT / "examples" / "mlp_forward" / "predict_net.pb", True, 500)
    assert row["ok"] is False and row["diff_ok"] is False and row["stepping"]["ok"] is False
    assert row["max_abs"] >= 0.5 and row["stepping"]["max_abs"] >= 0.5


def test_resnet50_weights_have_the_real_widths(zoo):
    net = gpu_check.load_model(zoo / "resnet50" / "predict_net.pbtxt").predict
    params = gpu_check.resnet50_params(net, 3)
    assert params["gpu_0/conv1_w"].shape == (64, 3, 7, 7)
    assert params["gpu_0/res5_2_branch2c_w"].shape == (2048, 512, 1, 1)
    assert params["gpu_0/pred_w"].shape == (1000, 2048)
    assert all(np.isfinite(v).all() for v in params.values())


@pytest.mark.gpu
@pytest.mark.skipif(not dev.cupy_module(), reason="needs CuPy and a CUDA device (scripts/gpu_check.sh runs it)")
def test_real_gpu_examples_match_cpu(tmp_path):
    assert gpu_check.main([str(tmp_path), "--quick", "--only", "env,nets"]) == 0
