"""Generate the backward pass of a loss (Caffe2's GradientRegistry / IR) and write the net with it.

Prints every blob → gradient pair (sparse gradients as `indices=…, values=…`) and, with -o, writes
a net that runs: the forward ops (with the `Copy` ops that save inputs an in-place op overwrites
but its gradient reads) followed by the generated ones (.pbtxt as text, else binary).  A training
net that already holds its backward pass and optimizer is differentiated by its forward section
(the existing backward and optimizer ops are left out of OUT).  When an op cannot be
differentiated, the one-line error names it (e.g. `op #96 BoxWithNMSLimit`) and exits 2.

examples:
  netviz grad examples/mlp/predict_net.pb --loss loss
  netviz grad examples/mlp/predict_net.pb --loss loss -o mlp_grad.pbtxt --force
  netviz grad examples/while_net/predict_net.pb --loss loss --json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from engine.errors import ModelError
from engine.autodiff.gradient_ir import IR, GradientSlice
from engine.model.modelio import load_net, save_net
from engine.autodiff.training import forward_net, split_training_net
from netviz.commands import add_model_arguments, naming, refuse_bad_losses
from proto import caffe2_pb2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--loss", metavar="BLOB", required=True, action="append",
                        help="blob to differentiate (repeat for several; each gets a 1.0 gradient)")
    parser.add_argument("-o", "--output", metavar="OUT", help="write the net with its backward ops (.pbtxt/.pb)")
    parser.add_argument("--json", action="store_true", help="print the blob → gradient map as JSON")
    parser.add_argument("-f", "--force", action="store_true", help="overwrite OUT if it exists")


def _grad_name(g: Any) -> Any:
    return {"indices": g.indices, "values": g.values} if isinstance(g, GradientSlice) else g


def run(args: argparse.Namespace) -> int:
    whole = load_net(args.path)
    split = split_training_net(whole)
    net = forward_net(whole, split)
    where = net.name or args.path
    refuse_bad_losses(whole, args.loss)
    if args.output and not args.force:
        if Path(args.output).exists():
            raise ModelError(f"{args.output}: already exists; pass --force to overwrite")
    with naming(where):
        ir = IR(net.op)
        grad_ops, grads = ir.GetBackwardPass(list(args.loss))
    fwd_ops = ir.ForwardWithSaves()[0]  # NOTE: with the saves of in-place inputs, else OUT cannot run
    if args.output:
        out = caffe2_pb2.NetDef()
        out.CopyFrom(net)
        del out.op[:]
        out.op.extend(fwd_ops)
        out.op.extend(grad_ops)
        save_net(out, args.output)
    if args.json:
        print(json.dumps({k: _grad_name(v) for k, v in grads.items()}, indent=2))
        return 0
    if split.has_backward:
        held = ", ".join(f"{n} {s}" for s, n in split.counts().items() if s != "forward")
        print(f"{where} already holds {held} ops; differentiating its forward section")
    width = max((len(k) for k in grads), default=0)
    for blob, g in grads.items():
        g = _grad_name(g)
        shown = f"indices={g['indices']}, values={g['values']}" if isinstance(g, dict) else g
        print(f"{blob:<{width}}  →  {shown}")
    saves = len(fwd_ops) - len(net.op)
    print(f"{len(fwd_ops)} forward ops" + (f" ({saves} Copy saving an in-place input)" if saves else "")
          + f", {len(grad_ops)} backward ops"
          + (f"; wrote {args.output}" if args.output else ""))
    return 0
