"""Reading and writing Caffe2 model files.

A model is a predict net, optionally an init net (the fill ops that create its parameters)
and optionally a ``value_info.json`` naming input shapes.  Files are recognised by their
content, not their extension: real model zoos name binary files ``.pbtxt`` and text files
``.pb`` often enough.  Every failure is a :class:`~engine.errors.ModelError` whose one-line
message starts with the file name.
"""
from __future__ import annotations

import codecs
import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import message as pb_message
from google.protobuf import text_format
from google.protobuf.unknown_fields import UnknownFieldSet

from engine.errors import ModelError
from proto import caffe2_pb2

# NOTE: engine.model.valueref (NumPy) is imported when a binary file is big enough to scan

TEXT_SUFFIXES = frozenset({".pbtxt", ".prototxt", ".txt", ".pbtext"})
MAX_FILE_BYTES = 2 * 1024**3
"""Protobuf's limit: bigger text files are refused; bigger binary ones go through the scanner."""
SCAN_MIN_BYTES = 1 << 20
"""Binary files at least this big are read by :func:`engine.model.valueref.load_binary_net`: fill
values stay in the memory-mapped file, protobuf parses the rest (issue #41)."""


@dataclass(frozen=True, slots=True)
class InputInfo:
    """One ``value_info.json`` entry: Caffe2's ``[data_type, shape]`` for an input blob."""

    data_type: int
    shape: tuple[int, ...]


@dataclass
class Model:
    """A predict net with its (possibly empty) init net and known input shapes."""

    predict: caffe2_pb2.NetDef
    init: caffe2_pb2.NetDef = field(default_factory=caffe2_pb2.NetDef)
    value_info: dict[str, InputInfo] = field(default_factory=dict)
    path: Path | None = None
    init_path: Path | None = None


def _unknown_field_path(msg: pb_message.Message, where: str = "") -> str | None:
    """Return the path of the first unknown field in `msg`, or None.

    A binary file of another message type usually parses as a NetDef full of unknown
    fields; refusing them is how we tell "not a NetDef" from "a NetDef".
    """
    if len(UnknownFieldSet(msg)):
        return where or "<top level>"
    for desc, value in msg.ListFields():
        if desc.message_type is None:
            continue
        items = value if desc.is_repeated else [value]
        for k, item in enumerate(items):
            found = _unknown_field_path(item, f"{where}.{desc.name}[{k}]".lstrip("."))
            if found:
                return found
    return None


#: the control characters a text net never holds (all below 32 but tab, newline and CR)
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")


def _looks_like_text(data: bytes) -> bool:
    """True when `data` is UTF-8 without control characters other than tab/newline/CR."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return _CONTROL.search(text, 0, 4096) is None


def _parse_text(text: str, path: str) -> caffe2_pb2.NetDef:
    net = caffe2_pb2.NetDef()
    try:
        text_format.Parse(text, net, allow_unknown_extension=False)
    except text_format.ParseError as e:
        line, col = getattr(e, "GetLine", lambda: None)(), getattr(e, "GetColumn", lambda: None)()
        msg = str(e).split(" : ", 1)[-1] if line else str(e)
        where = f"line {line}, column {col}: " if line else ""
        raise ModelError(f"{path}: not a valid text NetDef: {where}{msg}") from None
    except RecursionError:
        raise ModelError(f"{path}: not a valid text NetDef: nested deeper than the parser allows") from None
    return net


def byte_size(net: caffe2_pb2.NetDef) -> int:
    """The net's encoded size; a net missing a proto2 required field (e.g. in a QTensorProto
    argument) makes upb's ByteSize raise, and is measured by a partial serialization instead."""
    try:
        return net.ByteSize()
    except pb_message.EncodeError:
        return len(net.SerializePartialToString())


#: bytes per op above which a binary net's unknown fields are looked for by a walk of its messages
WALK_BYTES_PER_OP = 16 * 1024


def _parse_binary(data: bytes, path: str) -> caffe2_pb2.NetDef:
    net = caffe2_pb2.NetDef()
    try:
        net.ParseFromString(data)
    except (pb_message.DecodeError, RecursionError) as e:
        raise ModelError(f"{path}: not a valid binary NetDef: {e or 'truncated or corrupt data'}") from None
    # NOTE: checked in protobuf's C code (dropping unknown fields makes the net smaller exactly when
    # there are some; no copy of a 100 MB init net), as the Python walk takes 0.1-0.2 s on a 10k-op
    # net; but ByteSize reads every byte (0.12 s per call on a 40 MB init net), so a net of few, big
    # ops (weights) is walked instead (0.3 ms there); either finds exactly the same
    if len(data) > WALK_BYTES_PER_OP * (len(net.op) + 1):
        where = _unknown_field_path(net)
        net.DiscardUnknownFields()
    else:
        size = byte_size(net)
        net.DiscardUnknownFields()
        where = None
        if byte_size(net) != size:
            bad = caffe2_pb2.NetDef()
            bad.ParseFromString(data)
            where = _unknown_field_path(bad)
    if where is not None:
        raise ModelError(f"{path}: not a NetDef (unknown field at {where}); is it another protobuf message?")
    if not net.op and not net.name and not net.external_input:
        raise ModelError(f"{path}: not a NetDef (no name, no ops, no inputs)")
    return net


def parse_net(data: bytes, path: str = "<bytes>") -> caffe2_pb2.NetDef:
    """Parse `data` as a NetDef in text or binary form, whichever it is.

    Parameters
    ----------
    data : bytes
        File content.
    path : str
        Used in error messages only.

    Raises
    ------
    ModelError
        Empty, not a NetDef, corrupt, or a text file with a syntax error (line and column).
    """
    if not data.strip():
        raise ModelError(f"{path}: file is empty")
    if _looks_like_text(data):
        try:
            return _parse_text(data.decode("utf-8"), path)
        except ModelError as text_error:
            # Binary NetDefs with ASCII-only content are valid UTF-8: give binary a chance.
            try:
                return _parse_binary(data, path)
            except ModelError:
                raise text_error from None
    return _parse_binary(data, path)


def _read_bytes(path: Path) -> bytes:
    if not path.exists():
        raise ModelError(f"{path}: no such file")
    if path.is_dir():
        raise ModelError(f"{path}: is a directory, not a model file")
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ModelError(f"{path}: file is larger than {MAX_FILE_BYTES >> 30} GiB")
        return path.read_bytes()
    except OSError as e:
        raise ModelError(f"{path}: cannot read: {e.strerror}") from None


#: text files at least this big go through the parse cache (protobuf's text parser takes ~5 ms per 1 kB)
CACHE_MIN_BYTES = 16 * 1024
_CACHE_MAGIC = b"netviz-netdef-cache-1\n"


def cache_dir() -> Path | None:
    """Where parsed text nets are kept as binary: ``$NETVIZ_CACHE_DIR``, else ``$XDG_CACHE_HOME/netviz``
    (``~/.cache/netviz``); None when ``NETVIZ_NO_CACHE`` is set."""
    if os.environ.get("NETVIZ_NO_CACHE"):
        return None
    if os.environ.get("NETVIZ_CACHE_DIR"):
        return Path(os.environ["NETVIZ_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "netviz"


def _cache_file(data: bytes) -> Path | None:
    """The cache entry of a text net's content (keyed by its SHA-256: an edit, a copy, a touch all
    do the right thing without mtime checks)."""
    where = cache_dir()
    return None if where is None else where / "parse" / f"{hashlib.sha256(data).hexdigest()}.pb"


def _cached_parse(data: bytes, path: str) -> caffe2_pb2.NetDef:
    """:func:`parse_net`, through the binary parse cache for big text files.

    The cache is a speed-up only: an unreadable, corrupt or foreign entry is ignored (and the text
    parsed), and a cache directory that cannot be written is never an error.  Binary parsing of
    the entry is ~1000x faster than protobuf's pure-Python text parser (DenseNet-121: 0.2-0.9 s).
    """
    entry = _cache_file(data) if len(data) >= CACHE_MIN_BYTES and _looks_like_text(data) else None
    if entry is not None:
        try:
            blob = entry.read_bytes()
        except OSError:
            blob = b""
        if blob.startswith(_CACHE_MAGIC):
            net = caffe2_pb2.NetDef()
            try:
                net.ParseFromString(blob[len(_CACHE_MAGIC):])
                return net
            except pb_message.DecodeError:
                pass
    net = parse_net(data, path)
    if entry is not None:
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            tmp = entry.with_name(f"{entry.name}.{os.getpid()}.tmp")
            tmp.write_bytes(_CACHE_MAGIC + net.SerializeToString())
            os.replace(tmp, entry)  # NOTE: atomic: a concurrent reader sees the old state or the whole entry
        except OSError:
            pass
    return net


def load_net(path: str | Path, *, empty_ok: bool = False, lazy_values: bool = False) -> caffe2_pb2.NetDef:
    """Read one NetDef from a binary or text file (big text files through :func:`_cached_parse`, big
    binary ones through :func:`engine.model.valueref.load_binary_net`); with `empty_ok` a 0-byte
    file is an empty NetDef, as Caffe2 reads an init net (Glow ships one), else an error.
    `lazy_values` opens without reading the values (valueref.bind_values checks them later).

    Examples
    --------
    >>> net = load_net(zoo / "resnet50" / "predict_net.pbtxt")  # doctest: +SKIP
    >>> net.op[0].type  # doctest: +SKIP
    'Conv'
    """
    path = Path(path)
    try:
        size = path.stat().st_size if path.is_file() else -1
    except OSError:
        size = -1
    if size == 0 and empty_ok:
        return caffe2_pb2.NetDef()
    if size >= SCAN_MIN_BYTES and not _head_is_text(path):
        from engine.model.valueref import load_binary_net  # noqa: PLC0415  (NumPy only for big nets)
        return load_binary_net(path, parse=_parse_binary, quick=lazy_values)
    return _cached_parse(_read_bytes(path), str(path))


def _head_is_text(path: Path) -> bool:
    """Whether the first 4 kB of `path` look like a text NetDef (a UTF-8 character cut at the end is fine)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError as e:
        raise ModelError(f"{path}: cannot read: {e.strerror}") from None
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return False
    return _CONTROL.search(text) is None


def save_net(net: caffe2_pb2.NetDef, path: str | Path, text: bool | None = None) -> Path:
    """Write `net` to `path`, as text when `text` is True or the suffix says so, else binary."""
    path = Path(path)
    as_text = path.suffix.lower() in TEXT_SUFFIXES if text is None else text
    if as_text:
        data = text_format.MessageToString(_with_values(net)).encode()
    else:
        data = _serialized(net)
    try:
        path.write_bytes(data)
    except OSError as e:
        raise ModelError(f"{path}: cannot write: {e.strerror}") from None
    return path


def _serialized(net: caffe2_pb2.NetDef) -> bytes:
    """Binary `net`; values that live in a mapped file are written as its bytes (valueref.serialize_net)."""
    if "engine.model.valueref" not in sys.modules:  # NOTE: no net refers to a file before it is imported
        return net.SerializeToString()
    return sys.modules["engine.model.valueref"].serialize_net(net)


def _with_values(net: caffe2_pb2.NetDef) -> caffe2_pb2.NetDef:
    """`net` with referenced values put back (text format shows fields, not references)."""
    if "engine.model.valueref" not in sys.modules:
        return net
    return sys.modules["engine.model.valueref"].materialized(net)


def _init_candidates(path: Path) -> list[Path]:
    """Sibling init-net names by Caffe2 convention, most specific first."""
    stem, parent = path.stem, path.parent
    stems: list[str] = []
    if stem == "predict_net":
        stems.append("init_net")
    if stem.endswith("_predict"):
        stems.append(stem[: -len("_predict")] + "_init")
    if stem.endswith("predict_net") and stem != "predict_net":
        stems.append(stem[: -len("predict_net")] + "init_net")
    stems.append(stem + "_init")
    suffixes = [path.suffix] + [s for s in (".pb", ".pbtxt", ".prototxt") if s != path.suffix]
    return [parent / (s + suf) for s in stems for suf in suffixes]


def find_init_net(path: str | Path) -> Path | None:
    """Return the init net that sits beside predict net `path` by naming convention, if any."""
    return next((c for c in _init_candidates(Path(path)) if c.is_file()), None)


def load_value_info(path: str | Path) -> dict[str, InputInfo]:
    """Read a model-zoo ``value_info.json`` (``{"blob": [data_type, [dims...]]}``)."""
    path = Path(path)
    try:
        raw = json.loads(_read_bytes(path).decode("utf-8"))
        return {name: InputInfo(int(v[0]), tuple(int(d) for d in v[1])) for name, v in raw.items()}
    except (ValueError, TypeError, IndexError, AttributeError, UnicodeDecodeError) as e:
        raise ModelError(f"{path}: not a value_info file ({{blob: [data_type, shape]}}): {e}") from None


def load_model(path: str | Path, init: str | Path | None = None, *, lazy_values: bool = False) -> Model:
    """Read a predict net, its init net (explicit `init` wins over siblings) and value_info.json;
    `lazy_values`: the init net's values are not read yet (see :func:`load_net`; the TUI)."""
    path = Path(path)
    predict = load_net(path)
    init_path = Path(init) if init is not None else find_init_net(path)
    init_net = (load_net(init_path, empty_ok=True, lazy_values=lazy_values) if init_path is not None
                else caffe2_pb2.NetDef())
    vi_path = path.parent / "value_info.json"
    value_info = load_value_info(vi_path) if vi_path.is_file() else {}
    return Model(predict, init_net, value_info, path, init_path)
