"""`netviz run --record FILE.nvrec`: the recorder attached to the run's debugger, and its last line.

The recording itself is :mod:`engine.debugger.recording`; this is what the command prints.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from engine.debugger.recording import Recorder
from engine.debugger.records import Stopped


def recorder_for(args: argparse.Namespace, dbg: Any) -> Recorder | None:
    """A :class:`Recorder` on `dbg` when ``--record`` was given (before the run: version 0 is now)."""
    path = getattr(args, "record", None)
    return Recorder(dbg, Path(path)) if path else None


def finish_recording(recorder: Recorder, stop: Stopped) -> None:
    """Close the recording and say what it holds, in one line."""
    index = recorder.close(stop)
    size = recorder.path.stat().st_size
    print(f"recorded {index['stops']} op runs and {len(index['blobs'])} blob versions to {recorder.path} "
          f"({size / 1e6:.1f} MB; `netviz query {recorder.path} EXPR`)")
