"""The ``Python`` op: an op whose body is a user's Python function (``core.CreatePythonOperator``,
``Net.Python``), and its gradient ``PythonGradient``.

A function is registered under a token (``register_python_op``) that the op carries as its
``token`` argument, or built where the op runs from a ``(func, args, kwargs)`` builder
(``pickled_builder``).  NOTE: Caffe2 pickles the builder into the op; netviz never unpickles
model data (a model file could carry any code), so the argument holds a key of a builder this
process registered (:func:`register_builder`), and a real pickle from a file is refused.  It is called as
``f(inputs, outputs)`` — or ``f(inputs, outputs, workspace)`` with ``pass_workspace`` — where both
are lists of :class:`TensorCPU`: ``.data`` (the blob's array, writable in place), ``.shape``,
``.reshape(dims)``, ``.feed(array)``, ``.fetch()``.  The gradient function gets the forward
inputs, outputs and output gradients and fills the input gradients (``grad_output_indices`` /
``grad_input_indices`` pick subsets; the maker is in :mod:`engine.runtime.ops.util`).  ``PythonDLPack`` (and its
``PythonDLPackGradient``) calls the same registered functions with :class:`DLPackTensorCPU` wrappers, whose
``.data`` is a DLPack capsule (for ``torch.utils.dlpack.from_dlpack``) and ``.feed`` takes one.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from engine.errors import ExecutionError
from engine.model.opdef import arg_value
from engine.catalogue.registry import kernel, shape
from engine.runtime.shapes import opaque
from proto import caffe2_pb2

WORKSPACE_FACE: Callable[[Any], Any] = lambda ws: ws
"""What a ``pass_workspace`` function gets for the op's workspace: Caffe2's ``C.Workspace`` view of it,
lent by :mod:`engine.runtime.pybind` when it loads (that module sits above the executor, which runs this
family); every way to register a Python op (``engine.caffe2``'s ``Net.Python``, ``C.register_python_op``)
loads it first."""

_FUNCS: dict[str, tuple[Any, bool]] = {}  # token -> (function, pass_workspace); gradients at token + "_gradient"


def register_python_op(func: Any, pass_workspace: bool = False, name: str = "") -> str:
    """Register `func`; returns the token a ``Python`` op names it by (``[name:]func_name[:k]``)."""
    base = (f"{name}:" if name else "") + getattr(func, "__name__", type(func).__name__)
    token, k = base, 1
    while token in _FUNCS:
        token, k = f"{base}:{k}", k + 1
    _FUNCS[token] = (func, pass_workspace)
    return token


_BUILDERS: dict[bytes, tuple[Any, tuple, dict]] = {}  # key -> (func, args, kwargs)
_BUILDER_KEY = b"netviz-python-builder:"


def register_builder(func: Any, args: Any, kwargs: Any) -> bytes:
    """Keep a ``(func, args, kwargs)`` builder in this process; returns the key a Python op carries."""
    key = _BUILDER_KEY + str(len(_BUILDERS)).encode()
    _BUILDERS[key] = (func, tuple(args), dict(kwargs))
    return key


def register_python_gradient_op(token: str, grad_func: Any) -> None:
    _FUNCS[token + "_gradient"] = (grad_func, _FUNCS.get(token, (None, False))[1])


class TensorCPU:
    """A blob as a Python op sees it: reads and writes go to the workspace."""

    def __init__(self, ws: Any, name: str) -> None:
        self._ws, self.name = ws, name

    def _value(self) -> np.ndarray:
        v = self._ws.values.get(self.name)
        if not isinstance(v, np.ndarray):
            v = np.asarray(v) if hasattr(v, "shape") else np.zeros((0,), np.float32)
            self._ws.values[self.name] = v
        return v

    @property
    def data(self) -> np.ndarray:
        """The blob's array itself: in-place writes change the blob.  A read-only one (an init net's
        value viewing its mapped file, engine.model.valueref) is copied into the blob first."""
        v = self._value()
        if not v.flags.writeable:
            v = self._ws.values[self.name] = v.copy()
        return v

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._value().shape)

    _shape = shape

    def reshape(self, dims: Any) -> None:
        """Resize to `dims` (Caffe2's Resize: same element count keeps the data, else new zeros)."""
        v, dims = self._value(), tuple(int(d) for d in dims)
        self._ws.values[self.name] = v.reshape(dims) if v.size == int(np.prod(dims)) else np.zeros(dims, v.dtype)

    _reshape = reshape

    def init(self, dims: Any, caffe_type: int) -> None:
        """Zeros of `dims` and TensorProto type `caffe_type` (not STRING: use ``feed``)."""
        from engine.runtime.blobio import _TYPES
        if caffe_type == caffe2_pb2.TensorProto.STRING:
            raise ExecutionError(f"blob {self.name}: Cannot init tensor of this type. Use `feed` instead.")
        self._ws.values[self.name] = np.zeros(tuple(dims), _TYPES[caffe_type][0])

    def feed(self, arr: Any) -> None:
        if not isinstance(arr, np.ndarray):
            raise ExecutionError(f"blob {self.name}: Unexpected type of argument -- expected numpy array")
        self._ws.values[self.name] = np.array(arr, copy=True)

    def fetch(self) -> np.ndarray:
        return np.array(self._value(), copy=True)


class _Capsule:
    """A bare DLPack capsule as NumPy's ``from_dlpack`` wants it (an object with ``__dlpack__``)."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, **_kw: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # NOTE: kDLCPU: netviz hands Python ops host tensors


class DLPackTensorCPU(TensorCPU):
    """A blob as a ``PythonDLPack`` op sees it (Caffe2's DLPackTensorCPU): ``.data`` is a DLPack capsule
    over the blob's array (``torch.utils.dlpack.from_dlpack`` / ``np.from_dlpack`` read it without a copy),
    ``.feed(capsule)`` copies a DLPack tensor into the blob; ``._shape`` and ``._reshape`` as for TensorCPU."""

    @property
    def data(self) -> Any:  # type: ignore[override]
        v = self._value()
        if not (v.flags.writeable and v.flags.c_contiguous):
            v = self._ws.values[self.name] = np.ascontiguousarray(v).copy()
        return v.__dlpack__()

    def feed(self, arr: Any) -> None:
        if type(arr).__name__ == "PyCapsule":
            arr = _Capsule(arr)
        if not hasattr(arr, "__dlpack__"):
            raise ExecutionError(f"blob {self.name}: feed expects a DLPack capsule, got {type(arr).__name__}")
        self._ws.values[self.name] = np.array(np.from_dlpack(arr), copy=True)


def _function(op: caffe2_pb2.OperatorDef, suffix: str) -> tuple[Any, bool]:
    builder = arg_value(op, "pickled_grad_builder" if suffix else "pickled_builder", None)
    if builder:
        key = builder if isinstance(builder, bytes) else builder.encode("latin1")
        if key not in _BUILDERS:
            raise ExecutionError("Python op: its pickled builder was not made in this process; netviz does not "
                                 "unpickle model data (register the function with core.CreatePythonOperator)")
        func, args, kwargs = _BUILDERS[key]
        return func(*args, **kwargs), bool(arg_value(op, "pass_workspace", 0))
    token = arg_value(op, "token", "")
    token = token.decode() if isinstance(token, bytes) else token
    if not token:  # Caffe2 refuses such an op when it is created, before any user code could run
        raise ExecutionError("Python op needs a pickled_builder or a token argument (neither is set)")
    if token + suffix not in _FUNCS:
        raise ExecutionError(f"Python operator for {token}{suffix} is not available (register it in this process)")
    return _FUNCS[token + suffix]


_BUILT: dict[tuple[int, str], tuple[Any, Any]] = {}  # (id(ctx), suffix) -> (ctx, function): one build per bound op


def _user_error(ctx: Any, e: Exception) -> ExecutionError:
    """An ExecutionError that is also the user's exception class (Caffe2 re-raises it as is)."""
    msg = f"{ctx.net_name or 'net'}: op #{ctx.index} {ctx.op.type} '{ctx.op.name}': {type(e).__name__}: {e}"
    try:
        cls = type(type(e).__name__, (ExecutionError, type(e)), {"__str__": Exception.__str__})
        return cls(msg)
    except TypeError:  # a class that cannot be mixed with ExecutionError
        return ExecutionError(msg)


def _run(ctx: Any, suffix: str, tensor: type[TensorCPU] = TensorCPU) -> tuple[np.ndarray, ...]:
    op, ws = ctx.op, ctx.workspace
    try:
        key = (id(ctx), suffix)
        if key not in _BUILT or _BUILT[key][0] is not ctx:
            if len(_BUILT) > 4096:
                _BUILT.clear()
            _BUILT[key] = (ctx, _function(op, suffix))
        func, pass_workspace = _BUILT[key][1]
        ins = [tensor(ws, n) for n in op.input]
        outs = [tensor(ws, n) for n in op.output]
        if pass_workspace:
            func(ins, outs, WORKSPACE_FACE(ws))
        else:
            func(ins, outs)
    except ExecutionError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's function failed: keep its class
        raise _user_error(ctx, e) from e
    return tuple(t._value() for t in outs)


# ---- kernels ----
@kernel("PythonDLPack", needs_context=True)
def python_dlpack(xp: Any, *inputs: Any, ctx: Any) -> tuple[np.ndarray, ...]:
    # NOTE: the Python op with DLPack tensors: same registry of functions (a ``token``), same gradient maker.
    return _run(ctx, "", DLPackTensorCPU)


@kernel("PythonDLPackGradient", needs_context=True)
def python_dlpack_gradient(xp: Any, *inputs: Any, ctx: Any) -> tuple[np.ndarray, ...]:
    return _run(ctx, "_gradient", DLPackTensorCPU)


@kernel("Python", needs_context=True)
def python(xp: Any, *inputs: Any, ctx: Any) -> tuple[np.ndarray, ...]:
    return _run(ctx, "")


@kernel("PythonGradient", needs_context=True)
def python_gradient(xp: Any, *inputs: Any, ctx: Any) -> tuple[np.ndarray, ...]:
    return _run(ctx, "_gradient")


# ---- gradients ----
# NOTE: the Python/PythonDLPack maker (GetPythonGradient) is registered in engine/runtime/ops/util.py.


# ---- shapes ----
# NOTE: a Python op's outputs are whatever its function makes: declared opaque.
shape("Python")(opaque)
shape("PythonDLPack")(opaque)
