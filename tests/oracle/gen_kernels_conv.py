"""Kernel oracle cases of the conv & pool & image family (issue #18 part B).

Every pooling/conv argument Caffe2 accepts (legacy_pad 0-3, dilations, groups, NHWC, 1-D/3-D,
per-side stride/pad, global pooling, N = 0), and the image ops.  Run from tests/oracle with
``../../.venv-caffe2/bin/python gen_kernels_conv.py ../golden``.
"""
import numpy as np

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
    for tag, ks, xs in (("1x1", 1, (0, 1, 7, 7)), ("3d_1x1", 1, (0, 1, 3, 3, 3)), ("stride_pad", 3, (0, 2, 6, 5))):
        name = f"Conv_N0_{tag}"  # the 1x1 GEMM path and 3-D, as Caffe2's conv_test draws them
        r = rng_for(name)
        w = f4(r, 3, xs[1], *([ks] * (len(xs) - 2)))
        args = dict(kernels=[ks] * (len(xs) - 2)) if len(xs) == 5 else dict(kernel=ks, stride_h=2, pad_t=1, pad_b=2)
        yield Case(name, "Conv", {"X": f4(r, *xs), "W": w, "b": f4(r, 3)}, ["Y"], args, grad=True)
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
    # issue 35: global pooling under legacy_pad (Caffe-translated SqueezeNets) is the global mean / max;
    # a stride or pad beside global_pooling is refused by Caffe2.
    x33 = np.arange(18, dtype="f4").reshape(1, 2, 3, 3)
    for pool in ("MaxPool", "AveragePool"):
        for lp in (1, 2, 3):
            yield Case(f"{pool}_global_legacy_pad{lp}", pool, {"X": x33}, ["Y"],
                       dict(global_pooling=1, legacy_pad=lp), grad=True)
        yield Case(f"{pool}_global_legacy_pad3_kernel", pool, {"X": x33}, ["Y"],
                   dict(global_pooling=1, legacy_pad=3, kernel=2), grad=True)
        yield Case(f"{pool}_global_stride2", pool, {"X": x33}, ["Y"], dict(global_pooling=1, stride=2))
        yield Case(f"{pool}_global_pad1", pool, {"X": x33}, ["Y"], dict(global_pooling=1, pad=1, legacy_pad=3))


def image_cases():
    name = "ConvRelu"
    r = rng_for(name)
    yield Case(name, name, {"X": f4(r, 2, 3, 6, 6), "W": f4(r, 4, 3, 3, 3), "b": f4(r, 4)}, ["Y"],
               dict(kernel=3, pad=1, stride=2), atol=1e-4)
    for p in (2.0, 3.0):
        name = f"LpPool_p{int(p)}"
        r = rng_for(name)
        yield Case(name, "LpPool", {"X": f4(r, 2, 3, 6, 7)}, ["Y"], dict(kernel=3, stride=2, pad=1, p=p), grad=True,
                   atol=1e-4)
    name = "LpPool_NHWC"
    r = rng_for(name)
    yield Case(name, "LpPool", {"X": f4(r, 2, 5, 6, 3)}, ["Y"], dict(kernel=2, stride=2, order="NHWC"), grad=True,
               atol=1e-4)
    for order in ("NCHW", "NHWC"):
        name = f"Im2Col_{order}"
        r = rng_for(name)
        x = f4(r, 2, 3, 6, 7) if order == "NCHW" else f4(r, 2, 6, 7, 3)
        yield Case(name, "Im2Col", {"X": x}, ["Y"], dict(kernel_h=3, kernel_w=2, stride=2, pad=1, dilation=1,
                                                          order=order), grad=True)
        name = f"Col2Im_{order}"
        r = rng_for(name)
        z = f4(r, 2, 3, 5, 6) if order == "NCHW" else f4(r, 2, 5, 6, 3)
        cols = f4(r, 2, 3 * 3 * 2, 3, 4) if order == "NCHW" else f4(r, 2, 3, 4, 3 * 2 * 3)
        yield Case(name, "Col2Im", {"C": cols, "Z": z}, ["Y"], dict(kernel_h=3, kernel_w=2, stride=2, pad=1,
                                                                  order=order), grad=True)
    name = "Im2Col_dilation"
    r = rng_for(name)
    yield Case(name, "Im2Col", {"X": f4(r, 1, 2, 7, 7)}, ["Y"], dict(kernel=2, dilation=2), grad=True)
    for mode in ("constant", "reflect", "edge"):
        for order in ("NCHW", "NHWC"):
            name = f"PadImage_{mode}_{order}"
            r = rng_for(name)
            x = f4(r, 2, 3, 5, 6) if order == "NCHW" else f4(r, 2, 5, 6, 3)
            yield Case(name, "PadImage", {"X": x}, ["Y"], dict(mode=mode, pad_t=2, pad_l=1, pad_b=3, pad_r=2,
                                                             value=0.5, order=order), grad=True)
    for tag, ins, args in (("scale2", {}, dict(width_scale=2.0, height_scale=2.0)),
                           ("scale_odd", {}, dict(width_scale=1.5, height_scale=2.5)),
                           ("scales_input", {"S": np.array([2.0, 3.0], "f4")}, {}),
                           ("down", {}, dict(width_scale=0.5, height_scale=0.75))):
        name = "UpsampleBilinear_" + tag
        r = rng_for(name)
        yield Case(name, "UpsampleBilinear", {"X": f4(r, 2, 3, 4, 5), **ins}, ["Y"], args, grad=True)
    for tag, args in (("", dict(temporal_scale=2.0, height_scale=2.0, width_scale=2.0)),
                      ("t1", dict(height_scale=2.0, width_scale=2.0)),
                      ("t3", dict(temporal_scale=3.0, height_scale=2.0, width_scale=2.0)),
                      ("h1_5", dict(height_scale=1.5, width_scale=2.0))):  # Caffe2: only 2x height/width
        name = "ResizeNearest3D" + ("_" + tag if tag else "")
        r = rng_for(name)
        yield Case(name, "ResizeNearest3D", {"X": f4(r, 1, 2, 4, 3, 5)}, ["Y"], args, grad=True)
    for tag, args, xs in (("", dict(block_size=2), (2, 3, 4, 6)), ("pad", dict(block_size=3, pad=1), (1, 2, 4, 7)),
                          ("NHWC", dict(block_size=2, pad_t=1, pad_b=1, pad_l=0, pad_r=2, order="NHWC"),
                           (2, 4, 6, 3))):
        name = "SpaceToBatch_" + (tag or "plain")
        r = rng_for(name)
        yield Case(name, "SpaceToBatch", {"X": f4(r, *xs)}, ["Y"], args, grad=True)
    for tag, args, xs in (("", dict(block_size=2), (8, 3, 2, 3)), ("pad", dict(block_size=2, pad=1), (4, 2, 3, 3))):
        name = "BatchToSpace_" + (tag or "plain")
        r = rng_for(name)
        yield Case(name, "BatchToSpace", {"X": f4(r, *xs)}, ["Y"], args, grad=True)
    name = "BatchToSpace_NHWC"
    r = rng_for(name)
    yield Case(name, "BatchToSpace", {"X": f4(r, 8, 2, 3, 3)}, ["Y"], dict(block_size=2, order="NHWC"))
    name = "IntegralImage"
    r = rng_for(name)
    # NOTE: Caffe2's IntegralImageGradient is not the adjoint; netviz matches it by default and gives the adjoint
    # with --fix-caffe2 (docs/fidelity.md, tests/engine/test_kernels_conv.py).
    yield Case(name, name, {"X": f4(r, 2, 3, 4, 5)}, ["Y"], grad=True)
    for order in ("NCHW", "NHWC"):
        name = f"DepthConcat_{order}"
        r = rng_for(name)
        a, b = (f4(r, 2, 3, 4, 2), f4(r, 2, 1, 4, 2)) if order == "NCHW" else (f4(r, 2, 4, 2, 3), f4(r, 2, 4, 2, 1))
        yield Case(name, "DepthConcat", {"A": a, "B": b}, ["Y", "info"], dict(order=order), grad=True)
    for tag, xs, ws, bs, args in (
            ("2d", (2, 3, 5, 5), (3, 3, 4, 3, 3, 3), (3, 3, 4), dict(kernel=3, pad=0)),
            ("2d_stride_pad", (2, 2, 6, 5), (4, 3, 3, 2, 2, 2), (4, 3, 3), dict(kernel=2, stride=2, pad=1)),
            ("1d", (2, 3, 7), (5, 2, 3, 3), (5, 2), dict(kernels=[3])),
            ("3d", (1, 2, 3, 4, 4), (2, 3, 3, 2, 2, 2, 2, 2), (2, 3, 3, 2), dict(kernels=[2, 2, 2])),
            ("NHWC", (2, 5, 5, 3), (4, 4, 2, 2, 2, 3), (4, 4, 2), dict(kernel=2, order="NHWC"))):
        op = "LC1D" if tag == "1d" else "LC3D" if tag == "3d" else "LC"
        name = f"{op}_{tag}"
        r = rng_for(name)
        yield Case(name, op, {"X": f4(r, *xs), "W": f4(r, *ws), "b": f4(r, *bs)}, ["Y"], args, grad=True, atol=1e-4)
    name = "LC_no_bias"
    r = rng_for(name)
    yield Case(name, "LC2D", {"X": f4(r, 2, 3, 5, 5), "W": f4(r, 3, 3, 4, 3, 3, 3)}, ["Y"], dict(kernel=3),
               grad=True, atol=1e-4)


def cases():
    yield from conv_pool_cases()
    yield from image_cases()


record("conv", cases())
