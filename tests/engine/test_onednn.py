"""Convolutions through oneDNN (engine/runtime/onednn.py) against the NumPy reference path (issue 46).

The NumPy path (``onednn.ENABLED = False``) is the reference.  Agreement is norm-wise per output,
``||onednn - numpy|| <= 1e-6 * ||same op on |inputs| ||``: the two sum the same float32 products in
different orders, so their difference is bounded by the sums of the products' magnitudes, not by the sums
themselves (a dW entry of a few terms that cancel to near zero differs by 1.2e-6 of ``||dW||``, measured).
On ResNet-sized sums (25k terms per dW entry) both paths are held to their distance from a float64
conv instead.  Every test checks that oneDNN really ran (``onednn.CALLS``).  Skipped where oneDNN is not
installed (``pip install netviz[fast]``).
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine.runtime.ops  # noqa: F401  (fills the kernel table)
from engine.runtime import onednn
from engine.runtime.ops import conv as conv_ops
from engine.runtime.workspace import eval_op

pytestmark = pytest.mark.skipif(not onednn.available(),
                                reason="oneDNN is not installed (netviz[fast]) or NETVIZ_ONEDNN=0")

TOL = 1e-6


@pytest.fixture(params=["auto", "plain", "blocked"])
def layout(request, monkeypatch):
    """Each layout policy: the user's buffers as they are, oneDNN's blocked layout with reorders, or the mix;
    the small drawn convs run on one thread under "auto" (SERIAL_FLOPS), on the whole team under the others."""
    monkeypatch.setattr(onednn, "LAYOUT", request.param)
    monkeypatch.setattr(onednn, "ALLOW_REF", True)  # NOTE: every drawn shape through oneDNN, odd ones too
    monkeypatch.setattr(onednn, "_CACHE", {})  # NOTE: refusals remembered outside these tests do not count
    if request.param != "auto":
        monkeypatch.setattr(onednn, "SERIAL_FLOPS", 0.0)
    monkeypatch.setattr(onednn, "MIN_1X1_PIXELS", 0)  # NOTE: the drawn maps are small
    monkeypatch.setattr(conv_ops, "FAST_CONV", True)
    return request.param


def _both(monkeypatch, op_type, *inputs, n_out=1, **args):
    """(numpy, onednn) outputs of one op, and the number of oneDNN primitive runs it took."""
    monkeypatch.setattr(onednn, "ENABLED", False)
    ref = eval_op(op_type, *inputs, n_out=n_out, **args)
    monkeypatch.setattr(onednn, "ENABLED", True)
    before = sum(onednn.CALLS.values())
    got = eval_op(op_type, *inputs, n_out=n_out, **args)
    return ref, got, sum(onednn.CALLS.values()) - before


def _agree(monkeypatch, op_type, inputs, ref, got, n_out=1, **args):
    """Each output within TOL of the magnitude of its sums (the NumPy op on the inputs' absolute values)."""
    monkeypatch.setattr(onednn, "ENABLED", False)
    scale = eval_op(op_type, *(np.abs(a) for a in inputs), n_out=n_out, **args)
    monkeypatch.setattr(onednn, "ENABLED", True)
    for a, b, s in zip(ref, got, scale):
        assert a.shape == b.shape and a.dtype == b.dtype
        err, norm = np.linalg.norm((b - a).ravel()), np.linalg.norm(s.ravel())
        assert err <= TOL * norm, f"{err / norm:.2e} of the magnitude"


problems = st.fixed_dictionaries({
    "nd": st.sampled_from([2, 2, 2, 1, 3]), "n": st.integers(1, 3), "c": st.integers(1, 5), "m": st.integers(1, 4),
    "group": st.sampled_from([1, 1, 2, 3]), "size": st.lists(st.integers(1, 13), min_size=3, max_size=3),
    "k": st.lists(st.integers(1, 4), min_size=3, max_size=3), "stride": st.lists(st.sampled_from([1, 1, 2, 3]),
                                                                                 min_size=3, max_size=3),
    "dilation": st.lists(st.sampled_from([1, 1, 2, 3]), min_size=3, max_size=3),
    "pads": st.lists(st.integers(0, 3), min_size=6, max_size=6), "order": st.sampled_from(["NCHW", "NHWC"]),
    "bias": st.booleans(), "seed": st.integers(0, 2 ** 16)})


def _out(p):
    nd = p["nd"]
    return [(p["size"][i] + p["pads"][i] + p["pads"][nd + i] - p["dilation"][i] * (p["k"][i] - 1) - 1)
            // p["stride"][i] + 1 for i in range(nd)]


def _problem(p):
    """Inputs and args (the list spellings, any number of spatial dims) of one drawn Conv."""
    nd, g = p["nd"], p["group"]
    c, m = p["c"] * g, p["m"] * g
    r = np.random.default_rng(p["seed"])
    x = r.standard_normal((p["n"], c) + tuple(p["size"][:nd])).astype(np.float32)
    w = r.standard_normal((m, c // g) + tuple(p["k"][:nd])).astype(np.float32)
    if p["order"] == "NHWC":
        x, w = np.moveaxis(x, 1, -1).copy(), np.moveaxis(w, 1, -1).copy()
    ins = [x, w] + ([r.standard_normal(m).astype(np.float32)] if p["bias"] else [])
    args = dict(kernels=p["k"][:nd], strides=p["stride"][:nd], dilations=p["dilation"][:nd], group=g,
                pads=p["pads"][:nd] + p["pads"][nd:2 * nd], order=p["order"])
    return ins, args


# NOTE: Caffe2's NHWC conv is 2-D only (the NumPy path follows it), so NHWC draws keep nd = 2
cases = problems.filter(lambda p: min(_out(p)) >= 1 and (p["order"] == "NCHW" or p["nd"] == 2))
# NOTE: and 16-40 channels a group: the blocked layouts' real blocks (nChw16c and a padded tail), which the
# forward and dX take from the dW primitive (onednn._in_weights_layout)
cases = st.one_of(cases, cases.flatmap(lambda p: st.fixed_dictionaries(
    {"c": st.sampled_from([16, 24, 40]), "m": st.sampled_from([16, 17, 40])}).map(lambda cm: {**p, **cm})))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(p=cases)
def test_conv_forward_equals_numpy(monkeypatch, layout, p):
    ins, args = _problem(p)
    ref, got, ran = _both(monkeypatch, "Conv", *ins, **args)
    _agree(monkeypatch, "Conv", ins, ref, got, **args)
    assert ran == 1


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(p=cases, need_dx=st.booleans())
def test_conv_gradient_equals_numpy(monkeypatch, layout, p, need_dx):
    ins, args = _problem(p)
    y = eval_op("Conv", *ins, **args)[0]
    dy = np.random.default_rng(p["seed"] + 1).standard_normal(y.shape).astype(np.float32)
    if not p["bias"]:
        args["no_bias"] = 1
    n_out = (2 if p["bias"] else 1) + need_dx
    ref, got, ran = _both(monkeypatch, "ConvGradient", ins[0], ins[1], dy, n_out=n_out, **args)
    assert len(got) == n_out
    _agree(monkeypatch, "ConvGradient", [ins[0], ins[1], dy], ref, got, n_out=n_out, **args)
    assert ran == 1


@pytest.mark.parametrize("n, c, hw, m, k, s, pad", [
    (2, 64, 56, 64, 3, 1, 1),    # ResNet's 3x3 stage-1 conv
    (2, 256, 28, 128, 1, 2, 0),  # a strided 1x1 shortcut
    (2, 3, 64, 16, 7, 2, 3),     # conv1's 7x7/2 on 3 channels (fewer filters, a smaller image)
])
def test_resnet_shapes_as_close_to_float64_as_numpy(monkeypatch, layout, n, c, hw, m, k, s, pad):
    """On long float32 sums both paths are held to a float64 conv: oneDNN's error (forward, dW, db, dX)
    within 2x the NumPy path's, or 1e-6 of the value's norm."""
    r = np.random.default_rng(k)
    x = np.maximum(r.standard_normal((n, c, hw, hw)), 0).astype(np.float32)
    w = (r.standard_normal((m, c, k, k)) * np.sqrt(2 / (c * k * k))).astype(np.float32)
    b = r.standard_normal(m).astype(np.float32)
    args = dict(kernel=k, stride=s, pad=pad)
    exact = eval_op("Conv", *(a.astype(np.float64) for a in (x, w, b)), **args)
    ref, got, ran = _both(monkeypatch, "Conv", x, w, b, **args)
    dy = r.standard_normal(exact[0].shape).astype(np.float32)
    exact += eval_op("ConvGradient", x.astype(np.float64), w.astype(np.float64), dy.astype(np.float64), n_out=3,
                     **args)
    gref, ggot, gran = _both(monkeypatch, "ConvGradient", x, w, dy, n_out=3, **args)
    assert ran == gran == 1
    for e, a, o in zip(exact, ref + gref, got + ggot):
        norm = np.linalg.norm(e.ravel())
        err_numpy, err_onednn = (np.linalg.norm((v - e).ravel()) for v in (a, o))
        assert err_onednn <= max(2 * err_numpy, TOL * norm), (err_onednn / norm, err_numpy / norm)


def test_what_onednn_does_not_take_stays_on_numpy(monkeypatch):
    """float64 and empty batches run the NumPy path (no primitive), as does everything with
    NETVIZ_PLAIN_CONV's switch (FAST_CONV False) or NETVIZ_ONEDNN's (ENABLED False)."""
    r = np.random.default_rng(3)
    x, w = r.standard_normal((2, 3, 9, 9)), r.standard_normal((4, 3, 3, 3))
    before = dict(onednn.CALLS)
    eval_op("Conv", x, w, kernel=3)
    eval_op("Conv", np.zeros((0, 3, 9, 9), np.float32), w.astype(np.float32), kernel=3)
    monkeypatch.setattr(conv_ops, "FAST_CONV", False)
    eval_op("Conv", x.astype(np.float32), w.astype(np.float32), kernel=3)
    monkeypatch.setattr(conv_ops, "FAST_CONV", True)
    monkeypatch.setattr(onednn, "ENABLED", False)
    eval_op("Conv", x.astype(np.float32), w.astype(np.float32), kernel=3)
    assert onednn.CALLS == before
    monkeypatch.setattr(onednn, "ENABLED", True)
    eval_op("Conv", x.astype(np.float32), w.astype(np.float32), kernel=3)
    assert onednn.CALLS["forward"] == before["forward"] + 1


def test_netviz_onednn_0_turns_it_off():
    code = "from engine.runtime import onednn; print(onednn.available(), onednn.describe())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "NETVIZ_ONEDNN": "0"}).stdout
    assert out.strip() == "False NumPy/OpenBLAS convs (NETVIZ_ONEDNN=0)"
    assert onednn.describe().startswith(f"oneDNN {'.'.join(map(str, onednn.version()))} convs (")


def test_openmp_settings_do_not_leak_into_child_processes():
    """libgomp's variables are set only while the library loads: a process netviz starts afterwards (the
    benchmarks' PyTorch reference) sees the environment as the user left it."""
    code = ("import os; from engine.runtime import onednn; assert onednn.available(); "
            "print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('OMP_NUM_THREADS'))")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out.split() == ["None", "None"]


def test_an_unbound_version_is_refused(monkeypatch):
    """A libdnnl whose version this binding was not written against is not used (its ABI may differ)."""
    monkeypatch.setattr(onednn, "_BOUND", ((9, 0), (9, 9)))
    assert onednn._load() is None


def test_layout_policy(monkeypatch):
    """"auto" (measured on ResNet-50, benchmarks/README.md round 3): a 1x1 conv on a 7x7 map keeps NumPy's
    batch-folded GEMM, one on 14x14 runs oneDNN on the user's buffers, KxK kernels on the blocked layout
    except the dX of a layer with under 16 input channels (conv1)."""
    monkeypatch.setattr(onednn, "TUNE", False)  # NOTE: the rules, not the measured layouts
    monkeypatch.setattr(onednn, "LAYOUT", "auto")
    r = np.random.default_rng(5)
    for hw, ran in ((7, 0), (14, 1)):
        x, w = r.standard_normal((2, 8, hw, hw)).astype(np.float32), r.standard_normal((4, 8, 1, 1)).astype(np.float32)
        assert _both(monkeypatch, "Conv", x, w, kernel=1)[2] == ran
    assert not onednn.blocked((1, 1), 64) and onednn.blocked((3, 3), 64) and onednn.blocked((7, 7), 3)
    assert onednn.blocked((3, 3), 16, data_grad=True) and not onednn.blocked((7, 7), 3, data_grad=True)


def test_convs_from_two_threads_at_once(monkeypatch):
    """Kernels may run in the TUI's workers: primitives and their re-pointed memory objects are shared, so
    concurrent calls (same shapes, other values) must each get their own result."""
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    monkeypatch.setattr(conv_ops, "FAST_CONV", True)
    r = np.random.default_rng(11)
    w = r.standard_normal((8, 4, 3, 3)).astype(np.float32)
    xs = [r.standard_normal((2, 4, 12, 12)).astype(np.float32) for _ in range(8)]
    monkeypatch.setattr(onednn, "ENABLED", False)
    want = [eval_op("Conv", x, w, kernel=3, pad=1)[0] for x in xs]
    monkeypatch.setattr(onednn, "ENABLED", True)
    before = onednn.CALLS["forward"]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda x: eval_op("Conv", x, w, kernel=3, pad=1)[0], xs * 4))
    assert onednn.CALLS["forward"] - before == len(got)
    for i, y in enumerate(got):
        np.testing.assert_allclose(y, want[i % len(xs)], rtol=1e-5, atol=1e-5)


def test_a_primitive_built_on_one_thread_runs_on_another():
    """The TUI steps in pool workers: a conv's primitive is built on one and later run on another, also after
    the first has ended.  With oneDNN's own (per-thread) scratchpad that wrote into freed memory (Faster
    R-CNN's 1x1 stride-2 conv segfaulted on the second `c`); netviz passes its own.  Run in a child process so
    a crash is this test's failure, not the end of the run."""
    code = """if True:
        import threading, numpy as np
        import engine.runtime.ops
        from engine.runtime import onednn
        from engine.runtime.workspace import eval_op
        r = np.random.default_rng(3)
        x = r.standard_normal((1, 16, 60, 60)).astype(np.float32)
        cases = [(r.standard_normal((16, 16, k, k)).astype(np.float32), k, s) for k, s in ((1, 1), (3, 1), (1, 2))]
        def run():
            return [eval_op("Conv", x, w, kernel=k, stride=s, pad=k // 2)[0] for w, k, s in cases]
        out = {}
        for name in ("first", "second", "third"):
            t = threading.Thread(target=lambda n=name: out.__setitem__(n, run()))
            t.start(); t.join()
        onednn.ENABLED = False
        want = run()
        assert onednn.CALLS["forward"] == 9, onednn.CALLS
        for got in out.values():
            for a, b in zip(got, want):
                np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
        print("ok")
    """
    env = {**os.environ, "NETVIZ_PLAIN_CONV": "0"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_a_refused_problem_runs_numpy_and_is_not_asked_again(monkeypatch):
    """When oneDNN refuses a primitive (an error status), the op still answers, from the NumPy path, and the
    refusal is remembered: the descriptor is not created again for the same problem."""
    monkeypatch.setattr(conv_ops, "FAST_CONV", True)
    asked = []

    def refuse(*a):
        asked.append(a)
        onednn.check(5, "dnnl_convolution_forward_primitive_desc_create")
    monkeypatch.setattr(onednn, "_forward_pd", refuse)
    monkeypatch.setattr(onednn, "_CACHE", {})  # NOTE: the refusal is remembered in this test's cache only
    r = np.random.default_rng(13)
    x, w = r.standard_normal((2, 3, 11, 10)).astype(np.float32), r.standard_normal((5, 3, 2, 3)).astype(np.float32)
    ref, got, ran = _both(monkeypatch, "Conv", x, w, kernel_h=2, kernel_w=3, pad=1)
    assert ran == 0 and asked  # NOTE: the blocked layout's try, then format any's: each refused
    np.testing.assert_array_equal(got[0], ref[0])
    n = len(asked)
    eval_op("Conv", x, w, kernel_h=2, kernel_w=3, pad=1)
    assert len(asked) == n


def test_small_convs_run_on_one_thread(monkeypatch):
    """A conv under SERIAL_FLOPS creates and runs its primitives on a team of one (a sleeping OpenMP
    thread's wake-up cost 120 -> 400 us on a 1.2 MFLOP conv, measured); a bigger one on NETVIZ_THREADS."""
    if not onednn.lib().openmp:
        pytest.skip("this libdnnl does not thread with OpenMP")
    assert onednn.lib().omp_set_num_threads is not None, "libgomp's omp_set_num_threads was not found"
    import ctypes  # noqa: PLC0415

    gomp = ctypes.CDLL("libgomp.so.1", mode=os.RTLD_NOLOAD)
    monkeypatch.setattr(conv_ops, "FAST_CONV", True)
    r = np.random.default_rng(17)
    for c, hw, team in ((16, 16, 1), (64, 56, onednn.parallel.THREADS)):
        x, w = r.standard_normal((1, c, hw, hw)).astype(np.float32), r.standard_normal((c, c, 3, 3)).astype(np.float32)
        assert _both(monkeypatch, "Conv", x, w, kernel=3, pad=1)[2] == 1
        assert gomp.omp_get_max_threads() == team


def test_reference_implementations_are_refused(monkeypatch):
    """Where oneDNN offers only its reference loops (a 1x1 conv of one 1x1 image of one channel here; NHWC's
    OHWI weights as they were: 12 s for a 1x1 layer the NumPy path does in 11 ms), the NumPy path runs."""
    monkeypatch.setattr(onednn, "TUNE", False)  # NOTE: measured, the plain layout's GEMM kernel is taken
    monkeypatch.setattr(conv_ops, "FAST_CONV", True)
    monkeypatch.setattr(onednn, "MIN_1X1_PIXELS", 0)
    monkeypatch.setattr(onednn, "_CACHE", {})
    r = np.random.default_rng(19)
    x, w = r.standard_normal((1, 1, 1, 1)).astype(np.float32), r.standard_normal((2, 1, 1, 1)).astype(np.float32)
    ref, got, ran = _both(monkeypatch, "Conv", x, w, kernel=1)
    assert ran == 0
    np.testing.assert_array_equal(got[0], ref[0])
    monkeypatch.setattr(onednn, "ALLOW_REF", True)
    monkeypatch.setattr(onednn, "_CACHE", {})
    assert _both(monkeypatch, "Conv", x, w, kernel=1)[2] == 1
    x = r.standard_normal((2, 16, 16, 32)).astype(np.float32)  # NHWC 1x1: a JIT kernel since weights are `any`
    monkeypatch.setattr(onednn, "ALLOW_REF", False)
    ref, got, ran = _both(monkeypatch, "Conv", x, r.standard_normal((8, 1, 1, 32)).astype(np.float32), kernel=1,
                          order="NHWC")
    assert ran == 1


@pytest.mark.parametrize("stride", [1, 2])
def test_kxk_primitives_share_the_dw_primitives_layouts(monkeypatch, stride):
    """A KxK conv runs its forward and its dX on the layouts oneDNN picks for dW (nChw16c on AVX-512), so
    dY is reordered once for dW and dX.  NOTE: format `any` gave the forward an NHWC kernel, whose NCHW<->NHWC
    reorders cost more than it saves on 56x56 maps, and a strided dX an NHWC kernel that reordered dY again."""
    monkeypatch.setattr(onednn, "TUNE", False)  # NOTE: the rules, not the measured layouts
    monkeypatch.setattr(conv_ops, "FAST_CONV", True)
    monkeypatch.setattr(onednn, "_CACHE", {})
    r = np.random.default_rng(7)
    x, w = r.standard_normal((2, 64, 28, 28)).astype(np.float32), r.standard_normal((64, 64, 3, 3)).astype(np.float32)
    args = dict(kernel=3, pad=1, stride=stride)
    ref, got, ran = _both(monkeypatch, "Conv", x, w, **args)
    dy = r.standard_normal(ref[0].shape).astype(np.float32)
    gref, ggot, gran = _both(monkeypatch, "ConvGradient", x, w, dy, n_out=3, **args)
    assert ran == 1 and gran == 1
    _agree(monkeypatch, "Conv", [x, w], ref, got, **args)
    _agree(monkeypatch, "ConvGradient", [x, w, dy], gref, ggot, n_out=3, **args)
    (fwd,) = next(v for k, v in onednn._CACHE.items() if k[0] == "fwd")
    dw, dx = next(v for k, v in onednn._CACHE.items() if k[0] == "bwd")
    assert dw.same_inner(dx, onednn.ARG_DIFF_DST), "dX's dY layout is not dW's: dY reordered twice"
    assert fwd.same_inner(dw, onednn.ARG_SRC), "the forward's X layout is not dW's"


def test_a_refused_blocked_layout_falls_back_to_format_any(monkeypatch):
    """Where oneDNN has no fast kernel on the dW primitive's layouts, the forward and dX take format `any`
    (still oneDNN, still NumPy's values)."""
    monkeypatch.setattr(onednn, "TUNE", False)  # NOTE: the rules, not the measured layouts
    monkeypatch.setattr(conv_ops, "FAST_CONV", True)
    monkeypatch.setattr(onednn, "_CACHE", {})

    def refuse(self, pd):
        raise onednn.OneDNNError("no fast kernel on these layouts")
    monkeypatch.setattr(onednn._Mds, "chosen", refuse)
    r = np.random.default_rng(8)
    x, w = r.standard_normal((2, 32, 14, 14)).astype(np.float32), r.standard_normal((32, 32, 3, 3)).astype(np.float32)
    ref, got, ran = _both(monkeypatch, "Conv", x, w, kernel=3, pad=1)
    dy = r.standard_normal(ref[0].shape).astype(np.float32)
    gref, ggot, gran = _both(monkeypatch, "ConvGradient", x, w, dy, n_out=3, kernel=3, pad=1)
    assert ran == 1 and gran == 1
    _agree(monkeypatch, "Conv", [x, w], ref, got, kernel=3, pad=1)
    _agree(monkeypatch, "ConvGradient", [x, w, dy], gref, ggot, n_out=3, kernel=3, pad=1)


def test_a_plain_dw_layout_leaves_the_forward_to_format_any(monkeypatch):
    """Where the dW primitive runs on the user's plain layout (a GEMM: oneDNN's pick for 4 channels a group),
    the forward is not pinned to it: format `any` picks its blocked kernel (22 ms plain against 10 ms at
    (8, 128, 56, 56), measured)."""
    monkeypatch.setattr(onednn, "TUNE", False)  # NOTE: the rules, not the measured layouts
    monkeypatch.setattr(conv_ops, "FAST_CONV", True)
    monkeypatch.setattr(onednn, "_CACHE", {})
    seen, forward_pd = [], onednn._forward_pd

    def spy(m, bias, geo, prop):
        if prop == onednn._FWD_INFERENCE:
            seen.append(m.px)
        return forward_pd(m, bias, geo, prop)
    monkeypatch.setattr(onednn, "_forward_pd", spy)
    r = np.random.default_rng(9)
    x, w = r.standard_normal((2, 128, 28, 28)).astype(np.float32), r.standard_normal((128, 4, 3, 3)).astype(np.float32)
    ref, got, ran = _both(monkeypatch, "Conv", x, w, kernel=3, pad=1, group=32)
    assert ran == 1 and seen
    _agree(monkeypatch, "Conv", [x, w], ref, got, kernel=3, pad=1, group=32)
    plain = onednn._md(x.shape, onednn._estrides(x))
    assert not onednn.lib().memory_desc_equal(seen[-1], plain), "the forward was pinned to the plain layout"


def _forward_entry(x: np.ndarray) -> tuple:
    """The cached forward primitives of the conv whose input is shaped like `x`."""
    return next(v for k, v in onednn._CACHE.items() if k[0] == "fwd" and k[-3][0] == x.shape)


@pytest.mark.parametrize("fastest", ["plain", "blocked", "any"])
def test_the_forward_keeps_the_layout_measured_fastest(monkeypatch, fastest):
    """Under "auto" the forward is built on each layout (the user's buffers, the dW primitive's blocked
    pick, format `any`), each timed on the call's buffers, and the fastest is kept: a clock that makes
    `fastest` win decides the cached primitive, its values are NumPy's, and the others are freed."""
    monkeypatch.setattr(conv_ops, "FAST_CONV", True)
    monkeypatch.setattr(onednn, "_CACHE", {})
    monkeypatch.setattr(onednn, "LAYOUT", "auto")
    monkeypatch.setattr(onednn, "TUNE", True)  # NOTE: NETVIZ_CONV_TUNE=1
    timed = []

    def clock(prim, bufs):
        prim.run(bufs)
        timed.append(prim.layout)
        return 1.0 if prim.layout == fastest else 2.0
    monkeypatch.setattr(onednn, "_timed", clock)
    monkeypatch.setattr(onednn, "TUNE_BUDGET_S", 5.0)
    destroyed, destroy = [], onednn._Primitive.destroy

    def spy(prim):
        destroyed.append(prim.layout)
        destroy(prim)
    monkeypatch.setattr(onednn._Primitive, "destroy", spy)
    r = np.random.default_rng(10)
    x, w = r.standard_normal((2, 32, 14, 14)).astype(np.float32), r.standard_normal((32, 32, 3, 3)).astype(np.float32)
    ref, got, ran = _both(monkeypatch, "Conv", x, w, kernel=3, pad=1)
    assert ran == 1
    _agree(monkeypatch, "Conv", [x, w], ref, got, kernel=3, pad=1)
    (prim,) = _forward_entry(x)
    assert prim.layout == fastest
    assert sorted(d for d in destroyed if d) == sorted({"plain", "blocked", "any"} - {fastest}), "losers kept"
    assert sorted(set(timed)) == ["any", "blocked", "plain"]
    assert len(timed) == 2 * 3  # the clock's 6 s spent in the first two rounds pass TUNE_BUDGET_S
    n = len(timed)
    _both(monkeypatch, "Conv", x, w, kernel=3, pad=1)
    assert len(timed) == n, "a cached forward was measured again"


def test_a_layout_oneDNN_refuses_is_not_measured(monkeypatch):
    """A layout oneDNN refuses (or offers only a reference kernel on) drops out of the measuring; when it
    refuses all of them the conv runs on NumPy."""
    monkeypatch.setattr(conv_ops, "FAST_CONV", True)
    monkeypatch.setattr(onednn, "_CACHE", {})
    monkeypatch.setattr(onednn, "LAYOUT", "auto")
    monkeypatch.setattr(onednn, "TUNE", True)  # NOTE: NETVIZ_CONV_TUNE=1
    builds = {"plain": lambda: (_ for _ in ()).throw(onednn.OneDNNError("refused"))}
    with pytest.raises(onednn.OneDNNError):
        onednn._fastest(builds, {})
    forward_pd = onednn._forward_pd

    def plain_only(m, bias, geo, prop):
        if not onednn.lib().memory_desc_equal(m.px, m.x):
            raise onednn.OneDNNError("not on this layout")
        return forward_pd(m, bias, geo, prop)
    monkeypatch.setattr(onednn, "_forward_pd", plain_only)
    r = np.random.default_rng(11)
    x, w = r.standard_normal((2, 16, 9, 9)).astype(np.float32), r.standard_normal((8, 16, 3, 3)).astype(np.float32)
    ref, got, ran = _both(monkeypatch, "Conv", x, w, kernel=3, pad=1)
    assert ran == 1 and _forward_entry(x)[0].layout == "plain"
    _agree(monkeypatch, "Conv", [x, w], ref, got, kernel=3, pad=1)

    def refuse(m, bias, geo, prop):
        raise onednn.OneDNNError("no")
    monkeypatch.setattr(onednn, "_forward_pd", refuse)
    ref, got, ran = _both(monkeypatch, "Conv", x[:1], w, kernel=3, pad=1)
    assert ran == 0
    np.testing.assert_allclose(got[0], ref[0], rtol=TOL, atol=TOL)


def test_a_1x1_forward_on_a_small_map_goes_through_onednn_when_measured(monkeypatch):
    """With the forward's layout measured, a 1x1 forward on a map under MIN_1X1_PIXELS runs on oneDNN (its
    best layout beat NumPy's GEMM on ResNet's 7x7 maps at batch 1-16); its gradient stays on NumPy, and with
    TUNE off the forward does too."""
    monkeypatch.setattr(conv_ops, "FAST_CONV", True)
    monkeypatch.setattr(onednn, "_CACHE", {})
    monkeypatch.setattr(onednn, "LAYOUT", "auto")
    monkeypatch.setattr(onednn, "TUNE", True)  # NOTE: NETVIZ_CONV_TUNE=1
    r = np.random.default_rng(12)
    x, w = r.standard_normal((2, 64, 7, 7)).astype(np.float32), r.standard_normal((32, 64, 1, 1)).astype(np.float32)
    ref, got, ran = _both(monkeypatch, "Conv", x, w, kernel=1)
    assert ran == 1
    _agree(monkeypatch, "Conv", [x, w], ref, got, kernel=1)
    dy = r.standard_normal(ref[0].shape).astype(np.float32)
    assert _both(monkeypatch, "ConvGradient", x, w, dy, n_out=3, kernel=1)[2] == 0
    monkeypatch.setattr(onednn, "TUNE", False)
    assert _both(monkeypatch, "Conv", x, w, kernel=1)[2] == 0


def test_netviz_conv_tune_1_measures_the_layouts_and_the_default_takes_the_rules():
    """Unset or 0: no layout is timed (the same bits in every process, no slow first run); 1: measured."""
    code = "from engine.runtime import onednn; print(onednn.TUNE)"
    for value, want in ((None, "False"), ("0", "False"), ("1", "True")):
        env = {k: v for k, v in os.environ.items() if k != "NETVIZ_CONV_TUNE"}
        out = subprocess.run([sys.executable, "-c", code], env=env if value is None else dict(env, NETVIZ_CONV_TUNE=value),
                             capture_output=True, text=True, timeout=120)
        assert out.stdout.strip() == want, out.stderr
