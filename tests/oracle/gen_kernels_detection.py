"""Kernel oracle cases of the detection family (issue #20): proposals, box decoding, NMS, RoIAlign.

Run from tests/oracle: ``../../.venv-caffe2/bin/python gen_kernels_detection.py ../golden``.
"""
import os

import numpy as np

import caffe2
from caffe2.python import dyndep
from kernel_oracle import Case, record, rng_for

# NOTE: RoIPoolF, PSRoIPool… live in the Detectron ops library, as in the catalogue's measurement.
dyndep.InitOpsLibrary(os.path.normpath(os.path.join(os.path.dirname(caffe2.__file__), "..", "torch", "lib",
                                                    "libcaffe2_detectron_ops_gpu.so")))


def f4(r, *shape):
    return r.randn(*shape).astype("f4")


def boxes(r, n, size=60.0, k=1):
    """n upright boxes [x1, y1, x2, y2] inside a size x size image, k per row (classes)."""
    xy = r.uniform(0, size * 0.7, (n, k, 2))
    wh = r.uniform(4, size * 0.4, (n, k, 2))
    return np.concatenate([xy, xy + wh], axis=2).reshape(n, 4 * k).astype("f4")


def rboxes(r, n, size=60.0, k=1):
    """n rotated boxes [cx, cy, w, h, angle] per class."""
    c = r.uniform(10, size - 10, (n, k, 2))
    wh = r.uniform(4, size * 0.4, (n, k, 2))
    a = r.uniform(-60, 60, (n, k, 1))
    return np.concatenate([c, wh, a], axis=2).reshape(n, 5 * k).astype("f4")


def anchors(a=3):
    base = np.array([[-8, -8, 23, 23], [-16, -4, 31, 19], [-4, -16, 19, 31], [-24, -24, 39, 39]], "f4")
    return base[:a]


def cases():
    # GenerateProposals: one and two images, legacy and exact box conventions, min_size and topN paths
    for tag, n, args in (("", 1, {}), ("_2img", 2, {}),
                         ("_noplus1", 1, {"legacy_plus_one": 0}),
                         ("_topn", 1, {"pre_nms_topN": 20, "post_nms_topN": 5, "nms_thresh": 0.5}),
                         ("_minsize", 2, {"min_size": 12.0, "pre_nms_topN": -1, "post_nms_topN": -1})):
        name = "GenerateProposals" + tag
        r = rng_for(name)
        a, h, w = 3, 5, 6
        info = np.array([[h * 16 - 3, w * 16 - 5, 1.0], [h * 16, w * 16 - 20, 1.5]], "f4")[:n]
        args = dict({"spatial_scale": 1.0 / 16, "min_size": 0.0, "pre_nms_topN": 50, "post_nms_topN": 20}, **args)
        yield Case(name, "GenerateProposals",
                   {"scores": r.uniform(0, 1, (n, a, h, w)).astype("f4"), "deltas": 0.3 * f4(r, n, 4 * a, h, w),
                    "im_info": info, "anchors": anchors(a)}, ["rois", "probs"], args)
    for tag, pre in (("_ties_partial", 100), ("_ties_full", -1)):  # quantised scores: tie order as libstdc++
        name = "GenerateProposals" + tag
        r = rng_for(name)
        yield Case(name, "GenerateProposals",
                   {"scores": (r.randint(0, 6, (1, 3, 6, 7)) / 8.0).astype("f4"), "deltas": 0.3 * f4(r, 1, 12, 6, 7),
                    "im_info": np.array([[96, 112, 1.0]], "f4"), "anchors": anchors(3)}, ["rois", "probs"],
                   {"spatial_scale": 1.0 / 16, "min_size": 0.0, "pre_nms_topN": pre, "post_nms_topN": 40})
    name = "GenerateProposals_rotated"
    r = rng_for(name)
    ranch = np.array([[0, 0, 16, 16, 0], [0, 0, 24, 12, 30], [0, 0, 12, 24, -45]], "f4")
    yield Case(name, "GenerateProposals",
               {"scores": r.uniform(0, 1, (1, 3, 4, 4)).astype("f4"), "deltas": 0.2 * f4(r, 1, 15, 4, 4),
                "im_info": np.array([[64, 64, 1.0]], "f4"), "anchors": ranch}, ["rois", "probs"],
               {"spatial_scale": 1.0 / 16, "min_size": 0.0, "pre_nms_topN": 30, "post_nms_topN": 10})
    # BBoxTransform
    for tag, rows, args in (("", 5, {}), ("_batch", 6, {"apply_scale": 0}),
                            ("_weights", 4, {"weights": [10.0, 10.0, 5.0, 5.0], "legacy_plus_one": 0})):
        name = "BBoxTransform" + tag
        r = rng_for(name)
        rois = boxes(r, rows)
        info = np.array([[60, 70, 1.0]], "f4")
        if tag == "_batch":
            rois = np.concatenate([np.repeat([[0], [1]], 3, axis=0).astype("f4"), rois], axis=1)
            info = np.array([[60, 70, 1.0], [90, 80, 1.5]], "f4")
        yield Case(name, "BBoxTransform", {"rois": rois, "deltas": 0.4 * f4(r, rows, 12), "im_info": info},
                   ["box_out", "splits"], args)
    name = "BBoxTransform_rotated"
    r = rng_for(name)
    yield Case(name, "BBoxTransform", {"rois": rboxes(r, 4), "deltas": 0.3 * f4(r, 4, 10),
                                      "im_info": np.array([[60, 70, 1.0]], "f4")}, ["box_out"], {"rotated": 1})
    # BoxWithNMSLimit: hard, soft linear/gaussian, class agnostic, batch splits, keeps outputs, rotated
    for tag, args in (("", {}), ("_soft_linear", {"soft_nms_enabled": 1, "nms": 0.3}),
                      ("_soft_gaussian", {"soft_nms_enabled": 1, "soft_nms_method": "gaussian"}),
                      ("_limit", {"detections_per_im": 7, "nms": 0.5}),
                      ("_noplus1", {"legacy_plus_one": 0, "score_thresh": 0.2})):
        name = "BoxWithNMSLimit" + tag
        r = rng_for(name)
        yield Case(name, "BoxWithNMSLimit", {"scores": r.uniform(0, 1, (12, 4)).astype("f4"),
                                             "boxes": boxes(r, 12, k=4)}, ["s", "b", "c"], args)
    name = "BoxWithNMSLimit_batch_keeps"
    r = rng_for(name)
    yield Case(name, "BoxWithNMSLimit", {"scores": r.uniform(0, 1, (10, 3)).astype("f4"), "boxes": boxes(r, 10, k=3),
                                         "splits": np.array([4, 6], "f4")},
               ["s", "b", "c", "bs", "keeps", "keeps_size"], {"detections_per_im": 6})
    name = "BoxWithNMSLimit_agnostic"
    r = rng_for(name)
    yield Case(name, "BoxWithNMSLimit", {"scores": r.uniform(0, 1, (10, 3)).astype("f4"), "boxes": boxes(r, 10, k=1)},
               ["s", "b", "c"], {"cls_agnostic_bbox_reg": 1, "output_classes_include_bg_cls": 0})
    name = "BoxWithNMSLimit_rotated"
    r = rng_for(name)
    yield Case(name, "BoxWithNMSLimit", {"scores": r.uniform(0, 1, (10, 3)).astype("f4"), "boxes": rboxes(r, 10, k=3)},
               ["s", "b", "c"], {"rotated": 1, "nms": 0.2}, rtol=1e-3, atol=1e-3)
    # RoIAlign
    for tag, order, rois_cols, args in (("", "NCHW", 5, {"spatial_scale": 0.25, "pooled_h": 3, "pooled_w": 2,
                                                         "sampling_ratio": 0}),
                                        ("_nhwc", "NHWC", 5, {"spatial_scale": 0.25, "pooled_h": 2, "pooled_w": 3,
                                                              "sampling_ratio": 2}),
                                        ("_4col", "NCHW", 4, {"spatial_scale": 0.5, "pooled_h": 2, "pooled_w": 2}),
                                        ("_aligned", "NCHW", 5, {"spatial_scale": 0.25, "pooled_h": 2,
                                                                 "pooled_w": 2, "aligned": 1})):
        name = "RoIAlign" + tag
        r = rng_for(name)
        x = f4(r, 2, 3, 9, 11) if order == "NCHW" else f4(r, 2, 9, 11, 3)
        b = boxes(r, 5, size=40.0)
        b[0] = [-6, -5, 50, 45]  # partly outside the map
        b[1] = [3, 3, 3.5, 3.2]  # smaller than one cell
        if rois_cols == 5:
            b = np.concatenate([r.randint(0, 2, (5, 1)).astype("f4"), b], axis=1)
        yield Case(name, "RoIAlign", {"X": x, "R": b}, ["Y"], dict(args, order=order), grad=(order == "NCHW"))

    # RoIAlignRotated: [batch, ctr_x, ctr_y, w, h, angle]
    name = "RoIAlignRotated"
    r = rng_for(name)
    rr = np.concatenate([r.randint(0, 2, (4, 1)), rboxes(r, 4, size=30.0)], axis=1).astype("f4")
    yield Case(name, "RoIAlignRotated", {"X": f4(r, 2, 3, 9, 11), "R": rr}, ["Y"],
               {"spatial_scale": 0.25, "pooled_h": 2, "pooled_w": 3, "sampling_ratio": 2}, grad=True, rtol=1e-3,
               atol=1e-4)
    name = "BatchPermutation"
    r = rng_for(name)
    yield Case(name, name, {"X": f4(r, 5, 3, 2), "I": np.array([3, 0, 4, 1, 2], np.int32)}, ["Y"], grad=True)
    for op in ("RoIPool", "RoIPoolF"):
        r = rng_for(op)
        b = np.concatenate([r.randint(0, 2, (5, 1)).astype("f4"), boxes(r, 5, size=40.0)], axis=1)
        b[0, 1:] = [-6, -5, 50, 45]
        yield Case(op, op, {"X": f4(r, 2, 3, 9, 11), "R": b}, ["Y", "argmax"],
                   {"spatial_scale": 0.25, "pooled_h": 3, "pooled_w": 2}, grad=True)
    name = "PSRoIPool"
    r = rng_for(name)
    b = np.concatenate([r.randint(0, 2, (4, 1)).astype("f4"), boxes(r, 4, size=40.0)], axis=1)
    yield Case(name, name, {"X": f4(r, 2, 2 * 3 * 3, 9, 11), "R": b}, ["Y", "mapping"],
               {"spatial_scale": 0.25, "group_size": 3, "output_dim": 2}, grad=True)
    name = "DistributeFpnProposals"
    r = rng_for(name)
    b = np.concatenate([np.zeros((12, 1), "f4"), boxes(r, 12, size=600.0)], axis=1)
    yield Case(name, name, {"rois": b}, ["f2", "f3", "f4", "f5", "restore"], {})
    for op, outs in (("CollectRpnProposals", ["rois"]),
                     ("CollectAndDistributeFpnRpnProposals", ["rois", "f2", "f3", "f4", "f5", "restore"])):
        r = rng_for(op)
        ins = {}
        for lvl in range(2, 7):
            ins["rois%d" % lvl] = np.concatenate([np.zeros((4, 1), "f4"), boxes(r, 4, size=500.0)], axis=1)
        for lvl in range(2, 7):
            ins["probs%d" % lvl] = r.uniform(0, 1, 4).astype("f4")
        yield Case(op, op, ins, outs, {"rpn_post_nms_topN": 12})
        # equal scores (a few values for 20 RoIs): Caffe2 keeps them in index order
        ties = {k: v for k, v in ins.items() if k.startswith("rois")}
        ties.update({"probs%d" % lvl: r.choice(np.array([0.2, 0.5, 0.9], "f4"), 4) for lvl in range(2, 7)})
        yield Case(op + "_ties", op, ties, outs, {"rpn_post_nms_topN": 13})

    for shape, args in (((2, 3, 9, 13), {}), ((1, 2, 17, 8), {"scales": 4, "overlap": 0.5}), ((1, 1, 7, 7), {})):
        name = "RMACRegions_%dx%d" % shape[2:]
        r = rng_for(name)
        yield Case(name, "RMACRegions", {"X": f4(r, *shape)}, ["rois"], args)

    for tag, args in (("", {}), ("_softmax", {"should_output_softmax": 1})):
        name = "HeatmapMaxKeypoint" + tag
        r = rng_for(name)
        hm = r.randn(4, 3, 8, 8).astype("f4")
        hm[0, 0, 0, 0] = 9.0  # a maximum in the corner (mirrored neighbourhood)
        hm[1, 1, 7, 3] = 9.0  # on the border
        yield Case(name, "HeatmapMaxKeypoint", {"hm": hm, "boxes": boxes(r, 4, size=80.0)}, ["kp"], args,
                   rtol=1e-3, atol=1e-3)


record("detection", cases())
