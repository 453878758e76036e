"""Gradient plumbing and inspection: StopGradient, ZeroGradient, Print, Accuracy."""
from __future__ import annotations

import numpy as np

from engine.runtime.grad_makers import GradientMakerError, cc_maker, no_gradient, should_not_do_gradient
from engine.catalogue.registry import gradient, kernel
from engine.catalogue.registry import shape
from engine.runtime.shapes import BOOL, FLOAT, TensorInfo, opaque

# ---- kernels ----

@kernel("Print", "ZeroGradient")
def nothing(xp, *xs, to_file: int = 0):
    return ()


@kernel("Accuracy")
def accuracy(xp, pred, label, *, top_k: int = 1):
    # NOTE: a sample counts when its label's score is among the top_k (ties broken toward lower index).
    p = pred.reshape(pred.shape[0], -1)
    lab = label.reshape(-1).astype(np.int64)
    target = p[xp.arange(p.shape[0]), lab][:, None]
    cols = xp.arange(p.shape[1])[None, :]
    rank = ((p > target) | ((p == target) & (cols < lab[:, None]))).sum(axis=1)
    return xp.asarray((rank < top_k).mean(), dtype=np.float32)


@kernel("IsEmpty")
def is_empty(xp, x):
    return np.array(x.size == 0)


@kernel("HasElements")
def has_elements(xp, *xs):
    return np.array(any(x.size for x in xs))


# ---- gradients ----
no_gradient("StopGradient")  # NOTE: in-place StopGradient(X)->X also erases X's known gradient.
should_not_do_gradient("Print", "Accuracy", "IsEmpty", "HasElements", "Save", "CreateScope", "HasScope",
                       "ScatterAssign", "ScatterWeightedSum", "Unique", "LengthsToSegmentIds",
                       "WallClockTime", "Free")
no_gradient("Load", "Conditional")


@gradient("ZeroGradient")
@cc_maker
def zero_gradient_gradient(g):
    """Injects a zero gradient for X (visited even though it has no outputs)."""
    return [g.op_("ConstantFill", [g.I(0)], [g.GI(0)], value=0.0)]


@gradient("Python", "PythonDLPack")
@cc_maker
def python_gradient(g):
    """{T}Gradient: inputs, outputs, GO of grad_output_indices (default all) -> GI of grad_input_indices."""
    go = g.arg("grad_output_indices", []) or range(len(g.op.output))
    gi = g.arg("grad_input_indices", []) or range(len(g.op.input))
    ins = list(g.op.input) + list(g.op.output) + [g.GO(k) for k in go]
    return [g.op_(g.type + "Gradient", ins, [g.GI(k) for k in gi])]


@gradient("RecurrentNetwork")
@cc_maker
def recurrent_network_gradient(g):
    """One RecurrentNetworkGradient op; the last forward output is the step-workspaces blob."""
    with_grads = g.arg("outputs_with_grads", [])
    if not with_grads:
        raise GradientMakerError("outputs_with_grads must not be empty")
    ins = [g.GO(k) for k in with_grads] + list(g.op.input) + list(g.op.output)
    outs = [g.GI(0)] + [g.GI(p) for p in g.arg("param", [])] + [g.GI(r) for r in g.arg("initial_recurrent_state_ids", [])]
    return [g.op_("RecurrentNetworkGradient", ins, outs)]


# ---- shapes ----

shape("Accuracy")(lambda pred, label: TensorInfo((), FLOAT))
shape("IsEmpty", "HasElements")(lambda *xs: TensorInfo((), BOOL))
shape("Print", "ZeroGradient")(opaque)  # NOTE: no outputs


# ---- onnx ----
from engine.catalogue.registry import onnx_converter  # noqa: E402


@onnx_converter("IsEmpty", "HasElements")
def is_empty_onnx(c):
    """A 0-d bool: Size(X) == 0 (HasElements: any input has an element)."""
    zero = c.const(np.array(0, np.int64), "zero")
    if c.op.type == "IsEmpty":
        return c.emit("Equal", [c.emit("Size", [c.x(0)]), zero], [c.y(0)])
    total = c.emit("Sum", [c.emit("Cast", [c.emit("Size", [c.x(i)])], to=1) for i in range(c.n_in)])
    c.emit("Greater", [total, c.const(np.array(0, np.float32), "zero_f")], [c.y(0)])
