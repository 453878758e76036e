"""Which ONNX opsets an export may be stamped with (issue #42 item 20).

``onnx.checker`` accepts any opset number (``--opset 99`` was "onnx.checker: ok"), and ONNX Runtime
only refused the model later, in ``netviz diff``, with its own multi-line text.  An export is
refused up front instead, in one line, when the installed ``onnx`` does not define the opset or
the installed ONNX Runtime (when there is one) cannot load a model stamped with it.
"""
from __future__ import annotations

import functools
from typing import Any

from engine.errors import OnnxExportError


def check_opset(onnx: Any, opset: int, minimum: int) -> None:
    """Raise a one-line :class:`OnnxExportError` unless `opset` is one netviz, onnx and ONNX Runtime all take.

    Parameters
    ----------
    onnx : module
        The imported ``onnx`` package.
    opset : int
        The requested default-domain opset (``--opset``).
    minimum : int
        The oldest opset netviz writes.
    """
    if opset < minimum:
        raise OnnxExportError(f"--opset {opset}: netviz writes opset {minimum} or newer")
    newest = int(onnx.defs.onnx_opset_version())
    if opset > newest:
        raise OnnxExportError(f"--opset {opset}: the installed onnx {onnx.__version__} defines opsets up to "
                              f"{newest} (netviz writes {minimum}..{newest})")
    refusal = _runtime_refusal(opset)
    if refusal:
        raise OnnxExportError(f"--opset {opset}: {refusal}")


@functools.lru_cache(maxsize=None)
def _runtime_refusal(opset: int) -> str | None:
    """Why the installed ONNX Runtime cannot load an opset-`opset` model (one Identity node), or None
    (also None without onnxruntime: `netviz diff` then says how to install it)."""
    try:
        import onnx  # noqa: PLC0415 - optional, present when this is called
        import onnxruntime  # noqa: PLC0415
    except ImportError:
        return None
    h, f = onnx.helper, onnx.TensorProto.FLOAT
    graph = h.make_graph([h.make_node("Identity", ["x"], ["y"])], "opset_probe",
                         [h.make_tensor_value_info("x", f, [1])], [h.make_tensor_value_info("y", f, [1])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 8  # NOTE: the probe asks about the opset only; every runtime netviz supports reads IR 8
    try:
        onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - any refusal of the probe is a refusal of the opset
        return f"the installed ONNX Runtime {onnxruntime.__version__} cannot load a model of this opset"
    return None
