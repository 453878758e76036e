"""The debugger engine: stepping forward and backward through nested nets.

The TUI and the headless CLI are thin views over :class:`Debugger`; it never imports them.

May import: engine.model, engine.graph, engine.catalogue, engine.runtime, engine.autodiff, engine.analysis.
"""
from importlib import import_module
from typing import Any

#: where each public name lives; each is imported when first asked for (PEP 562).  ``Debugger``
#: brings the executor and every kernel module (1-2 s under load), the conditions and inspect
#: modules NumPy; the TUI reads ``engine.debugger.feeds`` (its ``--input`` forms) before its first
#: frame, long before it runs an op, and must not pay for them.
_WHERE = {"Debugger": "debugger", "DebuggerError": "debugger", "Condition": "conditions",
          "ConditionError": "conditions", "parse_condition": "conditions", "FeedError": "feeds",
          "parse_input_spec": "feeds", "BlobStats": "inspect", "InspectError": "inspect", "parse_index": "inspect",
          "Breakpoint": "records", "FrameInfo": "records", "OpExecuted": "records", "OpRecord": "records",
          "ProgramCounter": "records", "Stopped": "records", "Watchpoint": "records"}

__all__ = list(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(import_module(f"engine.debugger.{_WHERE[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'engine.debugger' has no attribute {name!r}")
