"""Losses and metrics: SoftmaxWithLoss, (Label)CrossEntropy, AveragedLoss, SquaredL2Distance, the sigmoid
cross entropies, MakeTwoClass, SpatialSoftmaxWithLoss, the ranking criteria, BernoulliJSD, Perplexity,
MultiClassAccuracy."""
from __future__ import annotations

import numpy as np

from engine.runtime import device as dev

from engine.errors import ExecutionError
from engine.runtime.grad_makers import cc_maker, should_not_do_gradient, simple
from engine.catalogue.registry import gradient, kernel
from engine.catalogue.registry import shape
from engine.runtime.shapes import FLOAT, INT32, TensorInfo, dim_op, dims, same_as

# ---- kernels ----

def _probs(xp, x, axis):
    x2 = x.reshape(int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:])))  # NOTE: no -1: N may be 0
    e = xp.exp(x2 - x2.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _int_labels(xp, label, classes: int, *, check_range: bool, rows: int | None = None):
    """Class labels as Caffe2 reads them (``data<int>()``): int32 only, each in [0, classes).

    NOTE: refusing matters: a float label would be truncated and -1 would index the last class,
    a silent loss of a net Caffe2 refuses to run (e.g. `netviz run --input label=5` feeds floats).
    """
    if label.dtype != np.int32:
        raise TypeError(f"labels must be int32 (Caffe2 reads them as int), got {label.dtype}; "
                        "feed them from a .npy file of int32 (or --input NAME=SHAPE:int32)")
    lab = label.reshape(-1).astype(np.int64)
    if rows is not None and lab.size != rows:  # Caffe2: CAFFE_ENFORCE_EQ(T.numel(), N)
        raise ValueError(f"{lab.size} labels for {rows} rows of logits")
    if check_range and lab.size and (int(lab.min()) < 0 or int(lab.max()) >= classes):
        bad = int(lab.min()) if int(lab.min()) < 0 else int(lab.max())
        raise ValueError(f"label {bad} is not a class index in [0, {classes})")
    return lab


@kernel("SoftmaxWithLoss")
def softmax_with_loss(xp, x, label, weight=None, *, label_prob: int = 0, scale: float = 1.0,
                      axis: int = 1, spatial: int = 0, order: str = "NCHW"):
    # NOTE: loss = scale * sum(w_i * -log p_i[label_i]) / sum(w_i); p is clamped at 1e-20 (FLT_MIN-ish).
    if spatial:
        n, c = x.shape[:2]
        p = _probs(xp, xp.moveaxis(x, 1, -1).reshape(-1, c), 1)
        probs = xp.moveaxis(p.reshape((n,) + x.shape[2:] + (c,)), -1, 1)
        lab = label.reshape(-1)
    else:
        p = _probs(xp, x, axis)
        probs = p.reshape(x.shape)
    w = xp.ones(p.shape[0], dtype=x.dtype) if weight is None else weight.reshape(-1).astype(x.dtype)
    if label_prob:
        nll = -(label.reshape(p.shape) * xp.log(xp.maximum(p, 1e-20))).sum(axis=1)
    else:
        lab = _int_labels(xp, label, p.shape[1], check_range=not spatial, rows=p.shape[0])
        nll = -xp.log(xp.maximum(p[xp.arange(p.shape[0]), lab], 1e-20))
    loss = (nll * w).sum() / xp.maximum(w.sum(), 1e-20) * scale if not spatial else \
        (nll * w * (lab >= 0)).sum() / xp.maximum((w * (lab >= 0)).sum(), 1e-20) * scale
    return probs.astype(x.dtype), xp.asarray(loss, dtype=x.dtype)


@kernel("SoftmaxWithLossGradient")
def softmax_with_loss_gradient(xp, x, label, *rest, label_prob: int = 0, scale: float = 1.0,
                               axis: int = 1, spatial: int = 0, order: str = "NCHW"):
    weight, probs, dloss = (rest if len(rest) == 3 else (None,) + rest)
    if spatial:
        c = x.shape[1]
        p = xp.moveaxis(probs, 1, -1).reshape(-1, c)
    else:
        p = probs.reshape(int(np.prod(x.shape[:axis])), -1)
    w = xp.ones(p.shape[0], dtype=x.dtype) if weight is None else weight.reshape(-1).astype(x.dtype)
    if label_prob:
        d = p - label.reshape(p.shape)
    else:
        d = p.copy()
        d[xp.arange(p.shape[0]), _int_labels(xp, label, p.shape[1], check_range=False, rows=p.shape[0])] -= 1
    d = d * (w / xp.maximum(w.sum(), 1e-20) * scale * dloss.reshape(())).reshape(-1, 1)
    if spatial:
        return xp.moveaxis(d.reshape((x.shape[0],) + x.shape[2:] + (c,)), -1, 1).astype(x.dtype)
    return d.reshape(x.shape).astype(x.dtype)


@kernel("LabelCrossEntropy")
def label_cross_entropy(xp, x, label):
    x2 = x.reshape(x.shape[0], -1) if x.ndim > 1 else x.reshape(1, -1)
    return -xp.log(xp.maximum(x2[xp.arange(x2.shape[0]), label.reshape(-1)], 1e-20)).astype(x.dtype)


@kernel("LabelCrossEntropyGradient")
def label_cross_entropy_gradient(xp, x, label, dy):
    x2 = x.reshape(x.shape[0], -1) if x.ndim > 1 else x.reshape(1, -1)
    dx = xp.zeros_like(x2)
    rows = xp.arange(x2.shape[0])
    dx[rows, label.reshape(-1)] = -dy.reshape(-1) / xp.maximum(x2[rows, label.reshape(-1)], 1e-20)
    return dx.reshape(x.shape)


@kernel("CrossEntropy")
def cross_entropy(xp, x, label):
    return -(label * xp.log(xp.maximum(x, 1e-20))).reshape(x.shape[0], -1).sum(axis=1).astype(x.dtype)


@kernel("CrossEntropyGradient")
def cross_entropy_gradient(xp, x, label, dy):
    return (-label / xp.maximum(x, 1e-20) * dy.reshape((-1,) + (1,) * (x.ndim - 1))).astype(x.dtype)


@kernel("AveragedLoss")
def averaged_loss(xp, x):
    return xp.asarray(x.mean(), dtype=x.dtype)


@kernel("AveragedLossGradient")
def averaged_loss_gradient(xp, x, dy):
    return xp.full(x.shape, dy.reshape(()) / x.size, dtype=x.dtype)


@kernel("SquaredL2Distance")
def squared_l2_distance(xp, x, y):
    d = (x - y).reshape(x.shape[0], -1) if x.ndim else (x - y).reshape(1, 1)
    return (0.5 * (d * d).sum(axis=1)).astype(x.dtype)


@kernel("SquaredL2DistanceGradient")
def squared_l2_distance_gradient(xp, x, y, dd):
    g = (x - y) * dd.reshape((-1,) + (1,) * (x.ndim - 1))
    return g, -g


def _sigmoid_xent_terms(xp, x, t, log_d_trick, unjoined):
    """Per-element log-likelihood (Caffe2 negates and averages it over the last axis) and its
    derivative in x; ``log(1 + exp(-|x|))`` keeps exp's argument non-positive."""
    pos = (x >= 0).astype(x.dtype)
    soft = xp.log1p(xp.exp(-xp.abs(x)))
    if unjoined:
        return x * t + (t - 1) * x * pos - (1 - t) * soft, t - (1 - t) / (1 + xp.exp(-x))
    if log_d_trick:
        return (2 * t - 1) * (x - (x * pos + soft)), (2 * t - 1) / (1 + xp.exp(x))
    return x * (t - pos) - soft, t - 1 / (1 + xp.exp(-x))


def _rows(x):
    """(outer, inner) view: the sigmoid losses average over the LAST axis (a 0-d input is one row of 1;
    a 1-D input gives a 0-d loss)."""
    inner = x.shape[-1] if x.ndim else 1
    return x.reshape(-1, inner), x.shape[:-1] if x.ndim else ()


@kernel("SigmoidCrossEntropyWithLogits")
def sigmoid_cross_entropy_with_logits(xp, x, t, *, log_D_trick: int = 0, unjoined_lr_loss: int = 0):
    (x2, out), t2 = _rows(x), _rows(t)[0]
    ll, _ = _sigmoid_xent_terms(xp, x2, t2, log_D_trick, unjoined_lr_loss)
    return (-ll.mean(axis=1) if x2.shape[1] else xp.zeros(x2.shape[0], x.dtype)).reshape(out).astype(x.dtype)


@kernel("SigmoidCrossEntropyWithLogitsGradient")
def sigmoid_cross_entropy_with_logits_gradient(xp, g, x, t, *, log_D_trick: int = 0, unjoined_lr_loss: int = 0):
    (x2, _), t2 = _rows(x), _rows(t)[0]
    _, d = _sigmoid_xent_terms(xp, x2, t2, log_D_trick, unjoined_lr_loss)
    return (-g.reshape(-1, 1) / x2.shape[1] * d).reshape(x.shape).astype(x.dtype)


@kernel("WeightedSigmoidCrossEntropyWithLogits")
def weighted_sigmoid_cross_entropy_with_logits(xp, x, t, w):
    (x2, out), t2, w2 = _rows(x), _rows(t)[0], _rows(w)[0]
    ll, _ = _sigmoid_xent_terms(xp, x2, t2, 0, 0)
    return (-(ll * w2).mean(axis=1)).reshape(out).astype(x.dtype)


@kernel("WeightedSigmoidCrossEntropyWithLogitsGradient")
def weighted_sigmoid_cross_entropy_with_logits_gradient(xp, g, x, t, w):
    (x2, _), t2, w2 = _rows(x), _rows(t)[0], _rows(w)[0]
    _, d = _sigmoid_xent_terms(xp, x2, t2, 0, 0)
    return (-g.reshape(-1, 1) / x2.shape[1] * d * w2).reshape(x.shape).astype(x.dtype)


@kernel("MakeTwoClass")
def make_two_class(xp, x):
    return xp.stack([1 - x, x], axis=-1)


@kernel("MakeTwoClassGradient")
def make_two_class_gradient(xp, dy):
    return dy[..., 1] - dy[..., 0]


@kernel("SpatialSoftmaxWithLoss")
def spatial_softmax_with_loss(xp, x, label, weight=None, *, scale: float = 1.0):
    # NOTE: softmax over C per pixel; label -1 is "don't care"; loss = sum(w * nll) / sum(w) (0 if no weight).
    p = _probs(xp, xp.moveaxis(x, 1, -1).reshape(x.size // max(x.shape[1], 1), x.shape[1]), 1)  # NOTE: N may be 0
    probs = xp.moveaxis(p.reshape(x.shape[:1] + x.shape[2:] + x.shape[1:2]), -1, 1)
    lab, w, care = _spatial_weights(xp, label, weight, x.dtype)
    nll = -xp.log(xp.maximum(p[xp.arange(p.shape[0]), xp.where(care, lab, 0)], x.dtype.type(1e-20)))
    total = (w * care).sum()
    loss = (nll * w * care).sum() / total if total != 0 else 0.0
    return probs.astype(x.dtype), xp.asarray(loss, dtype=x.dtype)  # NOTE: a 0-d loss


def _spatial_weights(xp, label, weight, dtype):
    lab = label.reshape(-1).astype(np.int64)
    w = xp.ones(lab.shape, dtype=dtype) if weight is None else weight.reshape(-1).astype(dtype)
    return lab, w, lab != -1


@kernel("SpatialSoftmaxWithLossGradient")
def spatial_softmax_with_loss_gradient(xp, x, label, *rest, scale: float = 1.0):
    weight, probs, dloss = rest if len(rest) == 3 else (None,) + rest
    c = x.shape[1]
    d = xp.moveaxis(probs, 1, -1).reshape(-1, c).copy()
    lab, w, care = _spatial_weights(xp, label, weight, x.dtype)
    rows = xp.arange(d.shape[0])
    d[rows[care], lab[care]] -= 1
    d *= (w * care).reshape(-1, 1)
    total = (w * care).sum()
    if total > 0:
        d *= x.dtype.type(scale) / total
    d *= dloss.reshape(())
    return xp.moveaxis(d.reshape(x.shape[:1] + x.shape[2:] + (c,)), -1, 1).astype(x.dtype)


def _log_logit(xp, v):
    """``log(1 + exp(v))`` as Caffe2's rank loss computes it: 0 below log(eps), v above -log(eps)."""
    cut = np.log(np.finfo(v.dtype).eps)
    return xp.where(v < cut, 0, xp.where(v > -cut, v, xp.log(xp.exp(xp.clip(v, cut, -cut)) + 1)))


def _session_pairs(xp, n, lengths):
    """(session, i, j) of every pair j < i inside one session (segments of `lengths`, default one)."""
    lens = np.asarray([n] if lengths is None else dev_host(lengths).reshape(-1), dtype=np.int64)
    seg = np.repeat(np.arange(lens.size), lens)
    i, j = np.tril_indices(n, -1)
    keep = seg[i] == seg[j]
    return lens.size, seg[i[keep]], i[keep], j[keep]


def dev_host(a):
    return np.asarray(a.get() if hasattr(a, "get") else a)


@kernel("PairWiseLoss")
def pair_wise_loss(xp, x, label, lengths=None):
    # NOTE: per session, mean over pairs with different labels of log(1 + exp(sign * (x_j - x_i))).
    n = x.shape[0] if x.ndim else 0
    if n == 0:
        return xp.zeros(0, dtype=x.dtype)
    ns, seg, i, j, sign, valid = _rank_pairs(xp, x, label, lengths)
    xv = x.reshape(-1)
    terms = _log_logit(xp, (sign * (xv[j] - xv[i])).astype(x.dtype)) * valid
    y = xp.zeros(ns, dtype=x.dtype)
    np.add.at(y, seg, terms) if xp is np else xp.add.at(y, seg, terms)
    cnt = xp.bincount(xp.asarray(seg), weights=valid, minlength=ns) if seg.size else xp.zeros(ns)
    return (y / xp.maximum(cnt, 1)).astype(x.dtype)


def _rank_pairs(xp, x, label, lengths):
    ns, seg, i, j = _session_pairs(xp, x.shape[0], lengths)
    lv = label.reshape(-1)
    valid = (xp.abs(lv[i] - lv[j]) >= np.finfo(x.dtype).eps).astype(x.dtype)
    sign = xp.where(lv[i] > lv[j], 1, -1).astype(x.dtype)
    return ns, seg, i, j, sign, valid


@kernel("PairWiseLossGradient")
def pair_wise_loss_gradient(xp, x, label, dy, lengths=None):
    n = x.shape[0] if x.ndim else 0
    if n == 0:
        return xp.zeros(x.shape, dtype=x.dtype)
    ns, seg, i, j, sign, valid = _rank_pairs(xp, x, label, lengths)
    xv = x.reshape(-1)
    g = sign * dy.reshape(-1)[seg] / (1 + xp.exp(-sign * (xv[j] - xv[i]))) * valid
    dx = xp.zeros(n, dtype=x.dtype)
    add = np.add.at if xp is np else xp.add.at
    add(dx, i, -g)
    add(dx, j, g)
    cnt = xp.bincount(xp.asarray(seg), weights=valid, minlength=ns) if seg.size else xp.zeros(ns)
    lens = np.asarray([n] if lengths is None else dev_host(lengths).reshape(-1), dtype=np.int64)
    return (dx / xp.maximum(cnt, 1)[np.repeat(np.arange(ns), lens)]).reshape(x.shape).astype(x.dtype)


@kernel("MarginRankingCriterion")
def margin_ranking_criterion(xp, x1, x2, y, *, margin: float = 1.0):
    return xp.maximum(0, -y * (x1 - x2) + x1.dtype.type(margin)).astype(x1.dtype)


@kernel("MarginRankingCriterionGradient")
def margin_ranking_criterion_gradient(xp, x1, x2, y, dl, *, margin: float = 1.0):
    d = (-y * (x1 - x2) + x1.dtype.type(margin) > 0) * -y * dl
    return d.astype(x1.dtype), (-d).astype(x1.dtype)


@kernel("CosineEmbeddingCriterion")
def cosine_embedding_criterion(xp, s, y, *, margin: float = 0.0):
    return xp.where(y == 1, 1 - s, xp.maximum(0, s - s.dtype.type(margin))).astype(s.dtype)


@kernel("CosineEmbeddingCriterionGradient")
def cosine_embedding_criterion_gradient(xp, s, y, dl, *, margin: float = 0.0):
    return (dl * xp.where(y == 1, -1, (s >= s.dtype.type(margin)))).astype(s.dtype)


def _entropy(xp, p):
    ok = (p >= 1e-20) & (1 - p >= 1e-20)
    q = xp.where(ok, p, 0.5)
    return xp.where(ok, -q * xp.log(q) - (1 - q) * xp.log(1 - q), 0)


def _logit(xp, p):
    q = xp.clip(p, 1e-20, 1 - 1e-20)
    return -xp.log(1 / q - 1)


@kernel("BernoulliJSD")
def bernoulli_jsd(xp, x, t):
    # NOTE: entropy of the mean minus the mean entropy, elementwise.
    return (_entropy(xp, (x + t) / 2) - (_entropy(xp, x) + _entropy(xp, t)) / 2).astype(np.float32)


@kernel("BernoulliJSDGradient")
def bernoulli_jsd_gradient(xp, go, x, t):
    return (go * (_logit(xp, x) - _logit(xp, (x + t) / 2)) / 2).astype(np.float32)


@kernel("Perplexity")
def perplexity(xp, p):
    # NOTE: the product of p_i ** (-1/N) (not exp of a mean log): 1 for an empty batch; a 0-d output.
    n = p.shape[0]
    return xp.asarray(xp.prod(p.astype(np.float32) ** np.float32(-1.0 / n)) if n else 1.0, dtype=np.float32)


@kernel("MultiClassAccuracy")
def multi_class_accuracy(xp, x, label):
    # NOTE: argmax takes the first maximum; a class with no instance has accuracy 0.
    n, d = x.shape
    lab = label.reshape(-1).astype(np.int64)
    hit = (x.argmax(axis=1) == lab) if n else xp.zeros(0, dtype=bool)
    amounts = xp.bincount(lab, minlength=d)[:d]
    acc = xp.bincount(lab, weights=hit.astype(np.float32), minlength=d)[:d]
    return (acc / xp.maximum(amounts, 1)).astype(np.float32), amounts.astype(np.int32)


# Detectron's losses: CUDA-only in Caffe2 (the CPU ops raise "not implemented"); netviz runs the CUDA
# kernels' numerics on either device, so Detectron training nets step on the CPU too.
FLT_MIN = np.float32(np.finfo(np.float32).tiny)


def _smooth_l1(xp, v, beta):
    """(value, derivative) of Detectron's smooth L1: 0.5 v^2 / beta inside |v| < beta, |v| - beta / 2 outside."""
    a, b = xp.abs(v), v.dtype.type(beta)
    return xp.where(a < b, 0.5 * v * v / b, a - 0.5 * b), xp.where(a < b, v / b, xp.sign(v))


@kernel("SmoothL1Loss")
def smooth_l1_loss(xp, yh, y, a_in, a_out, *, beta: float = 1.0, scale: float = 1.0):
    # NOTE: scale / N * sum(a_out * SmoothL1(a_in * (yh - y))), N = batch size (dim 0); a 0-d loss.
    err, _ = _smooth_l1(xp, a_in * (yh - y), beta)
    return xp.asarray((a_out * err).sum() * np.float32(scale / y.shape[0]), dtype=np.float32)


@kernel("SmoothL1LossGradient")
def smooth_l1_loss_gradient(xp, yh, y, a_in, a_out, dloss, *, beta: float = 1.0, scale: float = 1.0):
    _, d = _smooth_l1(xp, a_in * (yh - y), beta)
    return (d * np.float32(scale / y.shape[0]) * dloss.reshape(()) * a_in * a_out).astype(np.float32)


def _select_positions(xp, yh, locs):
    """Flat indices into `yh` (N, D, H, W) of the 4 box coordinates of each location row (n, c, y, x)."""
    n_, d_, h_, w_ = yh.shape
    loc = xp.asarray(locs).reshape(-1, 4).astype(np.int64)
    c = loc[:, 1:2] + xp.arange(4)
    return ((loc[:, 0:1] * d_ + c) * h_ + loc[:, 2:3]) * w_ + loc[:, 3:4]


@kernel("SelectSmoothL1Loss")
def select_smooth_l1_loss(xp, yh, y, locs, count, *, beta: float = 1.0, scale: float = 1.0):
    # NOTE: smooth L1 of yh at the (n, c..c+3, y, x) of each row of L against Y's row, / max(S, 1), summed, * scale.
    if y.size == 0:
        return xp.zeros((), dtype=np.float32)
    out = xp.zeros(yh.size, dtype=np.float32)
    idx = _select_positions(xp, yh, locs)
    err, _ = _smooth_l1(xp, yh.reshape(-1)[idx] - y.reshape(-1, 4), beta)
    out[idx.reshape(-1)] = (err / xp.maximum(count.reshape(-1)[0], 1.0)).reshape(-1)
    return xp.asarray(out.sum() * np.float32(scale), dtype=np.float32)


@kernel("SelectSmoothL1LossGradient")
def select_smooth_l1_loss_gradient(xp, yh, y, locs, count, dloss, *, beta: float = 1.0, scale: float = 1.0):
    dx = xp.zeros(yh.size, dtype=np.float32)
    if y.size:
        idx = _select_positions(xp, yh, locs)
        _, d = _smooth_l1(xp, yh.reshape(-1)[idx] - y.reshape(-1, 4), beta)
        norm = np.float32(scale) * dloss.reshape(()) / xp.maximum(count.reshape(-1)[0], 1.0)
        dx[idx.reshape(-1)] = (norm * d).reshape(-1)
    return dx.reshape(yh.shape)


def _sce_normalizer(xp, t, normalize):
    return xp.maximum((t != -1).sum().astype(np.float32), np.float32(1e-5)) if normalize else np.float32(1)


@kernel("SigmoidCrossEntropyLoss")
def sigmoid_cross_entropy_loss(xp, x, t, *, scale: float = 1.0, normalize: int = 1):
    # NOTE: targets are int, -1 ignored; normalize: / the number of non-ignored targets (at least 1e-5).
    ll, _ = _sigmoid_xent_terms(xp, x, t.astype(x.dtype), 0, 0)
    total = xp.where(t != -1, -ll, 0).sum()
    return xp.asarray(total / _sce_normalizer(xp, t, normalize) * np.float32(scale), dtype=np.float32)


@kernel("SigmoidCrossEntropyLossGradient")
def sigmoid_cross_entropy_loss_gradient(xp, x, t, dloss, *, scale: float = 1.0, normalize: int = 1):
    d = xp.where(t != -1, 1 / (1 + xp.exp(-x)) - t, 0)
    return (d * (dloss.reshape(()) / _sce_normalizer(xp, t, normalize) * np.float32(scale))).astype(np.float32)


def _focal_parts(xp, x, t, wp, num_classes, alpha):
    """x as (N, A, K, H, W), the positive / negative masks c1, c2 per class and the weights zp, zn."""
    n, d, h, w = x.shape
    a = d // num_classes
    x5 = x.reshape(n, a, num_classes, h, w)
    t5 = t.reshape(n, a, 1, h, w)
    cls = xp.arange(1, num_classes + 1).reshape(1, 1, -1, 1, 1)
    c1 = (t5 == cls).astype(np.float32)
    c2 = ((t5 != -1) & (t5 != cls)).astype(np.float32)
    np_ = xp.maximum(wp.reshape(-1)[0], np.float32(1))
    return x5, c1, c2, np.float32(alpha) / np_, np.float32(1 - alpha) / np_


def _log_one_minus_sigmoid(xp, x):
    return -x * (x >= 0) - xp.log1p(xp.exp(x - 2 * x * (x >= 0)))


@kernel("SigmoidFocalLoss")
def sigmoid_focal_loss(xp, x, t, wp, *, scale: float = 1.0, num_classes: int = 80, gamma: float = 1.0,
                       alpha: float = 0.25):
    # NOTE: RetinaNet's loss; X (N, A*K, H, W), T (N, A, H, W) with classes 1..K, 0 background, -1 ignored.
    x5, c1, c2, zp, zn = _focal_parts(xp, x, t, wp, num_classes, alpha)
    p = 1 / (1 + xp.exp(-x5))
    g = np.float32(gamma)
    term1 = (1 - p) ** g * xp.log(xp.maximum(p, FLT_MIN))
    term2 = p ** g * _log_one_minus_sigmoid(xp, x5)
    return xp.asarray((-c1 * term1 * zp - c2 * term2 * zn).sum() * np.float32(scale), dtype=np.float32)


@kernel("SigmoidFocalLossGradient")
def sigmoid_focal_loss_gradient(xp, x, t, wp, dloss, *, scale: float = 1.0, num_classes: int = 80,
                                gamma: float = 1.0, alpha: float = 0.25):
    x5, c1, c2, zp, zn = _focal_parts(xp, x, t, wp, num_classes, alpha)
    p = 1 / (1 + xp.exp(-x5))
    g = np.float32(gamma)
    term1 = (1 - p) ** g * (1 - p - p * g * xp.log(xp.maximum(p, FLT_MIN)))
    term2 = p ** g * (_log_one_minus_sigmoid(xp, x5) * (1 - p) * g - p)
    dx = (-c1 * zp * term1 - c2 * zn * term2) * dloss.reshape(()) * np.float32(scale)
    return dx.reshape(x.shape).astype(np.float32)


def _group_softmax(xp, x, num_classes):
    """Softmax over each anchor's `num_classes` channels of NCHW `x`, as (N, A, K, H, W)."""
    n, d, h, w = x.shape
    x5 = x.reshape(n, d // num_classes, num_classes, h, w)
    e = xp.exp(x5 - x5.max(axis=2, keepdims=True))
    return e / e.sum(axis=2, keepdims=True)


def _softmax_focal_weights(xp, p5, t, wp, gamma, alpha):
    """Per-anchor (label, p of the label, z weight, valid mask) of the softmax focal loss."""
    t4 = t.astype(np.int64)
    valid = t4 >= 0
    pl = xp.take_along_axis(p5, xp.where(valid, t4, 0)[:, :, None], axis=2)[:, :, 0]
    np_ = xp.maximum(wp.reshape(-1)[0], np.float32(1))
    z = ((t4 == 0) * np.float32(1 - alpha) + (t4 >= 1) * np.float32(alpha)) / np_
    return t4, pl, z.astype(np.float32), valid


@kernel("SoftmaxFocalLoss")
def softmax_focal_loss(xp, x, t, wp, *, scale: float = 1.0, gamma: float = 1.0, alpha: float = 0.25,
                       num_classes: int = 81, order: str = "NCHW"):
    # NOTE: outputs the 0-d loss and P flattened to (N*D*H*W,); labels 0..K-1 with 0 background, -1 ignored.
    p5 = _group_softmax(xp, x, num_classes)
    _, pl, z, valid = _softmax_focal_weights(xp, p5, t, wp, gamma, alpha)
    loss = xp.where(valid, -((1 - pl) ** np.float32(gamma) * xp.log(xp.maximum(pl, FLT_MIN))) * z, 0)
    return xp.asarray(loss.sum() * np.float32(scale), dtype=np.float32), p5.reshape(-1).astype(np.float32)


@kernel("SoftmaxFocalLossGradient")
def softmax_focal_loss_gradient(xp, x, t, wp, p, dloss, *, scale: float = 1.0, gamma: float = 1.0,
                                alpha: float = 0.25, num_classes: int = 81, order: str = "NCHW"):
    n, d, h, w = x.shape
    p5 = p.reshape(n, d // num_classes, num_classes, h, w)
    t4, pl, z, valid = _softmax_focal_weights(xp, p5, t, wp, gamma, alpha)
    g, om = np.float32(gamma), 1 - pl
    buff = xp.where(valid, (-om ** g + g * om ** (g - 1) * pl * xp.log(xp.maximum(pl, FLT_MIN))) * z, 0)
    onehot = (t4[:, :, None] == xp.arange(num_classes).reshape(1, 1, -1, 1, 1)).astype(np.float32)
    dx = valid[:, :, None] * dloss.reshape(()) * buff[:, :, None] * (onehot - p5) * np.float32(scale)
    return dx.reshape(x.shape).astype(np.float32)


@kernel("GroupSpatialSoftmax")
def group_spatial_softmax(xp, x, *, num_classes: int = 81, order: str = "NCHW"):
    return _group_softmax(xp, x, num_classes).reshape(x.shape).astype(x.dtype)


@kernel("GroupSpatialSoftmaxGradient")
def group_spatial_softmax_gradient(xp, y, dy, *, num_classes: int = 81, order: str = "NCHW"):
    n, d, h, w = y.shape
    y5, dy5 = y.reshape(n, d // num_classes, num_classes, h, w), dy.reshape(n, d // num_classes, num_classes, h, w)
    return (y5 * (dy5 - (y5 * dy5).sum(axis=2, keepdims=True))).reshape(y.shape).astype(y.dtype)


@kernel("CTCGreedyDecoder")
def ctc_greedy_decoder(xp, inputs, seq_len=None, *, merge_repeated: int = 1):
    # NOTE: argmax class per step (first maximum), blank = 0 dropped, repeats merged; outputs
    # (lengths (N,), the decoded classes of every sequence concatenated), both int32.
    t_max, n = inputs.shape[:2]
    lab = inputs.argmax(axis=2).T  # (N, T)
    lens = xp.full(n, t_max) if seq_len is None else xp.asarray(seq_len).reshape(-1)
    if bool((lens > t_max).any()):
        raise ExecutionError(f"CTCGreedyDecoder: a sequence length exceeds max_time {t_max}")
    prev = xp.concatenate([xp.zeros((n, 1), dtype=lab.dtype), lab[:, :-1]], axis=1)
    keep = (lab != 0) & (xp.arange(t_max)[None, :] < lens[:, None])
    if merge_repeated:
        keep &= lab != prev
    return keep.sum(axis=1).astype(np.int32), lab[keep].astype(np.int32)


def _lambdarank_session(y, r, use_ndcg_as_loss, use_idcg_normalization, use_exp_gain):
    """(loss, dy) of one LambdaRank-NDCG session (NumPy, float32 like Caffe2's Eigen code)."""
    n = y.size
    if n == 0 or np.abs(r).sum() < 1e-6:
        return np.float32(0), np.zeros(n, np.float32)
    f = np.float32
    gain = r.astype(f) if use_ndcg_as_loss and not use_exp_gain else np.exp(r * f(np.log(2.0))).astype(f)
    inv_log = (f(np.log(2.0)) / np.log(np.arange(2, n + 2, dtype=f))).astype(f)

    def discount(order):
        d = np.empty(n, f)
        d[order] = inv_log
        return d
    ideal, disc = discount(np.argsort(-r, kind="stable")), discount(np.argsort(-y, kind="stable"))
    idcg, dcg = float((gain * ideal).astype(np.float64).sum()), float((gain * disc).astype(np.float64).sum())
    lam = np.abs((disc[:, None] - disc[None, :]) * (gain[:, None] - gain[None, :]))
    sign = np.where(r[:, None] - r[None, :] > 0, f(1), f(-1))
    dyy = y[:, None] - y[None, :]
    dy = -(lam * sign / (1 + np.exp(sign * dyy))).sum(axis=1)
    if use_ndcg_as_loss:
        loss = idcg - dcg
    else:
        v = sign * dyy
        with np.errstate(over="ignore", divide="ignore"):
            logsig = np.where(v > 100, 0, np.where(v < -100, v, np.log(1 / (1 + np.exp(-v)))))
        loss = -(lam * logsig).sum()
    if use_idcg_normalization:
        dy, loss = dy / max(idcg, 1e-5), loss / max(idcg, 1e-5)
    return f(loss), dy.astype(f)


@kernel("LambdaRankNdcg")
def lambda_rank_ndcg(xp, y, r, session_lengths, *, use_ndcg_as_loss: int = 0, use_idcg_normalization: int = 1,
                     use_exp_gain: int = 1):
    # NOTE: outputs (loss per session, dY cache); ranks by sorting scores and labels (descending).
    yh, rh = dev.to_host(y).reshape(-1), dev.to_host(r).reshape(-1)
    lens = dev.to_host(session_lengths).reshape(-1).astype(np.int64)
    if lens.sum() > yh.size:
        raise ValueError(f"session lengths sum to {int(lens.sum())} but there are {yh.size} predictions")
    starts = np.r_[0, np.cumsum(lens)[:-1]]
    parts = [_lambdarank_session(yh[a:a + n], rh[a:a + n], use_ndcg_as_loss, use_idcg_normalization, use_exp_gain)
             for a, n in zip(starts, lens)]  # NOTE: one sort per session (segments of different lengths)
    loss = np.array([p[0] for p in parts], np.float32)
    dy = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.float32)
    full = np.zeros(yh.size, np.float32)
    full[:dy.size] = dy
    return xp.asarray(loss), xp.asarray(full)


@kernel("LambdaRankNdcgGradient")
def lambda_rank_ndcg_gradient(xp, y, session_lengths, dy_cache, dloss):
    # NOTE: each session's cached dY scaled by that session's loss gradient.
    session = np.repeat(np.arange(session_lengths.size), dev.to_host(session_lengths).reshape(-1))
    return (dy_cache * dloss.reshape(-1)[xp.asarray(session)]).astype(np.float32)


def _ctc_beam(probs, beam_width, prune, num_candidates=1):
    """Prefix beam search over (T, C) step probabilities (blank = 0), float32 like Caffe2; returns the
    best `num_candidates` (prefix, probability) pairs of the last step's ranking (fewer if it has fewer).
    Prefix sets iterate in sorted order and equal scores keep that order, as Caffe2's std::set /
    std::multimap do."""
    f = np.float32
    pb, pnb = {(): f(1)}, {(): f(0)}
    prev, ranked = [()], []
    for ctc in probs.astype(f):
        alpha = [c for c in range(ctc.size) if ctc[c] > prune] or list(range(ctc.size))
        nb, nnb = {}, {}
        prev_set = set(prev)
        for l in prev:
            for c in alpha:
                if c == 0:
                    nb[l] = nb.get(l, f(0)) + ctc[0] * (pb.get(l, f(0)) + pnb.get(l, f(0)))
                    continue
                lp = l + (c,)
                if l and c == l[-1]:
                    nnb[lp] = nnb.get(lp, f(0)) + ctc[c] * pb.get(l, f(0))
                    nnb[l] = nnb.get(l, f(0)) + ctc[c] * pnb.get(l, f(0))
                else:
                    nnb[lp] = nnb.get(lp, f(0)) + ctc[c] * (pb.get(l, f(0)) + pnb.get(l, f(0)))
                if lp not in prev_set:
                    nb[lp] = nb.get(lp, f(0)) + ctc[0] * (pb.get(lp, f(0)) + pnb.get(lp, f(0)))
                    nnb[lp] = nnb.get(lp, f(0)) + ctc[c] * pnb.get(lp, f(0))
        total = dict(nb)
        for k, v in nnb.items():
            total[k] = total.get(k, f(0)) + v
        ranked = sorted(sorted(total.items()), key=lambda kv: -kv[1])  # NOTE: stable: ties by prefix order
        prev = sorted(k for k, _ in ranked[:beam_width])
        pb, pnb = nb, nnb
    return ranked[:num_candidates] if ranked else [((), f(0))]  # NOTE: may reach past the beam, as Caffe2


@kernel("CTCBeamSearchDecoder", needs_context=True)
def ctc_beam_search_decoder(xp, inputs, seq_len=None, *, ctx, beam_width: int = 10, prune_threshold: float = 0.001,
                            num_candidates: int = 1):
    # NOTE: outputs (lengths (N * num_candidates,), decoded classes concatenated, probability of each
    # candidate); a sample with fewer candidates leaves length 0 and probability 0 in its other slots.
    # Caffe2 1.10 writes the third output unconditionally, so an op declaring two fails there too.
    if len(ctx.op.output) < 3:
        raise ExecutionError("CTCBeamSearchDecoder: Caffe2 1.10 writes a third output (the probabilities); "
                             "the op declares only 2 outputs")
    x = dev.to_host(inputs)
    t_max, n = x.shape[:2]
    lens = np.full(n, t_max) if seq_len is None else dev.to_host(seq_len).reshape(-1)
    if np.any(lens > (t_max if x.size else 0)):  # NOTE: Caffe2 refuses to read a step past the scores it has
        raise ExecutionError(f"CTCBeamSearchDecoder: sequence lengths {lens.tolist()} read past the scores {x.shape}")
    k = int(num_candidates)
    found = [_ctc_beam(x[:int(lens[i]), i], int(beam_width), np.float32(prune_threshold), k) for i in range(n)]
    lengths, probs = np.zeros((n, k), np.int32), np.zeros((n, k), np.float32)
    for i, cands in enumerate(found):
        lengths[i, :len(cands)] = [len(seq) for seq, _ in cands]
        probs[i, :len(cands)] = [p for _, p in cands]
    values = np.array([c for cands in found for seq, _ in cands for c in seq], dtype=np.int32)
    return xp.asarray(lengths.reshape(-1)), xp.asarray(values), xp.asarray(probs.reshape(-1))


# ---- gradients ----

@gradient("SoftmaxWithLoss")
@cc_maker
def softmax_with_loss_gradient(g):
    """Only the loss gradient GO1 is used; labels (and weights) get none."""
    ins = [g.I(0), g.I(1)] + ([g.I(2)] if len(g.op.input) == 3 else []) + [g.O(0), g.GO(1)]
    return [g.op_("SoftmaxWithLossGradient", ins, [g.GI(0)])]


gradient("LabelCrossEntropy", "CrossEntropy")(simple("{T}Gradient", "I0 I1 GO0", "GI0"))
gradient("AveragedLoss")(simple("AveragedLossGradient", "I0 GO0", "GI0"))
gradient("SquaredL2Distance")(simple("SquaredL2DistanceGradient", "I0 I1 GO0", "GI0 GI1"))


@cc_maker
def _go_first(g):
    """``<T>Gradient: [GO0, I0, I1, (I2)] -> [GI0]``: the output gradient comes first."""
    return [g.op_(g.type + "Gradient", [g.GO(0)] + list(g.op.input), [g.GI(0)])]


gradient("SigmoidCrossEntropyWithLogits", "WeightedSigmoidCrossEntropyWithLogits", "BernoulliJSD")(_go_first)
gradient("MakeTwoClass")(simple("MakeTwoClassGradient", "GO0", "GI0"))


@gradient("SpatialSoftmaxWithLoss")
@cc_maker
def spatial_softmax_with_loss_gradient(g):
    """[I0, I1, (I2), O0, GO1] -> [GI0], as SoftmaxWithLoss."""
    ins = [g.I(0), g.I(1)] + ([g.I(2)] if len(g.op.input) == 3 else []) + [g.O(0), g.GO(1)]
    return [g.op_("SpatialSoftmaxWithLossGradient", ins, [g.GI(0)])]


@gradient("PairWiseLoss")
@cc_maker
def pair_wise_loss_gradient(g):
    """[I0, I1, GO0, (lengths I2)] -> [GI0]."""
    ins = [g.I(0), g.I(1), g.GO(0)] + ([g.I(2)] if len(g.op.input) == 3 else [])
    return [g.op_("PairWiseLossGradient", ins, [g.GI(0)])]


gradient("MarginRankingCriterion")(simple("MarginRankingCriterionGradient", "I0 I1 I2 GO0", "GI0 GI1"))
gradient("CosineEmbeddingCriterion")(simple("CosineEmbeddingCriterionGradient", "I0 I1 GO0", "GI0"))
should_not_do_gradient("Perplexity", "MultiClassAccuracy", "CTCGreedyDecoder", "CTCBeamSearchDecoder")


gradient("SmoothL1Loss", "SelectSmoothL1Loss")(simple("{T}Gradient", "I0 I1 I2 I3 GO0", "GI0"))
gradient("SigmoidCrossEntropyLoss")(simple("SigmoidCrossEntropyLossGradient", "I0 I1 GO0", "GI0"))
gradient("SigmoidFocalLoss")(simple("SigmoidFocalLossGradient", "I0 I1 I2 GO0", "GI0"))
gradient("SoftmaxFocalLoss")(simple("SoftmaxFocalLossGradient", "I0 I1 I2 O1 GO0", "GI0"))
gradient("GroupSpatialSoftmax")(simple("GroupSpatialSoftmaxGradient", "O0 GO0", "GI0"))

gradient("LambdaRankNdcg")(simple("LambdaRankNdcgGradient", "I0 I2 O1 GO0", "GI0"))


# ---- shapes ----

@shape("SoftmaxWithLoss")
def softmax_with_loss_shape(x, label, weight=None):
    return x, TensorInfo((), x.dtype)  # NOTE: the loss is a 0-d tensor.


shape("SoftmaxWithLossGradient")(same_as(0))


@shape("LabelCrossEntropy", "CrossEntropy", "SquaredL2Distance")
def per_row_shape(x, *_):
    xd = dims(x)
    return TensorInfo(xd[:1] if xd else (1,), x.dtype)


shape("AveragedLoss")(lambda x: TensorInfo((), x.dtype))
shape("LabelCrossEntropyGradient", "CrossEntropyGradient", "AveragedLossGradient")(same_as(0))
shape("SquaredL2DistanceGradient")(same_as(0, 1))


shape("SigmoidCrossEntropyWithLogits", "WeightedSigmoidCrossEntropyWithLogits")(
    lambda x, *_: TensorInfo(dims(x)[:-1], x.dtype))  # NOTE: averaged over the last axis
shape("SigmoidCrossEntropyWithLogitsGradient", "WeightedSigmoidCrossEntropyWithLogitsGradient",
      "BernoulliJSDGradient")(same_as(1))
shape("MakeTwoClass")(lambda x: TensorInfo(dims(x) + (2,), x.dtype))
shape("MakeTwoClassGradient")(lambda dy: TensorInfo(dims(dy)[:-1], dy.dtype))
shape("SpatialSoftmaxWithLoss")(lambda x, *_: (x, TensorInfo((), x.dtype)))
shape("SpatialSoftmaxWithLossGradient", "PairWiseLossGradient", "CosineEmbeddingCriterionGradient")(same_as(0))
shape("MarginRankingCriterion", "CosineEmbeddingCriterion")(same_as(0))
shape("MarginRankingCriterionGradient")(same_as(0, 1))
shape("PairWiseLoss")(lambda x, label, lengths=None: TensorInfo(
    (1,) if lengths is None else dims(lengths)[:1], x.dtype))
shape("BernoulliJSD")(lambda x, t: TensorInfo(dims(x), FLOAT))
shape("Perplexity")(lambda p: TensorInfo((), FLOAT))
shape("MultiClassAccuracy")(lambda x, label: (TensorInfo(dims(x)[1:2], FLOAT), TensorInfo(dims(x)[1:2], INT32)))

shape("SmoothL1Loss", "SelectSmoothL1Loss", "SigmoidCrossEntropyLoss", "SigmoidFocalLoss")(
    lambda x, *_: TensorInfo((), FLOAT))  # NOTE: 0-d losses (Detectron)
shape("SmoothL1LossGradient", "SelectSmoothL1LossGradient", "SigmoidCrossEntropyLossGradient",
      "SigmoidFocalLossGradient", "SoftmaxFocalLossGradient", "GroupSpatialSoftmax")(same_as(0))
shape("GroupSpatialSoftmaxGradient")(same_as(0))
shape("SoftmaxFocalLoss")(lambda x, *_: (TensorInfo((), FLOAT), TensorInfo(
    (None if x.shape is None or None in x.shape else int(np.prod(x.shape)),), FLOAT)))
shape("CTCGreedyDecoder")(lambda x, *_: (TensorInfo(dims(x)[1:2], INT32), TensorInfo((None,), INT32)))
shape("LambdaRankNdcg")(lambda y, r, lens, **_: (TensorInfo(dims(lens)[:1], FLOAT), TensorInfo(dims(y)[:1], FLOAT)))
shape("LambdaRankNdcgGradient")(same_as(2))
shape("CTCBeamSearchDecoder")(lambda x, *_, num_candidates=1: (
    TensorInfo((dim_op(lambda n: n * num_candidates, dims(x)[1]),), INT32), TensorInfo((None,), INT32),
    TensorInfo((dim_op(lambda n: n * num_candidates, dims(x)[1]),), FLOAT)))


# ---- onnx ----
from engine.catalogue.registry import onnx_converter  # noqa: E402


def _onnx_nll(c, p2, label):
    """-log(max(p[row, label[row]], 1e-20)) per row of the 2-D probabilities `p2` (int labels)."""
    lab = c.emit("Reshape", [c.emit("Cast", [label], to=7), c.ints([-1, 1])])
    picked = c.emit("GatherElements", [p2, lab], axis=1)
    floor = c.const(np.array(1e-20, c.np_dtype(0)), "floor")
    return c.emit("Reshape", [c.emit("Neg", [c.emit("Log", [c.emit("Max", [picked, floor])])]), c.ints([-1])])


@onnx_converter("SoftmaxWithLoss")
def softmax_with_loss_onnx(c):
    """Softmax over Caffe2's 2-D view (rows split at `axis`), then the weighted mean of
    -log(max(p[label], 1e-20)) times `scale`, a 0-d loss; label_prob reads labels as distributions.
    The spatial form is refused."""
    if c.arg("spatial", 0):
        raise c.refuse("spatial=1")
    r = c.rank(0)
    axis = c.arg("axis", 1) % r
    p2 = c.emit("Softmax", [c.rows(c.x(0), axis, r)], axis=1)
    if r == 2 and axis == 1:
        c.emit("Identity", [p2], [c.y(0)])
    else:
        c.emit("Reshape", [p2, c.shape_of(c.x(0))], [c.y(0)])
    floor = c.const(np.array(1e-20, c.np_dtype(0)), "floor")
    if c.arg("label_prob", 0):
        lab2 = c.emit("Reshape", [c.x(1), c.shape_of(p2)])
        ll = c.reduce("ReduceSum", c.emit("Mul", [lab2, c.emit("Log", [c.emit("Max", [p2, floor])])]), [1], 0)
        nll = c.emit("Neg", [ll])
    else:
        nll = _onnx_nll(c, p2, c.x(1))
    scale = c.const(np.array(c.arg("scale", 1.0), c.np_dtype(0)), "scale")
    if c.n_in > 2:
        w = c.emit("Reshape", [c.x(2), c.ints([-1])])
        total = c.emit("ReduceSum", [c.emit("Mul", [nll, w])], keepdims=0)
        loss = c.emit("Div", [total, c.emit("Max", [c.emit("ReduceSum", [w], keepdims=0), floor])])
    else:
        loss = c.emit("ReduceMean", [nll], keepdims=0)
    c.emit("Mul", [loss, scale], [c.y(1)])


@onnx_converter("LabelCrossEntropy")
def label_cross_entropy_onnx(c):
    x2 = c.emit("Reshape", [c.x(0), c.ints([c.shape(0)[0] if c.rank(0) > 1 else 1, -1])])
    c.emit("Identity", [_onnx_nll(c, x2, c.x(1))], [c.y(0)])


@onnx_converter("AveragedLoss")
def averaged_loss_onnx(c):
    """The mean of every element, a 0-d value."""
    c.emit("ReduceMean", [c.x(0)], [c.y(0)], keepdims=0)


@onnx_converter("SquaredL2Distance")
def squared_l2_distance_onnx(c):
    """0.5 * the row sums of (X - Y)², rows split at the first dim."""
    d = c.emit("Sub", [c.x(0), c.x(1)])
    rows = c.emit("Reshape", [c.emit("Mul", [d, d]), c.ints([c.shape(0)[0] if c.rank(0) else 1, -1])])
    half = c.const(np.array(0.5, c.np_dtype(0)), "half")
    c.emit("Mul", [c.reduce("ReduceSum", rows, [1], 0), half], [c.y(0)])


@onnx_converter("SigmoidCrossEntropyWithLogits")
def sigmoid_xent_onnx(c):
    """-mean over the last axis of x * (t - [x >= 0]) - log(1 + exp(-|x|)) (the plain form; the
    log-D trick and unjoined forms are refused)."""
    if c.arg("log_D_trick", 0) or c.arg("unjoined_lr_loss", 0):
        raise c.refuse("log_D_trick / unjoined_lr_loss")
    if c.rank(0) < 1:
        raise c.refuse("a 0-d input")
    x, t = c.x(0), c.x(1)
    pos = c.emit("Cast", [c.emit("GreaterOrEqual", [x, c.const(np.array(0, c.np_dtype(0)), "zero")])], to=1)
    soft = c.emit("Log", [c.emit("Add", [c.const(np.array(1, c.np_dtype(0)), "one"),
                                         c.emit("Exp", [c.emit("Neg", [c.emit("Abs", [x])])])])])
    ll = c.emit("Sub", [c.emit("Mul", [x, c.emit("Sub", [t, pos])]), soft])
    c.emit("Neg", [c.reduce("ReduceMean", ll, [-1], 0)], [c.y(0)])


@onnx_converter("CTCGreedyDecoder")
def ctc_greedy_decoder_onnx(c):
    """Each step's first-maximum class (ArgMax), kept where it is no blank (0), inside the sequence's
    length and (merge_repeated) unlike the step before; each sequence's kept count, and the kept classes
    of all sequences in order (Compress), both int32."""
    t_max, n = c.shape(0)[:2]
    lab = c.emit("Transpose", [c.emit("ArgMax", [c.x(0)], axis=2, keepdims=0)], perm=[1, 0])  # (N, T)
    lens = c.emit("Cast", [c.emit("Reshape", [c.x(1), c.ints([-1, 1])])], to=7) if c.n_in > 1 else c.ints([t_max])
    steps = c.const(np.arange(t_max, dtype=np.int64).reshape(1, -1), "steps")
    keep = c.emit("And", [c.emit("Not", [c.emit("Equal", [lab, c.ints([0])])]), c.emit("Less", [steps, lens])])
    if c.arg("merge_repeated", 1):
        prev = c.emit("Concat", [c.const(np.zeros((n, 1), np.int64), "blank"),
                                 c.emit("Slice", [lab, c.ints([0]), c.ints([t_max - 1]), c.ints([1])])], axis=1)
        keep = c.emit("And", [keep, c.emit("Not", [c.emit("Equal", [lab, prev])])])
    counts = c.emit("ReduceSum", [c.emit("Cast", [keep], to=7), c.ints([1])], keepdims=0)
    c.emit("Cast", [counts], [c.y(0)], to=6)
    flat = [c.emit("Reshape", [t, c.ints([-1])]) for t in (lab, keep)]
    c.emit("Cast", [c.emit("Compress", flat, axis=0)], [c.y(1)], to=6)
