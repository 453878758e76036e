"""One module per ``netviz`` subcommand: ``add_arguments(parser)`` and ``run(args) -> int``."""
from __future__ import annotations

import argparse


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments every model-reading command shares: PATH and --init."""
    parser.add_argument("path", metavar="PATH", help="predict net, binary (.pb) or text (.pbtxt)")
    parser.add_argument("--init", metavar="INIT", default=None,
                        help="init net (default: a sibling init_net.* / X_init.* if present)")
