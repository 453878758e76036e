"""Caffe2's schema check (``OpSchema::Verify``) on netviz's ops: counts, in-place, required args.

Caffe2 refuses to create an op that fails its schema ("Operator def did not pass schema
checking"); the reasons below use Caffe2's own wording. Counts beyond the range the oracle
enumerated (min + 8) and in-place pairs beyond its probe are not judged (no false alarms).
"""
from __future__ import annotations

import os
from collections.abc import Iterator

from engine.catalogue.facts import OpFacts, facts
from proto import caffe2_pb2

NOT_CAFFE2 = "is not a Caffe2 op"
#: "warn" (default): schema violations are reported by loaders (``netviz info``, the TUI) and the
#: op still runs if its kernel can; "error": running such an op raises SchemaError, as Caffe2
#: refuses to create it. NETVIZ_SCHEMA=error selects it (bundled examples and older tests build
#: ops Caffe2 rejects, e.g. FC without a bias, so "error" is opt-in).
SCHEMA_POLICY = os.environ.get("NETVIZ_SCHEMA", "warn")


def schema_policy() -> str:
    """The current policy, "warn" or "error" (tests may set ``SCHEMA_POLICY``)."""
    return SCHEMA_POLICY


def _counts(f: OpFacts, n_in: int, n_out: int) -> Iterator[str]:
    hi_in = "inf" if f.max_input is None else f.max_input
    hi_out = "inf" if f.max_output is None else f.max_output
    if n_in < f.min_input or (f.max_input is not None and n_in > f.max_input):
        yield f"Input size {n_in} not in range [min={f.min_input}, max={hi_in}]."
    elif f.inputs_allowed is not None and n_in <= f.min_input + 8 and n_in not in f.inputs_allowed:
        yield f"Input size {n_in} not in allowed input sizes {list(f.inputs_allowed)}."
    elif n_out < f.min_output or (f.max_output is not None and n_out > f.max_output):
        yield f"Output size {n_out} not in range [min={f.min_output}, max={hi_out}]."
    elif f.outputs_allowed is not None and n_out <= f.min_output + 8 and n_out not in f.outputs_allowed:
        yield f"Output size {n_out} not in allowed output sizes {list(f.outputs_allowed)}."
    elif (f.io_pairs is not None and n_in <= f.min_input + 8 and n_out <= f.min_output + 8
          and (n_in, n_out) not in f.io_pairs):
        yield f"Combination of input size {n_in} and output size {n_out} not in allowed."
    elif f.outputs_for_inputs and f.outputs_for_inputs.get(n_in, n_out) != n_out:
        yield (f"Output size {n_out} not matching expected output size, which is "
               f"{f.outputs_for_inputs[n_in]}")


def _inplace(f: OpFacts, op: caffe2_pb2.OperatorDef) -> Iterator[str]:
    if f.inplace is None or f.inplace_probe is None:
        return
    p_in, p_out = f.inplace_probe
    for i, x in enumerate(op.input[:p_in]):
        for o, y in enumerate(op.output[:p_out]):
            if x == y and (i, o) not in f.inplace and (i, o) not in f.inplace_enforced:
                yield (f"Input index {i} and output idx {o} ({x}) are set to be in-place but this is "
                       f"actually not supported by op {op.type}")
            elif x != y and (i, o) in f.inplace_enforced:
                yield (f"Input index {i} ({x}) and output idx {o} ({y}) are not in-place but should be "
                       f"as required by op {op.type}")


def violations(op: caffe2_pb2.OperatorDef) -> list[str]:
    """What Caffe2's schema check finds wrong with `op` (Caffe2's wording), first reason first.

    An op type Caffe2 does not register gives ``["'T' is not a Caffe2 op"]``; a registered op
    without a schema gives ``[]`` (Caffe2 skips the check).

    Examples
    --------
    >>> from engine.model.opdef import create_operator
    >>> violations(create_operator("Relu", ["X", "Z"], ["Y"]))
    ['Input size 2 not in range [min=1, max=1].']
    """
    f = facts(op.type)
    if f is None:
        return [f"'{op.type}' {NOT_CAFFE2}"]
    if not f.has_schema:
        return []
    found = list(_counts(f, len(op.input), len(op.output)))
    found += _inplace(f, op)
    present = {a.name for a in op.arg}
    found += [f"Argument '{a}' is required for Operator '{op.type}'."
              for a in f.required_args if a not in present]
    return found


def check_op(op: caffe2_pb2.OperatorDef, index: int = 0, net_name: str = "") -> list[str]:
    """One-line messages ``"<net>: op #i Type 'name': <what is wrong>"`` for `op`'s violations."""
    where = f"{net_name or 'net'}: op #{index} {op.type} '{op.name}'"
    return [f"{where}: {v}" for v in violations(op)]


def check_net(net: caffe2_pb2.NetDef) -> list[str]:
    """:func:`check_op` over every op of `net` (subnets of control ops are their own nets)."""
    return [m for i, op in enumerate(net.op) for m in check_op(op, i, net.name)]


def check_tree(net: caffe2_pb2.NetDef) -> list[str]:
    """:func:`check_net` of `net` and, recursively, of every subnet its control ops hold."""
    from engine.model.opdef import subnets_of  # noqa: PLC0415

    return check_net(net) + [m for op in net.op for _, sub in subnets_of(op) for m in check_tree(sub)]
