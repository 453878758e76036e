"""engine/ is a one-way stack of packages: every import (module level or inside a function) goes down.

Each package's ``__init__`` docstring states its one job and, on a ``May import:`` line, the packages
below it that it may import; that line is the only table (docs/architecture.md draws it).  Besides
them, anyone may import ``engine.errors`` and the root package; the Caffe2 faces directly under
``engine/`` (``core``, ``workspace``, ``scope``) sit on top of everything.  A package's ``__main__``
program is one of its modules: a command that needs the layers above lives above them.
restructure_engine: skip-file
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "engine"
FOUNDATION = {"engine", "engine.errors"}
MAY_IMPORT = re.compile(r"^May import: (.*?)\.?\s*(?:\n\n|\Z)", re.M | re.S)


def modules(engine: Path) -> dict[str, Path]:
    """Dotted name -> file, for every module of the engine tree at `engine`."""
    out = {}
    for p in engine.rglob("*.py"):
        if "__pycache__" not in p.parts:
            name = ".".join(p.relative_to(engine.parent).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = p
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> list[tuple[str, int]]:
    """(imported engine module, line) for every import in the file, functions included."""
    return [(t, line) for t, line, _ in imports_when(name, path, known)]


def imports_when(name: str, path: Path, known: dict[str, Path]) -> list[tuple[str, int, bool]]:
    """(imported engine module, line, deferred) for every import in the file; `deferred` is True for
    one inside a function body (run when called, not when the module loads)."""
    out = []
    is_pkg = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    in_function = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                   for n in ast.walk(f) if n is not f}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".") if is_pkg else name.split(".")[:-1]
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t.startswith("engine") and t != name:
                out.append((t, node.lineno, id(node) in in_function))
    return out


def layer(module: str) -> str:
    """The package a module belongs to (``engine.runtime.ops.conv`` -> ``engine.runtime``)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def allowed_table(engine: Path) -> dict[str, set[str]]:
    """Package -> the packages its docstring says it may import (read from the ``May import:`` line)."""
    table = {}
    for init in sorted(engine.glob("*/__init__.py")):
        pkg = f"{engine.name}.{init.parent.name}"
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        m = MAY_IMPORT.search(doc)
        assert m, f"{init.relative_to(engine.parent)}: the docstring has no 'May import:' line"
        table[pkg] = {p.strip() for p in m[1].split(",") if p.strip() and p.strip() != "nothing"}
    return table


def check(engine: Path) -> tuple[list[str], nx.DiGraph]:
    """Imports against the stated direction, and the package graph the imports draw."""
    known = modules(engine)
    table = allowed_table(engine)
    graph = nx.DiGraph()
    graph.add_nodes_from(table)
    wrong = []
    for name, path in sorted(known.items()):
        src = layer(name)
        if src not in table:
            continue  # the faces directly under engine/ are the top of the stack
        for target, line in imports(name, path, known):
            dst = layer(target)
            if dst == src or target in FOUNDATION:
                continue
            graph.add_edge(src, dst)
            if dst not in table[src]:
                wrong.append(f"{path.relative_to(engine.parent)}:{line}: {src} imports {target} "
                             f"(its docstring allows {', '.join(sorted(table[src])) or 'nothing'})")
    return wrong, graph


def test_every_import_goes_down_the_stack() -> None:
    wrong, _ = check(ENGINE)
    assert wrong == [], "\n".join(wrong)


def test_no_cycle_between_packages() -> None:
    _, graph = check(ENGINE)
    assert list(nx.simple_cycles(graph)) == []


def test_the_stated_table_itself_is_one_way() -> None:
    table = allowed_table(ENGINE)
    graph = nx.DiGraph([(a, b) for a, bs in table.items() for b in bs])
    assert list(nx.simple_cycles(graph)) == []
    assert {b for bs in table.values() for b in bs} <= set(table), "a 'May import:' names no package"


def test_each_package_states_its_one_job() -> None:
    for init in ENGINE.glob("*/__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        assert len(doc.split("\n")[0]) > 20, f"{init}: the first docstring line says what the package is for"


LAZY_FACES = {"engine.caffe2"}
"""Packages where only a deferred import may close a circle between modules: the Caffe2 faces keep
Caffe2's own module shapes (``core.Plan``, ``core.workspace``, ``workspace.RunPlan(core.ExecutionStep)``),
whose names resolve each other when used.  Everywhere else modules form no circle at all."""


def module_cycles(engine: Path) -> list[list[str]]:
    """Circles of imports between the modules of one package (``engine.runtime.ops.conv`` and
    ``engine.runtime.executor`` are both of ``engine.runtime``), deferred imports included except
    in :data:`LAZY_FACES`."""
    known = modules(engine)
    graph = nx.DiGraph()
    for name, path in sorted(known.items()):
        for target, line, deferred in imports_when(name, path, known):
            if layer(target) == layer(name) and not (deferred and layer(name) in LAZY_FACES):
                graph.add_edge(name, target, line=line)
    return [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]


def test_no_cycle_between_modules_inside_a_package() -> None:
    assert module_cycles(ENGINE) == []


def test_the_module_checker_sees_a_cycle_through_a_function(tmp_path: Path) -> None:
    engine = tmp_path / "engine"
    (engine / "low").mkdir(parents=True)
    (engine / "__init__.py").write_text("")
    (engine / "low" / "__init__.py").write_text('"""A made-up layer for the checker.\n\nMay import: nothing."""\n')
    (engine / "low" / "a.py").write_text("from engine.low import b\n")
    (engine / "low" / "b.py").write_text("def f():\n    from engine.low import a\n")
    assert module_cycles(engine) == [["engine.low.a", "engine.low.b"]]


def test_few_modules_directly_under_engine() -> None:
    flat = sorted(p.name for p in ENGINE.glob("*.py"))
    assert len(flat) <= 8, flat


def test_caffe2_faces_are_the_layered_modules() -> None:
    from engine import core, scope, workspace
    from engine.caffe2 import core as layered_core, workspace as layered_workspace
    from engine.model import scope as layered_scope
    assert (core, workspace, scope) == (layered_core, layered_workspace, layered_scope)


@pytest.mark.parametrize("planted, expected", [
    ("from engine.top import api\n", "engine.low imports engine.top.api"),
    ("def f():\n    import engine.top.api\n", "engine.low imports engine.top.api"),
    ("def f():\n    from ..top import api\n", "engine.low imports engine.top.api"),
])
def test_the_checker_catches_an_upward_import_and_the_cycle(tmp_path: Path, planted: str, expected: str) -> None:
    engine = tmp_path / "engine"
    for pkg, doc in (("low", "The bottom layer of this made-up tree.\n\nMay import: nothing."),
                     ("top", "The top layer of this made-up tree.\n\nMay import: engine.low.")):
        (engine / pkg).mkdir(parents=True)
        (engine / pkg / "__init__.py").write_text(f'"""{doc}"""\n')
    (engine / "__init__.py").write_text("")
    (engine / "top" / "api.py").write_text("from engine.low import mod\n")
    (engine / "low" / "mod.py").write_text(planted)
    wrong, graph = check(engine)
    assert len(wrong) == 1 and expected in wrong[0] and wrong[0].startswith("engine/low/mod.py:")
    assert list(nx.simple_cycles(graph)) != []


ARCH = ROOT / "docs" / "architecture.md"


def test_architecture_doc_names_only_packages_that_exist() -> None:
    text = ARCH.read_text(encoding="utf-8")
    named = set(re.findall(r"\bengine/([a-z_0-9]+(?:/[a-z_0-9]+)*)/", text))
    assert named, "docs/architecture.md names no package"
    missing = sorted(p for p in named if not (ENGINE / p / "__init__.py").is_file())
    assert missing == [], f"docs/architecture.md names packages that do not exist: {missing}"
    layers = set(allowed_table(ENGINE))
    assert {f"engine.{p.split('/')[0]}" for p in named} >= layers, "every package is drawn in the doc"


def test_netviz_imports_our_modules_by_name() -> None:
    """No importlib look-ups of modules in netviz/ (what a view needs, it imports by name).

    ``importlib.metadata`` and ``importlib.util.find_spec`` import nothing (``netviz doctor`` reads
    versions and finds optional parts with them); ``importlib.import_module`` and ``__import__`` do."""
    found = []
    for p in sorted((ROOT / "netviz").rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                bad = [a.name for a in node.names if a.name == "importlib"]
            elif isinstance(node, ast.ImportFrom):
                bad = [a.name for a in node.names if node.module == "importlib" and a.name not in ("metadata", "util")]
            elif isinstance(node, ast.Call):
                f = node.func
                bad = ["import_module"] if ((isinstance(f, ast.Attribute) and f.attr == "import_module")
                                            or (isinstance(f, ast.Name) and f.id == "__import__")) else []
            else:
                bad = []
            found += [f"{p.relative_to(ROOT)}:{node.lineno}" for _ in bad]
    assert found == []
