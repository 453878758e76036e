"""The `netviz` CLI skeleton: info on real nets, --version, one-line errors with exit 2."""
from __future__ import annotations

import json
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
