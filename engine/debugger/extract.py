"""Cut a range of ops out of a run net, with the values it read, into a repro that runs alone.

:func:`extract_range` takes a :class:`~engine.debugger.divergence.Trace` (a net run op by op) and ops
``start:stop`` of its top-level program, or of a subnet (an If branch, a While body, a Do net) of
one of its control ops.  It returns the range as a predict net, an init net that fills every blob
the range reads but does not make with the value it held when the range started, and the values the
range made (expected).  :func:`write_repro` writes them as a folder that real Caffe2 and netviz run
the same way (``python repro.py``).

A subnet range starts where its control op started: its first run (an If's branch, a While's first
iteration); the values it reads are those of the parent at that moment, and its expected values are
those the range makes from them.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.debugger.descend import outer_names
from engine.debugger.divergence import Trace
from engine.errors import NetvizError
from engine.model.opdef import create_operator, subnets_of
from engine.model.tensorscan import encode_varint, packed_field
from engine.runtime import device as dev
from engine.runtime import executor
from engine.runtime.int8tensor import Int8Tensor
from engine.runtime.ops.control import WorkspaceStack
from engine.runtime.workspace import Workspace
from proto import caffe2_pb2

__all__ = ["Extracted", "parse_range", "needed_blobs", "extract_range", "fill_op_bytes", "write_repro"]


@dataclass
class Extracted:
    """A range ready to write: its nets, the values its init net fills, and what it made."""

    predict: caffe2_pb2.NetDef
    inputs: dict[str, Any]
    expected: dict[str, np.ndarray]
    where: str
    notes: list[str] = field(default_factory=list)


def parse_range(spec: str, n_ops: int) -> tuple[int, int]:
    """``N:M`` (ops N to M-1, as a Python slice; either end may be left out) or ``N`` (op N alone).

    Examples
    --------
    >>> parse_range("3:5", 10), parse_range("7", 10), parse_range(":2", 10), parse_range("8:", 10)
    ((3, 5), (7, 8), (0, 2), (8, 10))
    """
    head, sep, tail = spec.partition(":")
    try:
        start = int(head) if head.strip() else 0
        start = start + n_ops if start < 0 else start
        stop = (int(tail) if tail.strip() else n_ops) if sep else start + 1
    except ValueError:
        raise NetvizError(f"--ops {spec!r}: give N:M (ops N to M-1) or N") from None
    stop = stop + n_ops if stop < 0 else stop
    if not 0 <= start < stop <= n_ops:
        raise NetvizError(f"--ops {spec!r}: the net has ops 0..{n_ops - 1}; give N:M with N < M <= {n_ops}")
    return start, stop


def needed_blobs(ops: Iterable[caffe2_pb2.OperatorDef]) -> list[str]:
    """Blobs `ops` read before they make them, in first-read order, subnets' reads included (an If/While
    subnet reads its parent's blobs by name; a Do net's are its op's inputs)."""
    made: set[str] = set()
    need: dict[str, None] = {}
    for op in ops:
        reads = list(op.input)
        if op.type != "Do":
            for _, sub in subnets_of(op):
                reads += needed_blobs(sub.op)
        need.update((n, None) for n in reads if n not in made)
        made.update(op.output)
    return list(need)


def branch_writes(ops: Iterable[caffe2_pb2.OperatorDef]) -> list[str]:
    """Blobs the subnets of `ops`' If and While write in the workspace those run in (Mask R-CNN's If
    declares no outputs: its mask head's blobs are all it makes); not a Do's or an RNN step net's,
    which run in workspaces of their own."""
    out: dict[str, None] = {}
    for op in ops:
        if op.type in ("If", "While"):
            for _, sub in subnets_of(op):
                out.update((o, None) for inner in sub.op for o in inner.output)
                out.update((o, None) for o in branch_writes(sub.op))
    return list(out)


def _subnet(trace: Trace, spec: str) -> tuple[int, caffe2_pb2.NetDef]:
    """``K/ARG`` (``2/loop_net``): top-level op K's subnet held in argument ARG (its index and net)."""
    k, _, arg = spec.partition("/")
    try:
        op = trace.net.op[int(k)]
    except (ValueError, IndexError):
        raise NetvizError(f"--subnet {spec!r}: give OP/ARG, OP an op index of {trace.net.name or 'the net'}") from None
    subs = dict(subnets_of(op))
    if arg not in subs:
        raise NetvizError(f"--subnet {spec!r}: op #{k} {op.type} holds {', '.join(subs) or 'no subnet'}")
    return int(k), subs[arg]


def extract_range(trace: Trace, spec: str, subnet: str | None = None) -> Extracted:
    """Ops `spec` (:func:`parse_range`) of the trace's program, or of `subnet` (``K/ARG``), with their
    captured values."""
    if subnet is None:
        start, stop = parse_range(spec, len(trace.net.op))
        ops, at, where = list(trace.net.op[start:stop]), start, f"ops {start}:{stop}"
    else:
        at, net = _subnet(trace, subnet)
        start, stop = parse_range(spec, len(net.op))
        ops, where = list(net.op[start:stop]), f"ops {start}:{stop} of op #{at}'s {subnet.partition('/')[2]}"
    outer = outer_names(trace.net.op[at]) if subnet is not None else {}
    inputs = {n: v for n in needed_blobs(ops) if (v := trace.before(outer.get(n, n), at)) is not None}
    for n, v in inputs.items():
        if not _fillable(v):
            made_by = [i for i in trace.writes.get(outer.get(n, n), []) if i < at]
            start_at = f"start the range at op #{made_by[-1]}, which makes it" if made_by else "it cannot be captured"
            raise NetvizError(f"{where}: blob '{n}' is a {type(v).__name__} (state an op saved for a later one), "
                              f"not a value an init net can fill; {start_at}")
    made = list(dict.fromkeys(o for op in ops for o in op.output))
    name = f"{trace.net.name or 'net'}_{re.sub(r'[^0-9A-Za-z_]+', '_', where).strip('_')}"
    predict = caffe2_pb2.NetDef(name=name, op=ops, external_input=list(inputs), external_output=made)
    if subnet is None:
        expected = {o: v for o in made if isinstance(v := _array(trace.before(o, stop)), np.ndarray)}
    else:
        expected = _run_alone(predict, inputs)
    if inner := [o for o in branch_writes(ops) if o not in made]:
        # NOTE: the trace keeps top-level outputs only: what a branch or loop body wrote comes from the
        # range re-run alone on the same inputs; the branch not taken wrote nothing and is not listed
        alone = _run_alone(caffe2_pb2.NetDef(name=name, op=ops, external_input=list(inputs), external_output=inner),
                           inputs)
        expected.update(alone)
        predict.external_output.extend(o for o in inner if o in alone)
    notes = [f"{o}: not an array, not compared" for o in made if o not in expected]
    return Extracted(predict, inputs, expected, where, notes)


def _fillable(v: Any) -> bool:
    """Whether an init net can make `v`: an array (strings included), an Int8 tensor, a workspace scope."""
    if isinstance(v, (Int8Tensor, WorkspaceStack, bytes, str)):
        return True
    a = np.asarray(v) if isinstance(v, (np.ndarray, np.generic, int, float, bool)) else None
    return a is not None and (a.dtype.kind != "O" or all(isinstance(x, (bytes, str)) for x in a.ravel()))


def _run_alone(net: caffe2_pb2.NetDef, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    ws = Workspace("extract")
    for n, v in inputs.items():
        ws.values[n], ws.devices[n] = (WorkspaceStack() if isinstance(v, WorkspaceStack) else v), dev.CPU
    executor.run_net(net, ws, device="cpu")
    return {o: np.array(v) for o in net.external_output if isinstance(v := _array(ws.values.get(o)), np.ndarray)}


def _array(v: Any) -> Any:
    """An Int8 tensor's quantized data (what repro.py compares), anything else as it is."""
    return v.data if isinstance(v, Int8Tensor) else v


# ---- the init net: values as packed bytes ------------------------------------------------

def _field(field_no: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (a string, bytes or a message)."""
    return encode_varint(field_no << 3 | 2) + encode_varint(len(payload)) + payload


def _values_arg(field_no: int, a: np.ndarray) -> bytes:
    """The serialized ``arg`` field ``values`` with `a` as one packed ``floats`` (5) or ``ints`` (6) field."""
    return _field(5, _field(1, b"values") + packed_field(field_no, a.ravel()))


def fill_op_bytes(name: str, value: Any) -> bytes:
    """A serialized OperatorDef that makes blob `name` hold `value`: float32 (and float64, float16)
    in GivenTensorFill's ``values`` as ONE packed field of the array's raw bytes, ints and bools as
    one packed field of varints (protobuf parsers read a packed repeated field whatever the .proto
    says; :func:`engine.model.tensorscan.packed_field`), uint8 and Int8 data as the bytes of a
    string argument, strings as their repeated field; a workspace stack as CreateScope.

    Examples
    --------
    >>> from engine.model.opdef import args_of
    >>> op = caffe2_pb2.OperatorDef.FromString(fill_op_bytes("W", np.array([[1.5, -2]], np.float32)))
    >>> op.type, list(op.output), args_of(op)["shape"], list(args_of(op)["values"])
    ('GivenTensorFill', ['W'], [1, 2], [1.5, -2.0])
    """
    if isinstance(value, WorkspaceStack):
        return create_operator("CreateScope", [], [name]).SerializeToString()
    if isinstance(value, Int8Tensor):  # NOTE: uint8 data as one string; an int32 bias as packed ints
        wide = value.data.dtype != np.uint8
        op = create_operator("Int8GivenIntTensorFill" if wide else "Int8GivenTensorFill", [], [name],
                             shape=list(value.data.shape), Y_scale=float(value.scale),
                             Y_zero_point=int(value.zero_point))
        return op.SerializeToString() + (_values_arg(6, value.data.astype(np.int64)) if wide
                                         else _bytes_arg(value.data, one_string=True))
    a = np.asarray(value)
    shape = list(a.shape)
    kind = a.dtype.kind
    if kind == "f":
        fill = {4: "GivenTensorFill", 8: "GivenTensorDoubleFill"}.get(a.dtype.itemsize, "GivenTensorFill")
        return create_operator(fill, [], [name], shape=shape).SerializeToString() + _values_arg(5, a)
    if a.dtype == np.uint8:
        op = create_operator("GivenTensorByteStringToUInt8Fill", [], [name], shape=shape)
        return op.SerializeToString() + _bytes_arg(a)
    if kind in "biu":
        fills = {"b": "GivenTensorBoolFill", "i8": "GivenTensorInt64Fill", "i2": "GivenTensorInt16Fill"}
        fill = fills.get("b" if kind == "b" else f"i{a.itemsize}", "GivenTensorIntFill")
        return create_operator(fill, [], [name], shape=shape).SerializeToString() + _values_arg(6, a.astype(np.int64))
    if kind in "SOU":
        vals = [v if isinstance(v, bytes) else str(v).encode() for v in a.ravel()]
        return create_operator("GivenTensorStringFill", [], [name], shape=shape, values=vals).SerializeToString()
    raise NetvizError(f"blob '{name}': a {type(value).__name__} value; extract writes arrays, Int8 tensors "
                      "and scopes")


def _bytes_arg(a: np.ndarray, one_string: bool = False) -> bytes:
    """The serialized ``arg`` field ``values`` holding `a`'s bytes: as ``s`` (Int8GivenTensorFill reads one
    string) or as the one item of ``strings`` (GivenTensorByteStringToUInt8Fill reads a list of one)."""
    data = np.ascontiguousarray(a).tobytes()
    arg = caffe2_pb2.Argument(name="values", s=data) if one_string else \
        caffe2_pb2.Argument(name="values", strings=[data])
    return _field(5, arg.SerializeToString())


def init_net_bytes(name: str, inputs: Mapping[str, Any]) -> bytes:
    """A serialized NetDef `name` of one fill op per input (its ops' bytes joined as they are)."""
    body = _field(1, name.encode()) + b"".join(_field(2, fill_op_bytes(n, v)) for n, v in inputs.items())
    return body + b"".join(_field(8, n.encode()) for n in inputs)



REPRO = """\"\"\"Run {where} of {source} alone and compare with expected.npz (written by `netviz extract`).

In real Caffe2 when caffe2.python imports, else in netviz.  Exit status 0 when every output is within
the tolerance: max|a - b| / max(1, max|a|) <= TOL.
\"\"\"
import sys
from pathlib import Path

import numpy as np

TOL = {tol!r}
HERE = Path(__file__).resolve().parent
try:
    from caffe2.proto import caffe2_pb2
    from caffe2.python import workspace
    workspace.GlobalInit(["repro"])
    WHO = "Caffe2"
except ImportError:
    from proto import caffe2_pb2
    from engine import workspace
    WHO = "netviz"


def net(name):
    return caffe2_pb2.NetDef.FromString((HERE / name).read_bytes())


def fetch(name):
    try:
        return workspace.FetchBlob(name)
    except TypeError:  # Caffe2 fetches an Int8 blob with its own call
        return workspace.FetchInt8Blob(name)


def main():
    workspace.RunNetOnce(net("init_net.pb"))
    workspace.RunNetOnce(net("predict_net.pb"))
    expected, bad = np.load(HERE / "expected.npz"), 0
    for name in expected.files:
        got = fetch(name)
        want, got = expected[name], np.asarray(got.data if hasattr(got, "scale") else got)  # Int8: its data
        if want.shape != got.shape:
            err = float("inf")
        elif want.size == 0:
            err = 0.0
        else:
            a, b = want.astype(np.float64), got.astype(np.float64)
            d = np.where(np.isnan(a) & np.isnan(b), 0.0, np.abs(a - b))
            d = np.where(np.isnan(d), np.inf, d)
            err = float(d.max() / max(1.0, float(np.abs(a[np.isfinite(a)]).max(initial=0.0))))
        bad += err > TOL
        print(f"{{name}}: {{tuple(got.shape)}} error {{err:.3g}} {{'ok' if err <= TOL else 'DIFFERS'}}")
    print(f"{{WHO}}: {{len(expected.files) - bad}} of {{len(expected.files)}} outputs match expected.npz")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
"""

README = """# {where} of {source}

```
python repro.py
```

runs `predict_net.pb` ({n_ops} ops: {types}) after `init_net.pb` (the {n_in} blobs it reads, as they were
captured) in real Caffe2 when `caffe2.python` imports, else in netviz, and compares its {n_out} outputs
with `expected.npz`.{onnx}
"""


def write_repro(x: Extracted, folder: str | Path, *, source: str, tol: float = 1e-4, onnx: bool = False) -> list[Path]:
    """Write the folder: predict_net.pb, init_net.pb, expected.npz, repro.py and README.md (the paths)."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    files = {"predict_net.pb": x.predict.SerializeToString(),
             "init_net.pb": init_net_bytes(f"{x.predict.name}_init", x.inputs),
             "repro.py": REPRO.format(where=x.where, source=source, tol=tol).encode()}
    types = ", ".join(dict.fromkeys(op.type for op in x.predict.op))
    files["README.md"] = README.format(where=x.where, source=source, n_ops=len(x.predict.op), types=types,
                                       n_in=len(x.inputs), n_out=len(x.expected),
                                       onnx="\n`model.onnx` is the same range in ONNX." if onnx else "").encode()
    written = []
    for name, data in files.items():
        (out / name).write_bytes(data)
        written.append(out / name)
    np.savez(out / "expected.npz", **x.expected)
    return [*written, out / "expected.npz"]
