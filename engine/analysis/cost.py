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
from engine.model.opdef import arg_value
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


def _n(shape: Shape) -> int:
    """Element count of an input."""
    return int(np.prod(shape[0], dtype=np.int64))


def _size(shape: Shape) -> int:
    """Bytes of one element of an input."""
    return np.dtype(shape[1]).itemsize


def _canonical(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


Cost = tuple[int, int, int, int]


def _pointwise(ops_per_point: int) -> Callable[[caffe2_pb2.OperatorDef, Sequence[Shape]], Cost]:
    """Caffe2's PointwiseCostInference<k>: k flops per element of the first input; every input
    read and the first input's size written, all at the first input's element size."""
    def cost(op: caffe2_pb2.OperatorDef, ins: Sequence[Shape]) -> Cost:
        n_x, size = _n(ins[0]), _size(ins[0])
        return n_x * ops_per_point, n_x * size, sum(_n(s) for s in ins) * size, 0
    return cost


def _sum(op: caffe2_pb2.OperatorDef, ins: Sequence[Shape]) -> Cost:
    """Sum: one add per element per extra input."""
    flops, written, read, _ = _pointwise(1)(op, ins)
    return flops * (len(ins) - 1), written, read, 0


def _split(op: caffe2_pb2.OperatorDef, ins: Sequence[Shape]) -> Cost:
    """Split copies its input: every input read at its own element size, the input written."""
    return 0, _n(ins[0]) * _size(ins[0]), sum(_n(s) * _size(s) for s in ins), 0


def _concat(op: caffe2_pb2.OperatorDef, ins: Sequence[Shape]) -> Cost:
    """Concat copies: inputs read and the result written at the first input's element size, plus
    the int32 split_info (one per input; counted even when the op has one output)."""
    total = sum(_n(s) for s in ins) * _size(ins[0])
    return 0, total + 4 * len(ins), total, 0


def _fc_dims(op: caffe2_pb2.OperatorDef, ins: Sequence[Shape], transposed: bool) -> tuple[int, int, int]:
    """(M, K, N) of an FC: X flattened at ``axis``, N from W at ``axis_w``."""
    x, w = ins[0][0], ins[1][0]
    axis = _canonical(int(arg_value(op, "axis", 1)), len(x))
    axis_w = _canonical(int(arg_value(op, "axis_w", 1)), len(w))
    m, k = int(np.prod(x[:axis], dtype=np.int64)), int(np.prod(x[axis:], dtype=np.int64))
    n = int(np.prod(w[axis_w:] if transposed else w[:axis_w], dtype=np.int64))
    return m, k, n


def _fc(transposed: bool) -> Callable[[caffe2_pb2.OperatorDef, Sequence[Shape]], Cost]:
    """FC / FCTransposed: a GEMM plus the bias add; reads X, W (as K x N) and b."""
    def cost(op: caffe2_pb2.OperatorDef, ins: Sequence[Shape]) -> Cost:
        m, k, n = _fc_dims(op, ins, transposed)
        size = _size(ins[0])
        return 2 * m * k * n + m * n, m * n * size, (m * k + k * n + n) * size, k * n * size
    return cost


def _fc_gradient(op: caffe2_pb2.OperatorDef, ins: Sequence[Shape]) -> Cost:
    """FCGradient and FCTransposedGradient alike: Caffe2 takes N as if W were not transposed in
    both, counts dW at W's size, db at N, dX (third output) at M x K, and no bytes read."""
    m, k, n = _fc_dims(op, ins, transposed=False)
    size = _size(ins[0])
    flops, written = 2 * m * k * n + m * n, _n(ins[1]) + n
    if len(op.output) == 3:
        flops, written = flops + 2 * m * k * n, written + m * k
    return flops, written * size, 0, 0


def _batch_matmul(op: caffe2_pb2.OperatorDef, ins: Sequence[Shape]) -> Cost:
    """BatchMatMul: 2·batch·M·K·N; 1-D operands count as a row (A) or a column (B)."""
    a, b = list(ins[0][0]), list(ins[1][0])
    a = [1] + a if len(a) == 1 else a
    b = b + [1] if len(b) == 1 else b
    m, k = (a[-1], a[-2]) if arg_value(op, "trans_a", 0) else (a[-2], a[-1])
    n = b[-2] if arg_value(op, "trans_b", 0) else b[-1]
    batch = int(np.prod(np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2])), dtype=np.int64))
    size = _size(ins[0])
    return 2 * batch * m * k * n, batch * m * n * size, (_n(ins[0]) + _n(ins[1])) * size, 0


def _dot_product(op: caffe2_pb2.OperatorDef, ins: Sequence[Shape]) -> Cost:
    """DotProduct: a multiply-add per element, one output per row."""
    rows, size = (ins[0][0][0] if ins[0][0] else 1), _size(ins[0])
    return 2 * _n(ins[0]), rows * size, (_n(ins[0]) + _n(ins[1])) * size, 0


def _batch_one_hot(op: caffe2_pb2.OperatorDef, ins: Sequence[Shape]) -> Cost:
    """BatchOneHot writes N x len(values) at X's element size; reads every input."""
    x = ins[0][0]
    return 0, (x[0] if x else 1) * _n(ins[2]) * _size(ins[0]), sum(_n(s) * _size(s) for s in ins), 0


def _spatial_bn(op: caffe2_pb2.OperatorDef, ins: Sequence[Shape]) -> Cost:
    """SpatialBN: 4 flops per element; reads X and four per-channel vectors."""
    x, size = ins[0][0], _size(ins[0])
    channels = x[-1] if arg_value(op, "order", "NCHW") == "NHWC" else (x[1] if len(x) > 1 else 1)
    return 4 * _n(ins[0]), _n(ins[0]) * size, (_n(ins[0]) + 4 * channels) * size, 0


def _sparse_lengths(weighted: bool) -> Callable[[caffe2_pb2.OperatorDef, Sequence[Shape]], Cost]:
    """SparseLengths{Sum,Mean,WeightedSum}: one (two weighted) flop per gathered element; Caffe2
    counts 4 bytes per data element, index, length and weight whatever their types, and no
    bytes written."""
    def cost(op: caffe2_pb2.OperatorDef, ins: Sequence[Shape]) -> Cost:
        data, indices, lengths = ins[0], ins[-2], ins[-1]
        block = int(np.prod(data[0][1:], dtype=np.int64))
        gathered = _n(indices) * block
        read = gathered + _n(indices) + _n(lengths) + (_n(ins[1]) if weighted else 0)
        return (2 if weighted else 1) * gathered, 0, 4 * read, 0
    return cost


def _adagrad(op: caffe2_pb2.OperatorDef, ins: Sequence[Shape]) -> Cost:
    """Adagrad: 10 flops per gradient element; bytes grow with the optional outputs."""
    g, size, outs = _n(ins[2]), _size(ins[0]), len(op.output)
    return 10 * g, ((outs - 1) * g + 1) * size, ((outs + 1) * g + 1) * size, 0


def _sparse_adagrad(op: caffe2_pb2.OperatorDef, ins: Sequence[Shape]) -> Cost:
    """SparseAdagrad: 7 flops per gradient element; param and moment rows written."""
    g, size = _n(ins[3]), _size(ins[0])
    return 7 * g, 2 * g * size, 3 * g * size + _n(ins[2]) * _size(ins[2]), 0


def _row_wise_sparse_adagrad(op: caffe2_pb2.OperatorDef, ins: Sequence[Shape]) -> Cost:
    """RowWiseSparseAdagrad: per gradient element 8 flops, per row 5 more (the moment)."""
    g, rows, size = _n(ins[3]), _n(ins[2]), _size(ins[0])
    return 8 * g + 5 * rows, (g + rows) * size, (5 * g + 2 * rows) * size, 0


#: op type -> Caffe2's cost inference for it (the op types whose 1.10.2 schema has one, less the
#: Int8 / packed-FC / NCCL ops netviz cannot feed); checked against Caffe2 by tests/engine/test_cost.py.
COSTS: dict[str, Callable[[caffe2_pb2.OperatorDef, Sequence[Shape]], Cost]] = {
    **{t: _conv for t in ("Conv", "Conv1D", "Conv2D", "Conv3D")},
    **{t: _pointwise(1) for t in ("Add", "Sub", "Mul", "Div")},
    **{t: _pointwise(2) for t in ("LeakyRelu", "Gelu", "ThresholdedRelu", "ReluN", "MulGradient")},
    "Relu": _pointwise(0), "HardSigmoid": _pointwise(4), "Sum": _sum,
    "Split": _split, "Concat": _concat,
    "FC": _fc(False), "FCTransposed": _fc(True),
    "FCGradient": _fc_gradient, "FCTransposedGradient": _fc_gradient,
    "BatchMatMul": _batch_matmul, "DotProduct": _dot_product, "BatchOneHot": _batch_one_hot,
    "SpatialBN": _spatial_bn,
    "SparseLengthsSum": _sparse_lengths(False), "SparseLengthsMean": _sparse_lengths(False),
    "SparseLengthsWeightedSum": _sparse_lengths(True),
    "Adagrad": _adagrad, "SparseAdagrad": _sparse_adagrad, "RowWiseSparseAdagrad": _row_wise_sparse_adagrad,
}


def operator_cost(op: caffe2_pb2.OperatorDef, ins: Sequence[Shape]) -> tuple[int, int, int, int]:
    """``(flops, bytes_written, bytes_read, params_bytes)`` of `op` on inputs of shapes `ins`."""
    if op.type not in COSTS:
        raise ExecutionError(f"op {op.type}: Cost inference function not defined "
                             f"(netviz has Caffe2's cost rules for {len(COSTS)} op types)")
    return COSTS[op.type](op, ins)
