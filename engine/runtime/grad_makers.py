"""Gradient makers as Caffe2 writes them in C++, and the helpers for their rule families.

A maker is ``maker(op, g_output) -> (grad_ops, g_input)``.  Caffe2's C++ makers (subclasses
of ``GradientMakerBase``) are written here as small functions of a :class:`MakerContext`
(``g.I(0)``, ``g.GO(0)``, ``g.GI(0)`` …) wrapped by :func:`cc_maker`, which then does what the
C++ ``GetGradientForOp`` does: set ``is_gradient_op``, copy the forward op's device option,
engine and arguments (each unless the maker opts out), and check ``g_input``.

Rule families are one-liners in the op family modules::

    gradient("Relu", "Sigmoid", "Tanh")(from_output())          # {T}Gradient: [O0, GO0] -> [GI0]
    gradient("MaxPool")(simple("{T}Gradient", "I0 O0 GO0", "GI0"))
    no_gradient("ConstantFill", "GaussianFill")                  # NO_GRADIENT
    should_not_do_gradient("Shape", "ArgMax")                    # SHOULD_NOT_DO_GRADIENT
    gradient_not_implemented_yet("Ceil", "Floor")                # GRADIENT_NOT_IMPLEMENTED_YET
"""
from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from engine.errors import GradientError
from engine.model.opdef import arg_value, make_argument
from engine.catalogue.registry import GRADIENTS, gradient
from proto import caffe2_pb2

GradientSlice = namedtuple("GradientSlice", ["indices", "values"])
GradientSlice.__doc__ = "A sparse gradient: the rows ``indices`` of the blob get ``values``."

Grad = Any  # None | str | GradientSlice


class GradientMakerError(GradientError):
    """A gradient maker refused an op; ``caffe2_message`` is Caffe2's own text."""

    def __init__(self, message: str, caffe2_message: str | None = None) -> None:
        super().__init__(message)
        self.caffe2_message = caffe2_message or message


class NoGradientMakerError(GradientMakerError):
    """No maker is registered for the op type (Caffe2: ``Gradient maker … not implemented.``)."""


class ShouldNotDoGradientError(GradientMakerError):
    """``SHOULD_NOT_DO_GRADIENT``: the op must never be differentiated."""


class GradientNotImplementedYetError(GradientMakerError):
    """``GRADIENT_NOT_IMPLEMENTED_YET``: the op should have a gradient but has none yet."""


def _op(op_type: str, inputs: Iterable[str], outputs: Iterable[str],
        args: Iterable[tuple[str, Any]] = ()) -> caffe2_pb2.OperatorDef:
    """C++ ``CreateOperatorDef``: name set to "", no device scope, maker args first."""
    op = caffe2_pb2.OperatorDef()  # NOTE: field by field: 40 % faster than keyword arguments
    op.type, op.name = op_type, ""
    op.input.extend(inputs)
    op.output.extend(outputs)
    if args:
        op.arg.extend(make_argument(k, v) for k, v in args)
    return op


class MakerContext:
    """``GradientMakerBase`` state: the forward op, its output gradients, the input gradients set."""

    __slots__ = ("op", "g_output", "g_input")

    def __init__(self, op: caffe2_pb2.OperatorDef, g_output: Sequence[Grad]) -> None:
        self.op = op
        self.g_output = g_output
        self.g_input: list[Any] = [None] * len(op.input)

    @property
    def type(self) -> str:
        return self.op.type

    def I(self, k: int) -> str:  # noqa: E743 - Caffe2's name
        return _at(self.op.input, k, "input")

    def O(self, k: int) -> str:  # noqa: E743
        return _at(self.op.output, k, "output")

    def GI(self, k: int) -> str:
        if isinstance(self.g_input[k], list):
            raise GradientMakerError(f"Input {self.I(k)} already set to sparse.")
        self.g_input[k] = name = self.I(k) + "_grad"
        return name

    def GI_I(self, k: int) -> str:
        return self._sparse_part(k, 0, "_grad_indices")

    def GI_V(self, k: int) -> str:
        return self._sparse_part(k, 1, "_grad_values")

    def _sparse_part(self, k: int, part: int, suffix: str) -> str:
        if isinstance(self.g_input[k], str):
            raise GradientMakerError(f"Input {self.I(k)} already set to dense.")
        parts = self.g_input[k] if self.g_input[k] is not None else ["", ""]
        parts[part] = name = self.I(k) + suffix
        self.g_input[k] = parts
        return name

    def GO(self, k: int) -> str:
        g = self.g_output[k]
        if isinstance(g, str) and g:
            return g
        what = "is sparse (expected dense)." if isinstance(g, tuple) else "is not provided!"
        raise GradientMakerError(f"Gradient of output {self.O(k)} {what}")

    def GO_I(self, k: int) -> str:
        return self._go_sparse(k)[0]

    def GO_V(self, k: int) -> str:
        return self._go_sparse(k)[1]

    def _go_sparse(self, k: int) -> GradientSlice:
        g = self.g_output[k]
        if isinstance(g, tuple):
            return g
        what = "is dense (expected sparse)." if g else "is not provided!"
        raise GradientMakerError(f"Gradient of output {self.O(k)} {what}")

    def has_go(self, k: int) -> bool:
        """``!GradOut(k).IsEmpty()``."""
        return bool(self.g_output[k])

    def is_sparse_go(self, k: int) -> bool:
        return isinstance(self.g_output[k], tuple)

    def set_dense(self, k: int, name: str) -> None:
        self.g_input[k] = name

    def set_sparse(self, k: int, indices: str, values: str) -> None:
        self.g_input[k] = [indices, values]

    def arg(self, name: str, default: Any = None) -> Any:
        return arg_value(self.op, name, default)

    def op_(self, op_type: str, inputs: Iterable[str], outputs: Iterable[str],
            **args: Any) -> caffe2_pb2.OperatorDef:
        return _op(op_type, inputs, outputs, args.items())


def _at(names: Sequence[str], k: int, what: str) -> str:
    if 0 <= k < len(names):
        return names[k]
    raise GradientMakerError(f"gradient maker reads {what} {k} of an op with {len(names)} {what}s")


class CcMaker:
    """A C++-style maker: ``fn(ctx) -> list of ops`` plus the C++ ``GetGradientForOp`` rules."""

    __slots__ = ("fn", "copy_args", "copy_device", "copy_engine", "input_kinds", "fast")

    def __init__(self, fn: Callable[[MakerContext], list[caffe2_pb2.OperatorDef] | None],
                 copy_args: bool = True, copy_device: bool = True, copy_engine: bool = True) -> None:
        self.fn, self.copy_args = fn, copy_args
        self.copy_device, self.copy_engine = copy_device, copy_engine
        self.input_kinds: tuple[str, ...] | None = None  # simple(): "I"/"O"/"GO" per input of its one op
        self.fast: Callable[..., Any] | None = None  # simple(): see _fast_simple

    def __call__(self, op: caffe2_pb2.OperatorDef,
                 g_output: Sequence[Grad]) -> tuple[list[caffe2_pb2.OperatorDef], list[Grad]]:
        ctx = MakerContext(op, g_output)
        ops = self.fn(ctx) or []
        device = op.device_option if self.copy_device and op.HasField("device_option") else None
        engine = op.engine if self.copy_engine and op.HasField("engine") else None
        args = op.arg if self.copy_args else None
        for g in ops:
            g.is_gradient_op = True
            if device is not None:
                g.device_option.CopyFrom(device)
            if engine is not None:
                g.engine = engine
            if args:
                g.arg.extend(args)  # NOTE: appended after the maker's own args, as in C++.
        return ops, [_finish(op, k, g) for k, g in enumerate(ctx.g_input)]


def _finish(op: caffe2_pb2.OperatorDef, k: int, g: Any) -> Grad:
    if not isinstance(g, list):
        return g
    if not (g[0] and g[1]):
        raise GradientMakerError("For sparse gradient, one should set both indices and values. "
                                 f"Currently we have: ({g[0]}, {g[1]}).")
    return GradientSlice(g[0], g[1])


def cc_maker(fn: Callable[[MakerContext], Any] | None = None, *, copy_args: bool = True,
             copy_device: bool = True, copy_engine: bool = True) -> Any:
    """Wrap ``fn(ctx) -> [ops]`` as a C++-style maker; use bare or with copy flags."""
    if fn is None:
        return lambda f: CcMaker(f, copy_args, copy_device, copy_engine)
    return CcMaker(fn, copy_args, copy_device, copy_engine)


_REFS = {"I": MakerContext.I, "O": MakerContext.O, "GO": MakerContext.GO, "GI": MakerContext.GI}


def _parse(tokens: str) -> list[tuple[Callable[[MakerContext, int], str], int]]:
    return [(_REFS[t.rstrip("0123456789")], int(t.lstrip("GIO"))) for t in tokens.split()]


def simple(grad_type: str, inputs: str, outputs: str, **args: Any) -> CcMaker:
    """One gradient op ``grad_type`` (``{T}`` = forward type) from tokens ``I0 O0 GO0`` → ``GI0``.

    Inputs are resolved before outputs, so ``GO`` errors come first, as in the C++ makers.
    """
    ins, outs, arg_items = _parse(inputs), _parse(outputs), tuple(args.items())
    templated = "{T}" in grad_type

    def make(g: MakerContext) -> list[caffe2_pb2.OperatorDef]:
        i = [f(g, k) for f, k in ins]
        t = grad_type.replace("{T}", g.op.type) if templated else grad_type
        return [_op(t, i, [f(g, k) for f, k in outs], arg_items)]
    maker = CcMaker(make)
    maker.input_kinds = tuple(t.rstrip("0123456789") for t in inputs.split())
    if "GI" not in maker.input_kinds:
        maker.fast = _fast_simple(grad_type, inputs, outputs, arg_items)
    return maker


_CODES = {"I": 0, "O": 1, "GO": 2, "GI": 3}


def _fast_simple(grad_type: str, inputs: str, outputs: str,
                 arg_items: tuple[tuple[str, Any], ...]) -> Callable[..., Any]:
    """``fast(op, g_output) -> (grad_ops, g_input, [(inputs, outputs)])`` of a :func:`simple` maker,
    built in one constructor call, or None where the maker would raise (then take the full path).

    The same op, byte for byte, as ``CcMaker(make)(op, g_output)``; the name lists come back too,
    so that the IR need not read them out of the proto again.
    """
    ins = [(_CODES[t.rstrip("0123456789")], int(t.lstrip("GIO"))) for t in inputs.split()]
    outs = [(_CODES[t.rstrip("0123456789")], int(t.lstrip("GIO"))) for t in outputs.split()]
    templated = "{T}" in grad_type
    new_op = caffe2_pb2.OperatorDef
    tokens, n_in = ins + outs, len(ins)

    def fast(op: caffe2_pb2.OperatorDef, g_output: Sequence[Grad], fin: Sequence[str] | None = None,
             fout: Sequence[str] | None = None) -> Any:
        """`fin`, `fout`: ``op.input``, ``op.output`` (a caller that holds them as tuples saves the reads)."""
        if fin is None:
            fin, fout = op.input, op.output
        g_input: list[Any] = [None] * len(fin)
        names = []
        try:
            for code, k in tokens:  # inputs, then outputs: the full path's order
                if code == 0:
                    names.append(fin[k])
                elif code == 1:
                    names.append(fout[k])
                elif code == 2:
                    g = g_output[k]
                    if type(g) is not str or not g:
                        return None
                    names.append(g)
                else:
                    g_input[k] = name = fin[k] + "_grad"
                    names.append(name)
        except IndexError:
            return None
        i, o = names[:n_in], names[n_in:]
        t = grad_type.replace("{T}", op.type) if templated else grad_type
        g = new_op()
        g.type, g.name, g.is_gradient_op = t, "", True
        g.input.extend(i)
        g.output.extend(o)
        if arg_items:
            g.arg.extend(make_argument(k, v) for k, v in arg_items)
        if op.HasField("device_option"):
            g.device_option.CopyFrom(op.device_option)
        if op.HasField("engine"):
            g.engine = op.engine
        if op.arg:
            g.arg.extend(op.arg)  # NOTE: appended after the maker's own args, as in C++.
        return [g], g_input, [(i, o)]
    return fast


def from_output(grad_type: str = "{T}Gradient") -> CcMaker:
    """``<grad_type>: [O0, GO0] -> [GI0]``, args copied (Relu, Sigmoid, Tanh, Softmax…)."""
    return simple(grad_type, "O0 GO0", "GI0")


def _pass_through(g: MakerContext) -> None:
    for k in range(len(g.op.input)):
        g.set_dense(k, g.GO(0))


pass_through = CcMaker(_pass_through)  # no op; every input's gradient is GO0 itself (Sum, Alias)


def _no_gradient(g: MakerContext) -> None:
    return None


def _throw(cls: type[GradientMakerError], text: str) -> CcMaker:
    def make(g: MakerContext) -> None:
        raise cls(text.format(T=g.type))
    return CcMaker(make)


NO_GRADIENT = CcMaker(_no_gradient)
SHOULD_NOT_DO_GRADIENT = _throw(ShouldNotDoGradientError, "One should not call gradient for operator {T}.")
NOT_IMPLEMENTED_YET = _throw(GradientNotImplementedYetError,
                             "Operator {T} should have a gradient but is not implemented yet.")


def no_gradient(*op_types: str) -> None:
    """``NO_GRADIENT``: no ops, no input gradients; the flow stops silently."""
    gradient(*op_types)(NO_GRADIENT)


def should_not_do_gradient(*op_types: str) -> None:
    """``SHOULD_NOT_DO_GRADIENT``: error "One should not call gradient for operator T." if reached."""
    gradient(*op_types)(SHOULD_NOT_DO_GRADIENT)


def gradient_not_implemented_yet(*op_types: str) -> None:
    """``GRADIENT_NOT_IMPLEMENTED_YET``: error "Operator T should have a gradient but …" if reached."""
    gradient(*op_types)(NOT_IMPLEMENTED_YET)


def is_cc_maker(maker: Any) -> bool:
    """True for C++-style makers (tried before Python registrations, like Caffe2's C++ registry)."""
    return isinstance(maker, CcMaker)


#: Caffe2's three markers by the catalogue's status name.
MARKERS = {"NO_GRADIENT": NO_GRADIENT, "SHOULD_NOT_DO_GRADIENT": SHOULD_NOT_DO_GRADIENT,
           "GRADIENT_NOT_IMPLEMENTED_YET": NOT_IMPLEMENTED_YET}


def register_markers(statuses: Iterable[tuple[str, str]]) -> list[str]:
    """Register Caffe2's marker for each ``(op_type, status)`` whose status is a marker.

    Caffe2 declares a marker for 277 forward ops (``NO_GRADIENT(Iter)``, …); netviz takes the
    list from the catalogue (measured on Caffe2), so none is forgotten. A maker a family module
    registered first is kept. NO_GRADIENT ops are what Caffe2 "silently skips": a reader such as
    ``TensorProtosDBInput`` feeding a training net gets no gradient ops and no error.
    Returns the op types registered here.
    """
    todo = [(t, s) for t, s in statuses if s in MARKERS and t not in GRADIENTS]
    for t, s in todo:
        gradient(t)(MARKERS[s])
    return [t for t, _ in todo]
