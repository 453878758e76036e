"""Caffe2's cost inference (``workspace.GetOperatorCost``) on ops of many shapes and dtypes.

For every op type whose Caffe2 1.10.2 schema has a cost inference function and that netviz can
feed (not the Int8 / packed / NCCL ones), a handful of input signatures -- broadcasting, extra
outputs, other axes, other dtypes -- and the ``(flops, bytes_written, bytes_read)`` Caffe2
returns, or the first line of its error.  Written to OUT/costs/cases.json; read by
tests/engine/test_cost.py, which checks engine.analysis.cost against every row.

Run: cd tests/oracle && PYTHONHASHSEED=0 GLOG_minloglevel=2 ../../.venv-caffe2/bin/python gen_costs.py ../golden
"""
import os

import numpy as np

from _common import OUT, core, pbtxt, sanitize, workspace, write_json

F32, F64, F16, I32, I64, I8 = "float32", "float64", "float16", "int32", "int64", "int8"


def t(*shape, dtype=F32):
    return (list(shape), dtype)


IDX, LENS = t(4, dtype=I64), t(2, dtype=I32)

#: (op type, inputs [(shape, dtype)], outputs, args)
CASES = [
    ("Split", [t(2, 3)], 3, {}),
    ("Split", [t(2, 3, dtype=I32)], 3, {}),
    ("Split", [t(4, 6, dtype=F64)], 2, {"axis": 0}),
    ("Split", [t(4, 6)], 2, {"split": [2, 4]}),
    ("Split", [t(4, 6, dtype=F64), t(2, dtype=I32)], 2, {}),
    ("Split", [t(2, 6, 5)], 2, {"axis": 1, "split": [1, 5]}),
    ("Split", [t(4, 6, dtype=I8)], 2, {"axis": 0}),
    ("DepthSplit", [t(2, 4, 3, 3)], 2, {}),
    ("Concat", [t(2, 3), t(2, 5)], 2, {}),
    ("Concat", [t(2, 3, dtype=I32), t(2, 5, dtype=I32)], 2, {}),
    ("Concat", [t(2, 3), t(4, 3)], 2, {"axis": 0}),
    ("Concat", [t(2, 3), t(2, 3)], 2, {"axis": 1, "add_axis": 1}),
    ("Concat", [t(2, 3, 4), t(2, 3, 4), t(2, 3, 4)], 1, {"axis": 2}),
    ("Concat", [t(2, 3, 4, dtype=F64), t(2, 3, 4)], 2, {"axis": 2}),
    ("Concat", [t(2, 3, 4, 4), t(2, 5, 4, 4)], 2, {"order": "NCHW"}),
    ("Concat", [t(2, 4, 4, 3), t(2, 4, 4, 5)], 2, {"order": "NHWC"}),
    ("DepthConcat", [t(1, 2, 3), t(1, 4, 3)], 2, {}),
]
for op in ("Add", "Sub", "Mul", "Div"):
    CASES += [(op, [t(2, 3), t(2, 3)], 1, {}),
              (op, [t(2, 3, 4), t(4)], 1, {"broadcast": 1}),
              (op, [t(3, dtype=F64), t(2, 3, dtype=F64)], 1, {}),
              (op, [t(5, dtype=I32), t(5, dtype=I32)], 1, {})]
for op in ("Relu", "LeakyRelu", "Gelu", "HardSigmoid", "ThresholdedRelu", "ReluN"):
    CASES += [(op, [t(2, 3)], 1, {}), (op, [t(5, 7, dtype=F64)], 1, {})]
CASES += [
    ("Sum", [t(2, 3)], 1, {}),
    ("Sum", [t(2, 3), t(2, 3), t(2, 3)], 1, {}),
    ("Sum", [t(4, dtype=I64), t(4, dtype=I64)], 1, {}),
    ("MulGradient", [t(2, 3), t(2, 3), t(2, 3)], 2, {}),
    ("MulGradient", [t(2, 3, 4), t(2, 3, 4), t(4)], 2, {"broadcast": 1}),
    ("FC", [t(4, 5), t(3, 5), t(3)], 1, {}),
    ("FC", [t(2, 3, 5), t(6, 5), t(6)], 1, {"axis": 2}),
    ("FC", [t(4, 10), t(3, 2, 5), t(6)], 1, {"axis_w": 2}),
    ("FC", [t(4, 5, dtype=F64), t(3, 5, dtype=F64), t(3, dtype=F64)], 1, {}),
    ("FCTransposed", [t(4, 5), t(5, 3), t(3)], 1, {}),
    ("FCTransposed", [t(2, 3, 5), t(5, 2, 3), t(6)], 1, {"axis": 2}),
    ("FCGradient", [t(4, 5), t(3, 5), t(4, 3)], 3, {}),
    ("FCGradient", [t(4, 5), t(3, 5), t(4, 3)], 2, {}),
    ("FCGradient", [t(2, 3, 5), t(6, 5), t(6, 6)], 3, {"axis": 2}),
    ("FCTransposedGradient", [t(4, 5), t(5, 3), t(4, 3)], 3, {}),
    ("FCTransposedGradient", [t(2, 7), t(7, 4), t(2, 4)], 2, {}),
    ("BatchMatMul", [t(2, 3, 4), t(2, 4, 5)], 1, {}),
    ("BatchMatMul", [t(3, 4), t(4, 5)], 1, {}),
    ("BatchMatMul", [t(2, 4, 3), t(2, 5, 4)], 1, {"trans_a": 1, "trans_b": 1}),
    ("BatchMatMul", [t(7, 2, 3, 4), t(4, 5)], 1, {"broadcast": 1}),
    ("BatchMatMul", [t(4), t(4, 5)], 1, {"broadcast": 1}),
    ("BatchMatMul", [t(2, 3, 4), t(4)], 1, {"broadcast": 1}),
    ("DotProduct", [t(4, 5), t(4, 5)], 1, {}),
    ("DotProduct", [t(4), t(4)], 1, {}),
    ("BatchOneHot", [t(3, 2), t(2, dtype=I32), t(5)], 1, {}),
    ("BatchOneHot", [t(4, 3, dtype=I64), t(3, dtype=I32), t(6, dtype=I64)], 1, {}),
    ("SpatialBN", [t(2, 3, 4, 5), t(3), t(3), t(3), t(3)], 1, {"is_test": 1}),
    ("SpatialBN", [t(2, 4, 5, 3), t(3), t(3), t(3), t(3)], 1, {"is_test": 1, "order": "NHWC"}),
    ("SpatialBN", [t(2, 3, 4, 5), t(3), t(3), t(3), t(3)], 5, {"is_test": 0}),
    ("SpatialBN", [t(4, 6, 3), t(6), t(6), t(6), t(6)], 1, {"is_test": 1}),
    ("SparseLengthsSum", [t(5, 6), IDX, LENS], 1, {}),
    ("SparseLengthsSum", [t(5, 6, dtype=F16), t(4, dtype=I32), LENS], 1, {}),
    ("SparseLengthsMean", [t(5, 6, 7), IDX, t(2, dtype=I64)], 1, {}),
    ("SparseLengthsWeightedSum", [t(5, 6), t(4), IDX, LENS], 1, {}),
    ("SparseLengthsWeightedSum", [t(8, 3), t(6), t(6, dtype=I32), t(3, dtype=I32)], 1, {}),
    ("Adagrad", [t(4, 5), t(4, 5), t(4, 5), t(1)], 2, {}),
    ("Adagrad", [t(7), t(7), t(7), t(1)], 4, {}),
    ("Adagrad", [t(3, 3), t(3, 3), t(3, 3), t(1)], 3, {}),
    ("SparseAdagrad", [t(6, 5), t(6, 5), t(2, dtype=I64), t(2, 5), t(1)], 2, {}),
    ("SparseAdagrad", [t(6, 5, 3), t(6, 5, 3), t(3, dtype=I32), t(3, 5, 3), t(1)], 2, {}),
    ("RowWiseSparseAdagrad", [t(6, 5), t(6), t(2, dtype=I64), t(2, 5), t(1)], 2, {}),
    ("RowWiseSparseAdagrad", [t(9, 4, 2), t(9), t(3, dtype=I32), t(3, 4, 2), t(1)], 2, {}),
    ("RowWiseSparseAdagrad", [t(10, 7), t(10), t(5, dtype=I64), t(5, 7), t(1)], 2, {}),
]


def feed(shape, dtype):
    """Ones, except index-like int inputs that must stay in range (zeros are valid indices)."""
    return np.zeros(shape, dtype) if dtype in (I32, I64) else np.ones(shape, dtype)


def run(op_type, ins, n_out, args):
    workspace.ResetWorkspace()
    names = [f"in{i}" for i in range(len(ins))]
    for name, (shape, dtype) in zip(names, ins):
        workspace.FeedBlob(name, feed(shape, dtype))
    op = core.CreateOperator(op_type, names, [f"out{i}" for i in range(n_out)], **args)
    row = {"op": pbtxt(op), "inputs": [{"shape": s, "dtype": d} for s, d in ins]}
    try:
        row["cost"] = list(workspace.GetOperatorCost(op, names))
    except Exception as e:  # noqa: BLE001 - Caffe2's refusal is a recorded fact
        row["error"] = sanitize(str(e).splitlines()[0])
    return row


def main():
    rows = [run(*c) for c in CASES]
    write_json(os.path.join(OUT, "costs", "cases.json"), {"cases": rows})
    print(f"gen_costs: {len(rows)} cases, {sum('error' in r for r in rows)} refused by Caffe2")


if __name__ == "__main__":
    main()
