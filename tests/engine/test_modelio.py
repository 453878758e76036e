"""Model IO: text/binary sniffing, init-net pairing, round trips and one-line errors."""
from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

import pytest
from google.protobuf import text_format

from engine.errors import ModelError
from engine.model.modelio import find_init_net, load_model, load_net, parse_net, save_net
from proto import caffe2_pb2


def tiny_net() -> caffe2_pb2.NetDef:
    net = caffe2_pb2.NetDef(name="tiny", external_input=["X", "W", "b"], external_output=["Y"])
    net.op.add(type="FC", input=["X", "W", "b"], output=["H"])
    net.op.add(type="Relu", input=["H"], output=["Y"])
    return net


def test_zoo_net_loads_with_histogram_of_the_file(zoo_net: Path) -> None:
    net = load_net(zoo_net)
    text = zoo_net.read_text()
    top_level_types = Counter(op.type for op in net.op)
    assert len(net.op) > 0
    # Every op type in the file appears in the net or one of its subnets.
    assert sum(text.count(f'type: "{t}"') for t in top_level_types) >= len(net.op)


def test_text_binary_text_round_trip(zoo_net: Path, tmp_path: Path) -> None:
    net = load_net(zoo_net)
    save_net(net, tmp_path / "m.pb")
    again = load_net(tmp_path / "m.pb")
    assert again == net
    save_net(again, tmp_path / "m.pbtxt")
    assert load_net(tmp_path / "m.pbtxt") == net
    assert (tmp_path / "m.pbtxt").read_text().startswith("name:")


def test_content_is_sniffed_not_the_extension(tmp_path: Path) -> None:
    (tmp_path / "binary.pbtxt").write_bytes(tiny_net().SerializeToString())
    (tmp_path / "text.pb").write_text(text_format.MessageToString(tiny_net()))
    assert load_net(tmp_path / "binary.pbtxt") == tiny_net()
    assert load_net(tmp_path / "text.pb") == tiny_net()


@pytest.mark.parametrize("predict,init", [
    ("predict_net.pb", "init_net.pb"), ("m.pb", "m_init.pb"), ("m_predict.pb", "m_init.pb"),
    ("predict_net.pbtxt", "init_net.pb"),
])
def test_init_net_is_found_beside_the_predict_net(tmp_path: Path, predict: str, init: str) -> None:
    save_net(tiny_net(), tmp_path / predict)
    init_net = caffe2_pb2.NetDef(name="init")
    init_net.op.add(type="ConstantFill", output=["W"])
    save_net(init_net, tmp_path / init)
    assert find_init_net(tmp_path / predict) == tmp_path / init
    model = load_model(tmp_path / predict)
    assert model.init.name == "init" and model.init_path == tmp_path / init


def test_explicit_init_wins(tmp_path: Path) -> None:
    save_net(tiny_net(), tmp_path / "predict_net.pb")
    save_net(caffe2_pb2.NetDef(name="sibling", external_input=["a"]), tmp_path / "init_net.pb")
    save_net(caffe2_pb2.NetDef(name="explicit", external_input=["a"]), tmp_path / "other.pb")
    assert load_model(tmp_path / "predict_net.pb", init=tmp_path / "other.pb").init.name == "explicit"


def test_value_info_is_read(zoo: Path) -> None:
    model = load_model(zoo / "resnet50" / "predict_net.pbtxt")
    assert model.value_info["gpu_0/data"].shape == (1, 3, 224, 224)


def _bad_inputs(tmp: Path) -> dict[str, tuple[Path, str]]:
    """name → (path, substring the error must contain)."""
    (tmp / "empty.pb").write_bytes(b"")
    (tmp / "random.pb").write_bytes(bytes(range(256)) * 7 + os.urandom(0))
    tensor = caffe2_pb2.TensorProto(dims=[2, 3], data_type=1, float_data=[1.0] * 6, name="t")
    (tmp / "tensor.pb").write_bytes(tensor.SerializeToString())
    full = tiny_net().SerializeToString()
    (tmp / "truncated.pb").write_bytes(full[: len(full) // 2 + 1])
    (tmp / "syntax.pbtxt").write_text('name: "x"\nop {\n  type: "Relu"\n  bogus_field: 3\n}\n')
    (tmp / "adir").mkdir()
    return {
        "missing": (tmp / "nope.pb", "no such file"),
        "directory": (tmp / "adir", "is a directory"),
        "empty": (tmp / "empty.pb", "empty"),
        "random": (tmp / "random.pb", "NetDef"),
        "other message": (tmp / "tensor.pb", "not a NetDef"),
        "truncated": (tmp / "truncated.pb", "NetDef"),
        "text syntax": (tmp / "syntax.pbtxt", "line 4, column"),
    }


@pytest.mark.parametrize("case", ["missing", "directory", "empty", "random", "other message",
                                  "truncated", "text syntax"])
def test_bad_input_is_one_line_naming_the_file(tmp_path: Path, case: str) -> None:
    path, expected = _bad_inputs(tmp_path)[case]
    with pytest.raises(ModelError) as err:
        load_net(path)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(str(path)) and expected in msg


def test_parse_net_rejects_whitespace_only() -> None:
    with pytest.raises(ModelError, match="empty"):
        parse_net(b"  \n\n", "blank.pbtxt")


@pytest.mark.parametrize("walk", [True, False])
def test_unknown_fields_are_refused_whichever_way_they_are_looked_for(monkeypatch, walk: bool) -> None:
    """A net of few, big ops (an init net's weights) is checked by a walk of its messages, others by
    protobuf's sizes: the same nets are refused, with the same message naming the first unknown field."""
    from engine.model import modelio  # noqa: PLC0415

    monkeypatch.setattr(modelio, "WALK_BYTES_PER_OP", 0 if walk else 1 << 60)
    weights = caffe2_pb2.OperatorDef(type="GivenTensorFill", output=["w"])
    weights.arg.add(name="values", floats=[0.5] * 20_000)
    net = caffe2_pb2.NetDef(name="init", op=[weights])
    good = net.SerializeToString()
    assert parse_net(good) == net
    unknown = bytes([(99 << 3 | 0) & 0x7F | 0x80, 99 >> 4, 1])  # field 99, varint 1
    arg = caffe2_pb2.Argument()
    arg.ParseFromString(caffe2_pb2.Argument(name="shape", ints=[20_000]).SerializeToString() + unknown)
    nested = caffe2_pb2.NetDef()
    nested.CopyFrom(net)
    nested.op[0].arg.append(arg)
    for data, where in ((good + unknown, "<top level>"), (nested.SerializeToString(), "op[0].arg[1]")):
        with pytest.raises(ModelError, match=rf"not a NetDef \(unknown field at {re.escape(where)}\)"):
            parse_net(data, "w.pb")
