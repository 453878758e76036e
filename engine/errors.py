"""The one exception tree of the engine.

Every error a user can see derives from :class:`NetvizError` and reads as one line that
names the file, net, op or blob concerned; the CLI prints ``str(err)`` and exits 2, the TUI
shows it as a notification.  ``docs/errors.md`` lists every class with cause and fix.
"""
from __future__ import annotations


class NetvizError(Exception):
    """Root of every error netviz reports to a user."""


class ModelError(NetvizError):
    """A model file cannot be read or written (missing, not a NetDef, corrupt, bad text)."""


class GraphError(NetvizError):
    """A query on the graph model names something the net does not have."""


class BlobNotFoundError(GraphError):
    """A blob name no op reads or writes."""


class GradientError(NetvizError):
    """The backward pass cannot be generated (no maker, bad versions, mixed sparse/dense)."""


class ShapeError(NetvizError):
    """Shape or dtype inference found inputs an op cannot accept."""


class ExecutionError(NetvizError):
    """An op failed while running; the workspace keeps every blob it had before the op."""


class UnknownOpError(ExecutionError):
    """No kernel (or gradient maker, or shape rule) is registered for an op type."""


class IllegalGraphTransformError(NetvizError):
    """A graph transform would change the meaning of the net."""
