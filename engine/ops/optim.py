"""Optimizer ops of training nets: Iter, LearningRate, WeightedSum updates, MomentumSGDUpdate, Adagrad, Adam."""
from __future__ import annotations

import numpy as np

from engine import device as dev
from engine.grad_makers import no_gradient, should_not_do_gradient
from engine.registry import gradient, kernel
from engine.registry import shape
from engine.shapes import FLOAT, INT64, TensorInfo, same_as

# ---- kernels ----

@kernel("Iter", needs_context=True)
def iter_(xp, it=None, *, ctx):
    # NOTE: with no input Iter reads its own output blob; a fresh blob starts at 0 and is incremented.
    if it is None:
        cur = ctx.workspace.values.get(ctx.op.output[0])
        it = cur if hasattr(cur, "shape") else np.zeros(1, dtype=np.int64)
    return (it + 1).astype(np.int64)


@kernel("AtomicIter")
def atomic_iter(xp, _mutex, it):
    return (it + 1).astype(np.int64)


@kernel("LearningRate")
def learning_rate(xp, it, *, base_lr: float = 0.01, policy: str = "fixed", gamma: float = 0.0,
                  stepsize: int = 1, power: float = 1.0, max_iter: int = 1, stepsizes: list = ()):
    # NOTE: lr = base_lr * multiplier(iter); training nets pass a NEGATIVE base_lr for descent.
    i = float(dev.to_host(it).reshape(-1)[0])
    mult = {"fixed": lambda: 1.0, "step": lambda: gamma ** (i // stepsize), "exp": lambda: gamma ** i,
            "inv": lambda: (1 + gamma * i) ** -power, "poly": lambda: (1 - i / max_iter) ** power,
            "multistep": lambda: gamma ** sum(i >= s for s in stepsizes)}[policy]()
    return xp.asarray(np.array(base_lr * mult, dtype=np.float32))  # NOTE: a 0-d tensor, as in Caffe2 1.10


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
def adagrad(xp, param, h, g, lr, *, epsilon: float = 1e-5, decay: float = 1.0):
    h_new = h * h.dtype.type(decay) + g * g
    return param + _lr(lr) * g / (xp.sqrt(h_new) + h.dtype.type(epsilon)), h_new


@kernel("Adam")
def adam(xp, param, m1, m2, g, lr, it, *, beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-5):
    t = float(dev.to_host(it).reshape(-1)[0]) + 1
    corr = np.float32(np.sqrt(1 - beta2 ** t) / (1 - beta1 ** t))
    b1, b2 = param.dtype.type(beta1), param.dtype.type(beta2)
    m1n, m2n = b1 * m1 + (1 - b1) * g, b2 * m2 + (1 - b2) * g * g
    return param + _lr(lr) * corr * m1n / (xp.sqrt(m2n) + param.dtype.type(epsilon)), m1n, m2n


# ---- gradients ----
no_gradient("Iter", "AtomicIter", "LearningRate")
should_not_do_gradient("MomentumSGD", "MomentumSGDUpdate", "Adagrad", "SparseAdagrad", "Adam")


# ---- shapes ----

shape("Iter", "AtomicIter")(lambda *_: TensorInfo((1,), INT64))
shape("LearningRate")(lambda it: TensorInfo((), FLOAT))  # NOTE: a 0-d tensor, as in Caffe2 1.10
shape("MomentumSGD")(same_as(0, 1))  # [g, m, lr] -> adjusted g, m
shape("MomentumSGDUpdate")(same_as(0, 1, 3))  # [g, m, lr, param] -> g, m, param
shape("Adagrad")(same_as(0, 1))  # [param, h, g, lr] -> param, h
shape("Adam")(same_as(0, 1, 2))  # [param, m1, m2, g, lr, it] -> param, m1, m2
