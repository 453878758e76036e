"""Numerically check the gradients of a whole net (NetGradientChecker semantics): the loss is
the plain sum of the --loss blobs; for every float input that gets a gradient (parameters and
data), sampled elements of the generated gradient are compared with central differences.
A training net that holds its backward pass and optimizer is checked on its forward section.
--random-params fills parameters no init net makes (zoo nets come without weights) with
random values of inferred shapes.  Exit status 1 when an input fails.

examples:
  netviz check-grad examples/mlp/predict_net.pb --loss loss
  netviz check-grad examples/while_net/predict_net.pb --loss loss --elements 5 --only W
  netviz check-grad examples/mlp_forward/predict_net.pb --loss loss --input data=16,8 --elements 50 --only fc1_w
  netviz check-grad $NETVIZ_MODEL_ZOO/resnet50/predict_net.pbtxt --loss gpu_0/softmax --random-params --elements 3 --only gpu_0/pred_w
"""
from __future__ import annotations

import argparse
import warnings

import numpy as np

from engine.debugger import parse_input_spec
from engine.debugger.feeds import resolve_feeds
from engine.errors import NetvizError
from engine.caffe2.gradient_checker import InputGradCheck, check_model_gradients
from engine.model.modelio import Model, load_model
from proto.caffe2_pb2 import NetDef
from engine.autodiff.training import forward_net, split_training_net
from netviz.commands import add_model_arguments, missing_blob_hint, naming, refuse_bad_losses


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--loss", metavar="BLOB", action="append", required=True, help="loss blob (repeatable)")
    parser.add_argument("--input", metavar="NAME=FILE.npy|NAME=SHAPE[:DTYPE]", action="append", default=[],
                        help="feed an input from a .npy file, or random values of a shape (label=16:int32: 0/1 ints)")
    parser.add_argument("--only", metavar="BLOB", action="append", default=None, help="check only these inputs")
    parser.add_argument("--elements", type=int, default=20, help="elements sampled per input (default 20)")
    parser.add_argument("--step", type=float, default=1e-3, help="finite-difference step (default 1e-3)")
    parser.add_argument("--threshold", type=float, default=0.05, help="allowed |analytic - numeric| / (1 + |numeric|)")
    parser.add_argument("--random-params", action="store_true",
                        help="random values (of inferred shapes) for parameters the init net does not make")
    parser.add_argument("--seed", type=int, default=0, help="seed of random inputs/parameters and sampling")


def _random_params(model: Model, net: NetDef, feeds: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
    """Parameters of `net` that neither the init net nor `feeds` give (shapes need the init's values)."""
    from engine.runtime import executor
    from engine.runtime.params import synthesize_params
    from engine.caffe2.workspace import Workspace

    ws = Workspace("check_grad_init")
    executor.run_net(model.init, ws)
    return synthesize_params(net, {**ws.values, **feeds}, seed=seed)


def _explain_exact_mode(net: NetDef, losses: list[str]) -> None:
    """A failure where netviz computes Caffe2's wrong gradient on purpose (Caffe2-exact mode) says so."""
    from engine.analysis.lint import fixes_enabled, lint_net

    if fixes_enabled():
        return
    wrong = [f for f in lint_net(net, losses) if f.values_differ]
    if wrong:
        ops = ", ".join(f"#{f.op_index} {f.op_type}" for f in wrong[:4]) + (", …" if len(wrong) > 4 else "")
        print(f"note: {len(wrong)} ops compute Caffe2 1.10.2's own gradient here, which differs from the true one "
              f"({ops}; `netviz lint`); --fix-caffe2 checks netviz's corrected gradients")


def _flat_warning(results: list[InputGradCheck], losses: list[str]) -> str | None:
    """One line when checked gradients are all 0: their pass says nothing (the loss ignores those inputs)."""
    flat = [str(r.name) for r in results if r.flat]
    if not flat:
        return None
    loss = " + ".join(losses)
    if len(flat) == len(results):
        return (f"warning: every checked gradient is 0: the loss (sum of {loss}) does not depend on the checked "
                f"inputs, so these passes show nothing (a Softmax output sums to 1 per row: check a loss such as "
                f"the AveragedLoss of a cross entropy)")
    names = ", ".join(flat[:4]) + (", …" if len(flat) > 4 else "")
    return f"warning: the gradients of {names} are 0: the loss (sum of {loss}) does not depend on them"


def run(args: argparse.Namespace) -> int:
    if args.elements < 1 or args.step <= 0:
        raise NetvizError("--elements must be ≥ 1 and --step > 0")
    model = load_model(args.path, init=args.init)
    given = dict(parse_input_spec(s) for s in args.input)
    made_by_init = {o for op in model.init.op for o in op.output}
    feeds = resolve_feeds(model, given, made_by_init, args.seed)
    split = split_training_net(model.predict)
    net = forward_net(model.predict, split)
    refuse_bad_losses(model.predict, args.loss)
    if args.random_params:
        feeds.update(_random_params(model, net, feeds, args.seed))
    try:
        # NOTE: NumPy's RuntimeWarnings (a NaN in a moved loss) would reach stderr with its paths; the table's
        # FAIL rows say it (issue #42 item 16)
        with naming(net.name or args.path), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            results = check_model_gradients(net, model.init, args.loss, feeds, args.only, max_elements=args.elements,
                                            step=args.step, threshold=args.threshold, seed=args.seed)
    except NetvizError as e:
        hint = missing_blob_hint(str(e), model, args.random_params)
        if not hint:
            raise
        raise NetvizError(f"{e}{hint}") from e
    if not results and args.only:
        raise NetvizError(f"--only {', '.join(args.only)}: no such float input of {args.path} gets a gradient from "
                          f"{', '.join(args.loss)}")
    if not results:
        raise NetvizError(f"{args.path}: no float input gets a gradient from {', '.join(args.loss)}")
    print(f"{'input':<32} {'shape':<18} {'checked':>7} {'max abs':>11} {'max rel':>11}  result")
    for r in results:
        print(f"{str(r.name):<32} {str(list(r.shape)):<18} {r.checked:>7} {r.max_abs:>11.3e} {r.max_rel:>11.3e}  "
              f"{'ok' if r.passed else 'FAIL'}")
    failed = [r.name for r in results if not r.passed]
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    if (warning := _flat_warning(results, args.loss)) is not None:
        print(warning)
    if failed:
        _explain_exact_mode(model.predict, args.loss)  # op numbers as `netviz lint PATH` gives them
    return 1 if failed else 0
