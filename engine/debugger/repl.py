"""Expressions at a stop: NumPy over the blobs as they are now (tfdbg's ``eval``, pudb's shell).

``evaluate(dbg, "np.abs(fc1).max() / (fc1_w.std() + 1e-8)")``: a blob whose name is an identifier
is that name; any other (``gpu_0/conv1``, ``_[mask]_pool5``) is ``b("gpu_0/conv1")`` or
``blobs["gpu_0/conv1"]``.  Values are host NumPy copies of the current frame's workspace (a
subnet's own blobs inside one), fetched only when the expression names them.

A blob's name wins over a helper's (a net with a blob ``b`` or ``np`` gets that blob), except
:data:`HELPERS`: ``nv`` is never a blob, so ``nv.b("b")``, ``nv.blobs``, ``nv.np`` and ``nv.math``
always reach the helpers.  A tuple or list result (``acc.mean(), W @ b``) is shown part by part
(:func:`parts_of`) when its parts are not one array.
"""
from __future__ import annotations

import importlib
import math
from collections.abc import Iterator, Mapping
from types import SimpleNamespace
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

    def __init__(self, dbg: Any, direct: bool = False) -> None:
        here = getattr(dbg, "values_here", None)  # NOTE: live or a replay: the pc frame's blobs; an object
        self._values = here() if here is not None else dbg.frames[-1].ws.values  # with frames only reads them
        self._direct = direct  # NOTE: False for the expression's names: there :data:`HELPERS` is never a blob

    def __getitem__(self, name: str) -> Any:
        if name not in self._values or (name == HELPERS and not self._direct):
            raise KeyError(name)
        v = self._values[name]
        return np.asarray(dev.to_host(v)) if hasattr(v, "shape") else v

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._values))

    def __len__(self) -> int:
        return len(list(self._values))


#: the one name no blob shadows in an expression: the helpers' namespace (``nv.b("b")``)
HELPERS = "nv"


def namespace(dbg: Any) -> tuple[dict[str, Any], BlobScope]:
    """Globals (``np``, ``math``, ``b``, ``blobs``, ``nv``, :data:`BUILTINS`) and the blob scope an
    expression sees; the first four are shadowed by blobs of those names, ``nv`` never is."""
    blobs, direct = BlobScope(dbg), BlobScope(dbg, direct=True)

    def b(name: str) -> Any:
        """A blob whose name is no identifier: ``b("gpu_0/conv1")``."""
        try:
            return direct[name]
        except KeyError:
            raise NameError(f"no blob {name!r} at this point") from None
    helpers = {"np": np, "math": math, "b": b, "blobs": direct}
    return {"__builtins__": dict(BUILTINS), **helpers, HELPERS: SimpleNamespace(**helpers)}, blobs


def parts_of(value: Any) -> list[tuple[str, Any]] | None:
    """A tuple or list result whose parts are not one array, as ``(label, part)`` rows (``[0]``,
    ``[1]``); None for a value that is one array (``[fc1, fc2]`` of one shape stacks, as NumPy does).

    >>> [label for label, _ in parts_of((np.float32(1), np.zeros((2, 3))))]
    ['[0]', '[1]']
    >>> parts_of([np.zeros(2), np.ones(2)]) is None
    True
    """
    if not isinstance(value, (tuple, list)):
        return None
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError):  # NOTE: ragged: NumPy refuses to make one array of them
        arr = None
    if arr is not None and arr.dtype != object:
        return None
    return [(f"[{i}]", v) for i, v in enumerate(value)]


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
        raise EvalError(f"eval {text!r}: {e} (names with / or [ ]: b(\"name\"), or nv.b(\"name\") in a net "
                        "with a blob named b)") from None
    except Exception as e:  # noqa: BLE001 - any error of the user's expression is one line
        raise EvalError(f"eval {text!r}: {type(e).__name__}: {e}") from None
