"""Ask a recorded run (`netviz run NET --record FILE.nvrec`) where a condition holds: the breakpoint
language over every op run, every blob version, every loop iteration and RNN timestep.  Prints a
table of op #, place, blob@version, iteration and the value the condition compares (--json: a list).
Exit 0 whether or not a row matched; 2 for a condition or a file that cannot be read.

--history BLOB prints the blob's per-version statistics instead (min, max, mean, norm), one row
per version with its iteration: how a loop's state or a gradient evolved.  --model NET checks the
recording against a model file (its hash) and says so in one line when they differ.

examples:
  netviz run examples/while_net/predict_net.pb --record while.nvrec
  netviz query while.nvrec 'max_abs(acc) > 0.5'
  netviz query while.nvrec has_inf_or_nan --json
  netviz query while.nvrec --history acc
  netviz run examples/mlp_forward/predict_net.pb --input data=16,8 --loss loss --record mlp.nvrec
  netviz query mlp.nvrec 'norm(fc1_w_grad) / norm(fc1_w) > 0.1'
"""
from __future__ import annotations

import argparse
import difflib
import json
import sys
from dataclasses import asdict

from engine.debugger.conditions import ConditionError, parse_condition
from engine.debugger.recorded import Recording
from engine.debugger.timetravel import history, query
from engine.errors import NetvizError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recording", metavar="FILE.nvrec", help="a recording made by `netviz run --record`")
    parser.add_argument("expr", metavar="EXPR", nargs="?", default=None,
                        help="a breakpoint condition: max_abs(x) > 1e3, has_inf_or_nan, norm(g) / norm(w) > 0.1")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--history", metavar="BLOB", default=None,
                        help="per-version statistics (min, max, mean, norm) of BLOB with their iterations")
    parser.add_argument("--model", metavar="NET", default=None,
                        help="check the recording was made from this model (its hash)")


def _value(v: object) -> str:
    if v is None:
        return ""
    if hasattr(v, "size") and getattr(v, "size", 1) != 1:
        return f"array{list(getattr(v, 'shape', ()))}"
    return f"{float(v):.6g}" if hasattr(v, "__float__") else str(v)


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    w = [max([len(h)] + [len(r[k]) for r in rows]) for k, h in enumerate(header)]
    for r in [header, *rows]:
        print("  ".join(c.ljust(w[k]) for k, c in enumerate(r)).rstrip())


def _check_blob(rec: Recording, blob: str) -> None:
    """A name the recording does not hold is a typo until shown otherwise: one line, the nearest name
    offered.  A parameter or input (its starting value @0 only, no op wrote it) is no typo: a note."""
    names = set(rec.blobs())
    if blob not in names:
        near = difflib.get_close_matches(blob, sorted(names), n=1)
        raise NetvizError(f"{rec.path}: no blob '{blob}' in the recording"
                          + (f"; did you mean '{near[0]}'?" if near else ""))
    if set(rec.versions(blob)) <= {0}:
        print(f"netviz: note: {blob}: only its starting value @0 is recorded; no op wrote it", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    rec = Recording.open(args.recording)
    for line in rec.problems:
        print(f"netviz: {line}", file=sys.stderr)
    if args.model:
        from engine.model.modelio import load_model  # noqa: PLC0415 - only with --model
        note = rec.check_model(load_model(args.model))
        if note:
            print(f"netviz: note: {note}", file=sys.stderr)
    if args.history:
        stats = history(rec, args.history)
        if not stats:
            _check_blob(rec, args.history)
        if args.json:
            print(json.dumps([asdict(s) for s in stats], indent=1))
        else:
            _table(("op", "iteration", "version", "min", "max", "mean", "norm"),
                   [(str(s.seq), s.iteration or "-", str(s.version), f"{s.min:.6g}", f"{s.max:.6g}",
                     f"{s.mean:.6g}", f"{s.norm:.6g}") for s in stats])
            print(f"{len(stats)} versions of {args.history}")
        return 0
    if args.expr is None:
        raise NetvizError("query: give a condition (e.g. 'max_abs(x) > 1e3') or --history BLOB")
    try:
        names = set(rec.blobs())
        missing = [b for b in parse_condition(args.expr).blobs if b not in names]
        rows = query(rec, args.expr)
    except ConditionError as e:
        raise NetvizError(str(e)) from None
    if missing:  # NOTE: a typo is never true: "0 of N op runs match" would read as a fact about the run
        _check_blob(rec, missing[0])
    if args.json:
        print(json.dumps([r.as_json() for r in rows], indent=1))
        return 0
    _table(("op", "place", "blob@version", "iteration", "value"),
           [(str(r.seq), r.place, ", ".join(r.blobs), r.iteration or "-", _value(r.value)) for r in rows])
    print(f"{len(rows)} of {len(rec.stops)} op runs match {args.expr}")
    return 0
