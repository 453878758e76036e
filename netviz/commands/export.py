"""Write a graphviz diagram of a net (.dot, .svg, .png, .pdf) or net_drawer-style JSON.

Styles are Caffe2 net_drawer's: ops are green filled boxes labelled `<name>/<type> (op#i)`,
blobs are octagons with a new node per overwrite.  With --backward the drawing is a ladder: the
forward ops run top-down, their generated gradient ops (red) bottom-up beside them, each on the
rank of the forward op it differentiates, with dashed links to it; the Sum joining a blob's
gradients sits where they join; optimizer ops (gold) form a third column.  Control-flow ops are
blue and their subnets dashed clusters; in-place ops have a double outline.  A legend heads every
SVG, PNG, PDF and DOT.  A training net that already holds its backward pass is drawn with its own
backward ops paired the same way (--loss naming another forward blob regenerates the backward
pass of the forward section instead).

modes:
  full      ops and blobs (net_drawer's GetPydotGraph)
  minimal   ops only, an edge from the producer of each input (--minimal-dependency: drop
            edges implied by others, as net_drawer's minimal_dependency)
  ssa       like full, blob nodes labelled name@version

The default direction (--rankdir auto) keeps a deep net viewable: top to bottom, folded into
side-by-side pieces (column pairs with --backward) whose count follows the net's size; a wide,
shallow net flows left to right in one `dot` run.  Each piece (at most ~130 nodes) is laid out by
`dot` on its own, netviz places the pieces and builds the SVG from their drawings (`neato -n2`
draws a PNG or PDF whole), so the time grows
linearly with the net (ResNet-50 with --backward: about 2x its forward-only export); there is no
`sfdp` fallback.  A drawing of over 500 nodes is drawn ops-only, blob names on the edges.  The
pieces get 85 % of the time budget (--timeout, 60 s), the drawing what is left.  Each step
prints a progress line on stderr; Ctrl-C stops it and writes nothing.
A graphviz program killed by a signal is reported as a crash.  An OUT ending in .onnx writes an ONNX
model instead (onnx.checker-checked; --opset, --input, --random-params; `netviz diff NET OUT.onnx`
verifies it against ONNX Runtime).  Past the budget the DOT file is
written beside OUT and netviz prints the `dot` command to finish elsewhere.  An existing OUT is
kept unless --force.

examples:
  netviz export examples/mlp/predict_net.pb -o mlp.svg --force
  netviz export examples/mlp/predict_net.pb -o net.pdf --mode minimal --minimal-dependency --rankdir TB --force
  netviz export examples/while_net/predict_net.pb -o while_bw.svg --backward --loss loss --force
  netviz export examples/mlp/predict_net.pb -o mlp_train.svg --backward --force
  netviz export $NETVIZ_MODEL_ZOO/mask_rcnn_2go_int8/model.pbtxt -o if.svg --subnets cluster --focus 99 --depth 2 --force
  netviz export examples/mlp/predict_net.pb --json > graph.json
  netviz export $NETVIZ_MODEL_ZOO/inception_v1/predict_net.pbtxt -o inception.svg --timeout 20 --force
  netviz export $NETVIZ_MODEL_ZOO/resnet50/predict_net.pbtxt -o resnet50.onnx --random-params --force   # ONNX (docs/onnx.md)
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

from engine.model.modelio import load_net
from netviz.commands import add_model_arguments, naming
from netviz.commands.onnx_io import add_source_arguments, is_onnx, run_export
from netviz.drawing import MODES, SUBNET_MODES, DrawOptions, draw_net, focus
from netviz.export import ExportError, backward_drawing_net, count_summary, default_loss, export_drawing, output_format
from netviz.layout import DEFAULT_TIMEOUT


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("-o", "--output", metavar="OUT", help="output file: .dot, .svg, .png, .pdf or .json")
    parser.add_argument("--mode", choices=MODES, default="full", help="what to draw (default: full)")
    parser.add_argument("--minimal-dependency", action="store_true",
                        help="with --mode minimal: keep only edges no other path implies")
    parser.add_argument("--append-output", action="store_true", help="list each op's outputs under its label")
    parser.add_argument("--backward", action="store_true", help="add the generated backward pass")
    parser.add_argument("--loss", metavar="BLOB", help="loss blob for --backward (default: last external output)")
    parser.add_argument("--subnets", choices=SUBNET_MODES, default="cluster",
                        help="If/While/Do/RecurrentNetwork subnets (default: cluster)")
    parser.add_argument("--group-scopes", action="store_true", help="cluster ops by name scope (`scope/…`)")
    parser.add_argument("--focus", metavar="OP_OR_BLOB",
                        help="draw only around an op (index `12` / `#12`, or name) or a blob name")
    parser.add_argument("--depth", type=int, default=2, metavar="N", help="ops around --focus (default: 2)")
    parser.add_argument("--rankdir", choices=("auto", "TB", "LR"), default="auto",
                        help="flow direction (default: auto: TB wrapped into columns for a deep net, "
                             "LR for a wide one; the choice is printed on stderr)")
    parser.add_argument("--json", action="store_true",
                        help="net_drawer-style {nodes, edges} JSON, to OUT or stdout")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="S",
                        help=f"layout time limit in seconds (default: {DEFAULT_TIMEOUT:g})")
    parser.add_argument("-f", "--force", action="store_true", help="overwrite OUT if it exists")
    parser.add_argument("--shapes", action="store_true",
                        help="label blobs with inferred shapes (value_info.json, init net fills)")
    parser.add_argument("--opset", type=int, default=None, metavar="N",
                        help="with an .onnx OUT: the ONNX opset (default 17)")
    add_source_arguments(parser, with_input=True)


def lint_flags(net: Any, loss: str | None) -> set[int]:
    """The ops to mark ``⚑`` (Caffe2 computes other values or refuses there): the TUI op list's marks, for
    the same loss (a net netviz cannot differentiate has none)."""
    from engine.analysis.lint import lint_net
    from engine.errors import NetvizError
    try:
        return {f.op_index for f in lint_net(net, [loss] if loss else ())}
    except NetvizError:
        return set()


def run(args: argparse.Namespace) -> int:
    if is_onnx(args.output):
        return run_export(args)
    fmt = "json" if args.json else None
    output_format(args.output, fmt)  # fail on a bad OUT before any work
    if args.loss and not args.backward:
        args.backward = True
    if args.depth < 0 or args.timeout <= 0:
        raise ExportError(f"--depth must be ≥ 0 and --timeout > 0 (got {args.depth}, {args.timeout:g})")
    net = original = load_net(args.path)
    n_fwd, origin = None, []
    if args.backward:
        with naming(net.name or args.path):
            net, n_fwd, origin = backward_drawing_net(net, args.loss)
    options = DrawOptions(args.mode, args.minimal_dependency, args.subnets, args.group_scopes,
                          args.append_output, "TB" if args.rankdir == "auto" else args.rankdir)
    shapes = None
    if args.shapes:
        from engine.model.modelio import load_model
        from engine.runtime.inference import infer_model_shapes
        model = load_model(args.path, init=args.init)
        model.predict = net
        shapes = infer_model_shapes(model)[()]
    loss = (args.loss or default_loss(original)) if args.backward else None
    d = draw_net(net, options, n_fwd, origin, shapes, lint_flags(original, loss))
    if args.focus is not None:
        d = focus(d, args.focus, args.depth)
    result = export_drawing(d, args.output, fmt=fmt, timeout=args.timeout, force=args.force, rankdir=args.rankdir,
                            progress=lambda line: print(f"netviz: {line}", file=sys.stderr, flush=True))
    if args.output is None:
        print(result.note)
        return 0
    if result.timed_out:
        print(f"netviz: {result.note}", file=sys.stderr)
    print(f"wrote {result.path} ({count_summary(d)})")
    return 0
