"""Reading a recording (:mod:`engine.debugger.recording`): its stops, any blob version, who wrote it.

A :class:`Recording` needs no model files, no device and no kernel: the nets, the values (host
arrays) and the op records are in the file.  A complete file is read through :mod:`zipfile`'s
central directory; one cut short (a run killed while recording, a partial copy) has none, and is
read from its members' local headers up to the cut, with one line in :attr:`Recording.problems`
naming the member cut off.  A damaged member fails alone, with one line naming it and its blob.
"""
from __future__ import annotations

import bisect
import json
import re
import struct
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np

from engine.debugger.places import place
from engine.debugger.recording import FORMAT, RecordingError, blob_member, local_member, model_hash
from proto import caffe2_pb2

_MEMBER = re.compile(r"^blobs/(?P<name>[^@]*)@(?P<version>\d+)(?:~(?P<rewrite>\d+))?\.npy$")
_NOT_HERE = object()  # Recording._held: the workspace holds no value of its own under that name
_LOCAL = struct.Struct("<4s2B4HL2L2H")  # zipfile's local file header (zipfile.structFileHeader)


@dataclass(frozen=True, slots=True)
class Written:
    """One blob version an op wrote: its name, SSA version, shape, dtype and NaN/Inf counts."""

    name: str
    version: int
    shape: tuple[int, ...]
    dtype: str
    nan: int
    inf: int
    ws: int = -1     # the workspace it landed in (format 2; -1: not recorded)
    home: str = ""   # its name there when a binding forwarded it to another name ("": the same)

    @property
    def key(self) -> str:
        return f"{self.name}@{self.version}"


@dataclass(frozen=True, slots=True)
class Stop:
    """One op run, in program order: where it ran (path and frame labels), its time and outputs."""

    seq: int
    path: tuple[Any, ...]
    op_type: str
    label: str
    frames: tuple[str, ...]
    wall_s: float
    backward: bool
    skipped: bool
    outputs: tuple[Written, ...]
    ws: int = -1     # the workspace its op ran in (format 2; 0: the main one, -1: not recorded)

    @property
    def iteration(self) -> str:
        """The innermost numbered frame label (``iteration 2``, ``timestep 0``), "" in the main net."""
        return next((f for f in reversed(self.frames) if f[-1:].isdigit()), "")

    @property
    def has_inf_or_nan(self) -> bool:
        return any(o.nan or o.inf for o in self.outputs)


def _stop(d: dict[str, Any]) -> Stop:
    outs = tuple(Written(o[0], int(o[1]), tuple(o[2]), o[3], int(o[4]), int(o[5]), int(o[6]) if len(o) > 6 else -1,
                         o[7] if len(o) > 7 else "") for o in d["outputs"])
    return Stop(int(d["seq"]), tuple(d["path"]), d["op_type"], d["label"], tuple(d["frames"]), float(d["wall_s"]),
                bool(d["backward"]), bool(d["skipped"]), outs, int(d.get("ws", -1)))


@dataclass(frozen=True, slots=True)
class _Local:
    """A member found by its local header (a file without a central directory)."""

    offset: int
    size: int
    csize: int
    method: int
    crc: int


def _scan_locals(data: Any) -> tuple[dict[str, _Local], str | None]:
    """Members in `data` by their local headers, and the name of the member cut off (None: none was)."""
    found: dict[str, _Local] = {}
    pos = 0
    while data[pos:pos + 4] == b"PK\x03\x04" and pos + _LOCAL.size <= len(data):
        h = _LOCAL.unpack_from(data, pos)
        flags, method, crc, csize, size, nlen, xlen = h[3], h[4], h[7], h[8], h[9], h[10], h[11]
        name = bytes(data[pos + _LOCAL.size:pos + _LOCAL.size + nlen]).decode("utf-8" if flags & 0x800 else "cp437")
        extra = data[pos + _LOCAL.size + nlen:pos + _LOCAL.size + nlen + xlen]
        if csize == 0xFFFFFFFF or size == 0xFFFFFFFF:  # zip64: the sizes are in the extra field
            k = 0
            while k + 4 <= len(extra):
                tag, ln = struct.unpack_from("<HH", extra, k)
                if tag == 1:
                    size, csize = struct.unpack_from("<QQ", extra, k + 4)
                    break
                k += 4 + ln
        start = pos + _LOCAL.size + nlen + xlen
        if start + csize > len(data) or flags & 0x08:
            return found, name
        found[name] = _Local(start, size, csize, method, crc)
        pos = start + csize
    return found, None if data[pos:pos + 4] in (b"PK\x01\x02", b"PK\x05\x06") else "(after the last member)"


class Recording:
    """A recorded run, opened read-only.

    Attributes
    ----------
    meta : dict
        Format, model hash, device, loss, inputs, the model's file names when recorded.
    stops : list of Stop
        Every op run, in program order (``stops[k].seq == k``).
    program : NetDef
        The net that ran (the predict net, with the generated backward pass when a loss was given).
    problems : list of str
        One line per damage found on opening (a cut-off file); the rest stays readable.

    Examples
    --------
    >>> rec = Recording.open("run.nvrec")        # doctest: +SKIP
    >>> rec.value("fc1", 1).shape                  # doctest: +SKIP
    (16, 32)
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.problems: list[str] = []
        self._zip: zipfile.ZipFile | None = None
        self._locals: dict[str, _Local] = {}
        self._data: Any = b""
        try:
            self._zip = zipfile.ZipFile(self.path)
            names = self._zip.namelist()
        except zipfile.BadZipFile:
            names = self._recover()
        except OSError as e:
            raise RecordingError(f"{self.path}: cannot read the recording: {e.strerror}") from None
        self.meta = self._json("meta.json")
        if self.meta.get("format") != FORMAT:
            raise RecordingError(f"{self.path}: not a netviz recording (meta.json names no {FORMAT})")
        self.index = self._json("index.json", missing_ok=True) or {}
        self.predict, self.init = self._net("nets/predict.pb"), self._net("nets/init.pb")
        self.program = self._net("nets/program.pb", missing_ok=True) or self.predict
        self.format = int(self.meta.get("version", 1))
        if self.format < 2:
            self.problems.append(f"{self.path}: recorded by an older netviz (format {self.format}, no workspaces): a "
                                 "blob a subnet's workspace shadows may show its parent's value; record the run "
                                 "again to tell them apart")
        self._ws_defs: dict[int, list[tuple[int, int, bool, dict[str, str]]]] = {}  # ws → [(seq, parent, ...)]
        self._wslocal: dict[int, list[tuple[int, str, int]]] = {}  # seq → [(ws, name, version)] (see recording)
        # a buffer → [(seq, row start, stop, the view's name@version)]: its rows written through a view
        self._views: dict[tuple[int, str], list[tuple[int, int, int, str]]] = {}
        # an RNN step's view → [(seq, buffer's workspace, buffer, row start, stop, the view's shape)]
        self._view_of: dict[tuple[int, str], list[tuple[int, int, str, int, int, tuple[int, ...]]]] = {}
        self.stops = self._read_stops(names)
        self.members: dict[str, str] = {}   # "name@version" → member (the last rewrite of it)
        for member in names:
            m = _MEMBER.match(member)
            if m:
                self.members[f"{unquote(m['name'])}@{m['version']}"] = member
        self._writers: dict[str, list[tuple[int, int]]] = {}  # name → [(seq, version)], seq -1 for version 0
        for key in self.members:
            name, _, v = key.rpartition("@")
            if v == "0":
                self._writers.setdefault(name, []).append((-1, 0))
        # (workspace, name there) → [(seq, version, member)]: the values each workspace's blob held, from
        # stop seq on (a local value no op wrote: from before its stop, seq - 1)
        self._owned: dict[tuple[int, str], list[tuple[int, int, str | None, str]]] = {}
        for name in self._writers:
            self._owned[(0, name)] = [(-1, 0, self.members[f"{name}@0"], name)]
        for s in self.stops:
            for ws, name, version in self._wslocal.get(s.seq, ()):
                self._owned.setdefault((ws, name), []).append((s.seq - 1, version,
                                                              local_member(name, version, ws, s.seq), name))
            for o in s.outputs:
                self._writers.setdefault(o.name, []).append((s.seq, o.version))
                if o.ws >= 0:
                    self._owned.setdefault((o.ws, o.home or o.name), []).append((s.seq, o.version,
                                                                                self.members.get(o.key), o.name))

    @classmethod
    def open(cls, path: str | Path) -> Recording:
        """Open `path` (see the class doc); a cut-off file opens too, with :attr:`problems` saying so."""
        return cls(path)

    def close(self) -> None:
        if self._zip is not None:
            self._zip.close()
        if hasattr(self._data, "close"):
            self._data.close()

    def __enter__(self) -> Recording:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- the container -------------------------------------------------------------------
    def _recover(self) -> list[str]:
        """No central directory: the members before the cut, from their local headers."""
        import mmap  # noqa: PLC0415 - only a damaged file is read this way

        with open(self.path, "rb") as f:  # NOTE: mapped, not read: a cut-off recording may be gigabytes
            try:
                self._data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except ValueError:  # an empty file
                raise RecordingError(f"{self.path}: not a recording (the file is empty)") from None
        self._locals, cut = _scan_locals(self._data)
        if not self._locals:
            raise RecordingError(f"{self.path}: not a recording (no zip member found)")
        what = _member_text(cut) if cut else "no member"
        self.problems.append(f"{self.path}: truncated or damaged at byte {len(self._data)} (no zip directory): "
                             f"{what} cut off; {len(self._locals)} members before it read back")
        return list(self._locals)

    def _bytes(self, member: str) -> bytes:
        """One member's bytes, checked against its CRC."""
        try:
            if self._zip is not None:
                return self._zip.read(member)
            loc = self._locals[member]
            raw = self._data[loc.offset:loc.offset + loc.csize]
            data = zlib.decompress(raw, -15) if loc.method == zipfile.ZIP_DEFLATED else raw
            if zlib.crc32(data) != loc.crc or len(data) != loc.size:
                raise zipfile.BadZipFile("bad CRC-32")
            return data
        except KeyError:
            raise RecordingError(f"{self.path}: {_member_text(member)} is not in the recording") from None
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as e:
            raise RecordingError(f"{self.path}: {_member_text(member)} is damaged ({e})") from None

    def _json(self, member: str, missing_ok: bool = False) -> Any:
        if missing_ok and not self._has(member):
            return None
        try:
            return json.loads(self._bytes(member))
        except ValueError as e:
            raise RecordingError(f"{self.path}: {member} is damaged ({e})") from None

    def _has(self, member: str) -> bool:
        if self._zip is not None:
            try:
                self._zip.getinfo(member)
                return True
            except KeyError:
                return False
        return member in self._locals

    def _net(self, member: str, missing_ok: bool = False) -> caffe2_pb2.NetDef | None:
        if missing_ok and not self._has(member):
            return None
        net = caffe2_pb2.NetDef()
        net.ParseFromString(self._bytes(member))
        return net

    def _read_stops(self, names: list[str]) -> list[Stop]:
        stops: list[Stop] = []
        for member in sorted(n for n in names if n.startswith("stops/")):
            try:
                chunk = self._json(member)
            except RecordingError as e:
                self.problems.append(f"{e} (the stops from #{len(stops)} on are not known)")
                break
            for d in chunk:
                stops.append(_stop(d))
                for ws, parent, shared, bindings in d.get("wsdef", ()):
                    self._ws_defs.setdefault(int(ws), []).append((int(d["seq"]), int(parent), bool(shared), bindings))
                for k, ws, name, start, end in d.get("views", ()):
                    seq, out = int(d["seq"]), stops[-1].outputs[k]
                    self._views.setdefault((int(ws), name), []).append((seq, start, end, out.key))
                    self._view_of.setdefault((stops[-1].ws, out.name), []).append(
                        (seq, int(ws), name, start, end, out.shape))
                if "wslocal" in d:
                    self._wslocal[int(d["seq"])] = [(int(w), n, int(v)) for w, n, v in d["wslocal"]]
        return stops

    # ---- values ------------------------------------------------------------------------
    def versions(self, name: str) -> list[int]:
        """The recorded SSA versions of `name`, in program order."""
        return [v for _, v in self._writers.get(name, [])]

    def blobs(self) -> list[str]:
        return sorted(self._writers)

    def value(self, name: str, version: int) -> np.ndarray:
        """`name`@`version` as a host array; only that member is read.

        Raises
        ------
        RecordingError
            The version was not recorded (or is not a numeric array), or its member is damaged.
        """
        member = self.members.get(f"{name}@{version}")
        if member is None:
            known = self.versions(name)
            raise RecordingError(f"{self.path}: blob '{name}' version {version} is not recorded"
                                 + (f" (versions {', '.join(map(str, known[:8]))}{' …' if len(known) > 8 else ''})"
                                    if known else " (no such blob)"))
        return self.read(member)

    def version_at(self, name: str, seq: int) -> int | None:
        """The version of `name` once stop `seq` ran (-1: before any op); None when it does not exist yet."""
        writes = self._writers.get(name, [])
        k = bisect.bisect_right(writes, (seq, float("inf")))
        return writes[k - 1][1] if k else None

    def writer(self, name: str, version: int) -> Stop | None:
        """The stop that wrote `name`@`version` (None: version 0, a feed, weight or init value)."""
        for seq, v in self._writers.get(name, []):
            if v == version:
                return self.stops[seq] if 0 <= seq < len(self.stops) else None
        raise RecordingError(f"{self.path}: blob '{name}' version {version} is not recorded")

    def seen_from(self, name: str, seq: int, stop: Stop | None) -> np.ndarray | None:
        """The value `name` reads in the workspace `stop` ran in, once stop `seq` ran: that workspace's own
        value of `name` when it has one, else through its bindings (or, when it shares its parent's
        blobs, the same name) the parent's, as a live child workspace reads it.  None: not known that way
        (a format 1 file, a value not recorded): the caller reads the latest version by name.

        Raises
        ------
        KeyError
            That workspace cannot see `name` (the main one never held it, or a child that shares nothing
            and binds no such name): live says the blob does not exist there, so the latest version by
            name (another workspace's value) must not stand in for it."""
        if stop is None or stop.ws < 0:
            return None
        ws, at, asked = stop.ws, stop.seq, name
        for _ in range(64):  # NOTE: nesting depth; a bound cycle cannot happen, the bound stops it anyway
            held = self._held(ws, name, seq)
            if held is not _NOT_HERE:
                return held
            defs = self._ws_defs.get(ws)
            if not defs:
                if ws == 0:
                    raise KeyError(asked)
                return None
            _, parent, shared, bindings = defs[max(0, bisect.bisect_right(defs, (at, float("inf"))) - 1)]
            if name in bindings:
                name = bindings[name]
            elif not shared:
                raise KeyError(asked)
            ws = parent
        return None

    def _held(self, ws: int, name: str, seq: int) -> Any:
        """Workspace `ws`'s own value of `name` once stop `seq` ran (an RNN step's view: its buffer's rows
        now, as live reads it); None: not recorded; _NOT_HERE: it has none (a parent's is read)."""
        writes = self._owned.get((ws, name))
        k = bisect.bisect_right(writes, (seq, float("inf"))) if writes else 0
        if not k:
            return _NOT_HERE
        since, version, member, written = writes[k - 1]
        views = self._view_of.get((ws, name))
        j = bisect.bisect_right(views, (seq, float("inf"))) if views else 0
        if j and views[j - 1][0] >= since:  # NOTE: a view reads its buffer's rows as they are now
            _, bws, buffer, start, end, shape = views[j - 1]
            rows = self._held(bws, buffer, seq)
            if rows is not None and rows is not _NOT_HERE:
                part = rows[start:end]
                return part.reshape(shape) if part.size == int(np.prod(shape)) else part
        if member is None:
            return None
        until = writes[k][0] if k < len(writes) else len(self.stops)
        return self._rows_so_far(member, written, version, self._views.get((ws, name), ()), since, seq, until)

    def _rows_so_far(self, member: str, name: str, version: int, views: Any, since: int, seq: int,
                     until: int) -> np.ndarray:
        """`member`'s value as it was once stop `seq` ran.  An RNN link buffer's version is rewritten with
        its final value (its timesteps write rows through views after the link); while later view writes
        of the version are still to come, it is the value at the link with the rows each view write so far
        wrote (that write's own recorded value)."""
        later = [v for v in views if since < v[0] < until]
        if not any(v[0] > seq for v in later) or not self._has(first := blob_member(name, version)) \
                or first == member:
            return self.read(member)
        out = self.read(first).copy()
        for s, start, end, key in later:
            if s <= seq and key in self.members:
                rows = self.read(self.members[key])
                out[start:end] = rows.reshape(out[start:end].shape)
        return out

    def read(self, member: str) -> np.ndarray:
        """The array in blob member `member` (one line naming it when damaged)."""
        import io  # noqa: PLC0415
        try:
            return np.lib.format.read_array(io.BytesIO(self._bytes(member)), allow_pickle=False)
        except ValueError as e:
            raise RecordingError(f"{self.path}: {_member_text(member)} is damaged ({e})") from None

    def last_writer(self, name: str, seq: int) -> Stop | None:
        """Who last wrote `name` as stop `seq` sees it: the writer of the version it reads (None: version 0)."""
        version = self.version_at(name, seq - 1)
        if version is None:
            raise RecordingError(f"{self.path}: blob '{name}' does not exist before stop #{seq}")
        return self.writer(name, version)

    def state(self, seq: int, where: Stop | None = None) -> StateView:
        """Every blob as it is once stop `seq` ran (-1: before the first op), read when asked; with
        `where`, a blob's value as the workspace that stop's op ran in reads it (:meth:`seen_from`)."""
        return StateView(self, seq, where)

    def written(self, stop: Stop) -> dict[str, np.ndarray]:
        """The values `stop` wrote (those recorded)."""
        return {o.name: self.value(o.name, o.version) for o in stop.outputs if o.key in self.members}

    # ---- words -------------------------------------------------------------------------
    def place(self, stop: Stop) -> str:
        """``main › While op#2 iteration 1 › op#0 Tanh``."""
        return place(self.program, stop.path, stop.frames)

    def check_model(self, model: Any) -> str | None:
        """One line when `model` (a :class:`engine.model.modelio.Model`) is not what was recorded, else None."""
        got, want = model_hash(model), self.meta.get("model_hash")
        if got == want:
            return None
        return (f"{self.path}: recorded from another version of the model ({self.meta.get('model') or 'its file'}: "
                f"hash {str(want)[:12]}, the model given: {got[:12]})")


class StateView(Mapping[str, Any]):
    """The workspace as a recording saw it after one stop: each blob's value read on first use."""

    def __init__(self, rec: Recording, seq: int, where: Stop | None = None) -> None:
        self.rec, self.seq, self.where, self._cache = rec, seq, where, {}

    def version(self, name: str) -> int | None:
        return self.rec.version_at(name, self.seq)

    def __getitem__(self, name: str) -> Any:
        if name not in self._cache and self.where is not None:
            seen = self.rec.seen_from(name, self.seq, self.where)  # KeyError: that workspace cannot see it
            if seen is not None:
                self._cache[name] = seen
        if name not in self._cache:
            v = self.version(name)
            if v is None or f"{name}@{v}" not in self.rec.members:
                raise KeyError(name)
            self._cache[name] = self.rec.value(name, v)
        return self._cache[name]

    def __contains__(self, name: object) -> bool:
        if not (isinstance(name, str) and (v := self.version(name)) is not None and f"{name}@{v}" in self.rec.members):
            return False
        if self.where is None or name in self._cache:
            return True
        try:  # NOTE: a name only another workspace holds is not in this one (a condition on it is False, as live)
            self[name]  # the value is read once and cached for the caller's next look
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return (n for n in self.rec.blobs() if n in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _member_text(member: str) -> str:
    """``chunk blobs/x@2.npy (blob x@2)`` for a blob member, ``chunk stops/00001.json`` otherwise."""
    m = _MEMBER.match(member)
    return f"chunk {member} (blob {unquote(m['name'])}@{m['version']})" if m else f"chunk {member}"
