"""The one exception tree of the engine.

Every error a user can see derives from :class:`NetvizError` and reads as one line that
names the file, net, op or blob concerned; the CLI prints ``str(err)`` and exits 2, the TUI
shows it as a notification.  ``docs/errors.md`` lists every class with cause and fix.

Each class is ALSO the built-in exception Caffe2 raises in the same place, so a ported script's
``except RuntimeError`` (a failing op, a gradient version mismatch, a missing blob) or
``except ValueError`` (an orphan StopGradient) still catches it; net-builder misuse that Caffe2
``assert``s is an ``AssertionError``.
"""
from __future__ import annotations


class NetvizError(Exception):
    """Root of every error netviz reports to a user."""


class ModelError(NetvizError, RuntimeError):
    """A model file cannot be read or written (missing, not a NetDef, corrupt, bad text)."""


class GraphError(NetvizError, AssertionError):
    """A query on the graph model names something the net does not have."""


class BlobNotFoundError(GraphError, KeyError, RuntimeError):
    """A blob name no op reads or writes (Caffe2: RuntimeError "Can't find blob")."""

    def __str__(self) -> str:  # NOTE: KeyError would quote the message; keep it one plain line.
        return Exception.__str__(self)


class GradientError(NetvizError, RuntimeError, ValueError):
    """The backward pass cannot be generated (no maker, bad versions, mixed sparse/dense)."""


class ShapeError(NetvizError, RuntimeError):
    """Shape or dtype inference found inputs an op cannot accept."""


class ExecutionError(NetvizError, RuntimeError):
    """An op failed while running; the workspace keeps every blob it had before the op."""


class UnknownOpError(ExecutionError):
    """No kernel (or gradient maker, or shape rule) is registered for an op type."""


class SchemaError(ExecutionError):
    """An op fails its Caffe2 schema (input/output counts, in-place pairs, required arguments):
    Caffe2 refuses to create it ("did not pass schema checking")."""


class IllegalGraphTransformError(NetvizError, ValueError):
    """A graph transform would change the meaning of the net."""


class OnnxExportError(NetvizError):
    """The net cannot become a faithful ONNX model (one line naming every op that stops it), or the
    asked-for opset is one the installed onnx / ONNX Runtime cannot take."""
