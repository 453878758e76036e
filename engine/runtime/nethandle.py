"""A created net's handle (what ``Workspace.create_net`` returns: ``.run()``, ``.cancel()``) and net
observers, which a workspace reports each run of its nets to.

Below the workspace (which hands them out) and :mod:`engine.runtime.pybind` (which re-exports them as
Caffe2's C extension objects): neither is imported here; the handle only calls its workspace's methods.
"""
from __future__ import annotations

from typing import Any

from engine.errors import ExecutionError
from proto import caffe2_pb2


class Observer:
    """A net observer (``net.AddObserver("TimeObserver" | "RunCountObserver")``): the workspace
    reports every run of the net and how many of its top-level ops ran."""

    KINDS = ("TimeObserver", "RunCountObserver")

    def __init__(self, kind: str) -> None:
        if kind not in self.KINDS:
            raise ExecutionError(f"observer type {kind!r}: netviz has {', '.join(self.KINDS)}")
        self.kind, self.runs, self.op_runs, self.total_ms = kind, 0, 0, 0.0

    def record(self, ms: float, ops: int) -> None:
        self.runs, self.op_runs, self.total_ms = self.runs + 1, self.op_runs + ops, self.total_ms + ms

    def average_time(self) -> float:
        """Milliseconds per net run."""
        return self.total_ms / self.runs if self.runs else 0.0

    def average_time_children(self) -> float:
        """Milliseconds per op run."""
        return self.total_ms / self.op_runs if self.op_runs else 0.0

    def debug_info(self) -> str:
        return (f"This operator runs {self.op_runs} times." if self.kind == "RunCountObserver"
                else f"average time {self.average_time():.3f} ms over {self.runs} runs")


observers: dict[str, list[Observer]] = {}
"""Net name -> its observers (engine.runtime.workspace reports runs of those nets)."""


class NetHandle:
    """A net created in a workspace (``ws.create_net(...)``), runnable by ``.run()``; ``.cancel()``
    (from another thread) closes the queues its ops wait on and makes the run it stops fail."""

    def __init__(self, ws: Any, name: str) -> None:
        self._ws, self.name = ws, name
        self._cancelled = False

    def run(self) -> bool:
        ok = self._ws.run_net(self.name)
        if self._cancelled:
            self._cancelled = False
            raise ExecutionError(f"{self.name}: the net was cancelled while it ran")
        return ok

    def cancel(self) -> None:
        self._cancelled = True
        compiled = self._ws.nets.get(self.name)
        for op in compiled.net.op if compiled is not None else ():
            queue = self._ws.values.get(op.input[0]) if len(op.input) else None
            if hasattr(queue, "close") and hasattr(queue, "cond"):  # a blobs/rebatching queue
                queue.close()

    def Proto(self) -> caffe2_pb2.NetDef:  # noqa: N802 (Caffe2's name)
        return self._ws.nets[self.name].net if hasattr(self._ws.nets[self.name], "net") else caffe2_pb2.NetDef()
