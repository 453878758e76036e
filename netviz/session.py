"""The TUI's one view of the engine: a model, its nets and SSA, the backward view, values, stepping.

Widgets never import engine modules; they ask a :class:`Session`.  Pieces of the engine that
have not landed yet (the debugger, blob values of a running net) are optional: the session
answers what it can and raises :class:`Unavailable` (a one-line, notifiable error) for the rest.
A net is addressed by a :data:`NetPath` (``()`` is the main net, ``((7, "loop_net"),)`` the
``loop_net`` of its op #7), an op by an :class:`OpRef`.
"""
from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import ModelError, NetvizError
from engine.modelio import Model, load_model
from engine.opdef import args_of, subnets_of
from engine.optypes import CONTROL_FLOW
from engine.ssa import get_ssa
from engine.summary import DTYPE_NAMES, device_name, param_info
from proto import caffe2_pb2

NetPath = tuple[tuple[int, str], ...]
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


@dataclass(slots=True)
class Breakpoint:
    op: OpRef
    condition: str = ""


@dataclass
class NetView:
    """A net as shown: its proto, SSA, where backward ops start, and each grad op's forward op."""

    net: caffe2_pb2.NetDef
    n_forward: int
    origin: list[int | None] = field(default_factory=list)

    @cached_property
    def ssa(self) -> list[tuple[list[tuple[str, int]], list[tuple[str, int]]]]:
        return get_ssa(self.net)[0]

    def is_backward(self, i: int) -> bool:
        return i >= self.n_forward

    def forward_of(self, i: int) -> int | None:
        return self.origin[i - self.n_forward] if self.is_backward(i) else None


def parse_inputs(specs: list[str] | None, seed: int = 0) -> dict[str, np.ndarray]:
    """``NAME=FILE.npy`` or ``NAME=SHAPE`` (``1,3,224,224`` / ``1x3x224x224``: seeded normal values).

    Raises
    ------
    ModelError
        A spec without ``=``, an unreadable .npy file, or a malformed shape.
    """
    rng, out = np.random.default_rng(seed), {}
    for spec in specs or []:
        name, sep, value = spec.partition("=")
        if not sep or not name:
            raise ModelError(f"--input {spec!r}: expected NAME=FILE.npy or NAME=SHAPE")
        if value.endswith(".npy"):
            try:
                out[name] = np.load(value, allow_pickle=False)
            except (OSError, ValueError) as e:
                raise ModelError(f"{value}: cannot read .npy for input '{name}': {e}") from None
        elif re.fullmatch(r"\d+([x,]\d+)*", value):
            out[name] = rng.standard_normal([int(d) for d in re.split("[x,]", value)]).astype(np.float32)
        else:
            raise ModelError(f"--input {spec!r}: value is neither a .npy file nor a shape like 1,3,224,224")
    return out


def _optional(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


class Session:
    """A model opened in the TUI.

    Parameters
    ----------
    model : Model
        From :func:`engine.modelio.load_model`.
    inputs : dict
        Values fed to external inputs (``--input``).
    device : str
        ``"cpu"`` or ``"gpu"``, passed to execution.
    loss : str, optional
        Loss blob for the backward view (``--loss``); guessed or asked for when absent.
    """

    def __init__(self, model: Model, inputs: dict[str, np.ndarray] | None = None,
                 device: str = "cpu", loss: str | None = None) -> None:
        self.model, self.device, self.loss = model, device, loss
        self.values: dict[str, Any] = dict(inputs or {})
        self.forward = NetView(model.predict, len(model.predict.op))
        self.backward: NetView | None = None
        self.show_backward = False
        self.breakpoints: dict[OpRef, Breakpoint] = {}
        self.watches: list[str] = []
        self.debugger: Any = None
        self._views: dict[tuple[NetPath, bool], NetView] = {}
        self.params = {out: param_info(op) for op in model.init.op for out in op.output}
        if loss is not None and loss not in self.all_blobs(()):
            raise ModelError(f"--loss {loss!r}: no op of {self.name!r} reads or writes that blob")

    @classmethod
    def open(cls, path: str | Path, init: str | Path | None = None, inputs: list[str] | None = None,
             device: str = "cpu", loss: str | None = None) -> Session:
        """Load a model and check the command-line options; every failure is a NetvizError."""
        model = load_model(path, init=init)
        return cls(model, parse_inputs(inputs), device, loss)

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
            nets = dict(subnets_of(parent.net.op[index]))
            if arg not in nets:
                raise NetvizError(f"{self.name}: op #{index} has no subnet '{arg}'")
            self._views[key] = NetView(nets[arg], len(nets[arg].op))
        return self._views[key]

    def op(self, ref: OpRef) -> caffe2_pb2.OperatorDef:
        return self.view(ref.path).net.op[ref.index]

    def subnets(self, ref: OpRef) -> list[tuple[str, caffe2_pb2.NetDef]]:
        return subnets_of(self.op(ref))

    def path_label(self, path: NetPath) -> str:
        """Breadcrumb of a net: ``main › op#7 While › loop_net``."""
        parts, view = [self.name], self.view(())
        for index, arg in path:
            parts.append(f"op#{index} {view.net.op[index].type} › {arg}")
            view = self.view(path[: len(parts) - 1])
        return " › ".join(parts)

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
        if on and self.backward is None:
            loss = loss or self.guess_loss()
            if loss is None:
                raise Unavailable("which blob is the loss? (no --loss, none can be guessed)")
            if loss not in self.all_blobs(()):
                raise NetvizError(f"{self.name}: no blob {loss!r} to differentiate")
            gir = _optional("engine.gradient_ir")
            if gir is None:
                raise Unavailable("gradient generation is not available yet")
            net, origin = gir.backward_net(self.model.predict, [loss])
            self.backward, self.loss = NetView(net, len(net.op) - len(origin), origin), loss
        self.show_backward = on
        self._views.clear()

    # -- blobs -----------------------------------------------------------------------------
    def producers(self, path: NetPath, name: str) -> list[tuple[int, int]]:
        return [(i, v) for i, (_, outs) in enumerate(self.view(path).ssa) for b, v in outs if b == name]

    def consumers(self, path: NetPath, name: str) -> list[tuple[int, int]]:
        return [(i, v) for i, (ins, _) in enumerate(self.view(path).ssa) for b, v in ins if b == name]

    def value(self, name: str) -> Any:
        """The blob's current value: the debugger's workspace, else fed/injected values, else None."""
        ws = getattr(self.debugger, "workspace", None)
        if ws is not None and hasattr(ws, "has_blob") and ws.has_blob(name):
            try:
                return ws.fetch_blob(name)
            except NetvizError:
                return None
        return self.values.get(name)

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

    def inject(self, name: str, text: str) -> np.ndarray:
        """Set a blob from ``SHAPE``, ``FILE.npy`` or a Python literal (``[1, 2]``, ``0.5``)."""
        if text.endswith(".npy") or re.fullmatch(r"\d+([x,]\d+)*", text):
            arr = parse_inputs([f"{name}={text}"])[name]
        else:
            try:
                arr = np.asarray(_literal(text), dtype=np.float32)
            except (ValueError, SyntaxError, TypeError) as e:
                raise NetvizError(f"inject {name}: cannot read {text!r} as a value: {e}") from None
        ws = getattr(self.debugger, "workspace", None)
        if ws is not None and hasattr(ws, "feed_blob"):
            ws.feed_blob(name, arr)
        self.values[name] = arr
        return arr

    # -- breakpoints and watches (kept here; the debugger gets them when it exists) ----------
    def toggle_breakpoint(self, ref: OpRef, condition: str = "") -> bool:
        """Add or remove a breakpoint on an op; returns True when one is now set."""
        if ref in self.breakpoints and not condition:
            del self.breakpoints[ref]
            self._forward_dbg("clear_breakpoint", ref)
            return False
        self.breakpoints[ref] = Breakpoint(ref, condition)
        self._forward_dbg("set_breakpoint", ref, condition)
        return True

    def watch(self, name: str) -> None:
        if name not in self.watches:
            self.watches.append(name)
            self._forward_dbg("watch", name)

    def _forward_dbg(self, method: str, *args: Any) -> None:
        fn = getattr(self.debugger, method, None)
        if callable(fn):
            fn(*args)

    # -- stepping: forwarded to engine.debugger when it exists -----------------------------
    def _debugger(self) -> Any:
        if self.debugger is None:
            mod = _optional("engine.debugger")
            if mod is None or not hasattr(mod, "Debugger"):
                raise Unavailable("debugger not available yet")
            self.debugger = mod.Debugger(self.model, inputs=self.values, device=self.device)
            for bp in self.breakpoints.values():
                self._forward_dbg("set_breakpoint", bp.op, bp.condition)
        return self.debugger

    def step(self, how: str, *args: Any) -> Any:
        """``step``, ``step_into``, ``step_out``, ``continue_``, ``run_to``, ``restart``, ``step_back``."""
        return getattr(self._debugger(), how)(*args)

    @property
    def pc(self) -> OpRef | None:
        """The next op to run, as the debugger reports it; None when nothing runs."""
        return getattr(self.debugger, "pc", None) if self.debugger is not None else None

    def pc_label(self) -> str:
        """``main › While op#7 iter 3 › op 2`` from the debugger, or why there is none."""
        if self.debugger is None:
            return "not running"
        label = getattr(self.debugger, "location_label", None)
        return label() if callable(label) else str(self.pc)

    def executed(self, ref: OpRef) -> bool:
        done = getattr(self.debugger, "executed", None)
        return bool(done and ref in done)

    # -- export: netviz.export draws what the canvas shows -----------------------------------
    def export(self, path: NetPath, target: str, ssa: bool = False, force: bool = False) -> str:
        """Write the net at `path` (with backward ops when shown) to `target`; returns what was written."""
        export = _optional("netviz.export")
        if export is None:
            raise Unavailable("export is not available yet")
        from netviz.drawing import DrawOptions

        options = DrawOptions(mode="ssa" if ssa else "full", rankdir="TB")
        backward = self.show_backward and not path
        net = self.model.predict if backward or not path else self.view(path).net
        result = export.export_net(net, target, options, backward=backward, loss=self.loss, force=force)
        return f"{result.path}" + (f" ({result.note})" if result.note else "")

    # -- descriptions for the inspector ----------------------------------------------------
    def op_details(self, ref: OpRef) -> dict[str, Any]:
        view, op = self.view(ref.path), self.op(ref)
        ins, outs = view.ssa[ref.index]
        fwd = view.forward_of(ref.index)
        return {
            "type": op.type, "name": op.name, "index": ref.index, "net": self.path_label(ref.path),
            "device": device_name(op.device_option), "engine": op.engine or "default",
            "args": {k: v for k, v in args_of(op).items() if not isinstance(v, caffe2_pb2.NetDef)},
            "subnets": [a for a, _ in subnets_of(op)], "inputs": ins, "outputs": outs,
            "backward": view.is_backward(ref.index), "forward_op": fwd,
            "control": op.type in CONTROL_FLOW, "breakpoint": self.breakpoints.get(ref),
        }


def _literal(text: str) -> Any:
    import ast

    return ast.literal_eval(text)
