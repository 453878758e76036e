"""The three op tables: kernels, gradient makers and shape rules.

Each op family module in ``engine/runtime/ops/`` fills them side by side, so an op's kernel, its
gradient maker and its shape rule sit together::

    @kernel("Relu")
    def relu(xp, x):
        return xp.maximum(x, 0)

    gradient("Relu")(from_output("ReluGradient"))
    shape("Relu")(same_as(0))

The tables are plain dicts keyed by Caffe2 op type; importing :mod:`engine.runtime.ops` fills them.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

KERNELS: dict[str, "KernelSpec"] = {}
GRADIENTS: dict[str, Callable[..., Any]] = {}
SHAPES: dict[str, Callable[..., Any]] = {}
#: op type → ``convert(c)`` emitting the op's ONNX nodes through an :mod:`engine.onnx.export`
#: context (the converters never import onnx themselves, so it stays an optional dependency).
ONNX: dict[str, Callable[..., Any]] = {}


@dataclass(frozen=True, slots=True)
class KernelSpec:
    """A registered kernel and how the executor must call it.

    ``fn(xp, *input_arrays, **declared_args)`` returns one array or a tuple of them.
    ``arg_defaults`` are the keyword-only parameters of ``fn``: the executor passes only
    these (Caffe2 ignores unknown arguments such as ``order`` or ``engine``, and so do we).
    ``needs_context`` kernels also get ``ctx=`` (the op, its workspace and a net runner):
    control flow, RNNs and ops whose outputs depend on the op definition itself.
    """

    op_type: str
    fn: Callable[..., Any]
    needs_context: bool = False
    arg_defaults: dict[str, Any] = field(default_factory=dict)


def _keyword_defaults(fn: Callable[..., Any]) -> dict[str, Any]:
    params = inspect.signature(fn).parameters.values()
    return {p.name: (None if p.default is p.empty else p.default)
            for p in params if p.kind is p.KEYWORD_ONLY and p.name != "ctx"}


def kernel(*op_types: str, needs_context: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as the kernel of every type in `op_types`."""
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        defaults = _keyword_defaults(fn)
        for t in op_types:
            KERNELS[t] = KernelSpec(t, fn, needs_context, defaults)
        return fn
    return register


def gradient(*op_types: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``maker(op, g_output) -> (grad_ops, g_input)`` for every type in `op_types`."""
    def register(maker: Callable[..., Any]) -> Callable[..., Any]:
        for t in op_types:
            GRADIENTS[t] = maker
        return maker
    return register


def shape(*op_types: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a shape/dtype rule (abstract values in, abstract values out) for `op_types`."""
    def register(rule: Callable[..., Any]) -> Callable[..., Any]:
        for t in op_types:
            SHAPES[t] = rule
        return rule
    return register


def onnx_converter(*op_types: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``convert(c)`` as the ONNX converter of every type in `op_types`.

    ``c`` is an :class:`engine.onnx.export.Convert`: the op, its inputs' ONNX names and shapes,
    and ``c.node(...)`` to emit nodes; a converter that meets a case ONNX cannot express
    raises ``c.refuse(why)``, so the export stops instead of writing a wrong model."""
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        for t in op_types:
            ONNX[t] = fn
        return fn
    return register
