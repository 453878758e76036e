"""Optimizer ops of training nets (what Caffe2's optimizer.py emits): Iter, LearningRate, MomentumSGD(Update),
Adagrad and its sparse / row-wise / decay forms, Adam and its sparse forms, Adadelta, Ftrl, GFtrl, RmsProp,
Storm, Wngrad, Lars, LearningRateAdaption, SparseNormalize, SparseLpRegularizer, RowWiseCounter.

Sparse ops update the rows `indices` of their (in-place) state; Caffe2 walks the indices in order,
so a repeated index is updated again from its new value: :func:`_sparse_rounds` keeps that order
while each round is one vectorised update of distinct rows."""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from engine.runtime import device as dev
from engine.runtime.grad_makers import no_gradient, should_not_do_gradient
from engine.errors import ExecutionError
from engine.runtime.fidelity import fixes_enabled
from engine.model.opdef import arg_value
from engine.catalogue.registry import gradient, kernel
from engine.catalogue.registry import shape
from engine.runtime.shapes import FLOAT, INT64, TensorInfo, dims, same_as

# ---- kernels ----

@kernel("Iter", needs_context=True)
def iter_(xp, it=None, *, ctx):
    # NOTE: with no input Iter reads its own output blob; a fresh blob starts at 0 and is incremented.
    if it is None:
        cur = ctx.workspace.values.get(ctx.op.output[0])
        it = cur if hasattr(cur, "shape") else np.zeros(1, dtype=np.int64)
    return (it + 1).astype(np.int64)


@kernel("AtomicIter", needs_context=True)
def atomic_iter(xp, mutex, it, *, ctx):
    """Iter under the mutex (engine.runtime.executor.MUTEX_OPS), with Caffe2's num_iter stat."""
    from engine.runtime.ops.stateful import atomic_increment  # noqa: PLC0415  (stateful imports no optimizer)
    return atomic_increment(ctx, it)


def _warmup_linear(i: int, start: float, n: int) -> float:
    """linearWarmup: from `start` up to 1 over `n` iterations, then 1."""
    return 1.0 if i >= n else start + (1.0 - start) * i / n


def _inv(i: int, gamma: float, power: float) -> float:
    return (1.0 + gamma * i) ** -power


def _cyclical(i: int, base_lr: float, max_lr: float, stepsize: int, decay: float) -> float:
    """cyclical (arXiv 1506.01186): a triangle of period 2*stepsize between 1 and max_lr/base_lr."""
    x = abs(i / stepsize - 2 * (i // (2 * stepsize) + 1) + 1)
    return 1 + (abs(max_lr) / abs(base_lr) - 1) * max(0.0, 1 - x) * decay ** (i // (2 * stepsize))


def _cosine(i: int, min_lr: float, max_lr: float, period: int, t_mult: float, shrink: float) -> float:
    """cosine (arXiv 1608.03983): restarts every period (growing by t_mult), both bounds shrunk per restart."""
    if t_mult != 1.0:
        k = math.floor(math.log(1 - i / period * (1.0 - t_mult)) / math.log(t_mult))
        t_i, t_cur = t_mult ** k * period, i - (1.0 - t_mult ** k) / (1.0 - t_mult) * period
    else:
        k = i // period
        t_i, t_cur = period, i - period * k
    lo, hi = min_lr * shrink ** k, max_lr * shrink ** k
    return lo + 0.5 * (hi - lo) * (1 + math.cos(math.pi * t_cur / t_i))


def _then_warmup(i: int, a: Callable[[str, Any], Any], after: Callable[[int], float]) -> float:
    """constantThenLinearWarmup's two warm-up stages, then `after(i - both stages)`."""
    m, nc, nl = a("start_warmup_multiplier", 0.1), a("constant_warmup_num_iter", 10_000_000), \
        a("linear_warmup_num_iter", 10_000_000)
    if i < nc:
        return m
    return _warmup_linear(i - nc, m, nl) if i < nc + nl else after(i - nc - nl)


#: LearningRate's policies: multiplier of base_lr at iteration i, reading args through a(name, default)
#: (a sub-policy of "composite" reads its own ``sub_policy_<k>_`` args); names and defaults are Caffe2's.
LR_POLICIES: dict[str, Callable[[int, Callable[[str, Any], Any], float], float]] = {
    "fixed": lambda i, a, b: 1.0,
    "alter": lambda i, a, b: float((i % (a("active_period", -1) + a("inactive_period", -1))
                                    < (a("active_period", -1) if a("active_first", 1) else a("inactive_period", -1)))
                                   == bool(a("active_first", 1))),
    "hill": lambda i, a, b: (_warmup_linear(i, a("start_multiplier", 0.0), a("num_iter", 0)) if i < a("num_iter", 0)
                             else max(a("end_multiplier", 0.0),
                                      _inv(i - a("num_iter", 0), a("gamma", 0.0), a("power", 0.0)))),
    "slope": lambda i, a, b: (a("multiplier_1", 0.0) if i < a("num_iter_1", 0) else max(
        a("multiplier_1", 0.0) + (i - a("num_iter_1", 0)) * (a("multiplier_2", 0.0) - a("multiplier_1", 0.0))
        / (a("num_iter_2", 0) - a("num_iter_1", 0)), a("multiplier_2", 0.0))),
    "step": lambda i, a, b: a("gamma", 0.0) ** (i // a("stepsize", 0)),
    "exp": lambda i, a, b: a("gamma", 0.0) ** i,
    "gate": lambda i, a, b: a("multiplier_2", 1.0) if i >= a("num_iter", 0) else a("multiplier_1", 1.0),
    "inv": lambda i, a, b: _inv(i, a("gamma", 0.0), a("power", 0.0)),
    "poly": lambda i, a, b: np.float64(1 - i / a("max_iter", -1)) ** a("power", 0.0),  # NaN past max_iter
    "linearWarmup": lambda i, a, b: _warmup_linear(i, a("start_multiplier", 0.0), a("num_iter", 0)),
    "constantWarmup": lambda i, a, b: 1.0 if i >= a("num_iter", 0) else a("multiplier", 0.5),
    "pieceWarmup": lambda i, a, b: (a("m1", 0.5) if i < a("n1", 0) else a("m2", 0.5) if i < a("n2", 0)
                                    else a("m3", 0.5)),
    "cyclical": lambda i, a, b: _cyclical(i, b, a("max_lr", 0.005), a("stepsize", 0), a("decay", 1.0)),
    "constantThenLinearWarmup": lambda i, a, b: _then_warmup(i, a, lambda _: 1.0),
    "compositeCyclical": lambda i, a, b: _then_warmup(i, a, lambda j: _cyclical(
        j, b, a("cyclical_max_lr", 0.05), a("cyclical_step_size", 1_000_000), a("cyclical_decay", 1.0))),
    "cosine": lambda i, a, b: _cosine(i, a("min_lr", 0.1), a("max_lr", 0.5), a("period", 50), a("t_mult", 1.0),
                                      a("lr_shrink", 0.99)),
    "compositeCosine": lambda i, a, b: _then_warmup(i, a, lambda j: _cosine(
        j, a("cosine_min_lr", 0.1), a("cosine_max_lr", 0.5), a("cosine_period", 50), a("cosine_t_mult", 1.0),
        a("cosine_lr_shrink", 0.99))),
}


def _composite(i: int, op: Any, base_lr: float) -> float:
    """composite: sub-policy k (args ``sub_policy_<k>_*``, scaled by its ``lr_scale``) runs for
    ``sub_policy_num_iters[k]`` iterations, the first from iteration 1; each sees the global iteration."""
    counts = list(arg_value(op, "sub_policy_num_iters", []))
    if not counts or min(counts) <= 0:
        raise ValueError("composite LearningRate needs sub_policy_num_iters, each positive")
    k = min(max(int(np.searchsorted(np.cumsum([1] + counts), i, side="right")) - 1, 0), len(counts) - 1)
    pre = f"sub_policy_{k}_"
    sub = arg_value(op, pre + "policy", "")
    if sub not in LR_POLICIES:
        raise ValueError(f"Unknown learning rate policy: {sub} (composite sub-policy {k})")
    return LR_POLICIES[sub](i, lambda n, d: arg_value(op, pre + n, d), base_lr) * arg_value(op, pre + "lr_scale", 1.0)


@kernel("LearningRate", needs_context=True)
def learning_rate(xp, it, *, ctx, base_lr: float = float(np.finfo(np.float32).max), policy: str = ""):
    # NOTE: lr = base_lr * multiplier(iter), in float32; training nets pass a NEGATIVE base_lr for descent.
    # A 0-d tensor, as Caffe2 1.10's kernel writes (its shape inference says the iteration's shape).
    if base_lr == float(np.finfo(np.float32).max) or not policy:
        raise ValueError("LearningRate needs base_lr and policy")
    i = int(dev.to_host(it).reshape(-1)[0])
    with np.errstate(all="ignore"):
        return xp.asarray(np.float32(base_lr) * np.float32(_lr_multiplier(i, ctx.op, policy, base_lr)))


def _lr_multiplier(i: int, op: Any, policy: str, base_lr: float) -> float:
    if policy == "composite":
        return _composite(i, op, base_lr)
    if policy not in LR_POLICIES:
        raise ValueError(f"Unknown learning rate policy: {policy}")
    return LR_POLICIES[policy](i, lambda n, d: arg_value(op, n, d), base_lr)


def _lr(lr):
    return lr.reshape(-1)[0]


@kernel("MomentumSGD")
def momentum_sgd(xp, g, m, lr, *, momentum: float = 0.0, nesterov: int = 0):
    return _momentum(g, m, lr, momentum, nesterov)[:2]


def _momentum(g, m, lr, momentum, nesterov):
    lr, mu = _lr(lr), g.dtype.type(momentum)
    if not nesterov:
        adj = lr * g + mu * m
        return adj, adj, adj
    m_new = mu * m + lr * g
    return (1 + mu) * m_new - mu * m, m_new, None


@kernel("MomentumSGDUpdate")
def momentum_sgd_update(xp, g, m, lr, param, *, momentum: float = 0.0, nesterov: int = 0):
    # NOTE: outputs (grad, moment, param); param -= adjusted gradient (lr is positive here).
    g_out, m_new, _ = _momentum(g, m, lr, momentum, nesterov)
    return g_out, m_new, param - g_out


@kernel("Adagrad")
def adagrad(xp, param, h, g, lr, *, epsilon: float = 1e-5, decay: float = 1.0, weight_decay: float = 0.0):
    # NOTE: optional outputs 3 and 4: the effective learning rate and the update, elementwise.
    f = param.dtype.type
    g = g + f(weight_decay) * param
    h_new = h * f(decay) + g * g
    eff = _lr(lr) / (xp.sqrt(h_new) + f(epsilon))
    upd = eff * g
    return param + upd, h_new, eff, upd


@kernel("Adam")
def adam(xp, param, m1, m2, g, lr, it, *, beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-5):
    corr = _adam_correction(it, beta1, beta2)
    b1, b2 = param.dtype.type(beta1), param.dtype.type(beta2)
    m1n, m2n = b1 * m1 + (1 - b1) * g, b2 * m2 + (1 - b2) * g * g
    step = corr * m1n / (xp.sqrt(m2n) + param.dtype.type(epsilon))
    return param + _lr(lr) * step, m1n, m2n, step  # NOTE: the optional 4th output is the step before lr


def _adam_correction(it, beta1, beta2):
    """``sqrt(1 - beta2^t) / (1 - beta1^t)`` at ``t = iter + 1``, from the float32 betas, as Caffe2."""
    t = float(dev.to_host(it).reshape(-1)[0]) + 1
    b1, b2 = float(np.float32(beta1)), float(np.float32(beta2))
    return np.float32(np.sqrt(1 - b2 ** t) / (1 - b1 ** t))


def _sparse_rounds(indices):
    """Positions of `indices` in rounds of distinct rows, each round in first-come order: round r holds
    the (r+1)-th occurrence of every row (applying the rounds in turn = Caffe2's sequential loop)."""
    idx = np.asarray(dev.to_host(indices)).reshape(-1).astype(np.int64)
    if idx.size == 0:
        return []
    order = np.argsort(idx, kind="stable")
    s = idx[order]
    start = np.r_[0, np.flatnonzero(s[1:] != s[:-1]) + 1]
    rank = np.arange(s.size) - np.repeat(start, np.diff(np.r_[start, s.size]))
    return [np.sort(order[rank == r]) for r in range(int(rank.max()) + 1)]


def _sparse_update(xp, indices, grad, states, rowwise, step):
    """Apply ``step(rows, g) -> new rows`` to the rows of `states` (param first) named by `indices`.

    ``states`` are copied (the op's outputs); full states are viewed as (rows, block) and the row-wise
    ones (`rowwise[k]` True) as (rows,).  `grad` is (len(indices), block)."""
    out = [s.copy() for s in states]
    n = out[0].shape[0] if out[0].ndim else 1
    views = [o.reshape(n) if rw else o.reshape(n, int(np.prod(o.shape[1:]))) for o, rw in zip(out, rowwise)]
    idx = np.asarray(dev.to_host(indices)).reshape(-1).astype(np.int64)
    g = grad.reshape(idx.size, -1) if idx.size else grad
    for pos in _sparse_rounds(indices):
        rows = xp.asarray(idx[pos])
        new = step([v[rows] for v in views], g[xp.asarray(pos)])
        for v, r in zip(views, new):
            v[rows] = r
    return tuple(out)


@kernel("SparseAdagrad")
def sparse_adagrad(xp, param, h, indices, g, lr, *, epsilon: float = 1e-5, weight_decay: float = 0.0,
                   decay: float = 1.0):
    if decay != 1.0:
        raise ExecutionError("Decay is not supported for SparseAdagrad (decay must be 1.0)")
    f, a = param.dtype.type, _lr(lr)

    def step(rows, gr):
        w, hh = rows
        gr = gr + f(weight_decay) * w
        hh = hh + gr * gr
        return w + a * gr / (xp.sqrt(hh) + f(epsilon)), hh
    return _sparse_update(xp, indices, g, (param, h), (False, False), step)


@kernel("RowWiseSparseAdagrad")
def row_wise_sparse_adagrad(xp, param, h, indices, g, lr, counter=None, *, epsilon: float = 1e-5,
                            weight_decay: float = 0.0, counter_halflife: int = -1):
    # NOTE: one moment per row: h += mean((g + wd * w)^2) over the row. With a row counter and
    # counter_halflife > 0, a row's weight decay is scaled by halflife / counter (rows never counted: 1).
    f, a = param.dtype.type, _lr(lr)
    wd = xp.full(param.shape[0], f(weight_decay), dtype=param.dtype)
    if counter is not None and counter_halflife > 0:
        c = counter.reshape(-1)
        wd = xp.where(c > 0, f(weight_decay) * (counter_halflife / xp.where(c > 0, c, 1)), wd).astype(param.dtype)

    def step(rows, gr):
        w, hh, d = rows
        gr = gr + d[:, None] * w
        hh = hh + (gr * gr).mean(axis=1)
        return w + gr * (a / (xp.sqrt(hh) + f(epsilon)))[:, None], hh, d
    return _sparse_update(xp, indices, g, (param, h, wd), (False, True, True), step)[:2]


FUSED_ADAGRAD = tuple(f"{rw}SparseAdagradFusedWithSparseLengths{kind}Gradient{approx}" for rw in ("", "RowWise")
                      for kind in ("Sum", "WeightedSum", "Mean") for approx in ("", "Approx"))


@kernel(*FUSED_ADAGRAD, needs_context=True)
def sparse_adagrad_fused(xp, param, h, *rest, ctx, epsilon: float = 1e-5, weight_decay: float = 0.0,
                         decay: float = 1.0):
    # NOTE: the gradient of a SparseLengths{Sum,WeightedSum,Mean} lookup, fed straight into (row-wise)
    # sparse Adagrad: every index of segment s steps with the segment's gradient row (Mean: / length,
    # WeightedSum: x its weight). WeightedSum also outputs each index's weight gradient <g_s, param row>,
    # from the parameters before any update (Approx: as updated so far, Caffe2's fused loop).
    t = ctx.op.type
    weighted, rowwise, approx = "WeightedSum" in t, t.startswith("RowWise"), t.endswith("Approx")
    if decay != 1.0:
        raise ExecutionError("Decay is not supported for SparseSimdAdagradOp (decay must be 1.0)")
    aux, (indices, g, lr, lengths) = (rest[0], rest[1:]) if weighted else (None, rest)
    lens = dev.to_host(lengths).reshape(-1).astype(np.int64)
    if lens.size != g.shape[0]:
        raise ExecutionError(f"{t}: {lens.size} lengths for {g.shape[0]} segment gradients")
    seg = xp.asarray(np.repeat(np.arange(lens.size), lens))
    rows = g.reshape(g.shape[0], -1)[seg]
    if "Mean" in t:
        rows = rows / xp.asarray(np.maximum(lens, 1))[seg][:, None].astype(g.dtype)
    if weighted:
        # NOTE: Caffe2 (exact mode) weights index i by aux[its position within its segment], wrong from
        # the second non-empty segment on; --fix-caffe2 uses its own weight aux[i] (docs/fidelity.md).
        local = np.arange(lens.sum()) - np.repeat(np.cumsum(lens) - lens, lens)
        w_of = xp.arange(aux.size) if fixes_enabled() else xp.asarray(local)
        rows = rows * aux.reshape(-1)[w_of][:, None]
    f, a = param.dtype.type, _lr(lr)
    idx = xp.asarray(dev.to_host(indices).reshape(-1).astype(np.int64))
    p2 = param.reshape(param.shape[0], -1)
    aux_grad = (g.reshape(g.shape[0], -1)[seg] * p2[idx]).sum(axis=1) if weighted else None
    seen = []

    def step(r, gr):
        w, hh = r
        if approx and weighted:
            seen.append(w)
        gr = gr + f(weight_decay) * w
        if rowwise:
            hh = hh + (gr * gr).mean(axis=1)
            return w + gr * (a / (xp.sqrt(hh) + f(epsilon)))[:, None], hh
        hh = hh + gr * gr
        return w + a * gr / (xp.sqrt(hh) + f(epsilon)), hh
    out = _sparse_update(xp, indices, rows, (param, h), (False, rowwise), step)
    if not weighted:
        return out
    if approx:
        for pos, w in zip(_sparse_rounds(indices), seen):
            aux_grad[xp.asarray(pos)] = (g.reshape(g.shape[0], -1)[seg[xp.asarray(pos)]] * w).sum(axis=1)
    return out + (aux_grad.astype(g.dtype),)


@kernel("DecayAdagrad")
def decay_adagrad(xp, param, m1, m2, g, lr, it, *, beta1: float = 0.9, beta2: float = 0.999,
                  epsilon: float = 1e-5, weight_decay: float = 0.0, bias_correction_first: int = 1):
    # NOTE: m2 is a plain Adagrad sum (beta2 unused); m1 is bias-corrected by 1 - beta1^t.
    f = param.dtype.type
    t = float(dev.to_host(it).reshape(-1)[0]) + 1
    c = f(1 - float(np.float32(beta1)) ** t) if bias_correction_first else f(1)
    m1n = m1 * f(beta1) + g * (1 - f(beta1))
    m2n = m2 + g * g
    return param + _lr(lr) * (m1n / c / (xp.sqrt(m2n) + f(epsilon)) + f(weight_decay) * param), m1n, m2n


def _adam_rows(xp, lr, corr, beta1, beta2, epsilon, rowwise):
    """One sparse Adam step on rows: (w, m1, m2) -> (w, m1, m2, step); row-wise m2 is the row mean."""
    f = np.float32
    b1, b2 = f(beta1), f(beta2)

    def step(rows, gr):
        w, m1, m2 = rows
        m1 = m1 * b1 + gr * (1 - b1)
        m2 = m2 * b2 + ((gr * gr).mean(axis=1) if rowwise else gr * gr) * (1 - b2)
        den = (xp.sqrt(m2)[:, None] if rowwise else xp.sqrt(m2)) + f(epsilon)
        st = corr * m1 / den
        return w + lr * st, m1, m2, st
    return step


def _radam_rows(xp, lr, it, beta1, beta2, epsilon):
    """SparseAdam's RAdam step (enableRAdam): the rectified step while rho_t >= 5, else the
    bias-corrected momentum alone."""
    f = np.float32
    t = float(dev.to_host(it).reshape(-1)[0]) + 1
    b1, b2 = float(f(beta1)), float(f(beta2))
    c1 = 1 / (1 - b1 ** t)
    corr = c1 * np.sqrt(1 - b2 ** t)
    rho_inf = 2 / (1 - b2) - 1
    rho_t = rho_inf - 2 * t * b2 ** t / (1 - b2 ** t)
    r_t = np.sqrt((rho_t - 4) * (rho_t - 2) / rho_t * rho_inf / ((rho_inf - 4) * (rho_inf - 2))) if rho_t >= 5 else 0

    def step(rows, gr):
        w, m1, m2 = rows
        m1 = m1 * f(beta1) + gr * (1 - f(beta1))
        m2 = m2 * f(beta2) + gr * gr * (1 - f(beta2))
        st = f(r_t * corr) * m1 / (xp.sqrt(m2) + f(epsilon)) if rho_t >= 5 else f(c1) * m1
        return w + lr * st, m1, m2, st
    return step


@kernel("SmartDecaySparseAdam")
def smart_decay_sparse_adam(xp, param, m1, m2, last_seen, indices, g, lr, it, *, beta1: float = 0.9,
                            beta2: float = 0.999, epsilon: float = 1e-5):
    # NOTE: a row unseen for k steps decays its moments by beta^k and catches up the momentum it missed:
    # catchup = m * beta1 * (1 - beta1^(k-1)) / (1 - beta1) for k > 1; no bias correction.
    f = np.float32
    t = int(dev.to_host(it).reshape(-1)[0]) + 1
    b1, b2, a = f(beta1), f(beta2), _lr(lr)

    def step(rows, gr):
        w, mm1, mm2, seen = rows
        k = (t - seen).astype(f)[:, None]
        catchup = xp.where(k > 1, mm1 * b1 * (1 - b1 ** (k - 1)) / (1 - b1), 0).astype(f)
        mm1 = mm1 * b1 ** k + gr * (1 - b1)
        mm2 = mm2 * b2 ** k + gr * gr * (1 - b2)
        return w + a * (mm1 + catchup) / (xp.sqrt(mm2) + f(epsilon)), mm1, mm2, xp.full(seen.shape, t, seen.dtype)
    return _sparse_update(xp, indices, g, (param, m1, m2, last_seen), (False, False, False, True), step)


@kernel("SparseAdam", "RowWiseSparseAdam", needs_context=True)
def sparse_adam(xp, param, m1, m2, indices, g, lr, it, *, ctx, beta1: float = 0.9, beta2: float = 0.999,
                epsilon: float = 1e-5, enableRAdam: int = 0):
    # NOTE: the optional 4th output is each gradient row's step (before lr), in the order of `indices`.
    rowwise = ctx.op.type == "RowWiseSparseAdam"
    if enableRAdam and not rowwise:
        inner = _radam_rows(xp, _lr(lr), it, beta1, beta2, epsilon)
    else:
        inner = _adam_rows(xp, _lr(lr), _adam_correction(it, beta1, beta2), beta1, beta2, epsilon, rowwise)
    steps = xp.zeros(g.shape, dtype=g.dtype)
    sv = steps.reshape(steps.shape[0] if steps.ndim else 1, -1) if steps.size else steps
    positions = []

    def step(rows, gr):
        *new, st = inner(rows, gr)
        positions.append(st)
        return new
    out = _sparse_update(xp, indices, g, (param, m1, m2), (False, False, rowwise), step)
    for pos, st in zip(_sparse_rounds(indices), positions):
        sv[xp.asarray(pos)] = st
    return out + (steps,)


def _adadelta_rows(xp, lr, epsilon, decay):
    f = np.float32
    eps, dec = f(epsilon), f(decay)

    def step(rows, gr):
        w, h, d = rows
        h = dec * h + (1 - dec) * gr * gr
        ng = xp.sqrt(d + eps) / xp.sqrt(h + eps) * gr
        return w + lr * ng, h, dec * d + (1 - dec) * ng * ng
    return step


@kernel("Adadelta")
def adadelta(xp, param, h, d, g, lr, *, epsilon: float = 1e-5, decay: float = 0.95):
    return tuple(_adadelta_rows(xp, _lr(lr), epsilon, decay)([param, h, d], g))


@kernel("SparseAdadelta")
def sparse_adadelta(xp, param, h, d, indices, g, lr, *, epsilon: float = 1e-5, decay: float = 0.95):
    return _sparse_update(xp, indices, g, (param, h, d), (False,) * 3, _adadelta_rows(xp, _lr(lr), epsilon, decay))


def _ftrl_params(alpha_in, alpha, beta, lambda1, lambda2):
    a = float(dev.to_host(alpha_in).reshape(-1)[0]) if alpha_in is not None else alpha
    return np.float32(1.0 / a), np.float32(beta), np.float32(lambda1), np.float32(lambda2)


def _ftrl_rows(xp, p):
    """FTRL-proximal on (w, n_z) rows; n_z interleaves (n, z) per weight."""
    alpha_inv, beta, l1, l2 = p

    def step(rows, gr):
        w, nz = rows
        nz = nz.reshape(w.shape + (2,))
        n, z = nz[..., 0], nz[..., 1]
        new_n = n + gr * gr
        new_z = z + gr - (xp.sqrt(new_n) - xp.sqrt(n)) * alpha_inv * w
        new_w = xp.where(xp.abs(new_z) > l1, (l1 * xp.sign(new_z) - new_z) / ((beta + xp.sqrt(new_n)) * alpha_inv + l2),
                         0).astype(w.dtype)
        return new_w, xp.stack([new_n, new_z], axis=-1).reshape(w.shape[0], -1)
    return step


@kernel("Ftrl")
def ftrl(xp, var, nz, g, alpha_in=None, *, alpha: float = 0.005, beta: float = 1.0, lambda1: float = 0.001,
         lambda2: float = 0.001):
    w, n2 = _ftrl_rows(xp, _ftrl_params(alpha_in, alpha, beta, lambda1, lambda2))(
        [var.reshape(1, -1), nz.reshape(1, -1)], g.reshape(1, -1))
    return w.reshape(var.shape), n2.reshape(nz.shape)


@kernel("SparseFtrl")
def sparse_ftrl(xp, var, nz, indices, g, alpha_in=None, *, alpha: float = 0.005, beta: float = 1.0,
                lambda1: float = 0.001, lambda2: float = 0.001):
    step = _ftrl_rows(xp, _ftrl_params(alpha_in, alpha, beta, lambda1, lambda2))
    w, n2 = _sparse_update(xp, indices, g, (var, nz.reshape(var.shape[0], -1)), (False, False), step)
    return w, n2.reshape(nz.shape)


@kernel("GFtrl")
def gftrl(xp, var, nz, g, alpha_in=None, *, alpha: float = 0.005, beta: float = 1.0, lambda1: float = 0.001,
          lambda2: float = 0.001):
    # NOTE: group lasso over the output dim: a column j is zeroed unless ||z[:, j]|| > lambda1 * sqrt(rows).
    alpha_inv, b, l1, l2 = _ftrl_params(alpha_in, alpha, beta, lambda1, lambda2)
    rows = g.shape[0]
    w, g2 = var.reshape(rows, -1), g.reshape(rows, -1)
    n, z = nz.reshape(rows, -1, 2)[..., 0], nz.reshape(rows, -1, 2)[..., 1]
    new_n = n + g2 * g2
    new_z = z + g2 - (xp.sqrt(new_n) - xp.sqrt(n)) * alpha_inv * w
    norm = xp.sqrt((new_z * new_z).sum(axis=0, keepdims=True))
    thr = l1 * np.float32(np.sqrt(rows))
    shrink = thr / xp.where(norm > 0, norm, 1) - 1
    new_w = xp.where(norm > thr, new_z * shrink / ((b + xp.sqrt(new_n)) * alpha_inv + l2), 0).astype(var.dtype)
    return new_w.reshape(var.shape), xp.stack([new_n, new_z], axis=-1).reshape(nz.shape)


@kernel("RmsProp")
def rms_prop(xp, g, ms, mom, lr, *, decay: float = 0.9, momentum: float = 0.0, epsilon: float = 1e-5):
    # NOTE: outputs (grad, mean_squares, momentum); the new gradient is the new momentum.
    f = g.dtype.type
    ms_new = ms + (1 - f(decay)) * (g * g - ms)
    mom_new = mom * f(momentum) + _lr(lr) * g / xp.sqrt(f(epsilon) + ms_new)
    return mom_new, ms_new, mom_new


def _storm_rows(xp, lr, gsq_new, momentum, beta):
    nlr = np.float32(lr * (np.float32(beta) + gsq_new) ** (-1.0 / 3.0))
    alpha = np.float32(np.float32(momentum) * nlr * nlr)

    def step(rows, gr):
        w, m = rows
        m = gr + (1 - alpha) * (m - gr)
        return w + nlr * m, m
    return step


@kernel("Storm")
def storm(xp, param, moment, gsq, g, lr, *, momentum: float = 10.0, beta: float = 0.1):
    gsq_new = gsq + (g * g).sum(dtype=np.float32)
    w, m = _storm_rows(xp, float(dev.to_host(_lr(lr))), float(dev.to_host(gsq_new).reshape(-1)[0]), momentum,
                       beta)([param, moment], g)
    return w, m, gsq_new.astype(gsq.dtype)


@kernel("SparseStorm")
def sparse_storm(xp, param, moment, gsq, g, indices, lr, *, momentum: float = 10.0, beta: float = 0.1):
    # NOTE: inputs (param, moment, grad_sq_sum, grad, indices, lr): grad BEFORE indices, unlike the others.
    if indices.size == 0:
        return param.copy(), moment.copy(), gsq.copy()
    gsq_new = gsq + (g * g).sum(dtype=np.float32)
    step = _storm_rows(xp, float(dev.to_host(_lr(lr))), float(dev.to_host(gsq_new).reshape(-1)[0]), momentum, beta)
    return _sparse_update(xp, indices, g, (param, moment), (False, False), step) + (gsq_new.astype(gsq.dtype),)


@kernel("Wngrad")
def wngrad(xp, param, seq_b, g, lr, *, epsilon: float = 1e-5):
    # NOTE: optional outputs: the effective lr (shape of seq_b) and the update.
    f = param.dtype.type
    b = seq_b.reshape(-1)[0]
    eff = _lr(lr) / (b + f(epsilon))
    upd = eff * g
    b_new = seq_b + (g * g).sum(dtype=np.float32) / (b + f(epsilon))
    return param + upd, b_new.astype(seq_b.dtype), xp.full(seq_b.shape, eff, dtype=seq_b.dtype), upd


@kernel("SparseWngrad")
def sparse_wngrad(xp, param, seq_b, indices, g, lr, *, epsilon: float = 1e-5):
    # NOTE: every row steps with the OLD seq_b; seq_b then grows by sum(g^2) / seq_b (no epsilon there).
    if indices.size == 0:
        return param.copy(), seq_b.copy()
    f = param.dtype.type
    b = seq_b.reshape(-1)[0]
    a = _lr(lr) / (b + f(epsilon))
    w, = _sparse_update(xp, indices, g, (param,), (False,), lambda rows, gr: (rows[0] + a * gr,))
    return w, (seq_b + (g * g).sum(dtype=np.float32) / b).astype(seq_b.dtype)


@kernel("YellowFin")
def yellow_fin(xp, param, moment, lr_avg, mu_avg, curv_win, g_avg, g2_avg, scalars, g, it, *, beta: float = 0.999,
               curv_win_width: int = 20, epsilon: float = 1e-6, nesterov: int = 0, zero_debias: int = 1):
    # NOTE: one momentum-SGD step with the CURRENT lr/mu (inputs 2, 3; Caffe2 reads its in-place outputs
    # before writing them), then the curvature / variance / distance moving averages and, from iter 2 on,
    # the tuned lr and mu (the cubic's root). scalars = [|g| avg, |g|^2 avg, min avg, max avg, distance avg].
    f = np.float32
    b, eps, one = f(beta), f(epsilon), f(1)
    t = int(dev.to_host(it).reshape(-1)[0])
    deb = one / (one - b ** t) if zero_debias else one
    mu, lr = mu_avg.reshape(-1)[0], lr_avg.reshape(-1)[0]
    m_new = mu * moment + lr * g
    p_new = param - m_new if not nesterov else param - (1 + mu) * m_new + mu * moment

    def ma(x, avg):  # (new average, debiased)
        new = b * avg + (one - b) * x
        return new, deb * new
    g_avg_new, g_deb = ma(g, g_avg)
    g2_avg_new, _ = ma(g * g, g2_avg)
    sc = dev.to_host(scalars).astype(f).reshape(-1)
    gn2 = max(eps, f((g.astype(f) * g).sum()))
    gn2_avg, gn2_deb = ma(f(gn2), sc[1])
    gn_avg, _ = ma(f(np.sqrt(gn2)), sc[0])
    win = curv_win.copy()
    win.reshape(-1)[(t - 1) % curv_win_width] = np.log(gn2)
    valid = dev.to_host(win).reshape(-1)[:min(curv_win_width, t)]
    mn_avg, mn_deb = ma(f(valid.min()), sc[2])
    mx_avg, mx_deb = ma(f(valid.max()), sc[3])
    mn_deb, mx_deb = max(eps, f(np.exp(mn_deb))), max(eps, f(np.exp(mx_deb)))
    variance = max(eps, f(gn2_deb - f(dev.to_host((g_deb * g_deb).sum()))))
    dist_avg, dist_deb = ma(f(gn_avg / gn2_avg), sc[4])
    lr_out, mu_out = lr_avg.copy(), mu_avg.copy()
    if t > 1:
        ratio = np.sqrt(mx_deb / mn_deb)
        limit = (ratio - 1) / (ratio + 1)
        pp = (dist_deb * mn_deb) ** 2 / (2 * variance)
        w3 = (-np.sqrt(pp * pp + f(4 / 27) * pp ** 3) - pp) / 2
        w = np.sign(w3) * np.abs(w3) ** f(1 / 3) if w3 != 0 else f(0)
        root = w - pp / 3 / w + 1
        mu_t = max(root * root, limit * limit)
        lr_t = (1 - np.sqrt(mu_t)) ** 2 / mn_deb
        mu_out = xp.asarray(ma(f(mu_t), mu_avg)[0], dtype=mu_avg.dtype)
        lr_out = xp.asarray(ma(f(lr_t), lr_avg)[0], dtype=lr_avg.dtype)
    sc_new = xp.asarray(np.array([gn_avg, gn2_avg, mn_avg, mx_avg, dist_avg], f).reshape(scalars.shape))
    return p_new, m_new, lr_out, mu_out, win, g_avg_new, g2_avg_new, sc_new


@kernel("Lars")
def lars(xp, x, dx, wd, trust, lr_max, *, offset: float = 0.5, lr_min: float = 0.02):
    # NOTE: trust / (|dX| / |X| + wd + offset), clipped to [lr_min, lr_max]; 1 * trust-free when |X| = 0.
    xn = xp.sqrt((x.astype(np.float32) ** 2).sum())
    dn = xp.sqrt((dx.astype(np.float32) ** 2).sum())
    w = wd.reshape(-1)[0]
    val = xp.where(xn > 0, trust.reshape(-1)[0] / (dn / xp.where(xn > 0, xn, 1) + w + np.float32(offset)), 1.0)
    return xp.clip(val, np.float32(lr_min), lr_max.reshape(-1)[0]).reshape(1).astype(np.float32)


@kernel("LearningRateAdaption")
def learning_rate_adaption(xp, lr, g, eg, *, lr_alpha: float = 0.01, normalized_lr_adaption: int = 1):
    if lr.size != 1:
        raise ValueError(f"the learning rate must hold one value, got {lr.size}")
    x = (g * eg).sum(dtype=np.float32)
    a = np.float32(lr_alpha)
    if normalized_lr_adaption:
        y = xp.maximum(xp.sqrt((g * g).sum(dtype=np.float32)), np.float32(1e-12))
        z = xp.maximum(xp.sqrt((eg * eg).sum(dtype=np.float32)), np.float32(1e-12))
        return (lr * (1 - a * x / (y * z))).astype(lr.dtype)
    return (lr - a * x).astype(lr.dtype)


@kernel("SparseMomentumSGDUpdate")
def sparse_momentum_sgd_update(xp, g, m, lr, param, indices, *, momentum: float = 0.0, nesterov: int = 0):
    # NOTE: outputs (grad, moment, param); the output grad holds each gradient row's adjusted value.
    g_out = xp.zeros(g.shape, dtype=g.dtype)
    gv = g_out.reshape(indices.size, -1) if indices.size else g_out
    adjusted = []

    def step(rows, gr):
        mm, w = rows
        adj, m_new, _ = _momentum(gr, mm, lr, momentum, nesterov)
        adjusted.append(adj)
        return m_new, w - adj
    m_new, w_new = _sparse_update(xp, indices, g, (m, param), (False, False), step)
    for pos, adj in zip(_sparse_rounds(indices), adjusted):
        gv[xp.asarray(pos)] = adj
    return g_out, m_new, w_new


@kernel("SparseNormalize", "Float16SparseNormalize")
def sparse_normalize(xp, param, indices, g=None, *, use_max_norm: int = 1, norm: float = 1.0):
    # NOTE: each named row is rescaled to L2 norm `norm` (use_max_norm: only rows above it); eps 1e-12.
    f = np.float32

    def step(rows, _):
        w = rows[0].astype(np.float32)
        nrm = xp.sqrt((w * w).sum(axis=1, keepdims=True)) + f(1e-12)
        scale = f(norm) / nrm
        if use_max_norm:
            scale = xp.where(nrm < f(norm), f(1), scale)
        return ((w * scale).astype(param.dtype),)
    return _sparse_update(xp, indices, xp.zeros((indices.size, 1), dtype=np.float32), (param,), (False,), step)


@kernel("SparseLpRegularizer")
def sparse_lp_regularizer(xp, param, indices, g=None, *, p: float = 2.0, reg_lambda: float = 1e-5):
    lam = np.float32(reg_lambda)
    if p == 2.0:
        fn = lambda rows, _: (rows[0] * (1 - lam),)  # noqa: E731
    elif p == 1.0:
        fn = lambda rows, _: (xp.where(rows[0] < -lam, rows[0] + lam,  # noqa: E731
                                       xp.where(rows[0] > lam, rows[0] - lam, 0)).astype(param.dtype),)
    else:
        raise ExecutionError(f"SparseLpRegularizer: only p = 1 or 2 is implemented (as in Caffe2), got p = {p}")
    return _sparse_update(xp, indices, xp.zeros((indices.size, 1), dtype=np.float32), (param,), (False,), fn)


@kernel("RowWiseCounter")
def row_wise_counter(xp, prev_iter, counter, indices, it, *, counter_halflife: int = -1):
    # NOTE: counter = 1 + exp(-delta_iter * ln2 / halflife) * counter per named row; nothing when halflife <= 0.
    if indices.size == 0 or counter_halflife <= 0:
        return prev_iter.copy(), counter.copy()
    cur = int(dev.to_host(it).reshape(-1)[0])
    rho = np.log(2.0) / counter_halflife

    def step(rows, _):
        pi, c = rows
        delta = xp.maximum(0, cur - pi)
        return xp.maximum(cur, pi), 1.0 + xp.exp(-delta * rho) * c
    return _sparse_update(xp, indices, xp.zeros((indices.size, 1)), (prev_iter, counter), (True, True), step)


# ---- gradients ----
no_gradient("Iter", "AtomicIter", "LearningRate")
should_not_do_gradient("MomentumSGD", "MomentumSGDUpdate", "Adagrad", "SparseAdagrad", "Adam", "RowWiseSparseAdagrad",
                       "SmartDecaySparseAdam", "YellowFin", *FUSED_ADAGRAD,
                       "DecayAdagrad", "SparseAdam", "RowWiseSparseAdam", "Adadelta", "SparseAdadelta", "Ftrl",
                       "SparseFtrl", "GFtrl", "RmsProp", "Storm", "SparseStorm", "Wngrad", "SparseWngrad", "Lars",
                       "SparseMomentumSGDUpdate", "SparseNormalize", "Float16SparseNormalize", "RowWiseCounter")
no_gradient("LearningRateAdaption")


# ---- shapes ----

shape("Iter", "AtomicIter")(lambda *_: TensorInfo((1,), INT64))
shape("LearningRate")(lambda it: TensorInfo(it.shape, FLOAT))  # NOTE: Caffe2's inference: the iteration's shape
shape("MomentumSGD")(same_as(0, 1))  # [g, m, lr] -> adjusted g, m
shape("MomentumSGDUpdate")(same_as(0, 1, 3))  # [g, m, lr, param] -> g, m, param
shape("Adagrad")(same_as(0, 1, 2, 2))  # [param, h, g, lr] -> param, h, (effective lr, update)
shape("Adam")(same_as(0, 1, 2, 3))  # [param, m1, m2, g, lr, it] -> param, m1, m2, (step)
shape("SparseAdagrad", "RowWiseSparseAdagrad", "Ftrl", "SparseFtrl", "GFtrl")(same_as(0, 1))
shape("DecayAdagrad", "Adadelta", "SparseAdadelta", "Storm", "SparseStorm")(same_as(0, 1, 2))
shape("SparseAdam", "RowWiseSparseAdam")(same_as(0, 1, 2, 4))
shape("SmartDecaySparseAdam")(same_as(0, 1, 2, 3))
shape("YellowFin")(same_as(0, 1, 2, 3, 4, 5, 6, 7))
shape(*FUSED_ADAGRAD)(lambda p, h, *rest: (p, h, TensorInfo(dims(rest[1])[:1], FLOAT)))  # aux_grad: per index
shape("RmsProp")(same_as(0, 1, 2))  # [g, ms, mom, lr] -> g, ms, mom
shape("Wngrad")(same_as(0, 1, 1, 2))
shape("SparseWngrad")(same_as(0, 1))
shape("SparseMomentumSGDUpdate")(same_as(0, 1, 3))
shape("SparseNormalize", "Float16SparseNormalize", "SparseLpRegularizer", "LearningRateAdaption")(same_as(0))
shape("RowWiseCounter")(same_as(0, 1))
shape("Lars")(lambda *_: TensorInfo((1,), FLOAT))
