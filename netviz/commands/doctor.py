"""Say what netviz runs on: versions of its parts, which optional parts were found (and for each
missing one the command that installs it), and the files and variables it uses (docs/files.md).

`netviz --version --verbose` prints the same.  Exit status 0 when every required part is there,
1 when one is missing (optional parts never fail it).

examples:
  netviz doctor
  netviz --version --verbose
"""
from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

from engine import __version__

__all__ = ["Part", "parts", "files", "report", "add_arguments", "run"]


@dataclass(frozen=True, slots=True)
class Part:
    """One thing netviz uses: its version (None when missing) and how to get it when it is missing."""

    name: str
    version: str | None
    install: str
    required: bool = True


def _module_version(module: str, dist: str | None = None) -> str | None:
    """The installed version of `dist` when `module` can be found by the import system, else None.

    NOTE: the finder, not the metadata alone, decides: a distribution whose module cannot be
    imported here (blocked, another Python's) is missing for netviz."""
    try:
        if importlib.util.find_spec(module) is None:
            return None
    except (ImportError, ValueError):
        return None
    try:
        return importlib.metadata.version(dist or module)
    except importlib.metadata.PackageNotFoundError:
        return "unknown version"


def _cuda_device() -> str | None:
    """The first CUDA device's name as CuPy sees it, or None (no CuPy, no driver, no device)."""
    try:
        import cupy  # noqa: PLC0415

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
        name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # noqa: BLE001 - ImportError, CUDARuntimeError without a driver: no device
        return None


def _caffe2_oracle() -> str | None:
    """The real Caffe2 of a checkout's ``.venv-caffe2`` (torch's version), or None: only a checkout
    has one (``scripts/oracle.sh --venv-only`` makes it)."""
    venv = Path(__file__).resolve().parents[2] / ".venv-caffe2"
    if not (venv / "bin" / "python").exists():
        return None
    found = sorted(venv.glob("lib/python*/site-packages/torch-*.dist-info"))
    return f"torch {found[-1].name.removesuffix('.dist-info').split('-')[1]} at {venv}" if found else None


def _onednn() -> str | None:
    """The conv backend line when oneDNN loads (or is installed but switched off), else None."""
    from engine.runtime import onednn  # noqa: PLC0415

    if onednn.available() or not onednn.ENABLED:
        return onednn.describe()
    return None


def _numba() -> str | None:
    """numba's version when installed (noting ``NETVIZ_JIT=0``), else None; not imported (~0.2 s)."""
    from engine.runtime import jit  # noqa: PLC0415

    found = _module_version("numba")
    return found if found is None or jit.ENABLED else f"{found} (off: NETVIZ_JIT=0)"


def parts() -> list[Part]:
    """Every part netviz uses, required first, each with its version or the command installing it."""
    from netviz import graphviz_support as gv  # noqa: PLC0415

    gpu_cmd = "pip install 'netviz[gpu]' (CUDA 12) or 'netviz[gpu-cuda13]' (CUDA 13); docs/gpu.md"
    cupy = _module_version("cupy", next((d for d in ("cupy-cuda13x", "cupy-cuda12x", "cupy")
                                         if _dist_exists(d)), "cupy"))
    found = [
        Part("python", platform.python_version(), "netviz needs Python 3.11 or newer"),
        Part("textual", _module_version("textual"), "pip install 'textual>=8.2,<9'"),
        Part("numpy", _module_version("numpy"), "pip install numpy"),
        Part("protobuf", _module_version("google.protobuf", "protobuf"), "pip install 'protobuf>=6.33.5,<7'"),
        Part("networkx", _module_version("networkx"), "pip install networkx"),
        Part("pygraphviz", gv.pygraphviz_version(), gv.install_hint(), required=False),
        Part("graphviz dot", gv.dot_version(), gv.install_hint(what="dot"), required=False),
        Part("onnx", _module_version("onnx"), "pip install 'netviz[onnx]'", required=False),
        Part("onnxruntime", _module_version("onnxruntime"), "pip install 'netviz[onnx]'", required=False),
        Part("cupy", cupy, gpu_cmd, required=False),
        Part("oneDNN (fast convs)", _onednn(), "pip install 'netviz[fast]' (Linux x86-64)", required=False),
        Part("numba (compiled kernels)", _numba(), "pip install 'netviz[fast]'", required=False),
    ]
    if cupy is not None:
        found.append(Part("CUDA device", _cuda_device(), "no CUDA device visible to CuPy: check nvidia-smi and "
                          "CUDA_VISIBLE_DEVICES (docs/gpu.md)", required=False))
    found.append(Part("caffe2 (oracle)", _caffe2_oracle(), "from a checkout: scripts/oracle.sh --venv-only "
                      "(Python 3.9 + torch 1.10.2; only tests need it)", required=False))
    return found


def _dist_exists(dist: str) -> bool:
    try:
        importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def files() -> list[tuple[str, str, str]]:
    """(what, path now, the variables that move it) for everything netviz writes (docs/files.md)."""
    from engine.model.modelio import cache_dir  # noqa: PLC0415
    from netviz.errorlog import log_dir  # noqa: PLC0415

    cache = cache_dir()
    return [
        ("cache", str(cache) if cache is not None else "off (NETVIZ_NO_CACHE is set)",
         "NETVIZ_CACHE_DIR, XDG_CACHE_HOME; NETVIZ_NO_CACHE=1 turns it off"),
        ("error logs", str(log_dir()), "NETVIZ_LOG_DIR, XDG_STATE_HOME"),
    ]


#: the NETVIZ_* variables netviz reads (docs/files.md says what each does)
VARIABLES = ("NETVIZ_CACHE_DIR", "NETVIZ_NO_CACHE", "NETVIZ_LOG_DIR", "NETVIZ_THREADS", "NETVIZ_PLAIN_CONV",
             "NETVIZ_ONEDNN", "NETVIZ_CONV_TUNE", "NETVIZ_JIT", "NETVIZ_SCHEMA", "NETVIZ_MODEL_ZOO")


def report() -> tuple[list[str], bool]:
    """The doctor's lines, and whether every required part was found."""
    lines = [f"netviz {__version__} ({Path(__file__).resolve().parents[1]})", f"python: {sys.executable}", ""]
    ok = True
    found = parts()
    width = max(len(p.name) for p in found)
    for required in (True, False):
        lines.append("required:" if required else "optional:")
        for p in (p for p in found if p.required == required):
            if p.version is not None:
                lines.append(f"  {p.name:<{width}}  {p.version}")
            else:
                ok = ok and not p.required
                lines.append(f"  {p.name:<{width}}  missing: {p.install}")
    lines += ["", "files (docs/files.md):"]
    lines += [f"  {what:<10}  {path}  ({how})" for what, path, how in files()]
    lines.append("variables: " + ", ".join(f"{v}={os.environ[v]}" if v in os.environ else v for v in VARIABLES))
    return lines, ok


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The doctor takes no arguments."""


def run(args: argparse.Namespace) -> int:
    """Print :func:`report`; 1 when a required part is missing."""
    lines, ok = report()
    print("\n".join(lines))
    return 0 if ok else 1
