"""What the op inspector shows about one op: description, named slots, arguments, in-place, gradient.

Descriptions are netviz's own one-liners, kept in ``descriptions.tsv`` (``Type<TAB>text``, one
line per forward op); a gradient op named ``<Fwd>Gradient`` is described from its forward op.
Argument defaults come from the netviz kernel's keyword parameters (Caffe2's defaults, see
``engine.catalogue.registry``); the argument *names* Caffe2's schema documents are listed even when no
kernel reads them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from engine.catalogue.category import category
from engine.catalogue.facts import facts
from engine.model.opdef import args_of
from proto import caffe2_pb2

DESCRIPTIONS = Path(__file__).with_name("descriptions.tsv")

#: How the inspector words each gradient status.
GRADIENT_LABELS = {
    "has_gradient": "has gradient", "NO_GRADIENT": "no gradient (flow stops)",
    "SHOULD_NOT_DO_GRADIENT": "should not differentiate (error if reached)",
    "GRADIENT_NOT_IMPLEMENTED_YET": "gradient not implemented yet in Caffe2",
    "no_maker": "no gradient maker in Caffe2", "gradient_op": "is a gradient op",
}
_FORWARD_OF = re.compile(r"(Gradient|Grad)(Approx)?$")


@cache
def _table() -> dict[str, str]:
    rows = (line.split("\t", 1) for line in DESCRIPTIONS.read_text().splitlines() if line.strip())
    return {t: d.strip() for t, d in rows}


def description(op_type: str) -> str:
    """netviz's one-line description of `op_type` ("" for ops Caffe2 does not have).

    Examples
    --------
    >>> description("Relu")
    'Y = max(X, 0)'
    >>> description("ReluGradient")
    'backward of Relu (Y = max(X, 0)): input gradients from output gradients'
    """
    own = _table().get(op_type)
    if own is not None:
        return own
    base = _FORWARD_OF.sub("", op_type)
    if base != op_type and base in _table():
        return f"backward of {base} ({_table()[base]}): input gradients from output gradients"
    return ""


def slot_name(names: tuple[str, ...], k: int, prefix: str) -> str:
    """Caffe2's name of slot `k` (``"X"``, ``"filter"``), or ``in3``/``out3`` past the named ones."""
    return names[k] if k < len(names) and names[k] else f"{prefix}{k}"


@dataclass(frozen=True, slots=True)
class ArgDoc:
    """One argument: its value as set on the op, else its default (``is_default``)."""

    name: str
    value: Any
    is_default: bool
    required: bool = False
    known_default: bool = True  # False: neither set nor a default netviz knows


@dataclass(frozen=True, slots=True)
class OpDoc:
    """Everything the inspector says about an op beyond its blobs' values."""

    type: str
    category: str
    description: str
    caffe2: bool  # Caffe2 registers this op type
    inputs: tuple[tuple[str, str], ...]  # (slot name, blob)
    outputs: tuple[tuple[str, str], ...]
    args: tuple[ArgDoc, ...]
    inplace: tuple[str, ...]  # "X -> Y (in place)", "in place allowed: X -> Y"
    gradient: str  # a GRADIENT_LABELS value
    support: str = ""  # "netviz: kernel, shape rule · Caffe2: CPU, CUDA"


def _args(op: caffe2_pb2.OperatorDef, defaults: dict[str, Any], schema_args: tuple[tuple[str, bool], ...]
          ) -> tuple[ArgDoc, ...]:
    given = args_of(op)
    required = {a for a, r in schema_args if r}
    names = list(given) + [a for a in defaults if a not in given]
    names += [a for a, _ in schema_args if a not in given and a not in defaults]
    return tuple(ArgDoc(a, given[a], False, a in required) if a in given
                 else ArgDoc(a, defaults.get(a), True, a in required, a in defaults) for a in names)


def _inplace(op: caffe2_pb2.OperatorDef, ins: tuple[str, ...], outs: tuple[str, ...]) -> tuple[str, ...]:
    f = facts(op.type)
    shown = []
    for i, x in enumerate(op.input):
        for o, y in enumerate(op.output):
            if x == y:
                shown.append(f"{slot_name(ins, i, 'in')} -> {slot_name(outs, o, 'out')} in place ({x})")
    if f is not None:  # only pairs this op has (SpatialBN's mean -> mean exists with 5 outputs)
        here = [(i, o) for i, o in sorted(f.inplace_enforced) if i < len(op.input) and o < len(op.output)]
        shown += [f"must run in place: {slot_name(ins, i, 'in')} -> {slot_name(outs, o, 'out')}" for i, o in here
                  if op.input[i] != op.output[o]]
        may = [(i, o) for i, o in sorted(f.inplace or ()) if i < len(op.input) and o < len(op.output)]
        if not shown and may:
            pairs = ", ".join(f"{slot_name(ins, i, 'in')} -> {slot_name(outs, o, 'out')}" for i, o in may)
            shown.append(f"may run in place: {pairs}")
    return tuple(shown)


def op_doc(op: caffe2_pb2.OperatorDef, inputs: list[str] | None = None,
           outputs: list[str] | None = None) -> OpDoc:
    """The :class:`OpDoc` of `op`; `inputs`/`outputs` replace the blob names shown
    (e.g. SSA names ``gpu_0/data@0``).

    Examples
    --------
    >>> from engine.model.opdef import create_operator
    >>> d = op_doc(create_operator("Conv", ["data", "w", "b"], ["y"], kernel=3))
    >>> d.inputs
    (('X', 'data'), ('filter', 'w'), ('bias', 'b'))
    """
    from engine.catalogue.registry import KERNELS  # noqa: PLC0415 - filled by engine.runtime.ops

    f = facts(op.type)
    ins = f.inputs if f else ()
    outs = f.outputs if f else ()
    shown_in = inputs if inputs is not None else list(op.input)
    shown_out = outputs if outputs is not None else list(op.output)
    spec = KERNELS.get(op.type)
    status = "gradient_op" if f is not None and f.gradient_op else (f.gradient if f else "no_maker")
    return OpDoc(
        type=op.type, category=category(op.type), description=description(op.type), caffe2=f is not None,
        inputs=tuple((slot_name(ins, k, "in"), b) for k, b in enumerate(shown_in)),
        outputs=tuple((slot_name(outs, k, "out"), b) for k, b in enumerate(shown_out)),
        args=_args(op, dict(spec.arg_defaults) if spec else {}, f.args if f else ()),
        inplace=_inplace(op, ins, outs), gradient=GRADIENT_LABELS[status], support=_support(op.type))


def _support(op_type: str) -> str:
    """What runs this op type: netviz's kernel and shape rule, Caffe2's CPU/CUDA kernels."""
    from engine.catalogue.registry import KERNELS, SHAPES  # noqa: PLC0415

    f = facts(op_type)
    mine = [w for w, ok in (("kernel", op_type in KERNELS), ("shape rule", op_type in SHAPES)) if ok]
    theirs = [w for w, ok in (("CPU", f and f.cpu), ("CUDA", f and f.cuda)) if ok]
    return f"netviz: {', '.join(mine) or 'view only'} · Caffe2: {', '.join(theirs) or 'not an op'}"
