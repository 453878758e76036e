"""Fuzzing the loaders: every mangled file is a NetDef or one ModelError line naming the file.

A fixed-seed run of ``NETVIZ_FUZZ_N`` inputs (default 10,000) runs in CI; set a larger number for a
longer run: ``NETVIZ_FUZZ_N=1000000 .venv/bin/pytest tests/test_fuzz_loaders.py``.
"""
from __future__ import annotations

import io
import os
import random
from contextlib import redirect_stderr
from pathlib import Path

import pytest
from google.protobuf import text_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import ModelError
from engine.model.modelio import parse_net
from netviz.cli import main
from proto import caffe2_pb2
from tests.conftest import zoo_nets

FUZZ_N = int(os.environ.get("NETVIZ_FUZZ_N", "10000"))


def _seed_corpus() -> list[bytes]:
    """Real nets as text and binary: the zoo, plus a small hand-made net with a subnet."""
    net = caffe2_pb2.NetDef(name="seed", external_input=["X"], external_output=["Y"])
    op = net.op.add(type="If", input=["c", "X"], output=["Y"])
    sub = op.arg.add(name="then_net").n
    sub.op.add(type="Relu", input=["X"], output=["Y"])
    corpus = [net.SerializeToString(), text_format.MessageToString(net).encode()]
    for path in zoo_nets()[:4]:
        data = path.read_bytes()[:3000]
        corpus.append(data)
        try:
            corpus.append(parse_net(path.read_bytes(), str(path)).SerializeToString()[:3000])
        except ModelError:
            pass
    return corpus


def _mutate(rng: random.Random, data: bytes) -> bytes:
    """One random mutation: bit flips, truncation, insertion, deletion, splice or NUL bytes."""
    b = bytearray(data)
    kind = rng.randrange(6)
    if kind == 0 and b:
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    elif kind == 1:
        del b[rng.randrange(len(b) + 1):]
    elif kind == 2:
        at = rng.randrange(len(b) + 1)
        b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    elif kind == 3 and b:
        at = rng.randrange(len(b))
        del b[at:at + rng.randint(1, 64)]
    elif kind == 4 and len(b) > 2:
        at, src = rng.randrange(len(b)), rng.randrange(len(b))
        b[at:at] = b[src:src + rng.randint(1, 128)]
    else:
        at = rng.randrange(len(b) + 1)
        b[at:at] = b"\x00" * rng.randint(1, 4)
    return bytes(b)


def _check_one(data: bytes, name: str = "fuzz.pb") -> None:
    try:
        net = parse_net(data, name)
    except ModelError as e:
        msg = str(e)
        assert msg.startswith(name) and "\n" not in msg, msg
    else:
        assert isinstance(net, caffe2_pb2.NetDef)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_fixed_seed_mutation_fuzz() -> None:
    rng = random.Random(20261122)
    corpus = _seed_corpus()
    for _ in range(FUZZ_N):
        _check_one(_mutate(rng, rng.choice(corpus)))


@settings(max_examples=300, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=512))
def test_arbitrary_bytes(data: bytes) -> None:
    _check_one(data)


@settings(max_examples=300, derandomize=True)
@given(st.text(max_size=300))
def test_arbitrary_text(text: str) -> None:
    _check_one(text.encode("utf-8", "surrogatepass"), "fuzz.pbtxt")


def _nested(depth: int) -> caffe2_pb2.NetDef:
    net = caffe2_pb2.NetDef(name="leaf")
    for k in range(depth):
        outer = caffe2_pb2.NetDef(name=f"n{k}")
        outer.op.add(type="Do", input=["x"], output=["x"]).arg.add(name="net").n.CopyFrom(net)
        net = outer
    return net


@pytest.mark.parametrize("depth", [40, 400])
def test_deeply_nested_subnets(depth: int) -> None:
    try:
        binary = _nested(depth).SerializeToString()
    except RecursionError:
        pytest.skip("protobuf cannot even serialize this depth")
    _check_one(binary)
    _check_one(b'name: "x"\n' + b"op { arg { n { " * depth + b"} } }" * depth, "deep.pbtxt")


def test_huge_repeated_field() -> None:
    net = caffe2_pb2.NetDef(name="big")
    net.op.add(type="GivenTensorFill", output=["w"]).arg.add(name="values", floats=[0.5] * 1_000_000)
    parsed = parse_net(net.SerializeToString(), "big.pb")
    assert len(parsed.op[0].arg[0].floats) == 1_000_000


def test_non_utf8_and_nul_names(tmp_path: Path) -> None:
    net = caffe2_pb2.NetDef(name="x")
    net.op.add(type="Relu", input=["a\x00b"], output=["é"])
    data = net.SerializeToString()
    assert parse_net(data, "ok.pb").op[0].input[0] == "a\x00b"
    _check_one(data.replace("é".encode(), b"\xff\xfe"))


@pytest.mark.parametrize("seed", range(30))
def test_cli_exit_code_on_mutants(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    path = tmp_path / "m.pb"
    path.write_bytes(_mutate(rng, rng.choice(_seed_corpus())))
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout_null():
        code = main(["info", str(path)])
    assert code in (0, 2)
    if code == 2:
        assert err.getvalue().count("\n") == 1 and str(path) in err.getvalue()


def redirect_stdout_null():  # noqa: ANN201
    from contextlib import redirect_stdout
    return redirect_stdout(io.StringIO())


# ---- the init-net scanner (engine/model/tensorscan.py, issue #41) ----------------------------
def _init_seeds() -> list[bytes]:
    """Init nets holding every fill type, packed, unpacked and split, as the scanner sees them."""
    import numpy as np  # noqa: PLC0415

    from tests.engine.test_weights import FILLS, fill_op_bytes, net_bytes  # noqa: PLC0415

    rng = np.random.default_rng(41)
    seeds = []
    for encoding in ("packed", "unpacked", "split"):
        ops = []
        for k, (op_type, (_, dtype)) in enumerate(sorted(FILLS.items())):
            values = (rng.standard_normal(6).astype(np.float32) if dtype == np.float32
                      else rng.integers(-300 if dtype != np.uint8 else 0, 300, 6).astype(dtype))
            ops.append(fill_op_bytes(op_type, f"blob{k}", (2, 3), values.astype(np.int64) if dtype == np.bool_
                                     else values, encoding))
        seeds.append(net_bytes(ops))
    return seeds


def _check_scanned(data: bytes, name: str = "fuzz_init.pb") -> None:
    """The scanner gives one ModelError line naming the file, or values protobuf decodes the same."""
    import numpy as np  # noqa: PLC0415

    from engine.model import modelio, valueref  # noqa: PLC0415
    from google.protobuf.message import DecodeError  # noqa: PLC0415

    try:  # NOTE: the quick open (the TUI's) samples tags and counts varints: one line or a net, too
        valueref.parse_scanned(data, name, modelio._parse_binary, min_bytes=0, quick=True)
    except ModelError as e:
        assert str(e).startswith(name) and "\n" not in str(e), str(e)
    try:
        net, counted = valueref.parse_scanned(data, name, modelio._parse_binary, min_bytes=0)
    except ModelError as e:
        assert str(e).startswith(name) and "\n" not in str(e), str(e)
        return
    assert isinstance(net, caffe2_pb2.NetDef)
    try:
        reference = caffe2_pb2.NetDef.FromString(data)
    except DecodeError:
        reference = None
    for cut, count in counted:
        got = valueref.pieces_array(data, cut.pieces)
        assert got.size == count and not got.flags.writeable
        if reference is not None:
            arg = reference.op[cut.op].arg[cut.arg]
            want = {"floats": lambda: np.array(arg.floats, np.float32), "ints": lambda: np.array(arg.ints, np.int64),
                    "s": lambda: np.frombuffer(arg.s, np.uint8),
                    "strings": lambda: np.frombuffer(arg.strings[0], np.uint8)}[cut.field]()
            nan = np.isnan(want) if want.dtype.kind == "f" else np.zeros(want.shape, bool)
            # NOTE: a signalling NaN in the file stays one here; protobuf's Python floats make it quiet
            assert got[~nan].tobytes() == want[~nan].tobytes() and np.isnan(got[nan]).all()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_fixed_seed_mutation_fuzz_of_the_scanner() -> None:
    rng = random.Random(41)
    seeds = _init_seeds()
    for data in seeds:
        _check_scanned(data)
    for _ in range(FUZZ_N // 5):
        _check_scanned(_mutate(rng, rng.choice(seeds)))


@settings(max_examples=300, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=512))
def test_arbitrary_bytes_through_the_scanner(data: bytes) -> None:
    _check_scanned(data)
