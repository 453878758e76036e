"""The debugger engine: stepping forward and backward through nested nets.

The TUI and the headless CLI are thin views over :class:`Debugger`; it never imports them.

May import: engine.model, engine.graph, engine.catalogue, engine.runtime, engine.autodiff, engine.analysis.
"""
from typing import Any

from engine.debugger.conditions import Condition, ConditionError, parse_condition
from engine.debugger.feeds import FeedError, parse_input_spec
from engine.debugger.inspect import BlobStats, InspectError, parse_index
from engine.debugger.records import (Breakpoint, FrameInfo, OpExecuted, OpRecord, ProgramCounter, Stopped,
                                     Watchpoint)

__all__ = ["Debugger", "DebuggerError", "Condition", "ConditionError", "parse_condition", "FeedError",
           "parse_input_spec", "BlobStats", "InspectError", "parse_index", "Breakpoint", "FrameInfo",
           "OpExecuted", "OpRecord", "ProgramCounter", "Stopped", "Watchpoint"]


def __getattr__(name: str) -> Any:
    """``Debugger`` and ``DebuggerError`` are imported when first asked for: they bring the executor
    and every kernel module (1-2 s under load), and the TUI reads ``engine.debugger.feeds`` (its
    ``--input`` forms) before its first frame, long before it runs an op."""
    if name in ("Debugger", "DebuggerError"):
        from engine.debugger import debugger  # noqa: PLC0415

        return getattr(debugger, name)
    raise AttributeError(f"module 'engine.debugger' has no attribute {name!r}")
