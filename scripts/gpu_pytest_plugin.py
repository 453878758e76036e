"""pytest plugin for the GPU check: the kernel suites' ``eval_op`` runs each op on the GPU.

Loaded by ``scripts/gpu_check.sh`` (``-p gpu_pytest_plugin`` with scripts/ on PYTHONPATH): a
test that calls ``engine.runtime.workspace.eval_op`` without naming a device gets its array inputs moved
to the GPU, the op tagged CUDA, and its outputs copied back to the host, so the same goldens
(real Caffe2's values) judge the CuPy kernels. With ``NETVIZ_GPU_DRY_RUN=1`` the NumPy-backed
stand-in device plays the GPU (CI tests the plumbing that way). Tests that build workspaces
themselves run as they are.
"""
from __future__ import annotations

import contextlib
import os
from typing import Any

import numpy as np
import pytest

import engine.runtime.workspace as workspace
from engine.runtime import device as dev
from proto import caffe2_pb2

_original = workspace.eval_op
_stack = contextlib.ExitStack()
_ran: dict[str, int] = {}


def eval_op_on_gpu(op_type: str, *inputs: Any, n_out: int = 1, device: str | None = None,
                   device_option: caffe2_pb2.DeviceOption | None = None, **args: Any) -> tuple[Any, ...]:
    """``eval_op`` with the op on CUDA and its numeric inputs on the device; outputs on the host."""
    if device is not None or device_option is not None:  # the test chose a device itself
        return _original(op_type, *inputs, n_out=n_out, device=device, device_option=device_option, **args)
    xp = dev.namespace(dev.CUDA)
    _ran[op_type] = _ran.get(op_type, 0) + 1
    moved = [xp.asarray(x) if isinstance(x, np.ndarray) and x.dtype.kind in "biufc" else x for x in inputs]
    outs = _original(op_type, *moved, n_out=n_out, device_option=caffe2_pb2.DeviceOption(device_type=dev.CUDA),
                     **args)
    return tuple(dev.to_host(o) if hasattr(o, "dtype") else o for o in outs)


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("NETVIZ_GPU_DRY_RUN") == "1":
        _stack.enter_context(dev.use_fake_cuda())
    elif dev.cupy_module() is None:
        raise pytest.UsageError("gpu_pytest_plugin: no CuPy with a GPU (set NETVIZ_GPU_DRY_RUN=1 for the stand-in)")
    workspace.eval_op = eval_op_on_gpu


def pytest_unconfigure(config: pytest.Config) -> None:
    workspace.eval_op = _original
    _stack.close()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """How many ops ran on which device (proof the plugin was active), before pytest's last line."""
    where = "the stand-in GPU" if dev.cupy_module() is None else "CUDA"
    terminalreporter.write_line(f"gpu_pytest_plugin: {sum(_ran.values())} eval_op calls of {len(_ran)} op types "
                                f"ran on {where}")
