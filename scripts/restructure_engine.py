"""Move engine/'s flat modules into layer packages and rewrite every reference to them (issue 33).

Re-runnable and idempotent: a module still at its old path is ``git mv``-ed to its new one, every
reference to an old name (``import`` statements, ``from engine import a, b``, dotted strings such as
monkeypatch targets, ``python -m`` lines, ``engine/x.py`` paths in docs) is rewritten, and the
Caffe2 faces (``engine/core.py``, ``engine/workspace.py``, ``engine/scope.py``) are written where
Caffe2 scripts expect them.  A second run finds nothing to move and nothing to rewrite.

Usage: ``python scripts/restructure_engine.py [--root DIR] [--dry-run]``; prints what it changed.
"""
from __future__ import annotations

import argparse
import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

#: old module (or package) -> new module (or package); the one table of the move.
MOVES: dict[str, str] = {
    # model: what a net is made of
    "engine.opdef": "engine.model.opdef",
    "engine.optypes": "engine.model.optypes",
    "engine.scope": "engine.model.scope",
    "engine.ssa": "engine.model.ssa",
    "engine.modelio": "engine.model.modelio",
    # runtime: the op tables, the op families and what runs them
    "engine.registry": "engine.catalogue.registry",
    "engine.device": "engine.runtime.device",
    "engine.parallel": "engine.runtime.parallel",
    "engine.blocking": "engine.runtime.blocking",
    "engine.blobio": "engine.runtime.blobio",
    "engine.plans": "engine.runtime.plans",
    "engine.shapes": "engine.runtime.shapes",
    "engine.grad_makers": "engine.runtime.grad_makers",
    "engine.control_ops_grad": "engine.runtime.control_ops_grad",
    "engine.executor": "engine.runtime.executor",
    "engine.plandef": "engine.runtime.plandef",
    "engine.plan_view": "engine.runtime.plan_view",
    "engine.params": "engine.runtime.params",
    "engine.ops": "engine.runtime.ops",
    "engine.catalogue.markers": "engine.runtime.markers",
    # autodiff: backward passes over whole nets
    "engine.gradient_ir": "engine.autodiff.gradient_ir",
    "engine.training": "engine.autodiff.training",
    # analysis: reading and rewriting nets without running them
    "engine.lint": "engine.analysis.lint",
    "engine.cost": "engine.analysis.cost",
    "engine.memonger": "engine.analysis.memonger",
    "engine.nomnigraph": "engine.analysis.nomnigraph",
    "engine.transforms": "engine.analysis.transforms",
    "engine.summary": "engine.analysis.summary",
    # onnx: export and its reference run
    "engine.onnx_export": "engine.onnx.export",
    "engine.onnx_coverage": "engine.onnx.coverage",
    # caffe2: the drop-in caffe2.python API
    "engine.core": "engine.caffe2.core",
    "engine.workspace": "engine.caffe2.workspace",
    "engine.capi": "engine.caffe2.capi",
    "engine.control": "engine.caffe2.control",
    "engine.recurrent": "engine.caffe2.recurrent",
    "engine.rnn_cell": "engine.caffe2.rnn_cell",
    "engine.plan_builder": "engine.caffe2.plan_builder",
    "engine.device_copies": "engine.caffe2.device_copies",
    "engine.gradient_checker": "engine.caffe2.gradient_checker",
    "engine.catalogue.coverage": "engine.caffe2.coverage",
}

#: names Caffe2 scripts import from ``engine`` (``from engine import core, workspace``): kept as faces.
FACES: dict[str, str] = {"engine.core": "engine.caffe2.core", "engine.workspace": "engine.caffe2.workspace",
                         "engine.scope": "engine.model.scope"}
FACE_MARK = "# face written by scripts/restructure_engine.py"
#: a file holding this line is written for the new layout and never rewritten (docs/architecture.md).
SKIP_MARK = "restructure_engine: skip-file"
FACE_TEXT = '''"""``caffe2.python.{short}`` for Caffe2 scripts (``from engine import {short}``): the same module as
:mod:`{new}`, where the code lives."""
{mark}
import sys

from {new_parent} import {short} as _module

sys.modules[__name__] = _module
'''

#: file-relative paths a move changes (file, old text, new text); applied once, as the rest.
FIXUPS: list[tuple[str, str, str]] = [
    ("engine/onnx/coverage.py", "ROOT = Path(__file__).resolve().parents[1]",
     "ROOT = Path(__file__).resolve().parents[2]"),
    ("engine/caffe2/coverage.py", 'GAPS = Path(__file__).with_name("known_gaps.txt")',
     'GAPS = Path(__file__).resolve().parents[1] / "catalogue" / "known_gaps.txt"'),
    # attribute look-ups on the package that now holds the module
    ("tests/conformance/test_harness.py", "__import__('engine.caffe2.capi').capi.Workspace",
     "__import__('engine.caffe2.capi').caffe2.capi.Workspace"),
    ("tests/engine/test_core.py", '    import engine\n    monkeypatch.setattr(engine, "gradient_ir", mod, raising=False)',
     '    import engine.autodiff\n    monkeypatch.setattr(engine.autodiff, "gradient_ir", mod, raising=False)'),
]

#: where references are rewritten (folders are walked; files are taken as they are).
SCOPE = ["engine", "netviz", "tests", "scripts", "benchmarks", "examples", "docs", "Makefile", "pyproject.toml",
         "README.md", ".ci"]
TEXT_SUFFIXES = {".py", ".md", ".txt", ".toml", ".cfg", ".ini", ".sh", ".yml", ".yaml", ".rst", ".tsv", ""}
SKIP_PARTS = {"__pycache__", "__snapshots__", ".git"}
MAX_BYTES = 1_000_000  # ops.json and friends hold no module names

_OLD = sorted(MOVES, key=len, reverse=True)
_DOTTED = re.compile(r"(?<![\w.])(" + "|".join(re.escape(o) for o in _OLD) + r")(?!\w)")
_PATHS = {o.replace(".", "/"): n.replace(".", "/") for o, n in MOVES.items()}
_SLASHED = re.compile(r"(?<![\w./-])(" + "|".join(re.escape(o) for o in sorted(_PATHS, key=len, reverse=True))
                      + r")(?=\.py(?!\w)|/|(?![\w.-]))")
_FROM_LINE = re.compile(r"^(?P<ind>[ \t]*(?:>>> |\.\.\. )?)from (?P<mod>engine(?:\.\w+)*) import "
                        r"(?P<names>[\w ,]+?)(?P<tail>[ \t]*(?:#.*)?)$", re.M)


def new_name(old: str) -> str:
    """The module's name after the move (``engine.ops.conv`` -> ``engine.runtime.ops.conv``)."""
    for o in _OLD:
        if old == o or old.startswith(o + "."):
            return MOVES[o] + old[len(o):]
    return old


def _split_from(mod: str, names: list[tuple[str, str | None]]) -> list[tuple[str, list[str]]] | None:
    """``from mod import names`` as one statement per source module, or None when nothing moves."""
    if new_name(mod) != mod:
        return None  # the dotted rewrite renames the module itself
    groups: dict[str, list[str]] = {}
    moved = False
    for name, alias in names:
        target = new_name(f"{mod}.{name}")
        src = mod
        if target != f"{mod}.{name}":
            src, moved = target.rpartition(".")[0], True
            if target.rpartition(".")[2] != name and not alias:
                alias = name  # ``from engine import onnx_export`` keeps its local name
            name = target.rpartition(".")[2]
        groups.setdefault(src, []).append(name + (f" as {alias}" if alias else ""))
    return list(groups.items()) if moved else None


def _render(indent: str, groups: list[tuple[str, list[str]]], tail: str = "") -> str:
    lines = [f"{indent}from {m} import {', '.join(ns)}" for m, ns in groups]
    lines[0] += tail
    return "\n".join(lines)


def rewrite_python_imports(text: str, module: str | None) -> str:
    """Rewrite ``from engine import moved`` (and relative imports inside engine/) via the ast."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    edits: list[tuple[int, int, str]] = []
    lines = text.splitlines(keepends=True)
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        mod = node.module or ""
        if node.level:
            if module is None:
                continue
            base = module.split(".")[: len(module.split(".")) - node.level]
            mod = ".".join(base + ([mod] if mod else []))
            if not mod.startswith("engine"):
                continue
            groups = _split_from(mod, [(a.name, a.asname) for a in node.names])
            if groups is None and new_name(mod) == mod:
                continue
            groups = groups or [(new_name(mod), [a.name + (f" as {a.asname}" if a.asname else "")
                                                 for a in node.names])]
        elif mod.startswith("engine"):
            groups = _split_from(mod, [(a.name, a.asname) for a in node.names])
            if groups is None:
                continue
        else:
            continue
        first = lines[node.lineno - 1]
        indent = first[: len(first) - len(first.lstrip())]
        last = lines[node.end_lineno - 1]
        tail = last[node.end_col_offset:].rstrip("\n")
        edits.append((node.lineno, node.end_lineno, _render(indent, groups, tail) + "\n"))
    for start, end, new in sorted(edits, reverse=True):
        lines[start - 1:end] = [new]
    return "".join(lines)


def rewrite_text(text: str, module: str | None = None, python: bool = False) -> str:
    """Every reference to an old module name or path in `text`, rewritten."""
    if python:
        text = rewrite_python_imports(text, module)

    def from_line(m: re.Match) -> str:
        names = [(n.strip().split(" as ")[0], (n.split(" as ")[1].strip() if " as " in n else None))
                 for n in m["names"].split(",") if n.strip()]
        groups = _split_from(m["mod"], names)
        return m[0] if groups is None else _render(m["ind"], groups, m["tail"])
    text = _FROM_LINE.sub(from_line, text)  # doctest lines and docs, which the ast does not see
    text = _DOTTED.sub(lambda m: MOVES[m[1]], text)
    return _SLASHED.sub(lambda m: _PATHS[m[1]], text)


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout


def _is_face(path: Path) -> bool:
    return path.is_file() and FACE_MARK in path.read_text(encoding="utf-8")


def dirty_files(root: Path) -> set[str]:
    """Tracked files with uncommitted changes: someone's work in progress, which this script leaves alone."""
    out = _git(root, "status", "--porcelain", "--untracked-files=no")
    return {line[3:].split(" -> ")[-1] for line in out.splitlines() if line.strip()}


def move_files(root: Path, dry: bool, dirty: set[str] = frozenset()) -> dict[Path, str]:
    """``git mv`` what is still at an old path; returns new path -> old module (for relative imports)."""
    tracked = set(_git(root, "ls-files", "engine").split("\n"))
    untracked = set(_git(root, "ls-files", "--others", "--exclude-standard", "engine").split("\n")) - {""}
    moved: dict[Path, str] = {}
    for old, new in MOVES.items():
        old_p, new_p = old.replace(".", "/"), new.replace(".", "/")
        pairs = []
        if (root / old_p).is_dir():
            pairs = [(f, new_p + f[len(old_p):]) for f in sorted(tracked | untracked) if f.startswith(old_p + "/")]
        elif (root / f"{old_p}.py").is_file() and not _is_face(root / f"{old_p}.py"):
            pairs = [(f"{old_p}.py", f"{new_p}.py")]
        for src, dst in pairs:
            if src in untracked or src in dirty:
                print(f"left alone (not committed, someone's work in progress): {src} -> move it to {dst}")
                continue
            if (root / dst).exists():
                print(f"CONFLICT: both {src} and {dst} exist; merge them by hand")
                continue
            print(f"git mv {src} {dst}")
            if not dry:
                (root / dst).parent.mkdir(parents=True, exist_ok=True)
                _git(root, "mv", src, dst)
            mod = src[:-3].replace("/", ".")
            moved[root / dst] = mod[: -len(".__init__")] if mod.endswith(".__init__") else mod
        if (root / old_p).is_dir() and not dry and not [f for f in (root / old_p).rglob("*")
                                                         if f.is_file() and "__pycache__" not in f.parts]:
            shutil.rmtree(root / old_p)  # only bytecode left: Python would import it as an empty namespace package
    return moved


def ensure_packages(root: Path, dry: bool) -> None:
    """Every new package folder has an ``__init__.py`` (the real docstrings are written by hand)."""
    for new in MOVES.values():
        parts = new.split(".")
        for i in range(2, len(parts)):
            init = root.joinpath(*parts[:i], "__init__.py")
            if root.joinpath(*parts[:i]).is_dir() and not init.exists():
                print(f"create {init.relative_to(root)}")
                if not dry:
                    init.write_text(f'"""{".".join(parts[:i])}: see docs/architecture.md."""\n', encoding="utf-8")
                    _git(root, "add", str(init.relative_to(root)))


def write_faces(root: Path, dry: bool) -> None:
    for old, new in FACES.items():
        path = root / (old.replace(".", "/") + ".py")
        parent, _, short = new.rpartition(".")
        text = FACE_TEXT.format(short=short, new=new, new_parent=parent, mark=FACE_MARK)
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        if path.exists() and not _is_face(path):
            print(f"CONFLICT: {path.relative_to(root)} is a module again; merge it into {new} by hand")
            continue
        print(f"face {path.relative_to(root)} -> {new}")
        if not dry:
            path.write_text(text, encoding="utf-8")
            _git(root, "add", str(path.relative_to(root)))


def _files(root: Path) -> list[Path]:
    out = []
    for item in SCOPE:
        p = root / item
        for f in ([p] if p.is_file() else sorted(p.rglob("*")) if p.is_dir() else []):
            if (f.is_file() and f.suffix in TEXT_SUFFIXES and not SKIP_PARTS & set(f.parts)
                    and f.stat().st_size < MAX_BYTES and f.resolve() != Path(__file__).resolve()):
                out.append(f)
    return out


def rewrite_all(root: Path, moved: dict[Path, str], dry: bool, dirty: set[str] = frozenset()) -> list[Path]:
    changed = []
    for f in _files(root):
        if f.relative_to(root).as_posix() in dirty:
            print(f"left alone (uncommitted changes): {f.relative_to(root)}")
            continue
        try:
            text = f.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if FACE_MARK in text or SKIP_MARK in text:
            continue
        module = None
        rel = f.relative_to(root)
        if f.suffix == ".py" and rel.parts[0] == "engine":
            module = moved.get(f) or ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
            if f.name == "__init__.py":
                module += ".__init__"  # relative imports in a package resolve against the package itself
        new = rewrite_text(text, module, python=f.suffix == ".py")
        if new != text:
            changed.append(rel)
            if not dry:
                f.write_text(new, encoding="utf-8")
    return changed


def apply_fixups(root: Path, dry: bool) -> None:
    for rel, old, new in FIXUPS:
        path = root / rel
        if path.is_file() and old in (text := path.read_text(encoding="utf-8")):
            print(f"fixup {rel}: {new}")
            if not dry:
                path.write_text(text.replace(old, new), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--dry-run", action="store_true", help="say what would change, change nothing")
    args = ap.parse_args(argv)
    root = args.root.resolve()
    dirty = dirty_files(root)
    moved = move_files(root, args.dry_run, dirty)
    ensure_packages(root, args.dry_run)
    write_faces(root, args.dry_run)
    changed = rewrite_all(root, moved, args.dry_run, dirty)
    apply_fixups(root, args.dry_run)
    for rel in changed:
        print(f"rewrote {rel}")
    print(f"{len(moved)} files moved, {len(changed)} files rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
