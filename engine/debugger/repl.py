"""Expressions at a stop: NumPy over the blobs as they are now (tfdbg's ``eval``, pudb's shell).

``evaluate(dbg, "np.abs(fc1).max() / (fc1_w.std() + 1e-8)")``: a blob whose name is an identifier
is that name; any other (``gpu_0/conv1``, ``_[mask]_pool5``) is ``b("gpu_0/conv1")`` or
``blobs["gpu_0/conv1"]``.  Values are host NumPy copies of the current frame's workspace (a
subnet's own blobs inside one), fetched only when the expression names them.
"""
from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from engine import device as dev
from engine.errors import NetvizError


class EvalError(NetvizError):
    """An expression at a stop failed: its one line names the expression and the error."""


class BlobScope(Mapping[str, Any]):
    """The blobs of the debugger's current frame by name, as host arrays, fetched on use."""

    def __init__(self, dbg: Any) -> None:
        self._values = dbg.frames[-1].ws.values

    def __getitem__(self, name: str) -> Any:
        if name not in self._values:
            raise KeyError(name)
        v = self._values[name]
        return np.asarray(dev.to_host(v)) if hasattr(v, "shape") else v

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._values))

    def __len__(self) -> int:
        return len(list(self._values))


def namespace(dbg: Any) -> tuple[dict[str, Any], BlobScope]:
    """Globals (``np``, ``math``, ``b``, ``blobs``) and the blob scope an expression sees."""
    blobs = BlobScope(dbg)

    def b(name: str) -> Any:
        """A blob whose name is no identifier: ``b("gpu_0/conv1")``."""
        try:
            return blobs[name]
        except KeyError:
            raise NameError(f"no blob {name!r} at this point") from None
    return {"np": np, "math": math, "b": b, "blobs": blobs}, blobs


def evaluate(dbg: Any, expr: str) -> Any:
    """The value of `expr` with the current blobs (see the module doc).

    Raises
    ------
    EvalError
        A syntax error, an unknown name, or an error while computing it (one line).
    """
    text = expr.strip()
    if not text:
        raise EvalError("eval: an empty expression")
    glob, blobs = namespace(dbg)
    try:
        code = compile(text, "<eval>", "eval")
        return eval(code, glob, blobs)  # noqa: S307 - the user's own expression, as in pudb/gdb
    except SyntaxError as e:
        raise EvalError(f"eval {text!r}: syntax error at column {e.offset}: {e.msg}") from None
    except NameError as e:
        raise EvalError(f"eval {text!r}: {e} (names with / or [ ]: b(\"name\"))") from None
    except Exception as e:  # noqa: BLE001 - any error of the user's expression is one line
        raise EvalError(f"eval {text!r}: {type(e).__name__}: {e}") from None
