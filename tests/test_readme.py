"""The README is true: every command and Python snippet in it runs, and prints what the README shows.

``console`` blocks hold ``$ command`` lines, each followed by the output the README promises.  The
command runs in a scratch folder laid out like a checkout (``examples/`` and ``../shared/models/...``
are links to the real ones), with ``.venv/bin`` on PATH, as a reader who ran ``source .venv/bin/activate``
would.  Output matching: a line ``…`` stands for any number of lines, ``…`` inside a line for any text, two or more
spaces for any run of spaces (table columns widen with their cells);
an expected output starting with ``netviz:`` means the command fails with exit status 2, otherwise it
must succeed.  ``python`` blocks run whole in a fresh interpreter from the repository root.  The set-up
block (``make demo`` / ``make test``) is what CI itself runs, so it is not run again here; every Make
target the README names must have a recipe.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
BIN = Path(sys.executable).parent


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", README, flags=re.M | re.S)


def _console_blocks() -> list[list[tuple[str, list[str]]]]:
    """Per console block, its (command, expected output lines) in order."""
    out = []
    for block in _blocks("console"):
        cmds = []
        for chunk in re.split(r"^\$ ", block, flags=re.M)[1:]:
            cmd, *expected = chunk.rstrip("\n").split("\n")
            cmds.append((cmd.split("   #")[0].strip(), [line.rstrip() for line in expected if line.strip()]))
        out.append(cmds)
    return out


def _line_matches(pattern: str, line: str) -> bool:
    """``…`` is any text; a run of spaces is any run (table columns widen with their cells)."""
    parts = [r"\s+".join(map(re.escape, re.split(r" {2,}", p))) for p in pattern.split("…")]
    return re.fullmatch(".*?".join(parts), line.rstrip()) is not None


def _matches(expected: list[str], got: list[str]) -> bool:
    """Match `got` lines against `expected` with ``…`` lines as 'any number of lines'."""
    if not expected:
        return True
    head, rest = expected[0], expected[1:]
    if head == "…":
        return any(_matches(rest, got[k:]) for k in range(len(got) + 1))
    return bool(got) and _line_matches(head, got[0]) and _matches(rest, got[1:])


@pytest.fixture
def scratch(tmp_path: Path, zoo: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "examples").symlink_to(ROOT / "examples")
    models = tmp_path / "shared" / "models"
    models.mkdir(parents=True)
    (models / "caffe2-model-zoo").symlink_to(zoo)
    return work


BLOCKS = _console_blocks()


def test_readme_has_commands_and_snippets() -> None:
    assert sum(map(len, BLOCKS)) >= 6 and len(_blocks("python")) >= 2


@pytest.mark.parametrize("block", BLOCKS, ids=[b[0][0][:50] for b in BLOCKS])
def test_readme_commands_print_what_readme_shows(block: list[tuple[str, list[str]]], scratch: Path) -> None:
    """The commands of one block run in order in one folder (a later one may read an earlier one's file)."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", COLUMNS="120")
    for cmd, expected in block:
        run = subprocess.run(["bash", "-c", cmd], cwd=scratch, env=env, capture_output=True, text=True, timeout=600)
        got = [line.rstrip() for line in (run.stdout + run.stderr).splitlines() if line.strip()]
        fails = bool(expected) and expected[0].startswith("netviz:")
        assert run.returncode == (2 if fails else 0), f"{cmd}: exit {run.returncode}\n{run.stdout}{run.stderr}"
        assert _matches(expected, got), (f"{cmd}: printed\n" + "\n".join(got) + "\nREADME shows\n"
                                         + "\n".join(expected))


@pytest.mark.parametrize("snippet", _blocks("python"), ids=lambda s: s.split("\n")[0][:40])
def test_readme_python_snippet_runs(snippet: str) -> None:
    run = subprocess.run([sys.executable, "-c", snippet], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr


def test_every_make_target_named_has_a_recipe() -> None:
    named = set(re.findall(r"\bmake (\w+)", README))
    assert {"demo", "test"} <= named
    for target in sorted(named):
        dry = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True)
        recipe = [line for line in dry.stdout.splitlines() if "setup.sh" not in line]
        assert dry.returncode == 0 and recipe, f"make {target} does nothing: {dry.stdout}{dry.stderr}"
