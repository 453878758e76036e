"""Breakpoint conditions: a tiny, safe language over blob statistics — never ``eval``.

Grammar::

    expr    := term ("or" term)*
    term    := factor ("and" factor)*
    factor  := "not" factor | "(" expr ")" | builtin | compare
    builtin := "has_inf_or_nan" [ "(" [ "exclude" "=" STRING ] ")" ]
    compare := STAT "(" BLOB ")" OP NUMBER
    STAT    := max_abs | min | max | mean | std | sum | norm | nan_count | inf_count | zero_count | size
    OP      := > | >= | < | <= | == | !=

Examples: ``has_inf_or_nan``, ``has_inf_or_nan(exclude="^label")``, ``max_abs(fc1) > 1e3``,
``mean(gpu_0/conv1) < 0 and not has_inf_or_nan``.  A condition is evaluated on the blobs an op
just wrote (``written``) and the workspace (``lookup``); a comparison on a blob the op did not
write is False, so ``max_abs(x) > 1e3`` fires right after the op that makes it so.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.errors import NetvizError


class ConditionError(NetvizError):
    """A breakpoint condition that does not parse."""


def _finite_stat(f: Callable[[np.ndarray], Any]) -> Callable[[np.ndarray], float]:
    return lambda a: float(f(a)) if a.size else 0.0


STATS: dict[str, Callable[[np.ndarray], float]] = {
    "max_abs": _finite_stat(lambda a: np.max(np.abs(a))), "min": _finite_stat(np.min),
    "max": _finite_stat(np.max), "mean": _finite_stat(np.mean), "std": _finite_stat(np.std),
    "sum": _finite_stat(np.sum), "norm": _finite_stat(np.linalg.norm),
    "nan_count": lambda a: float(np.count_nonzero(np.isnan(a))) if a.dtype.kind in "fc" else 0.0,
    "inf_count": lambda a: float(np.count_nonzero(np.isinf(a))) if a.dtype.kind in "fc" else 0.0,
    "zero_count": lambda a: float(a.size - np.count_nonzero(a)), "size": lambda a: float(a.size),
}
COMPARE: dict[str, Callable[[float, float], bool]] = {
    ">": float.__gt__, ">=": float.__ge__, "<": float.__lt__, "<=": float.__le__,
    "==": float.__eq__, "!=": float.__ne__,
}
_TOKEN = re.compile(r'\s*(?:(?P<num>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)|(?P<str>"[^"]*"|\'[^\']*\')'
                    r"|(?P<op>>=|<=|==|!=|[<>()=])|(?P<word>[A-Za-z_][A-Za-z0-9_]*))")


def _as_array(v: Any) -> np.ndarray | None:
    if not hasattr(v, "shape") or getattr(v, "dtype", None) is None or v.dtype == object:
        return None
    from engine.device import to_host
    return np.asarray(to_host(v))


@dataclass(frozen=True, slots=True)
class Condition:
    """A parsed condition; call it with the blobs an op just wrote."""

    text: str
    fn: Callable[[Mapping[str, Any]], bool]

    def __call__(self, written: Mapping[str, Any]) -> bool:
        return self.fn(written)

    def __str__(self) -> str:
        return self.text


def has_inf_or_nan(written: Mapping[str, Any], exclude: str | None = None) -> bool:
    """True when any float blob in `written` (minus names matching `exclude`) holds NaN or Inf."""
    pattern = re.compile(exclude) if exclude else None
    for name, v in written.items():
        if pattern is not None and pattern.search(name):
            continue
        a = _as_array(v)
        if a is not None and a.dtype.kind in "fc" and not np.all(np.isfinite(a)):
            return True
    return False


class _Parser:
    def __init__(self, text: str) -> None:
        self.text, self.pos = text, 0

    def error(self, what: str) -> ConditionError:
        return ConditionError(f"condition {self.text!r}: {what} at column {self.pos + 1}")

    def peek(self) -> tuple[str, str] | None:
        m = _TOKEN.match(self.text, self.pos)
        if not m or m.end() == self.pos:
            return None
        kind = m.lastgroup or ""
        return kind, m.group(kind)

    def take(self, expected: str | None = None) -> tuple[str, str]:
        m = _TOKEN.match(self.text, self.pos)
        if not m or m.end() == self.pos:
            raise self.error("unexpected text" if self.text[self.pos:].strip() else "unexpected end")
        kind = m.lastgroup or ""
        if expected is not None and m.group(kind) != expected:
            raise self.error(f"expected {expected!r}, found {m.group(kind)!r}")
        self.pos = m.end()
        return kind, m.group(kind)

    def blob(self) -> str:
        end = self.text.find(")", self.pos)
        if end < 0:
            raise self.error("missing ')'")
        name = self.text[self.pos:end].strip()
        if not name:
            raise self.error("missing blob name")
        self.pos = end
        return name

    def parse(self) -> Callable[[Mapping[str, Any]], bool]:
        fn = self.expr()
        if self.text[self.pos:].strip():
            raise self.error("unexpected text")
        return fn

    def expr(self) -> Callable[[Mapping[str, Any]], bool]:
        parts = [self.term()]
        while self.peek() == ("word", "or"):
            self.take()
            parts.append(self.term())
        return parts[0] if len(parts) == 1 else (lambda w: any(p(w) for p in parts))

    def term(self) -> Callable[[Mapping[str, Any]], bool]:
        parts = [self.factor()]
        while self.peek() == ("word", "and"):
            self.take()
            parts.append(self.factor())
        return parts[0] if len(parts) == 1 else (lambda w: all(p(w) for p in parts))

    def factor(self) -> Callable[[Mapping[str, Any]], bool]:
        tok = self.peek()
        if tok == ("word", "not"):
            self.take()
            inner = self.factor()
            return lambda w: not inner(w)
        if tok == ("op", "("):
            self.take()
            inner = self.expr()
            self.take(")")
            return inner
        if tok == ("word", "has_inf_or_nan"):
            return self.builtin()
        if tok is not None and tok[0] == "word" and tok[1] in STATS:
            return self.compare()
        raise self.error(f"expected has_inf_or_nan or one of {', '.join(STATS)}")

    def builtin(self) -> Callable[[Mapping[str, Any]], bool]:
        self.take()
        exclude = None
        if self.peek() == ("op", "("):
            self.take()
            if self.peek() == ("word", "exclude"):
                self.take()
                self.take("=")
                kind, value = self.take()
                if kind != "str":
                    raise self.error("exclude takes a quoted regex")
                exclude = value[1:-1]
                try:
                    re.compile(exclude)
                except re.error as e:
                    raise self.error(f"bad regex: {e}") from None
            self.take(")")
        return lambda w: has_inf_or_nan(w, exclude)

    def compare(self) -> Callable[[Mapping[str, Any]], bool]:
        _, stat = self.take()
        self.take("(")
        blob = self.blob()
        self.take(")")
        kind, op = self.take()
        if kind != "op" or op not in COMPARE:
            raise self.error(f"expected one of {' '.join(COMPARE)}")
        kind, num = self.take()
        if kind != "num":
            raise self.error("expected a number")
        f, cmp, threshold = STATS[stat], COMPARE[op], float(num)

        def check(w: Mapping[str, Any]) -> bool:
            a = _as_array(w[blob]) if blob in w else None
            return a is not None and cmp(f(a), threshold)
        return check


def parse_condition(text: str) -> Condition:
    """Parse `text` into a :class:`Condition`.

    Raises
    ------
    ConditionError
        One line naming the condition, the problem and the column.

    Examples
    --------
    >>> c = parse_condition("max_abs(y) > 2 or has_inf_or_nan")
    >>> c({"y": np.array([1.0, -3.0])}), c({"y": np.array([1.0])})
    (True, False)
    """
    return Condition(text.strip(), _Parser(text.strip()).parse())
