"""Not available yet in this version of netviz."""
from __future__ import annotations

import argparse

from engine.errors import NetvizError
from netviz.commands import add_model_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)


def run(args: argparse.Namespace) -> int:
    raise NetvizError("this command is not implemented yet")
