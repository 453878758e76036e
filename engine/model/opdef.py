"""Building and reading ``OperatorDef`` protos the way Caffe2's Python helpers do.

``create_operator`` is ``core.CreateOperator``; ``make_argument`` is
``utils.MakeArgument`` with Caffe2's typing rules (float→f, int/bool→i, str/bytes→s,
NetDef→n, iterables by element type, numpy scalars and arrays unwrapped).
``arg_value``/``args_of`` read arguments back into Python values for kernels, makers
and views.  Every other engine module builds ops through here.
"""
from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from typing import Any

from google.protobuf import message as pb_message

from engine.model import scope
from proto import caffe2_pb2

_SINGLE_FIELDS = ("f", "i", "s", "n", "t")
_REPEATED_FIELDS = ("floats", "ints", "strings", "nets", "tensors", "qtensors")


def make_argument(key: str, value: Any) -> caffe2_pb2.Argument:
    """Return an Argument named `key` holding `value`, typed as Caffe2 types it.

    Raises
    ------
    ValueError
        For a mixed iterable or a value of no known type, naming the key.

    Examples
    --------
    >>> make_argument("kernel", 3).i
    3
    >>> list(make_argument("pads", (1, 1)).ints)
    [1, 1]
    """
    arg = caffe2_pb2.Argument(name=key)
    # NOTE: a NumPy value exists only once numpy is imported: it is not imported to look for one
    # (the TUI's first frame needs no numpy)
    np = sys.modules.get("numpy")
    if np is None:
        pass
    elif isinstance(value, np.ndarray):
        if value.dtype.kind in "fiub" and value.size:  # NOTE: packed bytes of the buffer, no Python numbers
            from engine.model.tensorscan import packed_field  # noqa: PLC0415  (NumPy is loaded already)
            arg.MergeFromString(packed_field(5 if value.dtype.kind == "f" else 6, value))
            return arg
        value = value.flatten().tolist()
    elif isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or isinstance(value, int):
        arg.i = int(value)
    elif isinstance(value, float):
        arg.f = value
    elif isinstance(value, bytes):
        arg.s = value
    elif isinstance(value, str):
        arg.s = value.encode("utf-8")
    elif isinstance(value, caffe2_pb2.NetDef):
        arg.n.CopyFrom(value)
    elif isinstance(value, pb_message.Message):
        arg.s = value.SerializeToString()
    elif isinstance(value, Iterable):
        _extend_repeated(arg, key, [v.item() if np is not None and isinstance(v, np.generic) else v for v in value])
    else:
        raise ValueError(f"argument '{key}': unsupported value type {type(value).__name__}")
    return arg


def _extend_repeated(arg: caffe2_pb2.Argument, key: str, items: list[Any]) -> None:
    if all(isinstance(v, float) for v in items):
        arg.floats.extend(items)  # NOTE: an empty iterable lands here, as in Caffe2.
    elif all(isinstance(v, (int, bool)) for v in items):
        arg.ints.extend(int(v) for v in items)
    elif all(isinstance(v, (str, bytes)) for v in items):
        arg.strings.extend(v.encode("utf-8") if isinstance(v, str) else v for v in items)
    elif all(isinstance(v, caffe2_pb2.NetDef) for v in items):
        arg.nets.extend(items)
    elif all(isinstance(v, pb_message.Message) for v in items):
        arg.strings.extend(v.SerializeToString() for v in items)
    else:
        raise ValueError(f"argument '{key}': mixed or unsupported element types in {items!r:.80}")


def create_operator(op_type: str, inputs: Iterable[Any] | Any, outputs: Iterable[Any] | Any,
                    name: str = "", control_input: Iterable[Any] | None = None,
                    device_option: caffe2_pb2.DeviceOption | None = None,
                    arg: Iterable[caffe2_pb2.Argument] | caffe2_pb2.Argument | None = None,
                    engine: str | None = None, debug_info: str | None = None,
                    **kwargs: Any) -> caffe2_pb2.OperatorDef:
    """Return an OperatorDef, as ``caffe2.python.core.CreateOperator`` builds it.

    A single str input/output is one blob; ``None`` kwargs are skipped; without an explicit
    `device_option` the active :func:`engine.model.scope.DeviceScope` applies.

    Examples
    --------
    >>> op = create_operator("Relu", "X", "Y")
    >>> (op.type, list(op.input), list(op.output))
    ('Relu', ['X'], ['Y'])
    """
    op = caffe2_pb2.OperatorDef(type=op_type, name=name)
    op.input.extend(str(i) for i in _as_list(inputs))
    op.output.extend(str(o) for o in _as_list(outputs))
    if control_input:
        op.control_input.extend(str(c) for c in _as_list(control_input))
    current = scope.CurrentDeviceScope()
    if device_option is not None:
        op.device_option.CopyFrom(device_option)
    elif current is not None:
        op.device_option.CopyFrom(current)
    if engine is not None:
        op.engine = engine
    if debug_info is not None:
        op.debug_info = debug_info
    if "random_seed" in kwargs:  # NOTE: Caffe2 moves it into the device option.
        op.device_option.random_seed = kwargs.pop("random_seed")
    if arg is not None:
        op.arg.extend([arg] if isinstance(arg, caffe2_pb2.Argument) else arg)
    op.arg.extend(make_argument(k, v) for k, v in kwargs.items() if v is not None)
    return op


def _as_list(x: Any) -> list[Any]:
    if x is None:
        return []
    if isinstance(x, (str, bytes)) or not isinstance(x, Iterable):
        return [x]
    return list(x)


def argument_value(arg: caffe2_pb2.Argument) -> Any:
    """The Python value an Argument holds: scalar field if set, else its repeated field.

    Strings come back as ``str`` when they are UTF-8, else as ``bytes``.
    """
    for f in _SINGLE_FIELDS:
        if arg.HasField(f):
            v = getattr(arg, f)
            return _decode(v) if f == "s" else v
    for f in _REPEATED_FIELDS:
        values = getattr(arg, f)
        if len(values):
            return [_decode(v) for v in values] if f == "strings" else list(values)
    return _referenced(arg, [])


def _referenced(arg: caffe2_pb2.Argument, default: Any) -> Any:
    """The values of an init net's fill op that stayed in its memory-mapped file (a read-only array,
    engine.model.valueref), or `default`; only a net read by that module refers to a file."""
    valueref = sys.modules.get("engine.model.valueref")
    got = None if valueref is None or arg.name != "values" else valueref.referenced_values(arg)
    return default if got is None else got


def argument_length(arg: caffe2_pb2.Argument) -> int | None:
    """``len(argument_value(arg))`` when that is a list, None for a scalar, without making the list
    (a GivenTensorFill's ``values``: millions of floats in a real init net)."""
    if any(arg.HasField(f) for f in _SINGLE_FIELDS):
        return None
    n = next((n for n in (len(getattr(arg, f)) for f in _REPEATED_FIELDS) if n), 0)
    valueref = sys.modules.get("engine.model.valueref")
    return n or (valueref is not None and arg.name == "values" and valueref.referenced_count(arg)) or 0


def _decode(b: bytes) -> str | bytes:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return b


def args_of(op: caffe2_pb2.OperatorDef | caffe2_pb2.NetDef) -> dict[str, Any]:
    """All arguments of an op (or net) as ``{name: value}``; a later duplicate wins."""
    return {a.name: argument_value(a) for a in op.arg}


def arg_value(op: caffe2_pb2.OperatorDef, name: str, default: Any = None) -> Any:
    """The value of argument `name` of `op`, or `default` when absent."""
    for a in op.arg:
        if a.name == name:
            return argument_value(a)
    return default


def has_arg(op: caffe2_pb2.OperatorDef, name: str) -> bool:
    """True when `op` carries an argument called `name`."""
    return any(a.name == name for a in op.arg)


def subnets_of(op: caffe2_pb2.OperatorDef) -> list[tuple[str, caffe2_pb2.NetDef]]:
    """``(argument name, NetDef)`` for every net an op holds (``then_net``, ``step_net``…).

    Nets in ``nets`` lists are named ``arg[k]``.  RecurrentNetwork may hold its step net as
    text in ``s``; that form is parsed here so every view sees a NetDef.
    """
    found: list[tuple[str, caffe2_pb2.NetDef]] = []
    for a in op.arg:
        if a.HasField("n"):
            found.append((a.name, a.n))
        found.extend((f"{a.name}[{k}]", n) for k, n in enumerate(a.nets))
        if a.HasField("s") and a.name in ("step_net", "backward_step_net"):
            net = _text_net(a.s)
            if net is not None:
                found.append((a.name, net))
    return found


def _text_net(s: bytes) -> caffe2_pb2.NetDef | None:
    from google.protobuf import text_format

    net = caffe2_pb2.NetDef()
    try:
        text_format.Parse(s.decode("utf-8"), net)
    except (text_format.ParseError, UnicodeDecodeError):
        return None
    return net


def device_of(op: caffe2_pb2.OperatorDef) -> tuple[int, int]:
    """``(device_type, device_id)`` of an op; CPU ops are ``(0, 0)``."""
    d = op.device_option
    return (d.device_type, d.device_id if d.device_type else 0)


def device_option(device_type: int, device_id: int = 0) -> caffe2_pb2.DeviceOption:
    """``core.DeviceOption``: a DeviceOption proto for a device type and id."""
    return caffe2_pb2.DeviceOption(device_type=device_type, device_id=device_id)


def clone_op(op: caffe2_pb2.OperatorDef, **overrides: Any) -> caffe2_pb2.OperatorDef:
    """A copy of `op` with repeated fields (``input=[…]``) or scalars replaced."""
    new = caffe2_pb2.OperatorDef()
    new.CopyFrom(op)
    for k, v in overrides.items():
        if isinstance(v, (list, tuple)):
            del getattr(new, k)[:]
            getattr(new, k).extend(v)
        else:
            setattr(new, k, v)
    return new


def kwargs_of(op: caffe2_pb2.OperatorDef, names: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Arguments of `op` restricted to `names` (with their defaults) — a kernel's keywords."""
    values = args_of(op)
    if names is None:
        return values
    return {k: values.get(k, d) for k, d in names.items()}
