"""Open the TUI on a recorded run (`netviz run NET --record FILE.nvrec`): the same screens and keys
as a live session, but no kernel runs, the model files and the recording's device are not needed,
and `u` steps back into finished subnets, iterations and timesteps at any distance.  Values come
from the recording; inject and skip are refused (a recording is what happened).

Going back: U reverse-continues to the previous breakpoint hit, G puts the pc at the op run that wrote the
shown blob version, and `/` then `? EXPR` (the breakpoint conditions) lists every stop where EXPR holds;
Enter jumps there.  The inspector draws a blob's min/max/mean/norm per write (loop iterations, timesteps)
as sparklines.

examples:
  netviz run examples/while_net/predict_net.pb --record while.nvrec
  netviz replay while.nvrec
"""
from __future__ import annotations

import argparse
import gc
import sys
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recording", metavar="FILE.nvrec", help="a recording made by `netviz run --record`")


def session_of(path: str) -> Any:
    """A :class:`netviz.session.Session` on the recording's nets whose debugger is the recording."""
    from engine.debugger.recorded import Recording
    from engine.debugger.replayer import ReplayDebugger
    from netviz.session import Session

    rec = Recording.open(path)
    for line in rec.problems:
        print(f"netviz: {line}", file=sys.stderr)
    dbg = ReplayDebugger(rec)
    session = Session(dbg.model, None, "cpu", dbg.loss[0] if dbg.loss else None)
    session.debugger = dbg  # NOTE: the seam: the session's moves and values now read the recording
    if dbg.loss or session.forward.sections is not None:
        session.set_backward(True, dbg.loss[0] if dbg.loss else None)
        session.set_backward(False)
    return session


def run(args: argparse.Namespace) -> int:
    session = session_of(args.recording)
    from netviz.app import NetvizApp  # textual is imported only once the recording is good

    gc.disable()
    try:
        result = NetvizApp(session).run()
    finally:
        gc.enable()
    return int(result or 0)
