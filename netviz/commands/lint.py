"""List the ops where netviz and Caffe2 1.10.2 part ways (one rule per entry of docs/fidelity.md):
values that differ between the default Caffe2-exact mode and --fix-caffe2 (an in-place Mul's
gradient, SpatialBN is_test), nets Caffe2 refuses to differentiate (netviz generates the correct
gradient in both modes), and notes (set order, random masks).  A training net is checked on its
forward section, for the losses its backward pass was made for unless --loss names others.
Exit status 1 when some op computes different values or Caffe2 would refuse the net.

examples:
  netviz lint examples/mlp/predict_net.pb
  netviz lint examples/while_net/predict_net.pb --loss loss
  netviz lint examples/mlp/predict_net.pb --loss loss --json
"""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from engine.analysis.lint import RULES, lint_net
from engine.model.modelio import load_net
from netviz.commands import add_model_arguments, refuse_bad_losses


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--loss", metavar="BLOB", action="append", default=[],
                        help="loss blob (repeatable): only ops its backward pass runs through are checked")
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")


def run(args: argparse.Namespace) -> int:
    net = load_net(args.path)
    refuse_bad_losses(net, args.loss)  # NOTE: else an unknown loss checked no op and said "0 findings"
    findings = lint_net(net, args.loss)
    if args.json:
        print(json.dumps([asdict(f) for f in findings], indent=2))
    else:
        sections = {r.id: r.section for r in RULES}
        for f in findings:
            print(f"{f.text()}  (docs/fidelity.md: {sections[f.rule]})")
        serious = sum(f.refused or f.values_differ for f in findings)
        print(f"{len(findings)} findings, {serious} where values differ or Caffe2 refuses the net")
    return 1 if any(f.refused or f.values_differ for f in findings) else 0
