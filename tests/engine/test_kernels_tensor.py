"""Shape/data movement, fills, copies, sparse, optimizer and utility kernels."""
from __future__ import annotations

import numpy as np
import pytest

from engine.errors import ExecutionError
from engine.runtime.workspace import eval_op
from proto import caffe2_pb2
from tests.engine.kernel_cases import GradCase, check_grad_case, pos, randn

F = caffe2_pb2.TensorProto


def test_concat_split_info_and_split():
    a, b = randn(2, 3, 4), randn(2, 5, 4)
    y, info = eval_op("Concat", a, b, n_out=2)
    np.testing.assert_array_equal(y, np.concatenate([a, b], 1))
    assert info.dtype == np.int32 and info.tolist() == [3, 5]
    y, _ = eval_op("Concat", a[None], a[None], n_out=2, order="NHWC")  # NHWC: axis 3 at any rank, as Caffe2
    assert y.shape == (1, 2, 3, 8)
    with pytest.raises(ExecutionError, match="axis 3 is out of range for 3 dims"):
        eval_op("Concat", a, a, n_out=2, order="NHWC")
    y, info = eval_op("Concat", a, a, n_out=2, axis=0, add_axis=1)
    assert y.shape == (2, 2, 3, 4)
    s0, s1 = eval_op("Split", np.concatenate([a, b], 1), info_ := np.array([3, 5], np.int32), n_out=2)
    np.testing.assert_array_equal(s0, a)
    np.testing.assert_array_equal(s1, b)
    assert [p.shape for p in eval_op("Split", randn(6, 2), n_out=3, axis=0)] == [(2, 2)] * 3
    assert [p.shape for p in eval_op("Split", randn(6, 2), n_out=2, axis=0, split=[1, 5])] == [(1, 2), (5, 2)]


def test_reshape_transpose_flatten_squeeze():
    x = randn(2, 3, 4)
    y, old = eval_op("Reshape", x, n_out=2, shape=[0, -1])
    assert y.shape == (2, 12) and old.dtype == np.int64 and old.tolist() == [2, 3, 4]
    assert eval_op("Reshape", x, np.array([4, 6], np.int64), n_out=2)[0].shape == (4, 6)
    np.testing.assert_array_equal(eval_op("Transpose", x)[0], x.T)
    np.testing.assert_array_equal(eval_op("Transpose", x, axes=[1, 0, 2])[0], x.transpose(1, 0, 2))
    assert eval_op("Flatten", x, axis=2)[0].shape == (6, 4)
    assert eval_op("FlattenToVec", x)[0].shape == (24,)
    assert eval_op("ExpandDims", x, dims=[0, 3])[0].shape == (1, 2, 3, 1, 4)
    assert eval_op("Squeeze", randn(1, 3, 1, 2), dims=[0, 2])[0].shape == (3, 2)
    assert eval_op("ResizeLike", x, randn(6, 4))[0].shape == (6, 4)
    assert eval_op("Shape", x)[0].tolist() == [2, 3, 4]
    assert eval_op("Size", x)[0] == 24


def test_slice_caffe2_negative_ends():
    x = randn(3, 5)
    np.testing.assert_array_equal(eval_op("Slice", x, starts=[0, 2], ends=[-1, -1])[0], x[:, 2:])
    np.testing.assert_array_equal(eval_op("Slice", x, starts=[1, 0], ends=[2, -2])[0], x[1:2, :4])
    np.testing.assert_array_equal(eval_op("Slice", x, np.array([0, 1]), np.array([2, 3]))[0], x[0:2, 1:3])


def test_cast_nchw_nhwc_resize_nearest():
    x = randn(2, 3, 4, 5)
    assert eval_op("Cast", x, to=F.INT32)[0].dtype == np.int32
    assert eval_op("Cast", x, to="float16")[0].dtype == np.float16
    np.testing.assert_array_equal(eval_op("NCHW2NHWC", x)[0], x.transpose(0, 2, 3, 1))
    np.testing.assert_array_equal(eval_op("NHWC2NCHW", x)[0], x.transpose(0, 3, 1, 2))
    y = eval_op("ResizeNearest", x, width_scale=2.0, height_scale=2.0)[0]
    np.testing.assert_array_equal(y, x.repeat(2, 2).repeat(2, 3))
    y = eval_op("ResizeNearest", x, width_scale=0.5, height_scale=1.5)[0]
    assert y.shape == (2, 3, 6, 2)


def test_fills():
    y = eval_op("ConstantFill", shape=[2, 3], value=1.5)[0]
    assert y.dtype == np.float32 and y.shape == (2, 3) and (y == 1.5).all()
    assert eval_op("ConstantFill", shape=[2], value=3)[0].dtype == np.int64  # int value infers INT64
    assert eval_op("ConstantFill", shape=[2], value=1, dtype=F.BOOL)[0].dtype == np.bool_
    assert eval_op("ConstantFill", randn(2, 3), extra_shape=[4])[0].shape == (2, 3, 4)
    assert eval_op("ConstantFill", np.array([4, 1], np.int64), input_as_shape=1)[0].shape == (4, 1)
    assert eval_op("ConstantFill")[0].shape == ()
    with pytest.raises(ExecutionError, match="Cannot set the shape argument"):
        eval_op("ConstantFill", randn(2), shape=[3])
    g = eval_op("GaussianFill", shape=[2000], mean=1.0, std=2.0, random_seed=1)[0]
    assert g.dtype == np.float32 and abs(g.mean() - 1) < 0.2 and abs(g.std() - 2) < 0.2
    u = eval_op("UniformFill", shape=[1000], min=-2.0, max=3.0)[0]
    assert u.min() >= -2 and u.max() <= 3
    x = eval_op("XavierFill", shape=[50, 12])[0]
    assert np.abs(x).max() <= np.sqrt(3 / 12) + 1e-6
    m = eval_op("MSRAFill", shape=[400, 50], random_seed=0)[0]
    assert abs(m.std() - np.sqrt(2 / 400)) < 0.01
    np.testing.assert_array_equal(eval_op("RangeFill", shape=[2, 3])[0], np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(eval_op("DiagonalFill", shape=[3, 3], value=2.0)[0], 2 * np.eye(3))
    np.testing.assert_array_equal(eval_op("LengthsRangeFill", np.array([2, 3], np.int32))[0], [0, 1, 0, 1, 2])
    np.testing.assert_array_equal(eval_op("GivenTensorFill", shape=[2, 2], values=[1.0, 2.0, 3.0, 4.0])[0],
                                  [[1, 2], [3, 4]])
    assert eval_op("GivenTensorIntFill", shape=[2], values=[1, 2])[0].dtype == np.int32
    assert eval_op("GivenTensorInt64Fill", shape=[2], values=[1, 2])[0].dtype == np.int64
    assert eval_op("GivenTensorBoolFill", shape=[2], values=[1, 0])[0].tolist() == [True, False]
    assert eval_op("GivenTensorStringFill", shape=[1], values=["ab"])[0].tolist() == [b"ab"]
    assert eval_op("GivenTensorByteStringToUInt8Fill", shape=[3], values=[b"abc"])[0].tolist() == [97, 98, 99]


def test_sparse_ops():
    data, idx = randn(5, 3), np.array([4, 0, 4, 2], np.int64)
    np.testing.assert_array_equal(eval_op("Gather", data, idx)[0], data[idx])
    np.testing.assert_array_equal(eval_op("Gather", data, np.array([2, 0]), axis=1)[0], data[:, [2, 0]])
    np.testing.assert_array_equal(eval_op("BatchGather", data, np.array([1, 1]))[0], data[:, [1, 1]])
    dense = eval_op("SparseToDense", idx, data[:4], data)[0]
    ref = np.zeros_like(data)
    np.add.at(ref, idx, data[:4])
    np.testing.assert_allclose(dense, ref)
    lengths = np.array([1, 0, 3], np.int32)
    y = eval_op("SparseLengthsSum", data, idx, lengths)[0]
    np.testing.assert_allclose(y, [data[4], np.zeros(3), data[[0, 4, 2]].sum(0)], rtol=1e-6)
    np.testing.assert_allclose(eval_op("SparseLengthsMean", data, idx, lengths)[0][2], data[[0, 4, 2]].mean(0),
                               rtol=1e-6)
    w = pos(4)
    np.testing.assert_allclose(eval_op("SparseLengthsWeightedSum", data, w, idx, lengths)[0][2],
                               (data[[0, 4, 2]] * w[1:, None]).sum(0), rtol=1e-6)
    np.testing.assert_allclose(eval_op("LengthsSum", data[:4], lengths)[0][2], data[1:4].sum(0), rtol=1e-6)
    x = randn(5, 3)
    out = eval_op("ScatterWeightedSum", x, np.array([2.0], np.float32), np.array([1, 3]), randn(2, 3) * 0 + 1,
                  np.array([0.5], np.float32))[0]
    np.testing.assert_allclose(out[[1, 3]], 2 * x[[1, 3]] + 0.5, rtol=1e-6)
    np.testing.assert_array_equal(out[[0, 2, 4]], x[[0, 2, 4]])
    np.testing.assert_array_equal(eval_op("ScatterAssign", x, np.array([0]), np.ones((1, 3), np.float32))[0][0], 1)


def test_sparse_lengths_sum_gradient_values_scatter_to_numeric():
    data, idx, lengths = randn(5, 3), np.array([4, 0, 4, 2], np.int64), np.array([1, 0, 3], np.int32)
    dy = randn(3, 3)
    vals = eval_op("SparseLengthsIndicesInGradientSumGradient", dy, lengths, idx)[0]
    dense = np.zeros_like(data)
    np.add.at(dense, idx, vals)
    from engine.caffe2.gradient_checker import finite_difference_op
    num = finite_difference_op("SparseLengthsSum", [data, idx, lengths], 0, dy)
    np.testing.assert_allclose(dense, num, rtol=1e-3, atol=1e-4)
    mvals = eval_op("SparseLengthsIndicesInGradientMeanGradient", dy, lengths, idx)[0]
    dense = np.zeros_like(data)
    np.add.at(dense, idx, mvals)
    np.testing.assert_allclose(dense, finite_difference_op("SparseLengthsMean", [data, idx, lengths], 0, dy),
                               rtol=1e-3, atol=1e-4)


GRAD_CASES = [
    GradCase("Slice", [randn(3, 5)], "SliceGradient", "I0 GO0", "GI0", dict(starts=[1, 0], ends=[-1, 3])),
    GradCase("ResizeNearest", [randn(2, 2, 3, 4)], "ResizeNearestGradient", "GO0 I0", "GI0",
             dict(width_scale=2.0, height_scale=1.5)),
    GradCase("BatchGather", [randn(3, 4), np.array([3, 1, 3])], "BatchGatherGradient", "I0 I1 GO0", "GI0"),
    GradCase("Gather", [randn(4, 3), np.array([2, 2, 0])], "SparseToDense", "I1 GO0 I0", "GI0",
             label="Gather-dense-gradient"),
]


@pytest.mark.parametrize("c", GRAD_CASES, ids=str)
def test_gradient_kernel_matches_numeric(c):
    check_grad_case(c)


def test_optimizer_ops():
    assert eval_op("Iter", np.array([4], np.int64))[0].tolist() == [5]
    lr = eval_op("LearningRate", np.array([10], np.int64), base_lr=-0.1, policy="step", stepsize=4, gamma=0.5)[0]
    np.testing.assert_allclose(lr, [-0.1 * 0.25], rtol=1e-6)
    np.testing.assert_allclose(eval_op("LearningRate", np.array([3], np.int64), base_lr=0.1, policy="inv",
                                       gamma=0.1, power=2.0)[0], [0.1 / 1.3 ** 2], rtol=1e-6)
    g, m, p, lr = randn(4), randn(4), randn(4), np.array([0.1], np.float32)
    g2, m2, p2 = eval_op("MomentumSGDUpdate", g, m, lr, p, n_out=3, momentum=0.9)
    np.testing.assert_allclose(m2, 0.1 * g + 0.9 * m, rtol=1e-6)
    np.testing.assert_allclose(p2, p - m2, rtol=1e-6)
    g2, m2, p2 = eval_op("MomentumSGDUpdate", g, m, lr, p, n_out=3, momentum=0.9, nesterov=1)
    mn = 0.9 * m + 0.1 * g
    np.testing.assert_allclose(p2, p - (1.9 * mn - 0.9 * m), rtol=1e-5)
    h = pos(4)
    p3, h3 = eval_op("Adagrad", p, h, g, lr, n_out=2, epsilon=1e-6)
    np.testing.assert_allclose(p3, p + 0.1 * g / (np.sqrt(h + g * g) + 1e-6), rtol=1e-5)
    m1, m2_ = randn(4), pos(4)
    p4, n1, n2 = eval_op("Adam", p, m1, m2_, g, lr, np.array([0], np.int64), n_out=3, epsilon=1e-8)
    e1, e2 = 0.9 * m1 + 0.1 * g, 0.999 * m2_ + 0.001 * g * g
    np.testing.assert_allclose(p4, p + 0.1 * np.sqrt(1 - 0.999) / (1 - 0.9) * e1 / (np.sqrt(e2) + 1e-8), rtol=1e-5)


def test_util_ops():
    pred = np.array([[0.1, 0.7, 0.2], [0.5, 0.3, 0.2], [0.2, 0.2, 0.6]], np.float32)
    lab = np.array([1, 1, 1], np.int32)  # row 3: a tie before the label counts against it
    np.testing.assert_allclose(eval_op("Accuracy", pred, lab)[0], 1 / 3)
    np.testing.assert_allclose(eval_op("Accuracy", pred, lab, top_k=2)[0], 2 / 3)
    assert eval_op("IsEmpty", np.zeros((0, 2)))[0]
    x = randn(2)
    assert eval_op("StopGradient", x)[0] is x and eval_op("Alias", x)[0] is x
    y = eval_op("Copy", x)[0]
    assert y is not x and (y == x).all()
