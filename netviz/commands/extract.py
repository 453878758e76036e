"""Cut ops N:M out of a net, with the values they read, into a folder that runs alone.

The net is run once (as `netviz run` runs it: --init, --input, --random-params); the range's ops
become DIR/predict_net.pb, every blob they read but do not make is filled by DIR/init_net.pb with
the value it held when the range started, and their outputs go to DIR/expected.npz.  DIR/repro.py
runs the range in real Caffe2 when caffe2.python imports, in netviz otherwise, and compares
(README.md: the one command).  DIR/model.onnx is written too when the range's ops convert.

N:M is a Python slice (ops N to M-1); N alone is one op.  --subnet K/ARG takes the range from the
subnet of top-level op K held in argument ARG (an If's then_net, a While's loop_net, a Do's net),
as it ran the first time.  Then `cd DIR && python repro.py` (docs/debugging.md: a whole session).

examples:
  netviz extract $NETVIZ_MODEL_ZOO/resnet50/predict_net.pbtxt --ops 10:14 -o r50_ops_10_14 --random-params
  netviz extract examples/while_net/predict_net.pb --ops 2 -o while_op2        # the While, its body included
  netviz extract examples/while_net/predict_net.pb --subnet 2/loop_net --ops 0: -o while_body
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.debugger import parse_input_spec
from engine.debugger.divergence import Side, run_side
from engine.debugger.extract import extract_range, write_repro
from engine.errors import NetvizError
from engine.model.modelio import Model, load_model
from netviz.commands import add_model_arguments
from netviz.commands.run import add_input_argument, add_params_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--ops", required=True, metavar="N:M", help="ops N to M-1 (or N alone)")
    parser.add_argument("-o", "--output", required=True, metavar="DIR", help="the folder to write")
    parser.add_argument("--subnet", metavar="K/ARG", default=None,
                        help="take the ops from the subnet of op K held in argument ARG (e.g. 2/loop_net)")
    parser.add_argument("--loss", metavar="BLOB", default=None, help="run the backward pass too (its ops count)")
    parser.add_argument("--tol", type=float, default=1e-4, help="repro.py's tolerance, max|a-b| / max(1, max|a|)")
    parser.add_argument("--no-onnx", action="store_true", help="do not try to write model.onnx")
    parser.add_argument("--force", action="store_true", help="write into DIR even when it holds files")
    add_input_argument(parser)
    add_params_arguments(parser)


def run(args: argparse.Namespace) -> int:
    out = Path(args.output)
    if out.is_dir() and any(out.iterdir()) and not args.force:
        raise NetvizError(f"{out}: not empty (give --force to write into it)")
    model = load_model(args.path, init=args.init)
    feeds = dict(parse_input_spec(s) for s in args.input)
    synth = bool(args.random_params) or not len(model.init.op)
    trace = run_side(Side(model, fix_caffe2=bool(args.fix_caffe2)), feeds, loss=args.loss, synthesize_params=synth,
                     param_width=args.param_width)
    x = extract_range(trace, args.ops, args.subnet)
    onnx_note = "" if args.no_onnx else write_onnx(x, out)
    files = write_repro(x, out, source=str(args.path), tol=args.tol, onnx=onnx_note.startswith("wrote"))
    print(f"{x.where} of {args.path}: {len(x.predict.op)} ops, {len(x.inputs)} blobs captured, "
          f"{len(x.expected)} outputs expected")
    print(f"wrote {', '.join(f.name for f in files)} in {out}" + (f"; {onnx_note}" if onnx_note else ""))
    for note in x.notes:
        print(f"note: {note}")
    print(f"run it: cd {out} && python repro.py")
    return 0


def write_onnx(x, out: Path) -> str:
    """DIR/model.onnx when onnx is installed and every op of the range converts; else why not (one clause)."""
    try:
        from engine.onnx import export as ox  # noqa: PLC0415 - heavy, and only here

        onnx = ox.onnx_module()
        src = ox.prepare_model(Model(x.predict, _init(x)), {}, where=x.where)
        done = ox.export(src, where=x.where)
    except NetvizError as e:
        why = str(e).split(": ", 1)[-1]
        return f"no model.onnx ({why[:100]}{'…' if len(why) > 100 else ''})"
    except Exception as e:  # noqa: BLE001 - an export failure must not lose the repro
        print(f"netviz: note: no model.onnx ({type(e).__name__})", file=sys.stderr)
        return "no model.onnx"
    out.mkdir(parents=True, exist_ok=True)
    onnx.save(done.model, str(out / "model.onnx"))
    return "wrote model.onnx"


def _init(x):
    from engine.debugger.extract import init_net_bytes  # noqa: PLC0415
    from proto import caffe2_pb2  # noqa: PLC0415

    return caffe2_pb2.NetDef.FromString(init_net_bytes("init", x.inputs))
