"""Places in a program as a user reads them: ``main › While op#2 iteration 1 › Do op#0 › op#1 Tanh``.

The debugger's op paths (``("op", 2, "loop_net", 0, "net", 1)``) are exact but unreadable; every
message naming a place (NaN alerts, breakpoint hits, errors) goes through :func:`place`, the same
wording as the program counter (:meth:`engine.debugger.records.ProgramCounter.text`).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.model.opdef import subnets_of

#: frame labels that say nothing beyond the op's type (a Do's one net)
_PLAIN = frozenset({"net", "main"})


def place(net: Any, path: Sequence[Any], labels: Sequence[str] = ()) -> str:
    """`path` in `net` as ``main › While op#2 iteration 1 › Do op#0 › op#1 Tanh``.

    `labels`: the frames' labels below main when the op ran (``iteration 1``, ``then_net``,
    ``timestep 3``), one per subnet on the path; the subnet's argument name where missing."""
    steps = list(path[1:]) if path and path[0] == "op" else list(path)
    parts, level = ["main"], 0
    while len(steps) >= 3 and net is not None:
        index, arg, steps = steps[0], steps[1], steps[2:]
        op = net.op[index] if isinstance(index, int) and index < len(net.op) else None
        label = labels[level] if level < len(labels) else str(arg)
        kind = op.type if op is not None else "op"
        parts.append(f"{kind} op#{index}" + ("" if label in _PLAIN else f" {label}"))
        net = dict(subnets_of(op)).get(arg) if op is not None else None
        level += 1
    if steps:
        index = steps[-1]
        op = net.op[index] if net is not None and isinstance(index, int) and index < len(net.op) else None
        parts.append(f"op#{index}" + (f" {op.type}" if op is not None else ""))
    return " › ".join(parts)
