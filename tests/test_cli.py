"""The `netviz` CLI skeleton: info on real nets, --version, one-line errors with exit 2."""
from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from engine.model.modelio import load_net
from netviz.cli import main
from tests.engine.test_modelio import _bad_inputs


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "netviz.cli", *args], capture_output=True, text=True)


def test_info_json_matches_the_file_histogram(zoo_net: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", str(zoo_net), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    net = load_net(zoo_net)
    assert info["op_count"] == len(net.op)
    assert info["op_types"] == dict(Counter(op.type for op in net.op))
    assert info["external_inputs"] == list(net.external_input)


def test_info_text_lists_the_int8_if_subnets(zoo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", str(zoo / "mask_rcnn_2go_int8" / "model.pbtxt")]) == 0
    out = capsys.readouterr().out
    assert "subnet then_net of op #99 If" in out and "subnet else_net of op #99 If" in out
    assert "net 'mask_net' (simple): 28 ops" in out


def test_version() -> None:
    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout.startswith("netviz ")


@pytest.mark.parametrize("case", ["missing", "directory", "empty", "random", "other message",
                                  "truncated", "text syntax"])
def test_bad_input_exit_2_one_line(tmp_path: Path, case: str) -> None:
    path, expected = _bad_inputs(tmp_path)[case]
    for cmd in (["info", str(path)], [str(path)]):
        r = run_cli(*cmd)
        assert r.returncode == 2, r.stderr
        assert r.stderr.count("\n") == 1 and str(path) in r.stderr and expected in r.stderr
        assert "Traceback" not in r.stderr


def test_usage_error_is_one_line() -> None:
    r = run_cli("info")
    assert r.returncode == 2 and r.stderr.count("\n") == 1


def test_netviz_path_imports_only_the_open_command_before_the_ui():
    """``netviz PATH`` parses with the open command's parser alone: the other subcommands' modules
    (the executor and every kernel through ``run``, the lint, the drawing) are not imported before
    the TUI starts (they cost ~0.2 s at every start); ``netviz --help`` still lists every command."""
    root = Path(__file__).resolve().parents[1]
    code = f"""
import sys
from netviz.app import NetvizApp
NetvizApp.run = lambda self: print(" ".join(sorted(m for m in sys.modules if m.startswith(
    ("netviz.commands.", "engine.runtime.ops", "engine.runtime.executor", "engine.analysis.lint", "netviz.drawing")))))
from netviz.cli import main
sys.exit(main([{str(root / "examples" / "mlp_forward" / "predict_net.pb")!r}]))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["netviz.commands.open"]
    help_text = subprocess.run([sys.executable, "-m", "netviz.cli", "--help"], cwd=root, capture_output=True,
                               text=True, timeout=120).stdout
    assert all(name in help_text for name in ("open", "info", "export", "grad", "run", "check-grad", "lint", "diff"))


def test_the_collector_is_off_while_the_tui_starts_and_on_after(tmp_path, monkeypatch):
    """``netviz PATH`` turns the cyclic collector off for its start (the app turns it on at its
    first frame) and always on again when it returns: after the app, after a bad model."""
    import gc

    from netviz.app import NetvizApp

    root = Path(__file__).resolve().parents[1]
    seen: list[bool] = []
    monkeypatch.setattr(NetvizApp, "run", lambda self: seen.append(gc.isenabled()) or 0)
    assert main([str(root / "examples" / "mlp_forward" / "predict_net.pb")]) == 0
    assert seen == [False] and gc.isenabled()
    bad = tmp_path / "bad.pb"
    bad.write_bytes(b"\x00\x01garbage")
    assert main([str(bad)]) == 2 and gc.isenabled()


# -- every --help example runs as printed (issue #40 item 6) ----------------------------------------

ROOT = Path(__file__).resolve().parents[1]


def help_examples() -> dict[str, list[str]]:
    """Per command (``netviz`` for the top-level help), the command lines of its ``examples:`` part,
    comments cut, in the order printed."""
    import importlib

    from netviz.cli import COMMANDS, EPILOG

    docs = {"netviz": EPILOG}
    docs |= {name: importlib.import_module(f"netviz.commands.{module}").__doc__ or "" for name, (module, _) in
             COMMANDS.items()}
    out = {}
    for name, doc in docs.items():
        tail = doc.split("examples", 1)[1] if "examples" in doc else ""
        out[name] = [line.strip() for line in tail.splitlines() if line.strip().startswith("netviz ")]
    return out


def _run_example(line: str, cwd: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> int:
    """Run one printed command line in-process as a shell in `cwd` would: ``$NETVIZ_MODEL_ZOO``
    expanded, ``> FILE`` redirected; ``netviz PATH`` starts the TUI headless up to its first frame."""
    import asyncio
    import os

    from netviz.app import NetvizApp

    async def first_frame(app: NetvizApp) -> int:
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
        return 0

    monkeypatch.setattr(NetvizApp, "run", lambda self: asyncio.run(first_frame(self)))
    words = [os.path.expandvars(w) for w in shlex.split(line, comments=True)[1:]]
    target = None
    if ">" in words:
        words, target = words[:words.index(">")], words[words.index(">") + 1]
    capsys.readouterr()
    rc = main(words)
    if target is not None:
        (cwd / target).write_text(capsys.readouterr().out)
    return rc


#: exit status 1 is a finding, not a failure, for these (lint: an op that differs; diff: a difference)
FINDINGS = {"lint", "diff", "check-grad"}
EXAMPLES = help_examples()


def test_help_examples_name_real_files_only() -> None:
    """No placeholders: each example names a bundled example or a zoo net through $NETVIZ_MODEL_ZOO."""
    assert set(EXAMPLES) >= {"netviz", "info", "run", "grad", "check-grad", "lint", "export", "diff", "doctor"}
    for name, lines in EXAMPLES.items():
        assert lines, f"`netviz {name} --help` shows no example"
        for line in lines:
            words = shlex.split(line, comments=True)
            models = [w for k, w in enumerate(words) if w.endswith((".pb", ".pbtxt")) and words[k - 1] != "-o"]
            assert all(m.startswith(("examples/", "$NETVIZ_MODEL_ZOO/")) for m in models), line
            assert "squeezenet" not in line, line


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_help_examples_run_as_printed(name: str, tmp_path: Path, zoo: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The examples of one --help run in order in one folder laid out like the checkout root (a later
    line may read what an earlier one wrote, as a reader following them would)."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NETVIZ_MODEL_ZOO", str(zoo))
    for line in EXAMPLES[name]:
        rc = _run_example(line, tmp_path, monkeypatch, capsys)
        assert rc in ({0, 1} if line.split()[1] in FINDINGS else {0}), f"`{line}` exited {rc}: {capsys.readouterr().err}"


def test_a_mistyped_command_names_the_closest(tmp_path: Path) -> None:
    r = run_cli("inof", "examples/mlp/predict_net.pb")
    assert r.returncode == 2 and r.stderr == "netviz: unknown command 'inof'; did you mean 'info'? (see `netviz --help`)\n"
    r = run_cli("chek-grad")
    assert r.returncode == 2 and "did you mean 'check-grad'?" in r.stderr
    model = tmp_path / "lnit"  # NOTE: an existing file is a model, however close its name is to a command
    model.write_bytes(b"\x00garbage")
    r = run_cli(str(model))
    assert r.returncode == 2 and "did you mean" not in r.stderr and str(model) in r.stderr


def test_python_m_netviz_is_netviz() -> None:
    by_module = subprocess.run([sys.executable, "-m", "netviz", "--version"], capture_output=True, text=True)
    script = subprocess.run([str(Path(sys.executable).parent / "netviz"), "--version"], capture_output=True, text=True)
    assert by_module.returncode == script.returncode == 0 and by_module.stdout == script.stdout
    assert by_module.stdout.startswith("netviz ")
