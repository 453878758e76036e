"""minidb Save/Load and blob serialisation (issue #20), round-tripped with real Caffe2 both ways.

The Caffe2 side runs in the oracle venv (.venv-caffe2) in a subprocess; without it these skip.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from engine.runtime import blobio
from engine.errors import ExecutionError
from engine.runtime.executor import run_op
from engine.model.opdef import create_operator
from engine.runtime.ops.quant import Int8Tensor
from engine.caffe2.workspace import Workspace

ROOT = Path(__file__).resolve().parents[2]
ORACLE = ROOT / ".venv-caffe2" / "bin" / "python"

BLOBS = {
    "f": np.arange(6, dtype=np.float32).reshape(2, 3), "i": np.array([1, -2], np.int32),
    "l": np.array([5, 1 << 40], np.int64), "u8": np.array([1, 255], np.uint8), "b": np.array([True, False]),
    "d": np.array([1.5, -2.25]), "h": np.array([1.5, -0.1], np.float16), "i8": np.array([-1, 3], np.int8),
    "i16": np.array([-1, 3], np.int16), "u16": np.array([1, 65535], np.uint16),
    "e": np.zeros((0, 3), np.float32), "sc": np.array(3.0, np.float32),
    "s": np.array([b"ab", b"c"], dtype=object),
    "big": np.arange(2_500_000, dtype=np.float32),  # three chunks of 1e6 elements
}


def _oracle(script: str, cwd: Path) -> str:
    """Run `script` on real Caffe2 (the oracle venv) in `cwd`; its stdout.  Skips without the venv."""
    if not ORACLE.exists():
        pytest.skip("no .venv-caffe2 (real Caffe2) to round-trip with")
    env = dict(os.environ, GLOG_minloglevel="2", OMP_NUM_THREADS="1")
    r = subprocess.run([str(ORACLE), "-c", textwrap.dedent(script)], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def _assert_same(got, want, name):
    if isinstance(want, np.ndarray) and want.dtype == object:
        assert [bytes(x) for x in np.asarray(got).reshape(-1)] == list(want.reshape(-1)), name
        return
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, got.shape)
    np.testing.assert_array_equal(got, want, err_msg=name)


def test_caffe2_save_loads_in_netviz(tmp_path):
    np.savez(tmp_path / "in.npz", **{k: v.astype("S") if v.dtype == object else v for k, v in BLOBS.items()})
    _oracle("""
        import numpy as np
        from caffe2.python import core, workspace
        d = np.load("in.npz")
        for k in d.files:
            workspace.FeedBlob(k, d[k].astype(object) if d[k].dtype.kind == "S" else d[k])
        workspace.RunOperatorOnce(core.CreateOperator(
            "Int8GivenTensorFill", [], ["q"], values=b"\\x01\\x02\\x80", shape=[3], Y_scale=0.5, Y_zero_point=128))
        workspace.RunOperatorOnce(core.CreateOperator("Save", list(d.files) + ["q"], [], db="c2.minidb",
                                                      db_type="minidb", absolute_path=1))
        with open("ser.bin", "wb") as f:
            for k in ("f", "i", "l", "d", "h", "s", "e", "sc"):
                b = workspace.SerializeBlob(k)
                f.write(len(b).to_bytes(4, "little") + b)
    """, tmp_path)
    ws = Workspace("t")
    ws.root_folder = str(tmp_path)
    run_op(create_operator("Load", [], [], db="c2.minidb", db_type="minidb", load_all=1), ws)
    for k, v in BLOBS.items():
        _assert_same(ws.values[k], v, k)
    q = ws.values["q"]
    assert isinstance(q, Int8Tensor) and q.data.tolist() == [1, 2, 128] and (q.scale, q.zero_point) == (0.5, 128)
    raw, pos = (tmp_path / "ser.bin").read_bytes(), 0
    for k in ("f", "i", "l", "d", "h", "s", "e", "sc"):  # SerializeBlob: byte-identical bytes
        n = int.from_bytes(raw[pos:pos + 4], "little")
        assert blobio.serialize_blob(k, BLOBS[k]) == raw[pos + 4:pos + 4 + n], k
        assert blobio.deserialize_blob(raw[pos + 4:pos + 4 + n])[0] == k
        pos += 4 + n


def test_netviz_save_loads_in_caffe2(tmp_path):
    ws = Workspace("t")
    ws.root_folder = str(tmp_path)
    for k, v in BLOBS.items():
        ws.feed_blob(k, v)
    ws.values["q"] = Int8Tensor(np.array([1, 2, 128], np.uint8), 0.5, 128)
    names = list(BLOBS) + ["q"]
    run_op(create_operator("Save", names, [], db="nv.minidb", db_type="minidb"), ws)
    _oracle("""
        import numpy as np
        from caffe2.python import core, workspace
        workspace.RunOperatorOnce(core.CreateOperator("Load", [], [], db="nv.minidb", db_type="minidb",
                                                      absolute_path=1, load_all=1))
        out = {k: workspace.FetchBlob(k) for k in workspace.Blobs() if k != "q"}
        out = {k: v.astype("S") if v.dtype == object else v for k, v in out.items()}
        q = workspace.FetchInt8Blob("q")
        out["q_data"], out["q_scale"], out["q_zp"] = q.data, np.array(q.scale), np.array(q.zero_point)
        np.savez("out.npz", **out)
    """, tmp_path)
    got = np.load(tmp_path / "out.npz")
    for k, v in BLOBS.items():
        _assert_same(got[k].astype(object) if got[k].dtype.kind == "S" else got[k], v, k)
    assert got["q_data"].tolist() == [1, 2, 128] and float(got["q_scale"]) == 0.5 and int(got["q_zp"]) == 128


def test_load_names_prefixes_and_missing_blob(tmp_path):
    ws = Workspace("t")
    ws.root_folder = str(tmp_path)
    ws.feed_blob("model/w", np.ones(3, np.float32))
    run_op(create_operator("Save", ["model/w"], [], db="m.db", db_type="minidb", strip_prefix="model/"), ws)
    # NOTE: add_prefix applies to the db's keys, so source_blob_names name prefixed keys (as in Caffe2)
    run_op(create_operator("Load", [], ["x/w"], db="m.db", db_type="minidb", add_prefix="x/",
                           source_blob_names=["x/w"]), ws)
    assert ws.values["x/w"].tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(ExecutionError, match="Expected to load 1 blobs, got 0 only"):
        run_op(create_operator("Load", [], ["x/w"], db="m.db", db_type="minidb", add_prefix="x/",
                               source_blob_names=["w"]), ws)
    with pytest.raises(ExecutionError, match="Expected to load 1 blobs, got 0 only"):
        run_op(create_operator("Load", [], ["nope"], db="m.db", db_type="minidb"), ws)
    with pytest.raises(ExecutionError, match="DB type 'leveldb' is not supported"):
        run_op(create_operator("Load", [], ["w"], db="m.db", db_type="leveldb"), ws)
    run_op(create_operator("DBExists", [], ["e"], db_name="m.db", db_type="minidb"), ws)
    assert bool(ws.values["e"])


def test_cli_init_net_loads_weights_from_a_minidb_beside_it(tmp_path, monkeypatch, capsys):
    """`netviz run model.pb --init init_net.pb`: the init net's Load finds params.minidb next to it."""
    from engine.model.modelio import save_net
    from netviz.cli import main
    from proto import caffe2_pb2

    w, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.array([0.5, -1.0], np.float32)
    blobio.write_minidb(tmp_path / "params.minidb", blobio.save_records([("w", w), ("b", b)]))
    init = caffe2_pb2.NetDef(name="init", op=[create_operator("Load", [], ["w", "b"], db="params.minidb",
                                                                db_type="minidb")])
    predict = caffe2_pb2.NetDef(name="predict", op=[create_operator("FC", ["x", "w", "b"], ["y"])],
                                external_input=["x", "w", "b"], external_output=["y"])
    save_net(init, tmp_path / "init_net.pb")
    save_net(predict, tmp_path / "predict_net.pb")
    np.save(tmp_path / "x.npy", np.ones((1, 3), np.float32))
    monkeypatch.chdir(ROOT)  # not the model's folder
    assert main(["run", str(tmp_path / "predict_net.pb"), "--init", str(tmp_path / "init_net.pb"),
                 "--input", f"x={tmp_path / 'x.npy'}", "--dump", str(tmp_path / "d")]) == 0
    assert np.load(tmp_path / "d" / "y@1.npy").tolist() == [[3.5, 11.0]]


def test_lmdb_round_trip_when_the_package_is_installed(tmp_path):
    pytest.importorskip("lmdb")
    ws = Workspace("t")
    ws.root_folder = str(tmp_path)
    for k in ("f", "i", "s"):
        ws.feed_blob(k, BLOBS[k])
    run_op(create_operator("Save", ["f", "i", "s"], [], db="m.lmdb", db_type="lmdb"), ws)
    back = Workspace("u")
    back.root_folder = str(tmp_path)
    run_op(create_operator("Load", [], [], db="m.lmdb", db_type="lmdb", load_all=1), back)
    for k in ("f", "i", "s"):
        _assert_same(back.values[k], BLOBS[k], k)


def test_checkpoint_and_its_old_name_snapshot_save_every_n_iterations(tmp_path):
    ws = Workspace("t")
    ws.root_folder = str(tmp_path)
    ws.feed_blob("w", np.ones(3, np.float32))
    for it in (3, 4):
        ws.feed_blob("it", np.array([it], np.int64))
        for t in ("Checkpoint", "Snapshot"):
            run_op(create_operator(t, ["it", "w"], [], db=f"{t}_%d.minidb", db_type="minidb", every=2), ws)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Checkpoint_4.minidb", "Snapshot_4.minidb"]
    # NOTE: Caffe2's Checkpoint is a Save of all its inputs: the iteration blob is in the db too
    assert [blobio.blob_name_of_key(k) for k, _ in blobio.read_minidb(tmp_path / "Checkpoint_4.minidb")] == ["it", "w"]


def test_tensor_protos_db_input_reads_a_queue_through_create_blobs_queue_db():
    from proto import caffe2_pb2

    ws = Workspace("t")
    run_op(create_operator("CreateBlobsQueue", [], ["q"], capacity=4, num_blobs=1), ws)
    for v in (1.5, 2.5):
        protos = caffe2_pb2.TensorProtos(protos=[blobio.tensor_proto("x", np.array([v], np.float32))])
        ws.values["rec"] = protos.SerializeToString()
        run_op(create_operator("EnqueueBlobs", ["q", "rec"], ["rec"]), ws)
    run_op(create_operator("CreateBlobsQueueDB", ["q"], ["db"]), ws)
    run_op(create_operator("TensorProtosDBInput", ["db"], ["x"], batch_size=2), ws)
    assert ws.values["x"].tolist() == [[1.5], [2.5]]
