"""Recorded runs: one ``.nvrec`` file per run, written as the debugger steps, read back anywhere.

Why a file: a run could be looked at only while it ran, on the machine (and device) it ran on;
``run --dump`` wrote a folder that nothing read back.  A recording holds the nets, every SSA version
of every blob (each loop iteration and RNN timestep included), the op records (times, NaN/Inf
counts, places), the device and a hash of the model, so a later reader needs neither the model
files nor the device.

The container is a zip file (:mod:`zipfile`): a well-kept format whose central directory gives
random access, so one blob version loads without reading the rest.  Members::

    meta.json                      format, model hash, device, loss, inputs, the model's file names
    nets/predict.pb, nets/init.pb  the model as loaded
    nets/program.pb                the net the debugger ran (predict + the generated backward pass)
    blobs/<name>@<version>.npy     one member per blob version (np.lib.format; ``%``-quoted name)
    stops/<chunk>.json             the op records, CHUNK_STOPS per member, written as the run goes
                                   (each with its workspace and each output's owner: see below)
    index.json                     last: blob version → member, the stop reason, the chunk list

Members are deflated when that pays and stays cheap (mostly-zero activations, small arrays) and
stored otherwise: deflating 500 MB of dense float32 weights and gradients of ResNet-50 took ~20 s
for 10-20 % on a 4 s run.  A writer thread writes the members in the order the run makes them
(at most MAX_PENDING bytes behind it), beside the kernels.  The index is redundant on purpose: blob members are named by their blob
and version and the stops come in chunks, so a recording cut short (no central directory, no index)
is read back from its local headers up to the cut (:mod:`engine.debugger.recorded`).

Workspaces (format 2): a subnet run in a workspace of its own (a While/If/Do's, the backward While's,
an RNN timestep's) may hold a blob of the same name as its parent's (``b_grad`` inside the backward
While's Do), so a blob's latest version by name alone is another workspace's value there.  Each stop
names the workspace its op ran in (``ws``: a number, 0 the main one) and each output the workspace
(and name) it landed in, as the runtime's forwarding (bindings, shared children) resolved it; a
stop whose workspace is new or was rebound since carries ``wsdef`` (parent, shared, bindings), so a
reader resolves a name in any frame as the live workspace does, and ``wslocal`` the local values no op
wrote there (a Do's copies of the names it unbound), each in a member of its own (:func:`local_member`).
An RNN step's write through a view of a link buffer's rows is noted in ``views`` (output, buffer's
workspace and name, rows): the buffer's version keeps its value at the link and its final value (a
rewrite), and a reader puts together the rows written up to any stop from the two.  Versions stay the debugger's (one
counter per name), so ``blobs/<name>@<version>`` names one write whatever its workspace.  Format 1
files (no workspaces) still open, with a notice (:mod:`engine.debugger.recorded`).
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import queue
import threading
import weakref
import zipfile
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

from engine.debugger.records import OpExecuted, OpRecord, Stopped, VersionFinal
from engine.errors import NetvizError

FORMAT = "netviz-recording"
FORMAT_VERSION = 2
CHUNK_STOPS = 64
#: members under this size are deflated whatever they hold (the header dominates)
SMALL_BYTES = 1 << 16
#: a larger member is deflated when at least this share of its bytes are zero (ReLU outputs)
ZERO_SHARE = 0.6
_DATE = (2026, 1, 1, 0, 0, 0)  # NOTE: a fixed member date: time.localtime per member is a cost and no fact
#: bytes of values handed to the writer thread and not written yet, beyond which the run waits for it
MAX_PENDING = 256 << 20


class RecordingError(NetvizError):
    """A recording that cannot be written or read (one line naming the file, member and blob)."""


def model_hash(model: Any) -> str:
    """SHA-256 of the predict and init nets (deterministic protobuf bytes): what a recording was made of."""
    h = hashlib.sha256()
    for net in (model.predict, model.init):
        h.update(net.SerializeToString(deterministic=True))
    return h.hexdigest()


def blob_member(name: str, version: int, rewrite: int = 0) -> str:
    """The member holding `name`@`version` (`rewrite` > 0: a later, final value of the same version)."""
    return f"blobs/{quote(name, safe='')}@{version}" + (f"~{rewrite}" if rewrite else "") + ".npy"


def local_member(name: str, version: int, ws: int, seq: int) -> str:
    """The member holding a value workspace `ws` held as `name` before stop `seq` that no recorded op
    wrote there (a binding's local copy when a Do unbinds it, an RNN step's view): version `version`
    is the debugger's count of `name` then."""
    return f"blobs/{quote(name, safe='')}@{version}w{ws}s{seq}.npy"


def stop_dict(r: OpRecord) -> dict[str, Any]:
    """One op record as JSON (the versions are filled in by the recorder)."""
    return {"seq": r.seq, "path": list(r.path), "op_type": r.op_type, "label": r.label, "frames": list(r.frames),
            "wall_s": r.wall_s, "backward": r.backward, "skipped": r.skipped,
            "outputs": [[o.name, 0, list(o.shape), o.dtype, o.nan_count, o.inf_count] for o in r.outputs]}


def _deflates(arr: np.ndarray) -> bool:
    """Whether deflating `arr` pays: small, or holding many zeros (cheap to deflate and well worth it)."""
    if arr.nbytes <= SMALL_BYTES:
        return True
    if arr.dtype.kind not in "fciub":
        return False
    # NOTE: a sample of 64 Ki evenly spaced elements says it: counting all 500 MB of ResNet-50's cost 0.2 s
    flat = arr.reshape(-1)
    sample = flat[::max(1, flat.size >> 16)]
    return (sample.size - np.count_nonzero(sample)) >= ZERO_SHARE * sample.size


class Recorder:
    """A debugger listener writing a recording as the debugger runs.

    Parameters
    ----------
    dbg : Debugger
        Attached at once (its :attr:`listeners`); its workspace now is version 0 of every blob.
    path : str or Path
        The ``.nvrec`` file to write (replaced if it exists).

    Examples
    --------
    >>> rec = Recorder(dbg, "run.nvrec")          # doctest: +SKIP
    >>> stop = dbg.continue_(); rec.close(stop)   # doctest: +SKIP
    """

    def __init__(self, dbg: Any, path: str | Path) -> None:
        from engine.runtime import device as dev  # noqa: PLC0415

        self.dbg, self.path, self._host = dbg, Path(path), dev.to_host
        try:
            _set_aside(self.path)
            self.zf = zipfile.ZipFile(self.path, "w", allowZip64=True)
        except OSError as e:
            raise RecordingError(f"{self.path}: cannot write the recording: {e.strerror}") from None
        self.blobs: dict[str, str] = {}        # "name@version" → member
        self.rewrites: dict[str, int] = {}
        self.pending: list[dict[str, Any]] = []
        self.chunks: list[str] = []
        self.nstops, self.bytes_in, self.program = 0, 0, False
        # workspaces by the identity of their blob mapping (a rebind makes a new one): id → number, and the
        # last (parent, shared, bindings) written for each number
        self._ws_ids: dict[int, int] = {id(dbg.ws.values): 0}
        self._ws_count = 0  # the last number given (a dead mapping's number is never given again)
        self._ws_defs: dict[int, tuple[int, bool, dict[str, str]]] = {}
        self._roots: list[Any] = []
        self._deep = False  # the last stop ran in a subnet
        self._known: dict[int, set[str]] = {}  # workspace → its local names whose value a member holds
        # NOTE: members are written on a thread of their own: zlib's crc32/deflate and the file writes let go
        # of the GIL, so they overlap the kernels (ResNet-50 fwd+bwd: 500 MB beside a 3-4 s run)
        self._queue: queue.Queue[tuple[Any, ...] | None] = queue.Queue()
        self._room = threading.Condition()
        self._pending_bytes, self._error = 0, None
        self._thread = threading.Thread(target=self._drain, name="netviz-recorder", daemon=True)
        self._thread.start()
        self._json("meta.json", self._meta())
        for name, net in (("predict", dbg.model.predict), ("init", dbg.model.init)):
            self._submit(self._bytes, f"nets/{name}.pb", net.SerializeToString())
        for name in sorted(dbg.ws.values):
            self._write(name, 0, dbg.ws.values[name])
        self._known[0] = set(dbg.ws.values)
        dbg.listeners.append(self)

    def _meta(self) -> dict[str, Any]:
        dbg, model = self.dbg, self.dbg.model
        return {"format": FORMAT, "version": FORMAT_VERSION, "model_hash": model_hash(model),
                "model": str(model.path) if model.path else None,
                "init": str(model.init_path) if model.init_path else None,
                "device": dbg.device or "net", "loss": list(dbg.loss), "seed": dbg.seed,
                "inputs": sorted(dbg.given_feeds) or sorted(model.value_info),
                "synthesized": list(dbg.synthesized)}

    @staticmethod
    def _info(member: str, compress: int) -> zipfile.ZipInfo:
        info = zipfile.ZipInfo(member, _DATE)
        info.compress_type = compress
        info.external_attr = 0o644 << 16
        # NOTE: ZipFile.open(info, "w") takes the level from the ZipInfo (zipfile's default, 6, is 3x slower)
        try:
            info.compress_level = 1  # type: ignore[attr-defined]  # Python >= 3.13
        except AttributeError:
            info._compresslevel = 1  # Python <= 3.12's name
        return info

    def _json(self, member: str, obj: Any) -> None:
        self._submit(self._bytes, member, json.dumps(obj, separators=(",", ":")).encode())

    def _bytes(self, member: str, data: bytes) -> None:
        self.zf.writestr(self._info(member, zipfile.ZIP_DEFLATED), data)

    def _submit(self, fn: Any, *args: Any, nbytes: int = 0) -> None:
        """Queue one member write for the writer thread (waiting while MAX_PENDING bytes are queued)."""
        if self._error is not None:
            raise self._error
        with self._room:
            self._room.wait_for(lambda: self._pending_bytes <= MAX_PENDING or self._error is not None)
            self._pending_bytes += nbytes
        self._queue.put((fn, args, nbytes))

    def _drain(self) -> None:
        """The writer thread: members in the order they were queued, until close() queues None."""
        while (item := self._queue.get()) is not None:
            fn, args, nbytes = item
            try:
                if self._error is None:
                    fn(*args)
            except RecordingError as e:
                self._error = e
            except (OSError, ValueError, zipfile.LargeZipFile) as e:
                self._error = RecordingError(f"{self.path}: cannot write the recording: {e}")
            with self._room:
                self._pending_bytes -= nbytes
                self._room.notify_all()

    def _write(self, name: str, version: int, value: Any, final: bool = False, member: str = "",
               copy: bool = False) -> bool:
        """Write one blob version (`member`: a workspace's local value instead, :func:`local_member`;
        `copy`: of the value as it is now, one the run changes in place); False for a value that is not a
        numeric array (not recorded)."""
        if not hasattr(value, "dtype") or not hasattr(value, "shape") or value.dtype == object:
            return False
        arr = np.asarray(self._host(value))
        if member or copy:  # NOTE: a copy: a view's rows change under the writer thread
            arr = arr.copy()
        if member:
            self._submit(self._array, member, arr, f"blob '{name}' in a subnet's workspace", nbytes=arr.nbytes)
            self.bytes_in += arr.nbytes
            return True
        key = f"{name}@{version}"
        rewrite = self.rewrites[key] = self.rewrites.get(key, -1) + 1 if final else 0
        member = blob_member(name, version, rewrite)
        self._submit(self._array, member, arr, f"blob '{name}' version {version}", nbytes=arr.nbytes)
        self.blobs[key] = member
        self.bytes_in += arr.nbytes
        return True

    def _array(self, member: str, arr: np.ndarray, what: str) -> None:
        info = self._info(member, zipfile.ZIP_DEFLATED if _deflates(arr) else zipfile.ZIP_STORED)
        try:
            with self.zf.open(info, "w", force_zip64=arr.nbytes > (1 << 30)) as out:
                if arr.flags.c_contiguous and arr.dtype.hasobject is False and arr.size:
                    # NOTE: write_array's own header, then the buffer itself: write_array copies it (tobytes)
                    np.lib.format.write_array_header_1_0(out, np.lib.format.header_data_from_array_1_0(arr))
                    out.write(memoryview(arr.reshape(-1).view(np.uint8)))
                else:
                    np.lib.format.write_array(out, arr, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise RecordingError(f"{self.path}: cannot write {what}: {e}") from None

    def __call__(self, event: Any) -> None:
        if isinstance(event, OpExecuted):
            r, dbg = event.record, self.dbg
            stop = stop_dict(r)
            if not self.program:  # NOTE: the program is known once the first op ran (backward() comes after us)
                self._program()
            values = dbg.frames[-1].ws.values
            stop["ws"] = here = self._ws(values, stop)
            deep = len(r.path) > 2
            if "wsdef" in stop or deep and not self._deep:
                # NOTE: a subnet run began: what its control op made in the main workspace (RNN buffers)
                self._locals(0, dbg.ws.values, stop)
            self._deep = deep
            views = getattr(values, "views", None)
            linked = getattr(dbg, "_linked", None) or ()
            for k, out in enumerate(stop["outputs"]):
                if views and out[0] in views:  # NOTE: an RNN step's write through a view lands in buffer rows
                    base, rows = views[out[0]]
                    owner, name = self._owner(values, base)
                    stop.setdefault("views", []).append([k, here if owner is values else self._ws(owner, stop),
                                                         name, rows.start, rows.stop])
            for out in stop["outputs"]:
                out[1] = version = dbg.versions.get(out[0], 0)
                owner, name = self._owner(values, out[0])
                key = here if owner is values else self._ws(owner, stop)
                out.append(key)
                if name != out[0]:
                    out.append(name)
                known = self._known.setdefault(key, set())
                if name not in known:
                    self._before(out[0], version - 1, key, stop)
                    known.add(name)
                if out[0] in values:
                    # NOTE: a link buffer's later timesteps write rows into this very array: kept as it is now
                    self._write(out[0], version, values[out[0]], copy=out[0] in linked)
            self.pending.append(stop)
            self.nstops += 1
            if len(self.pending) >= CHUNK_STOPS:
                self._flush()
        elif isinstance(event, VersionFinal):
            # NOTE: an RNN state buffer's rows written through a link view after its version was recorded
            self._write(event.name, event.version, event.value, final=True)

    def _ws(self, values: Any, stop: dict[str, Any]) -> int:
        """The number of the workspace whose blob mapping is `values`; adds its definition (and its
        parents') to `stop` when new or changed since last written."""
        key = self._ws_ids.get(id(values))
        if key is None:
            key = self._ws_ids[id(values)] = self._ws_count = self._ws_count + 1
            # NOTE: a dead mapping's id may be reused by a new one: forget it when it goes
            try:
                weakref.finalize(values, self._ws_ids.pop, id(values), None)
            except TypeError:  # a plain dict (another root workspace): kept, so its id stays its own
                self._roots.append(values)
        parent = getattr(values, "parent", None)
        if parent is None or not hasattr(values, "bindings"):
            return key
        bindings = values.bindings
        old = self._ws_defs.get(key)
        if old is None or old[1] != values.shared or old[2] != bindings:
            up = self._ws(parent, stop)
            self._ws_defs[key] = (up, values.shared, dict(bindings))
            stop.setdefault("wsdef", []).append([key, up, bool(values.shared), dict(bindings)])
            self._locals(key, values, stop)
        return key

    def _locals(self, key: int, values: Any, stop: dict[str, Any]) -> None:
        """Write the local blobs of a workspace first seen (or rebound) at `stop` that no recorded op wrote
        there: a Do's local copies of the names it unbound (the backward pass reads the forward
        iteration's values from them); in the main workspace, what a control op made there (an RNN's
        state buffers before their first link).  Not the outputs of `stop` itself (its value
        now is after the op; the write is recorded as such)."""
        known = self._known.setdefault(key, set())
        outs = {o[0] for o in stop["outputs"]}
        local = getattr(values, "local", values)  # NOTE: a root workspace's mapping is a dict of its own
        for name in list(local):
            if name in known or name in outs:
                continue
            version = self.dbg.versions.get(name, 0)
            value = local[name]
            if self._write(name, version, value, member=local_member(name, version, key, stop["seq"])):
                known.add(name)
                stop.setdefault("wslocal", []).append([key, name, version])

    def _before(self, name: str, version: int, key: int, stop: dict[str, Any]) -> None:
        """The value `name` held in workspace `key` before `stop`'s op first wrote it there, when it existed
        (made by a control op, as an RNN's state buffer before its first link): from the op's undo record."""
        undo = getattr(self.dbg, "_undo", None)
        if not undo or undo[-1].nrec != stop["seq"]:
            return
        old = next((w[2] for w in undo[-1].writes if w[1] == name), None)
        if old is not None and self._write(name, version, old, member=local_member(name, version, key, stop["seq"])):
            stop.setdefault("wslocal", []).append([key, name, version])

    @staticmethod
    def _owner(values: Any, name: str) -> tuple[Any, str]:
        """The blob mapping (and the name in it) a write of `name` in `values` landed in: a bound or
        shared-visible name forwards to the parent, as the runtime's child workspace writes it."""
        while True:
            parent = getattr(values, "parent", None)
            if parent is None or not hasattr(values, "local") or name in values.local:
                return values, name
            outer = values.bindings.get(name)
            if outer is None and (not values.shared or name not in parent):
                return values, name
            values, name = parent, name if outer is None else outer

    def _program(self) -> None:
        self._submit(self._bytes, "nets/program.pb", self.dbg.frames[0].net.SerializeToString())
        self.program = True

    def _flush(self) -> None:
        if self.pending:
            member = f"stops/{len(self.chunks):05d}.json"
            self._json(member, self.pending)
            self.chunks.append(member)
            self.pending = []

    def close(self, stop: Stopped | None = None) -> dict[str, Any]:
        """Write the last stops and the index; detach.  Returns the index (counts, the stop reason)."""
        if self in self.dbg.listeners:
            self.dbg.listeners.remove(self)
        self._flush()
        index = {"complete": True, "stops": self.nstops, "chunks": self.chunks, "blobs": self.blobs,
                 "stopped": stop.reason if stop is not None else None,
                 "detail": stop.detail if stop is not None else "",
                 "program": "nets/program.pb"}
        if not self.program:
            self._program()
        self._json("index.json", index)
        self._queue.put(None)
        self._thread.join()
        self.zf.close()
        if self._error is not None:
            raise self._error
        return index


def _set_aside(path: Path) -> None:
    """An older file at `path` is renamed aside and deleted by a thread, so the recording starts a new
    file: truncating a file of hundreds of MB costs the kernel ~0.1 s in the call, and makes ext4 write
    the new one out in full at close (auto_da_alloc: 0.25 s for ResNet-50's 506 MB, measured).  The new
    file is written at `path` itself, so a run killed midway leaves a recording readable up to the cut.
    A symbolic link stays (the recording goes where it points, as before)."""
    if path.is_symlink() or not path.is_file():
        return
    old = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.old")
    os.rename(path, old)

    def unlink() -> None:
        with contextlib.suppress(OSError):
            old.unlink()
    threading.Thread(target=unlink, name="netviz-unlink").start()


def record_run(dbg: Any, path: str | Path) -> tuple[Stopped, dict[str, Any]]:
    """Run `dbg` to its end (forward, and backward when it has a loss) while recording it to `path`.

    Returns the stop and the index :meth:`Recorder.close` wrote."""
    rec = Recorder(dbg, path)
    try:
        if dbg.loss:
            dbg.backward()
        stop = dbg.continue_()
    except BaseException:
        rec.close(None)
        raise
    return stop, rec.close(stop)


def npy_bytes(arr: np.ndarray) -> bytes:
    """`arr` as ``.npy`` bytes (tests and tools compare members with dumps through it)."""
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, allow_pickle=False)
    return buf.getvalue()
