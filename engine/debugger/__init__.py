"""The debugger engine: stepping forward and backward through nested nets.

The TUI and the headless CLI are thin views over :class:`Debugger`; it never imports them.
"""
from engine.debugger.conditions import Condition, ConditionError, parse_condition
from engine.debugger.debugger import Debugger, DebuggerError
from engine.debugger.feeds import FeedError, parse_input_spec
from engine.debugger.inspect import BlobStats, InspectError, parse_index
from engine.debugger.records import (Breakpoint, FrameInfo, OpExecuted, OpRecord, ProgramCounter, Stopped,
                                     Watchpoint)

__all__ = ["Debugger", "DebuggerError", "Condition", "ConditionError", "parse_condition", "FeedError",
           "parse_input_spec", "BlobStats", "InspectError", "parse_index", "Breakpoint", "FrameInfo",
           "OpExecuted", "OpRecord", "ProgramCounter", "Stopped", "Watchpoint"]
