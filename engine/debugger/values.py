"""Values a user types: for inject, skip-op and set — parsed safely, fitted to the blob they replace.

``parse_value`` reads::

    nan · inf · -inf · 0.5 · 3               a scalar (filled to the blob's shape)
    [1, 2, nan] · [[1, 2], [3, inf]]         a NumPy-style literal (nan/inf allowed)
    zeros(2,3) · ones(2,3) · randn(2,3)      an array of that shape; zeros() = the blob's shape
    full((2,3), 7.5) · full((), 7.5)         that shape (or the blob's) filled with a value
    x.npy                                    a saved array (no pickles)

and :func:`fit_value` keeps the blob's dtype and shape: a scalar fills the shape, an array of
another shape is refused unless the caller says the shape may change (the TUI asks), a NaN or
an Inf for an integer blob is refused.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import NetvizError


class BadValueError(NetvizError):
    """A typed value that cannot be read or does not fit the blob."""


class ShapeMismatch(BadValueError):
    """The value has another shape than the blob (the UI may ask whether to change it)."""


_CALL = re.compile(r"^(zeros|ones|randn|rand|full)\s*\((.*)\)$", re.S)
_SPECIAL = {"nan": "float('nan')", "inf": "float('inf')"}


def _literal(text: str) -> Any:
    """``ast.literal_eval`` that also reads ``nan`` / ``inf`` (as NumPy prints them)."""
    safe = re.sub(r"\b(nan|inf)\b", lambda m: f"__{m.group(1)}__", text.strip())
    tree = ast.parse(safe, mode="eval")

    def conv(node: ast.AST) -> Any:
        if isinstance(node, ast.Name) and node.id in ("__nan__", "__inf__"):
            return float(node.id.strip("_"))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = conv(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, (ast.List, ast.Tuple)):
            return [conv(e) for e in node.elts]
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, bool, complex)):
            return node.value
        raise ValueError(f"{ast.unparse(node)!r} is not a number")
    return conv(tree.body)


def _shape(text: str, default: tuple[int, ...] | None) -> tuple[int, ...]:
    text = text.strip().strip("()[]")
    if not text:
        if default is None:
            raise ValueError("give a shape, e.g. zeros(2,3): the blob's shape is not known")
        return tuple(default)
    dims = [d for d in re.split(r"[,x\s]+", text) if d]
    if not all(d.isdigit() for d in dims):
        raise ValueError(f"bad shape {text!r}")
    return tuple(int(d) for d in dims)


def parse_value(text: str, *, shape: tuple[int, ...] | None = None, dtype: Any = None,
                seed: int = 0, name: str = "value") -> np.ndarray:
    """Read `text` (see the module doc) into an array; `shape`/`dtype` are the blob's when known.

    Raises
    ------
    BadValueError
        One line naming the blob and what could not be read.
    """
    text = text.strip()
    dt = np.dtype(dtype) if dtype is not None else np.dtype(np.float32)
    try:
        if text.endswith(".npy"):
            path = Path(text).expanduser()
            try:
                return np.load(path, allow_pickle=False)
            except (OSError, ValueError) as e:
                raise ValueError(f"cannot read {path}: {e}") from None
        m = _CALL.match(text)
        if m:
            fn, body = m.groups()
            if fn == "full":
                dims, _, fill = body.rpartition(",")
                return np.full(_shape(dims, shape), _literal(fill), dtype=dt)
            dims = _shape(body, shape)
            if fn in ("zeros", "ones"):
                return (np.zeros if fn == "zeros" else np.ones)(dims, dtype=dt)
            rng = np.random.default_rng(seed)
            made = rng.standard_normal(dims) if fn == "randn" else rng.random(dims)
            return made.astype(dt if dt.kind in "fc" else np.float32)
        return np.asarray(_literal(text))
    except (ValueError, SyntaxError, TypeError) as e:
        raise BadValueError(f"{name}: cannot read {text!r}: {e} (try nan, inf, 0.5, [1, 2], zeros(), "
                          "randn(2,3), x.npy)") from None


def fit_value(value: np.ndarray, *, name: str, shape: tuple[int, ...] | None, dtype: Any,
              reshape: bool = False, of_net: bool = False) -> np.ndarray:
    """`value` in the blob's dtype and shape: a scalar fills the shape; another shape needs `reshape`.
    `of_net`: `name` is a blob the net's ops read or write, so a scalar for it when its shape is not
    known (an output not written yet, not inferred) is refused: it would not be the net's shape.

    Raises
    ------
    ShapeMismatch
        The array's shape differs from the blob's and `reshape` is False.
    BadValueError
        NaN or Inf for an integer/bool blob, or a value that does not convert.
    """
    arr = np.asarray(value)
    if shape is None and of_net and arr.ndim == 0:
        raise BadValueError(f"inject {name}: its shape is not known before it runs (not inferred); give the "
                            "value in that shape, e.g. full((2,3), 0.5) or zeros(2,3)")
    if shape is not None and arr.shape != tuple(shape):
        if arr.ndim == 0 or arr.size == 1 and not reshape:
            arr = np.full(tuple(shape), arr.reshape(()), dtype=arr.dtype)
        elif not reshape:
            raise ShapeMismatch(f"inject {name}: value is {_dims(arr.shape)} but the blob is {_dims(shape)} "
                                "(give a value of that shape, or confirm the new shape)")
    if dtype is None:
        return arr.astype(np.float32) if arr.dtype == np.float64 else arr
    dt = np.dtype(dtype)
    if dt.kind in "iub" and arr.dtype.kind in "fc" and not np.all(np.isfinite(arr)):
        raise BadValueError(f"inject {name}: NaN/Inf cannot be stored in a {dt} blob")
    try:
        return arr.astype(dt, copy=False)
    except (TypeError, ValueError) as e:
        raise BadValueError(f"inject {name}: cannot convert {arr.dtype} to the blob's {dt}: {e}") from None


def _dims(shape: tuple[int, ...]) -> str:
    return f"shape {list(shape)}" if shape else "a scalar"
