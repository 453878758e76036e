"""Breakpoint conditions: a tiny, safe language over blobs — never ``eval``.

Grammar::

    expr     := term ("or" term)*
    term     := factor ("and" factor)*
    factor   := "not" factor | "(" expr ")" | nan_test | operand CMP operand
    nan_test := "has_inf_or_nan" [ "(" [ BLOB | "any" ] [ "," "exclude" "=" STRING ] ")" ]
    operand  := atom (("*" | "/") atom)*
    atom     := NUMBER | "step" | STAT "(" BLOB ")" | BLOB
    STAT     := max_abs | min | max | mean | std | sum | norm | nan_count | inf_count | zero_count | size
    CMP      := > | >= | < | <= | == | !=

Examples: ``loss > 10``, ``max_abs(x) > 1e3``, ``has_inf_or_nan(any)``, ``step >= 3``,
``norm(fc_w_grad) / norm(fc_w) > 0.1`` (``*`` and ``/`` need a space or a parenthesis before them:
blob names may hold ``/``),
``has_inf_or_nan(exclude="^label")``, ``mean(gpu_0/conv1) < 0 and not has_inf_or_nan``.

What a condition sees (:class:`Env`): the blobs the op just wrote, the whole workspace, and
``step`` (ops run since the start).  A blob named in a condition is looked up in the workspace,
so a per-op breakpoint may test any blob, not only the op's inputs; ``has_inf_or_nan`` without a
blob (or with ``any``) looks at the blobs just written.  A bare blob compares element-wise and
holds when any element does (``loss > 10`` on a scalar loss is the obvious reading).  A blob that
does not exist yet makes its comparison False.  :attr:`Condition.blobs` names every blob a
condition reads, so a global condition is re-checked only after an op wrote one of them.
"""
from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
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
COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    ">": np.greater, ">=": np.greater_equal, "<": np.less, "<=": np.less_equal,
    "==": np.equal, "!=": np.not_equal,
}
FUNCTIONS = ("has_inf_or_nan", *STATS)
KEYWORDS = frozenset({"and", "or", "not", "step", "any", "exclude"})
EXAMPLES = ("loss > 10", "max_abs(x) > 1e3", "has_inf_or_nan(any)", "step >= 3")
_TOKEN = re.compile(r'\s*(?:(?P<num>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?inf\b|nan\b)'
                    r"|(?P<str>\"[^\"]*\"|'[^']*')|(?P<op>>=|<=|==|!=|[<>()=,*/])"
                    r"|(?P<word>[A-Za-z_][\w/.:\-]*))")


def _as_array(v: Any) -> np.ndarray | None:
    if not hasattr(v, "shape") or getattr(v, "dtype", None) is None or v.dtype == object:
        return None
    from engine.runtime.device import to_host
    return np.asarray(to_host(v))


@dataclass(frozen=True, slots=True)
class Env:
    """What a condition is evaluated on: the blobs just written, the workspace, the op count."""

    written: Mapping[str, Any]
    values: Mapping[str, Any]
    step: int = 0

    def lookup(self, name: str) -> Any:
        if name in self.written:
            return self.written[name]
        return self.values[name] if name in self.values else None


@dataclass(frozen=True, slots=True)
class Condition:
    """A parsed condition; call it with the blobs an op just wrote (and the workspace, the step)."""

    text: str
    fn: Callable[[Env], bool]
    blobs: frozenset[str] = field(default_factory=frozenset)
    every_op: bool = False   # reads `step` or "any written blob": re-checked after every op
    shown: Callable[[Env], Any] | None = None  # the first compared value (what a query prints)

    def __call__(self, written: Mapping[str, Any], values: Mapping[str, Any] | None = None, step: int = 0) -> bool:
        return bool(self.fn(Env(written, written if values is None else values, step)))

    def value(self, written: Mapping[str, Any], values: Mapping[str, Any] | None = None, step: int = 0) -> Any:
        """The value the condition compares first (``max_abs(x)`` of ``max_abs(x) > 1e3``); None without one."""
        return None if self.shown is None else self.shown(Env(written, written if values is None else values, step))

    def triggered_by(self, written: Mapping[str, Any]) -> bool:
        """Whether an op that wrote `written` can have changed the condition's answer."""
        return self.every_op or any(b in written for b in self.blobs)

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


Operand = Callable[[Env], Any]


class _Parser:
    def __init__(self, text: str) -> None:
        self.text, self.pos = text, 0
        self.blobs: set[str] = set()
        self.every_op = False
        self.shown: Operand | None = None

    def error(self, what: str) -> ConditionError:
        return ConditionError(f"condition {self.text!r}: {what} at column {self.pos + 1} "
                              f"(e.g. {' · '.join(EXAMPLES)})")

    def peek(self) -> tuple[str, str] | None:
        m = _TOKEN.match(self.text, self.pos)
        if not m or m.end() == self.pos:
            return None
        kind = m.lastgroup or ""
        return kind, m.group(kind)

    def take(self, expected: str | None = None) -> tuple[str, str]:
        m = _TOKEN.match(self.text, self.pos)
        if not m or m.end() == self.pos:
            rest = self.text[self.pos:].strip()
            raise self.error(f"cannot read {rest[:12]!r}" if rest else "unexpected end")
        kind = m.lastgroup or ""
        if expected is not None and m.group(kind) != expected:
            raise self.error(f"expected {expected!r}, found {m.group(kind)!r}")
        self.pos = m.end()
        return kind, m.group(kind)

    def blob_arg(self) -> str:
        """The text up to the closing parenthesis: blob names may hold any character but ``)``."""
        end = self.text.find(")", self.pos)
        comma = self.text.find(",", self.pos)
        end = comma if 0 <= comma < end else end
        if end < 0:
            raise self.error("missing ')'")
        name = self.text[self.pos:end].strip()
        if not name:
            raise self.error("missing blob name")
        self.pos = end
        return name

    def parse(self) -> Callable[[Env], bool]:
        if not self.text:
            raise self.error("empty condition")
        fn = self.expr()
        if self.text[self.pos:].strip():
            raise self.error(f"unexpected {self.text[self.pos:].strip()[:12]!r}")
        return fn

    def expr(self) -> Callable[[Env], bool]:
        parts = [self.term()]
        while self.peek() == ("word", "or"):
            self.take()
            parts.append(self.term())
        return parts[0] if len(parts) == 1 else (lambda e: any(p(e) for p in parts))

    def term(self) -> Callable[[Env], bool]:
        parts = [self.factor()]
        while self.peek() == ("word", "and"):
            self.take()
            parts.append(self.factor())
        return parts[0] if len(parts) == 1 else (lambda e: all(p(e) for p in parts))

    def factor(self) -> Callable[[Env], bool]:
        tok = self.peek()
        if tok == ("word", "not"):
            self.take()
            inner = self.factor()
            return lambda e: not inner(e)
        if tok == ("op", "("):
            self.take()
            inner = self.expr()
            self.take(")")
            return inner
        if tok == ("word", "has_inf_or_nan"):
            return self.nan_test()
        if tok is None:
            raise self.error("unexpected end" if not self.text[self.pos:].strip() else "cannot read this")
        return self.compare()

    def nan_test(self) -> Callable[[Env], bool]:
        self.take()
        blob, exclude = None, None
        if self.peek() == ("op", "("):
            self.take()
            if self.peek() not in (("op", ")"), ("word", "exclude")):
                blob = self.blob_arg()
                if self.peek() == ("op", ","):
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
        if blob is None or blob == "any":
            self.every_op = True
            return lambda e: has_inf_or_nan(e.written, exclude)
        self.blobs.add(blob)
        return lambda e: (v := e.lookup(blob)) is not None and has_inf_or_nan({blob: v})

    def operand(self) -> Operand:
        left = self.atom()
        while self.peek() in (("op", "*"), ("op", "/")):
            arith = np.multiply if self.take()[1] == "*" else np.divide
            right = self.atom()

            def combined(e: Env, a: Operand = left, b: Operand = right, f: Any = arith) -> Any:
                x, y = a(e), b(e)
                if x is None or y is None:
                    return None
                with np.errstate(divide="ignore", invalid="ignore"):
                    return f(x, y)
            left = combined
        return left

    def atom(self) -> Operand:
        kind, text = self.take()
        if kind == "num":
            value = float(text)
            return lambda e: value
        if kind != "word":
            self.pos -= len(text)  # NOTE: the column is the token's, not the one after it
            raise self.error(f"expected a blob, a number, step or one of {', '.join(STATS)}; found {text!r}")
        if text == "step":
            self.every_op = True
            return lambda e: e.step
        if self.peek() == ("op", "("):
            if text not in STATS:
                near = difflib.get_close_matches(text, FUNCTIONS, n=1)
                hint = f" (did you mean {near[0]}?)" if near else f" (functions: {', '.join(FUNCTIONS)})"
                self.pos -= len(text)
                raise self.error(f"unknown function {text!r}{hint}")
            self.take("(")
            blob = self.blob_arg()
            self.take(")")
            self.blobs.add(blob)
            f = STATS[text]

            def stat(e: Env) -> float | None:
                a = _as_array(e.lookup(blob))
                return None if a is None else f(a)
            return stat
        if text in KEYWORDS:
            raise self.error(f"{text!r} cannot be compared")
        self.blobs.add(text)
        return lambda e: _as_array(e.lookup(text))

    def compare(self) -> Callable[[Env], bool]:
        left = self.operand()
        if self.shown is None:
            self.shown = left
        tok = self.peek()
        if tok is None or tok[0] != "op" or tok[1] not in COMPARE:
            raise self.error(f"expected one of {' '.join(COMPARE)} after the value")
        cmp = COMPARE[self.take()[1]]
        right = self.operand()

        def check(e: Env) -> bool:
            a, b = left(e), right(e)
            if a is None or b is None:
                return False
            try:
                return bool(np.any(cmp(a, b)))
            except (TypeError, ValueError):
                return False
        return check


def parse_condition(text: str) -> Condition:
    """Parse `text` into a :class:`Condition`.

    Raises
    ------
    ConditionError
        One line naming the condition, the problem, the column and examples.

    Examples
    --------
    >>> c = parse_condition("max_abs(y) > 2 or has_inf_or_nan")
    >>> c({"y": np.array([1.0, -3.0])}), c({"y": np.array([1.0])})
    (True, False)
    >>> parse_condition("loss > 10")({}, {"loss": np.float32(11)})
    True
    """
    p = _Parser(text.strip())
    fn = p.parse()
    return Condition(text.strip(), fn, frozenset(p.blobs), p.every_op, p.shown)
