"""Describe a model: net name, op count and op-type histogram, external inputs and outputs,
parameters found in the init net (shape, dtype), devices used, and every subnet held by
If/While/Do/RecurrentNetwork ops, recursively.  Ops that break their Caffe2 schema (wrong input
count, illegal in-place, missing required argument, not a Caffe2 op) are listed as warnings;
``--json`` also gives every op's inputs and outputs under Caffe2's slot names.  A training net (one that holds its backward
pass and optimizer) gets a line with its forward / backward / optimizer sections.

examples:
  netviz info $NETVIZ_MODEL_ZOO/resnet50/predict_net.pbtxt
  netviz info examples/mlp/predict_net.pb
  netviz info examples/mlp/plan.pbtxt      # a PlanDef: its nets and steps as a tree
  netviz info examples/mlp_forward/predict_net.pb --init examples/mlp_forward/init_net.pb --json
"""
from __future__ import annotations

import argparse
import json
from typing import Any

from engine.errors import ModelError
from engine.model.modelio import load_model
from engine.analysis.summary import model_summary, shape_summary, total_op_count
from netviz.commands import add_model_arguments


PAIRED = {"regenerated": "as the generated backward pass pairs them", "names": "by blob names",
          "regenerated+names": "as the generated backward pass pairs them, the rest by blob names"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--shapes", action="store_true",
                        help="also infer the shape and dtype of every blob version (? = unknown, opaque = no "
                             "static rule can know: queues, DBs and what they hand out)")


def _lines(s: dict[str, Any], indent: str = "") -> list[str]:
    out = [f"{indent}net {s['name']!r} ({s['type']}): {s['op_count']} ops"]
    hist = ", ".join(f"{t} ×{n}" for t, n in s["op_types"].items())
    out.append(f"{indent}  op types: {hist or '-'}")
    out.append(f"{indent}  external inputs ({len(s['external_inputs'])}): {_clip(s['external_inputs'])}")
    out.append(f"{indent}  external outputs ({len(s['external_outputs'])}): {_clip(s['external_outputs'])}")
    out.append(f"{indent}  devices: " + (", ".join(f"{d} ×{n}" for d, n in s["devices"].items()) or "-"))
    out.extend(f"{indent}  warning: {w}" for w in s["schema_warnings"])
    for sub in s["subnets"]:
        out.append(f"{indent}  subnet {sub['arg']} of op #{sub['op_index']} {sub['op_type']}:")
        out.extend(_lines(sub, indent + "    "))
    return out


def _clip(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", … (+{len(names) - limit})" if len(names) > limit else "") or "-"


def plan_summary(plan: Any) -> dict[str, Any]:
    """A PlanDef as JSON: each net's name, op count and op-type histogram, and the step tree (the
    ExecutionStep fields, int64 counts as numbers); `--json` must never print text."""
    from collections import Counter

    from google.protobuf import json_format
    return {"plan": plan.name,
            "nets": [{"name": n.name, "op_count": len(n.op), "op_types": dict(Counter(op.type for op in n.op))}
                     for n in plan.network],
            "steps": [_ints(json_format.MessageToDict(s, preserving_proto_field_name=True))
                      for s in plan.execution_step]}


def _ints(step: dict[str, Any]) -> dict[str, Any]:
    """protobuf's JSON mapping writes int64 fields (num_iter, run_every_ms, …) as strings."""
    return {k: [_ints(s) for s in v] if k == "substep" else int(v) if k in _INT64_STEP_FIELDS else v
            for k, v in step.items()}


_INT64_STEP_FIELDS = frozenset({"num_iter", "report_interval", "run_every_ms", "num_concurrent_instances"})


def run(args: argparse.Namespace) -> int:
    from engine.runtime.plan_view import is_plan_file, plan_lines
    if is_plan_file(args.path):
        from engine.runtime.plandef import load_plan
        plan = load_plan(args.path)
        if args.shapes:
            raise ModelError(f"{args.path}: a PlanDef; --shapes infers one net's blobs: give `netviz info` one of "
                             f"its nets ({', '.join(repr(n.name) for n in plan.network) or 'none'})")
        print(json.dumps(plan_summary(plan), indent=2) if args.json else "\n".join(plan_lines(plan)))
        return 0
    model = load_model(args.path, init=args.init)
    summary = model_summary(model)
    problems: list[str] = []
    if args.shapes:
        summary["shapes"] = shape_summary(model, problems)
        summary["shape_problems"] = problems
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"model: {summary['path']}" + (f"  (init: {summary['init_path']})" if summary["init_path"] else ""))
    lines = _lines(summary)
    print("\n".join(lines))
    sections = summary["sections"]
    if sections:
        counts = ", ".join(f"{k} {n}" for k, n in sections["ops"].items())
        print(f"training net: {counts} ops; backward pass of {', '.join(sections['losses']) or '?'}"
              f" (gradient ops paired with forward ops {PAIRED[sections['paired_by']]})")
    total = total_op_count(summary)
    if total != summary["op_count"]:
        print(f"total ops including subnets: {total}")
    params = summary["parameters"]
    print(f"parameters ({len(params)}):" if params else "parameters: none (no init net)")
    for name, p in params.items():
        shape = "×".join(map(str, p["shape"])) if p["shape"] is not None else "?"
        print(f"  {name}: {shape} {p['dtype']} ({p['type']})")
    for name, info in summary["inputs"].items():
        print(f"input {name}: {'×'.join(map(str, info['shape']))}")
    if args.shapes:
        print(f"shapes ({len(summary['shapes'])} blob versions):")  # NOTE: "opaque": not a tensor / the data decides
        for blob, s in summary["shapes"].items():
            if s.get("opaque"):
                print(f"  {blob}: opaque")
                continue
            dims = "?" if s["shape"] is None else "×".join("?" if d is None else str(d) for d in s["shape"])
            print(f"  {blob}: {dims or 'scalar'} {s['dtype'] or '?'}")
        for p in problems:  # NOTE: one line each; the op's outputs are shown as unknown above
            print(f"shape warning: {p}")
    return 0
