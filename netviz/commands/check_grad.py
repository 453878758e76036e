"""Numerically check the gradients of a whole net (NetGradientChecker semantics): the loss is
the plain sum of the --loss blobs; for every float input that gets a gradient (parameters and
data), sampled elements of the generated gradient are compared with central differences.
Exit status 1 when an input fails.

examples:
  netviz check-grad examples/mlp/predict_net.pb --loss loss
  netviz check-grad model.pb --loss loss --input data=2,3,32,32 --elements 50 --only fc1_w
"""
from __future__ import annotations

import argparse

from engine.debugger import parse_input_spec
from engine.debugger.feeds import resolve_feeds
from engine.errors import NetvizError
from engine.gradient_checker import check_model_gradients
from engine.modelio import load_model
from netviz.commands import add_model_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--loss", metavar="BLOB", action="append", required=True, help="loss blob (repeatable)")
    parser.add_argument("--input", metavar="NAME=FILE.npy|NAME=SHAPE", action="append", default=[],
                        help="feed an input from a .npy file, or random values of a shape")
    parser.add_argument("--only", metavar="BLOB", action="append", default=None, help="check only these inputs")
    parser.add_argument("--elements", type=int, default=20, help="elements sampled per input (default 20)")
    parser.add_argument("--step", type=float, default=1e-3, help="finite-difference step (default 1e-3)")
    parser.add_argument("--threshold", type=float, default=0.05, help="allowed |analytic - numeric| / (1 + |numeric|)")


def run(args: argparse.Namespace) -> int:
    if args.elements < 1 or args.step <= 0:
        raise NetvizError("--elements must be ≥ 1 and --step > 0")
    model = load_model(args.path, init=args.init)
    given = dict(parse_input_spec(s) for s in args.input)
    made_by_init = {o for op in model.init.op for o in op.output}
    feeds = resolve_feeds(model, given, made_by_init)
    for loss in args.loss:
        if not any(loss in op.output for op in model.predict.op):
            raise NetvizError(f"{args.path}: no op writes loss blob '{loss}'")
    results = check_model_gradients(model.predict, model.init, args.loss, feeds, args.only,
                                    max_elements=args.elements, step=args.step, threshold=args.threshold)
    if not results:
        raise NetvizError(f"{args.path}: no float input gets a gradient from {', '.join(args.loss)}")
    print(f"{'input':<32} {'shape':<18} {'checked':>7} {'max abs':>11} {'max rel':>11}  result")
    for r in results:
        print(f"{r.name:<32} {str(list(r.shape)):<18} {r.checked:>7} {r.max_abs:>11.3e} {r.max_rel:>11.3e}  "
              f"{'ok' if r.passed else 'FAIL'}")
    failed = [r.name for r in results if not r.passed]
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0
