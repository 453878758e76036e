"""Quiet, clean Make targets (issue #40 item 8): `make bench` writes an untracked file unless told
otherwise, `make oracle` prints a summary and sends Caffe2's output to a log file."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_bench_results_go_to_an_untracked_file_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks.__main__ import default_out

    monkeypatch.delenv("BENCH_OUT", raising=False)
    out = default_out()
    assert out == ROOT / "benchmarks" / "results.local.json"
    ignored = subprocess.run(["git", "check-ignore", "-q", str(out.relative_to(ROOT))], cwd=ROOT)
    assert ignored.returncode == 0, "benchmarks/results.local.json is not git-ignored"
    monkeypatch.setenv("BENCH_OUT", "benchmarks/results.json")
    assert default_out() == Path("benchmarks/results.json")


def _fake_checkout(tmp_path: Path, fail: bool) -> Path:
    """A tree with scripts/oracle.sh, two noisy golden scripts and a ready .venv-caffe2 (this Python)."""
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    shutil.copy2(ROOT / "scripts" / "oracle.sh", root / "scripts" / "oracle.sh")
    oracle = root / "tests" / "oracle"
    oracle.mkdir(parents=True)
    noise = "import sys\nfor i in range(500): print('W caffe2 warning', i, file=sys.stderr)\n"
    (oracle / "gen_a.py").write_text(noise + "open(sys.argv[1] + '/a.json', 'w').write('{}')\n")
    (oracle / "gen_b.py").write_text(noise + ("raise SystemExit('gen_b broke')\n" if fail else ""))
    (oracle / "make_index.py").write_text("import sys; open(sys.argv[1] + '/index.json', 'w').write('{}')\n")
    venv = root / ".venv-caffe2"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    reqs = re.search(r"^REQS='(.*)'$", (ROOT / "scripts" / "oracle.sh").read_text(), re.M).group(1)
    (venv / ".netviz-reqs").write_text(reqs)  # NOTE: oracle.sh installs nothing when its stamp matches
    return root


@pytest.mark.parametrize("fail", [False, True], ids=["ok", "a script fails"])
def test_oracle_prints_a_summary_and_logs_caffe2s_noise(tmp_path: Path, fail: bool) -> None:
    root = _fake_checkout(tmp_path, fail)
    log = tmp_path / "oracle.log"
    env = dict(os.environ, ORACLE_LOG=str(log))
    r = subprocess.run(["bash", "scripts/oracle.sh", str(tmp_path / "out")], cwd=root, env=env,
                       capture_output=True, text=True, timeout=120)
    printed = (r.stdout + r.stderr).splitlines()
    assert log.read_text().count("W caffe2 warning") == 1000
    if not fail:
        assert r.returncode == 0 and len(printed) == 4, printed  # gen_a, gen_b, make_index, the summary
        assert re.fullmatch(rf"oracle.sh: all goldens written to {tmp_path / 'out'} in \d+s: 2 scripts, 2 files; "
                            rf"Caffe2's output \(\d+ lines\) in {log}", printed[-1])
    else:
        assert r.returncode != 0 and len(printed) <= 42
        assert printed[-1] == f"oracle.sh: gen_b.py FAILED (exit 1); its whole output is in {log}"
        assert "gen_b broke" in printed[-2]


def test_every_netviz_variable_is_documented_in_one_place() -> None:
    """docs/files.md names every NETVIZ_* variable the code reads (and the XDG ones), the doctor lists
    the same, and the top-level --help points to both."""
    from netviz.cli import EPILOG
    from netviz.commands.doctor import VARIABLES

    read = set()
    for folder in ("engine", "netviz"):
        for path in (ROOT / folder).rglob("*.py"):
            read |= set(re.findall(r"environ(?:\.get)?\(?\[?\s*[\"'](NETVIZ_\w+|XDG_\w+)", path.read_text()))
    assert {"NETVIZ_CACHE_DIR", "NETVIZ_NO_CACHE", "NETVIZ_LOG_DIR", "NETVIZ_THREADS", "NETVIZ_SCHEMA",
            "XDG_CACHE_HOME", "XDG_STATE_HOME"} <= read
    doc = (ROOT / "docs" / "files.md").read_text()
    assert all(f"`{name}`" in doc for name in read | {"NETVIZ_MODEL_ZOO"}), sorted(n for n in read if n not in doc)
    assert {n for n in read if n.startswith("NETVIZ_")} <= set(VARIABLES)
    assert "docs/files.md" in EPILOG and "netviz doctor" in EPILOG


def test_bench_table_shows_a_text_reference_as_text() -> None:
    """A row may name a layout or a refusal as its reference (bench_graph): the table prints it and
    takes the ratio from the first number (a text reference crashed the whole table)."""
    from benchmarks.__main__ import format_table

    table = format_table([{"name": "export x", "netviz_s": 3.0, "target": "<= 2x", "ok": False,
                           "reference": {"layout": "dot, TB ladder in 4 pieces", "forward-only": 1.5}}])
    row = table.splitlines()[-1]
    assert "layout: dot, TB ladder in 4 pieces" in row and "forward-only 1.5s" in row and " 2.00 " in row
