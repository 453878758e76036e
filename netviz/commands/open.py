"""Open a model in the interactive TUI.

The model and every option are checked before the UI starts: a bad file or option exits 2 with
one line on stderr.

examples:
  netviz examples/mlp/predict_net.pb
  netviz examples/mlp_forward/predict_net.pb --init examples/mlp_forward/init_net.pb --device cpu
  netviz $NETVIZ_MODEL_ZOO/resnet50/predict_net.pbtxt --input gpu_0/data=1,3,224,224
"""
from __future__ import annotations

import argparse
import gc
from typing import TYPE_CHECKING

from netviz.commands import add_model_arguments

if TYPE_CHECKING:
    from netviz.app import NetvizApp


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--input", metavar="NAME=FILE.npy|NAME=SHAPE", action="append", default=[],
                        help="feed an input blob from a .npy file, or random values of a shape (1,3,224,224)")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu", help="where ops run (default cpu)")
    parser.add_argument("--loss", metavar="BLOB", default=None, help="loss blob for the backward view (g)")


def start(args: argparse.Namespace) -> NetvizApp:
    """The app for `args`, made as ``netviz PATH`` makes it (the TUI probe of ``make bench`` calls this
    too, so it measures this very start): the model opened and checked first, then Textual imported.

    The cyclic collector is off from here to the app's first frame (``MainScreen`` turns it back on;
    :func:`run` too, whatever happens): the imports and the session make ~100k objects that all stay
    alive, and the collections that walk them were 15-20 ms of each start."""
    from engine.errors import NetvizError
    from netviz.session import Session

    # NOTE: engine.runtime.device imports NumPy (60-100 ms): only a GPU start asks it anything here
    if args.device == "gpu" and not _has_gpu():
        raise NetvizError("--device gpu: no CUDA GPU (or no CuPy) on this machine; use --device cpu, "
                          "or `netviz diff PATH --devices cpu,gpu` to compare against the stand-in device")
    gc.disable()
    session = Session.open(args.path, init=args.init, inputs=args.input, device=args.device, loss=args.loss)
    from netviz.app import NetvizApp  # textual is imported only once the model is good

    return NetvizApp(session)


def _has_gpu() -> bool:
    from engine.runtime.device import has_gpu

    return has_gpu()


def run(args: argparse.Namespace) -> int:
    try:
        result = start(args).run()
    finally:
        gc.enable()
    return int(result or 0)
