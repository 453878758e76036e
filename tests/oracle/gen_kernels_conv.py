"""Kernel oracle cases of the conv & pool & image family (issue #18 part B).

Every pooling/conv argument Caffe2 accepts (legacy_pad 0-3, dilations, groups, NHWC, 1-D/3-D,
per-side stride/pad, global pooling, N = 0), and the image ops.  Run from tests/oracle with
``../../.venv-caffe2/bin/python gen_kernels_conv.py ../golden``.
"""
from kernel_oracle import Case, record, rng_for


def f4(r, *shape):
    return r.randn(*shape).astype("f4")


def conv_pool_cases():
    # legacy_pad: 1 VALID, 2 SAME, 3 CAFFE_LEGACY_POOLING (33x33 from 64x64, k3 s2 p1)
    for lp in (0, 1, 2, 3):
        for pool in ("MaxPool", "AveragePool"):
            name = f"{pool}_legacy_pad{lp}"
            r = rng_for(name)
            args = dict(kernel=3, stride=2, legacy_pad=lp)
            if lp in (0, 3):
                args["pad"] = 1
            yield Case(name, pool, {"X": f4(r, 1, 2, 64, 64)}, ["Y"], args, grad=True)
        name = f"Conv_legacy_pad{lp}"
        r = rng_for(name)
        args = dict(kernel=3, stride=2, legacy_pad=lp) if lp != 3 else dict(kernel=3, stride=2, pad=1, legacy_pad=3)
        yield Case(name, "Conv", {"X": f4(r, 2, 3, 9, 10), "W": f4(r, 4, 3, 3, 3), "b": f4(r, 4)}, ["Y"], args,
                   grad=True, rtol=1e-4, atol=1e-4)
    for lp in (1, 2):
        name = f"ConvTranspose_legacy_pad{lp}"
        r = rng_for(name)
        yield Case(name, "ConvTranspose", {"X": f4(r, 1, 3, 4, 5), "W": f4(r, 3, 2, 3, 3), "b": f4(r, 2)}, ["Y"],
                   dict(kernel=3, stride=2, legacy_pad=lp), grad=True, atol=1e-4)
    name = "MaxPool_legacy_pad3_odd"
    r = rng_for(name)
    yield Case(name, "MaxPool", {"X": f4(r, 2, 3, 7, 6)}, ["Y"], dict(kernel=2, stride=2, pad=1, legacy_pad=3),
               grad=True)
    name = "AveragePool_legacy_pad3_odd_include_pad"
    r = rng_for(name)
    yield Case(name, "AveragePool", {"X": f4(r, 2, 3, 7, 6)}, ["Y"],
               dict(kernel=3, stride=2, pad=1, legacy_pad=3, count_include_pad=1), grad=True)
    # empty batch
    for order in ("NCHW", "NHWC"):
        name = f"Conv_N0_{order}"
        r = rng_for(name)
        x = f4(r, 0, 3, 5, 5) if order == "NCHW" else f4(r, 0, 5, 5, 3)
        w = f4(r, 4, 3, 3, 3) if order == "NCHW" else f4(r, 4, 3, 3, 3)
        yield Case(name, "Conv", {"X": x, "W": w, "b": f4(r, 4)}, ["Y"], dict(kernel=3, pad=1, order=order),
                   grad=True)
        name = f"ConvTranspose_N0_{order}"
        r = rng_for(name)
        x = f4(r, 0, 3, 4, 4) if order == "NCHW" else f4(r, 0, 4, 4, 3)
        yield Case(name, "ConvTranspose", {"X": x, "W": f4(r, 3, 2, 3, 3) if order == "NCHW" else f4(r, 3, 3, 3, 2),
                                           "b": f4(r, 2)}, ["Y"], dict(kernel=3, stride=2, order=order), grad=True)
    for pool in ("MaxPool", "AveragePool"):
        name = f"{pool}_N0"
        r = rng_for(name)
        yield Case(name, pool, {"X": f4(r, 0, 2, 6, 6)}, ["Y"], dict(kernel=2, stride=2), grad=True)
    # arguments
    r = rng_for("conv_args")
    specs = [
        ("Conv_dilation2", dict(kernel=3, dilation=2, pad=2), (2, 4, 9, 9), (6, 4, 3, 3)),
        ("Conv_group2_NHWC", dict(kernel=3, group=2, pad=1, order="NHWC"), (2, 6, 6, 4), (6, 3, 3, 2)),
        ("Conv_group2", dict(kernel=3, group=2, stride=2, pad=1), (2, 4, 7, 7), (6, 2, 3, 3)),
        ("Conv_per_side", dict(kernel_h=3, kernel_w=2, stride_h=2, stride_w=1, pad_t=1, pad_l=0, pad_b=2, pad_r=1),
         (1, 2, 8, 7), (3, 2, 3, 2)),
        ("Conv_1d", dict(kernels=[3], strides=[2], pads=[1, 0]), (2, 3, 11), (4, 3, 3)),
        ("Conv_3d", dict(kernels=[2, 3, 3], pads=[0, 1, 1, 1, 1, 0]), (1, 2, 4, 5, 5), (3, 2, 2, 3, 3)),
        ("Conv_3d_NHWC", dict(kernels=[2, 2, 2], order="NHWC"), (1, 3, 4, 4, 2), (3, 2, 2, 2, 2)),
        ("Conv_dilations", dict(kernels=[3, 2], dilations=[1, 2], strides=[1, 2]), (2, 2, 8, 9), (3, 2, 3, 2)),
    ]
    for name, args, xs, ws in specs:
        r = rng_for(name)
        # NOTE: Caffe2's 3-D NHWC ConvGradient dX is wrong (docs/fidelity.md); tests/engine/test_kernels_conv.py
        # checks netviz's against the exact adjoint instead.
        yield Case(name, "Conv", {"X": f4(r, *xs), "W": f4(r, *ws), "b": f4(r, ws[0])}, ["Y"], args,
                   grad=name != "Conv_3d_NHWC", atol=1e-4)
    pools = [
        ("global_NHWC", dict(global_pooling=1, order="NHWC"), (2, 5, 4, 3)),
        ("global", dict(global_pooling=1), (2, 3, 5, 4)),
        ("1d", dict(kernels=[3], strides=[2], pads=[1, 1]), (2, 3, 9)),
        ("3d", dict(kernels=[2, 2, 2], strides=[1, 2, 2]), (1, 2, 4, 6, 6)),
        ("per_side_NHWC", dict(kernel_h=3, kernel_w=2, stride_h=2, stride_w=1, pad_t=1, pad_b=0, pad_l=1, pad_r=1,
                               order="NHWC"), (2, 7, 6, 3)),
        ("dilation", dict(kernel=2, dilation=2), (1, 2, 7, 7)),
    ]
    for tag, args, xs in pools:
        for pool in ("MaxPool", "AveragePool"):
            name = f"{pool}_{tag}"
            r = rng_for(name)
            yield Case(name, pool, {"X": f4(r, *xs)}, ["Y"], args, grad=True)


def cases():
    yield from conv_pool_cases()


record("conv", cases())
