"""Counters, indexes and maps serialize as in Caffe2; Save's chunking/options and Load's errors (issue #16).

Bytes and values are compared with real Caffe2 (the oracle venv, in a subprocess; skipped without it).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.runtime import blobio
from engine.errors import ExecutionError
from engine.runtime.executor import run_op
from engine.model.opdef import create_operator
from engine.runtime.ops.stateful import UnorderedMap
from engine.caffe2.workspace import Workspace
from proto import caffe2_pb2
from tests.engine.test_db_ops import _oracle

ROOT = Path(__file__).resolve().parents[2]

#: Blobs made by ops on both sides: (name, [(op type, inputs, args)]); inputs fed first.
FEEDS = {"keys": np.array([7, -3, 40, 7, 12], np.int64), "vals": np.array([1, 2, 3, 4, 5], np.int32),
         "ikeys": np.array([5, 9, 2], np.int32), "skeys": np.array([b"b", b"a"], dtype=object)}
MAKERS = [
    ("counter", [("CreateCounter", [], {"init_count": 5}), ("CountDown", ["counter"], {})]),
    ("iidx", [("IntIndexCreate", [], {"max_elements": 10}), ("IndexGet", ["iidx", "ikeys"], {}),
              ("IndexFreeze", ["iidx"], {})]),
    ("sidx", [("StringIndexCreate", [], {}), ("IndexGet", ["sidx", "skeys"], {})]),
    ("map", [("KeyValueToMap", ["keys", "vals"], {})]),
]


def _netviz_blobs() -> Workspace:
    ws = Workspace("t")
    for k, v in FEEDS.items():
        ws.feed_blob(k, v)
    for name, ops in MAKERS:
        for op_type, ins, args in ops:
            out = [name] if op_type != "IndexGet" and op_type != "CountDown" else ["_out"]
            run_op(create_operator(op_type, ins, out, **args), ws)
    return ws


def _feed_script() -> str:
    feeds = {k: ([x.decode() for x in v] if v.dtype == object else v.tolist(), str(v.dtype)) for k, v in FEEDS.items()}
    return f"""
        import json, numpy as np
        from caffe2.python import core, workspace
        for k, (v, t) in json.loads({json.dumps(feeds)!r}).items():
            workspace.FeedBlob(k, np.array([x.encode() for x in v], dtype=object) if t == "object" else np.array(v, t))
        for name, ops in json.loads({json.dumps(MAKERS)!r}):
            for op_type, ins, args in ops:
                out = [name] if op_type not in ("IndexGet", "CountDown") else ["_out"]
                workspace.RunOperatorOnce(core.CreateOperator(op_type, ins, out, **args))
    """


def test_serialize_blob_is_byte_identical_and_loads_both_ways(tmp_path):
    out = _oracle(_feed_script() + """
        first = {n: workspace.SerializeBlob(n) for n in ("counter", "iidx", "sidx", "map")}
        workspace.SwitchWorkspace("again", True)
        for n, b in first.items():
            workspace.DeserializeBlob(n, b)
        print(json.dumps([{n: b.hex() for n, b in first.items()},
                          {n: workspace.SerializeBlob(n).hex() for n in first}]))
    """, tmp_path)
    first, again = ({k: bytes.fromhex(v) for k, v in d.items()} for d in json.loads(out.strip().splitlines()[-1]))
    ws = _netviz_blobs()
    for name, want in first.items():
        assert blobio.serialize_blob(name, ws.values[name]) == want, name
        # Caffe2's bytes -> netviz value -> bytes, as in Caffe2 (a loaded map re-inserts: new order)
        assert blobio.serialize_blob(name, blobio.deserialize_blob(want)[1]) == again[name], name
    caffe2_bytes = first
    assert ws.values["counter"].value == 4 and blobio.deserialize_blob(caffe2_bytes["counter"])[1].value == 4
    assert isinstance(blobio.deserialize_blob(caffe2_bytes["map"])[1], UnorderedMap)
    # netviz's bytes load in Caffe2, and the loaded blobs act the same there
    blobs = {n: blobio.serialize_blob(n, ws.values[n]).hex() for n in ("counter", "iidx", "map")}
    got = _oracle(f"""
        import json, numpy as np
        from caffe2.python import core, workspace
        for n, h in json.loads({json.dumps(blobs)!r}).items():
            workspace.DeserializeBlob(n, bytes.fromhex(h))
        workspace.RunOperatorOnce(core.CreateOperator("RetrieveCount", ["counter"], ["c"]))
        workspace.FeedBlob("q", np.array([2, 5, 77], np.int32))
        workspace.RunOperatorOnce(core.CreateOperator("IndexGet", ["iidx", "q"], ["ids"]))
        workspace.RunOperatorOnce(core.CreateOperator("MapToKeyValue", ["map"], ["k", "v"]))
        print(json.dumps([int(workspace.FetchBlob("c")), workspace.FetchBlob("ids").tolist(),
                          workspace.FetchBlob("k").tolist(), workspace.FetchBlob("v").tolist()]))
    """, tmp_path)
    count, ids, keys, vals = json.loads(got.strip().splitlines()[-1])
    assert count == 4 and ids == [3, 1, 0]  # frozen index: an unknown key is 0
    reloaded = blobio.deserialize_blob(blobio.serialize_blob("map", ws.values["map"]))[1]
    assert [keys, vals] == [a.tolist() for a in reloaded.arrays()]


def test_map_iteration_order_matches_libstdcxx_through_rehashes(tmp_path):
    sizes = (5, 13, 14, 29, 60, 200, 6000)  # 6000 keys: past 4349 buckets
    out = _oracle(f"""
        import json, numpy as np
        from caffe2.python import core, workspace
        res = []
        for n in {sizes!r}:
            k = np.random.RandomState(n).randint(-100, 5000, n).astype(np.int64)
            workspace.FeedBlob("k", k); workspace.FeedBlob("v", np.arange(n, dtype=np.int64))
            workspace.RunOperatorOnce(core.CreateOperator("KeyValueToMap", ["k", "v"], ["m%d" % n]))
            workspace.RunOperatorOnce(core.CreateOperator("MapToKeyValue", ["m%d" % n], ["ko", "vo"]))
            res.append(workspace.FetchBlob("ko").tolist())
        print(json.dumps(res))
    """, tmp_path)
    for n, want in zip(sizes, json.loads(out.strip().splitlines()[-1])):
        m = UnorderedMap(np.dtype(np.int64), np.dtype(np.int64))
        for i, key in enumerate(np.random.RandomState(n).randint(-100, 5000, n).tolist()):
            m.emplace(key, i)
        assert m.keys() == want, n


def _minidb_chunks(path: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for key, _ in blobio.read_minidb(path):
        counts[blobio.blob_name_of_key(key)] = counts.get(blobio.blob_name_of_key(key), 0) + 1
    return counts


def test_save_chunk_size_and_options_pick_chunks_per_blob(tmp_path):
    ws = Workspace("t")
    ws.root_folder = str(tmp_path)
    for name in ("int16_data", "uint16_data", "float16_data", "int64_data"):
        ws.feed_blob(name, np.arange(100).astype(name.split("_")[0]))
    names = list(ws.values)
    opts = caffe2_pb2.SerializationOptions(options=[
        caffe2_pb2.BlobSerializationOptions(blob_name_regex="int16_data", chunk_size=10),
        caffe2_pb2.BlobSerializationOptions(blob_name_regex=".*16_data", chunk_size=20),
        caffe2_pb2.BlobSerializationOptions(blob_name_regex="float16_data", chunk_size=30)])
    run_op(create_operator("Save", names, [], db="o.db", db_type="minidb", chunk_size=40, options=opts), ws)
    # first matching regex wins (full match); chunk_size is the catch-all after the options
    assert _minidb_chunks(tmp_path / "o.db") == {"int16_data": 10, "uint16_data": 5, "float16_data": 5,
                                                 "int64_data": 3}
    for chunk, want in ((-1, 1), (0, 1), (7, 15)):   # -1: default 1e6 elements, 0: no chunking
        run_op(create_operator("Save", ["int64_data"], [], db=f"c{chunk}.db", db_type="minidb",
                               chunk_size=chunk), ws)
        assert _minidb_chunks(tmp_path / f"c{chunk}.db") == {"int64_data": want}
    run_op(create_operator("Load", [], ["int64_data"], db="c7.db", db_type="minidb"), ws)
    assert ws.values["int64_data"].tolist() == list(range(100))


@pytest.mark.parametrize("op_type, ins, outs, args, message", [
    ("Save", ["a", "a"], [], {"db": "x.db"}, "Duplicated input: a"),
    ("Save", ["a"], [], {"db": "x.db", "strip_prefix": "p", "blob_name_overrides": ["z"]}, "mutually exclusive"),
    ("Save", ["a", "b"], [], {"db": "x.db", "blob_name_overrides": ["z"]}, "blob_name_overrides mismatch"),
    ("Load", [], ["a", "a"], {"db": "s.db"}, "Duplicated source blob name: a"),
    ("Load", [], ["a"], {"dbs": ["s.db", "s.db"]}, "Duplicated db name: s.db"),
    ("Load", [], ["a"], {"dbs": ["s.db", "t.db"]}, "Duplicate Key a is found"),
    ("Load", [], [], {"dbs": ["s.db", "t.db"], "load_all": 1}, "Duplicate Key a is found"),
    ("Load", [], ["zz"], {"db": "s.db", "load_all": 1}, "Output blob name zz does not exist"),
    ("Load", [], ["a", "zz"], {"db": "s.db"}, "Expected to load 2 blobs, got 1 only"),
    ("Load", [], ["a"], {"db": "s.db", "source_blob_names": ["a"], "strip_prefix": "x"}, "mutually exclusive"),
])
def test_load_and_save_raise_runtime_error_where_caffe2_does(tmp_path, op_type, ins, outs, args, message):
    ws = Workspace("t")
    ws.root_folder = str(tmp_path)
    ws.feed_blob("a", np.ones(3, np.float32))
    ws.feed_blob("b", np.zeros(2, np.int32))
    for db in ("s.db", "t.db"):
        run_op(create_operator("Save", ["a", "b"], [], db=db, db_type="minidb"), ws)
    with pytest.raises(RuntimeError, match=message) as e:
        run_op(create_operator(op_type, ins, outs, db_type="minidb", **args), ws)
    assert isinstance(e.value, ExecutionError) and "\n" not in str(e.value)


def test_load_allow_incomplete_keeps_missing_outputs(tmp_path):
    ws = Workspace("t")
    ws.root_folder = str(tmp_path)
    ws.feed_blob("a", np.ones(3, np.float32))
    run_op(create_operator("Save", ["a"], [], db="s.db", db_type="minidb"), ws)
    ws.feed_blob("keep", np.array([9], np.int32))
    run_op(create_operator("Load", [], ["a", "keep"], db="s.db", db_type="minidb", allow_incomplete=True), ws)
    assert ws.values["keep"].tolist() == [9] and ws.values["a"].tolist() == [1, 1, 1]


def test_estimate_all_blob_sizes_matches_caffe2(tmp_path):
    out = _oracle("""
        import json, numpy as np
        from caffe2.python import core, workspace
        workspace.FeedBlob("f", np.zeros(10, np.float32))
        workspace.FeedBlob("u", np.zeros(2500, np.uint16))
        workspace.FeedBlob("s", np.array([b"ab", b"c"], dtype=object))
        workspace.FeedBlob("st", "hello")
        workspace.FeedBlob("e", np.zeros(0, np.float32))
        workspace.RunOperatorOnce(core.CreateOperator("CreateCounter", [], ["c"]))
        opts = core.caffe2_pb2.SerializationOptions(options=[
            core.caffe2_pb2.BlobSerializationOptions(blob_name_regex="u", chunk_size=1000)])
        workspace.RunOperatorOnce(core.CreateOperator("EstimateAllBlobSizes", [], ["n", "z"], options=opts))
        print(json.dumps(dict(zip([x.decode() for x in workspace.FetchBlob("n")],
                                  workspace.FetchBlob("z").tolist()))))
    """, tmp_path)
    want = json.loads(out.strip().splitlines()[-1])
    ws = Workspace("t")
    for k, v in (("f", np.zeros(10, np.float32)), ("u", np.zeros(2500, np.uint16)),
                 ("s", np.array([b"ab", b"c"], dtype=object)), ("st", b"hello"), ("e", np.zeros(0, np.float32))):
        ws.feed_blob(k, v)
    run_op(create_operator("CreateCounter", [], ["c"]), ws)
    opts = caffe2_pb2.SerializationOptions(options=[
        caffe2_pb2.BlobSerializationOptions(blob_name_regex="u", chunk_size=1000)])
    run_op(create_operator("EstimateAllBlobSizes", [], ["n", "z"], options=opts), ws)
    got = dict(zip([x.decode() for x in ws.values["n"]], ws.values["z"].tolist()))
    assert got == want


GOLDEN = ROOT / "tests" / "golden" / "serialized" / "blobs.json"


@pytest.mark.parametrize("case", sorted(json.loads(GOLDEN.read_text())))
def test_serialized_cpp_object_blobs_match_caffe2_golden(case):
    """tests/oracle/gen_serialized_blobs.py: Caffe2's SerializeBlob bytes of counters, indexes, maps
    and tree cursors; netviz builds the same blob, serializes it byte-identically, and its
    DeserializeBlob + SerializeBlob round trip gives Caffe2's second bytes too."""
    g = json.loads(GOLDEN.read_text())[case]
    ws = Workspace("t")
    for name, values in g["feeds"].items():
        dtype = g["dtypes"][name]
        ws.feed_blob(name, np.array([v.encode() for v in values], dtype=object) if dtype == "object"
                     else np.array(values, dtype=dtype))
    for op_type, ins, outs, args in g["ops"]:
        run_op(create_operator(op_type, ins, outs, **args), ws)
    assert blobio.serialize_blob(g["blob"], ws.values[g["blob"]]).hex() == g["serialized"]
    name, value = blobio.deserialize_blob(bytes.fromhex(g["serialized"]))
    assert name == g["blob"] and blobio.serialize_blob(name, value).hex() == g["reserialized"]
