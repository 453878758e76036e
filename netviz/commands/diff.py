"""Run a model on two devices and list every blob by its largest difference, worst first.

Without CuPy and a GPU the GPU side runs on the stand-in device (NumPy behind CUDA device
options): the output says so, and every difference should then be 0.  Exit status 1 when a
blob differs by more than --threshold.

examples:
  netviz diff model.pb --devices cpu,gpu
  netviz diff resnet50/predict_net.pbtxt --devices cpu,gpu --threshold 1e-3 --top 20
"""
from __future__ import annotations

import argparse

from engine.debugger import parse_input_spec
from engine.debugger.diff import device_diff
from engine.errors import NetvizError
from engine.modelio import load_model
from netviz.commands import add_model_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--devices", default="cpu,gpu", metavar="A,B", help="the two devices (only cpu,gpu)")
    parser.add_argument("--input", metavar="NAME=FILE.npy|NAME=SHAPE", action="append", default=[],
                        help="feed an input (others get random data from value_info.json)")
    parser.add_argument("--loss", metavar="BLOB", default=None, help="also run and compare the backward pass")
    parser.add_argument("--threshold", type=float, default=1e-4, help="max abs difference allowed (1e-4)")
    parser.add_argument("--top", type=int, default=30, metavar="N", help="print the N worst blobs (30)")


def run(args: argparse.Namespace) -> int:
    if sorted(d.strip() for d in args.devices.split(",")) != ["cpu", "gpu"]:
        raise NetvizError(f"--devices {args.devices!r}: only cpu,gpu can be compared")
    model = load_model(args.path, init=args.init)
    feeds = dict(parse_input_spec(s) for s in args.input)
    report = device_diff(model, feeds, loss=args.loss, synthesize_params=not len(model.init.op))
    if report.stand_in:
        print("note: no CUDA GPU here: the gpu side ran on the stand-in device (NumPy), so every "
              "difference should be 0")
    if not len(model.init.op):
        print("note: no init net: parameters filled with random values (the same on both devices)")
    print(f"{'blob':<40} {'shape':<20} {'max abs':>10} {'max rel':>10}")
    for d in report.diffs[: max(args.top, 0)]:
        print(f"{d.name:<40} {'×'.join(map(str, d.shape)) or 'scalar':<20} {d.max_abs:>10.3g} {d.max_rel:>10.3g}")
    first = report.first_over(args.threshold)
    print(f"{len(report.diffs)} blobs compared; "
          + (f"first over {args.threshold:g} in execution order: {first.name} (abs {first.max_abs:.3g})"
             if first else f"none differs by more than {args.threshold:g}"))
    return 1 if first else 0
