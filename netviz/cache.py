"""A content-keyed cache of what a net's first frame computes: its training split, its SSA and
the drawing of its first window (the layout), so a net opened before draws without redoing them.

Entries live under the user's cache directory (``engine.model.modelio.cache_dir``: ``$NETVIZ_CACHE_DIR``,
else ``$XDG_CACHE_HOME/netviz``, else ``~/.cache/netviz``; none with ``NETVIZ_NO_CACHE``), in
``views/``, one file per entry named by the SHA-256 of what it was computed from: the net's
serialized bytes plus the sources of the code that computes it (:data:`SOURCES`).  An edited net,
a copy, a touch or a netviz upgrade thus need no invalidation: a changed input is a new key.

The cache is a speed-up only: an unreadable, corrupt or foreign entry is recomputed, and a
directory that cannot be written is never an error.

Entries are JSON with a small tagged codec (:func:`encode` / :func:`decode`), never pickle or
marshal: a file in that directory is not trusted to be ours, and reading one can only ever give
data.  Plain JSON values stand for themselves; every JSON object is a one-key tag: ``{"(": [...]}``
a tuple, ``{"{": [...]}`` a set, ``{"#": [[k, v], ...]}`` a dict, ``{"r": [start, stop, step]}`` a
range, ``{"b": base64}`` a bytearray, ``{"a": [typecode, base64]}`` a numeric ``array.array``,
``{"A": [dtype, shape, base64]}`` a numeric NumPy array, and ``{"@": [name, [fields]]}`` one
of the dataclasses in :func:`_dataclasses`, an explicit table: no class is looked up by a name read
from the file, and an unknown tag, class or dtype makes the entry unreadable (recomputed).
The SSA, the biggest entry, is plain JSON columns instead (:func:`_ssa_columns`).
"""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import sys
from array import array
from collections.abc import Callable
from functools import cache
from itertools import accumulate
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

#: version 2: tagged JSON (version 1 entries, pickles, are never read: their magic differs)
_MAGIC = b"netviz-view-cache-2 json\n"
#: the dtype kinds an array entry may have (bool, integers, floats): never object arrays
_ARRAY_KINDS = frozenset("biuf")
#: the typecodes an ``array.array`` entry may have (integers, floats)
_ARRAY_CODES = frozenset("bBhHiIlLqQfd")
#: the types JSON holds as they are (exact types: a subclass such as an IntEnum is refused)
_SCALARS = frozenset({str, int, float, bool, type(None)})
_ROOT = Path(__file__).resolve().parent.parent
#: the code whose results are cached: a change to any of these files changes every key
SOURCES = ("engine/model/ssa.py", "engine/autodiff/training.py", "netviz/widgets/graph_scene.py", "netviz/layout.py",
           "netviz/cache.py")


def directory() -> Path | None:
    """``<cache dir>/views``, or None when caching is off."""
    from engine.model.modelio import cache_dir

    where = cache_dir()
    return None if where is None else where / "views"


@cache
def code_version() -> bytes:
    """A digest of :data:`SOURCES` (read once per process: ~0.1 ms)."""
    h = hashlib.sha256()
    for name in SOURCES:
        try:
            h.update((_ROOT / name).read_bytes())
        except OSError:
            h.update(name.encode())
    return h.digest()


def net_digest(net: Any) -> str:
    """The key of a NetDef's content (deterministic serialization: 13 ms for 10k ops)."""
    return hashlib.sha256(code_version() + net.SerializeToString(deterministic=True)).hexdigest()


def key(*parts: Any) -> str:
    """A key made of a net digest and the arguments of what is computed from it (their repr)."""
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _file(kind: str, k: str) -> Path | None:
    where = directory()
    return None if where is None else where / f"{kind}-{k}"


@cache
def _dataclasses() -> dict[str, tuple[type, tuple[str, ...]]]:
    """The dataclasses an entry may hold, by name, with the fields stored (in order).

    Fields named ``_…`` are caches derived on use (``Scene._row_text``) and are not stored; the
    class's default fills them again.  They must come last, as the stored fields are passed by
    position (a third faster than by name).  Imported on first use: ``netviz.cache`` stays light.
    """
    from engine.autodiff.training import TrainingSplit
    from netviz.widgets.graph_scene import Scene, SceneEdge, SceneNode

    table = {}
    for c in (TrainingSplit, Scene, SceneNode, SceneEdge):
        names = [f.name for f in dataclasses.fields(c) if f.init]
        stored = tuple(n for n in names if not n.startswith("_"))
        if list(stored) != names[:len(stored)]:
            raise TypeError(f"netviz.cache: {c.__name__} has a field after a private one")
        table[c.__name__] = (c, stored)
    return table


#: the type an entry of each kind must decode to (anything else is a foreign entry)
_KINDS: dict[str, str] = {"ssa": "list", "split": "TrainingSplit", "scene": "Scene"}


def encode(value: Any) -> Any:
    """`value` as plain JSON data, tagged where JSON has no such type (see the module doc).

    Raises
    ------
    TypeError
        A value of a type the codec does not know (the entry is then not stored).
    """
    t = type(value)
    if t in _SCALARS:
        return value
    # NOTE: scalars are kept inline, not recursed into (a third of the time on a ResNet-50 scene)
    if t is list:
        return [v if type(v) in _SCALARS else encode(v) for v in value]
    if t is tuple:
        return {"(": [v if type(v) in _SCALARS else encode(v) for v in value]}
    if t is dict:
        return {"#": [[k if type(k) in _SCALARS else encode(k), v if type(v) in _SCALARS else encode(v)]
                      for k, v in value.items()]}
    if isinstance(value, (set, frozenset)):
        return {"{": [encode(v) for v in value]}
    if isinstance(value, range):
        return {"r": [value.start, value.stop, value.step]}
    if t is bytearray:
        return {"b": base64.b64encode(value).decode("ascii")}
    if t is array and value.typecode in _ARRAY_CODES:
        return {"a": [value.typecode, base64.b64encode(value.tobytes()).decode("ascii")]}
    np = sys.modules.get("numpy")  # NOTE: a NumPy value exists only once numpy is imported
    if np is not None and isinstance(value, np.ndarray) and value.dtype.kind in _ARRAY_KINDS:
        data = base64.b64encode(np.ascontiguousarray(value).tobytes()).decode("ascii")
        return {"A": [value.dtype.str, list(value.shape), data]}
    if np is not None and isinstance(value, np.generic) and value.dtype.kind in _ARRAY_KINDS:
        return value.item()  # NOTE: read back as the Python number (a coordinate from the layout)
    name = type(value).__name__
    known = _dataclasses().get(name)
    if known is None or type(value) is not known[0]:
        raise TypeError(f"netviz.cache cannot store a {type(value).__qualname__}")
    return {"@": [name, [encode(getattr(value, f)) for f in known[1]]]}


def _array(dtype: str, shape: list[int], data: str) -> Any:
    import numpy as np  # noqa: PLC0415 (netviz's own entries hold none: read back without NumPy)

    dt = np.dtype(dtype)
    if dt.kind not in _ARRAY_KINDS:
        raise ValueError(f"an array of dtype {dtype!r}")
    # NOTE: bytearray: a writable array, as the one stored was
    return np.frombuffer(bytearray(base64.b64decode(data, validate=True)), dtype=dt).reshape(shape)


def _int_array(typecode: str, data: str) -> array:
    if typecode not in _ARRAY_CODES:
        raise ValueError(f"an array of typecode {typecode!r}")
    out = array(typecode)
    out.frombytes(base64.b64decode(data, validate=True))  # NOTE: ValueError when not whole items
    return out


def _instance(payload: list[Any]) -> Any:
    name, values = payload
    cls, names = _dataclasses()[name]  # NOTE: an unknown name is a KeyError: the entry is foreign
    if len(values) != len(names):
        raise ValueError(f"{name}: {len(values)} fields, not {len(names)}")
    return cls(*values)


#: tag → how to build its value from the (already decoded) JSON under it; nothing else is built
_TAGS: dict[str, Callable[[Any], Any]] = {
    "(": tuple,
    "{": set,
    "#": dict,
    "r": lambda a: range(*a),
    "A": lambda a: _array(*a),
    "b": lambda a: bytearray(base64.b64decode(a, validate=True)),
    "a": lambda a: _int_array(*a),
    "@": _instance,
}


def _tagged(obj: dict[str, Any]) -> Any:
    """json's object_hook: every JSON object of an entry is a one-key tag (inner ones decoded first)."""
    ((tag, payload),) = obj.items()
    return _TAGS[tag](payload)


def decode(text: bytes | str) -> Any:
    """The value :func:`encode` gave `text` for (ValueError, KeyError, TypeError when not one)."""
    return json.loads(text, object_hook=_tagged)


def _ssa_columns(ssa: list[tuple[list[tuple[str, int]], ...]]) -> list[list[Any]]:
    """An SSA (per op, its ``(name, version)`` inputs then outputs) as three flat columns: names,
    versions and the length of each side, in op order.

    The SSA is the biggest entry (50k tuples for a 10k-op chain): tagged per tuple it decoded 5x
    slower than marshal did; as columns its pairs are made by one ``zip`` (10 ms, marshal's 5 ms).
    """
    sides = [side for op in ssa for side in op]
    if len(sides) != 2 * len(ssa):
        raise ValueError("an SSA entry holds (inputs, outputs) per op")
    return [[n for s in sides for n, _ in s], [v for s in sides for _, v in s], [len(s) for s in sides]]


def _ssa_from_columns(text: bytes) -> list[tuple[list[tuple[str, int]], list[tuple[str, int]]]]:
    names, versions, lengths = json.loads(text)  # NOTE: no object_hook: a JSON object here is a dict
    pairs = list(zip(names, versions, strict=True))
    ends = [0, *accumulate(lengths)]
    if ends[-1] != len(pairs) or len(lengths) % 2:
        raise ValueError("SSA columns of different lengths")
    sides = [pairs[a:b] for a, b in zip(ends, ends[1:])]
    return list(zip(sides[::2], sides[1::2], strict=True))


_TAGGED = (encode, decode)
#: kind → (to JSON data, from the entry's bytes) where it is not the tagged codec
_FORMATS: dict[str, tuple[Callable[[Any], Any], Callable[[bytes], Any]]] = {
    "ssa": (_ssa_columns, _ssa_from_columns),
}


def load(kind: str, k: str) -> Any | None:
    """The entry of `kind` under key `k`; None when absent, unreadable or not one netviz wrote."""
    path = _file(kind, k)
    if path is None:
        return None
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    if not blob.startswith(_MAGIC):
        return None
    try:
        value = _FORMATS.get(kind, _TAGGED)[1](blob[len(_MAGIC):])
    except Exception:  # noqa: BLE001 - a corrupt or foreign entry is recomputed, whatever it raises
        return None
    expected = _KINDS.get(kind)
    return None if expected is not None and type(value).__name__ != expected else value


def store(kind: str, k: str, value: Any) -> None:
    """Write an entry atomically (a reader sees the old state or the whole entry); errors ignored."""
    path = _file(kind, k)
    if path is None:
        return
    try:
        body = json.dumps(_FORMATS.get(kind, _TAGGED)[0](value), separators=(",", ":")).encode()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(_MAGIC + body)
        os.replace(tmp, path)
    except (OSError, ValueError, TypeError, RecursionError):
        pass


def cached(kind: str, k: str | None, make: Callable[[], T]) -> T:
    """The entry `kind`/`k`, else ``make()`` stored there (`k` None: no caching)."""
    if k is not None:
        got = load(kind, k)
        if got is not None:
            return got
    value = make()
    if k is not None:
        store(kind, k, value)
    return value
