"""Hierarchical softmax: HSoftmax and its gradient, HSoftmaxSearch, HuffmanTreeHierarchy.

The hierarchy comes as a serialized ``caffe2.HierarchyProto`` (``hierarchy`` arg) or
``caffe2.TreeProto`` (``tree`` arg), the messages of ``proto/hsm.proto``.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from engine.runtime import device as dev
from engine.errors import ExecutionError
from engine.runtime.grad_makers import cc_maker, should_not_do_gradient
from engine.catalogue.registry import gradient, kernel, shape
from engine.runtime.shapes import FLOAT, TensorInfo, dims, same_as
from proto import caffe2_pb2, hsm_pb2

STRING = caffe2_pb2.TensorProto.STRING

# ---- kernels ----

def hsm_message(name: str):
    """The message class ``caffe2.<name>`` of hsm.proto (``proto/hsm_pb2``, as Caffe2's
    ``caffe2.proto.hsm_pb2``)."""
    return getattr(hsm_pb2, name)


def _as_bytes(v) -> bytes:
    return v if isinstance(v, bytes) else str(v).encode("latin-1")


@lru_cache(maxsize=64)
def _paths(hierarchy: bytes) -> dict[int, tuple[tuple[int, int, int], ...]]:
    """word id -> ((index, length, target) per node from the root) of a serialized HierarchyProto."""
    h = hsm_message("HierarchyProto")()
    h.ParseFromString(hierarchy)
    return {p.word_id: tuple((n.index, n.length, n.target) for n in p.path_nodes) for p in h.paths}


def _walk(x, label, hierarchy):
    """Every (sample, node) step in Caffe2's order (samples, then root to leaf) with its offset
    into the intermediate output (2 x length floats each: the FC output, then its softmax)."""
    paths = _paths(_as_bytes(hierarchy))
    steps = []
    for s, word in enumerate(dev.to_host(label).reshape(-1).tolist()):
        if word not in paths:
            raise ExecutionError(f"HSoftmax: label {word} is not in the hierarchy")
        steps.extend((s,) + node for node in paths[word])
    st = np.array(steps, dtype=np.int64).reshape(-1, 4)
    offsets = np.r_[0, np.cumsum(2 * st[:, 2])[:-1]] if len(st) else np.zeros(0, np.int64)
    return st, offsets


def _groups(st):
    """Steps grouped by tree node (index, length): one vectorised softmax per node."""
    keys = st[:, 1] * (1 << 32) + st[:, 2]
    for k in np.unique(keys):
        yield np.flatnonzero(keys == k)


@kernel("HSoftmax")
def h_softmax(xp, x, w, b, label, *, hierarchy: str = ""):
    # NOTE: loss = sum over the path's nodes of -log(max(softmax(W_node x + b_node)[target], 1e-20));
    # the 2nd output keeps each step's FC output and softmax for the gradient.
    m = x.shape[0] if x.ndim > 1 else 1
    x2 = x.reshape(m, -1)
    st, off = _walk(x, label, hierarchy)
    inter = xp.zeros(int(2 * st[:, 2].sum()) if len(st) else 0, dtype=np.float32)
    y = xp.zeros(m, dtype=np.float32)
    for g in _groups(st):
        s, idx, length, tgt = st[g, 0], int(st[g[0], 1]), int(st[g[0], 2]), st[g, 3]
        fc = x2[xp.asarray(s)] @ w[idx:idx + length].T + b[idx:idx + length]
        e = xp.exp(fc - fc.max(axis=1, keepdims=True))
        p = e / e.sum(axis=1, keepdims=True)
        cols = xp.asarray(off[g])[:, None] + xp.arange(length)
        inter[cols] = fc
        inter[cols + length] = p
        loss = -xp.log(xp.maximum(p[xp.arange(len(g)), xp.asarray(tgt)], np.float32(1e-20)))
        # NOTE: a negative target adds -1 to the loss (Caffe2's RunForwardSingle returns -1 then).
        y += xp.bincount(xp.asarray(s), weights=xp.where(xp.asarray(tgt) >= 0, loss, -1), minlength=m).astype(y.dtype)
    return y, inter


@kernel("HSoftmaxGradient")
def h_softmax_gradient(xp, x, w, b, label, inter, dy, *, hierarchy: str = ""):
    # NOTE: outputs dX, dW, db and the intermediate output's gradient (cross entropy's dX at the
    # softmax slots, softmax's dX at the FC slots).
    m = x.shape[0] if x.ndim > 1 else 1
    x2 = x.reshape(m, -1)
    st, off = _walk(x, label, hierarchy)
    dx, dw, db, dinter = xp.zeros_like(x2), xp.zeros_like(w), xp.zeros_like(b), xp.zeros_like(inter)
    dyv = dy.reshape(-1)
    for g in _groups(st):
        s, idx, length, tgt = xp.asarray(st[g, 0]), int(st[g[0], 1]), int(st[g[0], 2]), xp.asarray(st[g, 3])
        cols = xp.asarray(off[g])[:, None] + xp.arange(length)
        p = inter[cols + length]
        rows = xp.arange(len(g))
        d_ent = xp.zeros_like(p)
        d_ent[rows, tgt] = -dyv[s] / xp.maximum(p[rows, tgt], np.float32(1e-20))
        d_soft = (d_ent - (p * d_ent).sum(axis=1, keepdims=True)) * p
        dinter[cols + length] = d_ent
        dinter[cols] = d_soft
        dw[idx:idx + length] += d_soft.T @ x2[s]
        db[idx:idx + length] += d_soft.sum(axis=0)
        (np.add.at if xp is np else xp.add.at)(dx, s, d_soft @ w[idx:idx + length])
    return dx.reshape(x.shape), dw, db, dinter


def _search_order(node, x_row, w, b, parent, beam):
    """(name, score) of kept entries in Caffe2's extractNodes order: a node's kept children, its kept
    words, then each kept child's own entries, depth first."""
    n_child = len(node.children)
    length = n_child + len(node.word_ids)
    fc = (w[node.offset:node.offset + length] @ x_row + b[node.offset:node.offset + length]).astype(np.float32)
    e = np.exp(fc - fc.max())
    scores = (-np.log(np.maximum(e / e.sum(), np.float32(1e-20))) + parent).astype(np.float32)
    kept = [(c, scores[i]) for i, c in enumerate(node.children) if scores[i] < parent + beam]
    here = [(c.name, sc) for c, sc in kept] + [(str(wid), scores[n_child + i]) for i, wid in enumerate(node.word_ids)
                                              if scores[n_child + i] < parent + beam]
    for c, sc in kept:
        here.extend(_search_order(c, x_row, w, b, sc, beam))
    return here


def _adjust_heap(a, hole, n, value, less):
    top, child = hole, hole
    while child < (n - 1) // 2:
        child = 2 * (child + 1)
        if less(a[child], a[child - 1]):
            child -= 1
        a[hole], hole = a[child], child
    if n % 2 == 0 and child == (n - 2) // 2:
        child = 2 * (child + 1)
        a[hole], hole = a[child - 1], child - 1
    parent = (hole - 1) // 2
    while hole > top and less(a[parent], value):
        a[hole], hole = a[parent], parent
        parent = (hole - 1) // 2
    a[hole] = value


def _pop_heap(a, last, result, less):
    value, a[result] = a[result], a[0]
    _adjust_heap(a, 0, last, value, less)


def partial_sort(a, k, less):
    """libstdc++'s std::partial_sort of list `a` in place (heap select, then heap sort): the same
    order as Caffe2's for equal keys, which a stable sort would not give."""
    if k >= 2:
        for parent in range((k - 2) // 2, -1, -1):
            _adjust_heap(a, parent, k, a[parent], less)
    for i in range(k, len(a)):
        if less(a[i], a[0]):
            _pop_heap(a, k, i, less)
    for last in range(k - 1, 0, -1):
        _pop_heap(a, last, last, less)


@kernel("HSoftmaxSearch")
def h_softmax_search(xp, x, w, b, *, tree: str = "", beam: float = 0.01, topN: int = 1):
    # NOTE: per sample, the topN (name, score) pairs of the pruned tree by ascending score (-log prob
    # summed along the path); missing entries are "" with score 0.
    t = hsm_message("TreeProto")()
    t.ParseFromString(_as_bytes(tree))
    m = x.shape[0] if x.ndim > 1 else 1
    xh, wh, bh = dev.to_host(x).reshape(m, -1), dev.to_host(w), dev.to_host(b)
    names = np.full((m, topN), b"", dtype=object)  # NOTE: a string tensor: bytes, as Caffe2
    scores = np.zeros((m, topN), dtype=np.float32)
    for s in range(m):  # NOTE: a tree walk per sample (what stays in the beam depends on the sample)
        info = _search_order(t.root_node, xh[s], wh, bh, np.float32(0), np.float32(beam))
        if info:
            partial_sort(info, topN if topN < len(info) else len(info) - 1, lambda p, q: p[1] < q[1])
        for i, (name, sc) in enumerate(info[:topN]):
            names[s, i], scores[s, i] = _as_bytes(name), sc
    return names, xp.asarray(scores)


def _push_heap(a, value, less):
    a.append(value)
    hole = len(a) - 1
    parent = (hole - 1) // 2
    while hole > 0 and less(a[parent], value):
        a[hole], hole = a[parent], parent
        parent = (hole - 1) // 2
    a[hole] = value


@kernel("HuffmanTreeHierarchy")
def huffman_tree_hierarchy(xp, labels, *, num_classes: int = -1):
    # NOTE: a Huffman tree of the label counts, built with std::priority_queue's exact heap order (ties
    # included), serialized as a TreeProto in a (1,) string tensor; each inner node takes 2 output rows.
    lab = dev.to_host(labels).reshape(-1).astype(np.int64)
    if lab.size and (lab.max() >= num_classes or lab.min() < 0):
        raise ExecutionError(f"Found an input label not in range [0,{num_classes}]")
    counts = np.bincount(lab, minlength=max(num_classes, 0))
    less = lambda p, q: p[1] > q[1]  # noqa: E731  (label, count, left, right): a min-heap on count
    heap, tree = [], []
    for i in range(num_classes):
        _push_heap(heap, (i, int(counts[i]), -1, -1), less)

    def next_node():
        node = heap[0]
        last = len(heap) - 1
        _pop_heap(heap, last, last, less)
        heap.pop()
        tree.append(node)
        return len(tree) - 1, node
    while heap:
        li, ln = next_node()
        if heap:
            ri, rn = next_node()
            _push_heap(heap, (-1, ln[1] + rn[1], li, ri), less)
    node_cls = hsm_message("NodeProto")
    offset = [0]

    def leaf(k):
        return tree[k][2] == -1 and tree[k][3] == -1

    def build(k, proto):
        if k == -1 or leaf(k):
            return
        for side, child in enumerate(tree[k][2:]):
            if child == -1:
                continue
            if leaf(child):
                proto.word_ids.append(tree[child][0])
                offset[0] += side  # NOTE: as Caffe2: only a right leaf advances the offset
            else:
                c = proto.children.add()
                c.offset = offset[0]
                offset[0] += 2
                build(child, c)
    root = node_cls()
    root.offset, offset[0] = 0, 2
    if tree:
        build(len(tree) - 1, root)
    t = hsm_message("TreeProto")()
    t.root_node.CopyFrom(root)
    return np.array([t.SerializeToString()], dtype=object)


# ---- gradients ----

@gradient("HSoftmax")
@cc_maker
def h_softmax_gradient_maker(g):
    """[X, W, b, label, intermediate (O1), GO0] -> [GI0, GI1, GI2, GO1]: the last output is the
    intermediate output's gradient blob (so Caffe2's maker needs it given)."""
    ins = [g.I(0), g.I(1), g.I(2), g.I(3), g.O(1), g.GO(0)]
    return [g.op_("HSoftmaxGradient", ins, [g.GI(0), g.GI(1), g.GI(2), g.GO(1)])]


should_not_do_gradient("HSoftmaxSearch", "HuffmanTreeHierarchy")


# ---- shapes ----

shape("HSoftmax")(lambda x, w, b, label, **_: (TensorInfo(dims(x)[:1] if len(dims(x)) > 1 else (1,), FLOAT),
                                               TensorInfo((None,), FLOAT)))
shape("HSoftmaxGradient")(same_as(0, 1, 2, 4))
shape("HSoftmaxSearch")(lambda x, w, b, *, tree="", beam=0.01, topN=1: (
    TensorInfo((dims(x)[0] if len(dims(x)) > 1 else 1, int(topN)), STRING),
    TensorInfo((dims(x)[0] if len(dims(x)) > 1 else 1, int(topN)), FLOAT)))
shape("HuffmanTreeHierarchy")(lambda labels, *, num_classes=-1: TensorInfo((1,), STRING))
