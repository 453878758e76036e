"""Caffe2's schema facts per op type, read from ``ops.json`` (written by the oracle).

``tests/oracle/gen_catalogue.py`` measures them on real Caffe2 1.10.2 (``make oracle``); this
module only reads them. Nothing here is netviz's opinion: counts, slot names, argument names,
in-place rules, kernel presence and gradient status are what Caffe2 registers.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

DATA = Path(__file__).with_name("ops.json")

#: Caffe2's gradient statuses, as the catalogue names them.
HAS_GRADIENT, NO_MAKER = "has_gradient", "no_maker"
MARKER_STATUSES = ("NO_GRADIENT", "SHOULD_NOT_DO_GRADIENT", "GRADIENT_NOT_IMPLEMENTED_YET")


@dataclass(frozen=True, slots=True)
class OpFacts:
    """What Caffe2 registers for one op type (``schema`` fields are empty when it has none)."""

    type: str
    origin: str  # "core" or "detectron" (the Detectron ops library)
    cpu: bool
    cuda: bool
    engine: bool  # an ``X_ENGINE_Y`` registry key
    gradient: str  # has_gradient | NO_GRADIENT | SHOULD_NOT_DO_GRADIENT | GRADIENT_NOT_IMPLEMENTED_YET | no_maker
    gradient_op: bool  # emitted by makers, not written by users
    has_schema: bool
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    min_input: int = 0
    max_input: int | None = None  # None: unbounded
    min_output: int = 0
    max_output: int | None = None
    args: tuple[tuple[str, bool], ...] = ()  # (name, required)
    file: str = ""  # Caffe2 source file, e.g. "caffe2/operators/conv_op.cc"
    inputs_allowed: tuple[int, ...] | None = None  # restricted counts inside [min, min + 8]
    outputs_allowed: tuple[int, ...] | None = None
    io_pairs: frozenset[tuple[int, int]] | None = None  # restricted (in, out) pairs inside those ranges
    outputs_for_inputs: dict[int, int] | None = None  # the output count the schema computes
    inplace: frozenset[tuple[int, int]] | None = None  # allowed (in, out) pairs; None: unmeasured
    inplace_enforced: frozenset[tuple[int, int]] = frozenset()
    inplace_probe: tuple[int, int] | None = None  # counts the in-place pairs were measured on
    probe: dict[str, Any] | None = None  # the maker's output on a minimal op (oracle record)

    @property
    def forward(self) -> bool:
        """A CPU forward op type (one of Caffe2's 629)."""
        return self.cpu and not self.engine and not self.gradient_op

    @property
    def arg_names(self) -> tuple[str, ...]:
        return tuple(a for a, _ in self.args)

    @property
    def required_args(self) -> tuple[str, ...]:
        return tuple(a for a, req in self.args if req)


def _pairs(v: list[list[int]] | None) -> frozenset[tuple[int, int]] | None:
    return None if v is None else frozenset((a, b) for a, b in v)


def _facts(name: str, e: dict[str, Any]) -> OpFacts:
    s = e.get("schema") or {}
    common = dict(type=name, origin=e["origin"], cpu=e["cpu"], cuda=e["cuda"], engine=e["engine"],
                  gradient=e["gradient"], gradient_op=e["gradient_op"], has_schema=bool(s),
                  probe=e.get("probe"))
    if not s:
        return OpFacts(**common)
    ofi = s.get("outputs_for_inputs")
    return OpFacts(
        **common, inputs=tuple(n or "" for n in s["inputs"]), outputs=tuple(n or "" for n in s["outputs"]),
        min_input=s["min_input"], max_input=s["max_input"],
        min_output=s["min_output"], max_output=s["max_output"],
        args=tuple((a, bool(r)) for a, r in s["args"]), file=s["file"],
        inputs_allowed=None if s["inputs_allowed"] is None else tuple(s["inputs_allowed"]),
        outputs_allowed=None if s["outputs_allowed"] is None else tuple(s["outputs_allowed"]),
        io_pairs=_pairs(s["io_pairs"]),
        outputs_for_inputs=None if ofi is None else {int(k): v for k, v in ofi.items()},
        inplace=_pairs(s["inplace"]), inplace_enforced=_pairs(s["inplace_enforced"]) or frozenset(),
        inplace_probe=None if s.get("inplace_probe") is None else tuple(s["inplace_probe"]))


@cache
def _raw() -> dict[str, Any]:
    return json.loads(DATA.read_text())["ops"]


@cache
def _one(op_type: str) -> OpFacts | None:
    """One type's facts, made when first asked for: the TUI's first frame colours a window of
    ops by category and needs a dozen types, not the 1008 of :func:`table` (half its cost)."""
    e = _raw().get(op_type)
    return None if e is None else _facts(op_type, e)


@cache
def table() -> dict[str, OpFacts]:
    """Every registry key Caffe2 1.10.2 has (core + Detectron), by op type."""
    return {name: _one(name) for name in _raw()}  # type: ignore[misc]  # every name is there


def facts(op_type: str) -> OpFacts | None:
    """The facts of `op_type`, or None when Caffe2 has no such op.

    Examples
    --------
    >>> facts("Conv").inputs
    ('X', 'filter', 'bias')
    >>> facts("NoSuchOp") is None
    True
    """
    return _one(op_type)


def is_caffe2_op(op_type: str) -> bool:
    """True when real Caffe2 registers `op_type` (on any device, any engine)."""
    return op_type in table()


def forward_ops() -> list[str]:
    """Caffe2's CPU forward op types (629), sorted."""
    return sorted(n for n, f in table().items() if f.forward)


def gradient_ops() -> list[str]:
    """Caffe2's CPU gradient op types (186), sorted."""
    return sorted(n for n, f in table().items() if f.cpu and not f.engine and f.gradient_op)
