"""Optional parts, present and absent (issue #40 items 3 and 4): `netviz doctor` says what is there
and how to install what is not; without pygraphviz and `dot` everything that needs no layout works,
and what does need one says in one line what to install.

Absence is real, in a subprocess: a ``sitecustomize`` puts a finder first on ``sys.meta_path`` that
refuses the blocked modules (as an uninstalled package would be refused), and PATH holds no ``dot``.
"""
from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

from netviz import graphviz_support

ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "examples" / "mlp" / "predict_net.pb"

BLOCKER = """
import os, sys

class _Blocked:
    names = set(os.environ["NETVIZ_TEST_BLOCK"].split(","))

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _Blocked())
"""


def netviz_without(tmp_path: Path, blocked: str, *args: str, dot: bool = False,
                   code: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``netviz ARGS`` (or python `code`) in a subprocess where the modules in `blocked`
    (comma-separated) cannot be imported and, unless `dot`, PATH has no graphviz program."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER)
    bin_dir = tmp_path / "bin"  # NOTE: an empty PATH entry of our own: no dot, no sfdp
    bin_dir.mkdir(exist_ok=True)
    path = os.environ["PATH"] if dot else str(bin_dir)
    env = dict(os.environ, PYTHONPATH=f"{site}{os.pathsep}{ROOT}", NETVIZ_TEST_BLOCK=blocked, PATH=path,
               NETVIZ_NO_CACHE="1", COLUMNS="120")
    cmd = [sys.executable, "-c", code] if code is not None else [sys.executable, "-m", "netviz", *args]
    return subprocess.run(cmd + (list(args) if code is not None else []), cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def doctor_lines(out: str) -> dict[str, str]:
    """``name → rest`` for each part line of the doctor's report."""
    parts = {}
    for line in out.splitlines():
        if line.startswith("  ") and "  " in line.strip():
            name, rest = line.strip().split("  ", 1)
            parts[name] = rest.strip()
    return parts


def test_doctor_with_the_parts_present(tmp_path: Path) -> None:
    r = netviz_without(tmp_path, "", "doctor", dot=True)
    assert r.returncode == 0, r.stderr
    parts = doctor_lines(r.stdout)
    for name, dist in (("textual", "textual"), ("numpy", "numpy"), ("protobuf", "protobuf"),
                       ("networkx", "networkx"), ("onnx", "onnx"), ("onnxruntime", "onnxruntime")):
        assert parts[name] == importlib.metadata.version(dist), (name, r.stdout)
    assert parts["python"] == ".".join(map(str, sys.version_info[:3]))
    assert parts["pygraphviz"] == graphviz_support.pygraphviz().__version__
    assert parts["graphviz dot"] == graphviz_support.dot_version()
    assert "files (docs/files.md):" in r.stdout and "NETVIZ_CACHE_DIR" in r.stdout
    assert r.stdout.startswith(f"netviz {importlib.metadata.version('netviz')} ")


def test_doctor_with_the_parts_absent_says_how_to_install_each(tmp_path: Path) -> None:
    r = netviz_without(tmp_path, "pygraphviz,onnx,onnxruntime,cupy", "doctor")
    assert r.returncode == 0, r.stdout + r.stderr  # optional parts never fail the doctor
    parts = doctor_lines(r.stdout)
    assert parts["pygraphviz"] == f"missing: {graphviz_support.install_hint()}"
    assert parts["graphviz dot"] == f"missing: {graphviz_support.install_hint(what='dot')}"
    assert parts["onnx"] == parts["onnxruntime"] == "missing: pip install 'netviz[onnx]'"
    assert parts["cupy"].startswith("missing: pip install 'netviz[gpu]' (CUDA 12) or 'netviz[gpu-cuda13]'")
    assert parts["numpy"] == importlib.metadata.version("numpy")
    required = netviz_without(tmp_path, "networkx", "doctor", dot=True)
    assert required.returncode == 1 and doctor_lines(required.stdout)["networkx"] == "missing: pip install networkx"


def test_version_verbose_is_the_doctor(tmp_path: Path) -> None:
    a = netviz_without(tmp_path, "", "--version", "--verbose", dot=True)
    b = netviz_without(tmp_path, "", "doctor", dot=True)
    assert a.returncode == b.returncode == 0 and a.stdout == b.stdout


def test_doctor_lists_the_files_where_xdg_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from netviz.commands.doctor import files

    for var in ("NETVIZ_CACHE_DIR", "NETVIZ_NO_CACHE", "NETVIZ_LOG_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "c"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "s"))
    assert [(w, p) for w, p, _ in files()] == [("cache", str(tmp_path / "c" / "netviz")),
                                               ("error logs", str(tmp_path / "s" / "netviz"))]
    monkeypatch.setenv("NETVIZ_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv("NETVIZ_LOG_DIR", str(tmp_path / "logs"))
    assert [p for _, p, _ in files()] == [str(tmp_path / "mine"), str(tmp_path / "logs")]
    monkeypatch.setenv("NETVIZ_NO_CACHE", "1")
    assert files()[0][1].startswith("off")


# -- no Graphviz ------------------------------------------------------------------------------------

NO_LAYOUT = [
    ("info", str(MLP)),
    ("run", str(MLP)),
    ("grad", str(MLP), "--loss", "loss"),
    ("check-grad", str(MLP), "--loss", "loss", "--elements", "3"),
    ("lint", str(MLP)),
    ("diff", str(MLP), str(ROOT / "examples" / "mlp_forward" / "predict_net.pb")),
    ("export", str(MLP), "-o", "mlp.onnx"),
    ("export", str(MLP), "-o", "mlp.json"),
]


@pytest.mark.parametrize("args", NO_LAYOUT, ids=lambda a: " ".join(a[:1] + a[2:]))
def test_without_graphviz_what_needs_no_layout_works(tmp_path: Path, args: tuple[str, ...]) -> None:
    r = netviz_without(tmp_path, "pygraphviz", *args)
    assert r.returncode in (0, 1), r.stderr  # diff: 1 = the nets differ
    assert "pygraphviz" not in r.stderr and "Traceback" not in r.stderr


def test_without_pygraphviz_export_says_what_to_install(tmp_path: Path) -> None:
    r = netviz_without(tmp_path, "pygraphviz", "export", str(MLP), "-o", "mlp.dot", dot=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("netviz: pygraphviz is not installed") and graphviz_support.install_hint() in r.stderr


def test_without_pygraphviz_svg_export_draws_or_says_what_to_install(tmp_path: Path) -> None:
    """The SVG route needs only `dot` today (netviz places the pieces); should it need pygraphviz
    again, it must say so in one line, never fail otherwise."""
    r = netviz_without(tmp_path, "pygraphviz", "export", str(MLP), "-o", "mlp.svg", dot=True)
    if r.returncode == 0:
        assert (tmp_path / "mlp.svg").read_text().lstrip().startswith(("<?xml", "<svg")), r.stderr
    else:
        assert r.returncode == 2 and r.stderr.splitlines()[-1].startswith("netviz: pygraphviz is not installed")
    assert "Traceback" not in r.stderr


def test_without_dot_export_says_what_to_install(tmp_path: Path) -> None:
    r = netviz_without(tmp_path, "", "export", str(MLP), "-o", "mlp.svg")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "graphviz program 'dot' not found on PATH" in r.stderr
    assert graphviz_support.install_hint(what="dot") in r.stderr and not (tmp_path / "mlp.svg").exists()


def test_install_hints_per_os(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    release = tmp_path / "os-release"
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    monkeypatch.setattr(graphviz_support.platform, "system", lambda: "Linux")
    for text, family, command in [('ID=ubuntu\nID_LIKE=debian\n', "debian", "sudo apt install graphviz"),
                                  ('ID="fedora"\n', "fedora", "sudo dnf install graphviz graphviz-devel"),
                                  ('ID="rocky"\nID_LIKE="rhel centos fedora"\n', "fedora", "sudo dnf"),
                                  ("ID=arch\n", None, "Debian/Ubuntu: sudo apt")]:
        release.write_text(text)
        assert graphviz_support.os_family(release) == family
        assert graphviz_support.install_hint(family or "other").startswith(command)
    assert "conda-forge: conda install -c conda-forge graphviz pygraphviz" in graphviz_support.install_hint("?")
    monkeypatch.setattr(graphviz_support.platform, "system", lambda: "Darwin")
    assert graphviz_support.os_family(release) == "macos"
    assert graphviz_support.install_hint("macos").startswith("brew install graphviz && pip install")
    monkeypatch.setenv("CONDA_PREFIX", str(tmp_path))
    assert graphviz_support.os_family(release) == "conda"


TUI = """
import asyncio, sys
from netviz.cli import build_parser
from netviz.commands.open import start

async def main():
    app = start(build_parser("open").parse_args(["open", sys.argv[1]]))
    notes = []
    notify = app.notify
    app.notify = lambda message, **kw: (notes.append(str(message)), notify(message, **kw))[1]
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(200):  # the canvas lays out in a worker: its notice comes when that fails
            await pilot.pause(0.05)
            if notes:
                break
        before = app.session.pc
        await pilot.press("n")
        await pilot.pause()
        after = app.session.pc
        await pilot.press("n")
        await pilot.pause()
        print("notes:", notes)
        print("stepped:", before, "->", after, "->", app.session.pc)
        print("pygraphviz loaded:", "pygraphviz" in sys.modules)
asyncio.run(main())
"""


def test_without_graphviz_the_tui_steps_and_the_canvas_says_what_to_install(tmp_path: Path) -> None:
    r = netviz_without(tmp_path, "pygraphviz", str(ROOT / "examples" / "mlp_forward" / "predict_net.pb"), code=TUI)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = dict(line.split(": ", 1) for line in r.stdout.splitlines() if ": " in line)
    assert "graphviz program 'dot' not found on PATH" in lines["notes"], r.stdout
    before, after, last = lines["stepped"].split(" -> ")
    assert before != after != last, r.stdout  # the debugger steps without a drawing
    assert lines["pygraphviz loaded"] == "False"


def test_doctor_names_the_conv_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """oneDNN (the `fast` extra) is an optional part: its backend line when it loads, 'off' when switched off,
    the install line when absent."""
    from engine.runtime import onednn  # noqa: PLC0415
    from netviz.commands import doctor  # noqa: PLC0415

    def shown() -> str | None:
        return next(p for p in doctor.parts() if p.name == "oneDNN (fast convs)").version

    if onednn.lib() is not None:
        assert shown() == onednn.describe() and shown().startswith("oneDNN 3.")
    monkeypatch.setattr(onednn, "ENABLED", False)
    assert shown() == "NumPy/OpenBLAS convs (NETVIZ_ONEDNN=0)"
    monkeypatch.setattr(onednn, "ENABLED", True)
    monkeypatch.setattr(onednn, "lib", lambda: None)
    assert shown() is None
    lines, ok = doctor.report()
    assert ok and any("oneDNN (fast convs)" in line and "pip install 'netviz[fast]'" in line for line in lines)
