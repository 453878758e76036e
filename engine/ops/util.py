"""Gradient plumbing and inspection: StopGradient, ZeroGradient, Print, Accuracy."""
from __future__ import annotations

import numpy as np

from engine.registry import kernel

# ---- kernels ----

@kernel("Print", "ZeroGradient")
def nothing(xp, *xs, to_file: int = 0):
    return ()


@kernel("Accuracy")
def accuracy(xp, pred, label, *, top_k: int = 1):
    # NOTE: a sample counts when its label's score is among the top_k (ties broken toward lower index).
    p = pred.reshape(pred.shape[0], -1)
    lab = label.reshape(-1).astype(np.int64)
    target = p[xp.arange(p.shape[0]), lab][:, None]
    cols = xp.arange(p.shape[1])[None, :]
    rank = ((p > target) | ((p == target) & (cols < lab[:, None]))).sum(axis=1)
    return xp.asarray((rank < top_k).mean(), dtype=np.float32)


@kernel("IsEmpty")
def is_empty(xp, x):
    return np.array(x.size == 0)


@kernel("HasElements")
def has_elements(xp, *xs):
    return np.array(any(x.size for x in xs))


# ---- gradients ----

# ---- shapes ----
