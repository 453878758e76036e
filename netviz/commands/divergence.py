"""The localizer side of `netviz diff`: two runs of a net op by op, a table of each op's output,
own and inherited error, and the culprit line (:mod:`engine.debugger.divergence` does the work)."""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from engine.debugger import parse_input_spec
from engine.debugger.descend import with_inside
from engine.debugger.divergence import Divergence, Side, diverge, table
from engine.errors import NetvizError
from engine.model.modelio import load_model
from engine.runtime import device as dev


def sides(args: argparse.Namespace) -> tuple[Side, Side]:
    """Side A (PATH with --init-a or --init) and side B (OTHER or PATH, --init-b or A's init), each with
    its device and Caffe2-fix switch.  `netviz diff` runs a gpu side on the NumPy stand-in when there is no GPU
    (diff._stand_in_gpu); a caller without that stand-in gets a one-line refusal here, never a CuPy traceback."""
    if args.other is not None and not args.run:
        raise NetvizError("OTHER with side options: give --run to run both nets op by op")
    for side in "ab":
        if getattr(args, f"device_{side}") == "gpu" and not dev.has_gpu():
            raise NetvizError(f"--device-{side} gpu: no CUDA GPU here (CuPy and a GPU are needed); skipped")
    init_a = args.init_a or args.init
    a = load_model(args.path, init=init_a)
    b = load_model(args.other or args.path, init=args.init_b or (init_a if args.other is None else None))
    fix = bool(args.fix_caffe2)
    return (Side(a, args.device_a or "cpu", fix or args.fix_caffe2_a, "A"),
            Side(b, args.device_b or "cpu", fix or args.fix_caffe2_b, "B"))


def _describe(s: Side) -> str:
    init = (f"init {s.model.init_path}" if s.model.init_path else "no init net" if not len(s.model.init.op)
            else "init net given")
    return (f"{s.label}: {s.model.path} ({init}; {s.device}"
            f"{'; --fix-caffe2' if s.fix_caffe2 else ''})")


def run_localizer(args: argparse.Namespace) -> int:
    """Run both sides, print the table (rows over --tol, or --all) and the culprit line; exit 1 on a culprit
    or on outputs apart by more than --tol without one (an op of B alone, rounding that grew)."""
    a, b = sides(args)
    feeds = dict(parse_input_spec(s) for s in args.input)
    synth = bool(args.random_params) or not (len(a.model.init.op) and len(b.model.init.op))
    d = with_inside(diverge(a, b, feeds, loss=args.loss, synthesize_params=synth, param_width=args.param_width,
                            tol=args.tol))
    made = sorted({n for t in d.traces for n in t.synthesized})
    notes = [f"note: {len(made)} parameters no init net makes are seeded random values (the same on both sides)"
             ] if made else []
    return report(d, [_describe(a), _describe(b)], args, notes=notes)


def report(d: Divergence, sides: list[str], args: argparse.Namespace, *, notes: Sequence[str] = ()) -> int:
    """Print a localizer's result: --json's document, or the two sides, `notes`, the table (rows over
    --tol, or --all; --top of them), the culprit's values and line, and each side's first NaN/Inf.
    Exit status 1 when :attr:`Divergence.differs`.  Both `netviz diff` localizers (two netviz runs, and
    the engine against ONNX Runtime) print through here."""
    if args.json:
        doc: dict[str, Any] = {"a": sides[0], "b": sides[1], **d.to_json()}
        json.dump(doc, sys.stdout, indent=1)
        print()
        return 1 if d.differs else 0
    for line in [*sides, *notes]:
        print(line)
    lines = table(d, only_over=not args.all)
    shown = lines if args.all else lines[: max(args.top, 0) + 1]
    print("\n".join(shown))
    if len(lines) > len(shown):
        print(f"… {len(lines) - len(shown)} more rows (--top N, --all)")
    for ops, this, other in ((d.only_a, "A", "B"), (d.only_b, "B", "A")):
        if ops:
            print(f"{len(ops)} ops of {this} match no op of {other}: " + ", ".join(f"#{j}" for j in ops[:10]))
    print(f"{d.compared} ops compared (errors: max|a-b| / max(1, max|a|); tolerance {d.tol:g})")
    for line in d.culprit_detail():
        print(line)
    print(d.culprit_line())
    for line in d.nonfinite:  # NOTE: where each side's first NaN/Inf came from (engine.debugger.provenance)
        print(line)
    return 1 if d.differs else 0
