"""The README's and every `--help`'s examples run as printed.

Command lines come from the README's ``console`` blocks (``$ netviz …``) and from the
``examples:`` part of each subcommand's help.  Those naming a bundled example or a zoo net run
in-process from a scratch folder (outputs land there); placeholders such as ``model.pb`` are
skipped.  Examples printed with an error (``netviz: …`` on the next line) must fail with exit 2,
every other must succeed.  A command reading a file an earlier command of its console block writes
(``-o resnet50.onnx``, then ``netviz diff … resnet50.onnx``) runs after that command, in the same
folder, as a reader following the block would.  The README's Python blocks run as well.
"""
from __future__ import annotations

import importlib
import re
import shlex
from pathlib import Path

import pytest

from netviz.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
ZOO_PREFIX = "../shared/models/caffe2-model-zoo/"
SLOW = ("resnet50/predict_net.pbtxt -o resnet50.svg",)  # a 300-op dot layout: covered by tests/netviz/test_export.py


#: command line → the earlier command lines of its console block that write a file it reads (``-o F``).
WRITERS: dict[str, list[str]] = {}


def _output(line: str) -> str | None:
    """The file a command line writes with ``-o F`` (or ``--output F``), if any."""
    words = shlex.split(line, comments=True)
    return next((words[k + 1] for k, w in enumerate(words[:-1]) if w in ("-o", "--output")), None)


def _readme_commands() -> list[tuple[str, bool]]:
    """(command line, fails) for every ``$ netviz`` line of the README's console blocks; fills WRITERS."""
    out = []
    for block in re.findall(r"```console\n(.*?)```", README, re.S):
        lines = block.splitlines()
        earlier: list[str] = []
        for k, line in enumerate(lines):
            if line.startswith("$ netviz "):
                fails = k + 1 < len(lines) and lines[k + 1].startswith("netviz: ")
                reads = set(shlex.split(line, comments=True)[2:])
                writers = [e for e in earlier if _output(e) in reads]
                if writers:
                    WRITERS.setdefault(line[2:], writers)
                out.append((line[2:], fails))
                if not fails:
                    earlier.append(line[2:])
    return out


def _help_commands() -> list[tuple[str, bool]]:
    """(command line, False) for each line of the ``examples:`` part of every subcommand's help."""
    out = []
    for module, _ in COMMANDS.values():
        doc = importlib.import_module(f"netviz.commands.{module}").__doc__ or ""
        tail = doc.split("examples:", 1)[1] if "examples:" in doc else ""
        out += [(line.strip(), False) for line in tail.splitlines() if line.strip().startswith("netviz ")]
    return out


def _runnable(line: str) -> bool:
    words = shlex.split(line, comments=True)[1:]
    paths = [w for w in words if w.endswith((".pb", ".pbtxt")) and "/" in w]
    # NOTE: `netviz PATH` lines start the TUI: tests/test_cli.py runs those (and every --help line) headless
    return (bool(paths) and words[0] in COMMANDS and paths[0].startswith(("examples/", ZOO_PREFIX))
            and not any(s in line for s in SLOW))


# NOTE: the --help lines are run by tests/test_cli.py (in order, with $NETVIZ_MODEL_ZOO, `> FILE` and the TUI)
CASES = [c for c in dict.fromkeys(_readme_commands()) if _runnable(c[0])]


def _run(line: str, zoo: str) -> int:
    """Run a documented command line in-process (examples/ and zoo paths resolved), in the cwd."""
    words = shlex.split(line, comments=True)[1:]
    words = [str(ROOT / w) if w.startswith("examples/") else
             str(Path(zoo) / w[len(ZOO_PREFIX):]) if w.startswith(ZOO_PREFIX) else w for w in words]
    return main(words)


@pytest.mark.parametrize("line,fails", CASES, ids=[c[0][:70] for c in CASES])
def test_documented_command_runs_as_printed(line, fails, tmp_path, monkeypatch, zoo):
    monkeypatch.chdir(tmp_path)
    for writer in WRITERS.get(line, []):  # the block's earlier command that writes what this one reads
        assert _run(writer, zoo) == 0, f"`{writer}` (run before `{line}`) failed"
        assert Path(_output(writer) or "").exists(), f"`{writer}` did not write {_output(writer)}"
    words = shlex.split(line, comments=True)[1:]
    rc = _run(line, zoo)
    ok = {2} if fails else {0, 1} if words[0] == "lint" else {0}  # lint: 1 = findings that matter
    assert rc in ok, f"`{line}` exited {rc}"


def test_there_are_documented_examples_for_the_training_nets():
    lines = [c[0] for c in CASES + _help_commands()]
    for cmd in ("grad", "check-grad", "export", "run", "info", "lint"):
        assert any(re.match(rf"netviz {cmd} examples/", c) for c in lines), cmd


@pytest.mark.parametrize("k", range(len(re.findall(r"```python\n", README))))
def test_readme_python_block_runs(k, monkeypatch):
    code = re.findall(r"```python\n(.*?)```", README, re.S)[k]
    monkeypatch.chdir(ROOT)
    exec(compile(code, f"README.md python block {k}", "exec"), {"__name__": "readme"})
