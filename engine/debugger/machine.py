"""The stepping machine under the debugger: frames, the one primitive ``_advance``, undo.

A frame is (net, op index, workspace, label).  Plain ops run through the executor's bound ops;
a plan op (:mod:`engine.runtime.plans`) pushes one frame per subnet run it asks for.  Every unit of
work pushes an undo entry holding references to the values it overwrote (kernels never
mutate their inputs), bounded by a memory budget.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from engine.runtime import blocking
from engine.runtime import device as dev
from engine.runtime import executor
from engine.debugger.records import (BlobSummary, FrameInfo, Health, OpExecuted, OpPath, OpRecord, ProgramCounter,
                                     Stopped, VersionFinal, counts_of, norm_of)
from engine.errors import ExecutionError, NetvizError
from engine.runtime.plans import SubnetRun
from engine.autodiff.training import update_ratio
from engine.runtime.workspace import Workspace
from proto import caffe2_pb2

_MISSING = object()
DEFAULT_BUDGET = 512 * 1024**2
KEEP_BUDGET = 512 * 1024**2
BIND_AHEAD = 64  # ops bound together when the pc reaches one not bound yet (Machine._bound)


class DebuggerError(NetvizError):
    """A move or query the debugger cannot do in its current state."""


class EvictedError(DebuggerError):
    """A blob version's value was dropped from the kept values (memory budget); re-run to get it."""


@dataclass(eq=False)
class _Frame:
    net: caffe2_pb2.NetDef
    ws: Workspace
    label: str
    prefix: OpPath
    plan: Any = None                 # generator of the op that pushed this frame
    owner: executor.BoundOp | None = None
    pc: int = 0
    bound: dict[int, executor.BoundOp] = field(default_factory=dict)
    start: int = 0                   # records made before this frame's run began (marks of this iteration)
    checks: int = 0                  # cond_net evaluations so far of the control op at pc (numbered labels)
    params: tuple[Any, Any, frozenset[str]] | None = None  # (net, main net, external inputs): Machine._params

    def path(self, i: int | None = None) -> OpPath:
        return (*self.prefix, self.pc if i is None else i)

    @property
    def at_end(self) -> bool:
        return self.pc >= len(self.net.op)


@dataclass(eq=False)
class _Undo:
    """One undoable unit: ``kind`` op (a plain op or inject), enter, next or complete."""

    kind: str
    frame: _Frame
    pc: int
    depth: int
    writes: list[tuple[Workspace, str, Any, Any, Any]] = field(default_factory=list)  # ws, name, old, old dev, new
    nbytes: int = 0
    nrec: int = 0                    # records before this unit ran
    states: list[tuple[Any, Any]] = field(default_factory=list)  # (object, snapshot) of stateful blobs
    rng: Any = None                  # an enter's: the random source's state, so a replay draws the same numbers
    serial: int = 0                  # units pushed before it and it (a move's start is the serial then)


def _nbytes(v: Any) -> int:
    return int(getattr(v, "nbytes", 0) or 0)


#: dtype → (its name, its kind), or None for object arrays (str(dtype) is ~3 µs, a per-op cost)
_DTYPES: dict[Any, tuple[str, str] | None] = {}


def _dtype_info(dtype: Any) -> tuple[str, str] | None:
    try:
        return _DTYPES[dtype]
    except KeyError:
        info = _DTYPES[dtype] = None if dtype == object else (str(dtype), getattr(dtype, "kind", ""))
        return info
    except TypeError:  # an unhashable dtype-like attribute
        return None if dtype == object else (str(dtype), getattr(dtype, "kind", ""))


_checker: list[Any] = []  # the helper thread's executor (a restart's norms), made on first use


def _helper() -> Any:
    """The debugger's one helper thread (an executor), made on first use."""
    if not _checker:
        from concurrent.futures import ThreadPoolExecutor  # NOTE: an idle pool worker counts as asleep
        _checker.append(ThreadPoolExecutor(1, thread_name_prefix="netviz-debugger"))  # (engine.runtime.blocking)
    return _checker[0]


def _resolve_all(health: list[Health]) -> None:
    for h in health:
        h.resolve()


def _summary(name: str, v: Any, later: bool = True) -> BlobSummary:
    """The summary of one output (:class:`Health` for a float value).

    NaN/Inf are counted now (in the move's thread: on a helper thread beside the kernels the checks
    slowed the ops on 2 cores, DenseNet-121's ops in ``netviz run`` 84-92 -> 105-114 ms, and the app's
    ``c`` was no faster).  `later`: the norm is computed when read; else now too (a value that later
    writes through views change: an RNN link's, as it was when recorded).
    """
    dtype = getattr(v, "dtype", None)
    info = _dtype_info(dtype) if dtype is not None and hasattr(v, "shape") else None
    if info is None:
        return BlobSummary(name, (), type(v).__name__, (0, 0, None))
    shape = v.shape if type(v) is np.ndarray else tuple(int(d) for d in v.shape)
    if not (info[1] and info[1] in "fc" and v.size):
        return BlobSummary(name, shape, info[0], (0, 0, None))
    if not later:
        nan, inf = counts_of(v)
        return BlobSummary(name, shape, info[0], (nan, inf, None if nan or inf else norm_of(v)))
    if type(v) is np.ndarray and np.isfinite(v).all():  # NOTE: counts_of's common case, without its device look-up
        return BlobSummary(name, shape, info[0], Health(v))
    return BlobSummary(name, shape, info[0], Health(v, *counts_of(v)))


class Machine:
    """Frames, records, versions and undo; :class:`~engine.debugger.Debugger` adds the moves."""

    frames: list[_Frame]
    records: list[OpRecord]
    records_by_path: dict[OpPath, OpRecord]
    versions: dict[str, int]
    listeners: list[Callable[[Any], None]]
    stale: set[OpPath]
    budget: int
    record_stats: bool
    device: str | None
    fwd_index: list[int | None]
    #: ``u`` after a finished subnet run goes back to its last op (False: undoes the whole control-flow op)
    replay_into_subnets = True

    def _reset_machine(self, main: _Frame) -> None:
        self.frames = [main]
        self.records, self.records_by_path, self.stale, self.versions = [], {}, set(), {}
        # NOTE: values per SSA version.  Kernels never mutate their inputs, so keeping a reference
        # to what an op wrote is the value of that version even after an in-place op replaced it.
        # NOTE: a restart: the last run's records get their norms (each lets go of the value it holds)
        # while a UI's move worker is idle (idle_work), else on the helper thread when the next move
        # starts (_hand_over_norms).  A restart that computed them itself took 20 ms longer after a
        # continue through DenseNet-121; on the helper thread beside the next c's kernels they made
        # that c 20 ms slower (c, r, c: 92-131 ms, 73-104 ms with them done first; quiet machine)
        self._hand_over_norms()
        self._unread = [k[2] for k in getattr(self, "kept", {}).values() if k[2] is not None and k[2].value is not None]
        # (op path | None=@0, blob) → (record seq, value, the record's Health until its norm is computed)
        self.kept: dict[tuple[OpPath | None, str], tuple[int, Any, Health | None]] = {}
        self.kept_bytes, self.kept_evicted = 0, 0
        self.injected: dict[str, int] = {}   # blob → version an inject gave it (until an op writes it)
        self.run_starts: dict[OpPath, int] = {}  # subnet prefix → records made before the last run an op ran in
        # NOTE: blob → (path, seq, version) of the latest version of a buffer rnn_internal_apply_link made
        # views of: the step's ops write its rows through the views after the record (_close_version).
        self._linked: dict[str, tuple[OpPath, int, int]] = {}
        self.error: str | None = None
        self._undo: list[_Undo] = []
        # (units pushed then, pc path, whole: Debugger._run) at each move's start
        self._move_starts: list[tuple[int, OpPath, bool]] = []
        self._pushed = 0
        self._undo_bytes = 0
        self.undo_truncated = False

    def _hand_over_norms(self) -> None:
        """The last run's norms not computed yet (:meth:`idle_work` did not get to them): to the helper thread."""
        unread, self._unread = getattr(self, "_unread", None), []
        if unread:
            _helper().submit(_resolve_all, list(unread))  # NOTE: a copy: idle_work may still be cutting its list

    def idle_work(self, stop: Callable[[], bool]) -> None:
        """What a UI's move worker does between moves (once the frame showing the last stop is drawn),
        while `stop()` is false: the norms of the run before the last restart (a few at a time: each
        lets go of the value it holds), then :meth:`bind_ahead`.  A move started meanwhile hands the
        norms left to the helper thread."""
        while not stop():
            unread = self._unread
            if not unread:
                break
            for h in unread[-16:]:
                h.resolve()  # NOTE: a move's _hand_over_norms may hand these over too: resolving twice is harmless
            del unread[-16:]
            time.sleep(0)  # the GIL to the UI thread between chunks
        self.bind_ahead(stop)

    @property
    def _bind_device(self) -> str | None:
        return "cpu" if self.device == "cpu" else None

    # ---- state ------------------------------------------------------------------------
    @property
    def num_forward(self) -> int:
        """Ops of the forward net; later top-level ops are the generated backward pass."""
        raise NotImplementedError

    @property
    def pc(self) -> ProgramCounter:
        infos = []
        for f in self.frames:
            op = f.net.op[f.pc] if not f.at_end else None
            infos.append(FrameInfo(f.net.name, f.label, f.pc, op.type if op is not None else "", f.path()))
        return ProgramCounter(tuple(infos))

    @property
    def finished(self) -> bool:
        return len(self.frames) == 1 and self.frames[0].at_end

    def current_op(self) -> caffe2_pb2.OperatorDef | None:
        f = self.frames[-1]
        return None if f.at_end else f.net.op[f.pc]

    def is_backward(self, path: OpPath) -> bool:
        return len(path) == 2 and path[1] >= self.num_forward

    def forward_index_of(self, path: OpPath) -> int | None:
        """The forward op a top-level gradient op came from (None for forward ops, autogen fills)."""
        if not self.is_backward(path):
            return None
        return self.fwd_index[path[1] - self.num_forward]

    def _emit(self, event: Any) -> None:
        for fn in list(self.listeners):
            fn(event)

    def _stop(self, reason: str, detail: str = "") -> Stopped:
        event = Stopped(reason, self.pc, detail)
        self._emit(event)
        return event

    # ---- the one primitive ------------------------------------------------------------
    def _bound(self, f: _Frame) -> executor.BoundOp:
        b = f.bound.get(f.pc)
        if b is None:
            with self._bind_lock:  # NOTE: bind_ahead may be binding this frame's ops (another thread)
                b = f.bound.get(f.pc)
                if b is None:
                    b = f.bound[f.pc] = self._bind(f, f.pc)  # NOTE: one that cannot be bound fails here, as it runs
                    # NOTE: the next ops too, in one pass: bound between kernels (whose data evicts the binder's
                    # code and tables from the caches) DenseNet-121's 668 binds took 12 ms of a continue, 6 ms so
                    self._bind_some(f, f.pc + 1, BIND_AHEAD - 1, stop_at_error=True)
        return b

    def _bind_some(self, f: _Frame, start: int, n: int, stop_at_error: bool) -> int:
        """Bind up to `n` ops of frame `f` not bound yet, from op `start` on (the caller holds the bind
        lock); an op that cannot be bound is left unbound (it fails with its error at its own turn).
        Returns the index after the last op looked at."""
        ops, bound, i = len(f.net.op), f.bound, start
        while i < ops and n > 0:
            if i not in bound:
                try:
                    bound[i] = self._bind(f, i)
                except Exception:  # noqa: BLE001 - it fails again, with its error, when the pc gets there
                    if stop_at_error:
                        return i
                n -= 1
            i += 1
        return i

    def bind_ahead(self, stop: Callable[[], bool], chunk: int = BIND_AHEAD) -> int:
        """Bind the main net's ops not bound yet, `chunk` at a time, between moves (:meth:`idle_work`),
        so a later continue binds nothing (DenseNet-121: 8-10 ms of its ``c``).  Stops as soon as
        `stop()` is true (a key queued a move); between chunks it lets go of the GIL.  A move waits
        for the chunk being bound (about 0.6 ms).  An op that cannot be bound stays unbound: it fails
        at its own turn, as before.  Returns how many ops were looked at."""
        main, i = self.frames[0], 0
        while i < len(main.net.op) and not stop():
            with self._bind_lock:
                if main is not self.frames[0]:  # a restart made a new main frame: begin again with it
                    main, i = self.frames[0], 0
                i = self._bind_some(main, i, chunk, stop_at_error=False)
            time.sleep(0)
        return i

    def _bind(self, f: _Frame, i: int) -> executor.BoundOp:
        op = f.net.op[i]
        if not op.HasField("device_option") and f.net.HasField("device_option"):
            op = caffe2_pb2.OperatorDef.FromString(op.SerializeToString())
            op.device_option.CopyFrom(f.net.device_option)
        return executor.bind(op, i, f.net.name, workspace=f.ws, device=self._bind_device)

    @blocking.never_wait  # one thread, ops in order: a queue op that would block stops with an error
    def _advance(self) -> tuple[str, dict[str, Any]]:
        """Run one unit: a plain op ("op"), entering a plan op ("enter"), its next subnet run
        ("next"), its completion ("complete"); "end" when nothing is left.  Returns the event
        kind and the blobs written."""
        return self._advance_unit()

    def _advance_unit(self) -> tuple[str, dict[str, Any]]:
        """:meth:`_advance` for a caller already inside :func:`blocking.single_threaded` (a move's loop)."""
        f = self.frames[-1]
        if not f.at_end:
            b = self._bound(f)
            if b.plan:
                # NOTE: Do pushes/pops workspace stacks in place; undo must put them back too.
                states = [(v, v.snapshot()) for v in list(f.ws.values.values()) if hasattr(v, "snapshot")]
                # NOTE: the op's outputs as they were: a Do writes bound outer blobs through its child
                # workspace while it runs, so the value its completion replaces is already the new one
                values = f.ws.values
                before = [(f.ws, n, values[n] if n in values else _MISSING, f.ws.devices[n] if n in values else None,
                           None) for n in b.outs]
                self._keep_initial(f, [(n, o, d) for _, n, o, d, _ in before])  # NOTE: not at completion: see above
                rng = getattr(self, "_rng", None)
                self._push_undo(_Undo("enter", f, f.pc, len(self.frames), writes=before, states=states,
                                      rng=rng.bit_generator.state if rng is not None else None))
                return self._resume(f, b, executor.call_kernel(b, f.ws), first=True)
            return "op", self._run_plain(f, b)
        if len(self.frames) == 1:
            return "end", {}
        child = self.frames.pop()
        return self._resume(self.frames[-1], child.owner, child.plan, first=False)

    def _resume(self, parent: _Frame, b: executor.BoundOp, plan: Any, first: bool) -> tuple[str, dict[str, Any]]:
        try:
            run: SubnetRun = next(plan) if first else plan.send(None)
        except StopIteration as stop:
            writes = self._store(parent, b, stop.value)
            for name in list(self._linked):  # the step nets are done: their view writes have landed
                self._close_version(name, None)
            self._push_undo(_Undo("complete", parent, parent.pc, len(self.frames), writes))
            self._record(parent, b, 0.0, {w[1]: w[4] for w in writes})
            parent.pc += 1
            return "complete", {w[1]: w[4] for w in writes}
        prefix = (*parent.prefix, parent.pc, run.arg)
        label = run.label
        if label == "cond_net":  # NOTE: numbered like the iterations: check k decides iteration k
            parent.checks = 0 if first else parent.checks + 1
            label = f"cond_net check {parent.checks}"
        self.frames.append(_Frame(run.net, run.workspace, label, prefix, plan, b, start=len(self.records)))
        if not first:
            self._push_undo(_Undo("next", parent, parent.pc, len(self.frames)))
        return ("enter" if first else "next"), {}

    def _run_plain(self, f: _Frame, b: executor.BoundOp) -> dict[str, Any]:
        values = f.ws.values
        old = [(n, values[n] if n in values else _MISSING, f.ws.devices[n] if n in values else None) for n in b.outs]
        self._keep_initial(f, old)
        start = time.perf_counter()
        executor.run_bound(b, f.ws)
        wall = time.perf_counter() - start
        written = {n: values[n] for n in b.outs}
        self._push_undo(_Undo("op", f, f.pc, len(self.frames),
                              [(f.ws, n, o, d, written[n]) for n, o, d in old]))
        self._record(f, b, wall, written)
        f.pc += 1
        return written

    def _store(self, f: _Frame, b: executor.BoundOp, out: Any) -> list[tuple[Workspace, str, Any, Any, Any]]:
        values = f.ws.values
        old = [(n, values[n] if n in values else _MISSING, f.ws.devices[n] if n in values else None) for n in b.outs]
        self._keep_initial(f, old)
        executor.store_outputs(b, f.ws, out)
        return [(f.ws, n, o, d, values.get(n, _MISSING) if hasattr(values, "get") else values[n]) for n, o, d in old]

    def _record(self, f: _Frame, b: executor.BoundOp, wall: float, written: Mapping[str, Any],
                skipped: bool = False) -> None:
        # NOTE: runs after every op (668 in DenseNet-121): the common case (no RNN link, no inject,
        # nothing stale, no backward pass) takes no detour
        linked = [n for n in written if n in self._linked] if self._linked else []
        for n in linked:
            self._close_version(n, written[n])
        versions = self.versions
        for n in written:
            versions[n] = versions.get(n, 0) + 1
        if self.injected:
            for n in written:
                self.injected.pop(n, None)
        path = f.path()
        health: dict[str, Health] = {}
        outs: tuple[BlobSummary, ...] = ()
        ratio = None
        if self.record_stats:
            summaries = []
            later = not linked and b.op.type != "rnn_internal_apply_link"  # NOTE: views write those: now
            for n, v in written.items():
                if v is not _MISSING:
                    summary = _summary(n, v, later)
                    summaries.append(summary)
                    if type(summary.health) is Health:
                        health[n] = summary.health
            outs = tuple(summaries)
            # NOTE: only an op that overwrote one of its inputs can have updated a parameter; the set of
            # the nets' external inputs (849 names in DenseNet-121: 0.16 ms to build) is made once per net
            # NOTE: and only when one of those is a parameter (update_ratio skips the others): DenseNet-121's
            # 121 in-place BN/Relu rewrite activations, 1.5-2 ms of update_ratio calls per continue
            if self._undo and not written.keys().isdisjoint(getattr(b, "ins", None) or b.op.input) \
                    and not self._params(f).isdisjoint(written):
                ratio = update_ratio(b.op, self._undo[-1].writes, self._params(f))
        main = self.frames[0]
        frames = tuple(x.label for x in self.frames[1:self.frames.index(f) + 1]) if f is not main else ()
        backward = bool(self.fwd_index) and self.is_backward(path)
        op_type = b.op.type
        rec = OpRecord(len(self.records), path, op_type, f.label, wall, outs, backward,
                       self.forward_index_of(path) if backward else None, skipped, ratio, frames)
        self.records.append(rec)
        self.records_by_path[path] = rec
        if self.stale:
            self.stale.discard(path)
        for n, v in written.items():
            if v is not _MISSING:
                self._keep((path, n), rec.seq, v, health.get(n))
        if op_type == "rnn_internal_apply_link" and len(b.op.output) > 1 and b.op.output[1] in written:
            linked.append(b.op.output[1])
        for n in linked:  # a link's buffer: later writes through its views land in this version
            self._linked[n] = (path, rec.seq, versions[n])
        if self.listeners:
            self._emit(OpExecuted(rec))

    def _params(self, f: _Frame) -> frozenset[str]:
        """The blobs that can be parameters in frame `f`: its net's and the main net's external inputs."""
        main = self.frames[0].net
        if f.params is None or f.params[0] is not f.net or f.params[1] is not main:
            f.params = (f.net, main, frozenset({*f.net.external_input, *main.external_input}))
        return f.params[2]

    def _close_version(self, name: str, new_value: Any) -> None:
        """Fix the value of `name`'s linked version now that no view write can change it any more.

        Kept values are references; when the next version is the same array (the next link of the
        same state buffer), the earlier version keeps a copy of the array as it is now.  Its record's
        summary is redone and :class:`VersionFinal` tells listeners (``run --dump``) its value.
        `new_value` None: the RecurrentNetwork op completed (the version stays linked, unchanged).
        """
        path, seq, version = self._linked[name] if new_value is None else self._linked.pop(name)
        kept = self.kept.get((path, name))
        if kept is None or kept[0] != seq:
            return  # a later run of that op replaced it, or the budget dropped it
        value = kept[1]
        if new_value is not None and new_value is value and hasattr(value, "copy"):
            value = value.copy()
            self._keep((path, name), seq, value)
        if self.record_stats and seq < len(self.records):
            rec = self.records[seq]
            outs = tuple(_summary(name, value, later=False) if o.name == name else o for o in rec.outputs)
            self.records[seq] = rec = replace(rec, outputs=outs)
            if self.records_by_path.get(path) is not None and self.records_by_path[path].seq == seq:
                self.records_by_path[path] = rec
        self._emit(VersionFinal(name, version, path, value))

    # ---- values per SSA version ---------------------------------------------------------
    def _keep_initial(self, f: _Frame, old: list[tuple[str, Any, Any]]) -> None:
        """Version 0 of a blob as it was before its first overwrite: in the main net (a feed, a weight)
        once, in a subnet once per run of it (key: the frame's prefix), so an iteration's ``acc@0`` is
        what that iteration read, not the value its own ops wrote over it."""
        if f is self.frames[0]:
            for n, o, _ in old:
                if o is not _MISSING and (None, n) not in self.kept:
                    self._keep((None, n), -1, o)
            return
        self.run_starts[f.prefix] = f.start  # NOTE: the last run an op of ran in: a run just begun shows the last
        for n, o, _ in old:
            k = self.kept.get((f.prefix, n))
            if o is not _MISSING and (k is None or k[0] != f.start):
                self._keep((f.prefix, n), f.start, o)

    def _keep(self, key: tuple[OpPath | None, str], seq: int, value: Any, health: Health | None = None) -> None:
        """Keep `value` as the version op `key[0]` wrote (record `seq`); `health`: its record's counts and
        norm, computed from the value when read or, at the latest, when it is dropped here (:meth:`_drop`)."""
        old = self.kept.pop(key, None)
        if old is not None:
            self._drop(old)
        self.kept[key] = (seq, value, health)
        self.kept_bytes += _nbytes(value)
        budget = getattr(self, "keep_budget", KEEP_BUDGET)
        while self.kept_bytes > budget and len(self.kept) > 1:  # oldest first (dict order)
            self._drop(self.kept.pop(next(iter(self.kept))))
            self.kept_evicted += 1

    def _drop(self, kept: tuple[int, Any, Health | None]) -> None:
        """A kept value leaves: its record's norm is computed now, while the value is still here."""
        self.kept_bytes -= _nbytes(kept[1])
        if kept[2] is not None:
            kept[2].resolve()

    def written_value(self, path: OpPath, name: str) -> Any:
        """What op `path` wrote to `name` on its last run (that SSA version's own value).

        Raises
        ------
        DebuggerError
            The op has not run (since the start or a step back).
        EvictedError
            The value was dropped to stay within the memory budget.
        """
        rec = self.records_by_path.get(tuple(path))
        if rec is None:
            raise DebuggerError(f"op {'/'.join(map(str, path[1:]))} has not run yet: no value for '{name}' there")
        kept = self.kept.get((tuple(path), name))
        if kept is None or kept[0] != rec.seq:
            raise EvictedError(f"the value op {'/'.join(map(str, path[1:]))} wrote to '{name}' was dropped "
                               f"(memory budget {getattr(self, 'keep_budget', KEEP_BUDGET) >> 20} MiB); "
                               "restart and run to that op to see it")
        return kept[1]

    def initial_value(self, name: str, prefix: OpPath | None = None) -> Any:
        """Version 0 of a main-net blob: its value before any op overwrote it.  With `prefix` (a
        subnet's, ``("op", 2, "loop_net", 0, "net")``): version 0 in that subnet's last run, None when
        no op of that run overwrote `name` (then it is the value the run left)."""
        if prefix is not None:
            kept = self.kept.get((tuple(prefix), name))
            last = self.run_starts.get(tuple(prefix))
            return kept[1] if kept is not None and kept[0] == last and kept[0] < len(self.records) else None
        kept = self.kept.get((None, name))
        if kept is not None:
            return kept[1]
        values = self.frames[0].ws.values
        if name in values and not self.versions.get(name):
            return values[name]
        raise EvictedError(f"version 0 of '{name}' was dropped (memory budget); restart to see it")

    # ---- undo -------------------------------------------------------------------------
    def _push_undo(self, u: _Undo) -> None:
        u.nbytes, u.nrec = sum(_nbytes(w[2]) for w in u.writes), len(self.records)
        self._pushed += 1
        u.serial = self._pushed
        self._undo.append(u)
        self._undo_bytes += u.nbytes
        while self._undo_bytes > self.budget and len(self._undo) > 1:
            self._undo_bytes -= self._undo.pop(0).nbytes
            self.undo_truncated = True

    def _restore(self, u: _Undo) -> None:
        for ws, name, old, old_dev, _ in reversed(u.writes):
            if old is _MISSING:
                ws.values.pop(name, None) if hasattr(ws.values, "pop") else None
                ws.devices.pop(name, None) if hasattr(ws.devices, "pop") else None
            else:
                try:
                    ws.values[name], ws.devices[name] = old, old_dev
                except ExecutionError:  # NOTE: a view of a buffer's rows (an RNN link) that held another
                    pass  # value before it was linked: the buffer's own entry gives its rows back
            if u.kind != "enter":  # NOTE: an enter's writes are a snapshot of the outputs, not a version
                self.versions[name] = max(0, self.versions.get(name, 1) - 1)
        self._undo_bytes -= u.nbytes

    def step_back(self) -> Stopped:
        """Undo the last op: restore the values it overwrote and move the pc back to it.

        Stepping back over the start of a subnet run undoes its whole control-flow op (a plan
        cannot be rewound into a previous iteration), restoring everything it wrote.
        """
        if not self._undo:
            raise DebuggerError("nothing to step back over" + (
                f" (history beyond the {self.budget >> 20} MiB budget was dropped)" if self.undo_truncated else ""))
        u = self._undo[-1]
        replay = 0
        if u.kind == "op" and u.frame is self.frames[-1]:
            self._undo.pop()
            self._restore(u)
            u.frame.pc = u.pc
        else:
            replay, floor = self._replay_units()
            # NOTE: where the last moves began, by undo index: the units run again below get new serials
            at = {v.serial: j for j, v in enumerate(self._undo)} if replay else {}
            u = self._undo.pop()
            owner, op_index = u.frame, u.pc  # the control-flow op this unit belongs to
            while not (u.kind == "enter" and u.frame is owner and u.pc == op_index):
                self._restore(u)
                for obj, state in u.states:  # NOTE: an inner control op's stacks (a backward Do's workspaces in a
                    obj.restore(state)       # child workspace): the oldest snapshot, restored last, is the one kept
                if not self._undo:
                    raise DebuggerError("cannot step back: the start of this control-flow op was "
                                        f"dropped from the {self.budget >> 20} MiB history")
                u = self._undo.pop()
            for obj, state in u.states:
                obj.restore(state)
            if u.rng is not None:
                self._rng.bit_generator.state = u.rng
            for ws, name, old, old_dev, _ in u.writes:  # the outputs as before the op (versions: done above)
                if old is not _MISSING:
                    ws.values[name], ws.devices[name] = old, old_dev
            for frame in self.frames[u.depth:]:
                if frame.plan is not None:
                    frame.plan.close()
            del self.frames[u.depth:]
            owner.pc = op_index
        del self.records[u.nrec:]
        self.records_by_path = {r.path: r for r in self.records}
        self._linked = {n: v for n, v in self._linked.items() if v[1] < u.nrec}
        self.error = None
        if replay:  # NOTE: into the finished subnet run: its units again, up to the last op it ran
            try:
                with executor.random_source(getattr(self, "_rng", None)), blocking.single_threaded():
                    for _ in range(replay):
                        self._advance_unit()
                self._renumber_starts(at)
            except NetvizError:  # NOTE: a run that does not replay (a backward Do's workspace stack): undone whole
                self.replay_into_subnets = False
                try:
                    while len(self._undo) > floor:
                        self.step_back()
                finally:
                    del self.replay_into_subnets
                return self._stop("step", "stepped back")
            return self._stop("step", "stepped back into the subnet run")
        return self._stop("step", "stepped back")

    def _renumber_starts(self, at: dict[int, int]) -> None:
        """Give the move starts the serials of the units run again at their undo indexes (`at`: serial →
        index before the step back), so a later ``u`` still finds where an earlier move began: ``f`` to a
        subnet's end, ``n`` on, ``u``, ``u`` went one op back instead of reversing the ``f``, as a replay does."""
        starts, undo = getattr(self, "_move_starts", None), self._undo
        for k, (serial, began, whole) in enumerate(starts or ()):
            j = at.get(serial)
            if j is not None and j < len(undo):
                starts[k] = (undo[j].serial, began, whole)

    def _replay_units(self) -> tuple[int, int]:
        """How many units, from the start of the control-flow op the last unit belongs to, lead back
        to where ``u`` goes inside it (0: nowhere inside, or a run that cannot be run again as it
        was), and how many undo units there were before that start.

        A plan's generator cannot be rewound, so stepping back from after a finished subnet run (the
        op after a While, an iteration's first op) undid the whole op (issue 42 item 18: ``u`` never
        stepped back into a finished subnet).  Undone whole and run again this many units, the pc is
        where the last move began when it began inside the op (``u`` reverses it: the op it stepped
        from, a subnet's end stop), else at the innermost op run last inside it (a ``c`` or ``t``
        from outside that stopped after it); the same values (the enter restores the random source).
        An inject or a skipped op on the way is not a unit to run again: then the whole op; so too
        when the last move began at the op itself (``n`` over a While: ``u`` undoes that ``n``)."""
        undo = self._undo
        if not self.replay_into_subnets:
            return 0, 0
        owner, index = undo[-1].frame, undo[-1].pc
        inside = owner.path(index)
        starts = self._move_starts
        while starts and starts[-1][0] >= undo[-1].serial:  # NOTE: moves undone, or that ran nothing
            starts.pop()
        whole = bool(starts) and starts[-1][2]  # NOTE: c, t, or a breakpoint's stop: u goes back one op
        if whole and starts[-1][1] == inside:
            return 0, 0  # NOTE: the last move stepped over the whole op (n at a While): u goes back over it whole
        e = next((j for j in range(len(undo) - 1, -1, -1)
                  if undo[j].kind == "enter" and undo[j].frame is owner and undo[j].pc == index), None)
        if e is None:
            return 0, 0
        serial, began = starts[-1][:2] if whole else (0, ())
        stop = next((j + 1 for j in range(len(undo) - 1, e - 1, -1) if undo[j].serial == serial), None) \
            if began[:len(inside)] == inside else None
        if stop is None:
            stop = self._last_op_inside(inside, e)
        if stop is None:
            return 0, 0
        records = self.records
        for j in range(e, stop):
            v = undo[j]
            if v.kind != "op":
                continue
            rec = records[v.nrec] if v.nrec < len(records) else None
            if rec is None or rec.skipped or rec.path != v.frame.path(v.pc) or undo[j + 1].nrec == v.nrec:
                return 0, 0  # NOTE: a skip (its record says so) or an inject (no record of its own)
        return stop - e, e

    def _last_op_inside(self, inside: OpPath, e: int) -> int | None:
        """The undo index of the unit that began the innermost op run last inside the control op at
        `inside` (whose enter is unit `e`): a body's Tanh, not the Do that ran it."""
        undo, records, n = self._undo, self.records, len(inside)
        low = undo[e].nrec
        k = next((k for k in range(len(records) - 1, low - 1, -1)
                  if len(records[k].path) > n and records[k].path[:n] == inside), None)
        if k is None:
            return None
        while k > low and len(records[k - 1].path) > len(records[k].path) \
                and records[k - 1].path[:len(records[k].path)] == records[k].path:
            k -= 1
        target = records[k].path
        return next((j for j in range(len(undo) - 1, e, -1) if undo[j].kind in ("op", "enter")
                     and undo[j].nrec <= k and undo[j].frame.path(undo[j].pc) == target), None)

