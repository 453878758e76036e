"""Headless export of big nets: a 600-op training net yields a complete SVG, a deep net's default SVG
keeps a sane aspect ratio, and a crashed ``dot`` is reported as a crash (there is no ``sfdp`` fallback)."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from engine.model.opdef import create_operator as op
from netviz.cli import main
from netviz.drawing import DrawOptions, draw_net, ops_only
from netviz.export import backward_drawing_net, export_drawing
from netviz.layout import LayoutCrash
from proto import caffe2_pb2

SVG = "{http://www.w3.org/2000/svg}"


def training_net(layers: int) -> tuple[caffe2_pb2.NetDef, int, list[int | None]]:
    """FC+Relu stack with an averaged loss, its generated backward pass and one SGD update per parameter."""
    ops, x = [], "data"
    for i in range(layers):
        ops += [op("FC", [x, f"fc{i}_w", f"fc{i}_b"], f"fc{i}"), op("Relu", f"fc{i}", f"relu{i}")]
        x = f"relu{i}"
    ops.append(op("AveragedLoss", x, "loss"))
    net, n_fwd, origin = backward_drawing_net(caffe2_pb2.NetDef(name="deep_mlp", op=ops), "loss")
    for i in range(layers):
        for p in (f"fc{i}_w", f"fc{i}_b"):
            net.op.append(op("WeightedSum", [p, "ONE", f"{p}_grad", "LR"], p))
    return net, n_fwd, origin


def svg_node_titles(path: Path) -> list[str]:
    root = ET.parse(path).getroot()
    return [g.findtext(f"{SVG}title") or "" for g in root.iter(f"{SVG}g") if g.get("class") == "node"]


def test_600_op_training_net_exports_every_op(tmp_path: Path) -> None:
    net, n_fwd, origin = training_net(100)
    assert 580 <= len(net.op) <= 700
    d = draw_net(net, DrawOptions(), n_fwd, origin)
    lines: list[str] = []
    r = export_drawing(d, tmp_path / "train.svg", rankdir="auto", progress=lines.append)
    assert not r.timed_out and r.path == tmp_path / "train.svg" and r.layout
    titles = set(svg_node_titles(r.path))
    assert {f"op{i}" for i in range(len(net.op))} <= titles and titles == set(ops_only(d).nodes)
    assert lines[0].startswith("layout: dot") and "finished" in lines[-1]


def svg_size(path: Path) -> tuple[float, float]:
    head = path.read_text()[:2000]
    found = {k: re.search(rf'{k}="([\d.]+)pt"', head) for k in ("width", "height")}
    assert all(found.values()), head[:300]
    w, h = (float(m.group(1)) for m in found.values() if m is not None)
    return w, h


def test_resnet50_default_svg_has_a_sane_aspect(zoo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r50.svg"
    assert main(["export", str(zoo / "resnet50" / "predict_net.pbtxt"), "-o", str(out)]) == 0
    w, h = svg_size(out)
    assert max(w, h) / min(w, h) <= 3, (w, h)  # LR, as before auto: 60,343 x 1,248 pt
    err = capsys.readouterr().err
    assert re.search(r"layout: dot, TB columns in \d+ pieces placed by netviz", err)
    titles = svg_node_titles(out)  # ops-only (618 nodes > BIG_DRAWING): 175 ops, the input and the output
    assert len(titles) == 177 and {"gpu_0/data@0", "gpu_0/softmax@1"} <= set(titles)


@pytest.fixture
def crashing_graphviz(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``dot`` (and ``sfdp``) first on PATH that kill themselves with SIGSEGV, as graphviz 2.43 does."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for prog in ("dot", "sfdp"):
        (bin_dir / prog).write_text("#!/bin/sh\ncat > /dev/null\nkill -SEGV $$\n")
        (bin_dir / prog).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


def test_crashed_dot_is_reported_as_a_crash(crashing_graphviz: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    net = tmp_path / "n.pbtxt"
    net.write_text('name: "n" op { type: "Relu" input: "X" output: "Y" }\n')
    out = tmp_path / "n.svg"
    assert main(["export", str(net), "-o", str(out)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == "netviz: graphviz 'dot' crashed (SIGSEGV)" and not out.exists()
    assert not any("Traceback" in line or "longer than" in line for line in err)


def test_big_drawing_has_no_sfdp_fallback(crashing_graphviz: Path, tmp_path: Path) -> None:
    """A crashed ``dot`` on a big drawing's pieces is reported as a crash: no force-directed scatter instead."""
    (crashing_graphviz / "sfdp").unlink()  # the real sfdp again: it must not be tried
    net, n_fwd, origin = training_net(100)
    d = draw_net(net, DrawOptions(), n_fwd, origin)
    lines: list[str] = []
    with pytest.raises(LayoutCrash, match="'dot' crashed"):
        export_drawing(d, tmp_path / "n.svg", progress=lines.append)
    assert not any("sfdp" in line for line in lines) and not (tmp_path / "n.svg").exists()


def test_ctrl_c_stops_the_layout_and_writes_nothing(tmp_path: Path) -> None:
    """SIGINT while ``dot`` runs: exit 130 with one line, the program killed, no output file."""
    bin_dir, pid_file = tmp_path / "bin", tmp_path / "dot.pid"
    bin_dir.mkdir()
    (bin_dir / "dot").write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 60\n")
    (bin_dir / "dot").chmod(0o755)
    net, out = tmp_path / "n.pbtxt", tmp_path / "n.svg"
    net.write_text('name: "n" op { type: "Relu" input: "X" output: "Y" }\n')
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    # NOTE: Ctrl-C as a terminal delivers it: a suite started in the background by a non-interactive shell
    # (`bash .ci/run &`) ignores SIGINT, which its children inherit, and Python then leaves it ignored
    p = subprocess.Popen([sys.executable, "-m", "netviz.cli", "export", str(net), "-o", str(out)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert p.stderr is not None and p.stderr.readline().startswith("netviz: layout: dot")
    for _ in range(100):  # the shell script writes its pid just after starting
        if pid_file.exists() and pid_file.read_text().strip():
            break
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 130 and err.strip() == "netviz: interrupted", err
    assert not out.exists() and not list(tmp_path.glob(".n.svg.*"))
    pid = int(pid_file.read_text())
    stat = Path(f"/proc/{pid}/stat")
    assert not stat.exists() or stat.read_text().split(") ")[1][0] == "Z", stat.read_text()


def test_tui_whole_net_export_uses_the_cli_layout(zoo: Path, tmp_path: Path) -> None:
    """The TUI's whole-net export of ResNet-50 with its backward pass writes the same DOT as
    ``netviz export --backward`` (TB in wrapped columns, not one deep column that ran out of time and
    came out as an sfdp scatter), and says which layout it used."""
    from netviz.cli import main as cli_main
    from netviz.export import default_loss
    from netviz.session import Session

    path = zoo / "resnet50" / "predict_net.pbtxt"
    s = Session.open(path)
    s.set_backward(True, default_loss(s.model.predict))
    lines: list[str] = []
    tui = s.export((), str(tmp_path / "tui.dot"), force=True, progress=lines.append)
    assert tui == str(tmp_path / "tui.dot")
    assert cli_main(["export", str(path), "--backward", "-o", str(tmp_path / "cli.dot")]) == 0
    dot = (tmp_path / "tui.dot").read_text()
    assert dot == (tmp_path / "cli.dot").read_text()
    assert "columns" in dot and "rankdir=TB" in dot  # the wrapped plan's invisible column chain
    small = Session.open(zoo / "bvlc_alexnet" / "predict_net.pbtxt")
    said = small.export((), str(tmp_path / "alex.svg"), force=True, progress=lines.append)
    assert "laid out with dot" in said and "sfdp" not in said
    assert any(line.startswith("layout: dot") for line in lines)
    assert (tmp_path / "alex.svg").read_text().lstrip().startswith("<?xml")


def test_a_long_layout_says_how_long_it_has_run() -> None:
    """run_graphviz's tick: a program still running is reported every `every` seconds, its output kept."""
    import subprocess

    from netviz.layout import _communicate

    ticks: list[float] = []
    with subprocess.Popen(["sh", "-c", "cat >/dev/null; sleep 0.5; echo done"], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        out, _ = _communicate(proc, b"digraph {}", 10.0, ticks.append, 0.1)
    assert out == b"done\n" and len(ticks) >= 2 and ticks == sorted(ticks)
