"""The debugger: moves, breakpoints, watchpoints, backward pass, inspection, inject.

The main frame runs the predict net and, once :meth:`Debugger.backward` generated it, the
backward pass appended to it.  A control-flow op is a plan (:mod:`engine.runtime.plans`): entering it
pushes a frame per subnet run (If branch, While iteration k, Do net, RNN timestep t), so every
move is a loop over one primitive (:meth:`Machine._advance`) with a stop rule.
"""
from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from engine.runtime import blocking
from engine.runtime import device as dev
from engine.runtime import executor
from engine.debugger.conditions import Condition, has_inf_or_nan, parse_condition
from engine.debugger.feeds import missing_inputs, resolve_feeds
from engine.debugger.inspect import BlobStats, blob_stats, save_blob, value_slice
from engine.debugger.places import place
from engine.debugger.machine import _MISSING, DEFAULT_BUDGET, KEEP_BUDGET, DebuggerError, Machine, _Frame, _Undo
from engine.debugger.values import fit_value
from engine.debugger.records import Breakpoint, OpPath, OpRecord, Stopped, Watchpoint
from engine.errors import NetvizError
from engine.model.opdef import subnets_of
from engine.model.opdef import subnets_of
from engine.model.modelio import Model
from engine.runtime.workspace import Workspace
from proto import caffe2_pb2

__all__ = ["Debugger", "DebuggerError"]


class Debugger(Machine):
    """Step through a model: forward, then its generated backward pass.

    Parameters
    ----------
    model : Model
        Predict net, init net, value_info (:func:`engine.model.modelio.load_model`).
    feeds : mapping, optional
        ``{blob: array | .npy path | shape tuple}``; unfed inputs get random data from value_info.
    device : {"cpu", "gpu", None}
        ``cpu`` maps every op to the CPU; ``gpu`` moves every op to CUDA; None: as the net says.
    loss : str or list of str, optional
        Loss blob(s) for :meth:`backward`.
    budget_bytes : int
        Memory the undo history may hold; the oldest steps are forgotten beyond it.
    cancel : threading.Event, optional
        An event another thread sets to stop a running move (as :meth:`cancel` does).
    seed : int
        Seeds random inputs and every random op without its own ``random_seed``, so a session
        (and its restart) replays the same numbers.
    synthesize_params : bool
        Fill parameters that neither the init net nor the feeds provide with random values of
        inferred shapes (:mod:`engine.runtime.params`; `param_width` filters per conv), listed in
        :attr:`synthesized` — how a weightless zoo net can be stepped.
    """

    def __init__(self, model: Model, feeds: Mapping[str, Any] | None = None, device: str | None = None,
                 loss: str | list[str] | None = None, budget_bytes: int = DEFAULT_BUDGET,
                 record_stats: bool = True, seed: int = 0, synthesize_params: bool = False,
                 param_width: int = 16, keep_budget: int = KEEP_BUDGET,
                 cancel: threading.Event | None = None) -> None:
        if device not in (None, "cpu", "gpu"):
            raise DebuggerError(f"device must be cpu, gpu or None, not {device!r}")
        self.model, self.device, self.budget, self.keep_budget = model, device, budget_bytes, keep_budget
        self.loss = [loss] if isinstance(loss, str) else list(loss or [])
        self.given_feeds = dict(feeds or {})
        self.record_stats, self.seed = record_stats, seed
        self.synthesize, self.param_width = synthesize_params, param_width
        self.synthesized: list[str] = []
        #: `step`/`step_into` pass over a subnet's end (gdb has no such stop): the next stop is the next
        #: iteration's first op, the cond check, or the op after the control op; False stops there too
        self.skip_end_stops = True
        self.listeners: list[Callable[[Any], None]] = []
        self.breakpoints: dict[int, Breakpoint] = {}
        self.watchpoints: dict[int, Watchpoint] = {}
        self.previous_records: dict[OpPath, OpRecord] = {}
        self.fwd_index: list[int | None] = []
        self.grad_map: dict[str, Any] = {}
        self._next_id = 1
        self._cancel = cancel if cancel is not None else threading.Event()  # a caller's event stops it too
        self._bind_lock = threading.Lock()  # Machine.bind_ahead: binds the main frame's ops between moves
        self._predict = self._on_device(model.predict)
        self.restart()

    # ---- set-up -----------------------------------------------------------------------
    def _on_device(self, net: caffe2_pb2.NetDef) -> caffe2_pb2.NetDef:
        if self.device != "gpu":
            return net
        moved = caffe2_pb2.NetDef()
        moved.CopyFrom(net)

        def move(n: caffe2_pb2.NetDef) -> None:  # NOTE: subnets too: an If/While/Do body left on the
            for op in n.op:                          # CPU would read the GPU blobs of its parent op
                if op.type not in ("CopyGPUToCPU", "EnsureCPUOutput"):
                    op.device_option.device_type, op.device_option.device_id = dev.CUDA, 0
                for _, sub in subnets_of(op):
                    move(sub)
        move(moved)
        return moved

    def restart(self) -> Stopped:
        """A fresh workspace: feeds, the init net, and the pc at the first op (backward kept)."""
        if getattr(self, "records", None):
            self.previous_records.update(self.records_by_path)
        self.ws = Workspace("debugger")
        if self.model.init_path is not None:  # NOTE: relative DB paths of Load/Save: beside the init net
            self.ws.root_folder = str(self.model.init_path.parent)
        self._rng = np.random.default_rng(self.seed)
        with executor.random_source(self._rng), blocking.single_threaded():  # a blocked queue op: an error
            executor.run_net(self._on_device(self.model.init), self.ws, device=self._bind_device)
        on = caffe2_pb2.DeviceOption(device_type=dev.CUDA) if self.device == "gpu" else None
        for name, arr in resolve_feeds(self.model, self.given_feeds, set(self.ws.values), self.seed).items():
            self.ws.feed_blob(name, arr, on)
        if self.synthesize:
            from engine.runtime.params import synthesize_params
            made = synthesize_params(self._predict, self.ws.values, width=self.param_width, seed=self.seed)
            for name, arr in made.items():
                self.ws.feed_blob(name, arr, on)
            self.synthesized = sorted(made)
        main = _Frame(self._program(), self.ws, "main", ("op",))
        old = self.frames[0] if getattr(self, "frames", None) else None
        if old is not None and old.net is main.net:
            # NOTE: a bound op holds no value; one with a context (per-op state, its workspace) or a plan's
            # generator is bound afresh, as on the first run
            with self._bind_lock:  # NOTE: bind_ahead may be adding to it (a UI's idle worker)
                main.bound = {i: b for i, b in old.bound.items() if b.ctx is None and not b.plan}
        self._reset_machine(main)
        return self._stop("step", "restarted")

    @property
    def num_forward(self) -> int:
        """Forward ops of the program (with backward: the predict ops plus the saving Copies)."""
        return len(self._program().op) - len(self.fwd_index)

    def _program(self) -> caffe2_pb2.NetDef:
        return self._backward_program if self.fwd_index else self._predict

    # ---- moves ------------------------------------------------------------------------
    def _run(self, stop_after: Callable[[str, int], bool], stop_before: Callable[[], Any] | None = None,
             *, max_units: int | None = None, on_nan: bool = False, whole: bool = True) -> Stopped:
        """Advance until `stop_after(event, depth)` says so, a breakpoint or watchpoint hits,
        the program ends, an op fails, (with `on_nan`) an op writes NaN/Inf, or :meth:`cancel`
        is called.  A cancel that came before the move started (a UI's Escape racing the
        start of the worker) is honoured: :meth:`cancel` sets a flag that only a finished move clears.

        `whole`: ``u`` right after this move, inside a control op it began in, goes back to where it began
        (``n``, ``s``, ``f``: the step is undone); False, or a move a breakpoint, watchpoint, condition,
        NaN, error or cancel stopped: ``u`` goes back one op, as it does in the main net and as a replay does."""
        starts = self._move_starts  # NOTE: what u reverses (Machine._replay_units); the last few are ever read
        # NOTE: the serial of the last unit now, not the count pushed: after a u that popped an op the two part,
        # and _replay_units, looking for this serial, did not find where the move began (went one op back)
        starts.append((self._undo[-1].serial if self._undo else 0, self.pc.path, whole))
        if len(starts) > 512:
            del starts[:-256]
        try:
            self._hand_over_norms()
            # NOTE: one random source and one single-threaded block around the whole move, not per op
            # (the stop is told to listeners outside them, as before)
            with executor.random_source(self._rng), blocking.single_threaded():
                why = self._run_loop(stop_after, stop_before, max_units, on_nan)
            if whole and why[0] != "step":
                starts[-1] = (*starts[-1][:2], False)
            return self._stop(*why)
        finally:
            self._cancel.clear()

    def _run_loop(self, stop_after: Callable[[str, int], bool], stop_before: Callable[[], Any] | None,
                  max_units: int | None, on_nan: bool) -> tuple[str, ...]:
        """The loop of :meth:`_run`: the (reason, detail) of its stop."""
        first, units = True, 0
        advance, cancelled, frames = self._advance_unit, self._cancel.is_set, self.frames
        while True:
            if cancelled():
                return "cancelled", "cancelled"
            if not first:
                if stop_before is not None:
                    why = stop_before()  # NOTE: True, or the (reason, detail) of a stop that is not the one asked for
                    if why:
                        return why if isinstance(why, tuple) else ("step", "reached")
                if self.breakpoints or self.watchpoints:  # NOTE: none: no call per op (_location_hit)
                    hit = self._location_hit()
                    if hit is not None:
                        return hit
            first = False
            if len(frames) == 1 and frames[0].pc >= len(frames[0].net.op):  # self.finished, inlined
                return "end", "end of program"
            try:
                event, written = advance()
            except NetvizError as e:
                self.error = str(e)
                return "error", str(e)
            units += 1
            if on_nan and written and has_inf_or_nan(written):
                bad = ", ".join(n for n in written if has_inf_or_nan({n: written[n]}))
                rec = self.records[-1]
                return "nan", f"{bad} holds NaN/Inf (after {place(self._program(), rec.path, rec.frames)})"
            if self.breakpoints or self.watchpoints:
                hit = self._after_hit(written)
                if hit is not None:
                    return hit
            if stop_after(event, len(self.frames)) or (max_units is not None and units >= max_units):
                return ("step",)

    def _at_subnet_end(self) -> bool:
        """The pc is at the end of a subnet (``… › end``): a stop :attr:`skip_end_stops` passes over."""
        f = self.frames[-1]
        # NOTE: an empty subnet (Mask R-CNN's then_net) has only its end: stopping there shows the branch taken
        return self.skip_end_stops and len(self.frames) > 1 and f.at_end and len(f.net.op) > 0

    def step(self) -> Stopped:
        """Run the current op; a control-flow or RecurrentNetwork op runs whole (step over)."""
        depth = len(self.frames)
        return self._run(lambda ev, d: d <= depth and ev != "enter" and not self._at_subnet_end())

    def step_into(self) -> Stopped:
        """Run one unit: enter the subnet the current op runs (taken If branch, While iteration,
        Do net, RNN timestep), or run a plain op."""
        return self._run(lambda ev, d: not self._at_subnet_end())

    def step_out(self) -> Stopped:
        """Run until the control-flow op owning the current frame has finished.

        Raises
        ------
        DebuggerError
            The pc is in the main net: there is no subnet to finish (gdb's ``finish`` in the
            outermost frame refuses too, rather than running to the end).
        """
        depth = len(self.frames)
        if depth == 1:
            raise DebuggerError("step out: the pc is in the main net, not in a subnet — nothing to finish "
                                "(c continues to the end, t runs to the op under the cursor)")
        return self._run(lambda ev, d: d < depth)

    def continue_(self) -> Stopped:
        """Run to a breakpoint, a watchpoint, an error or the end."""
        return self._run(lambda ev, d: False, whole=False)

    def run_to(self, path: OpPath) -> Stopped:
        """Run until the pc reaches `path` (before running that op).  At `path` already: an op of a
        subnet is run to again, in its next run (the next iteration's; a second ``t`` did nothing)."""
        target = tuple(path)
        if self.pc.path == target and len(target) <= 2:
            return self._stop("step", "already there")
        if self.behind(target):
            raise DebuggerError(f"run to {place(self._program(), target)}: it ran already in this run "
                                "(the pc is past it); restart to get there again")
        # NOTE: a subnet op its loop will not reach again: stop once the loop is passed, not at the program's end,
        # and say so ("passed"): a plain step stop is shown without a word, as if the target had been reached
        def passed() -> tuple[str, str]:
            return "passed", (f"run to {place(self._program(), target)}: it does not run again in this run; "
                              "stopped after the op that ran it")
        return self._run(lambda ev, d: False, lambda: self.pc.path == target or (self.behind(target) and passed()),
                         whole=False)

    def run_to_nan(self) -> Stopped:
        """Run until an op (forward, backward, inside subnets and timesteps) writes NaN or Inf;
        stops right after it (reason ``nan``), or at a breakpoint, an error, the end."""
        return self._run(lambda ev, d: False, on_nan=True, whole=False)

    def behind(self, path: OpPath) -> bool:
        """`path` will not be reached again in this run: a main-net op (or one inside a main-net
        op) before the main net's pc, or anything once the program has ended.  An op earlier in
        a loop body is not behind: the next iteration reaches it."""
        main_pc = self.frames[0].pc
        top = path[1] if len(path) > 1 and path[0] == "op" else None
        return self.finished or (isinstance(top, int) and top < main_pc)

    def current_records(self) -> dict[OpPath, OpRecord]:
        """:attr:`records_by_path` as the frames now running see them: inside a subnet being run,
        an op has a record only if it ran in this run of the subnet (this iteration, timestep,
        branch) — the earlier iteration's ✓ on ops not yet run would say they had."""
        out = dict(self.records_by_path)
        for f in self.frames[1:]:
            n = len(f.prefix)
            for path, rec in self.records_by_path.items():
                if rec.seq < f.start and len(path) > n and path[:n] == f.prefix:
                    out.pop(path, None)
        return out

    def cancel(self) -> None:
        """Ask a running move (in another thread) to stop between ops."""
        self._cancel.set()

    def clear_cancel(self) -> None:
        """Forget a :meth:`cancel` that found no move to stop (a UI calls it once a move is over)."""
        self._cancel.clear()

    def alerts(self) -> list[Any]:
        """Every op run that wrote NaN/Inf, in execution order (records carry iteration/timestep)."""
        return [r for r in self.records if r.has_inf_or_nan]

    # ---- backward ---------------------------------------------------------------------
    def backward(self, loss: str | list[str] | None = None) -> int:
        """Generate the backward pass for `loss` (once) and append it to the program.

        Returns the number of gradient ops.  Stepping goes on into them after the forward ops;
        each is paired with its forward op (:meth:`forward_index_of`).
        """
        from engine.autodiff.training import backward_program, split_training_net

        if self.fwd_index:
            return len(self.fwd_index)
        losses = [loss] if isinstance(loss, str) else list(loss or self.loss or [])
        if not losses and not split_training_net(self._predict).has_backward:
            losses = [self.guess_loss()]
        # NOTE: a training net (backward and optimizer already in it) is its own program.
        net, fwd_index, losses = backward_program(self._predict, losses)
        net = self._on_device(net)  # NOTE: the generated ops (the loss's ConstantFill) have no device option
        self.loss, self._backward_program, self.fwd_index = losses, net, list(fwd_index)
        main = self.frames[0]
        # NOTE: backward_net may insert Copy ops (saves of in-place inputs) into the forward part;
        # the pc keeps pointing at the same op.  A save before the pc has not run: restart to get it.
        main.pc = _same_op_in(net, self._predict, main.pc)
        main.net = net
        return len(self.fwd_index)

    def guess_loss(self) -> str:
        """A blob named like a loss among the external outputs, else the last external output."""
        outs = list(self._predict.external_output) or [o for o in self._predict.op[-1].output]
        named = [o for o in outs if "loss" in o.lower()]
        if not outs:
            raise DebuggerError(f"net {self._predict.name}: no outputs; name the loss blob")
        return (named or outs)[-1]

    # ---- breakpoints and watchpoints --------------------------------------------------
    def add_breakpoint(self, kind: str, spec: Any = None, condition: str | None = None,
                       ignore: int = 0) -> Breakpoint:
        """Add a breakpoint: ``kind`` path (op path tuple), type, name (regex) or condition;
        the first `ignore` hits pass (gdb's ignore count)."""
        cond: Condition | None = parse_condition(condition) if condition else None
        if kind not in ("path", "type", "name", "condition"):
            raise DebuggerError(f"breakpoint kind must be path, type, name or condition, not {kind!r}")
        if kind == "condition" and cond is None:
            raise DebuggerError("a condition breakpoint needs a condition")
        regex = None
        if kind == "name":
            try:
                regex = re.compile(str(spec))
            except re.error as e:
                raise DebuggerError(f"breakpoint regex {spec!r}: {e}") from None
        bp = Breakpoint(self._next_id, kind, tuple(spec) if kind == "path" else spec, cond, ignore=int(ignore),
                        _regex=regex)
        self.breakpoints[bp.id] = bp
        self._next_id += 1
        return bp

    def add_watchpoint(self, blob: str, on: str = "write") -> Watchpoint:
        """Stop after `blob` gets a new version (``on="write"``) or before an op reads it."""
        if on not in ("write", "read"):
            raise DebuggerError(f"watchpoint must be on write or read, not {on!r}")
        wp = Watchpoint(self._next_id, blob, on)
        self.watchpoints[wp.id] = wp
        self._next_id += 1
        return wp

    def remove(self, point_id: int) -> None:
        """Delete breakpoint or watchpoint `point_id`."""
        if self.breakpoints.pop(point_id, None) is None and self.watchpoints.pop(point_id, None) is None:
            raise DebuggerError(f"no breakpoint or watchpoint #{point_id}")

    def _location_hit(self) -> tuple[str, str] | None:
        if not self.breakpoints and not self.watchpoints:
            return None
        op = self.current_op()
        if op is None:
            return None
        path = self.pc.path
        for bp in self.breakpoints.values():
            if not bp.enabled or bp.kind == "condition":
                continue
            if ((bp.kind == "path" and bp.spec == path) or (bp.kind == "type" and bp.spec == op.type)
                    or (bp.kind == "name" and bp._regex is not None
                        and any(bp._regex.search(s) for s in (op.name, *op.output) if s))):
                if (bp.condition is None or bp.condition(self._visible(op.input), self.frames[-1].ws.values,
                                                         len(self.records))) and bp.fires():
                    return "breakpoint", bp.hit_text(self.pc.text())
        for wp in self.watchpoints.values():
            if wp.on == "read" and wp.blob in op.input:
                return "watchpoint", f"#{wp.id} {wp.blob} is read by op#{path[-1]} {op.type}"
        return None

    def _visible(self, names: Any) -> dict[str, Any]:
        values = self.frames[-1].ws.values
        return {n: values[n] for n in names if n in values}

    def _after_hit(self, written: Mapping[str, Any]) -> tuple[str, str] | None:
        if not written:
            return None
        values, step = self.frames[-1].ws.values, len(self.records)
        for bp in self.breakpoints.values():
            cond = bp.condition
            if (bp.enabled and bp.kind == "condition" and cond is not None and cond.triggered_by(written)
                    and cond(written, values, step) and bp.fires()):
                return "condition", f"{bp.describe()} (after {', '.join(written)})"
        for wp in self.watchpoints.values():
            if wp.on == "write" and wp.blob in written:
                return "watchpoint", f"#{wp.id} {wp.blob} written (version {self.versions.get(wp.blob, 0)})"
        return None

    # ---- inspection -------------------------------------------------------------------
    def values_here(self) -> Mapping[str, Any]:
        """The blobs the pc's frame sees by name (a subnet's own workspace inside one): what an
        expression at the stop reads (``engine.debugger.repl``); a replay answers the same."""
        return self.frames[-1].ws.values

    def value(self, name: str, version: int | None = None) -> Any:
        """The value of blob `name` now, or at a recorded SSA `version` still in the history."""
        values = self.frames[-1].ws.values
        if version is None or version == self.versions.get(name, 0):
            if name not in values:
                raise DebuggerError(f"blob '{name}' does not exist at this point")
            return values[name]
        seen = self.versions.get(name, 0)
        for u in reversed(self._undo):
            if u.kind == "enter":  # NOTE: its writes are a snapshot for step_back, not a version change
                continue
            for _, n, old, _, _ in reversed(u.writes):
                if n == name:
                    seen -= 1
                    if seen == version and old is not _MISSING:
                        return old
        raise DebuggerError(f"blob '{name}' version {version} is not in the recorded history "
                            f"(versions 0..{self.versions.get(name, 0)})")

    def inspect(self, name: str, version: int | None = None) -> BlobStats:
        """Shape, dtype, device, bytes, min/max/mean/std, NaN/Inf/zero counts, histogram."""
        return blob_stats(name, self.value(name, version))

    def slice(self, name: str, index: str = "", version: int | None = None) -> tuple[np.ndarray, bool]:
        """A host copy of ``blob[index]`` (capped); True when it was truncated."""
        return value_slice(name, self.value(name, version), index)

    def save(self, name: str, path: str, version: int | None = None) -> str:
        """Write a blob to ``.npy``."""
        return str(save_blob(name, self.value(name, version), path))

    def inject(self, name: str, value: Any, *, reshape: bool = False) -> set[OpPath]:
        """Override `name` in the current workspace (undoable) and mark later records stale.

        The value keeps the blob's dtype and shape (:func:`engine.debugger.values.fit_value`:
        a scalar fills it; another shape raises ShapeMismatch unless `reshape`).  The blob stays
        in :attr:`injected` until an op writes it again.  Returns the paths of recorded ops
        (from earlier runs or steps) whose outputs depend on `name` downstream of the pc and
        are therefore stale.
        """
        f = self.frames[-1]
        values = f.ws.values
        old = values[name] if name in values else _MISSING
        typed = old is not _MISSING and hasattr(old, "dtype") and hasattr(old, "shape")
        arr = fit_value(np.asarray(dev.to_host(value)) if hasattr(value, "shape") else np.asarray(value), name=name,
                        shape=tuple(old.shape) if typed else None, dtype=old.dtype if typed else None,
                        reshape=reshape)
        self._write(f, {name: arr}, like=old)
        self.injected[name] = self.versions[name]
        tainted, stale = {name}, set()
        for i in range(f.pc, len(f.net.op)):
            op = f.net.op[i]
            if tainted & set(op.input):
                tainted.update(op.output)
                path = f.path(i)
                if path in self.records_by_path or path in self.previous_records:
                    stale.add(path)
        self.stale |= stale
        return stale

    def _write(self, f: _Frame, new_values: Mapping[str, Any], like: Any = _MISSING) -> list[Any]:
        """Store host arrays in `f`'s workspace on the device the old value (or the op) lives on;
        one undo unit."""
        values, writes = f.ws.values, []
        for name, arr in new_values.items():
            old = values[name] if name in values else _MISSING
            ref = old if old is not _MISSING else like
            old_dev = f.ws.devices[name] if name in values else None
            on_gpu = (ref is not _MISSING and dev.device_of_array(ref) != dev.CPU) or (
                ref is _MISSING and self.device == "gpu")
            new = dev.to_device(arr, dev.namespace(dev.CUDA)) if on_gpu else np.array(arr)
            values[name], f.ws.devices[name] = new, dev.CUDA if on_gpu else dev.CPU
            writes.append((f.ws, name, old, old_dev, new))
            self.versions[name] = self.versions.get(name, 0) + 1
        self._push_undo(_Undo("op", f, f.pc, len(self.frames), writes))
        return writes

    def missing_inputs(self) -> list[str]:
        """The net's inputs that nothing gives (:func:`engine.debugger.feeds.missing_inputs`): a run
        stops at the first; these are all of them, for one message or one round of questions.
        Parameters :attr:`synthesize` will make are left out."""
        from engine.runtime.params import PARAM_RULES  # noqa: PLC0415

        found = missing_inputs(self._program(), self.frames[0].ws.values)
        # NOTE: with made-up parameters a weight is made once the data before it is known: not the user's to give
        return [n for n, (op, k) in found.items() if not (self.synthesize and k and op.type in PARAM_RULES)]

    def output_infos(self) -> dict[str, tuple[tuple[int, ...] | None, int | None]]:
        """``{output: (shape, dtype)}`` of the op at the pc, inferred from the values its inputs hold
        now (shape None: its rule cannot tell).  A skip's default outputs: a static inference misses
        them wherever weights were made up at run time (a zoo net's ``--random-params`` filters)."""
        from engine.runtime.shapes import UNKNOWN, TensorInfo  # noqa: PLC0415
        from engine.runtime.inference import infer_op  # noqa: PLC0415 - a skip's only

        op = self.current_op()
        if op is None:
            return {}
        values, ins = self.frames[-1].ws.values, []
        for name in op.input:
            v = values[name] if name in values else None
            dtype = _DTYPE_ENUM.get(str(getattr(v, "dtype", "")))
            ins.append(TensorInfo(tuple(int(d) for d in v.shape), dtype) if hasattr(v, "shape") else UNKNOWN)
        try:
            outs = infer_op(op, ins, self.frames[-1].net.name)
        except NetvizError:  # NOTE: inputs the rule refuses: no default, the user gives the outputs
            outs = [UNKNOWN] * len(op.output)
        return {name: (tuple(o.shape) if o.is_known else None, o.dtype) for name, o in zip(op.output, outs)}

    def skip(self, outputs: Mapping[str, Any]) -> Stopped:
        """Step past the current op without running it: `outputs` ({blob: array}) stand for what it
        would write (every output must be given).  Recorded (``skipped``), undoable like a step.

        Raises
        ------
        DebuggerError
            At the end, on a control-flow op, or when an output is missing.
        """
        f = self.frames[-1]
        op = self.current_op()
        if op is None:
            raise DebuggerError("nothing to skip: the program has ended")
        if subnets_of(op):
            raise DebuggerError(f"op #{f.pc} {op.type} runs subnets; step into it and skip its ops instead")
        missing = [o for o in op.output if o not in outputs]
        if missing:
            raise DebuggerError(f"skip op #{f.pc} {op.type}: give a value for {', '.join(missing)}")
        writes = self._write(f, {o: np.asarray(outputs[o]) for o in op.output})
        for _, n, _, _, _ in writes:
            self.versions[n] -= 1  # _record counts the version
        self._record(f, _Skipped(op), 0.0, {w[1]: w[4] for w in writes}, skipped=True)
        f.pc += 1
        return self._stop("step", f"skipped op {op.type}")


#: NumPy dtype name → Caffe2's TensorProto data type (what shape rules read)
_DTYPE_ENUM = {"float32": caffe2_pb2.TensorProto.FLOAT, "float64": caffe2_pb2.TensorProto.DOUBLE,
               "float16": caffe2_pb2.TensorProto.FLOAT16, "int32": caffe2_pb2.TensorProto.INT32,
               "int64": caffe2_pb2.TensorProto.INT64, "uint8": caffe2_pb2.TensorProto.UINT8,
               "int8": caffe2_pb2.TensorProto.INT8, "bool": caffe2_pb2.TensorProto.BOOL}


class _Skipped:
    """Stands for a bound op in the record of an op the user skipped (it was never bound)."""

    def __init__(self, op: caffe2_pb2.OperatorDef) -> None:
        self.op = op


def _same_op_in(net: caffe2_pb2.NetDef, predict: caffe2_pb2.NetDef, pc: int) -> int:
    """Index in `net` (`predict`'s ops with saving Copies inserted, then more) of `predict`'s op #pc."""
    k = 0
    for j, op in enumerate(net.op):
        if k == pc:
            return j
        if k < len(predict.op) and op == predict.op[k]:
            k += 1
    return len(net.op)
