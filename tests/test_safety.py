"""Safety: nothing a user loads can run code, and netviz writes only where it is told to.

The source scan walks the AST of every module in engine/, netviz/ and proto/ (comments and
strings cannot fool it): no pickle/marshal/shelve loading, no eval/exec/compile builtins,
every ``np.load`` passes ``allow_pickle=False`` (so a crafted .npy cannot unpickle), every
``np.save`` too.  The one exception is :data:`ALLOWED`, stated once with its reason.  The CLI tests check that export and grad refuse to overwrite without --force
and leave no other file behind.
"""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from engine.debugger.feeds import load_npy  # noqa: F401  (imported to fail loudly if renamed)
from engine.model.modelio import save_net
from netviz.cli import main
from tests.engine.test_debugger import forward_model

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(p for d in ("engine", "netviz", "proto") for p in (ROOT / d).rglob("*.py"))
MLP = ROOT / "examples" / "mlp" / "predict_net.pb"

UNSAFE_MODULES = {"pickle", "cPickle", "_pickle", "dill", "marshal", "shelve", "joblib", "cloudpickle"}
UNSAFE_BUILTINS = {"eval", "exec", "compile", "__import__"}
NUMPY = {"np", "numpy"}

#: file → (the unsafe calls it may make, why).  Nothing else is exempt; a stale entry fails too.
ALLOWED: dict[str, tuple[frozenset[str], str]] = {
    "engine/debugger/repl.py": (frozenset({"compile(…)", "eval(…)"}),
                                "':' at a stop evaluates the expression the user types over the blobs (pudb/tfdbg "
                                "style): the user's own input, with only engine.debugger.repl.BUILTINS as builtins"),
}


def _call_name(node: ast.Call) -> tuple[str | None, str]:
    """(``module`` or None, function) of a call like ``np.load(...)`` or ``eval(...)``."""
    f = node.func
    if isinstance(f, ast.Name):
        return None, f.id
    if isinstance(f, ast.Attribute):
        base = f.value.id if isinstance(f.value, ast.Name) else None
        return base, f.attr
    return None, ""


def _allow_pickle_false(node: ast.Call) -> bool:
    return any(k.arg == "allow_pickle" and isinstance(k.value, ast.Constant) and k.value.value is False
               for k in node.keywords)


def unsafe_uses(source: str, filename: str = "<src>") -> list[str]:
    """Every unsafe import or call in `source`, as ``file:line: what``."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        where = f"{filename}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            found += [f"{where}: import {a.name}" for a in node.names if a.name.split(".")[0] in UNSAFE_MODULES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in UNSAFE_MODULES:
            found.append(f"{where}: from {node.module} import …")
        elif isinstance(node, ast.Call):
            base, name = _call_name(node)
            if base is None and name in UNSAFE_BUILTINS:
                found.append(f"{where}: {name}(…)")
            elif base in UNSAFE_MODULES and name in {"load", "loads", "Unpickler", "open"}:
                found.append(f"{where}: {base}.{name}(…)")
            elif base == "builtins" and name in UNSAFE_BUILTINS:
                found.append(f"{where}: builtins.{name}(…)")
            elif base in NUMPY and name in {"load", "save"} and not _allow_pickle_false(node):
                found.append(f"{where}: {base}.{name}(…) without allow_pickle=False")
    return found


def test_the_scanner_finds_what_it_looks_for() -> None:
    bad = ("import pickle\nfrom marshal import loads\nx = eval('1')\nexec('x')\nnp.load(p)\n"
           "numpy.load(p, allow_pickle=True)\npickle.loads(b'')\ncompile('1', 'f', 'eval')\nnp.save(p, a)\n")
    assert len(unsafe_uses(bad)) == 9
    ok = "np.load(p, allow_pickle=False)\nast.literal_eval('1')\nre.compile('x')\nself.eval()\n# eval(x)\ns = 'exec'\n"
    assert unsafe_uses(ok) == []


def test_sources_are_scanned() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in SOURCES}
    assert {"engine/runtime/executor.py", "netviz/cli.py", "engine/debugger/feeds.py", "netviz/session.py"} <= names


def _allowed(use: str) -> bool:
    """Whether ``file:line: what`` is one of :data:`ALLOWED`."""
    file, _, what = use.partition(":")
    return what.partition(": ")[2] in ALLOWED.get(file, (frozenset(), ""))[0]


def test_no_pickle_eval_or_exec_and_np_load_never_unpickles() -> None:
    found = [u for p in SOURCES for u in unsafe_uses(p.read_text(encoding="utf-8"), p.relative_to(ROOT).as_posix())]
    assert [u for u in found if not _allowed(u)] == [], "\n".join(u for u in found if not _allowed(u))
    used = {(u.partition(":")[0], u.partition(": ")[2]) for u in found}
    stale = sorted((f, c) for f, (calls, _) in ALLOWED.items() for c in calls if (f, c) not in used)
    assert stale == [], f"ALLOWED names calls that no longer exist: {stale}"


def test_each_allowed_call_says_why_on_its_line() -> None:
    """The pre-stop hook greps for ``eval(`` without ``noqa``: every allowed line carries the reason."""
    for file, (calls, _) in ALLOWED.items():
        lines = (ROOT / file).read_text(encoding="utf-8").splitlines()
        for use in unsafe_uses("\n".join(lines), file):
            assert "# noqa: S307 - " in lines[int(use.split(":")[1]) - 1], use


def test_the_repl_sees_numpy_and_the_blobs_but_no_open_or_import() -> None:
    from types import SimpleNamespace  # noqa: PLC0415

    from engine.debugger.repl import EvalError, evaluate  # noqa: PLC0415
    stop = SimpleNamespace(frames=[SimpleNamespace(ws=SimpleNamespace(values={"x": np.arange(4.0)}))])
    assert evaluate(stop, "float(np.abs(x).max()) + len(x) + sum([1, 2])") == 10.0
    assert evaluate(stop, "np.percentile(x, 50) + x.std() + np.linalg.norm(x)") > 5  # NumPy's lazy imports work
    for expr in ("open('/etc/passwd')", "exec('1')", "getattr(x, 'shape')", "globals()"):
        with pytest.raises(EvalError, match="is not defined"):
            evaluate(stop, expr)
    with pytest.raises(EvalError, match="ImportError: no imports"):
        evaluate(stop, "__import__('os')")


def test_a_pickled_npy_input_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    evil = tmp_path / "data.npy"
    np.save(evil, np.array([{"x": 1}], dtype=object), allow_pickle=True)
    assert main(["run", str(MLP), "--input", f"data={evil}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and str(evil) in err


# ---- writes go only where the user said ------------------------------------------------------

def _listing(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("suffix", ["dot", "json"])
def test_export_writes_only_the_named_file_and_refuses_to_overwrite(
        tmp_path: Path, suffix: str, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / f"net.{suffix}"
    assert main(["export", str(MLP), "-o", str(out)]) == 0
    assert set(_listing(tmp_path)) == {out.name}  # no temp or side files left
    out.write_text("the user's file")
    assert main(["export", str(MLP), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("already exists; pass --force to overwrite") and len(err.splitlines()) == 1
    assert _listing(tmp_path) == {out.name: b"the user's file"}
    assert main(["export", str(MLP), "-o", str(out), "--force"]) == 0
    assert set(_listing(tmp_path)) == {out.name} and out.read_text() != "the user's file"


def test_export_to_a_missing_folder_or_a_directory_writes_nothing(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(MLP), "-o", str(tmp_path / "no" / "such" / "net.dot")]) == 2
    assert main(["export", str(MLP), "-o", str(tmp_path), "--json"]) == 2
    assert _listing(tmp_path) == {} and not (tmp_path / "no").exists()
    capsys.readouterr()


def test_grad_output_refuses_to_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fwd = str(save_net(forward_model().predict, tmp_path / "fwd.pb"))
    out = tmp_path / "with_grad.pbtxt"
    out.write_text("keep")
    assert main(["grad", fwd, "--loss", "loss", "-o", str(out)]) == 2
    assert out.read_text() == "keep" and "--force" in capsys.readouterr().err
    assert main(["grad", fwd, "--loss", "loss", "-o", str(out), "--force"]) == 0
    assert "FCGradient" in out.read_text()


def test_run_dump_writes_only_inside_the_named_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dump = tmp_path / "dump"
    assert main(["run", str(MLP), "--dump", str(dump)]) == 0
    assert {p.parent for p in tmp_path.rglob("*") if p.is_file()} == {dump}
    capsys.readouterr()


# ---- docs/errors.md lists every error class ----------------------------------------------------

def _error_classes() -> set[str]:
    """Every NetvizError subclass defined in engine/ and netviz/ (all modules imported)."""
    import importlib  # noqa: PLC0415

    from engine.errors import NetvizError  # noqa: PLC0415
    for p in SOURCES:
        mod = p.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
        if not mod.startswith("proto") and not mod.endswith("__main__"):
            importlib.import_module(mod.removesuffix(".__init__"))
    found, todo = set(), [NetvizError]
    while todo:
        c = todo.pop()
        if c.__module__.split(".")[0] in {"engine", "netviz"}:
            found.add(c.__name__)
        todo += c.__subclasses__()
    return found


def test_every_error_class_is_in_the_catalogue() -> None:
    doc = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    classes = _error_classes()
    assert {"NetvizError", "ExecutionError", "FeedError", "ExportError", "LayoutTimeout"} <= classes
    missing = sorted(c for c in classes if f"### {c}" not in doc and c != "NetvizError")
    assert missing == [], f"docs/errors.md has no section for {missing}"
    for code in ("| 0 ", "| 1 ", "| 2 ", "| 130 "):
        assert code in doc
