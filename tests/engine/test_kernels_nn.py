"""NN kernels (conv, pool, FC, activations, normalisation, losses): forward vs NumPy, gradients vs numeric."""
from __future__ import annotations

import numpy as np
import pytest

from engine.runtime.workspace import eval_op
from tests.engine.kernel_cases import GradCase, away, check_grad_case, pos, randn


def conv_ref(x, w, b, stride=1, pad=0, dilation=1, group=1):
    """Direct (loopy) NCHW convolution, float64."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp_ = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - dilation * (kh - 1) - 1) // stride + 1, (wd + 2 * pad - dilation * (kw - 1) - 1) // stride + 1
    y = np.zeros((n, m, oh, ow))
    for mm in range(m):
        g = mm // (m // group)
        for i in range(oh):
            for j in range(ow):
                patch = xp_[:, g * cg:(g + 1) * cg, i * stride:i * stride + dilation * (kh - 1) + 1:dilation,
                            j * stride:j * stride + dilation * (kw - 1) + 1:dilation]
                y[:, mm, i, j] = (patch * w[mm]).sum(axis=(1, 2, 3)) + b[mm]
    return y


CONV_CASES = [dict(), dict(stride=2, pad=1), dict(pad=2, dilation=2), dict(group=2), dict(group=4, stride=2)]


@pytest.mark.parametrize("args", CONV_CASES, ids=str)
@pytest.mark.parametrize("k", [1, 3])
def test_conv_forward(args, k):
    g = args.get("group", 1)
    x, w, b = randn(2, 4, 7, 8), randn(4, 4 // g, k, k), randn(4)
    y = eval_op("Conv", x, w, b, kernel=k, **args)[0]
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, conv_ref(x, w, b, **args), rtol=1e-4, atol=1e-4)


def test_conv_nhwc_matches_nchw():
    x, w, b = randn(2, 3, 6, 6), randn(5, 3, 3, 3), randn(5)
    y = eval_op("Conv", x, w, b, kernel=3, pad=1)[0]
    y2 = eval_op("Conv", x.transpose(0, 2, 3, 1), w.transpose(0, 2, 3, 1), b, kernel=3, pad=1, order="NHWC")[0]
    np.testing.assert_allclose(y2.transpose(0, 3, 1, 2), y, rtol=1e-5, atol=1e-5)


def test_conv_pads_and_kernel_hw_spellings():
    x, w, b = randn(1, 2, 5, 6), randn(3, 2, 3, 2), randn(3)
    y = eval_op("Conv", x, w, b, kernel_h=3, kernel_w=2, pad_t=1, pad_b=1, pad_l=0, pad_r=0)[0]
    ref = conv_ref(np.pad(x, ((0, 0), (0, 0), (1, 1), (0, 0))), w, b)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    y2 = eval_op("Conv", x, w, b, kernels=[3, 2], pads=[1, 0, 1, 0])[0]
    np.testing.assert_allclose(y2, y, rtol=1e-6)


def test_conv_without_bias_and_1d_3d():
    x, w = randn(2, 3, 9), randn(4, 3, 3)
    y = eval_op("Conv", x, w, kernel=3)[0]
    ref = conv_ref(x[:, :, None], w[:, :, None], np.zeros(4))[:, :, 0]
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    assert eval_op("Conv", randn(1, 2, 4, 5, 6), randn(3, 2, 2, 2, 2), kernel=2)[0].shape == (1, 3, 3, 4, 5)


def conv_transpose_ref(x, w, b, stride=1, pads=(0, 0, 0, 0), adj=0, group=1):
    """Direct NCHW transposed convolution (each input pixel scatters W into Y), float64."""
    n, m, h, wd = x.shape
    _, cg, kh, kw = w.shape
    pt, pl, pb, pr = pads
    full = np.zeros((n, cg * group, (h - 1) * stride + kh + adj, (wd - 1) * stride + kw + adj))
    for i in range(h):
        for j in range(wd):
            for g in range(group):
                xs, ws = x[:, g * (m // group):(g + 1) * (m // group), i, j], w[g * (m // group):(g + 1) * (m // group)]
                full[:, g * cg:(g + 1) * cg, i * stride:i * stride + kh, j * stride:j * stride + kw] += \
                    np.einsum("nm,mckl->nckl", xs.astype(np.float64), ws)
    y = full[:, :, pt:full.shape[2] - pb, pl:full.shape[3] - pr]
    return y + (0 if b is None else b.reshape(-1, 1, 1))


CONV_T_CASES = [dict(), dict(stride=2), dict(stride=2, pads=(1, 0, 2, 1)), dict(stride=3, adj=2),
                dict(stride=2, pads=(1, 1, 1, 1), adj=1, group=2)]


@pytest.mark.parametrize("args", CONV_T_CASES, ids=str)
def test_conv_transpose_forward(args):
    g = args.get("group", 1)
    x, w, b = randn(2, 4, 3, 5), randn(4, 6 // g, 3, 2), randn(6)
    kw = {"pads": list(args["pads"])} if "pads" in args else {}
    y = eval_op("ConvTranspose", x, w, b, kernel_h=3, kernel_w=2, **{**args, **kw})[0]
    assert y.dtype == np.float32 and y.flags.c_contiguous
    np.testing.assert_allclose(y, conv_transpose_ref(x, w, b, **args), rtol=1e-4, atol=1e-4)


def test_conv_transpose_nhwc_nobias_and_arg_spellings():
    x, w = randn(1, 3, 4, 5), randn(3, 2, 3, 3)
    y = eval_op("ConvTranspose", x, w, kernel=3, stride=2, pad=1, adj=1)[0]
    assert y.shape == (1, 2, 8, 10)  # (in - 1) * stride + kernel + adj - pad_t - pad_b
    y2 = eval_op("ConvTranspose", x.transpose(0, 2, 3, 1), w.transpose(0, 2, 3, 1), kernels=[3, 3], strides=[2, 2],
                 pad_t=1, pad_l=1, pad_b=1, pad_r=1, adj_h=1, adj_w=1, order="NHWC")[0]
    np.testing.assert_allclose(y2, y.transpose(0, 2, 3, 1), rtol=1e-5, atol=1e-5)
    y3 = eval_op("ConvTranspose", x, w, kernel=3, stride=2, pad=1, legacy_pad=2)[0]  # NOTE: SAME/VALID: pads 0
    np.testing.assert_allclose(y3, conv_transpose_ref(x, w, None, stride=2), rtol=1e-4, atol=1e-4)


CONV_T_GRAD = [
    GradCase("ConvTranspose", [randn(2, 4, 3, 4), randn(4, 6 // a.get("group", 1), 3, 2), randn(6)],
             "ConvTransposeGradient", "I0 I1 GO0", "GI1 GI2 GI0", dict(kernel_h=3, kernel_w=2, **a),
             label=f"ConvTransposeGradient{a}")
    for a in [{}, {"stride": 2, "pad": 1}, {"stride": 2, "adj": 1, "group": 2}, {"stride": 2, "adj": 2}]] + [
    GradCase("ConvTranspose", [randn(2, 3, 4, 4), randn(4, 3, 3, 3)], "ConvTransposeGradient", "I0 I1 GO0",
             "GI1 GI0", dict(kernel=3, stride=2, pads=[0, 1, 1, 0], order="NHWC", no_bias=1),
             label="ConvTransposeGradient-NHWC-nobias")]


def pool_ref(x, k, s, p, fn, include_pad=False):
    n, c, h, w = x.shape
    fill = -np.inf if fn is np.max else np.nan
    xp_ = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (p, p), (p, p)), constant_values=fill)
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    y = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            win = xp_[:, :, i * s:i * s + k, j * s:j * s + k]
            y[:, :, i, j] = win.max(axis=(2, 3)) if fn is np.max else np.nanmean(win, axis=(2, 3))
    return y


@pytest.mark.parametrize("k,s,p", [(2, 2, 0), (3, 2, 1), (3, 1, 1)])
def test_pool_forward(k, s, p):
    x = randn(2, 3, 7, 6)
    np.testing.assert_allclose(eval_op("MaxPool", x, kernel=k, stride=s, pad=p)[0], pool_ref(x, k, s, p, np.max),
                               rtol=1e-6)
    np.testing.assert_allclose(eval_op("AveragePool", x, kernel=k, stride=s, pad=p)[0],
                               pool_ref(x, k, s, p, np.mean), rtol=1e-5, atol=1e-6)


def test_pool_global_and_nhwc_and_include_pad():
    x = randn(2, 3, 5, 4)
    np.testing.assert_allclose(eval_op("AveragePool", x, global_pooling=1)[0], x.mean(axis=(2, 3), keepdims=True),
                               rtol=1e-5, atol=1e-6)  # NOTE: atol: a mean near 0 (float32 sums of 20 values)
    y = eval_op("MaxPool", x.transpose(0, 2, 3, 1), kernel=2, stride=2, order="NHWC")[0]
    np.testing.assert_allclose(y.transpose(0, 3, 1, 2), pool_ref(x, 2, 2, 0, np.max), rtol=1e-6)
    inc = eval_op("AveragePool", x, kernel=3, pad=1, count_include_pad=1)[0]
    ref = pool_ref(np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), 3, 1, 0, np.mean)
    np.testing.assert_allclose(inc, ref, rtol=1e-5, atol=1e-6)


def test_fc_forward_axes():
    x, w, b = randn(2, 3, 4), randn(5, 12), randn(5)
    np.testing.assert_allclose(eval_op("FC", x, w, b)[0], x.reshape(2, 12) @ w.T + b, rtol=1e-5)
    np.testing.assert_allclose(eval_op("FC", x, randn(5, 4), b, axis=2)[0].shape, (2, 3, 5))
    wt = randn(12, 5)
    np.testing.assert_allclose(eval_op("FCTransposed", x, wt, b)[0], x.reshape(2, 12) @ wt + b, rtol=1e-5)


ACTIVATIONS = {
    "Relu": (lambda x: np.maximum(x, 0), {}), "Sigmoid": (lambda x: 1 / (1 + np.exp(-x)), {}),
    "Tanh": (np.tanh, {}), "LeakyRelu": (lambda x: np.where(x > 0, x, 0.2 * x), {"alpha": 0.2}),
    "Elu": (lambda x: np.where(x > 0, x, 0.5 * (np.exp(x) - 1)), {"alpha": 0.5}),
    "Softplus": (lambda x: np.log1p(np.exp(x)), {}), "Clip": (lambda x: np.clip(x, -0.5, 0.7), {"min": -0.5, "max": 0.7}),
}


@pytest.mark.parametrize("op", ACTIVATIONS)
def test_activation_forward(op):
    x = randn(3, 4)
    fn, args = ACTIVATIONS[op]
    y = eval_op(op, x, **args)[0]
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, fn(x.astype(np.float64)), rtol=1e-5, atol=1e-6)


def test_softmax_flattens_at_axis():
    x = randn(2, 3, 4)
    e = np.exp(x.reshape(2, 12) - x.reshape(2, 12).max(1, keepdims=True))
    np.testing.assert_allclose(eval_op("Softmax", x)[0], (e / e.sum(1, keepdims=True)).reshape(x.shape), rtol=1e-5)


def test_prelu_per_channel():
    x, s = randn(2, 3, 4, 4), randn(3)
    ref = np.where(x > 0, x, x * s[None, :, None, None])
    np.testing.assert_allclose(eval_op("PRelu", x, s)[0], ref, rtol=1e-6)


def test_spatial_bn_test_and_train():
    x, sc, bi, mu, var = randn(4, 3, 5, 5), randn(3), randn(3), randn(3), pos(3)
    y = eval_op("SpatialBN", x, sc, bi, mu, var, is_test=1, epsilon=1e-3)[0]
    c = (slice(None), None, None)
    np.testing.assert_allclose(y, (x - mu[c]) / np.sqrt(var[c] + 1e-3) * sc[c] + bi[c], rtol=1e-4, atol=1e-5)
    y, rm, rv, sm, siv = eval_op("SpatialBN", x, sc, bi, mu, var, n_out=5, momentum=0.9)
    bm, bv = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    np.testing.assert_allclose(y, (x - bm[c]) / np.sqrt(bv[c] + 1e-5) * sc[c] + bi[c], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(rm, 0.9 * mu + 0.1 * bm, rtol=1e-5)
    np.testing.assert_allclose(rv, 0.9 * var + 0.1 * bv * 100 / 99, rtol=1e-5)  # unbiased, as Caffe2
    np.testing.assert_allclose(siv, 1 / np.sqrt(bv + 1e-5), rtol=1e-5)


def test_lrn_forward():
    x = randn(2, 7, 3, 3)
    y, scale = eval_op("LRN", x, n_out=2, size=5, alpha=1e-2, beta=0.75, bias=2.0)
    sq = np.pad(x.astype(np.float64) ** 2, ((0, 0), (2, 2), (0, 0), (0, 0)))
    ref_s = 2.0 + 1e-2 / 5 * np.stack([sq[:, c:c + 5].sum(1) for c in range(7)], 1)
    np.testing.assert_allclose(scale, ref_s, rtol=1e-5)
    np.testing.assert_allclose(y, x * ref_s ** -0.75, rtol=1e-5)


def test_dropout_train_and_test():
    x = pos(100, 50)
    y, mask = eval_op("Dropout", x, n_out=2, ratio=0.3, random_seed=7)
    assert mask.dtype == bool and 0.6 < mask.mean() < 0.8
    np.testing.assert_allclose(y, x * mask / 0.7, rtol=1e-6)
    y2, mask2 = eval_op("Dropout", x, n_out=2, ratio=0.3, random_seed=7)
    np.testing.assert_array_equal(mask, mask2)
    np.testing.assert_array_equal(eval_op("Dropout", x, ratio=0.3, is_test=1)[0], x)


def test_softmax_with_loss_forward():
    x, lab = randn(4, 5), np.array([0, 3, 4, 1], np.int32)
    p, loss = eval_op("SoftmaxWithLoss", x, lab, n_out=2)
    e = np.exp(x - x.max(1, keepdims=True))
    ref = e / e.sum(1, keepdims=True)
    np.testing.assert_allclose(p, ref, rtol=1e-5)
    np.testing.assert_allclose(loss, -np.log(ref[np.arange(4), lab]).mean(), rtol=1e-5)
    w = pos(4)
    _, lw = eval_op("SoftmaxWithLoss", x, lab, w, n_out=2)
    np.testing.assert_allclose(lw, (-np.log(ref[np.arange(4), lab]) * w).sum() / w.sum(), rtol=1e-5)


def test_other_losses_forward():
    x, y, lab = pos(3, 4) / 2, pos(3, 4), np.array([1, 0, 3], np.int32)
    np.testing.assert_allclose(eval_op("LabelCrossEntropy", x, lab)[0], -np.log(x[np.arange(3), lab]), rtol=1e-6)
    np.testing.assert_allclose(eval_op("CrossEntropy", x, y)[0], -(y * np.log(x)).sum(1), rtol=1e-5)
    np.testing.assert_allclose(eval_op("AveragedLoss", x)[0], x.mean(), rtol=1e-6)
    np.testing.assert_allclose(eval_op("SquaredL2Distance", x, y)[0], 0.5 * ((x - y) ** 2).sum(1), rtol=1e-5)


CONV_GRAD = [GradCase("Conv", [randn(2, 4, 6, 5), randn(4, 4 // a.get("group", 1), 3, 3), randn(4)], "ConvGradient",
                      "I0 I1 GO0", "GI1 GI2 GI0", dict(kernel=3, **a), label=f"ConvGradient{a}")
             for a in [{}, {"stride": 2, "pad": 1}, {"dilation": 2, "pad": 1}, {"group": 2}, {"group": 4}]]
GRAD_CASES = CONV_GRAD + CONV_T_GRAD + [
    GradCase("Conv", [randn(2, 5, 6, 3), randn(4, 3, 3, 3)], "ConvGradient", "I0 I1 GO0", "GI1 GI0",
             dict(kernel=3, pad=1, order="NHWC", no_bias=1), label="ConvGradient-NHWC-nobias"),
    GradCase("Conv", [randn(2, 3, 5, 5), randn(4, 3, 1, 1), randn(4)], "ConvGradient", "I0 I1 GO0", "GI1 GI2 GI0",
             dict(kernel=1), label="ConvGradient-1x1"),
    GradCase("MaxPool", [randn(2, 3, 6, 7)], "MaxPoolGradient", "I0 O0 GO0", "GI0", dict(kernel=3, stride=2, pad=1)),
    GradCase("AveragePool", [randn(2, 3, 6, 7)], "AveragePoolGradient", "I0 O0 GO0", "GI0",
             dict(kernel=3, stride=2, pad=1)),
    GradCase("AveragePool", [randn(2, 6, 7, 3)], "AveragePoolGradient", "I0 O0 GO0", "GI0",
             dict(kernel=2, stride=1, order="NHWC"), label="AveragePoolGradient-NHWC"),
    GradCase("AveragePool", [randn(2, 3, 4, 5)], "AveragePoolGradient", "I0 O0 GO0", "GI0",
             dict(global_pooling=1), label="AveragePoolGradient-global"),
    GradCase("FC", [randn(3, 2, 3), randn(4, 6), randn(4)], "FCGradient", "I0 I1 GO0", "GI1 GI2 GI0"),
    GradCase("FCTransposed", [randn(3, 6), randn(6, 4), randn(4)], "FCTransposedGradient", "I0 I1 GO0",
             "GI1 GI2 GI0"),
    GradCase("Relu", [away(3, 4)], "ReluGradient", "O0 GO0", "GI0"),
    GradCase("Sigmoid", [randn(3, 4)], "SigmoidGradient", "O0 GO0", "GI0"),
    GradCase("Tanh", [randn(3, 4)], "TanhGradient", "O0 GO0", "GI0"),
    GradCase("Softmax", [randn(3, 2, 4)], "SoftmaxGradient", "O0 GO0", "GI0"),
    GradCase("LeakyRelu", [away(3, 4)], "LeakyReluGradient", "O0 GO0", "GI0", dict(alpha=0.3)),
    GradCase("Elu", [away(3, 4)], "EluGradient", "O0 GO0", "GI0", dict(alpha=0.7)),
    GradCase("Softplus", [randn(3, 4)], "SoftplusGradient", "O0 GO0", "GI0"),
    GradCase("Clip", [away(3, 4) * 2], "ClipGradient", "O0 GO0", "GI0", dict(min=-1.1, max=1.05)),
    GradCase("PRelu", [away(2, 3, 2, 2), randn(3)], "PReluGradient", "O0 GO0 I0 I1", "GI0 GI1"),
    GradCase("SpatialBN", [randn(3, 2, 3, 3), randn(2), randn(2), randn(2), pos(2)], "SpatialBNGradient",
             "I0 I1 GO0 O3 O4", "GI0 GI1 GI2", n_out=5, label="SpatialBNGradient-train"),
    GradCase("SpatialBN", [randn(3, 3, 3, 2), randn(2), randn(2), randn(2), pos(2)], "SpatialBNGradient",
             "I0 I1 GO0 O3 O4", "GI0 GI1 GI2", dict(order="NHWC"), n_out=5, label="SpatialBNGradient-NHWC"),
    GradCase("SpatialBN", [randn(3, 2, 3, 3), randn(2), randn(2), randn(2), pos(2)], "SpatialBNGradient",
             "I0 I1 GO0 I3 I4", "GI0 GI1 GI2", dict(is_test=1), label="SpatialBNGradient-test"),
    GradCase("LRN", [randn(2, 6, 3, 3)], "LRNGradient", "I0 O0 GO0", "GI0", dict(size=5, alpha=0.1, beta=0.75)),
    GradCase("LRN", [randn(2, 5, 2, 2)], "LRNGradient", "I0 O0 GO0", "GI0", dict(size=4, alpha=0.2, beta=0.5),
             label="LRNGradient-even"),
    GradCase("Dropout", [randn(4, 5)], "DropoutGrad", "GO0 O1", "GI0", dict(ratio=0.4, random_seed=3), n_out=2),
    GradCase("Dropout", [randn(4, 5)], "DropoutGrad", "GO0", "GI0", dict(ratio=0.4, is_test=1),
             label="DropoutGrad-test"),
    GradCase("ChannelShuffle", [randn(2, 6, 2, 2)], "ChannelShuffleGradient", "GO0", "GI0", dict(group=2)),
    GradCase("SoftmaxWithLoss", [randn(4, 5), np.array([1, 0, 4, 2], np.int32)], "SoftmaxWithLossGradient",
             "I0 I1 O0 GO1", "GI0", n_out=2, out=1),
    GradCase("SoftmaxWithLoss", [randn(4, 5), np.array([1, 0, 4, 2], np.int32), pos(4)], "SoftmaxWithLossGradient",
             "I0 I1 I2 O0 GO1", "GI0", dict(scale=0.5), n_out=2, out=1, label="SoftmaxWithLossGradient-weighted"),
    GradCase("LabelCrossEntropy", [pos(3, 4) / 2, np.array([1, 0, 3], np.int32)], "LabelCrossEntropyGradient",
             "I0 I1 GO0", "GI0"),
    GradCase("CrossEntropy", [pos(3, 4) / 2, pos(3, 4)], "CrossEntropyGradient", "I0 I1 GO0", "GI0"),
    GradCase("AveragedLoss", [randn(3, 4)], "AveragedLossGradient", "I0 GO0", "GI0"),
    GradCase("SquaredL2Distance", [randn(3, 4), randn(3, 4)], "SquaredL2DistanceGradient", "I0 I1 GO0", "GI0 GI1"),
]


@pytest.mark.parametrize("c", GRAD_CASES, ids=str)
def test_gradient_kernel_matches_numeric(c, fixed_caffe2):
    # NOTE: against the mathematics, so with netviz's fixes on (SpatialBNGradient in test mode)
    check_grad_case(c)
