"""What the debugger tells a UI: typed events, per-op records, breakpoints and the program counter."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from engine.debugger.conditions import Condition

OpPath = tuple[Any, ...]
"""An op's place: ``("op", 12)`` at top level, ``("op", 12, "then_net", 3)`` inside a subnet."""


@dataclass(frozen=True, slots=True)
class FrameInfo:
    """One level of the program counter, as a UI shows it."""

    net_name: str
    label: str          # "main", "then_net", "iteration 3", "timestep 2"
    op_index: int       # next op to run in this frame (== op count at the end)
    op_type: str        # type of that op, "" at the end
    path: OpPath        # path of that op

    def text(self) -> str:
        where = f"op#{self.op_index} {self.op_type}" if self.op_type else "end"
        return f"{self.label} {where}" if self.label != "main" else where


@dataclass(frozen=True, slots=True)
class ProgramCounter:
    """The stack of frames, outermost first."""

    frames: tuple[FrameInfo, ...]

    @property
    def path(self) -> OpPath:
        return self.frames[-1].path if self.frames else ()

    @property
    def depth(self) -> int:
        return len(self.frames)

    def text(self) -> str:
        """``main › While op#7 iteration 3 › op#2 Relu``."""
        parts = ["main"]
        for outer, inner in zip(self.frames, self.frames[1:]):
            # NOTE: a Do's one net says nothing beyond "Do" (engine.debugger.places words places alike)
            parts.append(f"{outer.op_type} op#{outer.op_index}" + ("" if inner.label == "net" else f" {inner.label}"))
        last = self.frames[-1] if self.frames else None
        parts.append(f"op#{last.op_index} {last.op_type}" if last and last.op_type else "end")
        return " › ".join(parts)


class Health:
    """NaN/Inf counts and the L2 norm of one recorded float or complex value, made when needed.

    Why: a continue through DenseNet-121 (668 ops whose kernels take 50-90 ms) spent 20-60 ms on a
    float64 sum of squares per output, and 10-20 ms more counting NaN/Inf in the worker thread.
    The counts come from one ``isfinite`` pass, made when the op is recorded; the float64 norm is
    computed when first read.  The value is held only while the debugger keeps that version's value
    (:meth:`Machine._keep`): it calls :meth:`resolve` before it drops one.  Values never change
    after they are recorded (kernels do not mutate their inputs; an RNN state buffer written
    through views is summarised at once when its version closes).
    """

    __slots__ = ("value", "nan", "inf", "result")

    def __init__(self, value: Any, nan: int = 0, inf: int = 0) -> None:
        self.value: Any = value
        self.nan, self.inf = nan, inf
        self.result: float | None = None

    def counts(self) -> tuple[int, int]:
        return self.nan, self.inf

    def norm(self) -> float | None:
        if self.nan or self.inf:
            self.value = None
            return None
        value = self.value  # NOTE: a local: the UI thread may ask while the worker resolves it too
        if value is not None:
            self.result = norm_of(value)
            self.value = None
        return self.result

    resolve = norm


def counts_of(v: Any) -> tuple[int, int]:
    """(NaN, Inf) element counts of a float or complex array: one ``isfinite`` pass when there are none."""
    from engine.runtime import device as dev

    xp = dev.array_module(v)
    if xp.isfinite(v).all():
        return 0, 0
    return int(xp.count_nonzero(xp.isnan(v))), int(xp.count_nonzero(xp.isinf(v)))


def norm_of(v: Any) -> float | None:
    """The L2 norm of a float or complex array holding no NaN/Inf, in float64 (complex128)."""
    import numpy as np
    from engine.runtime import device as dev

    xp = dev.array_module(v)
    if v.dtype.kind == "c":
        return float(xp.linalg.norm(v.reshape(-1).astype(np.complex128)))
    return float(xp.square(v.reshape(-1), dtype=np.float64).sum()) ** 0.5


@dataclass(frozen=True, slots=True, eq=False)
class BlobSummary:
    """Health of one output an op wrote: shape, dtype, NaN/Inf counts and norm (None for non-float
    values and values holding NaN/Inf).  `health` is a :class:`Health` (counts and norm made when
    needed) or the triple (NaN count, Inf count, norm)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    health: Health | tuple[int, int, float | None] = field(repr=False)

    @property
    def nan_count(self) -> int:
        h = self.health
        return h.counts()[0] if type(h) is Health else h[0]

    @property
    def inf_count(self) -> int:
        h = self.health
        return h.counts()[1] if type(h) is Health else h[1]

    @property
    def norm(self) -> float | None:
        h = self.health
        return h.norm() if type(h) is Health else h[2]

    def _key(self) -> tuple[Any, ...]:
        return self.name, self.shape, self.dtype, self.nan_count, self.inf_count, self.norm

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BlobSummary) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"BlobSummary(name={self.name!r}, shape={self.shape!r}, dtype={self.dtype!r}, "
                f"nan_count={self.nan_count}, inf_count={self.inf_count}, norm={self.norm!r})")


@dataclass(frozen=True, slots=True)
class OpRecord:
    """One executed op: the data the TUI overlays on the graph."""

    seq: int
    path: OpPath
    op_type: str
    label: str
    wall_s: float
    outputs: tuple[BlobSummary, ...]
    backward: bool = False
    forward_index: int | None = None
    skipped: bool = False   # the user gave its outputs (:meth:`Debugger.skip`); its kernel did not run
    update_ratio: float | None = None  # ‖ΔW‖/‖W‖ of a parameter the op updated in place (engine.autodiff.training)
    frames: tuple[str, ...] = ()  # labels of the frames below main it ran in (``iteration 1``): places.place

    @property
    def has_inf_or_nan(self) -> bool:
        return any(o.nan_count or o.inf_count for o in self.outputs)

    @property
    def grad_norm(self) -> float | None:
        """Norm of the gradient blobs a backward op wrote (None for forward ops, and for a backward-section
        op that wrote no gradient: an optimizer's ``LearningRate`` is a rate, not ‖g‖)."""
        if not self.backward:
            return None
        from engine.autodiff.training import is_gradient_name  # noqa: PLC0415 - read when an overlay asks

        norms = [o.norm for o in self.outputs if o.norm is not None and is_gradient_name(o.name)]
        return float(sum(n * n for n in norms) ** 0.5) if norms else None


@dataclass(slots=True)
class Breakpoint:
    """Stop before an op matching the location, if the condition (when given) holds.

    ``kind``: ``"path"`` (exact op path), ``"type"`` (op type), ``"name"`` (regex over the op
    name and output names) or ``"condition"`` (no location: checked after every op on the
    blobs it wrote).
    """

    id: int
    kind: str
    spec: Any
    condition: Condition | None = None
    enabled: bool = True
    hits: int = 0
    ignore: int = 0        # like gdb's ignore count: this many more hits pass without stopping
    _regex: re.Pattern[str] | None = field(default=None, repr=False)

    def fires(self) -> bool:
        """Count a hit; True when it stops (no ignore count left)."""
        self.hits += 1
        if self.ignore > 0:
            self.ignore -= 1
            return False
        return True

    def describe(self, where: str = "") -> str:
        """``#1 main › While op#2 iteration 0 › op#1 Tanh if x > 1 · hits 2``; `where` names a path
        breakpoint's op (engine.debugger.places.place: the raw path otherwise)."""
        cond = f" if {self.condition}" if self.condition is not None else ""
        loc = {"path": lambda: where or "op " + "/".join(map(str, self.spec)), "type": lambda: f"type {self.spec}",
               "name": lambda: f"name ~ /{self.spec}/", "condition": lambda: "after any op"}[self.kind]()
        counts = f" · hits {self.hits}" + (f", ignore next {self.ignore}" if self.ignore else "")
        return f"#{self.id} {loc}{cond}{'' if self.enabled else ' (disabled)'}{counts}"

    def hit_text(self, where: str) -> str:
        """How a stop at this location breakpoint is worded, forward or back: a path breakpoint names its op
        by `where` (the pc's text), the others add it (``#1 type LSTMUnit · hits 2 at main › … › op#2 LSTMUnit``)."""
        return self.describe(where) if self.kind == "path" else f"{self.describe()} at {where}"


@dataclass(frozen=True, slots=True)
class Watchpoint:
    """Stop when `blob` is written (a new SSA version) or read."""

    id: int
    blob: str
    on: str = "write"  # "write" | "read"


@dataclass(frozen=True, slots=True)
class Stopped:
    """The debugger paused. ``reason``: step, breakpoint, condition, watchpoint, end, error, cancelled."""

    reason: str
    pc: ProgramCounter
    detail: str = ""


@dataclass(frozen=True, slots=True)
class OpExecuted:
    """An op ran (sent after each op, also during continue)."""

    record: OpRecord


@dataclass(frozen=True, slots=True)
class VersionFinal:
    """Version `version` of `name`, recorded when op `path` ran, has its final value now.

    Why: an RNN state buffer's version is recorded by ``rnn_internal_apply_link``, but the step's
    ops write its rows through the link's view afterwards (as in Caffe2, where they share memory);
    what was shown at record time lacks those rows.  Sent when the next version of the blob is
    recorded or the RecurrentNetwork op completes; a listener that saved the early value redoes it.
    """

    name: str
    version: int
    path: OpPath
    value: Any
