"""netviz installs as a package and runs outside its checkout (issue #40 item 1).

Builds the sdist and, from it, the wheel (so the sdist is proven whole too) out of a copy of the
packaged files; checks that both hold every file the code reads at run time; installs the wheel
with its ``onnx`` and ``graphviz`` extras into a fresh venv; then, from a folder outside the
checkout (the source tree is not importable there), runs every command on a copy of a bundled
example and the TUI to its first frame.  The README's install commands (``pipx install`` of the
checkout, pip from the checkout, a Git URL and a wheel) run too, each in a venv of its own.

Slow (a venv, pip, ~1-2 min), so ``.ci/run`` runs it as its own step with NETVIZ_INSTALL_TEST=1
and the suite skips it.  pip's own cache keeps the dependencies' downloads from run to run.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGED = ("engine", "netviz", "proto")

pytestmark = [pytest.mark.install,
              pytest.mark.skipif(os.environ.get("NETVIZ_INSTALL_TEST") != "1",
                                 reason="install test: .ci/run's own step (NETVIZ_INSTALL_TEST=1)")]


def sh(*cmd: str | Path, cwd: Path, env: dict | None = None, ok: bool = True,
       timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run `cmd`; with `ok`, fail the test with its output unless it exits 0."""
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if ok:
        assert r.returncode == 0, f"{' '.join(map(str, cmd))}: exit {r.returncode}\n{r.stdout[-3000:]}{r.stderr[-3000:]}"
    return r


def source_files() -> list[str]:
    """The checkout's files a package is built from (tracked or new, not ignored)."""
    out = sh("git", "ls-files", "--cached", "--others", "--exclude-standard", *PACKAGED, "pyproject.toml",
             "README.md", cwd=ROOT).stdout.split("\n")
    return sorted(f for f in out if f and (ROOT / f).is_file() and "__pycache__" not in f)


def runtime_files() -> set[str]:
    """Every file under the packages a wheel must hold: each module and each data file."""
    return {f for f in source_files() if f.startswith(tuple(p + "/" for p in PACKAGED))
            and not f.endswith((".pyc",))}


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("install")


@pytest.fixture(scope="module")
def src(work: Path) -> Path:
    """A copy of the packaged files (a build writes egg-info and build/ beside its source)."""
    dst = work / "src"
    for f in source_files():
        (dst / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, dst / f)
    return dst


@pytest.fixture(scope="module")
def dist(src: Path, work: Path) -> dict[str, Path]:
    """The sdist and the wheel built from it (``python -m build``'s default route)."""
    out = work / "dist"
    sh(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, src, cwd=work)
    return {"sdist": next(out.glob("netviz-*.tar.gz")), "wheel": next(out.glob("netviz-*.whl"))}


@pytest.fixture(scope="module")
def venv(work: Path, dist: dict[str, Path]) -> Path:
    """A fresh venv with the wheel and its onnx and graphviz extras."""
    where = work / "venv"
    sh(sys.executable, "-m", "venv", where, cwd=work)
    sh(where / "bin" / "python", "-m", "pip", "install", "-q", f"{dist['wheel']}[onnx,graphviz]", cwd=work)
    return where


@pytest.fixture(scope="module")
def outside(work: Path) -> Path:
    """A folder outside the checkout with a copy of a bundled example."""
    where = work / "elsewhere"
    shutil.copytree(ROOT / "examples" / "mlp", where / "mlp")
    return where


def test_wheel_and_sdist_hold_every_runtime_file(dist: dict[str, Path]) -> None:
    want = runtime_files()
    assert {"engine/catalogue/ops.json", "engine/catalogue/descriptions.tsv", "engine/catalogue/no_kernel.tsv",
            "engine/catalogue/known_gaps.txt", "netviz/app.tcss", "proto/caffe2.proto"} <= want
    wheel = set(zipfile.ZipFile(dist["wheel"]).namelist())
    assert not want - wheel, f"missing from the wheel: {sorted(want - wheel)}"
    with tarfile.open(dist["sdist"]) as t:
        sdist = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    assert not want - sdist, f"missing from the sdist: {sorted(want - sdist)}"
    assert {"pyproject.toml", "README.md"} <= sdist


def test_the_installed_package_is_not_the_checkout(venv: Path, outside: Path) -> None:
    r = sh(venv / "bin" / "python", "-c", "import engine, netviz; print(engine.__file__); print(netviz.__file__)",
           cwd=outside)
    assert all(str(venv) in line and str(ROOT) not in line for line in r.stdout.split())


#: (command line after `netviz`, a text its output must hold); run in order in one folder
COMMANDS = [
    ("--version", r"^netviz \d+\.\d+"),
    ("info mlp/predict_net.pb", r"net 'mlp_train' \(simple\): 15 ops"),
    ("run mlp/predict_net.pb", r"15 ops in .* stopped: end"),
    ("grad mlp/predict_net.pb --loss loss -o grad.pbtxt", r"fc1_w\s+→\s+fc1_w_grad"),
    ("check-grad mlp/predict_net.pb --loss loss --elements 5", r"passed, 0 failed"),
    ("lint mlp/predict_net.pb", r"0 findings"),
    ("export mlp/predict_net.pb -o mlp.svg", r"wrote mlp.svg"),
    ("export mlp/predict_net.pb -o mlp.onnx", r"wrote mlp.onnx .*onnx.checker: ok"),
    ("diff mlp/predict_net.pb mlp.onnx", r"all equal within tolerance"),
    ("doctor", r"onnxruntime\s+\d"),
]


def test_every_command_runs_outside_the_checkout(venv: Path, outside: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["NETVIZ_CACHE_DIR"] = str(outside / "cache")
    for line, expect in COMMANDS:
        r = sh(venv / "bin" / "netviz", *line.split(), cwd=outside, env=env)
        assert re.search(expect, r.stdout + r.stderr, re.M), f"netviz {line}:\n{r.stdout}{r.stderr}"
    assert (outside / "mlp.svg").read_text().lstrip().startswith(("<?xml", "<svg"))
    by_module = sh(venv / "bin" / "python", "-m", "netviz", "--version", cwd=outside, env=env)
    assert by_module.stdout == sh(venv / "bin" / "netviz", "--version", cwd=outside, env=env).stdout


FIRST_FRAME = """
import asyncio, sys
from netviz.cli import build_parser
from netviz.commands.open import start

async def main():
    app = start(build_parser("open").parse_args(["open", sys.argv[1]]))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        print(type(app.screen).__name__)
        print(app.export_screenshot())
asyncio.run(main())
"""


def test_the_tui_draws_its_first_frame_outside_the_checkout(venv: Path, outside: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["NETVIZ_CACHE_DIR"] = str(outside / "cache")
    r = sh(venv / "bin" / "python", "-c", FIRST_FRAME, "mlp/predict_net.pb", cwd=outside, env=env)
    screen, svg = r.stdout.split("\n", 1)
    assert screen == "MainScreen", r.stdout[-2000:] + r.stderr[-2000:]
    assert "SoftmaxWithLoss" in svg and "mlp_train" in svg  # the op tree and the breadcrumb are drawn


def readme_install_lines() -> list[str]:
    """The command lines of the README's Install block (``sh``, run from a checkout's root)."""
    section = (ROOT / "README.md").read_text().split("\n## Install\n", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("   #")[0].strip() for line in block.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def clone(src: Path) -> Path:
    """The packaged files as a git repository (the README's Git-URL line installs from one)."""
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    for cmd in (("init", "-q"), ("add", "-A"), ("commit", "-qm", "netviz")):
        sh("git", *cmd, cwd=src, env=env)
    return src


@pytest.mark.parametrize("k", range(len(readme_install_lines())))
def test_readme_install_commands(k: int, clone: Path, work: Path, outside: Path) -> None:
    """Each of the README's install lines, as printed, in a venv of its own (pipx: its own home), from
    the checkout's root; then the netviz it installed runs outside the checkout."""
    line = readme_install_lines()[k]
    venv = work / f"readme{k}"
    sh(sys.executable, "-m", "venv", venv, cwd=work)
    env = {key: v for key, v in os.environ.items() if key not in ("PYTHONPATH",)}
    env |= {"PATH": f"{venv / 'bin'}{os.pathsep}{env['PATH']}", "VIRTUAL_ENV": str(venv),
            "PIPX_HOME": str(work / f"pipx{k}"), "PIPX_BIN_DIR": str(work / f"pipx{k}" / "bin")}
    if line.startswith("pipx "):
        sh(venv / "bin" / "python", "-m", "pip", "install", "-q", "pipx", cwd=work, env=env)
    shutil.rmtree(clone / "dist", ignore_errors=True)
    sh("bash", "-c", line, cwd=clone, env=env)
    netviz = (work / f"pipx{k}" / "bin" / "netviz") if line.startswith("pipx ") else venv / "bin" / "netviz"
    r = sh(netviz, "info", "mlp/predict_net.pb", cwd=outside, env=env)
    assert "net 'mlp_train' (simple): 15 ops" in r.stdout
    r = sh(netviz, "export", "mlp/predict_net.pb", "-o", f"readme{k}.onnx", cwd=outside, env=env)
    assert "onnx.checker: ok" in r.stdout  # the [onnx] extra came along
