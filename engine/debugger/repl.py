"""Expressions at a stop: NumPy over the blobs as they are now (tfdbg's ``eval``, pudb's shell).

``evaluate(dbg, "np.abs(fc1).max() / (fc1_w.std() + 1e-8)")``: a blob whose name is an identifier
is that name; any other (``gpu_0/conv1``, ``_[mask]_pool5``) is ``b("gpu_0/conv1")`` or
``blobs["gpu_0/conv1"]``.  Values are host NumPy copies of the current frame's workspace (a
subnet's own blobs inside one), fetched only when the expression names them.
"""
from __future__ import annotations

import importlib
import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from engine.runtime import device as dev
from engine.errors import NetvizError


def _numpy_import(name: str, globals_: Any = None, locals_: Any = None, fromlist: Any = (), level: int = 0) -> Any:
    """``__import__`` for NumPy's own modules only: NumPy's C code imports through the calling
    frame's builtins (``x.max()`` imports ``numpy._core._methods``); any other is refused."""
    if level or (name != "numpy" and not name.startswith("numpy.")):
        raise ImportError(f"no imports in an expression at a stop ({name})")
    module = importlib.import_module(name)
    return module if fromlist else importlib.import_module("numpy")


#: the builtins an expression sees: pure functions of data for NumPy one-liners (``len``, ``max``,
#: ``float``, ``sorted``, ...); no ``open``, ``exec``, ``getattr`` or ``globals``, and imports of
#: NumPy's modules only.  Not a sandbox (``np`` reaches the rest): the expression is the user's
#: own, typed at a stop as in pudb or tfdbg; this keeps what plain names reach to what it needs.
BUILTINS: dict[str, Any] = {f.__name__: f for f in (
    abs, all, any, bool, complex, dict, divmod, enumerate, filter, float, int, isinstance, len, list, map, max,
    min, pow, range, repr, reversed, round, set, slice, sorted, str, sum, tuple, zip)} | {"__import__": _numpy_import}


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
    """Globals (``np``, ``math``, ``b``, ``blobs``, :data:`BUILTINS`) and the blob scope an expression sees."""
    blobs = BlobScope(dbg)

    def b(name: str) -> Any:
        """A blob whose name is no identifier: ``b("gpu_0/conv1")``."""
        try:
            return blobs[name]
        except KeyError:
            raise NameError(f"no blob {name!r} at this point") from None
    return {"__builtins__": dict(BUILTINS), "np": np, "math": math, "b": b, "blobs": blobs}, blobs


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
        code = compile(text, "<eval>", "eval")  # noqa: S307 - the user's own expression at a stop (pudb-style REPL)
        return eval(code, glob, blobs)  # noqa: S307 - the user's own expression at a stop (pudb-style REPL)
    except SyntaxError as e:
        raise EvalError(f"eval {text!r}: syntax error at column {e.offset}: {e.msg}") from None
    except NameError as e:
        raise EvalError(f"eval {text!r}: {e} (names with / or [ ]: b(\"name\"))") from None
    except Exception as e:  # noqa: BLE001 - any error of the user's expression is one line
        raise EvalError(f"eval {text!r}: {type(e).__name__}: {e}") from None
