"""Kernel cases for reductions and statistics (family ``reduce``), recorded from real Caffe2.

Run from tests/oracle:
``PYTHONHASHSEED=0 GLOG_minloglevel=2 ../../.venv-caffe2/bin/python gen_kernels_reduce.py ../golden``
"""
import numpy as np

from kernel_oracle import Case, record, rng_for


def _x(name, shape, lo=-2.0, hi=2.0):
    return rng_for(name).uniform(lo, hi, size=shape).astype("f4")


def cases():
    x = _x("x234", (2, 3, 4))
    for t in ("ReduceL1", "ReduceL2"):
        yield Case(t, t, {"X": x}, ["Y"], grad=True)
        yield Case(t + "_axes", t, {"X": x}, ["Y"], {"axes": [0, 2], "keepdims": 0}, grad=True)
        yield Case(t + "_keep", t, {"X": x}, ["Y"], {"axes": [1]}, grad=True)
    for side in ("Front", "Back"):
        for k in ("Sum", "Mean", "Max"):
            t = f"Reduce{side}{k}"
            yield Case(t, t, {"X": x}, ["Y"], grad=True)
            yield Case(t + "_2", t, {"X": x}, ["Y"], {"num_reduce_dim": 2}, grad=True)
            kept = 12 if side == "Front" else 6
            lens = rng_for(t + "len").randint(1, 3 if side == "Front" else 5, size=kept).astype("i4")
            yield Case(t + "_lengths", t, {"X": x, "L": lens}, ["Y"], grad=True)
            lens2 = rng_for(t + "len2").randint(1, 7 if side == "Front" else 13, size=4 if side == "Front" else 2)
            yield Case(t + "_lengths2", t, {"X": x, "L": lens2.astype("i4")}, ["Y"], {"num_reduce_dim": 2},
                       grad=True)
            yield Case(t + "_empty", t, {"X": np.zeros((0, 3), "f4") if side == "Back" else np.zeros((3, 0), "f4")},
                       ["Y"], grad=True)
    # the schema documents num_reduce_dims; Caffe2 reads only num_reduce_dim
    yield Case("ReduceFrontSum_num_reduce_dims_ignored", "ReduceFrontSum", {"X": x}, ["Y"], {"num_reduce_dims": 2})
    for t in ("ColwiseMax", "RowwiseMax"):
        yield Case(t, t, {"X": x}, ["Y"], grad=True)
    yield Case("SumInt", "SumInt", {"A": np.arange(6, dtype="i4").reshape(2, 3),
                                    "B": np.arange(6, dtype="i4").reshape(2, 3) * 3}, ["Y"])
    yield Case("SumElementsInt", "SumElementsInt", {"A": np.arange(7, dtype="i4")}, ["Y"])
    yield Case("Moments", "Moments", {"X": x}, ["M", "V"], grad=True)
    yield Case("Moments_axes", "Moments", {"X": x}, ["M", "V"], {"axes": [0, 2]}, grad=True)
    yield Case("Moments_nokeep", "Moments", {"X": x}, ["M", "V"], {"axes": [1], "keepdims": 0}, grad=True)
    x4 = _x("x4", (2, 3, 2, 2))
    yield Case("BatchMoments", "BatchMoments", {"X": x4}, ["M", "V"], grad=True)
    yield Case("BatchMoments_nhwc", "BatchMoments", {"X": x4}, ["M", "V"], {"order": "NHWC"}, grad=True)
    for p in (1, 2):
        yield Case(f"LpNorm_p{p}", "LpNorm", {"X": x}, ["Y"], {"p": p}, grad=True)
        yield Case(f"LpNorm_p{p}_avg", "LpNorm", {"X": x}, ["Y"], {"p": p, "average": 1}, grad=True)
    yield Case("Normalize", "Normalize", {"X": x}, ["Y"], grad=True)
    yield Case("Normalize_axis1", "Normalize", {"X": x}, ["Y"], {"axis": 1}, grad=True)
    z = x.copy()
    z[0, 0, :] = 0
    yield Case("Normalize_zero", "Normalize", {"X": z}, ["Y"], grad=True)
    yield Case("NormalizeL1", "NormalizeL1", {"X": x}, ["Y"])
    yield Case("NormalizeL1_axis0", "NormalizeL1", {"X": x}, ["Y"], {"axis": 0})
    yield Case("Summarize", "Summarize", {"X": x}, ["Y"], rtol=1e-5)
    yield Case("Summarize_double", "Summarize", {"X": x.astype("f8")}, ["Y"])


if __name__ == "__main__":
    print(record("reduce", cases()), "cases")
