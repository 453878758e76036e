"""Random and stateful ops of the sparse families: distributions, ranges and seeded reproducibility
(their oracle cases can only compare shapes and dtypes), plus behaviour Caffe2's CPU build cannot
record (SampleAs has no CPU kernel there) and the string tensors the inspector shows."""
from __future__ import annotations

import numpy as np
import pytest

from engine.runtime.workspace import eval_op
from proto import caffe2_pb2


def _seeded(seed: int) -> caffe2_pb2.DeviceOption:
    d = caffe2_pb2.DeviceOption()
    d.random_seed = seed
    return d


def test_weighted_sample_follows_the_weights_and_replays_with_a_seed() -> None:
    w = np.tile(np.array([[1.0, 0.0, 3.0]], np.float32), (4000, 1))
    (idx,) = eval_op("WeightedSample", w, device_option=_seeded(5))
    assert idx.shape == (4000, 1) and idx.dtype == np.int32
    freq = np.bincount(idx.ravel(), minlength=3) / idx.size
    assert freq[1] == 0 and abs(freq[2] - 0.75) < 0.03
    (again,) = eval_op("WeightedSample", w, device_option=_seeded(5))
    np.testing.assert_array_equal(idx, again)


def test_weighted_multi_sampling_draws_from_the_cdf_steps() -> None:
    cdf = np.array([0.2, 0.2, 0.7, 1.0], np.float32)
    (idx,) = eval_op("WeightedMultiSampling", cdf, num_samples=5000, device_option=_seeded(1))
    freq = np.bincount(idx, minlength=4) / idx.size
    assert freq[1] == 0
    np.testing.assert_allclose(freq[[0, 2, 3]], [0.2, 0.5, 0.3], atol=0.03)


def test_unique_uniform_fill_is_unique_in_range_and_avoids() -> None:
    avoid = np.array([3, 5, 7], np.int32)
    (y,) = eval_op("UniqueUniformFill", np.zeros((4, 3)), avoid, min=1, max=15, device_option=_seeded(2))
    assert y.shape == (4, 3) and y.dtype == np.int32
    assert len(set(y.ravel())) == 12 and y.min() >= 1 and y.max() <= 15
    assert not set(y.ravel()) & {3, 5, 7}
    (again,) = eval_op("UniqueUniformFill", np.zeros((4, 3)), avoid, min=1, max=15, device_option=_seeded(2))
    np.testing.assert_array_equal(y, again)
    with pytest.raises(Exception, match="unique"):
        eval_op("UniqueUniformFill", min=1, max=4, shape=[5])


def test_itemwise_dropout_rate_and_lengths() -> None:
    x = np.arange(1, 20001, dtype=np.int64)
    lengths = np.full(100, 200, np.int32)
    y, ly = eval_op("SparseItemwiseDropoutWithReplacement", x, lengths, n_out=2, ratio=0.3,
                    replacement_value=-1, device_option=_seeded(3))
    np.testing.assert_array_equal(ly, lengths)
    dropped = y == -1
    assert abs(dropped.mean() - 0.3) < 0.02
    np.testing.assert_array_equal(y[~dropped], x[~dropped])


def test_example_dropout_replaces_whole_examples() -> None:
    x = np.arange(1, 4001, dtype=np.int64)
    lengths = np.full(1000, 4, np.int32)
    y, ly = eval_op("SparseDropoutWithReplacement", x, lengths, n_out=2, ratio=0.5, replacement_value=-9,
                    device_option=_seeded(4))
    assert set(ly.tolist()) == {1, 4} and abs((ly == 1).mean() - 0.5) < 0.05
    starts = np.cumsum(ly) - ly
    assert (y[starts[ly == 1]] == -9).all()
    kept = np.concatenate([y[s:s + 4] for s in starts[ly == 4]])
    assert set(kept.tolist()) <= set(x.tolist()) and len(kept) == 4 * (ly == 4).sum()


def test_reservoir_keeps_every_row_equally_often() -> None:
    counts = np.zeros(12)
    for seed in range(600):
        res, seen = eval_op("ReservoirSampling", np.zeros((0,), np.float32), np.array([0], np.int64),
                            np.arange(12, dtype=np.float32), np.zeros(1), n_out=2, num_to_collect=3,
                            device_option=_seeded(seed))
        assert res.shape == (3,) and int(seen[0]) == 12
        counts[res.astype(int)] += 1
    np.testing.assert_allclose(counts / 600, 0.25, atol=0.07)


def test_float16_uniform_fill_range_and_dtype() -> None:
    (y,) = eval_op("Float16UniformFill", shape=[1000], min=-2.0, max=1.0, device_option=_seeded(6))
    assert y.dtype == np.float16 and y.shape == (1000,)
    assert y.min() >= -2 and y.max() <= 1 and y.std() > 0.5


def test_random_rowwise_quantisation_is_unbiased_and_seeded() -> None:
    x = np.array([[0.3, -1.4, -0.6, 0.9, 1.0]], np.float32)
    draws = [eval_op("FusedRandRowwiseQuantizedToFloat",
                     eval_op("FloatToFusedRandRowwiseQuantized", x, bitwidth=2, device_option=_seeded(s))[0])[0]
             for s in range(400)]
    levels = np.array([-1.4, -0.6, 0.2, 1.0], np.float32)
    assert all(np.isin(np.round(d, 5), np.round(levels, 5)).all() for d in draws)
    np.testing.assert_allclose(np.mean(draws, axis=0), x, atol=0.06)   # E[x'] = x
    (a,) = eval_op("FloatToFusedRandRowwiseQuantized", x, bitwidth=2, device_option=_seeded(9))
    (b,) = eval_op("FloatToFusedRandRowwiseQuantized", x, bitwidth=2, device_option=_seeded(9))
    np.testing.assert_array_equal(a, b)


def test_sample_as_and_its_gradient() -> None:
    x = np.arange(10, dtype=np.float32).reshape(5, 2)
    labels = np.array([1, 0, 2, 0, 1], np.int32)
    (y,) = eval_op("SampleAs", x, labels)
    np.testing.assert_array_equal(y, x[[0, 2, 4]])
    (dx,) = eval_op("SampleAsGradient", x, labels, np.ones((3, 2), np.float32))
    np.testing.assert_array_equal(dx.sum(axis=1), [2, 0, 2, 0, 2])


def test_string_ops_give_bytes_as_caffe2_fetches_them() -> None:
    s = np.array(["hello", "hi"], dtype=object)
    (p,) = eval_op("StringPrefix", s, length=2)
    assert p.dtype == object and p.tolist() == [b"he", b"hi"]
    (j,) = eval_op("StringJoin", np.array([[1.5, 2.0]], np.float32))
    assert j.tolist() == [b"1.5,2,"]


def test_inspector_shows_float16_and_string_blobs() -> None:
    from rich.console import Console

    from netviz.widgets.blob_inspector import histogram, stats, values_table
    (h,) = eval_op("FloatToHalf", np.array([[1.5, -2.0], [0.25, 7.0]], np.float32))
    (s,) = eval_op("StringSuffix", np.array([b"alpha", b"beta"], dtype="S"), length=3)
    console = Console(width=80, record=True)
    for arr in (h, s):
        console.print(stats(arr), values_table(arr))
    console.print(histogram(h))
    text = console.export_text()
    assert h.dtype == np.float16 and s.dtype == object   # the facts table prints these dtypes
    assert "1.5" in text and "7" in text and "pha" in text and "eta" in text
