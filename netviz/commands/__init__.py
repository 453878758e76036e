"""One module per ``netviz`` subcommand: ``add_arguments(parser)`` and ``run(args) -> int``."""
from __future__ import annotations

import argparse


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments every model-reading command shares: PATH and --init."""
    parser.add_argument("path", metavar="PATH", help="predict net, binary (.pb) or text (.pbtxt)")
    parser.add_argument("--init", metavar="INIT", default=None,
                        help="init net (default: a sibling init_net.* / X_init.* if present)")
    parser.add_argument("--fix-caffe2", action="store_true",
                        help="apply netviz's fixes of Caffe2 gradient bugs (default: compute exactly what "
                             "Caffe2 1.10.2 computes; `netviz lint` lists the ops where they differ)")
