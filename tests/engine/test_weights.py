"""Init-net values read in the wire format and viewed in the mapped file (issue #41): equal to
protobuf's own decoding bit for bit, on every fill type, random shapes and both encodings."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import ExecutionError, ModelError
from engine.model import modelio, valueref
from engine.model.opdef import args_of
from engine.model.tensorscan import encode_varint as _varint
from engine.runtime import executor
from engine.runtime.ops.python_op import TensorCPU
from engine.runtime.workspace import Workspace
from proto import caffe2_pb2

#: fill type -> (values field, a NumPy dtype that spans its values)
FILLS = {"GivenTensorFill": ("floats", np.float32), "GivenTensorDoubleFill": ("floats", np.float32),
         "GivenTensorIntFill": ("ints", np.int32), "GivenTensorInt64Fill": ("ints", np.int64),
         "GivenTensorInt16Fill": ("ints", np.int16), "GivenTensorBoolFill": ("ints", np.bool_),
         "Int8GivenIntTensorFill": ("ints", np.int32), "Int8GivenTensorFill": ("s", np.uint8),
         "GivenTensorByteStringToUInt8Fill": ("strings", np.uint8)}


def packed(field: str, values: np.ndarray) -> bytes:
    """The packed encoding of `values` as Argument `field`, made by protobuf itself (TensorProto's
    packed float_data / int64_data, re-tagged)."""
    if not values.size:
        return b"\x2a\x00" if field == "floats" else b"\x32\x00"
    if field == "floats":
        body = caffe2_pb2.TensorProto(float_data=values.tolist()).SerializeToString()
        assert body[0] == 0x1A
        return b"\x2a" + body[1:]
    body = caffe2_pb2.TensorProto(int64_data=values.astype(np.int64).tolist()).SerializeToString()
    assert body[0] == 0x52
    return b"\x32" + body[1:]


def fill_op_bytes(op_type: str, out: str, shape: tuple[int, ...], values: np.ndarray, encoding: str) -> bytes:
    """One OperatorDef: `values` in `encoding` ("packed", "unpacked" or "split": half packed, half not)."""
    field = FILLS[op_type][0]
    op = caffe2_pb2.OperatorDef(type=op_type, output=[out])
    op.arg.add(name="shape", ints=list(shape))
    arg = caffe2_pb2.Argument(name="values")
    tail = b""
    if field == "s":
        arg.s = values.tobytes()
    elif field == "strings":
        arg.strings.append(values.tobytes())
    elif encoding == "unpacked":
        getattr(arg, field).extend(values.tolist())
    elif encoding == "packed":
        tail = packed(field, values)
    else:
        half = values.size // 2
        getattr(arg, field).extend(values[:half].tolist())
        tail = packed(field, values[half:])
    op.arg.append(arg)
    raw = op.SerializeToString()
    if tail:  # NOTE: the values arg is the last field: append the packed field inside it
        arg_bytes = arg.SerializeToString()
        assert raw.endswith(arg_bytes)
        body = arg_bytes + tail
        raw = raw[: -len(arg_bytes) - 1 - len(_varint(len(arg_bytes)))] + b"\x2a" + _varint(len(body)) + body
    return raw


def net_bytes(ops: list[bytes], name: str = "init") -> bytes:
    return caffe2_pb2.NetDef(name=name).SerializeToString() + b"".join(b"\x12" + _varint(len(o)) + o for o in ops)


def protobufs_values(op: caffe2_pb2.OperatorDef, op_type: str) -> np.ndarray:
    """What protobuf's own decoding gives for the op's values, as the scanner's dtype."""
    arg = next(a for a in op.arg if a.name == "values")
    field = FILLS[op_type][0]
    if field == "floats":
        return np.array(arg.floats, np.float32)
    if field == "ints":
        return np.array(arg.ints, np.int64)
    return np.frombuffer(arg.s if field == "s" else arg.strings[0], np.uint8)


def _random_values(draw, op_type: str, n: int) -> np.ndarray:
    dtype = FILLS[op_type][1]
    if dtype == np.float32:
        return np.array(draw(st.lists(st.floats(width=32, allow_nan=True), min_size=n, max_size=n)), np.float32)
    if dtype == np.bool_:
        return np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), np.int64)
    info = np.iinfo(dtype)
    return np.array(draw(st.lists(st.integers(int(info.min), int(info.max)), min_size=n, max_size=n)), dtype)


@st.composite
def fill_cases(draw) -> tuple[str, tuple[int, ...], np.ndarray, str]:
    op_type = draw(st.sampled_from(sorted(FILLS)))
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=0, max_size=3)))
    encoding = draw(st.sampled_from(["packed", "unpacked", "split"]))
    return op_type, shape, _random_values(draw, op_type, int(np.prod(shape, dtype=np.int64))), encoding


@settings(max_examples=200, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(fill_cases(), min_size=1, max_size=4), st.booleans())
def test_values_equal_protobufs_decoding_bit_for_bit(tmp_path_factory, cases, quick: bool) -> None:
    """Both opens: the full one (`netviz run`) and the quick one (the TUI: tags checked near the runs' ends,
    varints counted)."""
    path = tmp_path_factory.mktemp("w") / "init_net.pb"
    path.write_bytes(net_bytes([fill_op_bytes(t, f"b{i}", s, v, e) for i, (t, s, v, e) in enumerate(cases)]))
    reference = caffe2_pb2.NetDef.FromString(path.read_bytes())
    net = valueref.load_binary_net(path, min_bytes=0, parse=modelio._parse_binary, quick=quick)
    for i, (op_type, _, _, _) in enumerate(cases):
        got, want = args_of(net.op[i])["values"], protobufs_values(reference.op[i], op_type)
        if isinstance(got, list):  # no values field at all (empty, unpacked): nothing to cut
            assert got == [] and want.size == 0
            continue
        assert not got.flags.writeable
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()  # NOTE: bits, NaN payloads too
    ws = Workspace("weights")
    executor.run_net(net, ws)
    old = Workspace("protobuf")
    executor.run_net(reference, old)
    for i in range(len(cases)):
        a, b = ws.values[f"b{i}"], old.values[f"b{i}"]
        a, b = (v if isinstance(v, np.ndarray) else v.data for v in (a, b))  # Int8Tensor: its data
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _init(tmp_path: Path, ops: list[bytes], name: str = "init_net.pb") -> Path:
    path = tmp_path / name
    path.write_bytes(net_bytes(ops))
    return path


def _load(path: Path) -> caffe2_pb2.NetDef:
    return valueref.load_binary_net(path, min_bytes=0, parse=modelio._parse_binary)


def test_floats_view_the_file_and_a_write_copies(tmp_path: Path) -> None:
    values = np.arange(24, dtype=np.float32)
    path = _init(tmp_path, [fill_op_bytes("GivenTensorFill", "w", (4, 6), values, "unpacked")])
    ws = Workspace("cow")
    executor.run_net(_load(path), ws)
    w = ws.values["w"]
    assert not w.flags.writeable and not w.flags.owndata  # a view of the mapped file
    data = TensorCPU(ws, "w").data  # a Python op's in-place write gets a copy, the file stays
    data[...] = 7
    assert (ws.values["w"] == 7).all() and (w.reshape(-1) == values).all()
    assert args_of(_load(path).op[0])["values"].tobytes() == values.tobytes()


@pytest.mark.parametrize("mangle, expected", [
    (lambda b: b[:-3], "truncated"),
    (lambda b: b.replace(b"\x30\x02\x30\x03", b"\x30\x02\x30\x04"), "6 values for shape (2, 4) (8 expected)"),
])
def test_bad_values_are_one_line_naming_op_and_blob(tmp_path: Path, mangle, expected: str) -> None:
    good = net_bytes([fill_op_bytes("GivenTensorFill", "conv1_w", (2, 3), np.ones(6, np.float32), "packed")])
    path = tmp_path / "init_net.pb"
    path.write_bytes(mangle(good))
    with pytest.raises(ModelError) as e:
        _load(path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(path)) and expected in msg, msg
    assert "GivenTensorFill 'conv1_w'" in msg, msg


def test_unknown_dtype_is_named(tmp_path: Path) -> None:
    op = caffe2_pb2.OperatorDef.FromString(fill_op_bytes("GivenTensorFill", "w", (2,), np.ones(2, np.float32), "packed"))
    op.arg.add(name="dtype", i=99)
    path = _init(tmp_path, [op.SerializeToString()])
    with pytest.raises(ModelError, match=r"op #0 GivenTensorFill 'w': unknown dtype 99"):
        _load(path)


def test_a_length_past_the_end_allocates_nothing(tmp_path: Path) -> None:
    """A values field that claims 2**40 bytes is refused from its header, before anything is read."""
    arg = caffe2_pb2.Argument(name="values").SerializeToString() + b"\x2a" + _varint(1 << 40) + b"\0" * 8
    op = caffe2_pb2.OperatorDef(type="GivenTensorFill", output=["w"]).SerializeToString()
    path = _init(tmp_path, [op + b"\x2a" + _varint(len(arg)) + arg])
    with pytest.raises(ModelError, match="truncated"):
        _load(path)


def test_save_net_writes_the_files_bytes_back(tmp_path: Path) -> None:
    values = np.linspace(-1, 1, 300, dtype=np.float32)
    path = _init(tmp_path, [fill_op_bytes("GivenTensorFill", "w", (300,), values, "unpacked"),
                            fill_op_bytes("GivenTensorInt64Fill", "i", (300,), np.arange(300) - 150, "packed")])
    net = _load(path)
    out = modelio.save_net(net, tmp_path / "copy.pb")
    again = caffe2_pb2.NetDef.FromString(out.read_bytes())
    assert np.array(again.op[0].arg[1].floats, np.float32).tobytes() == values.tobytes()
    assert list(again.op[1].arg[1].ints) == list(range(-150, 150))
    text = modelio.load_net(modelio.save_net(net, tmp_path / "copy.pbtxt"))
    assert np.array(text.op[0].arg[1].floats, np.float32).tobytes() == values.tobytes()


def test_big_binary_files_take_the_scanner(tmp_path: Path) -> None:
    values = np.random.default_rng(0).standard_normal(modelio.SCAN_MIN_BYTES // 4).astype(np.float32)
    path = _init(tmp_path, [fill_op_bytes("GivenTensorFill", "w", (values.size,), values, "packed")])
    arg = modelio.load_net(path).op[0].arg[1]
    assert not len(arg.floats) and valueref.referenced_count(arg) == values.size


def test_empty_init_file_is_an_empty_netdef(tmp_path: Path) -> None:
    """#42 item 6: Glow ships a 0-byte init net; Caffe2 reads it as an empty NetDef."""
    predict = tmp_path / "predict_net.pbtxt"
    predict.write_text('name: "p"\nop { type: "Relu" input: "X" output: "Y" }\nexternal_input: "X"\n')
    (tmp_path / "init_net.pb").write_bytes(b"")
    model = modelio.load_model(predict)
    assert model.init == caffe2_pb2.NetDef() and len(model.predict.op) == 1
    with pytest.raises(ModelError, match="empty"):  # a predict net still must say something
        modelio.load_net(tmp_path / "init_net.pb")


def test_a_changed_file_is_an_error_not_garbage(tmp_path: Path) -> None:
    values = np.ones(100, np.float32)
    path = _init(tmp_path, [fill_op_bytes("GivenTensorFill", "w", (100,), values, "packed")])
    net = _load(path)
    valueref._maps.clear()
    path.write_bytes(path.read_bytes() + b"\x0a\x01x")
    with pytest.raises((ModelError, ExecutionError), match="changed on disk"):
        executor.run_net(net, Workspace("changed"))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.int16, np.bool_, np.uint8])
def test_arrays_become_arguments_through_their_buffers(dtype) -> None:
    """make_argument writes an array as packed bytes; the values equal those of protobuf's own lists."""
    from engine.model.opdef import make_argument  # noqa: PLC0415

    rng = np.random.default_rng(3)
    a = (rng.standard_normal(1000) * 1e6).astype(dtype) if dtype != np.bool_ else rng.random(1000) > 0.5
    got = make_argument("values", a)
    want = caffe2_pb2.Argument(name="values")
    if a.dtype.kind == "f":
        want.floats.extend(a.tolist())
    else:
        want.ints.extend(int(v) for v in a.tolist())
    assert got == want


def write_sparse_embedding(path: Path, rows: int, dim: int, marked: tuple[int, ...]) -> Path:
    """An init net of one packed GivenTensorFill ``emb`` (rows, dim), written sparse: zeros but for the
    `marked` rows, which hold 0..dim-1 (the file's size costs no disk)."""
    n_bytes = rows * dim * 4
    op = caffe2_pb2.OperatorDef(type="GivenTensorFill", output=["emb"])
    op.arg.add(name="shape", ints=[rows, dim])
    values_head = caffe2_pb2.Argument(name="values").SerializeToString() + b"\x2a" + _varint(n_bytes)
    op_head = op.SerializeToString() + b"\x2a" + _varint(len(values_head) + n_bytes) + values_head
    with open(path, "wb") as f:
        f.write(caffe2_pb2.NetDef(name="init").SerializeToString() + b"\x12" + _varint(len(op_head) + n_bytes)
                + op_head)
        data_at = f.tell()
        for row in marked:
            f.seek(data_at + row * dim * 4)
            f.write(np.arange(dim, dtype="<f4").tobytes())
        f.truncate(data_at + n_bytes)
    return path


@pytest.mark.slow
def test_a_3_gib_embedding_opens_and_its_first_op_runs(tmp_path: Path) -> None:
    """Past protobuf's 2 GiB limit: one GivenTensorFill of 3 GiB (a sparse file: zeros but for two
    rows) opens through the scanner, and a Gather reads its rows without reading the table."""
    import resource  # noqa: PLC0415

    rows, dim = (3 << 30) // (4 * 64), 64
    init = write_sparse_embedding(tmp_path / "init_net.pb", rows, dim, (7, rows - 1))
    assert init.stat().st_size > 3 << 30
    if init.stat().st_blocks * 512 > 1 << 30:
        pytest.skip("this filesystem does not keep sparse files sparse")
    predict = tmp_path / "predict_net.pbtxt"
    predict.write_text('name: "lookup"\nop { type: "Gather" input: "emb" input: "ids" output: "rows" }\n'
                       'external_input: "emb"\nexternal_input: "ids"\n')
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    model = modelio.load_model(predict, init=init)
    ws = Workspace("embedding")
    executor.run_net(model.init, ws)
    ws.values["ids"] = np.array([7, rows - 1, 0], np.int64)
    executor.run_op(model.predict.op[0], ws)
    got = ws.values["rows"]
    assert ws.values["emb"].shape == (rows, dim)
    assert (got[0] == np.arange(dim)).all() and (got[1] == np.arange(dim)).all() and not got[2].any()
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024 < 256 << 20


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.float16, np.uint8, np.bool_])
def test_saved_tensors_load_back_from_their_bytes(dtype) -> None:
    """Save's TensorProto data written from the array's buffer and read back from the serialized bytes
    (big tensors skip protobuf's per-value lists both ways): the same values, in chunks too."""
    from engine.runtime import blobio  # noqa: PLC0415

    rng = np.random.default_rng(5)
    a = (rng.standard_normal((30, 300)) * 1e4).astype(dtype) if dtype != np.bool_ else rng.random((30, 300)) > 0.5
    records = list(blobio.save_records([("w", a)], chunk_size=4000))
    assert len(records) == 3
    got = blobio.load_blobs(records)["w"]
    assert got.dtype == a.dtype and got.shape == a.shape and got.tobytes() == a.tobytes()
    assert got.flags.writeable


#: Caffe2 1.10.2's answers (oracle venv, Save of a and b then a tail appended): (tail, Load a, load_all)
_MINIDB_TAILS = [(b"\x05\x00\x00", True, True),  # < 4 bytes: the end of the DB (fread of a key length)
                 (b"\x05\x00\x00\x00\x01", True, False),  # a cut value length: load_all fails, Load a stops before
                 (b"\x01\x00\x00\x00\x01\x00\x00\x00k", True, False)]  # a cut value


@pytest.mark.parametrize("tail, one_loads, all_loads", _MINIDB_TAILS)
def test_load_reads_a_minidb_record_by_record_as_caffe2(tmp_path: Path, tail: bytes, one_loads: bool,
                                                         all_loads: bool) -> None:
    """Load reads records as it needs them (a DB bigger than memory loads) and stops once it has its
    blobs, so a bad tail after them is never read, as in Caffe2."""
    from engine.model.opdef import create_operator  # noqa: PLC0415

    ws = Workspace("db")
    ws.values["a"], ws.values["b"] = np.arange(6, dtype=np.float32), np.ones(3, np.float32)
    db = str(tmp_path / "w.minidb")
    executor.run_op(create_operator("Save", ["a", "b"], [], db=db, db_type="minidb", absolute_path=1), ws)
    Path(db).write_bytes(Path(db).read_bytes() + tail)
    for outputs, loads, extra in ((["a"], one_loads, {}), (["a", "b"], all_loads, {"load_all": 1})):
        fresh = Workspace("load")
        op = create_operator("Load", [], outputs, db=db, db_type="minidb", absolute_path=1, **extra)
        if loads:
            executor.run_op(op, fresh)
            assert fresh.values["a"].tolist() == list(range(6))
        else:
            with pytest.raises(ExecutionError, match="minidb"):
                executor.run_op(op, fresh)


def test_only_the_values_argument_is_walked_and_one_named_last_is_still_cut(tmp_path: Path, monkeypatch) -> None:
    """The scan reads an argument's first field, its name, and walks only one named "values" (the TUI's
    first frame walks ~160 ops of a trained ResNet-50); an argument whose name comes after its values
    (any field order is valid protobuf) is walked too, and its values are still referenced, right."""
    from engine.model import tensorscan  # noqa: PLC0415

    values = np.arange(600, dtype=np.float32)
    op = caffe2_pb2.OperatorDef(type="GivenTensorFill", output=["w"])
    op.arg.add(name="shape", ints=[20, 30])
    op.arg.add(name="extra", ints=list(range(100)))
    arg = caffe2_pb2.Argument(floats=values.tolist())
    name_last = b"\x2a" + _varint(len(raw := arg.SerializeToString() + b"\x0a\x06values")) + raw
    path = tmp_path / "init.pb"
    path.write_bytes(net_bytes([op.SerializeToString() + name_last, fill_op_bytes("GivenTensorFill", "v", (600,),
                                                                                 values, "unpacked")]))
    walked: list[int] = []
    pieces = tensorscan._arg_pieces

    def counted(buf, start, end, field_name, quick=False):
        walked.append(start)
        return pieces(buf, start, end, field_name, quick)

    monkeypatch.setattr(tensorscan, "_arg_pieces", counted)
    net = valueref.load_binary_net(path, parse=modelio._parse_binary, quick=True)
    assert len(walked) == 2  # NOTE: w's values (name last) and v's; not shape, not extra
    assert [valueref.referenced_count(a) for o in net.op for a in o.arg] == [None, None, 600, None, 600]
    for o in net.op:
        got = args_of(o)
        np.testing.assert_array_equal(np.asarray(got["values"]).reshape(-1), values)
    assert list(args_of(net.op[0])["extra"]) == list(range(100))
