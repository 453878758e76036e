"""One module per ``netviz`` subcommand: ``add_arguments(parser)`` and ``run(args) -> int``."""
from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from engine.errors import BlobNotFoundError, GradientError

if TYPE_CHECKING:
    import argparse  # NOTE: the TUI imports this package (missing_blob_hint) before its first frame


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments every model-reading command shares: PATH and --init."""
    parser.add_argument("path", metavar="PATH", help="predict net, binary (.pb) or text (.pbtxt)")
    parser.add_argument("--init", metavar="INIT", default=None,
                        help="init net (default: a sibling init_net.* / X_init.* if present)")
    parser.add_argument("--fix-caffe2", action="store_true",
                        help="apply netviz's fixes of Caffe2 gradient bugs (default: compute exactly what "
                             "Caffe2 1.10.2 computes; `netviz lint` lists the ops where they differ)")


_NOT_FOUND = re.compile(r"input blob '(.+?)' not found")


def missing_blob_hint(detail: str, model: Any, synthesized: bool, missing: list[str] | None = None) -> str:
    """What to give for an external input a run did not find (appended to its one-line error).

    Nets from Caffe2's builders and ``netviz grad -o`` come without ``value_info.json``, so their
    data inputs have no shape to make random values from: the error must say how to feed them,
    not only (as for a weightless zoo net) how to make up parameters.  `missing`: every input nothing
    gives (``Debugger.missing_inputs``), named together so one more run does not find the next.
    """
    m = _NOT_FOUND.search(detail)
    if not m or m.group(1) not in model.predict.external_input:
        return ""
    blob = m.group(1)
    others = [n for n in missing or () if n != blob]
    if others:
        names = [blob, *others]
        return (f"; {len(names)} inputs of the net are given by neither the init net nor --input: "
                f"{', '.join(names)}; feed them with " + " ".join(f"--input {n}=SHAPE" for n in names)
                + " (or NAME=FILE.npy)" + ("" if len(model.init.op) or synthesized else
                                           ", and --init INIT or --random-params for its parameters"))
    if not len(model.init.op) and not synthesized:
        return ("; the model has no init net: give --init INIT or --random-params for its parameters "
                "(and --input NAME=FILE.npy or NAME=SHAPE for its inputs)")
    return (f"; '{blob}' is an input of the net that neither the init net nor --input gives: "
            f"feed it with --input {blob}=FILE.npy or --input {blob}=SHAPE")


@contextmanager
def naming(where: str) -> Iterator[None]:
    """Prefix a gradient error with the net (or file) it is about, as `netviz grad` does."""
    try:
        yield
    except GradientError as e:
        text = str(e) if str(e).startswith(f"{where}:") else f"{where}: {e}"
        raise GradientError(text + _overwritten_by(e)) from e


def refuse_bad_losses(net: Any, losses: list[str] | None) -> None:
    """Raise BlobNotFoundError for the first --loss blob `net` cannot be differentiated for: one line
    before anything runs, not a loss-seed op failing on a missing blob after the forward table."""
    from engine.autodiff.training import split_training_net

    split = split_training_net(net) if losses else None
    for loss in losses or ():
        if (why := loss_error(net, split, loss)) is not None:
            raise BlobNotFoundError(why)


def _overwritten_by(e: GradientError) -> str:
    """For a gradient version conflict, the in-place op that overwrote the blob (the message is
    Caffe2's own: it refuses such a net too, which a user would otherwise take for a netviz bug)."""
    from engine.autodiff.gradient_ir import GradientVersionError

    last = (getattr(e, "help", "") or "").strip().splitlines()[-1:] if isinstance(e, GradientVersionError) else []
    m = re.search(r"<-- (op #\d+ \S+)", last[0]) if last else None
    return f" ({m.group(1)} overwrote it in place; Caffe2 refuses this net too)" if m else ""


def loss_error(net: Any, split: Any, loss: str) -> str | None:
    """Why `loss` cannot be differentiated in `net` (a training net: its forward section), or None.

    A training net's backward and optimizer ops write blobs too (``X_grad``, updated ``fc_w``);
    saying "no op writes" one of those would be wrong, so the message names the section that does.
    """
    sections = {s for op, s in zip(net.op, split.sections) if loss in op.output}
    if "forward" in sections:
        return None
    where = net.name or "net"
    if not sections:
        return f"{where}: no op writes loss blob '{loss}'"
    made_by = " and ".join(sorted(sections))
    return (f"{where}: loss blob '{loss}' is written only by the net's {made_by} ops; give a blob of its forward "
            f"section (its backward pass is for {', '.join(split.losses) or '?'})")
