"""The schema: generated module in sync, field numbers as the fact sheet says, Caffe2 aliases."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from proto import caffe2_pb2

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT.parent / "shared" / "spec" / "caffe2-proto.md"


def test_generated_module_is_up_to_date() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_proto.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def _spec_tables() -> dict[str, dict[int, str]]:
    """message name → {field number: field name} from the fact sheet's `## \\`Msg\\`` tables."""
    tables: dict[str, dict[int, str]] = {}
    current = None
    for line in SPEC.read_text().splitlines():
        if line.startswith("#"):
            m = re.match(r"^#+ `([\w.]+)`", line)
            current = m.group(1) if m else None
        elif current and (m := re.match(r"^\| (\d+) \| `(\w+)` \|", line)):
            tables.setdefault(current, {})[int(m.group(1))] = m.group(2)
    return tables


def test_field_numbers_match_the_fact_sheet() -> None:
    if not SPEC.exists():
        pytest.skip("shared/spec not present")
    tables = _spec_tables()
    assert {"TensorProto", "TensorProto.Segment", "Argument", "OperatorDef", "NetDef", "DeviceOption", "BlobProto"} <= set(tables)
    for msg_name, fields in tables.items():
        cls = caffe2_pb2
        for part in msg_name.split("."):
            cls = getattr(cls, part)
        desc = cls.DESCRIPTOR
        assert {f.number: f.name for f in desc.fields} == fields, msg_name


def test_packed_flags_follow_caffe2() -> None:
    t = caffe2_pb2.TensorProto.DESCRIPTOR.fields_by_name
    a = caffe2_pb2.Argument.DESCRIPTOR.fields_by_name
    assert t["float_data"].is_packed and t["int64_data"].is_packed
    assert not a["floats"].is_packed and not a["ints"].is_packed


def test_device_aliases() -> None:
    assert (caffe2_pb2.CPU, caffe2_pb2.CUDA, caffe2_pb2.HIP) == (0, 1, 6)


def test_engine_does_not_import_ui() -> None:
    code = ("import sys; sys.modules['textual'] = None; sys.modules['netviz'] = None\n"
            "import engine, engine.model.modelio, engine.model.opdef, engine.analysis.summary, engine.runtime.ops\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
