"""Caffe2's per-op cost inference (``workspace.GetOperatorCost``): flops and bytes moved.

Numbers follow Caffe2's cost functions (``OpSchema::CostInferenceFunction``) for the ops listed
in :data:`COSTS`; other ops raise.  Element sizes are the blobs' own dtypes, outputs of inferred
FLOAT type are counted at 4 bytes, as Caffe2 does.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from engine.errors import ExecutionError
from engine.opdef import arg_value
from proto import caffe2_pb2

Shape = tuple[tuple[int, ...], Any]  # (dims, numpy dtype)


def _conv(op: caffe2_pb2.OperatorDef, ins: Sequence[Shape]) -> tuple[int, int, int, int]:
    """Caffe2's CostInferenceForConv: 2·N·out-spatial·kernel·C_in·C_out flops (groups ignored)."""
    if len(ins) < 2:
        raise ExecutionError(f"op {op.type}: Conv requires at least 2 inputs")
    (x, x_dtype), (w, w_dtype) = ins[0], ins[1]
    if not x or not w:
        return 0, 0, 0, 0
    nhwc = arg_value(op, "order", "NCHW") == "NHWC"
    spatial_y = _out_spatial(op, x[1:-1] if nhwc else x[2:])
    kernel = w[1:-1] if nhwc else w[2:]
    c_in, c_out = (w[-1] if nhwc else w[1]), w[0]
    n_y = int(np.prod(spatial_y))
    flops = x[0] * n_y * int(np.prod(kernel)) * c_in * c_out * 2
    n_bias = int(np.prod(ins[2][0])) if len(ins) > 2 else 0
    bytes_read = (int(np.prod(x)) + int(np.prod(w)) + n_bias) * np.dtype(x_dtype).itemsize
    bytes_written = x[0] * c_out * n_y * 4
    params = c_out * c_in * int(np.prod(kernel)) * np.dtype(w_dtype).itemsize
    return int(flops), int(bytes_written), int(bytes_read), int(params)


def _pair(op: caffe2_pb2.OperatorDef, name: str, n: int, default: int) -> list[int]:
    """An op's per-dimension argument (``kernels`` / ``kernel`` / ``kernel_h``+``kernel_w``)."""
    many = arg_value(op, name + "s", None)
    if many:
        return list(many)
    one = arg_value(op, name, None)
    if one is not None:
        return [int(one)] * n
    h, w = arg_value(op, name + "_h", None), arg_value(op, name + "_w", None)
    return [int(h), int(w)] if h is not None and w is not None else [default] * n


def _out_spatial(op: caffe2_pb2.OperatorDef, in_spatial: Sequence[int]) -> list[int]:
    """Output spatial dims as Caffe2's schema inference (kernel from the arguments, default 1;
    explicit pads; no channel checks)."""
    n = len(in_spatial)
    kernel, stride, dil = _pair(op, "kernel", n, 1), _pair(op, "stride", n, 1), _pair(op, "dilation", n, 1)
    pads = list(arg_value(op, "pads", None) or [])
    if not pads:
        if arg_value(op, "pad", None) is not None:
            pads = [int(arg_value(op, "pad", 0))] * (2 * n)
        else:
            head = [int(arg_value(op, f"pad_{s}", 0)) for s in "tl"[:n]]
            tail = [int(arg_value(op, f"pad_{s}", 0)) for s in "br"[:n]]
            pads = head + tail
    return [int((size + pads[i] + pads[i + n] - (dil[i] * (kernel[i] - 1) + 1)) / stride[i] + 1)
            for i, size in enumerate(in_spatial)]


COSTS: dict[str, Callable[[caffe2_pb2.OperatorDef, Sequence[Shape]], tuple[int, int, int, int]]] = {
    t: _conv for t in ("Conv", "Conv1D", "Conv2D", "Conv3D")}


def operator_cost(op: caffe2_pb2.OperatorDef, ins: Sequence[Shape]) -> tuple[int, int, int, int]:
    """``(flops, bytes_written, bytes_read, params_bytes)`` of `op` on inputs of shapes `ins`."""
    if op.type not in COSTS:
        raise ExecutionError(f"op {op.type}: netviz has no cost inference for this op type "
                             f"(has: {', '.join(sorted(COSTS))})")
    return COSTS[op.type](op, ins)
