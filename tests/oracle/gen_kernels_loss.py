"""Kernel oracle cases of the losses & metrics family (issue #18 part B).

Run from tests/oracle: ``../../.venv-caffe2/bin/python gen_kernels_loss.py ../golden``.
"""
import numpy as np

from kernel_oracle import Case, record, rng_for


def f4(r, *shape):
    return r.randn(*shape).astype("f4")


def u4(r, *shape, lo=0.05, hi=0.95):
    return r.uniform(lo, hi, shape).astype("f4")


def cases():
    for tag, args in (("", {}), ("_logD", dict(log_D_trick=1)), ("_unjoined", dict(unjoined_lr_loss=1))):
        name = "SigmoidCrossEntropyWithLogits" + tag
        r = rng_for(name)
        yield Case(name, "SigmoidCrossEntropyWithLogits", {"X": 3 * f4(r, 3, 4), "T": u4(r, 3, 4, lo=0, hi=1).round()},
                   ["Y"], args, grad=True)
    name = "SigmoidCrossEntropyWithLogits_3d_soft"
    r = rng_for(name)
    yield Case(name, "SigmoidCrossEntropyWithLogits", {"X": f4(r, 2, 3, 5), "T": u4(r, 2, 3, 5)}, ["Y"], grad=True)
    name = "SigmoidCrossEntropyWithLogits_1d"
    r = rng_for(name)
    yield Case(name, "SigmoidCrossEntropyWithLogits", {"X": f4(r, 5), "T": u4(r, 5)}, ["Y"], grad=True)
    name = "SigmoidCrossEntropyWithLogits_N0"
    r = rng_for(name)
    yield Case(name, "SigmoidCrossEntropyWithLogits", {"X": f4(r, 0, 4), "T": f4(r, 0, 4)}, ["Y"], grad=True)
    name = "WeightedSigmoidCrossEntropyWithLogits"
    r = rng_for(name)
    yield Case(name, name, {"X": f4(r, 3, 4), "T": u4(r, 3, 4), "W": u4(r, 3, 4)}, ["Y"], grad=True)
    name = "MakeTwoClass"
    r = rng_for(name)
    yield Case(name, name, {"X": u4(r, 2, 3)}, ["Y"], grad=True)
    name = "MakeTwoClass_1d"
    r = rng_for(name)
    yield Case(name, "MakeTwoClass", {"X": u4(r, 4)}, ["Y"], grad=True)
    name = "SpatialSoftmaxWithLoss"
    r = rng_for(name)
    yield Case(name, name, {"X": f4(r, 2, 3, 2, 4), "T": r.randint(0, 3, (2, 2, 4)).astype("i4")}, ["P", "L"],
               grad=True)
    name = "SpatialSoftmaxWithLoss_weighted"
    r = rng_for(name)
    yield Case(name, "SpatialSoftmaxWithLoss", {"X": f4(r, 2, 3, 2, 4), "T": r.randint(0, 3, (2, 2, 4)).astype("i4"),
                                                "W": u4(r, 2, 2, 4)}, ["P", "L"], grad=True)
    # ranking
    name = "PairWiseLoss"
    r = rng_for(name)
    yield Case(name, name, {"X": f4(r, 5, 1), "L": f4(r, 5, 1)}, ["Y"], grad=True)
    name = "PairWiseLoss_lengths"
    r = rng_for(name)
    yield Case(name, "PairWiseLoss", {"X": f4(r, 6), "L": f4(r, 6), "len": np.array([2, 0, 4], dtype="i4")}, ["Y"],
               grad=True)
    name = "MarginRankingCriterion"
    r = rng_for(name)
    yield Case(name, name, {"X1": f4(r, 6), "X2": f4(r, 6), "Y": np.array([1, -1, 1, 1, -1, -1], dtype="i4")}, ["L"],
               dict(margin=0.3), grad=True)
    name = "CosineEmbeddingCriterion"
    r = rng_for(name)
    yield Case(name, name, {"S": f4(r, 6), "Y": np.array([1, -1, 1, 1, -1, -1], dtype="i4")}, ["L"],
               dict(margin=0.2), grad=True)
    name = "BernoulliJSD"
    r = rng_for(name)
    yield Case(name, name, {"X": u4(r, 3, 4), "T": u4(r, 3, 4)}, ["L"], grad=True, atol=1e-4)
    name = "Perplexity"
    r = rng_for(name)
    yield Case(name, name, {"P": u4(r, 7)}, ["Y"], grad=True)
    name = "MultiClassAccuracy"
    r = rng_for(name)
    yield Case(name, name, {"X": f4(r, 7, 4), "L": np.array([0, 1, 2, 3, 0, 1, 2], dtype="i4")}, ["A", "C"],
               grad=True)
    name = "MultiClassAccuracy_N0"
    r = rng_for(name)
    yield Case(name, "MultiClassAccuracy", {"X": f4(r, 0, 4), "L": np.zeros(0, dtype="i4")}, ["A", "C"])

    for tag, ins, args in (("", {}, {}), ("lengths", {"L": np.array([5, 2, 0], "i4")}, {}),
                           ("no_merge", {"L": np.array([3, 5, 4], "i4")}, dict(merge_repeated=0))):
        name = "CTCGreedyDecoder" + ("_" + tag if tag else "")
        r = rng_for(name)
        x = r.randn(5, 3, 4).astype("f4")
        x[1] = x[0]  # a repeated label
        yield Case(name, "CTCGreedyDecoder", {"X": x, **ins}, ["len", "values"], args)

    for tag, args in (("", {}), ("ndcg_loss", dict(use_ndcg_as_loss=1)), ("ndcg_linear_gain", dict(use_ndcg_as_loss=1,
                      use_exp_gain=0)), ("no_norm", dict(use_idcg_normalization=0))):
        name = "LambdaRankNdcg" + ("_" + tag if tag else "")
        r = rng_for(name)
        rel = np.array([2, 0, 1, 3, 0, 0, 0, 1, 2], "f4")  # session 2 (4..6) has no relevant doc
        yield Case(name, "LambdaRankNdcg", {"Y": r.permutation(9).astype("f4") * 0.3 + f4(r, 9) * 0.01, "R": rel,
                                            "S": np.array([4, 3, 2], "i4")}, ["loss", "dY"], args, grad=True)

    for tag, ins, args, outs in (("", {}, {}, 3), ("lengths", {"L": np.array([5, 2, 0], "i4")}, dict(beam_width=3), 3),
                                 ("prune", {}, dict(beam_width=2, prune_threshold=0.2), 3), ("two_outputs", {}, {}, 2),
                                 ("candidates", {"L": np.array([5, 1, 0], "i4")}, dict(beam_width=3, num_candidates=3), 3),
                                 ("candidates_over_beam", {}, dict(beam_width=2, num_candidates=3), 3)):
        name = "CTCBeamSearchDecoder" + ("_" + tag if tag else "")
        r = rng_for(name)
        e = np.exp(r.randn(5, 3, 4) * 2)
        yield Case(name, "CTCBeamSearchDecoder", {"X": (e / e.sum(axis=2, keepdims=True)).astype("f4"), **ins},
                   ["len", "values", "prob"][:outs], args)
    yield from hsm_cases()


def hsm_cases():
    from caffe2.python import hsm_util
    from caffe2.proto import hsm_pb2
    tree = hsm_pb2.TreeProto()
    words = [hsm_util.create_node_with_words([0, 1], "node1"), hsm_util.create_node_with_words([2, 3, 4], "node2")]
    tree.root_node.MergeFrom(hsm_util.create_node_with_nodes(
        [hsm_util.create_node_with_nodes(words, "mid"), hsm_util.create_node_with_words([5], "node3")], "root"))
    hierarchy = hsm_util.create_hierarchy(tree)
    n_w = 2 + 2 + 2 + 3 + 1  # root (mid, node3), mid (node1, node2), node1, node2, node3 outputs
    for tag, labels in (("", [0, 3, 5, 2]), ("one", [4])):
        name = "HSoftmax" + ("_" + tag if tag else "")
        r = rng_for(name)
        yield Case(name, "HSoftmax", {"X": f4(r, len(labels), 3), "W": f4(r, n_w, 3), "b": f4(r, n_w),
                                      "L": np.array(labels, "i4")}, ["Y", "inter"],
                   dict(hierarchy=hierarchy.SerializeToString().decode("ascii")), grad=True)
    for tag, labels, k in (("", [0, 1, 1, 2, 2, 2, 3, 5, 5, 5, 5], 6), ("ties", [0, 1, 2, 3, 4], 5), ("three", [2, 2], 3)):
        name = "HuffmanTreeHierarchy" + ("_" + tag if tag else "")
        yield Case(name, "HuffmanTreeHierarchy", {"L": np.array(labels, "i8")}, ["tree"], dict(num_classes=k))
    for beam, top in ((0.7, 3), (20.0, 8)):
        name = f"HSoftmaxSearch_beam{beam}_top{top}"
        r = rng_for(name)
        yield Case(name, "HSoftmaxSearch", {"X": f4(r, 2, 3), "W": f4(r, n_w, 3), "b": f4(r, n_w)}, ["names", "scores"],
                   dict(tree=tree.SerializeToString().decode("ascii"), beam=beam, topN=top))


record("loss", cases())
