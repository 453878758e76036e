"""Open a model in the interactive TUI.

examples:
  netviz model.pb
  netviz model.pbtxt --init init.pb --device cpu
"""
from __future__ import annotations

import argparse

from netviz.commands import add_model_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from engine.modelio import load_model
    from netviz.commands.info import run as info_run

    load_model(args.path, init=args.init)  # a bad file fails here, before any UI starts
    args.json = False
    return info_run(args)
