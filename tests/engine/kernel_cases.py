"""Shared helpers of the kernel tests: random inputs, and gradient kernels vs numeric gradients."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.runtime.workspace import eval_op
from engine.caffe2.gradient_checker import finite_difference_op

RNG = np.random.default_rng(1234)


def away(*shape: int, lo: float = 0.2) -> np.ndarray:
    """float32 values with |x| >= lo (no kinks inside a finite-difference step)."""
    return (RNG.choice([-1.0, 1.0], shape) * (lo + RNG.random(shape))).astype(np.float32)


def pos(*shape: int) -> np.ndarray:
    return (0.5 + RNG.random(shape)).astype(np.float32)


def randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@dataclass
class GradCase:
    """Forward `op` on `inputs`; gradient op `grad` reads `gin` and writes `gout` (Caffe2 layouts)."""

    op: str
    inputs: list[np.ndarray]
    grad: str
    gin: str
    gout: str
    args: dict[str, Any] = field(default_factory=dict)
    n_out: int = 1
    out: int = 0
    tol: float = 2e-3
    label: str = ""

    def __str__(self) -> str:
        return self.label or f"{self.grad}"


def check_grad_case(c: GradCase) -> None:
    outs = eval_op(c.op, *c.inputs, n_out=c.n_out, **c.args)
    dy = randn(*np.shape(outs[c.out]))
    ref = {"I": c.inputs, "O": outs}

    def blob(tok: str) -> np.ndarray:
        return dy if tok == f"GO{c.out}" else ref[tok[0]][int(tok[1:])]

    gins = [blob(t) for t in c.gin.split()]
    gouts = c.gout.split()
    got = eval_op(c.grad, *gins, n_out=len(gouts), **c.args)
    for tok, g in zip(gouts, got):
        k = int(tok[2:])
        want = finite_difference_op(c.op, c.inputs, k, dy, output=c.out, n_out=c.n_out, **c.args)
        np.testing.assert_allclose(np.asarray(g, np.float64), want, rtol=c.tol * 5, atol=c.tol,
                                   err_msg=f"{c}: {tok}")
