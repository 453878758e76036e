"""Kernel cases for normalisation ops (family ``norm``), recorded from real Caffe2.

Run from tests/oracle:
``PYTHONHASHSEED=0 GLOG_minloglevel=2 ../../.venv-caffe2/bin/python gen_kernels_norm.py ../golden``
"""
import numpy as np

from kernel_oracle import Case, record, rng_for


def _x(name, shape, lo=-2.0, hi=2.0):
    return rng_for(name).uniform(lo, hi, size=shape).astype("f4")


def _pos(name, shape):
    return _x(name, shape, 0.5, 1.5)


def _bn_inputs(name, x, c):
    return {"X": x, "scale": _pos(name + "s", (c,)), "bias": _x(name + "b", (c,)), "mean": _x(name + "m", (c,)),
            "var": _pos(name + "v", (c,))}


def cases():
    # SpatialBN: every arity, both orders, is_test, N = 0, several batches
    for order in ("NCHW", "NHWC"):
        x = _x("bn" + order, (2, 3, 4, 5) if order == "NCHW" else (2, 4, 5, 3))
        ins = _bn_inputs("bn" + order, x, 3)
        train_out = ["Y", "mean", "var", "saved_mean", "saved_inv_std"]
        yield Case("SpatialBN_train_" + order, "SpatialBN", ins, train_out, {"is_test": 0, "order": order}, grad=True)
        yield Case("SpatialBN_test_" + order, "SpatialBN", ins, ["Y"], {"is_test": 1, "order": order,
                                                                         "epsilon": 1e-3}, grad=True,
                   note="caffe2_bug: SpatialBNGradient ignores is_test and reads the running variance as "
                        "an inverse std (docs/fidelity.md)")
        s, q = x.sum(axis=(0, 2, 3) if order == "NCHW" else (0, 1, 2)), (x * x).sum(axis=(0, 2, 3) if order == "NCHW" else (0, 1, 2))
        ins7 = dict(ins, sums=s * 2.5, sumsq=q * 2.5)
        yield Case("SpatialBN_7in_" + order, "SpatialBN", ins7, train_out,
                   {"is_test": 0, "order": order, "num_batches": 3, "momentum": 0.8}, grad=True,
                   extra_ops=[("ConstantFill", [], [b + "_grad"], {"shape": [3], "value": v})
                              for b, v in (("scale", 1.5), ("bias", -2.0))])
        e = np.zeros((0, 3, 4, 5) if order == "NCHW" else (0, 4, 5, 3), "f4")
        yield Case("SpatialBN_empty_test_" + order, "SpatialBN", _bn_inputs("bne", e, 3), ["Y"],
                   {"is_test": 1, "order": order})
        yield Case("SpatialBN_empty_train_" + order, "SpatialBN", _bn_inputs("bne", e, 3), train_out,
                   {"is_test": 0, "order": order}, grad=True)
    # maps of 4096 values or more: training SpatialBN and its gradient on the compiled per-channel kernels
    # (engine/runtime/ops/norm_jit.py) when numba is installed; odd sizes, a mean far from 0
    xb = _x("bnbig", (3, 7, 17, 13), 1.0, 9.0)
    yield Case("SpatialBN_train_big_NCHW", "SpatialBN", _bn_inputs("bnbig", xb, 7),
               ["Y", "mean", "var", "saved_mean", "saved_inv_std"], {"is_test": 0, "order": "NCHW", "momentum": 0.7},
               grad=True)
    yield Case("SpatialBN_2d", "SpatialBN", _bn_inputs("bn2d", _x("bn2d", (4, 3)), 3),
               ["Y", "mean", "var", "sm", "siv"], {"is_test": 0}, grad=True)
    yield Case("SpatialBN_3d", "SpatialBN", _bn_inputs("bn3d", _x("bn3d", (2, 3, 2, 3, 2)), 3),
               ["Y", "mean", "var", "sm", "siv"], {"is_test": 0}, grad=True)
    # LayerNorm: plain and with gamma/beta, several axes
    x = _x("ln", (2, 3, 4))
    yield Case("LayerNorm", "LayerNorm", {"X": x}, ["Y", "M", "S"], grad=True)
    yield Case("LayerNorm_axis2", "LayerNorm", {"X": x}, ["Y", "M", "S"], {"axis": 2, "epsilon": 1e-3}, grad=True)
    yield Case("LayerNorm_axisneg", "LayerNorm", {"X": x}, ["Y", "M", "S"], {"axis": -1}, grad=True)
    yield Case("LayerNorm_affine", "LayerNorm", {"X": x, "G": _pos("lng", (3, 4)), "B": _x("lnb", (3, 4))},
               ["Y", "M", "S"], {"elementwise_affine": 1}, grad=True)
    yield Case("LayerNorm_affine_axis2", "LayerNorm", {"X": x, "G": _pos("lng2", (4,)), "B": _x("lnb2", (4,))},
               ["Y", "M", "S"], {"elementwise_affine": 1, "axis": 2}, grad=True)
    yield Case("LayerNorm_gamma_not_affine", "LayerNorm", {"X": x, "G": _pos("lng", (3, 4)), "B": _x("lnb", (3, 4))},
               ["Y", "M", "S"], grad=True)
    yield Case("LayerNorm_affine_no_gamma", "LayerNorm", {"X": x}, ["Y", "M", "S"], {"elementwise_affine": 1})
    yield Case("LayerNorm_empty", "LayerNorm", {"X": np.zeros((0, 3, 4), "f4")}, ["Y", "M", "S"], grad=True)
    yield Case("LayerNorm_affine_flat", "LayerNorm", {"X": x, "G": _pos("lng3", (12,)), "B": _x("lnb3", (12,))},
               ["Y", "M", "S"], {"elementwise_affine": 1}, grad=True)
    # InstanceNorm
    for order in ("NCHW", "NHWC"):
        xi = _x("in" + order, (2, 3, 4, 5) if order == "NCHW" else (2, 4, 5, 3))
        ins = {"X": xi, "s": _pos("ins", (3,)), "b": _x("inb", (3,))}
        yield Case("InstanceNorm_" + order, "InstanceNorm", ins, ["Y", "M", "R"], {"order": order}, grad=True)
        yield Case("InstanceNorm_1out_" + order, "InstanceNorm", ins, ["Y"], {"order": order, "epsilon": 1e-2},
                   grad=True)
    # GroupNorm
    xg = _x("gn", (2, 6, 3, 2))
    gins = {"X": xg, "g": _pos("gng", (6,)), "b": _x("gnb", (6,))}
    yield Case("GroupNorm", "GroupNorm", gins, ["Y", "M", "S"], {"group": 3}, grad=True)
    yield Case("GroupNorm_g1", "GroupNorm", gins, ["Y", "M", "S"], {"group": 1, "epsilon": 1e-3}, grad=True)
    yield Case("GroupNorm_nhwc", "GroupNorm", dict(gins, X=_x("gnh", (2, 3, 2, 6))), ["Y", "M", "S"],
               {"group": 2, "order": "NHWC"}, grad=True)
    yield Case("GroupNorm_bad", "GroupNorm", gins, ["Y", "M", "S"], {"group": 4})
    # the schema documents num_groups; Caffe2 reads only `group` (default 32: 6 channels fail)
    yield Case("GroupNorm_num_groups_ignored", "GroupNorm", gins, ["Y", "M", "S"], {"num_groups": 3})
    # RMSNorm
    xr = _x("rms", (3, 2, 4))
    yield Case("RMSNorm", "RMSNorm", {"X": xr, "g": _pos("rg", (8,)), "b": _x("rb", (8,))}, ["Y", "R"], grad=True)
    yield Case("RMSNorm_axis2", "RMSNorm", {"X": xr, "g": _pos("rg2", (4,)), "b": _x("rb2", (4,))}, ["Y", "R"],
               {"axis": 2, "eps": 1e-3}, grad=True)
    # the schema documents epsilon; Caffe2 reads only `eps`
    yield Case("RMSNorm_epsilon_ignored", "RMSNorm", {"X": xr, "g": _pos("rg", (8,)), "b": _x("rb", (8,))}, ["Y", "R"],
               {"epsilon": 1.0})
    # AffineChannel
    xa = _x("ac", (2, 3, 2, 2))
    ains = {"X": xa, "s": _x("acs", (3,)), "b": _x("acb", (3,))}
    yield Case("AffineChannel", "AffineChannel", ains, ["Y"], grad=True)
    yield Case("AffineChannel_learnable", "AffineChannel", ains, ["Y"], {"is_learnable": 1}, grad=True)
    yield Case("AffineChannel_nhwc", "AffineChannel", dict(ains, X=_x("ach", (2, 2, 2, 3))), ["Y"],
               {"order": "NHWC", "is_learnable": 1}, grad=True)
    yield Case("ChannelStats", "ChannelStats", {"X": xa}, ["S", "Q"])
    yield Case("ChannelStats_3d", "ChannelStats", {"X": _x("cs3", (2, 3, 5))}, ["S", "Q"])
    yield Case("ChannelBackpropStats", "ChannelBackpropStats",
               {"X": xa, "M": _x("cbm", (3,)), "I": _pos("cbi", (3,)), "dY": _x("cbd", (2, 3, 2, 2))}, ["dS", "dB"])
    yield Case("NormalizePlanarYUV", "NormalizePlanarYUV",
               {"X": xa, "M": _x("ny_m", (1, 3)), "S": _pos("ny_s", (1, 3))}, ["Y"])


if __name__ == "__main__":
    print(record("norm", cases()), "cases")
