"""The TUI's one view of the engine: a model, its nets and SSA, the backward view, values, stepping.

Widgets never import engine modules; they ask a :class:`Session`.  What the session cannot answer
yet (no loss to differentiate, no values before a run) raises :class:`Unavailable` (a one-line,
notifiable error).  The debugger, shape inference and gradients are imported when first asked for,
not before the TUI's first frame.
A net is addressed by a :data:`NetPath` (``()`` is the main net, ``((7, "loop_net"),)`` the
``loop_net`` of its op #7), an op by an :class:`OpRef`.
"""
from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import ModelError, NetvizError
from engine.model.modelio import Model, byte_size, load_model
from engine.model.opdef import args_of, subnets_of
from engine.model.optypes import CONTROL_FLOW, ITERATING, RECURRENT
from engine.model.ssa import get_ssa
from engine.analysis.summary import DTYPE_NAMES, device_name, param_info
from proto import caffe2_pb2

if TYPE_CHECKING:
    import numpy as np

NetPath = tuple[tuple[int, str], ...]
#: init nets up to this many bytes in memory are hashed for a drawing's cache key on the UI thread
#: (~5 ms); a trained init opened lazily holds references, not values: a few kB whatever its file's size
QUICK_INIT_BYTES = 4 << 20
LOSS_HINT = re.compile(r"loss|cost|objective", re.I)


class Unavailable(NetvizError):
    """An action needs an engine piece that is not there yet (the debugger, values)."""


@dataclass(frozen=True, slots=True)
class OpRef:
    """One op: the net it lives in and its index there."""

    path: NetPath
    index: int


@dataclass(frozen=True, slots=True)
class BlobRef:
    """One blob of one net, with its SSA version (``None``: the name, any version)."""

    path: NetPath
    name: str
    version: int | None = None

    def label(self, ssa: bool = True) -> str:
        return f"{self.name}@{self.version}" if ssa and self.version is not None else self.name

    def file_name(self) -> str:
        """``gpu_0_conv1@1.npy``: the file a save of this version writes by default."""
        return f"{self.label().replace('/', '_')}.npy"


@dataclass(slots=True)
class Breakpoint:
    op: OpRef
    condition: str = ""
    dbg_id: int | None = None


@dataclass(slots=True)
class GlobalBreakpoint:
    """A breakpoint on no one op: after any op (a condition), or before ops of a type / name."""

    kind: str                  # "condition", "type", "name"
    spec: Any
    condition: str | None
    ignore: int = 0
    dbg_id: int | None = None


@dataclass(frozen=True, slots=True)
class DebugState:
    """What the UI shows of the debugger, copied by the move worker when a move ends.

    The worker is the only thread that runs the debugger; the UI reads this copy (pc, records,
    stale and injected marks), so a screen never mixes the pc of one moment with the records of
    another, and never iterates a dict the worker is filling."""

    pc: Any = None                                   # engine.debugger ProgramCounter
    records: Mapping[tuple[Any, ...], Any] = field(default_factory=dict)
    history: tuple[Any, ...] = ()                    # OpRecords in execution order
    stale: frozenset[tuple[Any, ...]] = frozenset()
    injected: frozenset[str] = frozenset()

    @classmethod
    def of(cls, dbg: Any) -> DebugState:
        # NOTE: current_records: inside a running subnet, only this iteration's/timestep's runs are marks
        records = dbg.current_records() if hasattr(dbg, "current_records") else dict(dbg.records_by_path)
        return cls(dbg.pc, records, tuple(dbg.records), frozenset(getattr(dbg, "stale", ())),
                   frozenset(dbg.injected))


def to_oppath(ref: OpRef) -> tuple[Any, ...]:
    """OpRef → the debugger's op path: ``("op", 12, "then_net", 3)``."""
    return ("op", *(x for step in ref.path for x in step), ref.index)


def from_oppath(path: tuple[Any, ...]) -> OpRef | None:
    """The debugger's op path → OpRef (None for a path of another shape)."""
    if len(path) < 2 or path[0] != "op" or len(path) % 2:
        return None
    rest = path[1:]
    return OpRef(tuple((rest[k], rest[k + 1]) for k in range(0, len(rest) - 1, 2)), rest[-1])


@dataclass
class NetView:
    """A net as shown: its proto, SSA, where backward ops start, and each grad op's forward op."""

    net: caffe2_pb2.NetDef
    n_forward: int
    origin: list[int | None] = field(default_factory=list)
    #: a training net's section of each op (``engine.autodiff.training``): forward / backward / optimizer
    sections: list[str] | None = None
    #: the content key of the net (:func:`netviz.cache.net_digest`): its SSA and drawings are cached
    #: under it; None for views not cached (subnets, the generated backward view)
    digest: str | None = None

    @cached_property
    def ssa(self) -> list[tuple[list[tuple[str, int]], list[tuple[str, int]]]]:
        from netviz import cache

        return cache.cached("ssa", self.digest, lambda: get_ssa(self.net)[0])

    def is_backward(self, i: int) -> bool:
        return i >= self.n_forward

    def forward_of(self, i: int) -> int | None:
        return self.origin[i - self.n_forward] if self.is_backward(i) else None

    @cached_property
    def grads_of(self) -> dict[int, list[int]]:
        """Forward op -> the backward ops that differentiate it (:meth:`forward_of` turned round, made once:
        the canvas's ladder window and :meth:`Session.linked` read it at each cursor move)."""
        out: dict[int, list[int]] = {}
        for k, f in enumerate(self.origin):
            if f is not None:
                out.setdefault(f, []).append(self.n_forward + k)
        return out


def shown_subnets(op: caffe2_pb2.OperatorDef) -> list[tuple[str, caffe2_pb2.NetDef]]:
    """An op's subnets as the debugger runs them: a RecurrentNetwork timestep is its step net with
    the link ops Caffe2 adds (rows of their own), so pc and executed marks index the same ops."""
    if op.type not in RECURRENT:
        return subnets_of(op)
    from engine.runtime.ops.rnn import timestep_program
    return [(arg, timestep_program(op, arg)) for arg, _ in subnets_of(op)]


def _main_view(net: caffe2_pb2.NetDef, split: Any) -> NetView:
    """The main net's view; a training net's (`split`, ``engine.autodiff.training``) carries its sections, and
    its own backward ops (everything from the first) are paired with their forward ops."""
    from engine.autodiff.training import backward_program
    if not split.has_backward:
        return NetView(net, len(net.op))
    # NOTE: the program: seeds interleaved with forward ops (Detectron) come after the forward ops,
    # so its ops are in the debugger's order and each op's section is taken from where it came from.
    program, origin, _ = backward_program(net, split=split)
    sections = [split.sections[i] for i in split.program_order()]
    return NetView(program, len(program.op) - len(origin), origin, sections)


def parse_inputs(specs: list[str] | None, seed: int = 0) -> dict[str, np.ndarray]:
    """Every ``--input`` form ``netviz run`` takes (:func:`engine.debugger.feeds.parse_input_spec`):
    ``NAME=FILE.npy``, ``NAME=SHAPE`` (``1,3,224,224`` / ``1x3x224x224``: seeded normal values) and
    ``NAME=SHAPE:DTYPE`` (``label=16:int32``: 0/1 integers), as arrays.

    Raises
    ------
    NetvizError
        A spec without ``=``, an unreadable .npy file, a malformed shape or an unknown dtype.
    """
    return _make_inputs(_read_inputs(specs), seed)


#: one ``--input`` as read at open: (name, shape, dtype, array): an array read from a .npy file
#: (its shape and dtype), or a random one still to be made (array None)
_Input = tuple[str, tuple[int, ...], Any, Any]


def _read_inputs(specs: list[str] | None) -> list[_Input]:
    """The ``--input`` specs checked and their .npy files read; random arrays are left to
    :func:`_make_inputs` (NumPy is not imported for a net fed nothing or only shapes)."""
    if not specs:
        return []
    from engine.debugger.feeds import RandomSpec, load_npy, parse_input_spec
    out: list[_Input] = []
    for spec in specs:
        name, value = parse_input_spec(spec)
        if isinstance(value, RandomSpec):
            out.append((name, value.shape, value.dtype, None))
        elif isinstance(value, tuple):
            out.append((name, value, "float32", None))  # NOTE: a bare shape: random_array's default
        else:
            arr = load_npy(value, name)
            out.append((name, tuple(arr.shape), arr.dtype, arr))
    return out


def _make_inputs(inputs: list[_Input], seed: int = 0) -> dict[str, np.ndarray]:
    """The arrays of :func:`_read_inputs`' inputs, in their order: random ones from one generator
    seeded `seed` (drawn in spec order, as ``netviz run`` draws them)."""
    if not inputs:
        return {}
    import numpy as np  # noqa: PLC0415

    from engine.debugger.feeds import random_array
    rng, out = np.random.default_rng(seed), {}
    for name, shape, dtype, arr in inputs:
        out[name] = arr if arr is not None else random_array(shape, rng, dtype)
    return out


class Session:
    """A model opened in the TUI.

    Parameters
    ----------
    model : Model
        From :func:`engine.model.modelio.load_model`.
    inputs : dict
        Values fed to external inputs (``--input``).
    device : str
        ``"cpu"`` or ``"gpu"``, passed to execution.
    loss : str, optional
        Loss blob for the backward view (``--loss``); guessed or asked for when absent.
    """

    def __init__(self, model: Model, inputs: dict[str, np.ndarray] | None = None,
                 device: str = "cpu", loss: str | None = None, *, input_specs: list[str] | None = None) -> None:
        # NOTE: `input_specs` (``--input``) are checked now and their random arrays made when the values
        # are first read (:attr:`values`), after the first frame, which needs only their shapes
        unmade = _read_inputs(input_specs)
        self.model, self.device, self.loss = model, device, loss
        self._values: dict[str, Any] = dict(inputs or {})
        self._unmade: list[_Input] | None = unmade or None
        self._values_lock = threading.Lock()
        from engine.autodiff.training import split_training_net
        #: the main net's training sections, made once (the op list, lint and backward view read it)
        from netviz import cache
        #: the main net's content key: its split, SSA and first drawings come from netviz.cache when seen before
        self.digest = cache.net_digest(model.predict)
        self.split = cache.cached("split", self.digest, lambda: split_training_net(model.predict))
        self.forward = _main_view(model.predict, self.split)
        self.forward.digest = self.digest
        self.backward: NetView | None = None
        self.show_backward = False
        self.breakpoints: dict[OpRef, Breakpoint] = {}
        self.global_breakpoints: list[GlobalBreakpoint] = []
        self.watches: list[str] = []
        self.debugger: Any = None
        self.state = DebugState()  # the debugger as of the last move's end (the UI reads this)
        # NOTE: a move holds _move while it runs the debugger (in the worker); debugger changes asked
        # for meanwhile (breakpoints, watches, backward) wait in _deferred until it ends.
        self._move = threading.Lock()
        self._mover: int | None = None  # the thread running a move (see running_elsewhere)
        self._defer_lock = threading.Lock()
        self._deferred: list[Callable[[Any], None]] = []
        self.last_stop: Any = None
        self.skip_end_stops = True  # moves pass over a subnet's end (E toggles; engine Debugger.skip_end_stops)
        self._views: dict[tuple[NetPath, bool], NetView] = {}
        self.params = {out: param_info(op) for op in model.init.op for out in op.output}
        self._shapes: dict[bool, dict[tuple[Any, ...], dict[tuple[str, int], Any]]] = {}
        self._shapes_lock = threading.Lock()
        self._shapes_key: str | None = None
        self.notices: list[str] = []
        self.shape_notice: str | None = None  # ops whose shapes do not fit, for the screen to show once
        self._lint: dict[int, list[Any]] | None = None
        self.plan: list[str] | None = None  # a plan file's step tree (engine.runtime.plan_view.plan_lines)
        self.plan_def: caffe2_pb2.PlanDef | None = None  # a plan file: the debugger steps it whole
        if loss is not None and loss not in self.all_blobs(()):
            raise ModelError(f"--loss {loss!r}: no op of {self.name!r} reads or writes that blob")
        self._check_input_names([n for n, *_ in unmade])

    @classmethod
    def open(cls, path: str | Path, init: str | Path | None = None, inputs: list[str] | None = None,
             device: str = "cpu", loss: str | None = None) -> Session:
        """Load a model (or a PlanDef: its main net, the nets before it as init) and check the
        command-line options; every failure is a NetvizError."""
        from engine.runtime.plan_view import is_plan_file, plan_lines, plan_program
        if is_plan_file(path):
            from engine.runtime.plandef import load_plan
            plan = load_plan(path)
            # NOTE: the plan is a net of its steps (engine.runtime.plan_view.plan_program); the debugger
            # runs it with RunPlan's semantics (engine.debugger.plan), a frame per net run.
            program = Model(plan_program(plan), caffe2_pb2.NetDef(name=f"{plan.name}_init"), {}, Path(path))
            session = cls(program, None, device, loss, input_specs=inputs)
            session.notices.append(f"plan {plan.name!r}: {len(plan.execution_step)} steps; s steps into a step "
                                   "and one iteration of its net, f finishes the iteration, n runs a step whole")
            session.plan, session.plan_def = plan_lines(plan), plan
            return session
        model = load_model(path, init=init, lazy_values=True)  # NOTE: values read after the first frame (netviz.weights)
        return cls(model, None, device, loss, input_specs=inputs)

    def _check_input_names(self, names: list[str]) -> None:
        """``--input`` names the net does not take: one that is no blob of it at all (a typo, which ran
        on random data unseen) is refused naming the closest input; an inner blob is fed, with a notice."""
        from engine.debugger.feeds import stray_inputs  # noqa: PLC0415

        stray, hint = stray_inputs(self.model.predict, names)
        if not stray:
            return
        blobs = {b for ref in self.walk() for b in (*self.op(ref).input, *self.op(ref).output)}
        unknown = [n for n in stray if n not in blobs]
        if unknown:
            raise ModelError(f"--input {', '.join(unknown)}: no blob of {self.name!r} has this name; {hint}")
        self.notices.append(f"--input {', '.join(stray)}: not an external input of the net (fed anyway)")

    @property
    def values(self) -> dict[str, Any]:
        """Values fed (``--input``) and injected, by blob name (the random ``--input`` arrays are made
        on the first read)."""
        if self._unmade is not None:
            with self._values_lock:
                if self._unmade is not None:
                    self._values = {**_make_inputs(self._unmade), **self._values}
                    self._unmade = None
        return self._values

    def _fed_shapes(self) -> dict[str, tuple[int, ...]]:
        """The shapes of the fed and injected values, without making the ``--input`` arrays."""
        unmade = self._unmade
        fed = {name: shape for name, shape, _, _ in unmade} if unmade is not None else {}
        return {**fed, **{k: tuple(v.shape) for k, v in self._values.items() if hasattr(v, "shape")}}

    # -- nets ------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.model.predict.name or (self.model.path.stem if self.model.path else "net")

    def view(self, path: NetPath = ()) -> NetView:
        """The net at `path`; the main net includes the backward ops when they are shown."""
        if not path:
            return self.backward if self.show_backward and self.backward else self.forward
        key = (path, self.show_backward)
        if key not in self._views:
            parent = self.view(path[:-1])
            index, arg = path[-1]
            nets = dict(shown_subnets(parent.net.op[index]))
            if arg not in nets:
                raise NetvizError(f"{self.name}: op #{index} has no subnet '{arg}'")
            self._views[key] = NetView(nets[arg], len(nets[arg].op))
        return self._views[key]

    def op(self, ref: OpRef) -> caffe2_pb2.OperatorDef:
        return self.view(ref.path).net.op[ref.index]

    def subnets(self, ref: OpRef) -> list[tuple[str, caffe2_pb2.NetDef]]:
        return shown_subnets(self.op(ref))

    def path_label(self, path: NetPath) -> str:
        """Breadcrumb of a net: ``main › op#7 While › loop_net``."""
        parts, view = [self.name], self.view(())
        for index, arg in path:
            op = view.net.op[index]
            step = f" {op.name}" if self.plan_def is not None else ""  # a plan's step ops: the step's name
            parts.append(f"op#{index} {op.type}{step} › {arg}")
            view = self.view(path[: len(parts) - 1])
        return " › ".join(parts) + self._plan_run_label(path)

    def _plan_run_label(self, path: NetPath) -> str:
        """In a plan, the run of the net at `path` the pc is in: `` (train iteration 3 · net mlp_train)``."""
        if self.plan_def is None or not path or self.state.pc is None:
            return ""
        frames = self.state.pc.frames
        prefix = to_oppath(OpRef(path, 0))[:-1]
        inside = len(frames) > len(path) and frames[len(path)].path[:-1] == prefix
        return f" ({frames[len(path)].label})" if inside else ""

    def all_blobs(self, path: NetPath) -> list[str]:
        net, seen = self.view(path).net, {}
        for name in (*net.external_input, *(b for op in net.op for b in (*op.input, *op.output))):
            seen.setdefault(name, None)
        return list(seen)

    def walk(self, path: NetPath = ()) -> list[OpRef]:
        """Every op of a net and of its subnets, depth first."""
        out = []
        for i, op in enumerate(self.view(path).net.op):
            out.append(OpRef(path, i))
            for arg, _ in subnets_of(op):
                out.extend(self.walk(path + ((i, arg),)))
        return out

    # -- backward --------------------------------------------------------------------------
    def training_losses(self) -> list[str]:
        """The losses a training net's own backward pass was made for (empty: not a training net)."""
        from engine.autodiff.training import losses_of
        return losses_of(self.model.predict.op) if self.forward.sections is not None else []

    def guess_loss(self) -> str | None:
        """The loss blob when the net names one: ``--loss``, else a single loss-like output."""
        if self.loss:
            return self.loss
        net = self.model.predict
        cands = [b for b in net.external_output if LOSS_HINT.search(b)]
        if not cands:
            cands = list(dict.fromkeys(o for op in net.op if "Loss" in op.type for o in op.output[-1:]))
        return cands[0] if len(cands) == 1 else None

    def set_backward(self, on: bool, loss: str | None = None) -> None:
        """Show or hide backward ops, generating them for `loss` (or the guess) on first use.

        Raises
        ------
        Unavailable
            When no loss is given or guessable (the UI then asks), or gradients are not there.
        GradientError
            When a gradient cannot be generated (the op and reason in one line).
        """
        if on and self.backward is None and self.forward.sections is not None:
            # NOTE: a training net already holds its backward pass: `g` shows it, paired.
            self.backward, self.loss = self.forward, self.loss or (self.training_losses() or [None])[0]
            losses = self.training_losses() or None
            self._on_debugger(lambda dbg: dbg.backward(losses))
        if on and self.backward is None:
            loss = loss or self.guess_loss()
            if loss is None:
                raise Unavailable("which blob is the loss? (no --loss, none can be guessed)")
            if loss not in self.all_blobs(()):
                raise NetvizError(f"{self.name}: no blob {loss!r} to differentiate")
            from engine.autodiff.gradient_ir import backward_net  # noqa: PLC0415 (loads every op family)

            net, origin = backward_net(self.model.predict, [loss])
            self.backward, self.loss = NetView(net, len(net.op) - len(origin), origin), loss
            self._on_debugger(lambda dbg: dbg.backward(loss))
            self._warn_loss_shape(loss)
        self.show_backward = on
        self._views.clear()
        self._lint = None  # the loss may be known now

    def _warn_loss_shape(self, loss: str) -> None:
        """A notice when `loss` is not a scalar (:func:`netviz.overlays.loss_seed_note`): its value's
        shape when it ran, else the inferred one when inference is done (never blocks)."""
        from netviz.overlays import loss_seed_note  # noqa: PLC0415

        value = self.value(loss)
        shape = tuple(value.shape) if hasattr(value, "shape") else None
        if shape is None:
            infos = [i for (n, _), i in (self.shapes_ready(()) or {}).items() if n == loss and i.shape is not None]
            shape = tuple(infos[-1].shape) if infos and None not in infos[-1].shape else None
        note = loss_seed_note(loss, shape)
        if note:
            self.notices.append(note)

    # -- shapes: inferred once per view (forward / with backward), in a worker -----------------
    def shapes(self, path: NetPath = ()) -> dict[tuple[str, int], Any]:
        """``{(name, version): TensorInfo}`` of the net at `path`; infers on first use (blocks)."""
        backward = bool(self.show_backward and self.backward)
        with self._shapes_lock:
            if backward not in self._shapes:
                self._shapes[backward] = self._infer_shapes(self.view(()).net)
            table = self._shapes[backward]
        return table.get(_shape_key(path), {})

    def shapes_ready(self, path: NetPath = ()) -> dict[tuple[str, int], Any] | None:
        """:meth:`shapes` when already inferred, else None (never blocks the UI)."""
        table = self._shapes.get(bool(self.show_backward and self.backward))
        return None if table is None else table.get(_shape_key(path), {})

    def _infer_shapes(self, net: caffe2_pb2.NetDef) -> dict[tuple[Any, ...], dict[tuple[str, int], Any]]:
        from engine.runtime import inference  # noqa: PLC0415 (loads every op family: not before the first frame)

        inputs = {**self.model.value_info,
                  **self._fed_shapes()}
        if self.plan_def is not None:  # a plan: each net of its steps, in step order
            from engine.runtime.plan_view import plan_shapes
            return plan_shapes(self.plan_def, inputs)
        problems: list[str] = []  # NOTE: an op that does not fit leaves its outputs unknown, not every shape
        try:
            table = inference.infer_net_shapes(net, inputs, self.model.init, problems=problems)
        except NetvizError as e:
            problems, table = [str(e)], {}
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            self.shape_notice = f"shapes: {problems[0]}{more}; the other shapes are kept"
        return table

    def param_names(self) -> set[str]:
        """Blobs the init net fills (the weights)."""
        return set(self.params)

    def shapes_key(self, block: bool = True) -> str | None:
        """What static shape inference reads besides the shown net (value_info, the fed inputs'
        shapes, the init net) as a :mod:`netviz.cache` key, so a drawing with inferred shapes is
        cached too; None for a plan (its steps' nets are not keyed).  Made once (hashes the init net
        as it is in memory: ~0.15 s for 40 MB of values held by protobuf); `block` False: None instead
        of hashing an init net over :data:`QUICK_INIT_BYTES` the first time, for the UI thread.  A trained
        init opened lazily (issue #41) holds references to its file's values, so its digest is cheap and
        the first frame of a 128 MB init reads its drawing from the cache as the fill-op init's does
        (the file's size is no measure: the layout worker's thread hop cost that frame ~12 ms)."""
        if self.plan_def is not None:
            return None
        if self._shapes_key is None and not block and self.model.init.op \
                and byte_size(self.model.init) > QUICK_INIT_BYTES:
            return None
        if self._shapes_key is None:
            from netviz import cache

            self._shapes_key = cache.key(sorted(self.model.value_info.items()),
                                         sorted(self._fed_shapes().items()), cache.net_digest(self.model.init))
        return self._shapes_key

    # -- blobs -----------------------------------------------------------------------------
    def producers(self, path: NetPath, name: str) -> list[tuple[int, int]]:
        return [(i, v) for i, (_, outs) in enumerate(self.view(path).ssa) for b, v in outs if b == name]

    def consumers(self, path: NetPath, name: str) -> list[tuple[int, int]]:
        return [(i, v) for i, (ins, _) in enumerate(self.view(path).ssa) for b, v in ins if b == name]

    def value(self, name: str) -> Any:
        """The blob's current value: the debugger's workspace, else fed/injected values, else None.
        While a move runs in another thread its workspace is not read (fed/injected values only)."""
        if self.debugger is not None and not self.running_elsewhere():
            try:
                return self.debugger.value(name)
            except NetvizError:
                pass
        return self.values.get(name)

    def version_value(self, ref: BlobRef) -> tuple[Any, str]:
        """The value of ``name@version`` (its own, not the latest) and a note when there is none.

        The version is the SSA one of the net at ``ref.path``: the op that wrote it is looked up
        and the debugger's kept value of that run returned.  Version None: the current value.
        Returns ``(value, "")`` or ``(None, why)`` (not run yet, dropped from the budget, or a move
        running in another thread: its values show when it stops, never half-written).
        """
        if self.running_elsewhere():
            return None, "a move is running: values show when it stops (Esc cancels it)"
        if ref.version is None or self.debugger is None:
            v = self.value(ref.name)
            return v, "" if v is not None else "no value yet (run or inject it)"
        writers = [i for i, v in self.producers(ref.path, ref.name) if v == ref.version]
        try:
            if writers:
                return self.debugger.written_value(to_oppath(OpRef(ref.path, writers[0])), ref.name), ""
            if not ref.path:
                return self.debugger.initial_value(ref.name), ""
            first = self.debugger.initial_value(ref.name, to_oppath(OpRef(ref.path, 0))[:-1])
            return (self.value(ref.name) if first is None else first), ""  # None: no op of the run overwrote it
        except NetvizError as e:
            return None, str(e) + ("  (R re-runs to it)" if "dropped" in str(e) else "")

    def injected(self, name: str) -> bool:
        """`name` was injected and no op has written it since."""
        return name in self.state.injected

    def runtime_shape(self, ref: BlobRef) -> str | None:
        """``1×64×112×112 float32`` of a blob version once it exists at run time, else None."""
        value, _ = self.version_value(ref)
        if value is None or not hasattr(value, "shape"):
            return None
        return f"{'×'.join(map(str, value.shape)) or 'scalar'} {value.dtype}"

    def save(self, ref: BlobRef, target: str) -> str:
        """Write the shown version of a blob to ``.npy``; a ``.npz`` target gets every kept version
        (``name@v`` keys).  Returns what was written."""
        from engine.debugger.inspect import check_folder, save_blob, save_path

        path = save_path(target, ref.file_name())
        if path.suffix == ".npz":
            import numpy as np  # noqa: PLC0415

            got = {}
            # NOTE: @0 only when something before any writer has it (an input, a parameter): a blob
            # that only ops write has no @0, and saving one would be a phantom (whatever is there now)
            written = {v for _, v in self.producers(ref.path, ref.name)}
            read0 = any(v == 0 for _, v in self.consumers(ref.path, ref.name))
            versions = written | ({0} if read0 or not written else set())
            for v in sorted(versions):
                value, _ = self.version_value(BlobRef(ref.path, ref.name, v))
                if value is not None and hasattr(value, "shape"):
                    got[f"{ref.name}@{v}"] = np.asarray(value.get() if hasattr(value, "get") else value)
            if not got:
                raise NetvizError(f"save {ref.name}: no version has a value yet")
            check_folder(path)
            np.savez(path, **got)
            return f"{path} ({len(got)} version{'s' if len(got) != 1 else ''}: {', '.join(got)})"
        value, why = self.version_value(ref)
        if value is None:
            raise NetvizError(f"save {ref.label()}: {why}")
        return str(save_blob(ref.label(), value, path if path.suffix == ".npy" else path.with_suffix(".npy")))

    def _blob_type(self, name: str, path: NetPath = ()) -> tuple[tuple[int, ...] | None, Any]:
        """Shape and dtype a value for `name` must have: the current value's, else inferred (in the net
        at `path` first, then in any net: an output not written yet may be a subnet's), else declared."""
        arr = self.value(name)
        if arr is not None and hasattr(arr, "shape"):
            return tuple(arr.shape), arr.dtype
        self.shapes(path)  # NOTE: infers every net's table on first use
        for table in (self.shapes(path), *self._shapes.get(bool(self.show_backward and self.backward), {}).values()):
            infos = [info for (n, _), info in table.items() if n == name and info.shape is not None]
            if infos and all(d is not None for d in infos[-1].shape):
                return tuple(infos[-1].shape), _np_dtype(infos[-1].dtype)
        if name in self.model.value_info and self.model.value_info[name].shape is not None:
            vi = self.model.value_info[name]
            return tuple(vi.shape), _np_dtype(vi.data_type)
        return None, None

    def blob_info(self, name: str) -> dict[str, Any]:
        """Shape, dtype and device as far as known: the value, the init net, or value_info."""
        arr = self.value(name)
        if arr is not None and hasattr(arr, "shape"):
            return {"shape": tuple(arr.shape), "dtype": str(arr.dtype), "source": "value"}
        if name in self.params:
            p = self.params[name]
            return {"shape": tuple(p["shape"] or ()), "dtype": p["dtype"], "source": f"init ({p['type']})"}
        if name in self.model.value_info:
            vi = self.model.value_info[name]
            return {"shape": vi.shape, "dtype": DTYPE_NAMES.get(vi.data_type, "?"), "source": "value_info"}
        return {"shape": None, "dtype": None, "source": "unknown until it runs"}

    def inject(self, name: str, text: str, reshape: bool = False, path: NetPath = ()) -> np.ndarray:
        """Set a blob from typed text (:func:`engine.debugger.values.parse_value`: ``nan``, ``inf``,
        ``[1, nan]``, ``zeros()``, ``randn(2,3)``, ``x.npy``), keeping its dtype and shape.

        Raises
        ------
        ShapeMismatch
            Another shape than the blob's and not `reshape` (the UI asks, then passes reshape).
        NetvizError
            Text that does not read, NaN for an integer blob.
        """
        from engine.debugger.values import fit_value, parse_value

        with self.moving():
            dbg = self._debugger()  # NOTE: first: a weightless net's parameters exist (and have shapes) once it is made
            shape, dtype = self._blob_type(name, path)
            arr = fit_value(parse_value(text, shape=shape, dtype=dtype, name=name), name=name, shape=shape,
                            dtype=dtype, reshape=reshape,
                            of_net=any(name in (*op.input, *op.output) for op in self._every_op()))
            dbg.inject(name, arr, reshape=reshape)
        self.values[name] = arr
        return arr

    def skip(self, text: str = "") -> list[str]:
        """Step past the op at the pc without running it; its outputs from ``NAME=VALUE; …``
        (each VALUE as for :meth:`inject`), the rest shape-inferred zeros.  Returns the outputs."""
        with self.moving():
            stop, outputs = self._skip(text)
        self.last_stop = stop
        return outputs

    def _skip(self, text: str) -> tuple[Any, list[str]]:
        from engine.debugger.values import fit_value, parse_value

        dbg = self._debugger()
        pc = from_oppath(dbg.pc.path)
        if pc is None or pc.index >= len(self.view(pc.path).net.op):
            raise NetvizError("nothing to skip: the program has ended")
        op = self.op(pc)
        given = {}
        for part in (p.strip() for p in text.split(";") if p.strip()):
            name, sep, value = part.partition("=")
            if not sep:
                name, value = (op.output[0] if len(op.output) == 1 else ""), part
            if name.strip() not in op.output:
                raise NetvizError(f"skip op #{pc.index} {op.type}: {name.strip() or part!r} is not one of its "
                                  f"outputs ({', '.join(op.output)})")
            given[name.strip()] = value.strip()
        absent = [b for b in dbg.missing_inputs() if b in op.input] if hasattr(dbg, "missing_inputs") else []
        if absent:  # NOTE: a stop, not a refusal: the screen asks for every missing input, as after n
            from engine.debugger.records import Stopped  # noqa: PLC0415
            return Stopped("error", dbg.pc, f"skip op #{pc.index} {op.type}: its outputs' shapes follow from "
                                            f"its inputs: input blob '{absent[0]}' not found"), []
        _, outs = self.view(pc.path).ssa[pc.index]
        table = self.shapes(pc.path)
        now = dbg.output_infos() if hasattr(dbg, "output_infos") else {}  # NOTE: from the inputs' values: exact
        values = {}
        for name, version in outs:
            info = table.get((name, version))
            known = info is not None and info.shape is not None and all(d is not None for d in info.shape)
            shape, code = now.get(name, (None, None))
            shape = shape if shape is not None else tuple(info.shape) if known else None
            code = code or (info.dtype if info is not None else None)
            dtype = _np_dtype(code) if code else None
            text_v = given.get(name, "zeros()")
            if shape is None and text_v == "zeros()":
                raise NetvizError(f"skip op #{pc.index} {op.type}: the shape of {name} is unknown; give it, "
                                  f"e.g. {name}=zeros(1,10)")
            values[name] = fit_value(parse_value(text_v, shape=shape, dtype=dtype, name=name), name=name,
                                     shape=shape, dtype=dtype, reshape=name in given)
        return dbg.skip(values), list(values)

    # -- breakpoints and watches (kept here; the debugger gets them once it is made) ---------
    def toggle_breakpoint(self, ref: OpRef, condition: str = "") -> bool:
        """Add or remove a breakpoint on an op (a condition replaces); True when one is now set.

        Raises
        ------
        NetvizError
            An invalid condition (the debugger's ConditionError), the UI shows it.
        """
        if condition:
            self.check_condition(condition)  # refuse a bad condition now, not at the next step
        old = self.breakpoints.pop(ref, None)
        if old is not None:
            self._on_debugger(lambda dbg: self._drop(dbg, old))
        if old is not None and not condition:
            return False
        bp = self.breakpoints[ref] = Breakpoint(ref, condition)
        self._on_debugger(lambda dbg: self._sync(dbg, bp, lambda: dbg.add_breakpoint(
            "path", to_oppath(ref), condition or None)))
        return True

    @staticmethod
    def _sync(dbg: Any, bp: Any, add: Callable[[], Any]) -> None:
        """Give the debugger breakpoint `bp` unless it has it (one made with the debugger has)."""
        if bp.dbg_id is None or bp.dbg_id not in dbg.breakpoints:
            bp.dbg_id = add().id

    @staticmethod
    def _drop(dbg: Any, bp: Any) -> None:
        if bp.dbg_id is not None and bp.dbg_id in dbg.breakpoints:
            dbg.remove(bp.dbg_id)

    def _on_debugger(self, change: Callable[[Any], None]) -> None:
        """Apply `change` to the debugger now, or, while a move runs it in the worker, when that move
        ends (the worker applies it): never beside a running move.  Nothing before the debugger exists
        (it is made with the session's breakpoints and watches)."""
        with self._defer_lock:
            if not self._move.acquire(blocking=False):
                self._deferred.append(change)
                return
        try:
            if self.debugger is not None:
                change(self.debugger)
        finally:
            self._move.release()

    def running_elsewhere(self) -> bool:
        """A move runs the debugger in another thread now (the UI must not read its workspace)."""
        mover = self._mover
        return mover is not None and mover != threading.get_ident()

    @contextmanager
    def moving(self) -> Iterator[None]:
        """Hold the debugger for one move (the worker's); at its end apply the changes asked for
        meanwhile and copy the state the UI shows (:class:`DebugState`)."""
        self._move.acquire()
        self._mover = threading.get_ident()
        try:
            yield
        finally:
            self._mover = None
            with self._defer_lock:
                try:
                    for change in self._deferred:
                        if self.debugger is not None:
                            try:
                                change(self.debugger)
                            except NetvizError as e:  # e.g. a condition the debugger refuses
                                self.notices.append(str(e))
                    if self.debugger is not None:
                        self.state = DebugState.of(self.debugger)
                finally:
                    self._deferred.clear()
                    self._move.release()

    def watch(self, name: str) -> None:
        """Stop after each op that writes blob `name`; a name the net lacks is refused (:meth:`check_blobs`)."""
        self.check_blobs([name], "watch")
        if name not in self.watches:
            self.watches.append(name)
            self._on_debugger(lambda dbg: dbg.add_watchpoint(name))

    # -- stepping: forwarded to engine.debugger, made on the first step --------------------
    def _debugger(self) -> Any:
        if self.debugger is None:
            from engine.debugger import Debugger  # noqa: PLC0415 (loads the runtime: not before the first frame)

            synth = not len(self.model.init.op) and self.plan_def is None  # zoo nets: seeded weights
            if self.plan_def is not None:
                from engine.debugger.plan import PlanDebugger
                dbg = PlanDebugger(self.plan_def, self.model.path, feeds=self.values, device=self.device)
            else:
                dbg = Debugger(self.model, feeds=self.values, device=self.device, loss=self.loss,
                                   synthesize_params=synth)
            if self.plan_def is None:
                dbg.skip_end_stops = self.skip_end_stops
            made = list(dbg.synthesized) if synth else []
            if made:
                many = "s" if len(made) != 1 else ""
                self.notices.append(f"no init net: {len(made)} parameter{many} filled with random values")
            if self.backward is not None:
                dbg.backward(self.loss)
            elif self.forward.sections is not None:  # a training net: its own backward ops are known
                dbg.backward(self.training_losses() or None)
            # NOTE: copies (the UI may add a breakpoint meanwhile: its change waits for this move's end)
            for bp in list(self.breakpoints.values()):
                bp.dbg_id = dbg.add_breakpoint("path", to_oppath(bp.op), bp.condition or None).id
            for name in list(self.watches):
                dbg.add_watchpoint(name)
            for g in list(self.global_breakpoints):
                g.dbg_id = dbg.add_breakpoint(g.kind, g.spec, g.condition, ignore=g.ignore).id
            self.debugger = dbg
        return self.debugger

    def add_global_breakpoint(self, text: str) -> str:
        """A breakpoint that is not on one op: ``type Relu``, ``name res4_.*``, or a condition
        (``loss > 10``); ``… if COND`` and ``… ignore N`` may follow a type or name.  Returns
        its description.  Conditions naming blobs the net does not have are refused with a hint."""
        text = text.strip()
        ignore = 0
        m = re.search(r"\s+ignore\s+(\d+)$", text)
        if m:
            ignore, text = int(m.group(1)), text[:m.start()]
        kind, _, rest = text.partition(" ")
        spec, cond = None, text
        if kind in ("type", "name"):
            spec, _, cond = rest.partition(" if ")
            spec, cond = spec.strip(), cond.strip() or None
            if kind == "type" and spec not in {op.type for op in self._every_op()}:
                raise NetvizError(f"breakpoint: no op of type {spec!r} in {self.name}")
        else:
            kind = "condition"
        if cond:
            self.check_condition(cond)
        g = GlobalBreakpoint(kind, spec, cond, ignore)
        self.global_breakpoints.append(g)
        self._on_debugger(lambda dbg: self._sync(dbg, g, lambda: dbg.add_breakpoint(kind, spec, cond, ignore=ignore)))
        return self.describe_global(g)

    def check_condition(self, cond: str) -> None:
        """Refuse a condition that does not parse or names a blob the net does not have, with a hint: an
        unknown blob is never true, so a breakpoint on it would silently never stop.

        Raises
        ------
        NetvizError
            The parse error (ConditionError), or ``condition '…': no blob 'x' in NET (did you mean y?)``.
        """
        from engine.debugger import parse_condition

        self.check_blobs(parse_condition(cond).blobs, f"condition {cond!r}")

    def check_blobs(self, names: Iterable[str], what: str) -> None:
        """Refuse names no op of the net (subnets and backward included) reads or writes and no external
        input is: ``WHAT: no blob 'x' in NET (did you mean y?)``.  A watch or condition on a typo would
        otherwise be taken and never fire."""
        import difflib

        blobs = set(self.model.predict.external_input)
        for op in self._every_op():
            blobs.update((*op.input, *op.output))
        for name in names:
            if name not in blobs:
                near = difflib.get_close_matches(name, list(blobs), n=1)
                raise NetvizError(f"{what}: no blob {name!r} in {self.name}"
                                  + (f" (did you mean {near[0]}?)" if near else ""))

    def describe_global(self, g: GlobalBreakpoint) -> str:
        """``type Relu if loss > 10 · hits 2`` — with the debugger's live hit/ignore counts."""
        bp = self.debugger.breakpoints.get(g.dbg_id) if self.debugger is not None and g.dbg_id else None
        if bp is not None:
            return bp.describe().partition(" ")[2]
        where = {"condition": "after any op", "type": f"type {g.spec}", "name": f"name ~ /{g.spec}/"}[g.kind]
        return f"{where}{' if ' + g.condition if g.condition else ''}" + (f" · ignore next {g.ignore}" if g.ignore else "")

    def remove_global(self, g: GlobalBreakpoint) -> None:
        self.global_breakpoints.remove(g)
        self._on_debugger(lambda dbg: self._drop(dbg, g))

    def has_loops(self) -> bool:
        """Whether any op (subnets and backward included) runs a subnet in iterations or timesteps."""
        return any(op.type in ITERATING for op in self._every_op())

    def _every_op(self) -> list[caffe2_pb2.OperatorDef]:
        """Ops of the net, its subnets and (once generated) the backward pass."""
        ops = [self.op(r) for r in self.walk()]
        return ops + list(self.backward.net.op) if self.backward is not None else ops

    def device_diff(self, cancel: threading.Event | None = None) -> Any:
        """Run the net on the CPU and on the GPU (the stand-in without one); a DiffReport.
        Setting `cancel` stops it between two ops."""
        from engine.debugger.diff import device_diff

        return device_diff(self.model, self.values, loss=self.loss if self.backward is not None else None,
                           synthesize_params=not len(self.model.init.op), cancel=cancel)

    def alerts(self) -> list[Any]:
        """OpRecords that wrote NaN/Inf, in execution order (with iteration/timestep labels)."""
        return [r for r in self.state.history if r.has_inf_or_nan]

    def place(self, rec: Any) -> str:
        """Where an OpRecord's op ran: ``main › While op#2 iteration 0 › Do op#0 › op#1 Tanh``."""
        from engine.debugger.places import place
        dbg = self.debugger
        net = dbg._program() if dbg is not None and hasattr(dbg, "_program") else self.view(()).net
        return place(net, rec.path, getattr(rec, "frames", ()))

    def step(self, how: str, target: OpRef | None = None) -> Any:
        """``step``, ``step_into``, ``step_out``, ``continue_``, ``run_to`` (`target`), ``restart``,
        ``step_back``, ``run_to_nan``: one debugger move; returns its Stopped event (reason, pc, detail)."""
        with self.moving():
            dbg = self._debugger()
            try:
                stop = dbg.run_to(to_oppath(target)) if how == "run_to" else getattr(dbg, how)()
            finally:
                dbg.clear_cancel()  # a cancel meant for this move never reaches the next one
            from engine.debugger.provenance import explain_debugger  # NOTE: in the move's worker, not the UI
            self.provenance = explain_debugger(dbg) if stop.reason == "nan" else []
        self.last_stop = stop  # NOTE: after the state is published: a new last_stop means a new state
        return stop

    def cancel(self) -> None:
        if self.debugger is not None:
            self.debugger.cancel()

    @property
    def pc(self) -> OpRef | None:
        """The next op to run, as the debugger reports it; None when nothing runs."""
        pc = self.state.pc
        return None if pc is None else from_oppath(pc.path)

    def pc_label(self) -> str:
        """``main › While op#7 iteration 3 › op#2 Relu`` from the debugger, or why there is none."""
        if self.state.pc is None:
            return "not running"
        stop = getattr(self, "last_stop", None)
        reason = "" if stop is None or stop.reason == "step" else (
            f"  [{stop.reason}: {stop.detail}]" if stop.detail and stop.detail != stop.reason else f"  [{stop.reason}]")
        return self.state.pc.text() + reason

    def record(self, ref: OpRef) -> Any:
        """The debugger's OpRecord of an op's last run (time, outputs, NaN), or None."""
        return self.state.records.get(to_oppath(ref))

    def records_in(self, path: NetPath) -> dict[int, Any]:
        """Op index → the debugger's OpRecord, for the ops of the net at `path` that have run."""
        prefix = to_oppath(OpRef(path, 0))[:-1]
        n = len(prefix) + 1
        return {p[-1]: r for p, r in self.state.records.items() if len(p) == n and p[:-1] == prefix}

    def stale(self, ref: OpRef) -> bool:
        """The op's record predates an inject upstream of it (its values may no longer hold)."""
        return to_oppath(ref) in self.state.stale

    def linked(self, ref: OpRef) -> set[int]:
        """Backward ↔ forward: a gradient op's forward op, or a forward op's gradient ops (main net)."""
        if ref.path or not self.show_backward or self.backward is None:
            return set()
        view = self.backward
        if view.is_backward(ref.index):
            fwd = view.forward_of(ref.index)
            return set() if fwd is None else {fwd}
        return set(view.grads_of.get(ref.index, ()))

    def pop_notices(self) -> list[str]:
        out, self.notices = self.notices, []
        return out

    def executed(self, ref: OpRef) -> bool:
        return self.record(ref) is not None

    def failed(self, ref: OpRef) -> bool:
        stop = getattr(self, "last_stop", None)
        return stop is not None and stop.reason == "error" and self.pc == ref

    # -- export: netviz.export draws what the canvas shows -----------------------------------
    def export(self, path: NetPath, target: str, ssa: bool = False, force: bool = False,
               progress: Callable[[str], None] | None = None) -> str:
        """Write the net at `path` (with backward ops when shown) to `target`; returns what was written
        and how it was laid out.  The layout is the CLI's (``--rankdir auto``: a deep net in wrapped
        columns); `progress` gets its lines (each step, how long ``dot`` has been running)."""
        from netviz import export  # noqa: PLC0415

        from netviz.drawing import DrawOptions

        options = DrawOptions(mode="ssa" if ssa else "full", rankdir="TB")
        backward = self.show_backward and not path
        net = self.model.predict if backward or not path else self.view(path).net
        result = export.export_net(net, target, options, backward=backward, loss=self.loss, force=force,
                                   rankdir="auto", progress=progress, flags=() if path else self.lint_findings())
        how = f"laid out with {result.layout}" if result.layout else ""
        return f"{result.path}" + "".join(f" ({t})" for t in (how, result.note) if t)

    def export_view(self, spec: Any, target: str, force: bool = False) -> str:
        """Write what the graph canvas shows (a :class:`netviz.view_export.ViewSpec`) to `target`:
        the net at ``spec.path`` as shown (backward ops included when on), cut to the ops on screen and
        marked (pc, breakpoints, executed, NaN, overlay colours).  Returns what was written."""
        from netviz.drawing import DrawOptions, draw_net
        from netviz.export import export_drawing
        from netviz.view_export import view_drawing

        view = self.view(spec.path)
        mode = ("ssa" if spec.ssa else "full") if spec.blobs else "minimal"
        backward = view.n_forward < len(view.net.op)
        d = draw_net(view.net, DrawOptions(mode=mode, rankdir="TB"), view.n_forward if backward else None,
                     view.origin if backward else ())
        result = export_drawing(view_drawing(d, spec), target, force=force)
        return f"{result.path}" + (f" ({result.note})" if result.note else "")

    # -- lint: where Caffe2 computes other values or refuses (engine.analysis.lint) --------------------
    def lint_findings(self) -> dict[int, list[Any]]:
        """Main-net op index → its engine.analysis.lint findings (for the loss when known); computed once.

        Blocks: over a whole net it takes 0.3-2 s and imports every kernel module, so the TUI calls
        it in a worker after the first frame and reads :meth:`lint_ready` meanwhile."""
        if self._lint is None:
            from engine.analysis.lint import lint_net
            loss = self.loss
            try:
                found = lint_net(self.model.predict, [loss] if loss else [], split=self.split)
            except NetvizError:  # a net netviz cannot differentiate: nothing to compare
                found = []
            lint: dict[int, list[Any]] = {}
            for f in found:
                lint.setdefault(f.op_index, []).append(f)
            if self.loss == loss:  # NOTE: published whole (a reader in another thread sees all or none),
                self._lint = lint  # and not when `g` chose another loss meanwhile
            return lint
        return self._lint

    def lint_ready(self) -> dict[int, list[Any]]:
        """:meth:`lint_findings` when computed, else ``{}`` (never blocks the UI)."""
        return self._lint or {}

    # -- descriptions for the inspector ----------------------------------------------------
    def op_details(self, ref: OpRef) -> dict[str, Any]:
        view, op = self.view(ref.path), self.op(ref)
        ins, outs = view.ssa[ref.index]
        fwd = view.forward_of(ref.index)
        # NOTE: a training net's optimizer ops come after n_forward too, but pair with no forward op
        optimizer = view.sections is not None and view.sections[ref.index] == "optimizer"  # engine.autodiff.training.OPTIMIZER
        return {
            "type": op.type, "name": op.name, "index": ref.index, "net": self.path_label(ref.path),
            "device": device_name(op.device_option), "engine": op.engine or "default",
            "args": {k: v for k, v in args_of(op).items() if not isinstance(v, caffe2_pb2.NetDef)},
            "subnets": [a for a, _ in subnets_of(op)], "inputs": ins, "outputs": outs,
            "backward": view.is_backward(ref.index) and not optimizer, "optimizer": optimizer, "forward_op": fwd,
            "control": op.type in CONTROL_FLOW, "breakpoint": self.breakpoints.get(ref),
            "lint": [f.text() for f in self.lint_ready().get(ref.index, [])] if not ref.path else [],
        }


def _np_dtype(data_type: int | None) -> np.dtype | None:
    """A Caffe2 TensorProto data type as a NumPy dtype (None for strings and other non-numbers)."""
    import numpy as np  # noqa: PLC0415

    try:
        return np.dtype(DTYPE_NAMES.get(data_type or 1, "float32"))
    except TypeError:
        return None


def _shape_key(path: NetPath) -> tuple[Any, ...]:
    """NetPath → engine.runtime.shapes' net path: ``((5, "loop_net"),)`` → ``("op", 5, "loop_net")``."""
    return ("op", *(x for step in path for x in step)) if path else ()
