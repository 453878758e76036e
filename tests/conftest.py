"""Shared fixtures: where the Caffe2 model zoo lives, and the list of its nets."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ZOO = Path(os.environ.get("NETVIZ_MODEL_ZOO", ROOT.parent / "shared" / "models" / "caffe2-model-zoo"))


_CACHE_DIR: str | None = None


def pytest_configure(config: pytest.Config) -> None:
    """Point netviz's cache (``engine.model.modelio.cache_dir``: parse cache, ``netviz.cache`` views) at a
    per-session temporary folder, so the suite never writes the user's ``~/.cache/netviz`` and never
    reads entries another run left there; set in ``os.environ`` so subprocesses (CLI tests, the TUI
    probes) inherit it. Tests that exercise the cache itself still monkeypatch their own folder."""
    global _CACHE_DIR
    _CACHE_DIR = tempfile.mkdtemp(prefix="netviz-test-cache-")
    os.environ["NETVIZ_CACHE_DIR"] = _CACHE_DIR


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the session's cache folder."""
    if _CACHE_DIR is not None:
        shutil.rmtree(_CACHE_DIR, ignore_errors=True)


def zoo_nets() -> list[Path]:
    """Every predict net in the zoo (``predict_net.pbtxt`` or ``model.pbtxt``), sorted."""
    return sorted(p for p in ZOO.glob("*/*.pbtxt") if p.name in ("predict_net.pbtxt", "model.pbtxt"))


@pytest.fixture(scope="session")
def zoo() -> Path:
    """The model-zoo folder; a failure under CI=true when it is missing, else a skip."""
    if not ZOO.is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail(f"model zoo not found at {ZOO} (set NETVIZ_MODEL_ZOO)")
        pytest.skip(f"model zoo not found at {ZOO}")
    return ZOO


@pytest.fixture
def fixed_caffe2():
    """netviz's fixes of Caffe2 gradient bugs on (``--fix-caffe2``); the default is Caffe2-exact."""
    from engine.analysis.lint import fix_caffe2
    with fix_caffe2():
        yield


@pytest.fixture
def no_jit():
    """The compiled kernels (engine/runtime/jit.py) off for the test: it runs the NumPy and oneDNN paths that
    they would otherwise take over."""
    from engine.runtime import jit
    old = jit.enable(False)
    yield
    jit.enable(old)


@pytest.fixture
def with_jit():
    """The compiled kernels on for the test whatever ``NETVIZ_JIT`` says (their own tests); no numba: a skip."""
    pytest.importorskip("numba")
    from engine.runtime import jit
    old = jit.enable(True)
    yield
    jit.enable(old)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize any test taking ``zoo_net`` over every zoo predict net."""
    if "zoo_net" in metafunc.fixturenames:
        nets = zoo_nets()
        if not nets and os.environ.get("CI") == "true":
            raise RuntimeError(f"model zoo not found at {ZOO} (set NETVIZ_MODEL_ZOO)")
        metafunc.parametrize("zoo_net", nets, ids=[p.parent.name for p in nets])


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """Print how many tests are xfail (known gaps vs Caffe2, see docs/fidelity.md), grouped by reason."""
    xfailed = terminalreporter.stats.get("xfailed", [])
    xpassed = terminalreporter.stats.get("xpassed", [])
    by_reason: dict[str, list[str]] = {}
    for rep in xfailed:
        reason = str(getattr(rep, "wasxfail", "")).removeprefix("reason: ") or "(no reason)"
        by_reason.setdefault(reason, []).append(rep.nodeid)
    terminalreporter.section(f"xfail: {len(xfailed)} known gaps, {len(xpassed)} now passing (xpass)")
    for reason, ids in sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        terminalreporter.write_line(f"{len(ids):4d}  {reason}")
    for rep in xpassed:
        terminalreporter.write_line(f"XPASS {rep.nodeid} (drop its xfail)")


@pytest.fixture(autouse=True)
def _fresh_default_workspace() -> None:
    """Each test starts in an empty ``default`` workspace, as a fresh Caffe2 process would."""
    from engine.caffe2 import workspace

    workspace.SwitchWorkspace("default", True)
    workspace.ResetWorkspace()
