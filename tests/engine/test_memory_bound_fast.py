"""The fast paths of the memory-bound ops (issue 46: SpatialBN and its gradient over (N*C, HW) rows,
MaxPool's gradient, Relu's gradient, the fused SpatialBN + Relu of run_compiled) against plain float64
references: odd sizes, both orders, batch 1, an empty batch, many blocks over several threads."""
from __future__ import annotations

import numpy as np
import pytest

from engine.runtime import parallel
from engine.runtime.ops import norm, pool
from engine.runtime.workspace import eval_op
from tests.engine.kernel_cases import randn

SHAPES = [(3, 5, 7, 9), (1, 4, 5, 3), (1, 2, 5, 3), (2, 3, 1, 1), (5, 7, 11), (2, 3, 4, 5, 3)]


@pytest.fixture(params=["plain", "fast"])
def fast(request, monkeypatch):
    """Both paths: 'fast' forces the cut (every array counts as big, tiny blocks, three threads)."""
    if request.param == "fast":
        monkeypatch.setattr(parallel, "MIN_BYTES", 0)
        monkeypatch.setattr(parallel, "THREADS", 3)
        monkeypatch.setattr(norm, "ROW_BLOCK", 64)
    return request.param


def _nchw(x, order):
    return x if order == "NCHW" else np.moveaxis(x, -1, 1)


def bn_train_ref(x, scale, bias, mean, var, eps, momentum, order):
    """Training SpatialBN in float64 (Caffe2's formulas): Y, running mean/var, saved mean, inverse std."""
    xc = _nchw(x, order).astype(np.float64)
    axes = (0, *range(2, xc.ndim))
    bm, bv = xc.mean(axis=axes), xc.var(axis=axes)
    inv = 1 / np.sqrt(bv + eps)
    sh = (1, -1) + (1,) * (xc.ndim - 2)
    y = (xc - bm.reshape(sh)) * (inv * scale).reshape(sh) + bias.reshape(sh)
    cnt = xc.size // xc.shape[1]
    unbiased = bv * cnt / max(cnt - 1, 1)
    return (np.moveaxis(y, 1, -1) if order == "NHWC" else y, mean * momentum + bm * (1 - momentum),
            var * momentum + unbiased * (1 - momentum), bm, inv)


def bn_grad_ref(x, scale, dy, mean, inv, order):
    """SpatialBNGradient in float64 from the saved mean and inverse std: dX, dscale, dbias."""
    xc, dyc = _nchw(x, order).astype(np.float64), _nchw(dy, order).astype(np.float64)
    axes, sh = (0, *range(2, xc.ndim)), (1, -1) + (1,) * (xc.ndim - 2)
    xhat = (xc - mean.reshape(sh)) * inv.reshape(sh)
    dbias, dscale = dyc.sum(axis=axes), (dyc * xhat).sum(axis=axes)
    m = xc.size // xc.shape[1]
    dx = (scale * inv).reshape(sh) * (dyc - (dbias.reshape(sh) + xhat * dscale.reshape(sh)) / m)
    return np.moveaxis(dx, 1, -1) if order == "NHWC" else dx, dscale, dbias


def _close(got, want, tol=2e-5):
    for g, w in zip(got, want):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * max(1.0, float(np.abs(w).max(initial=0))))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
def test_spatial_bn_training_matches_reference(fast, shape, order):
    c = shape[1] if order == "NCHW" else shape[-1]
    x = (randn(*shape) * 3 + 2).astype(np.float32)  # NOTE: a mean away from 0, as after a conv
    scale, bias, mean, var = randn(c), randn(c), randn(c), np.abs(randn(c)) + 0.5
    got = eval_op("SpatialBN", x, scale, bias, mean, var, is_test=0, order=order, n_out=5, epsilon=1e-4)
    _close(got, bn_train_ref(x, scale, bias, mean, var, 1e-4, 0.9, order))
    assert got[0].flags.c_contiguous and got[0].shape == x.shape


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
def test_spatial_bn_test_mode_matches_reference(fast, shape, order):
    c = shape[1] if order == "NCHW" else shape[-1]
    x, scale, bias, mean, var = randn(*shape), randn(c), randn(c), randn(c), np.abs(randn(c)) + 0.5
    sh = [1] * x.ndim
    sh[1 if order == "NCHW" else -1] = c
    want = (x - mean.reshape(sh)) / np.sqrt(var.reshape(sh) + 1e-5) * scale.reshape(sh) + bias.reshape(sh)
    _close(eval_op("SpatialBN", x, scale, bias, mean, var, is_test=1, order=order), [want])


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
def test_spatial_bn_gradient_matches_reference(fast, shape, order):
    c = shape[1] if order == "NCHW" else shape[-1]
    x, dy = (randn(*shape) * 2 + 1).astype(np.float32), randn(*shape)
    scale, mean, inv = randn(c), _nchw(x, order).mean(axis=(0, *range(2, x.ndim))), np.abs(randn(c)) + 0.5
    got = eval_op("SpatialBNGradient", x, scale, dy, mean, inv, order=order, n_out=3)
    _close(got, bn_grad_ref(x, scale, dy, mean, inv, order))


def test_spatial_bn_empty_batch_keeps_running_stats(fast):
    x = np.zeros((0, 3, 4, 5), np.float32)
    scale, bias, mean, var = randn(3), randn(3), randn(3), np.abs(randn(3)) + 0.5
    y, rm, rv, sm, si = eval_op("SpatialBN", x, scale, bias, mean, var, is_test=0, n_out=5)
    assert y.shape == x.shape
    np.testing.assert_array_equal(rm, mean)
    np.testing.assert_array_equal(rv, var)
    dx, ds, db = eval_op("SpatialBNGradient", x, scale, x, sm, si, n_out=3)
    assert dx.shape == x.shape and not ds.any() and not db.any()


def test_spatial_bn_non_contiguous_input_takes_the_plain_path(fast):
    x = randn(4, 6, 5, 8)[:, :, :, ::2]
    scale, bias, mean, var = randn(6), randn(6), randn(6), np.abs(randn(6)) + 0.5
    got = eval_op("SpatialBN", x, scale, bias, mean, var, is_test=0, n_out=5)
    _close(got, bn_train_ref(x, scale, bias, mean, var, 1e-5, 0.9, "NCHW"))


POOLS = [((3, 5, 9, 8), dict(kernel=3, stride=2, pad=1)), ((1, 2, 7, 7), dict(kernel=3, stride=1, pad=1)),
         ((2, 3, 10, 11), dict(kernel=2, stride=2)), ((2, 3, 9), dict(kernels=[3], strides=[2], pads=[1, 0])),
         ((2, 2, 5, 6, 7), dict(kernel=3, stride=2, pad=1)), ((2, 3, 8, 9), dict(kernel_h=3, kernel_w=2, stride_h=2,
                                                                                  stride_w=1, pad_t=1, pad_b=0))]


@pytest.mark.parametrize("shape, args", POOLS, ids=lambda c: str(c) if isinstance(c, tuple) else "")
@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
def test_max_pool_gradient_fast_equals_plain(monkeypatch, no_jit, shape, args, order):
    """The plane-block path gives the plain path's values exactly (same sums, same order), ties included
    (the compiled kernels off: they take big 2-D maps first; tests/engine/test_pool_jit.py tests them)."""
    x = np.round(randn(*shape) * 2) / 2  # NOTE: many ties: every element equal to the max gets dY
    if order == "NHWC":
        x = np.ascontiguousarray(np.moveaxis(x, 1, -1))
    y = eval_op("MaxPool", x, order=order, **args)[0]
    dy = randn(*y.shape)
    want = eval_op("MaxPoolGradient", x, y, dy, order=order, **args)[0]
    monkeypatch.setattr(parallel, "MIN_BYTES", 0)
    monkeypatch.setattr(parallel, "THREADS", 3)
    monkeypatch.setattr(pool, "PLANE_BLOCK", 64)
    got = eval_op("MaxPoolGradient", x, y, dy, order=order, **args)[0]
    np.testing.assert_array_equal(got, want)
    assert got.dtype == dy.dtype and got.shape == x.shape
    # the gradient moves dY's total mass onto the maxima: each window's dY goes to each of its ties
    counts = eval_op("MaxPoolGradient", x, y, np.ones_like(dy), order=order, **args)[0]
    assert counts.sum() >= dy.size


def _net(*ops):
    from engine.model.opdef import create_operator  # noqa: PLC0415
    from proto import caffe2_pb2  # noqa: PLC0415

    net = caffe2_pb2.NetDef(name="fuse")
    for t, ins, outs, args in ops:
        net.op.append(create_operator(t, ins, outs, **args))
    return net


def _fused_and_apart(net, feeds, marks):
    """The blobs after run_compiled and after running each op alone (run_bound), with the fusion marks
    checked against `marks`."""
    from engine.runtime import executor  # noqa: PLC0415
    from engine.runtime.workspace import Workspace  # noqa: PLC0415

    results = []
    for fused in (True, False):
        ws = Workspace("fuse")
        for k, v in feeds.items():
            ws.values[k], ws.devices[k] = v.copy(), 0
        c = executor.compile_net(net, ws)
        assert [b.fused is not None for b in c.ops] == marks
        if fused:
            executor.run_compiled(c, ws)
        else:
            for b in c.ops:
                executor.run_bound(b, ws)
        results.append(ws.values)
    got, want = results
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    return got


@pytest.mark.parametrize("is_test", [0, 1])
def test_run_compiled_fuses_in_place_relus_with_the_values_of_the_ops_apart(fast, is_test):
    bn_out = ["y"] + ([] if is_test else ["rm", "rv", "sm", "si"])
    net = _net(("SpatialBN", ["x", "s", "b", "rm", "rv"], bn_out, dict(is_test=is_test)),
               ("Relu", ["y"], ["y"], {}),
               ("Sum", ["y", "x"], ["z"], {}), ("Relu", ["z"], ["z"], {}),
               ("Sum", ["z", "x"], ["w"], {}), ("Relu", ["w"], ["r"], {}),  # not in place: not fused
               ("SpatialBN", ["r", "s", "b", "rm", "rv"], ["q"], dict(is_test=1)), ("Relu", ["q"], ["q"], {}))
    feeds = dict(x=randn(3, 5, 7, 6), s=randn(5), b=randn(5), rm=randn(5), rv=np.abs(randn(5)) + 0.5)
    got = _fused_and_apart(net, feeds, [True, False, True, False, False, False, True, False])
    assert (got["y"] >= 0).all() and (got["y"] == 0).any() and (got["q"] >= 0).all()


def test_fused_pair_failure_names_the_first_op():
    from engine.errors import ExecutionError  # noqa: PLC0415
    from engine.runtime import executor  # noqa: PLC0415
    from engine.runtime.workspace import Workspace  # noqa: PLC0415

    net = _net(("SpatialBN", ["x", "s", "b", "rm", "rv"], ["y"], dict(is_test=1)), ("Relu", ["y"], ["y"], {}))
    ws = Workspace("fuse")
    for k, v in dict(x=randn(2, 0, 3), s=randn(0), b=randn(0), rm=randn(0), rv=randn(0)).items():
        ws.values[k], ws.devices[k] = v, 0
    c = executor.compile_net(net, ws)
    assert c.ops[0].fused is not None
    with pytest.raises(ExecutionError, match=r"op #0 SpatialBN .*no channels"):
        executor.run_compiled(c, ws)
    assert "y" not in ws.values


@pytest.mark.parametrize("shape", [(3, 5, 7, 6), (1, 2, 4, 3), (2, 3, 5)], ids=str)
def test_run_compiled_fuses_relu_gradient_into_spatial_bn_gradient(fast, shape):
    c = shape[1]
    net = _net(("ReluGradient", ["y", "g"], ["g"], {}),
               ("SpatialBNGradient", ["x", "s", "g", "sm", "si"], ["dx", "ds", "db"], {}),
               ("ReluGradient", ["y", "g2"], ["h"], {}),  # G also as X: not fused
               ("SpatialBNGradient", ["h", "s", "h", "sm", "si"], ["dx2", "ds2", "db2"], {}))
    x = randn(*shape)
    feeds = dict(y=np.maximum(randn(*shape), 0), g=randn(*shape), g2=randn(*shape), x=x, s=randn(c),
                 sm=x.mean(axis=(0, *range(2, x.ndim))), si=np.abs(randn(c)) + 0.5)
    got = _fused_and_apart(net, feeds, [True, False, False, False])
    assert (got["g"] == 0).any() and np.abs(got["dx"]).sum() > 0
    taken = norm.relu_gradient_then_spatial_bn_gradient(feeds["y"], feeds["g"], x, feeds["s"], feeds["sm"], feeds["si"])
    assert (taken is not None) == (fast == "fast")  # small arrays: the pair runs apart


@pytest.mark.parametrize("shape, args", POOLS, ids=lambda c: str(c) if isinstance(c, tuple) else "")
@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
def test_max_pool_fast_equals_plain(monkeypatch, no_jit, shape, args, order):
    x = randn(*shape)
    if order == "NHWC":
        x = np.ascontiguousarray(np.moveaxis(x, 1, -1))
    want = eval_op("MaxPool", x, order=order, **args)[0]
    monkeypatch.setattr(parallel, "MIN_BYTES", 0)
    monkeypatch.setattr(parallel, "THREADS", 3)
    monkeypatch.setattr(pool, "PLANE_BLOCK", 64)
    got = eval_op("MaxPool", x, order=order, **args)[0]
    np.testing.assert_array_equal(got, want)
    assert got.shape == want.shape and got.dtype == want.dtype


def test_empty_arrays_on_the_forced_fast_paths(fast, monkeypatch):
    monkeypatch.setattr(pool, "PLANE_BLOCK", 64)
    x = np.zeros((0, 3, 4, 5), np.float32)
    s = randn(3)
    assert eval_op("SpatialBN", x, s, s, s, np.abs(s) + 1, is_test=1)[0].shape == x.shape
    y = eval_op("MaxPool", x, kernel=3, stride=2, pad=1)[0]
    assert y.shape == (0, 3, 2, 3)
    assert eval_op("MaxPoolGradient", x, y, y, kernel=3, stride=2, pad=1)[0].shape == x.shape
    assert eval_op("Sum", x, x)[0].shape == x.shape



def test_split_does_every_block_once_even_when_the_helper_thread_is_held(monkeypatch):
    """A helper thread that cannot run (held here by another task, as another process holds a core on a
    loaded machine) does not stall split: the caller takes every block; each block runs once."""
    import threading  # noqa: PLC0415

    monkeypatch.setattr(parallel, "THREADS", 2)
    monkeypatch.setattr(parallel, "MIN_BYTES", 0)
    release = threading.Event()
    parallel._executor().submit(release.wait)  # the one helper thread is busy until released
    seen: list[tuple[int, int]] = []
    x = np.arange(40, dtype=np.float32).reshape(20, 2)

    def run() -> None:
        parallel.split(lambda t: seen.append((int(t(x)[0, 0]), len(t(x)))), x.shape, x.nbytes, block_bytes=16)
    worker = threading.Thread(target=run)
    worker.start()
    worker.join(30)
    finished = not worker.is_alive()
    release.set()
    worker.join()
    assert finished, "split waited for a helper thread that never ran"
    assert sorted(seen) == [(i * 4, 2) for i in range(10)]


def test_split_raises_a_blocks_error_in_the_caller(monkeypatch):
    monkeypatch.setattr(parallel, "MIN_BYTES", 0)
    monkeypatch.setattr(parallel, "THREADS", 2)

    def part(t):
        if t(np.arange(8))[0] == 4:
            raise ValueError("block 4")
    with pytest.raises(ValueError, match="block 4"):
        parallel.split(part, (8,), 64, block_bytes=16)
