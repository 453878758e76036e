"""Generate the backward pass of a loss (Caffe2's GradientRegistry / IR) and write the net with it.

Prints every blob → gradient pair (sparse gradients as `indices=…, values=…`) and, with -o, writes
the forward ops followed by the generated ones (.pbtxt as text, else binary).  When an op cannot be
differentiated, the one-line error names it (e.g. `op #96 BoxWithNMSLimit`) and exits 2.

examples:
  netviz grad zfnet512/predict_net.pbtxt --loss gpu_0/softmax
  netviz grad model.pb --loss loss -o model_with_grad.pbtxt
  netviz grad model.pb --loss loss --json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from engine.errors import BlobNotFoundError, GradientError, ModelError
from engine.gradient_ir import IR, GradientSlice
from engine.modelio import load_net, save_net
from netviz.commands import add_model_arguments
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
    net = load_net(args.path)
    where = net.name or args.path
    written = {b for op in net.op for b in op.output}
    for loss in args.loss:
        if loss not in written:
            raise BlobNotFoundError(f"{where}: no op writes loss blob '{loss}'")
    if args.output and not args.force:
        if Path(args.output).exists():
            raise ModelError(f"{args.output}: already exists; pass --force to overwrite")
    try:
        grad_ops, grads = IR(net.op).GetBackwardPass(list(args.loss))
    except GradientError as e:
        raise GradientError(f"{where}: {e}") from e
    if args.output:
        out = caffe2_pb2.NetDef()
        out.CopyFrom(net)
        out.op.extend(grad_ops)
        save_net(out, args.output)
    if args.json:
        print(json.dumps({k: _grad_name(v) for k, v in grads.items()}, indent=2))
        return 0
    width = max((len(k) for k in grads), default=0)
    for blob, g in grads.items():
        g = _grad_name(g)
        shown = f"indices={g['indices']}, values={g['values']}" if isinstance(g, dict) else g
        print(f"{blob:<{width}}  →  {shown}")
    print(f"{len(net.op)} forward ops, {len(grad_ops)} backward ops"
          + (f"; wrote {args.output}" if args.output else ""))
    return 0
