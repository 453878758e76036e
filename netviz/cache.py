"""A content-keyed cache of what a net's first frame computes: its training split, its SSA and
the drawing of its first window (the layout), so a net opened before draws without redoing them.

Entries live under the user's cache directory (``engine.modelio.cache_dir``: ``$NETVIZ_CACHE_DIR``,
else ``$XDG_CACHE_HOME/netviz``, else ``~/.cache/netviz``; none with ``NETVIZ_NO_CACHE``), in
``views/``, one file per entry named by the SHA-256 of what it was computed from: the net's
serialized bytes plus the sources of the code that computes it (:data:`SOURCES`).  An edited net,
a copy, a touch or a netviz upgrade thus need no invalidation: a changed input is a new key.

The cache is a speed-up only: an unreadable, corrupt or foreign entry is recomputed, and a
directory that cannot be written is never an error.  Entries are pickles (marshal for the SSA,
4x faster to read) written by netviz itself; nothing else is read from that directory.
"""
from __future__ import annotations

import hashlib
import marshal
import os
import pickle
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

_MAGIC = b"netviz-view-cache-1\n"
_ROOT = Path(__file__).resolve().parent.parent
#: the code whose results are cached: a change to any of these files changes every key
SOURCES = ("engine/ssa.py", "engine/training.py", "netviz/widgets/graph_scene.py", "netviz/layout.py",
           "netviz/cache.py")


def directory() -> Path | None:
    """``<cache dir>/views``, or None when caching is off."""
    from engine.modelio import cache_dir

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


def load(kind: str, k: str) -> Any | None:
    """The entry of `kind` under key `k`; None when absent or unreadable."""
    path = _file(kind, k)
    if path is None:
        return None
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    if not blob.startswith(_MAGIC):
        return None
    body = blob[len(_MAGIC):]
    try:
        return marshal.loads(body) if kind == "ssa" else pickle.loads(body)  # noqa: S301 - our own entries
    except Exception:  # noqa: BLE001 - a corrupt or foreign entry is recomputed, whatever it raises
        return None


def store(kind: str, k: str, value: Any) -> None:
    """Write an entry atomically (a reader sees the old state or the whole entry); errors ignored."""
    path = _file(kind, k)
    if path is None:
        return
    try:
        body = marshal.dumps(value) if kind == "ssa" else pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(_MAGIC + body)
        os.replace(tmp, path)
    except (OSError, ValueError, TypeError, pickle.PicklingError, RecursionError):
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
