"""Kernel cases for elementwise math and activations (family ``math``), recorded from real Caffe2.

Run from tests/oracle:
``PYTHONHASHSEED=0 GLOG_minloglevel=2 ../../.venv-caffe2/bin/python gen_kernels_math.py ../golden``
"""
import numpy as np

from kernel_oracle import Case, record, rng_for

F4 = "f4"


def _x(name, shape, lo=-2.0, hi=2.0, dtype=F4):
    return rng_for(name).uniform(lo, hi, size=shape).astype(dtype)


def _unary():
    """(type, low, high, args) of the unary ops with a gradient; inputs inside each domain."""
    yield from [("Acos", -0.9, 0.9, {}), ("Asin", -0.9, 0.9, {}), ("Atan", -3, 3, {}), ("Cos", -3, 3, {}),
                ("Sin", -3, 3, {}), ("Tan", -1.2, 1.2, {}), ("Cosh", -2, 2, {}), ("Sinh", -2, 2, {}),
                ("Cbrt", 0.2, 3, {}), ("Cube", -2, 2, {}), ("Erf", -2.5, 2.5, {}), ("Log1p", -0.5, 3, {}),
                ("Rsqrt", 0.2, 4, {}), ("Reciprocal", 0.5, 3, {}), ("Selu", -3, 3, {}), ("Selu", -3, 3, {"alpha": 1.2, "scale": 1.1}),
                ("Swish", -4, 4, {}), ("Mish", -4, 4, {}), ("Gelu", -3, 3, {}), ("Gelu", -3, 3, {"fast_gelu": 1}),
                ("Softsign", -3, 3, {}), ("HardSigmoid", -4, 4, {}),
                ("HardSigmoid", -4, 4, {"alpha": 0.3, "beta": 0.4}), ("ThresholdedRelu", -2, 3, {}),
                ("ThresholdedRelu", -2, 3, {"alpha": 0.5}), ("ReluN", -3, 9, {}), ("ReluN", -3, 9, {"n": 2.5}),
                ("Logit", 0.0, 1.0, {}), ("Logit", 0.0, 1.0, {"eps": 0.1})]


def cases():
    seen = {}
    for t, lo, hi, args in _unary():
        k = seen[t] = seen.get(t, 0) + 1
        name = t if k == 1 else f"{t}_{k}"
        yield Case(name, t, {"X": _x(name, (3, 4, 5), lo, hi)}, ["Y"], args, grad=True)
    for t in ("Cos", "Sigmoid", "Selu", "Swish"):
        yield Case(t + "_empty", t, {"X": np.zeros((0, 3), F4)}, ["Y"], grad=True)
    yield Case("Selu_badscale", "Selu", {"X": _x("Selu_bad", (3,))}, ["Y"], {"scale": 0.9})
    yield Case("Rsqrt_inplace", "Rsqrt", {"X": _x("Rsqrt_inplace", (4, 3), 0.5, 2)}, ["X"], grad=True)
    yield Case("Glu", "Glu", {"X": _x("Glu", (3, 4, 6))}, ["Y"])
    yield Case("Glu_dim1", "Glu", {"X": _x("Glu_dim1", (3, 4, 6))}, ["Y"], {"dim": 1})
    yield Case("Glu_odd", "Glu", {"X": _x("Glu_odd", (3, 5))}, ["Y"])
    # Max / Min over several inputs (same shapes; ties get the gradient in every input)
    a, b, c = (_x("MaxMin" + s, (3, 4)) for s in "abc")
    b[0, :2] = a[0, :2]
    for t in ("Max", "Min"):
        yield Case(t, t, {"A": a, "B": b, "C": c}, ["Y"], grad=True)
        yield Case(t + "_one", t, {"A": a}, ["Y"], grad=True)
        yield Case(t + "_two", t, {"A": a, "B": b}, ["Y"], grad=True)
        yield Case(t + "_int", t, {"A": np.arange(6, dtype="i4"), "B": np.arange(6, dtype="i4")[::-1].copy()}, ["Y"])
    ints = np.array([-7, -3, 0, 2, 5, 9, -12], dtype="i4")
    yield Case("Mod", "Mod", {"X": ints}, ["Y"], {"divisor": 4})
    yield Case("Mod_negdiv", "Mod", {"X": ints.astype("i8")}, ["Y"], {"divisor": -4})
    yield Case("Mod_sign", "Mod", {"X": ints}, ["Y"], {"divisor": 4, "sign_follow_divisor": 1})
    yield Case("Mod_sign_neg", "Mod", {"X": ints.astype("i8")}, ["Y"], {"divisor": -3, "sign_follow_divisor": 1})
    r = rng_for("bitwise")
    ia, ib = r.randint(0, 64, (3, 4)).astype("i4"), r.randint(0, 64, (3, 4)).astype("i4")
    for t in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
        yield Case(t, t, {"A": ia, "B": ib}, ["C"])
        yield Case(t + "_bcast", t, {"A": ia.astype("i8"), "B": ib[0].astype("i8")}, ["C"])
        yield Case(t + "_legacy", t, {"A": ia, "B": ib[:, 0].copy()}, ["C"], {"broadcast": 1, "axis": 0})
        yield Case(t + "_bool", t, {"A": ia > 30, "B": ib > 30}, ["C"])
    yield Case("SumRelu", "SumRelu", {"A": _x("sr1", (3, 4)), "B": _x("sr2", (3, 4))}, ["Y"])
    xn = _x("nan", (3, 4))
    xn[0, 1] = xn[2, 3] = np.nan
    yield Case("ReplaceNaN", "ReplaceNaN", {"X": xn}, ["Y"])
    yield Case("ReplaceNaN_value", "ReplaceNaN", {"X": xn}, ["Y"], {"value": -1.5})
    yield Case("IsNaN", "IsNaN", {"X": xn}, ["Y"])
    yield Case("NanCheck", "NanCheck", {"X": _x("nc", (3, 4))}, ["Y"], grad=True)
    yield Case("NanCheck_nan", "NanCheck", {"X": xn}, ["Y"])
    yield Case("EnforceFinite", "EnforceFinite", {"X": _x("ef", (3, 4))}, [])
    yield Case("EnforceFinite_nan", "EnforceFinite", {"X": xn}, [])
    xi = _x("inf", (3, 4))
    xi[1, 1] = np.inf
    yield Case("EnforceFinite_inf", "EnforceFinite", {"X": xi}, [])
    p = _x("ec", (5, 3), -3, 3)
    yield Case("EnsureClipped", "EnsureClipped", {"P": p}, ["P"], {"min": -1.0, "max": 1.5})
    yield Case("EnsureClipped_sparse", "EnsureClipped",
               {"P": p, "I": np.array([0, 3], "i8"), "G": _x("ecg", (2, 3))}, ["P"],
               {"min": -1.0, "max": 1.5})
    x = _x("ctbs", (4, 3))
    yield Case("ClipTensorByScaling", "ClipTensorByScaling", {"X": x, "V": np.array([4.0], F4)}, ["Y"],
               {"threshold": 2.0})
    yield Case("ClipTensorByScaling_below", "ClipTensorByScaling", {"X": x, "V": np.array([1.0], F4)}, ["Y"],
               {"threshold": 2.0})
    yield Case("ClipTensorByScaling_extra", "ClipTensorByScaling",
               {"X": x, "V": np.array([4.0], F4), "T": np.array([1.5], F4)}, ["Y"], {"threshold": 2.0})
    d = _x("srd", (4, 3))
    yield Case("SquareRootDivide", "SquareRootDivide", {"D": d, "S": np.array([4, 0, 9, 2], "i4")}, ["Y"],
               grad=True)
    yield Case("SquareRootDivide_float", "SquareRootDivide", {"D": d, "S": np.array([4, 0, 9, 2], F4)}, ["Y"])
    yield Case("RowMul", "RowMul", {"M": _x("rm", (4, 3, 2)), "W": _x("rmw", (4,))}, ["Y"], grad=True)
    yield Case("ReduceTailSum", "ReduceTailSum", {"M": _x("rts", (4, 3, 2))}, ["Y"])
    yield Case("Accumulate", "Accumulate", {"X": _x("acc", (3, 4))}, ["Y"], {"gamma": 0.5},
               extra_ops=[("ConstantFill", [], ["Y"], {"shape": [3, 4], "value": 2.0})])
    yield Case("ScaleBlobs", "ScaleBlobs", {"A": _x("sb1", (3, 4)), "B": _x("sb2", (5,))}, ["YA", "YB"],
               {"scale": 1.5})
    for it in (0, 3, 9):
        yield Case(f"WeightScale_{it}", "WeightScale", {"W": _x("ws", (3, 4)), "It": np.array([it], "i8")},
                   ["NW"], {"stepsize": 2, "upper_bound_iter": 8, "scale": 0.5})
    yield Case("NegateGradient", "NegateGradient", {"X": _x("ng", (3, 4))}, ["Y"], grad=True)
    yield Case("Conditional", "Conditional", {"C": np.array([True, False, True]), "T": _x("ct", (3, 2)),
                                             "F": _x("cf", (3, 2))}, ["Y"], grad=True)
    yield Case("Assert_ok", "Assert", {"X": np.array([1, 2], "i4")}, [])
    yield Case("Assert_fail", "Assert", {"X": np.array([True, False])}, [], {"error_msg": "boom"})
    yield Case("Fail", "Fail", {}, [])


if __name__ == "__main__":
    print(record("math", cases()), "cases")
