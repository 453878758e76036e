"""A blob name a subnet's workspace shadows (``b_grad`` in the backward While's Do, the forward
iteration's ``acc`` a backward Do reads from its workspace): a recording kept blobs by name only, so a
replay showed the latest write of the name, another workspace's value, where the live debugger and a
fresh run showed the frame's own.  Now each stop names its workspace and each write where it landed.

At every stop of a run stepped with ``s`` (a fresh run, op by op), every blob the inspector can show
there (the pc frame's workspace) must read the same value and version live and in the replay.  In an
RNN timestep that includes the link buffers (the replay showed a version's final value, rows later
timesteps write included) and the views of their rows (which an op writing the buffer changes)."""
from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.debugger import Debugger
from engine.debugger.machine import DebuggerError
from engine.debugger.recorded import Recording
from engine.debugger.recording import record_run
from engine.debugger.replayer import ReplayDebugger
from engine.model.modelio import load_model

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _live(name: str) -> Debugger:
    return Debugger(load_model(EXAMPLES / name / "predict_net.pb"), {}, device="cpu")


def _pair(name: str, tmp: Path) -> tuple[Debugger, ReplayDebugger]:
    record_run(_live(name), tmp / "run.nvrec")
    return _live(name), ReplayDebugger(Recording.open(tmp / "run.nvrec"))


def _arrays(d: Debugger) -> dict[str, np.ndarray]:
    """The numeric blobs the live inspector shows at the pc (its frame's workspace)."""
    values = d.frames[-1].ws.values
    return {n: np.asarray(values[n]) for n in list(values)
            if hasattr(values[n], "dtype") and values[n].dtype != object}


def _differences(live: Debugger, rp: ReplayDebugger, where: str) -> list[str]:
    out = []
    for blob, ours in _arrays(live).items():
        theirs = rp.value(blob)
        version = (live.versions.get(blob, 0), rp.versions[blob] if blob in rp.versions else 0)
        if version[0] != version[1] or np.shape(theirs) != ours.shape or not np.allclose(theirs, ours,
                                                                                         equal_nan=True):
            out.append(f"{where}: {blob} versions {version}")
    return out


@pytest.mark.parametrize("name", ["while_net", "nested_if_in_while", "do_net", "if_net", "lstm"])
def test_every_blob_at_every_stop_reads_as_live(name: str, tmp_path: Path) -> None:
    live, rp = _pair(name, tmp_path)
    bad: list[str] = []
    while not live.finished:
        assert rp.pc.text() == live.pc.text()
        bad += _differences(live, rp, live.pc.text())
        live.step_into(), rp.step_into()
    assert rp.finished
    assert not bad, f"{len(bad)} blob values differ, first: {bad[:3]}"


def test_b_grad_inside_the_backward_while_is_the_loops_not_the_do_s(tmp_path: Path) -> None:
    """The Do inside the backward While writes its own ``b_grad`` (version 2); the While's iteration,
    before its Sum, reads the loop's ``b_grad`` (the ConstantFill's zeros): the replay showed the Do's."""
    live, rp = _pair("while_net", tmp_path)
    at = ("op", 9, "loop_net", 1)
    for d in (live, rp):
        d.run_to(at)
        assert d.pc.text() == "main › While op#9 iteration 0 › op#1 Sum"
    assert live.versions["b_grad"] == rp.versions["b_grad"] == 2
    np.testing.assert_allclose(rp.value("b_grad"), live.value("b_grad"))
    assert not np.allclose(rp.value("b_grad", 1), rp.rec.value("b_grad", 2))  # the shadow is another value


def _as_format_1(src: Path, dst: Path) -> None:
    """`src` rewritten as a format 1 recording: meta version 1, no workspaces in the stops, no local members."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data: Any = zin.read(info)
            if info.filename == "meta.json":
                data = json.dumps({**json.loads(data), "version": 1}).encode()
            elif info.filename.startswith("stops/"):
                stops = json.loads(data)
                for s in stops:
                    s.pop("ws"), s.pop("wsdef", None), s.pop("wslocal", None)
                    s["outputs"] = [o[:6] for o in s["outputs"]]
                data = json.dumps(stops).encode()
            elif "w" in info.filename.rpartition("@")[2]:
                continue
            zout.writestr(info.filename, data)


def test_a_format_1_recording_opens_with_a_notice_and_reads_by_name(tmp_path: Path) -> None:
    record_run(_live("while_net"), tmp_path / "new.nvrec")
    _as_format_1(tmp_path / "new.nvrec", tmp_path / "old.nvrec")
    rec = Recording.open(tmp_path / "old.nvrec")
    assert len(rec.problems) == 1 and "\n" not in rec.problems[0]
    notice = rec.problems[0]
    assert "old.nvrec" in notice and "format 1" in notice and "record the run again" in notice
    rp = ReplayDebugger(rec)
    rp.run_to(("op", 9, "loop_net", 1))
    np.testing.assert_allclose(rp.value("b_grad"), rec.value("b_grad", 2))  # as before: the latest by name


def test_a_condition_reads_the_blob_of_the_workspace_it_stops_in(tmp_path: Path) -> None:
    """A breakpoint on Sum when ``max_abs(b_grad) == 0``: at the backward While's first Sum the loop's
    ``b_grad`` is still zeros (live stops there); the replay's condition read the Do's ``b_grad`` and ran on."""
    live, rp = _pair("while_net", tmp_path)
    seen = []
    for d in (live, rp):
        d.add_breakpoint("type", "Sum", condition="max_abs(b_grad) == 0")
        seen.append([d.pc.text() for _ in range(8) if d.continue_().reason == "breakpoint"])
    assert seen[0] == seen[1]
    assert seen[0][:1] == ["main › While op#9 iteration 0 › op#1 Sum"]



def _absent_there(live: Debugger, rp: ReplayDebugger, where: str) -> tuple[list[str], int]:
    """Names the replay knows by name at this stop that the pc frame's workspace cannot see, which the
    replay showed (the latest version by name, another workspace's value) where live says each does not
    exist; and how many such names there were."""
    values, bad, absent = live.frames[-1].ws.values, [], 0
    for blob in rp.rec.blobs():
        if blob in values or rp.rec.version_at(blob, rp.ran() - 1) is None:
            continue
        absent += 1
        try:
            rp.value(blob)
            bad.append(f"{where}: {blob} shown")
        except DebuggerError as e:
            if str(e) != f"blob '{blob}' does not exist at this point":
                bad.append(f"{where}: {blob} ({e})")
    return bad, absent


@pytest.mark.parametrize("name", ["while_net", "do_net", "if_net", "nested_if_in_while", "lstm"])
def test_a_blob_the_pc_workspace_cannot_see_does_not_exist_in_replay_as_live(name: str, tmp_path: Path) -> None:
    live, rp = _pair(name, tmp_path)
    bad: list[str] = []
    absent = 0
    while not live.finished:
        more, n = _absent_there(live, rp, live.pc.text())
        bad, absent = bad + more, absent + n
        live.step_into(), rp.step_into()
    assert absent, "no stop where the pc's workspace lacked a blob known by name: nothing was checked"
    assert not bad, f"{len(bad)} blobs the replay showed where live has none, first: {bad[:3]}"
