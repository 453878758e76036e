"""Numeric gradient checks of gradient ops, with ``caffe2.python.gradient_checker`` semantics.

:class:`GradientChecker` checks one op: the loss is ``0.5 * sum(Y**2)`` over the chosen
outputs (so ``dL/dY = Y``), the analytic gradient comes from running the gradient ops, the
numeric one from central differences.  :class:`NetGradientChecker` does the same for a net
whose loss is the plain sum of its chosen outputs.  Unlike Caffe2, explicit ``grad_ops`` work.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from engine.runtime import device as dev
from engine.runtime import executor, workspace as runtime_workspace
from engine.caffe2 import workspace as wsmod
from engine.model.opdef import create_operator
from proto import caffe2_pb2


def _grad_map(ops: Sequence[caffe2_pb2.OperatorDef], ys: Any) -> tuple[list[caffe2_pb2.OperatorDef], Any]:
    from engine.caffe2.core import GradientRegistry  # noqa: PLC0415  (Caffe2's: the map holds BlobReferences)

    return GradientRegistry.GetBackwardPass(ops, ys)


def _op_gradients(op: caffe2_pb2.OperatorDef) -> tuple[list[caffe2_pb2.OperatorDef], list[Any]]:
    from engine.autodiff.gradient_ir import GradientRegistry  # noqa: PLC0415

    return GradientRegistry.GetGradientForOp(op, [o + "_grad" for o in op.output])


def _densify(grad: Any, like: np.ndarray, fetch: Any = None) -> np.ndarray:
    """Fetch a dense gradient, or scatter a GradientSlice ``(indices, values)`` into zeros."""
    fetch = fetch or wsmod.FetchBlob
    if not hasattr(grad, "indices"):
        return fetch(str(grad))
    idx, val = fetch(str(grad.indices)), fetch(str(grad.values))
    dense = np.zeros_like(like, dtype=np.float32)
    np.add.at(dense, idx.reshape(-1).astype(np.int64), val.reshape((idx.size,) + like.shape[1:]))
    return dense


class GradientChecker:
    """Check the gradient ops of one operator against central differences.

    Examples
    --------
    >>> op = create_operator("Relu", ["X"], ["Y"])
    >>> g = create_operator("ReluGradient", ["Y", "Y_grad"], ["X_grad"])
    >>> x = np.array([[1.0, -2.0, 3.0]], np.float32)
    >>> GradientChecker(0.01, 0.01).CheckSimple(op, [x], 0, [0], grad_ops=[g])[0]
    True
    """

    def __init__(self, stepsize: float, threshold: float, device_option: caffe2_pb2.DeviceOption | None = None,
                 workspace_name: str = "gradient_check", input_device_options: Mapping[str, Any] | None = None):
        self._stepsize, self._threshold = stepsize, threshold
        self._device_option = device_option or caffe2_pb2.DeviceOption()
        self._workspace_name = workspace_name
        self._input_device_options = dict(input_device_options or {})

    def GetLossAndGrad(self, op: caffe2_pb2.OperatorDef, grad_ops: Sequence[caffe2_pb2.OperatorDef],
                       inputs: Sequence[np.ndarray], input_names: Sequence[str], input_to_check: int,
                       grad_name: Any, outputs_with_grads: Sequence[int]) -> tuple[float, np.ndarray]:
        for name, x in zip(input_names, inputs):
            wsmod.FeedBlob(name, x, self._input_device_options.get(name, self._device_option))
        wsmod.RunOperatorOnce(op)
        loss = 0.0
        for idx in outputs_with_grads:
            name = op.output[idx]
            y = wsmod.FetchBlob(name)
            loss += float((y.astype(np.float64) ** 2).sum())
            wsmod.FeedBlob(name + "_grad", y, self._device_option)
        for g in grad_ops:
            wsmod.RunOperatorOnce(g)
        return loss / 2, _densify(grad_name, inputs[input_to_check])

    def CheckSimple(self, op: caffe2_pb2.OperatorDef, inputs: Sequence[np.ndarray], input_to_check: int,
                    outputs_with_grads: Sequence[int], grad_ops: Sequence[caffe2_pb2.OperatorDef] | None = None,
                    input_device_options: Mapping[str, Any] | None = None,
                    ensure_outputs_are_inferred: bool = False) -> tuple[bool, np.ndarray, np.ndarray]:
        """``(passed, analytic, numeric)``; only the first and last 3 elements are perturbed
        unless ``CAFFE2_FULL_GRAD_CHECK=1`` (the rest copy the analytic value)."""
        old = wsmod.CurrentWorkspace()
        if old != self._workspace_name:
            wsmod.SwitchWorkspace(self._workspace_name, True)
        op = caffe2_pb2.OperatorDef.FromString(op.SerializeToString())
        op.device_option.CopyFrom(self._device_option)
        if grad_ops is None:
            grad_ops, g_input = _op_gradients(op)
            grad_name = g_input[input_to_check]
        else:
            grad_name = op.input[input_to_check] + "_grad"
        inputs = [np.array(x) for x in inputs]
        try:
            loss, analytic = self.GetLossAndGrad(op, grad_ops, inputs, op.input, input_to_check, grad_name,
                                                 outputs_with_grads)
            x = inputs[input_to_check]
            if analytic.shape != x.shape:
                raise AssertionError(f"Mismatched gradient shapes: analytic {analytic.shape}, input {x.shape}")
            numeric = analytic.copy().reshape(-1)
            flat = x.reshape(-1)
            full = os.environ.get("CAFFE2_FULL_GRAD_CHECK") == "1"
            picks = range(flat.size) if full or flat.size <= 6 else [*range(3), *range(flat.size - 3, flat.size)]
            for d in picks:
                keep = flat[d].copy()
                flat[d] = keep + self._stepsize
                pos, _ = self.GetLossAndGrad(op, grad_ops, inputs, op.input, input_to_check, grad_name,
                                             outputs_with_grads)
                flat[d] = keep - self._stepsize
                neg, _ = self.GetLossAndGrad(op, grad_ops, inputs, op.input, input_to_check, grad_name,
                                             outputs_with_grads)
                flat[d] = keep
                numeric[d] = (pos - neg) / (2 * self._stepsize)
            numeric = numeric.reshape(x.shape)
            ok = np.isclose(analytic, numeric, atol=self._threshold, rtol=self._threshold)
            if not ok.all():
                bad = np.flatnonzero(~ok)
                print("Failed. [idx, grad, grad_estimate] are:")
                print(np.vstack([bad, analytic.reshape(-1)[bad], numeric.reshape(-1)[bad]]).T)
            return bool(ok.all()), analytic, numeric
        finally:
            if old != self._workspace_name:
                wsmod.ResetWorkspace()
                wsmod.SwitchWorkspace(old)


class NetGradientChecker:
    """Whole-net checks: the implied loss is the plain sum of the chosen outputs."""

    @staticmethod
    def Check(net: Any, outputs_with_grad: Sequence[str], input_values: Mapping[str, np.ndarray],
              input_to_check: str, step_size: float = 0.0001, threshold: float = 0.05,
              print_net: bool = True) -> tuple[float, float]:
        """Compare the generated gradient of `input_to_check` with central differences.

        Returns ``(mean |diff|, max |diff|)``; raises AssertionError (from
        ``numpy.testing.assert_allclose``) when they differ beyond `threshold`.
        """
        proto = net if isinstance(net, caffe2_pb2.NetDef) else net.Proto()
        fwd = caffe2_pb2.NetDef.FromString(proto.SerializeToString())
        fwd.name = (proto.name or "net") + "_copy"
        from engine.autodiff.gradient_ir import IR  # noqa: PLC0415

        ir = IR(list(fwd.op))
        # NOTE: dL/dy = ones_like(y), fed in y's dtype (an autogen ConstantFill is float32 only).
        grad_ops, grad_map = ir.GetBackwardPass({o: o + "_autogen_grad" for o in outputs_with_grad})
        saving = caffe2_pb2.NetDef(name=fwd.name, op=ir.ForwardWithSaves()[0])  # + saves of in-place inputs
        grads = caffe2_pb2.NetDef(name=fwd.name + "_grad", op=grad_ops)
        if print_net:
            print(saving, grads)
        values = {k: np.array(v) for k, v in input_values.items()}

        def loss_and_grad(want_grad: bool) -> tuple[float, np.ndarray | None]:
            for k, v in values.items():
                wsmod.FeedBlob(k, v)
            wsmod.RunNetOnce(saving if want_grad else fwd)
            loss = sum(float(wsmod.FetchBlob(o).astype(np.float64).sum()) for o in outputs_with_grad)
            if not want_grad:
                return loss, None
            for o in outputs_with_grad:
                wsmod.FeedBlob(o + "_autogen_grad", np.ones_like(wsmod.FetchBlob(o)))
            wsmod.RunNetOnce(grads)
            return loss, _densify(grad_map[input_to_check], values[input_to_check])

        _, analytic = loss_and_grad(True)
        flat = values[input_to_check].reshape(-1)
        numeric = np.zeros(flat.size)
        for d in range(flat.size):
            keep = flat[d].copy()
            flat[d] = keep + step_size
            pos, _ = loss_and_grad(False)
            flat[d] = keep - step_size
            neg, _ = loss_and_grad(False)
            flat[d] = keep
            numeric[d] = (pos - neg) / (2 * step_size)
        numeric = numeric.reshape(analytic.shape)
        np.testing.assert_allclose(analytic, numeric, atol=threshold, rtol=threshold)
        diff = np.abs(analytic - numeric)
        return float(diff.mean()), float(diff.max())


def finite_difference_op(op_type: str, inputs: Sequence[np.ndarray], input_to_check: int, dy: np.ndarray,
                         *, output: int = 0, n_out: int = 1, step: float = 1e-3, **args: Any) -> np.ndarray:
    """Numeric gradient of ``sum(dy * op(inputs)[output])`` w.r.t. one input, in float64 steps.

    A helper for testing gradient kernels directly (no gradient maker needed).
    """
    xs = [np.array(x, dtype=np.float64) if x.dtype.kind == "f" else np.array(x) for x in inputs]
    x = xs[input_to_check]
    g = np.zeros_like(x)
    flat, gflat = x.reshape(-1), g.reshape(-1)

    def f() -> float:
        out = runtime_workspace.eval_op(op_type, *xs, n_out=max(n_out, output + 1), **args)[output]
        return float((np.asarray(out, dtype=np.float64) * dy).sum())

    for d in range(flat.size):
        keep = flat[d]
        flat[d] = keep + step
        pos = f()
        flat[d] = keep - step
        neg = f()
        flat[d] = keep
        gflat[d] = (pos - neg) / (2 * step)
    return g


__all__ = ["GradientChecker", "NetGradientChecker", "finite_difference_op", "create_operator"]


#: |analytic gradient| at or below which a checked input counts as one the loss does not depend on
#: (float32 rounding of a constant loss gives ~1e-8; a real gradient's 20 samples are far above it).
FLAT_GRADIENT = 1e-6


@dataclass(frozen=True, slots=True)
class InputGradCheck:
    """Analytic vs numeric gradient of the loss for one input (sampled elements)."""

    name: str
    shape: tuple[int, ...]
    checked: int
    max_abs: float
    max_rel: float
    passed: bool
    max_analytic: float = 0.0   #: largest |analytic gradient| of the checked elements
    max_numeric: float = 0.0    #: largest |numeric gradient| of the checked elements

    @property
    def flat(self) -> bool:
        """True when the loss does not move with this input (both gradients about 0): a pass that shows
        nothing, e.g. a Softmax output as the loss (its rows sum to 1 whatever the input)."""
        return self.max_analytic <= FLAT_GRADIENT and self.passed


def check_model_gradients(predict: caffe2_pb2.NetDef, init: caffe2_pb2.NetDef | None, loss: Sequence[str],
                          feeds: Mapping[str, np.ndarray], inputs: Sequence[str] | None = None, *,
                          max_elements: int = 20, step: float = 1e-3, threshold: float = 0.05,
                          seed: int = 0) -> list[InputGradCheck]:
    """NetGradientChecker over a whole model: loss = plain sum of the `loss` blobs.

    Every float input that gets a gradient (or just `inputs`) is checked on up to
    `max_elements` sampled elements with central differences; ``passed`` uses Caffe2's rule
    (``|a - n| <= threshold * (1 + |n|)`` elementwise).
    """
    from engine.autodiff.gradient_ir import backward_net  # noqa: PLC0415

    full, _ = backward_net(predict, list(loss))
    grad_map = _grad_map(list(predict.op), list(loss))[1]
    base = wsmod.Workspace("check_grad")
    if init is not None:
        with executor.random_source(np.random.default_rng(seed)):
            executor.run_net(init, base)
    for k, v in feeds.items():
        base.feed_blob(k, v)
    start = dict(base.values)

    def run(net: caffe2_pb2.NetDef, override: Mapping[str, np.ndarray]) -> wsmod.Workspace:
        ws = wsmod.Workspace("check_grad_run")
        ws.values.update(start)
        ws.devices.update({k: 0 for k in start})
        ws.values.update(override)
        with executor.random_source(np.random.default_rng(seed)):
            executor.run_net(net, ws)
        return ws

    analytic_ws = run(full, {})
    names = [n for n in (inputs or grad_map) if n in start and getattr(start[n], "dtype", None) is not None
             and start[n].dtype.kind == "f" and grad_map.get(n) is not None]
    rng = np.random.default_rng(seed)
    results = []
    for name in names:
        x = np.asarray(start[name])
        fetch = lambda n: np.asarray(dev.to_host(analytic_ws.values[n]))  # noqa: E731
        analytic = _densify(grad_map[name], x, fetch).reshape(-1)
        picks = rng.choice(x.size, size=min(max_elements, x.size), replace=False)
        numeric = np.zeros(len(picks))
        for j, d in enumerate(picks):
            losses = []
            for sign in (1.0, -1.0):
                moved = x.copy().reshape(-1)
                moved[d] += sign * step
                ws = run(predict, {name: moved.reshape(x.shape)})
                losses.append(sum(float(np.asarray(ws.values[o], np.float64).sum()) for o in loss))
            numeric[j] = (losses[0] - losses[1]) / (2 * step)
        a = analytic[picks].astype(np.float64)
        err = np.abs(a - numeric)
        results.append(InputGradCheck(name, x.shape, len(picks), float(err.max(initial=0)),
                                      float((err / np.maximum(np.maximum(np.abs(numeric), np.abs(a)), 1e-3)).max(initial=0)),
                                      bool(np.all(err <= threshold * (1 + np.abs(numeric)))),
                                      float(np.abs(a).max(initial=0)), float(np.abs(numeric).max(initial=0))))
    return results

