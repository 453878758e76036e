"""Kernel cases of control-flow ops that are single kernels with a subnet argument (family ``control``):
ONNXWhile (ONNX Loop), recorded from real Caffe2.

Run from tests/oracle:
``PYTHONHASHSEED=0 GLOG_minloglevel=2 ../../.venv-caffe2/bin/python gen_kernels_control.py ../golden``
"""
import numpy as np
from caffe2.proto import caffe2_pb2
from caffe2.python import core

from kernel_oracle import Case, record, rng_for


def _body(scan_shape, limit=None):
    """Body [i, cond, acc, w] -> [cond_new, acc + w, w * 0.5, scan]: scan = acc + i (shape `scan_shape`);
    cond_new = (acc + w < limit) when `limit` is given, else true."""
    body = caffe2_pb2.NetDef()
    body.external_input.extend(["i", "cond", "acc", "w"])
    body.external_output.extend(["cond_new", "acc_new", "w_new", "scan"])
    ops = [core.CreateOperator("Add", ["acc", "w"], ["acc_new"]),
           core.CreateOperator("Scale", ["w"], ["w_new"], scale=0.5),
           core.CreateOperator("Cast", ["i"], ["fi"], to=caffe2_pb2.TensorProto.FLOAT),
           core.CreateOperator("Add", ["acc", "fi"], ["scan_full"], broadcast=1),
           core.CreateOperator("Reshape", ["scan_full"], ["scan", "old"], shape=list(scan_shape))]
    if limit is None:
        ops.append(core.CreateOperator("ConstantFill", [], ["cond_new"], shape=[1], value=True,
                                       dtype=caffe2_pb2.TensorProto.BOOL))
    else:
        ops += [core.CreateOperator("ConstantFill", [], ["limit"], shape=[1], value=float(limit)),
                core.CreateOperator("ReduceFrontSum", ["acc_new"], ["total"], num_reduce_dims=1),
                core.CreateOperator("LT", ["total", "limit"], ["cond_new"], broadcast=1)]
    body.op.extend(ops)
    return body


def cases():
    for name, trips, cond, scan, limit, extra in (
            ("trips4", 4, True, (1,), None, {}),
            ("zero_trips", 0, True, (1,), None, {}),
            ("first_cond_false", 5, False, (1,), None, {}),
            ("cond_stops", 20, True, (1,), 2.4, {}),
            ("scan_rows2", 3, True, (2,), None, {}),
            ("scan_2x1", 2, True, (2, 1), None, {}),
            ("disable_scopes", 3, True, (1,), None, {"disable_scopes": 1}),
            ("save_scopes", 3, True, (1,), None, {"save_scopes": 1}),
            ("no_trip_count", 50, True, (1,), 2.4, {"has_trip_count": 0}),
            ("int_cond", 3, 1, (1,), None, {})):
        r = rng_for("ONNXWhile_" + name)
        acc = r.uniform(0.5, 1.5, scan).astype("f4")
        ins = {"max_trip": np.array(trips, "i8"),
               "cond0": np.array(cond, "i4" if isinstance(cond, int) and not isinstance(cond, bool) else "bool"),
               "acc0": acc, "w0": r.uniform(1, 2, scan).astype("f4")}
        args = dict(body=_body(scan, limit), has_trip_count=1, has_cond=1)
        args.update(extra)
        yield Case("ONNXWhile_" + name, "ONNXWhile", ins, ["acc", "w", "scan_out"], args)


if __name__ == "__main__":
    print(record("control", cases()), "cases")
