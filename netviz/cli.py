"""The ``netviz`` command line: ``netviz PATH`` opens the TUI; subcommands script the same work.

Each subcommand is one module in :mod:`netviz.commands` with ``add_arguments(parser)`` and
``run(args) -> int``.  Every :class:`~engine.errors.NetvizError` becomes one line on stderr and
exit status 2 — never a traceback.
"""
from __future__ import annotations

import argparse
import difflib
import os
import sys
from collections.abc import Sequence
from types import ModuleType

from engine import __version__
from engine.errors import ModelError, NetvizError
from engine.runtime.fidelity import fix_caffe2

#: subcommand → (module in netviz.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "open": ("open", "open a model in the interactive TUI (the default: `netviz PATH`)"),
    "info": ("info", "describe a model: ops, inputs/outputs, parameters, devices, subnets"),
    "export": ("export", "write a graphviz diagram (.dot/.svg/.png/.pdf) or net_drawer JSON"),
    "grad": ("grad", "generate the backward pass for a loss and write the net with it"),
    "run": ("run", "run a model forward (and backward) and print a per-op table"),
    "check-grad": ("check_grad", "numerically check the gradients of a whole net"),
    "lint": ("lint", "list the ops where Caffe2 1.10.2 computes other values or refuses (docs/fidelity.md)"),
    "diff": ("diff", "compare two runs of a net op by op and name the culprit op; or cpu and gpu; or two nets"),
    "extract": ("extract", "cut ops N:M out of a net with the values they read: a repro Caffe2 runs"),
    "query": ("query", "ask a recorded run (run --record) where a condition holds, or a blob's history"),
    "replay": ("replay", "open the TUI on a recorded run (run --record): no kernel runs, steps go both ways"),
    "doctor": ("doctor", "versions of netviz's parts, optional parts found or how to install them, its files"),
}

EPILOG = """examples (from a checkout; zoo nets through $NETVIZ_MODEL_ZOO, see docs/files.md):
  netviz examples/mlp/predict_net.pb                       # the TUI (init_net.pb beside it is read too)
  netviz info examples/mlp/predict_net.pb --json           # machine-readable summary
  netviz run examples/mlp/predict_net.pb                   # run it, one line per op
  netviz grad examples/mlp/predict_net.pb --loss loss      # the generated backward pass
  netviz export examples/mlp/predict_net.pb -o mlp.svg --force      # draw it (needs Graphviz)
  netviz info $NETVIZ_MODEL_ZOO/resnet50/predict_net.pbtxt          # a net of the Caffe2 model zoo
  netviz run examples/while_net/predict_net.pb --record while.nvrec # record every value of a run
  netviz while.nvrec                                       # step through it again, both ways (= netviz replay)

`netviz COMMAND --help` has each command's examples.  Caches, logs and every NETVIZ_* variable:
docs/files.md; `netviz doctor` prints the paths in use and what is installed.
"""


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors in one line with exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        hint = "" if message.endswith("--help`)") else f" (see `{self.prog} --help`)"
        self.exit(2, f"netviz: {message}{hint}\n")


def command_module(name: str) -> ModuleType:
    """The module of subcommand `name`, imported now: each brings its own engine layers (``run`` the
    executor and every kernel module, ``lint`` the lint, ``export`` the drawing), and ``netviz PATH``
    needs none of them before the TUI's first frame (all of them cost ~0.2 s at every start)."""
    # NOTE: explicit imports, not importlib (tests/engine/test_layers.py walks them)
    if name == "open":
        from netviz.commands import open as mod
    elif name == "info":
        from netviz.commands import info as mod
    elif name == "export":
        from netviz.commands import export as mod
    elif name == "grad":
        from netviz.commands import grad as mod
    elif name == "run":
        from netviz.commands import run as mod
    elif name == "check-grad":
        from netviz.commands import check_grad as mod
    elif name == "lint":
        from netviz.commands import lint as mod
    elif name == "diff":
        from netviz.commands import diff as mod
    elif name == "extract":
        from netviz.commands import extract as mod
    elif name == "query":
        from netviz.commands import query as mod
    elif name == "replay":
        from netviz.commands import replay as mod
    elif name == "doctor":
        from netviz.commands import doctor as mod
    else:
        raise KeyError(name)
    return mod


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser: one subparser per entry of :data:`COMMANDS`, or only subcommand `only` (what a
    command line naming it needs: the others' modules are not imported)."""
    parser = _Parser(prog="netviz", description="Visualize and debug Caffe2 nets.", epilog=EPILOG,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"netviz {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (_, help_text) in COMMANDS.items():
        if only is not None and name != only:
            continue
        mod = command_module(name)
        p = sub.add_parser(name, help=help_text, description=(mod.__doc__ or help_text).strip(),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(p)
        p.set_defaults(handler=mod.run)
    return parser


#: subcommands that take a PlanDef as PATH (the others read one NetDef)
PLAN_COMMANDS = frozenset({"open", "info", "run"})


def _refuse_plan(args: argparse.Namespace) -> None:
    """A plan given to a NetDef command is named as such, not reported as a NetDef with a bad field."""
    path = getattr(args, "path", None)
    if path is None or args.command in PLAN_COMMANDS:
        return
    from engine.runtime.plan_view import is_plan_file
    if is_plan_file(path):
        from engine.runtime.plandef import load_plan
        nets = ", ".join(repr(n.name) for n in load_plan(path).network) or "none"
        raise ModelError(f"{path}: a PlanDef (nets {nets}); `netviz {args.command}` reads one NetDef: "
                         "`netviz info`, `netviz run` and the TUI open plans")


def closest_command(word: str) -> str | None:
    """The subcommand `word` is probably a typo of (``inof`` → ``info``), or None: a word naming an
    existing file is a model path (`netviz PATH`), never a typo."""
    if word in COMMANDS or os.path.exists(word):
        return None
    match = difflib.get_close_matches(word, COMMANDS, n=1, cutoff=0.6)
    return match[0] if match else None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``netviz`` console script."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list == ["--version"]:  # NOTE: before the parser, which imports every subcommand's module
        print(f"netviz {__version__}")
        return 0
    if sorted(args_list) == ["--verbose", "--version"]:
        args_list = ["doctor"]  # NOTE: `--version --verbose` is the doctor
    if args_list and not args_list[0].startswith("-") and args_list[0] not in COMMANDS:
        typo = closest_command(args_list[0])
        if typo is not None:
            print(f"netviz: unknown command '{args_list[0]}'; did you mean '{typo}'? (see `netviz --help`)",
                  file=sys.stderr)
            return 2
        # `netviz PATH` means `netviz open PATH`; a recording (`run --record`) opens its replay
        args_list.insert(0, "replay" if args_list[0].endswith(".nvrec") else "open")
    parser = build_parser(args_list[0] if args_list and args_list[0] in COMMANDS else None)
    if not args_list:
        parser.print_help()
        return 2
    args, extra = parser.parse_known_args(args_list)
    if extra:  # NOTE: argparse would point at the top-level help; the subcommand's help lists its options
        parser.error(f"unrecognized arguments: {' '.join(extra)}"
                     + (f" (see `netviz {args.command} --help`)" if args.command else ""))
    try:
        _refuse_plan(args)
        with fix_caffe2(getattr(args, "fix_caffe2", False)):
            return int(args.handler(args) or 0)
    except NetvizError as e:
        print(f"netviz: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("netviz: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as e:  # NOTE: an output path that cannot be written (a file where a folder goes, no permission)
        where = f"{e.filename}: " if e.filename else ""
        print(f"netviz: {where}{e.strerror or e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
