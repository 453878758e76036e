"""Recorded runs (issue 45): a recording holds what `run --dump` writes, reads back without the
model or the device, moves both ways, answers queries as a pass over the dump does, and survives
damage one member at a time."""
from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

from engine.debugger import Debugger
from engine.debugger.conditions import parse_condition
from engine.debugger.recorded import Recording
from engine.debugger.recording import RecordingError, record_run
from engine.debugger.timetravel import (Cursor, LiveHistory, first_iteration_where, history, query,
                                        run_to_first_iteration)
from engine.model.modelio import load_model
from netviz.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ["do_net", "if_net", "lstm", "mlp", "mlp_forward", "nested_if_in_while", "while_net"]
ZOO_NETS = ["inception_v1", "resnet50"]


def _cli(*words: str) -> None:
    assert main([str(w) for w in words]) in (0, 1), words


def _dump_and_record(tmp: Path, net: Path, *extra: str, together: bool = False) -> tuple[Path, Recording]:
    """`run --dump` and `run --record` of `net` (two runs, or one with both when `together`)."""
    dump, rec = tmp / "dump", tmp / "run.nvrec"
    if together:
        _cli("run", net, *extra, "--dump", dump, "--record", rec)
    else:
        _cli("run", net, *extra, "--dump", dump)
        _cli("run", net, *extra, "--record", rec)
    return dump, Recording.open(rec)


def _assert_equals_dump(dump: Path, rec: Recording) -> None:
    index = json.loads((dump / "index.json").read_text())
    assert {f"{e['blob']}@{e['version']}" for e in index} == set(rec.members)
    for e in index:
        want = np.load(dump / e["file"], allow_pickle=False)
        got = rec.value(e["blob"], e["version"])
        assert got.dtype == want.dtype and got.shape == want.shape, e
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, equal_nan=True, err_msg=str(e))


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_version_equals_the_dump_on_the_examples(name: str, tmp_path: Path) -> None:
    loss = ["--loss", "loss", "--input", "data=16,8"] if name == "mlp_forward" else []
    dump, rec = _dump_and_record(tmp_path, ROOT / "examples" / name / "predict_net.pb", *loss)
    _assert_equals_dump(dump, rec)
    assert rec.stops and [s.seq for s in rec.stops] == list(range(len(rec.stops)))


@pytest.mark.parametrize("name", ZOO_NETS)
def test_every_version_equals_the_dump_on_zoo_nets(name: str, tmp_path: Path, zoo: Path) -> None:
    net = next(p for p in (zoo / name).iterdir() if p.name.startswith("predict_net"))
    dump, rec = _dump_and_record(tmp_path, net, "--random-params", "--param-width", "4", together=True)
    _assert_equals_dump(dump, rec)


def test_every_version_equals_the_dump_inside_mask_rcnn_subnets(tmp_path: Path, zoo: Path) -> None:
    """Mask R-CNN 2go runs ops inside subnets of its own (the mask head's If): their versions too."""
    np.save(tmp_path / "im_info.npy", np.array([[192, 192, 1.0]], np.float32))
    dump, rec = _dump_and_record(tmp_path, zoo / "mask_rcnn_2go_fp32" / "model.pbtxt", "--random-params",
                                 "--param-width", "4", "--input", "data=1,3,192,192",
                                 "--input", f"im_info={tmp_path / 'im_info.npy'}", together=True)
    assert any(len(s.path) > 2 for s in rec.stops)
    _assert_equals_dump(dump, rec)


def _brute_force(dump: Path, expr: str) -> list[tuple[str, ...]]:
    """The written blob@versions of every op run after which `expr` holds, from the dump's files alone."""
    cond, state, groups, out = parse_condition(expr), {}, [], []
    for e in json.loads((dump / "index.json").read_text()):
        value = np.load(dump / e["file"], allow_pickle=False)
        if e["op"] is None:
            state[e["blob"]] = value
            continue
        g = groups[-1] if groups else None
        if g is None or g["op"] != e["op"] or e["blob"] in g["written"]:
            groups.append(g := {"op": e["op"], "written": {}, "keys": []})
        g["written"][e["blob"]] = value
        g["keys"].append(f"{e['blob']}@{e['version']}")
    for k, g in enumerate(groups):
        state.update(g["written"])
        if cond.triggered_by(g["written"]) and cond(g["written"], dict(state), 0):
            out.append(tuple(g["keys"]))
    return out


@pytest.mark.parametrize("name, expr", [
    ("while_net", "max_abs(acc) > 0.5"),
    ("nested_if_in_while", "max(acc) > 0.3 or min(acc) < -0.3"),
    ("lstm", "max_abs(lstm/hidden_state) > 0.01"),
    ("mlp_forward", "norm(fc1_w_grad) / norm(fc1_w) > 0.01"),
    ("mlp_forward", "has_inf_or_nan"),
])
def test_query_equals_a_brute_force_pass_over_the_dump(name: str, expr: str, tmp_path: Path) -> None:
    extra = ["--loss", "loss", "--input", "data=16,8"] if name == "mlp_forward" else []
    dump, rec = _dump_and_record(tmp_path, ROOT / "examples" / name / "predict_net.pb", *extra)
    rows = query(rec, expr)
    got = [tuple(o.key for o in rec.stops[r.seq].outputs if o.key in rec.members) for r in rows]
    assert got == _brute_force(dump, expr)
    if name != "mlp_forward" or "nan" not in expr:
        assert rows, "the condition should hold somewhere"


def test_query_cli_json_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = tmp_path / "w.nvrec"
    _cli("run", ROOT / "examples" / "while_net" / "predict_net.pb", "--record", rec)
    capsys.readouterr()
    assert main(["query", str(rec), "max_abs(acc) > 0.5", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["place"].startswith("main") and r["value"] > 0.5 for r in rows)
    assert {r["iteration"] for r in rows} >= {"iteration 0", "iteration 2"}


def test_the_reader_needs_no_model_files(tmp_path: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(ROOT / "examples" / "while_net", model)
    rec_path = tmp_path / "w.nvrec"
    _cli("run", model / "predict_net.pb", "--record", rec_path)
    shutil.rmtree(model)
    rec = Recording.open(rec_path)
    assert rec.meta["model"].endswith("predict_net.pb") and not Path(rec.meta["model"]).exists()
    last = rec.stops[-1]
    assert rec.place(last).startswith("main") and rec.written(last)
    assert query(rec, "max_abs(acc) > 0.5")


def _recording(tmp: Path, name: str, loss: str | None = None) -> Recording:
    model = load_model(ROOT / "examples" / name / "predict_net.pb")
    dbg = Debugger(model, {"data": (16, 8)} if name == "mlp_forward" else {}, device="cpu", loss=loss)
    record_run(dbg, tmp / f"{name}.nvrec")
    return Recording.open(tmp / f"{name}.nvrec")


def test_reverse_continue_and_last_writer_inside_while_iterations(tmp_path: Path) -> None:
    rec = _recording(tmp_path, "while_net")
    cur = Cursor(rec, len(rec.stops))
    cur.add_breakpoint("type", "Tanh")
    hits = [cur.reverse_continue() for _ in range(3)]
    assert [h.stop.iteration for h in hits] == ["iteration 2", "iteration 1", "iteration 0"]
    assert all(h.pos == h.stop.seq and len(h.stop.path) > 2 for h in hits)
    assert cur.reverse_continue() is None and cur.pos == 0
    assert cur.continue_().stop.iteration == "iteration 0"
    tanh = hits[0].stop
    acc = next(o for o in tanh.outputs if o.name == "acc")
    # the op after the Tanh reads acc: its last writer is that Tanh, inside iteration 2's Do
    assert rec.last_writer("acc", tanh.seq + 1) == tanh and rec.writer("acc", acc.version) == tanh
    assert rec.last_writer("acc", 0) is None  # version 0: the init net's
    np.testing.assert_array_equal(rec.state(tanh.seq)["acc"], rec.value("acc", acc.version))


def test_step_back_enters_a_finished_subnet_and_condition_hits_stop_after_the_op(tmp_path: Path) -> None:
    rec = _recording(tmp_path, "while_net")
    after = next(s.seq for s in rec.stops if s.op_type == "While") + 1
    cur = Cursor(rec, after)
    cur.step(-1)
    assert cur.stop.op_type == "While"
    cur.step(-1)
    assert len(cur.stop.path) > 2 and cur.stop.iteration  # the While's last op run, inside it
    cur.step_over()
    assert cur.stop.op_type == "While"
    cur.goto(len(rec.stops))
    cur.add_breakpoint("condition", condition="max_abs(acc) > 0.5")
    hit = cur.reverse_continue()
    assert hit.pos == hit.stop.seq + 1 and "acc" in {o.name for o in hit.stop.outputs}
    assert hit.stop.seq == query(rec, "max_abs(acc) > 0.5")[-1].seq


@pytest.mark.parametrize("name, op_type", [("if_net", None), ("do_net", None), ("nested_if_in_while", None),
                                            ("lstm", "LSTMUnit")])
def test_reverse_continue_and_last_writer_inside_if_do_and_rnn_timesteps(name: str, op_type: str | None,
                                                                         tmp_path: Path) -> None:
    rec = _recording(tmp_path, name)
    inner = [s for s in rec.stops if len(s.path) > 2 and s.outputs and (op_type is None or s.op_type == op_type)]
    assert inner, "the example runs ops inside a subnet"
    target = inner[-1]
    cur = Cursor(rec, len(rec.stops))
    cur.add_breakpoint("path", target.path)
    hit = cur.reverse_continue()
    assert hit is not None and hit.stop == target and cur.pos == target.seq
    if op_type == "LSTMUnit":
        runs = [s for s in inner if s.path == target.path]
        assert len(runs) > 1 and all("timestep" in s.iteration for s in runs)
        assert cur.reverse_continue().stop == runs[-2]
    out = target.outputs[0]
    reader = next((s for s in rec.stops[target.seq + 1:] if rec.version_at(out.name, s.seq - 1) == out.version), None)
    if reader is not None:
        assert rec.last_writer(out.name, reader.seq) == target


def test_a_truncated_recording_reads_up_to_the_cut(tmp_path: Path) -> None:
    rec = _recording(tmp_path, "lstm")
    path, size = rec.path, rec.path.stat().st_size
    keep = dict(rec.members)
    first = rec.value("lstm/hidden_t_prev", 0) if "lstm/hidden_t_prev@0" in keep else None
    rec.close()
    cut = tmp_path / "cut.nvrec"
    cut.write_bytes(path.read_bytes()[: size * 2 // 3])
    damaged = Recording.open(cut)
    assert len(damaged.problems) == 1 and "\n" not in damaged.problems[0]
    assert "chunk " in damaged.problems[0] and "cut off" in damaged.problems[0]
    assert damaged.stops and 0 < len(damaged.members) < len(keep)
    for key in list(damaged.members)[:20]:
        name, _, v = key.rpartition("@")
        assert damaged.value(name, int(v)).dtype != object
    if first is not None:
        np.testing.assert_array_equal(damaged.value("lstm/hidden_t_prev", 0), first)


def test_a_corrupt_member_fails_alone_naming_chunk_and_blob(tmp_path: Path) -> None:
    rec = _recording(tmp_path, "while_net")
    member = rec.members["acc@3"]
    info = rec._zip.getinfo(member)
    rec.close()
    data = bytearray(rec.path.read_bytes())
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    data[start + info.compress_size - 4] ^= 0xFF
    bad = tmp_path / "bad.nvrec"
    bad.write_bytes(bytes(data))
    rec = Recording.open(bad)
    with pytest.raises(RecordingError, match=r"chunk blobs/acc@3\.npy \(blob acc@3\)") as e:
        rec.value("acc", 3)
    assert "\n" not in str(e.value)
    assert rec.value("acc", 2).shape == rec.value("acc", 4).shape


def test_a_recording_of_another_model_version_is_named_by_its_hash(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    rec = _recording(tmp_path, "while_net")
    model = load_model(ROOT / "examples" / "while_net" / "predict_net.pb")
    assert rec.check_model(model) is None
    model.predict.op[0].name = "renamed"
    note = rec.check_model(model)
    assert note and "another version of the model" in note and "\n" not in note
    changed = tmp_path / "changed.pb"
    changed.write_bytes(model.predict.SerializeToString())
    shutil.copy(ROOT / "examples" / "while_net" / "init_net.pb", tmp_path / "init_net.pb")
    capsys.readouterr()
    assert main(["query", str(rec.path), "has_inf_or_nan", "--model", str(changed)]) == 0
    assert "another version of the model" in capsys.readouterr().err


def test_iteration_history_live_equals_the_recording(tmp_path: Path) -> None:
    rec = _recording(tmp_path, "while_net")
    recorded = history(rec, "acc")
    dbg = Debugger(load_model(ROOT / "examples" / "while_net" / "predict_net.pb"), {}, device="cpu")
    live = LiveHistory(dbg, "acc")
    dbg.listeners.append(live)
    if rec.meta["loss"]:
        dbg.backward(rec.meta["loss"])
    dbg.continue_()
    assert [(s.version, s.iteration) for s in recorded] == [(s.version, s.iteration) for s in live.stats]
    np.testing.assert_allclose([s.norm for s in recorded], [s.norm for s in live.stats], rtol=1e-6)
    assert {s.iteration for s in recorded} >= {"iteration 0", "iteration 1", "iteration 2"}
    dbg.restart()
    dbg.continue_()
    assert live.stats[-1].iteration == "run 2"


def test_stop_at_the_first_iteration_where_live_and_recorded(tmp_path: Path) -> None:
    rec = _recording(tmp_path, "while_net")
    expr = "max_abs(acc) < 0.6"
    found = first_iteration_where(rec, expr)
    assert found is not None and found.iteration == "iteration 2"
    dbg = Debugger(load_model(ROOT / "examples" / "while_net" / "predict_net.pb"), {}, device="cpu")
    stop = run_to_first_iteration(dbg, expr)
    assert stop.reason == "condition" and dbg.records[-1].frames[0] == "iteration 2"
    assert dbg.records[-1].path == found.path


def _has_gpu() -> bool:
    from engine.runtime import device as dev

    return dev.has_gpu()


@pytest.mark.skipif(not _has_gpu(), reason="needs a CUDA GPU")
def test_a_gpu_run_is_recorded_as_host_arrays_equal_to_the_cpu_run(tmp_path: Path) -> None:
    model = load_model(ROOT / "examples" / "while_net" / "predict_net.pb")
    record_run(Debugger(model, {}, device="gpu"), tmp_path / "gpu.nvrec")
    record_run(Debugger(model, {}, device="cpu"), tmp_path / "cpu.nvrec")
    gpu, cpu = Recording.open(tmp_path / "gpu.nvrec"), Recording.open(tmp_path / "cpu.nvrec")
    assert gpu.meta["device"] == "gpu" and set(gpu.members) == set(cpu.members)
    for key in cpu.members:
        name, _, v = key.rpartition("@")
        got = gpu.value(name, int(v))
        assert type(got) is np.ndarray
        np.testing.assert_allclose(got, cpu.value(name, int(v)), rtol=1e-5, atol=1e-6)


def test_one_version_loads_alone_and_a_non_recording_is_one_line(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    rec = _recording(tmp_path, "while_net")
    read: list[str] = []
    real = rec._zip.read
    monkeypatch.setattr(rec._zip, "read", lambda member: read.append(member) or real(member))
    rec.value("acc", 4)
    assert read == ["blobs/acc@4.npy"]
    for data in (b"", b"not a zip at all"):
        bad = tmp_path / "bad.nvrec"
        bad.write_bytes(data)
        with pytest.raises(RecordingError, match="not a recording"):
            Recording.open(bad)


def test_a_corrupt_stops_chunk_is_one_problem_and_the_values_stay_readable(tmp_path: Path) -> None:
    rec = _recording(tmp_path, "lstm")
    info = rec._zip.getinfo("stops/00001.json")
    want = rec.value("lstm/hidden_t_prev", 0) if "lstm/hidden_t_prev@0" in rec.members else None
    rec.close()
    data = bytearray(rec.path.read_bytes())
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    data[start + info.compress_size // 2] ^= 0xFF
    bad = tmp_path / "bad.nvrec"
    bad.write_bytes(bytes(data))
    damaged = Recording.open(bad)
    assert len(damaged.problems) == 1 and "chunk stops/00001.json" in damaged.problems[0]
    assert len(damaged.stops) == 64  # the first chunk's
    if want is not None:
        np.testing.assert_array_equal(damaged.value("lstm/hidden_t_prev", 0), want)


def test_recording_over_an_open_recording_leaves_it_readable(tmp_path: Path) -> None:
    """Recording another run to a file a replay has open starts a new file: the open one keeps reading
    its own values (the file was truncated in place, under the reader), the path then holds the new run,
    and the older file's name is gone from the folder once its deletion ran."""
    import threading
    import time

    first = _recording(tmp_path, "lstm")
    keys = list(first.members)[:30]
    before = {k: first.value(k.rpartition("@")[0], int(k.rpartition("@")[2])) for k in keys}
    model = load_model(ROOT / "examples" / "while_net" / "predict_net.pb")
    record_run(Debugger(model, {}, device="cpu"), first.path)  # another net, the same path
    for k, v in before.items():
        name, _, ver = k.rpartition("@")
        np.testing.assert_array_equal(first.value(name, int(ver)), v)
    first.close()
    again = Recording.open(tmp_path / "lstm.nvrec")
    assert again.meta["model"].endswith("while_net/predict_net.pb") and not set(again.members) & set(keys)
    again.close()
    deadline = time.monotonic() + 10
    while any(t.name == "netviz-unlink" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lstm.nvrec"]


def test_recording_to_a_symbolic_link_writes_where_it_points(tmp_path: Path) -> None:
    """An older recording behind a symbolic link is replaced where the link points; the link stays."""
    target = tmp_path / "runs" / "lstm.nvrec"
    target.parent.mkdir()
    target.write_bytes(b"an older file")
    link = tmp_path / "latest.nvrec"
    link.symlink_to(target)
    model = load_model(ROOT / "examples" / "lstm" / "predict_net.pb")
    record_run(Debugger(model, {}, device="cpu"), link)
    assert link.is_symlink() and zipfile.is_zipfile(target)
    Recording.open(link).close()
