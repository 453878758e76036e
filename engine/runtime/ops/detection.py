"""Detection ops (Detectron exports): GenerateProposals, BoxWithNMSLimit, RoIAlign, BBoxTransform…

Boxes are upright ``[x1, y1, x2, y2]`` or rotated ``[ctr_x, ctr_y, w, h, angle°]``.  Caffe2's
"legacy plus one" (``legacy_plus_one``, on by default) counts a box from x1 to x2 as
``x2 - x1 + 1`` pixels wide; every width, area and clip bound below honours it.  The arithmetic
is float32 as in Caffe2's Eigen code; where scores tie (Int8 nets quantise them), boxes are
ordered as libstdc++'s std::sort / std::partial_sort order them, which decides what NMS keeps.
"""
from __future__ import annotations

import numpy as np

from engine.runtime.device import to_host as dev_host
from engine.errors import ExecutionError
from engine.runtime.grad_makers import should_not_do_gradient, simple
from engine.catalogue.registry import gradient, kernel
from engine.catalogue.registry import shape
from engine.runtime.shapes import FLOAT, INT32, TensorInfo, dims, join_layout, known, same_as, split_layout

F32 = np.float32
BBOX_XFORM_CLIP = F32(np.log(1000.0 / 16.0))


# -- libstdc++'s sorts (which of equal scores comes first decides which boxes survive NMS) ----------
def _no_ties(keys: np.ndarray, idx: np.ndarray) -> bool:
    return np.unique(keys[idx]).size == idx.size


def _sift(a: list, keys, hole: int, top: int, n: int, value: int) -> None:
    """Heap adjust: move the hole at `hole` down to a leaf, then push `value` up (min-heap on keys)."""
    child = hole
    while child < (n - 1) // 2:
        child = 2 * (child + 1)
        if keys[a[child]] > keys[a[child - 1]]:  # NOTE: the child with the smaller key
            child -= 1
        a[hole] = a[child]
        hole = child
    if n % 2 == 0 and child == (n - 2) // 2:
        child = 2 * (child + 1)
        a[hole] = a[child - 1]
        hole = child - 1
    parent = (hole - 1) // 2
    while hole > top and keys[a[parent]] > keys[value]:
        a[hole] = a[parent]
        hole, parent = parent, (parent - 1) // 2
    a[hole] = value


def _heap_partial_sort(a: list, keys, first: int, middle: int, last: int) -> None:
    """std::partial_sort of a[first:last] by descending key: a heap of the best `middle - first`, sorted."""
    n = middle - first
    view = a[first:middle]
    if n > 1:
        for parent in range((n - 2) // 2, -1, -1):
            _sift(view, keys, parent, parent, n, view[parent])
    for i in range(middle, last):
        if keys[a[i]] > keys[view[0]]:
            value, a[i] = a[i], view[0]
            _sift(view, keys, 0, 0, n, value)
    for end in range(n - 1, 0, -1):
        value, view[end] = view[end], view[0]
        _sift(view, keys, 0, 0, end, value)
    a[first:middle] = view


def _introsort(a: list, keys, first: int, last: int, depth: int) -> None:
    while last - first > 16:
        if depth == 0:
            _heap_partial_sort(a, keys, first, last, last)
            return
        depth -= 1
        mid = first + (last - first) // 2
        x, y, z = first + 1, mid, last - 1  # median of three moved to `first`
        kx, ky, kz = keys[a[x]], keys[a[y]], keys[a[z]]
        if kx > ky:
            m = y if ky > kz else (z if kx > kz else x)
        else:
            m = x if kx > kz else (z if ky > kz else y)
        a[first], a[m] = a[m], a[first]
        pivot = keys[a[first]]
        lo, hi = first + 1, last
        while True:
            while keys[a[lo]] > pivot:
                lo += 1
            hi -= 1
            while pivot > keys[a[hi]]:
                hi -= 1
            if not lo < hi:
                break
            a[lo], a[hi] = a[hi], a[lo]
            lo += 1
        _introsort(a, keys, lo, last, depth)
        last = lo


def _insertion_sort(a: list, keys, first: int, last: int, guarded: bool) -> None:
    for i in range(first + (1 if guarded else 0), last):
        v = a[i]
        if guarded and keys[v] > keys[a[first]]:
            a[first + 1:i + 1] = a[first:i]
            a[first] = v
            continue
        j = i
        while keys[v] > keys[a[j - 1]]:
            a[j] = a[j - 1]
            j -= 1
        a[j] = v


def cxx_sort_desc(keys: np.ndarray, idx) -> np.ndarray:
    """``std::sort(idx, key[l] > key[r])`` exactly as libstdc++ orders equal keys."""
    idx = np.asarray(idx, np.int64)
    if _no_ties(keys, idx):
        return idx[np.argsort(-keys[idx], kind="stable")]
    a, k = idx.tolist(), keys.tolist()
    n = len(a)
    if n > 1:
        _introsort(a, k, 0, n, 2 * (n.bit_length() - 1))
        if n > 16:
            _insertion_sort(a, k, 0, 16, True)
            _insertion_sort(a, k, 16, n, False)
        else:
            _insertion_sort(a, k, 0, n, True)
    return np.array(a, np.int64)


def cxx_partial_sort_desc(keys: np.ndarray, idx, top: int) -> np.ndarray:
    """``std::partial_sort`` of the best `top` of `idx` by descending key (libstdc++'s heap select)."""
    idx = np.asarray(idx, np.int64)
    if _no_ties(keys, idx):
        return idx[np.argsort(-keys[idx], kind="stable")[:top]]
    a = idx.tolist()
    _heap_partial_sort(a, keys.tolist(), 0, top, len(a))
    return np.array(a[:top], np.int64)


# -- box utilities (numpy, float32) --------------------------------------------------------
def bbox_transform(boxes: np.ndarray, deltas: np.ndarray, weights=(1.0, 1.0, 1.0, 1.0), plus_one: bool = True,
                   angle_bound: tuple[int, int] | None = (-90, 90)) -> np.ndarray:
    """Apply regression deltas to boxes (upright: 4 columns, rotated: 5, angle deltas in radians)."""
    w = np.asarray(weights, F32)
    one = F32(int(plus_one))
    if boxes.shape[1] == 4:
        widths = boxes[:, 2] - boxes[:, 0] + one
        heights = boxes[:, 3] - boxes[:, 1] + one
        ctr_x, ctr_y = boxes[:, 0] + F32(0.5) * widths, boxes[:, 1] + F32(0.5) * heights
    else:
        ctr_x, ctr_y, widths, heights = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    dx, dy = deltas[:, 0] / w[0], deltas[:, 1] / w[1]
    dw = np.minimum(deltas[:, 2] / w[2], BBOX_XFORM_CLIP)
    dh = np.minimum(deltas[:, 3] / w[3], BBOX_XFORM_CLIP)
    px, py = dx * widths + ctr_x, dy * heights + ctr_y
    # NOTE: exp in float64 rounded to float32 is glibc's expf (what Caffe2's strided Eigen columns call);
    # numpy's float32 SIMD exp can be 1 ulp off, which moves boxes and flips Int8 rounding downstream.
    pw = np.exp(dw.astype(np.float64)).astype(F32) * widths
    ph = np.exp(dh.astype(np.float64)).astype(F32) * heights
    if boxes.shape[1] == 4:
        return np.stack([px - F32(0.5) * pw, py - F32(0.5) * ph,
                         px + F32(0.5) * pw - one, py + F32(0.5) * ph - one], axis=1).astype(F32)
    angle = (deltas[:, 4] * F32(180.0 / np.pi) + boxes[:, 4]).astype(F32)
    if angle_bound is not None:
        lo, hi = angle_bound
        period = hi - lo
        angle = np.where(angle < lo, angle + F32(period), np.where(angle > hi, angle - F32(period), angle))
    return np.stack([px, py, pw, ph, angle], axis=1).astype(F32)


def clip_boxes(boxes: np.ndarray, height: int, width: int, angle_thresh: float = 1.0,
               plus_one: bool = True) -> np.ndarray:
    """Clip to the image; rotated boxes only when nearly upright (|angle| <= angle_thresh)."""
    one = int(plus_one)
    if boxes.shape[1] == 4:
        hi = np.array([width - one, height - one, width - one, height - one], F32)
        return np.maximum(np.minimum(boxes, hi), F32(0)).astype(F32)
    out = boxes.copy()
    up = np.abs(boxes[:, 4]) <= angle_thresh
    b = boxes[up]
    half_w, half_h = (b[:, 2] - one) / F32(2.0), (b[:, 3] - one) / F32(2.0)
    xyxy = np.stack([b[:, 0] - half_w, b[:, 1] - half_h, b[:, 0] + half_w, b[:, 1] + half_h], axis=1)
    c = clip_boxes(xyxy.astype(F32), height, width, plus_one=plus_one)
    out[up, :4] = np.stack([(c[:, 0] + c[:, 2]) / F32(2.0), (c[:, 1] + c[:, 3]) / F32(2.0),
                            c[:, 2] - c[:, 0] + one, c[:, 3] - c[:, 1] + one], axis=1)
    return out


def _areas(b: np.ndarray, one: F32) -> np.ndarray:
    return (b[:, 2] - b[:, 0] + one) * (b[:, 3] - b[:, 1] + one)


def _overlaps(boxes: np.ndarray, i: int, rest: np.ndarray, areas: np.ndarray, one: F32) -> np.ndarray:
    """IoU of box i with boxes `rest` (upright; rotated boxes go through their polygon overlap)."""
    if boxes.shape[1] == 5:
        return np.array([rotated_iou(boxes[i], boxes[j]) for j in rest], F32)
    b, r = boxes[i], boxes[rest]
    w = np.maximum(np.minimum(r[:, 2], b[2]) - np.maximum(r[:, 0], b[0]) + one, F32(0))
    h = np.maximum(np.minimum(r[:, 3], b[3]) - np.maximum(r[:, 1], b[1]) + one, F32(0))
    inter = w * h
    with np.errstate(invalid="ignore", divide="ignore"):  # NOTE: 0/0 for empty boxes: NaN never suppresses
        return inter / (areas[i] + areas[rest] - inter)


def nms_keep(boxes: np.ndarray, order: np.ndarray, thresh: float, top_n: int = -1, plus_one: bool = True) -> list[int]:
    """Greedy NMS over `order` (indices, best first): keep a box, drop later ones overlapping > thresh."""
    one = F32(int(plus_one))
    areas = _areas(boxes, one) if boxes.shape[1] == 4 else None
    keep: list[int] = []
    order = np.asarray(order, np.int64)
    while order.size:
        if 0 <= top_n <= len(keep):
            break
        i, rest = int(order[0]), order[1:]
        keep.append(i)
        order = rest[_overlaps(boxes, i, rest, areas, one) <= F32(thresh)]
    return keep


def soft_nms(boxes: np.ndarray, scores: np.ndarray, indices: np.ndarray, sigma: float, thresh: float,
             score_thresh: float, method: int, plus_one: bool = True) -> tuple[list[int], np.ndarray]:
    """Soft-NMS (1 linear, 2 gaussian): decays overlapping scores; returns kept indices and new scores."""
    one = F32(int(plus_one))
    areas = _areas(boxes, one) if boxes.shape[1] == 4 else None
    out = scores.astype(F32).copy()
    keep: list[int] = []
    pending = np.asarray(indices, np.int64)
    while pending.size:
        pos = int(np.argmax(out[pending]))  # NOTE: first maximum, as Eigen's maxCoeff
        i = int(pending[pos])
        keep.append(i)
        pending[[0, pos]] = pending[[pos, 0]]
        rest = pending[1:]
        ovr = _overlaps(boxes, i, rest, areas, one)
        if method == 1:
            weight = np.where(ovr > F32(thresh), F32(1) - ovr, F32(1))
        elif method == 2:
            weight = np.exp(-ovr.astype(F32) * ovr / F32(sigma))
        else:
            weight = np.where(ovr > F32(thresh), F32(0), F32(1))
        out[rest] = (out[rest] * weight).astype(F32)
        pending = rest[out[rest] >= F32(score_thresh)]
    return keep, out


def _vertices(b: np.ndarray) -> np.ndarray:
    """Corners of a rotated box [cx, cy, w, h, angle°] (Caffe2's angle sign: counter-clockwise)."""
    theta = -float(b[4]) * 0.01745329251
    c, s = np.float32(np.cos(theta)) * F32(0.5), np.float32(np.sin(theta)) * F32(0.5)
    cx, cy, w, h = (F32(v) for v in b[:4])
    p0 = np.array([cx - s * h - c * w, cy + c * h - s * w], F32)
    p1 = np.array([cx + s * h - c * w, cy - c * h - s * w], F32)
    ctr = np.array([cx, cy], F32)
    return np.stack([p0, p1, 2 * ctr - p0, 2 * ctr - p1])


def _cross2(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """z of the cross product of 2-D vectors (broadcasting); np.cross on 2-D vectors is deprecated
    in NumPy 2 and computes exactly this, in this order."""
    return u[..., 0] * v[..., 1] - u[..., 1] * v[..., 0]


def _clip_polygon(subject: np.ndarray, clip: np.ndarray) -> np.ndarray:
    """Sutherland–Hodgman: the part of convex polygon `subject` inside convex `clip` (both CCW or CW)."""
    orient = np.sign(_cross2(clip[1] - clip[0], clip[2] - clip[1])) or 1.0
    out = subject
    for k in range(len(clip)):
        a, b = clip[k], clip[(k + 1) % len(clip)]
        if not len(out):
            break
        pts, inside = out, orient * _cross2(b - a, out - a) >= 0
        new = []
        for j in range(len(pts)):
            p, q = pts[j], pts[(j + 1) % len(pts)]
            ip, iq = inside[j], inside[(j + 1) % len(pts)]
            if ip:
                new.append(p)
            if ip != iq:
                d = q - p
                den = _cross2(b - a, d)
                if den != 0:
                    new.append(p + d * (_cross2(a - p, b - a) / -den))
        out = np.array(new, np.float64).reshape(-1, 2)
    return out


def rotated_iou(a: np.ndarray, b: np.ndarray) -> float:
    """IoU of two rotated boxes from the area of their intersection polygon."""
    pa, pb = _vertices(a).astype(np.float64), _vertices(b).astype(np.float64)
    poly = _clip_polygon(pa, pb)
    inter = 0.0
    if len(poly) > 2:
        x, y = poly[:, 0], poly[:, 1]
        inter = abs(float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))) / 2.0
    area_a, area_b = float(a[2]) * float(a[3]), float(b[2]) * float(b[3])
    return inter / (area_a + area_b - inter) if area_a + area_b - inter > 0 else 0.0


# ---- kernels ----

def _where(ctx) -> str:
    return f"{ctx.net_name or 'net'}: op #{ctx.index} {ctx.op.type} '{ctx.op.name}'"


@kernel("GenerateProposals", "GenerateProposalsCPP", needs_context=True)
def generate_proposals(xp, scores, deltas, im_info, anchors, *, ctx, spatial_scale: float = 1.0 / 16,
                       pre_nms_topN: int = 6000, post_nms_topN: int = 300, nms_thresh: float = 0.7,
                       min_size: float = 16.0, angle_bound_on: bool = True, angle_bound_lo: int = -90,
                       angle_bound_hi: int = 90, clip_angle_thresh: float = 1.0, legacy_plus_one: bool = True):
    """RPN proposals per image: decode every anchor, clip, drop small boxes, NMS, keep the best."""
    scores, deltas = np.asarray(scores, F32), np.asarray(deltas, F32)
    im_info, anchors = np.asarray(im_info, F32), np.asarray(anchors, F32)
    if scores.ndim != 4 or anchors.ndim != 2 or anchors.shape[1] not in (4, 5):
        raise ExecutionError(f"{_where(ctx)}: scores must be (N, A, H, W) and anchors (A, 4 or 5)")
    n, a, h, w = scores.shape
    box_dim = anchors.shape[1]
    if deltas.shape != (n, a * box_dim, h, w) or im_info.shape != (n, 3) or anchors.shape[0] != a:
        raise ExecutionError(f"{_where(ctx)}: bbox_deltas {deltas.shape}, im_info {im_info.shape} and anchors "
                             f"{anchors.shape} do not fit scores {scores.shape}")
    if n and not h * w:  # NOTE: no images is fine; images of an empty feature map Caffe2 refuses
        raise ExecutionError(f"{_where(ctx)}: scores {scores.shape} hold an empty (H x W = 0) feature map")
    stride = F32(1.0 / spatial_scale)
    bound = (angle_bound_lo, angle_bound_hi) if angle_bound_on else None
    rois, probs = [], []
    for i in range(n):
        # NOTE: Caffe2 1.10 sorts scores raveled in (A, H, W) order and builds only the anchors it keeps.
        s = scores[i].reshape(-1)
        if 0 < pre_nms_topN < s.size:
            order = cxx_partial_sort_desc(s, np.arange(s.size), pre_nms_topN)
        else:
            order = cxx_sort_desc(s, np.arange(s.size))
        ai, hw = np.divmod(order, h * w)
        hi, wi = np.divmod(hw, w)
        shift = np.zeros((order.size, box_dim), F32)
        shift[:, 0], shift[:, 1] = wi.astype(F32) * stride, hi.astype(F32) * stride
        if box_dim == 4:
            shift[:, 2], shift[:, 3] = shift[:, 0], shift[:, 1]
        d = deltas[i].reshape(a, box_dim, h, w)[ai, :, hi, wi]
        s_sorted = s[order]
        props = bbox_transform((anchors[ai] + shift).astype(F32), d, plus_one=legacy_plus_one, angle_bound=bound)
        props = clip_boxes(props, int(im_info[i, 0]), int(im_info[i, 1]), clip_angle_thresh, legacy_plus_one)
        keep = _filter_boxes(props, min_size, im_info[i], legacy_plus_one)
        top = post_nms_topN if 0 < post_nms_topN < keep.size else -1
        keep = np.array(nms_keep(props, keep, nms_thresh, top, legacy_plus_one), np.int64)
        rois.append(np.concatenate([np.full((keep.size, 1), i, F32), props[keep]], axis=1))
        probs.append(s_sorted[keep])
    if not rois:  # NOTE: no images (an empty batch): Caffe2 gives (0, box_dim + 1) rois and (0,) probs
        return np.zeros((0, box_dim + 1), F32), np.zeros(0, F32)
    return (np.concatenate(rois).reshape(-1, box_dim + 1).astype(F32),
            np.concatenate(probs).astype(F32))


def _filter_boxes(b: np.ndarray, min_size: float, info: np.ndarray, plus_one: bool) -> np.ndarray:
    """Indices of boxes at least min_size * scale on each side whose centre lies in the image."""
    m = F32(min_size * float(info[2]))  # NOTE: Caffe2 scales min_size in double, compares in float
    one = F32(int(plus_one))
    if b.shape[1] == 4:
        ws, hs = b[:, 2] - b[:, 0] + one, b[:, 3] - b[:, 1] + one
        cx, cy = b[:, 0] + ws / F32(2), b[:, 1] + hs / F32(2)
    else:
        cx, cy, ws, hs = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
    return np.flatnonzero((ws >= m) & (hs >= m) & (cx < info[1]) & (cy < info[0]))


@kernel("BBoxTransform", needs_context=True)
def bbox_transform_op(xp, rois, deltas, im_info, *, ctx, weights: list = (1.0, 1.0, 1.0, 1.0),
                      apply_scale: bool = True, rotated: bool = False, angle_bound_on: bool = True,
                      angle_bound_lo: int = -90, angle_bound_hi: int = 90, clip_angle_thresh: float = 1.0,
                      legacy_plus_one: bool = True):
    """Decode per-class deltas on each image's RoIs; boxes come out in the scaled image space."""
    rois, deltas, im_info = (np.asarray(v, F32) for v in (rois, deltas, im_info))
    box_dim = 5 if rotated else 4
    if rois.ndim != 2 or rois.shape[1] not in (box_dim, box_dim + 1) or deltas.ndim != 2 \
            or deltas.shape[0] != rois.shape[0] or deltas.shape[1] % box_dim or im_info.shape[1:] != (3,):
        raise ExecutionError(f"{_where(ctx)}: rois {rois.shape}, deltas {deltas.shape}, im_info {im_info.shape} "
                             f"do not fit {box_dim}-column boxes")
    if len(weights) != 4:
        raise ExecutionError(f"{_where(ctx)}: weights size {len(weights)}must be 4.")
    batch = im_info.shape[0]
    if rois.shape[1] == box_dim:
        if batch != 1:
            raise ExecutionError(f"{_where(ctx)}: RoIs without batch ids need one image, im_info has {batch}")
        counts = np.array([rois.shape[0]])
    else:
        counts = np.bincount(rois[:, 0].astype(np.int64), minlength=batch)
        if counts.size > batch:
            raise ExecutionError(f"{_where(ctx)}: an RoI's batch id is >= {batch}")
    out = np.empty_like(deltas)
    bound = (angle_bound_lo, angle_bound_hi) if angle_bound_on else None
    start = 0
    for i, c in enumerate(counts):
        before, after = im_info[i, 2], (im_info[i, 2] if apply_scale else F32(1.0))
        img_h, img_w = int(im_info[i, 0] / before + F32(0.5)), int(im_info[i, 1] / before + F32(0.5))
        boxes = rois[start:start + c, -box_dim:].copy()
        boxes[:, :4] /= before
        k = deltas.shape[1] // box_dim  # every class at once: rows (roi, class)
        b = bbox_transform(np.repeat(boxes, k, axis=0), deltas[start:start + c].reshape(-1, box_dim), weights,
                           legacy_plus_one, bound)
        b = clip_boxes(b, img_h, img_w, clip_angle_thresh, legacy_plus_one)
        b[:, :4] *= after
        out[start:start + c] = b.reshape(c, k * box_dim)
        start += c
    return out, counts.astype(F32)


@kernel("BoxWithNMSLimit", needs_context=True)
def box_with_nms_limit(xp, scores, boxes, batch_splits=None, *, ctx, score_thresh: float = 0.05, nms: float = 0.3,
                       detections_per_im: int = 100, soft_nms_enabled: bool = False,
                       soft_nms_method: str = "linear", soft_nms_sigma: float = 0.5,
                       soft_nms_min_score_thres: float = 0.001, rotated: bool = False,
                       cls_agnostic_bbox_reg: bool = False, input_boxes_include_bg_cls: bool = True,
                       output_classes_include_bg_cls: bool = True, legacy_plus_one: bool = True):
    """Per-class (hard or soft) NMS of each image's boxes, then the best `detections_per_im` overall."""
    if soft_nms_method not in ("linear", "gaussian"):
        raise ExecutionError(f"{_where(ctx)}: Unexpected soft_nms_method")
    scores, boxes = np.asarray(scores, F32), np.asarray(boxes, F32)
    # NOTE: not reshape(n, -1): with no boxes (n = 0) NumPy cannot infer the -1.
    scores = scores.reshape(scores.shape[0], int(np.prod(scores.shape[1:])))
    boxes = boxes.reshape(boxes.shape[0], int(np.prod(boxes.shape[1:])))
    box_dim = 5 if rotated else 4
    n, num_classes = scores.shape
    fg0 = int(input_boxes_include_bg_cls)

    def box_col(j: int) -> int:
        return 0 if cls_agnostic_bbox_reg else (j if input_boxes_include_bg_cls else j - 1)

    if boxes.shape[0] != n or boxes.shape[1] != (box_col(num_classes - 1) + 1) * box_dim:
        raise ExecutionError(f"{_where(ctx)}: boxes {boxes.shape} do not fit scores {scores.shape}")
    splits = np.array([n]) if batch_splits is None else np.asarray(batch_splits).reshape(-1).astype(np.int64)
    if splits.sum() != n:
        raise ExecutionError(f"{_where(ctx)}: batch_splits sum to {splits.sum()}, not {n} boxes")
    method = 1 if soft_nms_method == "linear" else 2
    out_s, out_b, out_c, out_keeps, keep_sizes, per_image = [], [], [], [], [], []
    offset = 0
    for nb in splits:
        sc, bx = scores[offset:offset + nb], boxes[offset:offset + nb]
        used = sc.copy()
        keeps: list[list[int]] = [[] for _ in range(num_classes)]
        for j in range(1, num_classes):
            col = sc[:, j - 1 + fg0]
            cand = np.flatnonzero(col > F32(score_thresh))
            cb = bx[:, box_col(j) * box_dim:(box_col(j) + 1) * box_dim]
            if soft_nms_enabled:
                keeps[j], used[:, j - 1 + fg0] = soft_nms(cb, col, cand, soft_nms_sigma, nms,
                                                           soft_nms_min_score_thres, method, legacy_plus_one)
            else:
                cand = cxx_sort_desc(col, cand)
                keeps[j] = nms_keep(cb, cand, nms, detections_per_im if detections_per_im > 0 else -1, legacy_plus_one)
        total = sum(len(k) for k in keeps)
        if 0 < detections_per_im < total:
            flat = [(j, i) for j in range(1, num_classes) for i in keeps[j]]
            vals = np.array([used[i, j - 1 + fg0] for j, i in flat], F32)
            best = cxx_sort_desc(vals, np.arange(vals.size))[:detections_per_im]
            keeps = [[] for _ in range(num_classes)]
            for k in best:
                keeps[flat[k][0]].append(flat[k][1])
            total = detections_per_im
        for j in range(1, num_classes):
            idx = np.array(keeps[j], np.int64)
            out_s.append(used[idx, j - 1 + fg0])
            out_b.append(bx[idx, box_col(j) * box_dim:(box_col(j) + 1) * box_dim])
            out_c.append(np.full(idx.size, j - (not output_classes_include_bg_cls), F32))
        out_keeps.extend(i for k in keeps for i in k)
        keep_sizes.append([len(k) for k in keeps])
        per_image.append(total)
        offset += nb
    result = (np.concatenate(out_s).astype(F32) if out_s else np.zeros(0, F32),
              np.concatenate(out_b).reshape(-1, box_dim).astype(F32) if out_b else np.zeros((0, box_dim), F32),
              np.concatenate(out_c).astype(F32) if out_c else np.zeros(0, F32),
              np.array(per_image, F32), np.array(out_keeps, np.int32),
              np.array(keep_sizes, np.int32).reshape(len(splits), num_classes))
    return result[:max(3, len(ctx.op.output))]


def _bilinear_weights(y: np.ndarray, x: np.ndarray, height: int, width: int):
    """Corner indices and weights of bilinear samples at (y, x), zero outside [-1, H] x [-1, W]."""
    out = (y < -1.0) | (y > height) | (x < -1.0) | (x > width)
    y, x = np.maximum(y, F32(0)), np.maximum(x, F32(0))
    y_low, x_low = y.astype(np.int64), x.astype(np.int64)
    y_edge, x_edge = y_low >= height - 1, x_low >= width - 1
    y_low, x_low = np.where(y_edge, height - 1, y_low), np.where(x_edge, width - 1, x_low)
    y_high, x_high = np.where(y_edge, y_low, y_low + 1), np.where(x_edge, x_low, x_low + 1)
    y, x = np.where(y_edge, y_low.astype(F32), y), np.where(x_edge, x_low.astype(F32), x)
    ly, lx = (y - y_low).astype(F32), (x - x_low).astype(F32)
    hy, hx = F32(1) - ly, F32(1) - lx
    w = [hy * hx, hy * lx, ly * hx, ly * lx]
    w = [np.where(out, F32(0), wi).astype(F32) for wi in w]
    pos = [y_low * width + x_low, y_low * width + x_high, y_high * width + x_low, y_high * width + x_high]
    pos = [np.where(out, 0, p) for p in pos]
    return pos, w


def _bin_grid(rw, rh, pooled_h: int, pooled_w: int, sampling_ratio: int, aligned: bool):
    """An RoI's bin sizes, sample grid per bin and the samples' offsets inside a bin (float32, as Caffe2).

    Returns (rw, rh, bin_h, bin_w, grid_h, grid_w, offsets_y, offsets_x); a legacy (not aligned)
    RoI is at least 1x1."""
    if not aligned:
        rw, rh = max(rw, F32(1)), max(rh, F32(1))
    bin_h, bin_w = F32(rh / F32(pooled_h)), F32(rw / F32(pooled_w))
    gh = sampling_ratio if sampling_ratio > 0 else int(np.ceil(rh / F32(pooled_h)))
    gw = sampling_ratio if sampling_ratio > 0 else int(np.ceil(rw / F32(pooled_w)))
    iy = (np.arange(gh, dtype=F32) + F32(0.5)) * bin_h / F32(gh)
    ix = (np.arange(gw, dtype=F32) + F32(0.5)) * bin_w / F32(gw)
    return rw, rh, bin_h, bin_w, gh, gw, iy, ix


def _rotated_samples(rois: np.ndarray, height: int, width: int, spatial_scale: float, pooled_h: int,
                     pooled_w: int, sampling_ratio: int, aligned: bool):
    """_roi_samples for rotated RoIs [batch, ctr_x, ctr_y, w, h, angle°]: the grid turned about the centre."""
    offset = F32(0.5) if aligned else F32(0)
    for roi in rois:
        b = int(roi[0]) if rois.shape[1] == 6 else 0
        cx, cy, rw, rh = (roi[-5:-1] * F32(spatial_scale)).astype(F32)
        cx, cy = cx - offset, cy - offset
        theta = F32(roi[-1] * F32(np.pi / 180.0))
        rw, rh, bin_h, bin_w, gh, gw, iy, ix = _bin_grid(rw, rh, pooled_h, pooled_w, sampling_ratio, aligned)
        ys = (-rh / F32(2) + np.arange(pooled_h, dtype=F32)[:, None] * bin_h + iy[None, :]).astype(F32)
        xs = (-rw / F32(2) + np.arange(pooled_w, dtype=F32)[:, None] * bin_w + ix[None, :]).astype(F32)
        yy = np.broadcast_to(ys[:, None, :, None], (pooled_h, pooled_w, gh, gw))
        xx = np.broadcast_to(xs[None, :, None, :], (pooled_h, pooled_w, gh, gw))
        c, s_ = F32(np.cos(theta)), F32(np.sin(theta))
        x = (xx * c + yy * s_ + cx).astype(F32)
        y = (yy * c - xx * s_ + cy).astype(F32)
        pos, w = _bilinear_weights(y, x, height, width)
        yield b, pos, w, F32(max(gh * gw, 1))


def _roi_samples(rois: np.ndarray, height: int, width: int, spatial_scale: float, pooled_h: int, pooled_w: int,
                 sampling_ratio: int, aligned: bool):
    """Per RoI: (image, corner indices, corner weights already divided by the sample count).

    Index/weight arrays have shape (pooled_h, pooled_w, grid_h, grid_w) over the H*W plane."""
    offset = F32(0.5) if aligned else F32(0)
    for roi in rois:  # NOTE: one RoI at a time; its samples and channels are vectorised
        b = int(roi[0]) if rois.shape[1] == 5 else 0
        x1, y1, x2, y2 = (roi[-4:] * F32(spatial_scale) - offset).astype(F32)
        rw, rh = x2 - x1, y2 - y1
        rw, rh, bin_h, bin_w, gh, gw, iy, ix = _bin_grid(rw, rh, pooled_h, pooled_w, sampling_ratio, aligned)
        ys = (y1 + np.arange(pooled_h, dtype=F32)[:, None] * bin_h + iy[None, :]).astype(F32)  # (ph, gh)
        xs = (x1 + np.arange(pooled_w, dtype=F32)[:, None] * bin_w + ix[None, :]).astype(F32)  # (pw, gw)
        yy = np.broadcast_to(ys[:, None, :, None], (pooled_h, pooled_w, gh, gw))
        xx = np.broadcast_to(xs[None, :, None, :], (pooled_h, pooled_w, gh, gw))
        pos, w = _bilinear_weights(yy, xx, height, width)
        yield b, pos, w, F32(max(gh * gw, 1))


def _check_rois(ctx, x: np.ndarray, rois: np.ndarray) -> None:
    if x.ndim != 4:
        raise ExecutionError(f"{_where(ctx)}: X must be 4-D, got {x.shape}")
    cols = (5, 6) if ctx.op.type.startswith("RoIAlignRotated") else (4, 5)
    if rois.size and (rois.ndim != 2 or rois.shape[1] not in cols):
        raise ExecutionError(f"{_where(ctx)}: RoIs must be (R, {cols[0]} or {cols[1]}), got {rois.shape}")


@kernel("RoIAlign", "RoIAlignRotated", needs_context=True)
def roi_align(xp, x, rois, *, ctx, order: str = "NCHW", spatial_scale: float = 1.0, pooled_h: int = 1,
              pooled_w: int = 1, sampling_ratio: int = -1, aligned: bool = False):
    """Average of bilinear samples on a grid in each of pooled_h x pooled_w bins of every RoI."""
    x, rois = np.asarray(x, F32), np.asarray(rois, F32)
    _check_rois(ctx, x, rois)
    nhwc = order == "NHWC"
    feat = x if nhwc else x.transpose(0, 2, 3, 1)  # (N, H, W, C)
    _, height, width, c = feat.shape
    flat = feat.reshape(feat.shape[0], height * width, c)
    out = np.zeros((rois.shape[0] if rois.size else 0, pooled_h, pooled_w, c), F32)
    sampler = _rotated_samples if ctx.op.type.startswith("RoIAlignRotated") else _roi_samples
    samples = sampler(rois.reshape(-1, rois.shape[-1] if rois.ndim == 2 else 5), height, width,
                      spatial_scale, pooled_h, pooled_w, sampling_ratio, aligned)
    for r, (b, pos, w, count) in enumerate(samples):
        img = flat[b]
        acc = np.zeros((pooled_h, pooled_w, c), F32)
        for iy, ix in np.ndindex(*pos[0].shape[2:]):  # NOTE: samples summed in Caffe2's order (float32-exact)
            acc += ((w[0][:, :, iy, ix, None] * img[pos[0][:, :, iy, ix]] + w[1][:, :, iy, ix, None]
                     * img[pos[1][:, :, iy, ix]]) + w[2][:, :, iy, ix, None] * img[pos[2][:, :, iy, ix]]) \
                + w[3][:, :, iy, ix, None] * img[pos[3][:, :, iy, ix]]
        out[r] = acc / count
    return out if nhwc else out.transpose(0, 3, 1, 2).copy()


@kernel("RoIAlignGradient", "RoIAlignRotatedGradient", needs_context=True)
def roi_align_gradient(xp, x, rois, dy, *, ctx, order: str = "NCHW", spatial_scale: float = 1.0, pooled_h: int = 1,
                       pooled_w: int = 1, sampling_ratio: int = -1, aligned: bool = False):
    """dX: each output gradient spread back onto the four corners of every bilinear sample."""
    x, rois, dy = np.asarray(x, F32), np.asarray(rois, F32), np.asarray(dy, F32)
    _check_rois(ctx, x, rois)
    nhwc = order == "NHWC"
    n, height, width, c = x.shape if nhwc else (x.shape[0], x.shape[2], x.shape[3], x.shape[1])
    g = dy if nhwc else dy.transpose(0, 2, 3, 1)  # (R, ph, pw, C)
    dx = np.zeros((n, height * width, c), F32)
    sampler = _rotated_samples if ctx.op.type.startswith("RoIAlignRotated") else _roi_samples
    samples = sampler(rois.reshape(-1, rois.shape[-1] if rois.ndim == 2 else 5), height, width,
                      spatial_scale, pooled_h, pooled_w, sampling_ratio, aligned)
    for r, (b, pos, w, count) in enumerate(samples):
        top = g[r][:, :, None, None, :] / count  # (ph, pw, 1, 1, C)
        for p, wi in zip(pos, w):
            np.add.at(dx[b], p.reshape(-1), (wi[..., None] * top).reshape(-1, c))
    dx = dx.reshape(n, height, width, c)
    return dx if nhwc else dx.transpose(0, 3, 1, 2).copy()


@kernel("BatchPermutation")
def batch_permutation(xp, x, indices):
    return x[np.asarray(indices).astype(np.int64)]


@kernel("BatchPermutationGradient")
def batch_permutation_gradient(xp, indices, dy):
    dx = np.zeros_like(dy)
    dx[np.asarray(indices).astype(np.int64)] = dy
    return dx


def _cround(v):
    """C's round(): half away from zero."""
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


#: Caffe2 1.10 registers these on the CPU but implements them for CUDA only ("Not Implemented").
CUDA_ONLY = frozenset({"RoIPoolF", "PSRoIPool", "RoIPoolGradient", "RoIPoolFGradient", "PSRoIPoolGradient"})


def _cuda_only(ctx) -> None:
    from engine.runtime import device as dev  # noqa: PLC0415
    on_cpu = ctx.force_cpu or not ctx.op.HasField("device_option") or ctx.op.device_option.device_type == dev.CPU
    if ctx.op.type in CUDA_ONLY and on_cpu:
        raise ExecutionError(f"{_where(ctx)}: Not Implemented: Caffe2 runs {ctx.op.type} on CUDA only "
                             "(netviz follows; put the op on a CUDA device)")


@kernel("RoIPool", "RoIPoolF", needs_context=True)
def roi_pool(xp, x, rois, *, ctx, spatial_scale: float = 1.0, pooled_h: int = 1, pooled_w: int = 1,
             is_test: bool = False, order: str = "NCHW"):
    """Max over each bin of the RoI snapped to whole cells; also the argmax (flat h * W + w, -1 if empty)."""
    _cuda_only(ctx)
    x, rois = np.asarray(dev_host(x), F32), np.asarray(dev_host(rois), F32)
    if order != "NCHW":
        raise ExecutionError(f"{_where(ctx)}: RoIPool supports NCHW only")
    n, c, h, w = x.shape
    y = np.zeros((rois.shape[0], c, pooled_h, pooled_w), F32)
    arg = np.full(y.shape, -1, np.int32)
    for r, roi in enumerate(rois):
        b = int(roi[0])
        x1, y1, x2, y2 = (int(v) for v in _cround(roi[1:5] * F32(spatial_scale)))
        rh, rw = max(y2 - y1 + 1, 1), max(x2 - x1 + 1, 1)
        bh, bw = F32(rh) / F32(pooled_h), F32(rw) / F32(pooled_w)
        for ph in range(pooled_h):
            hs = min(max(int(np.floor(F32(ph) * bh)) + y1, 0), h)
            he = min(max(int(np.ceil(F32(ph + 1) * bh)) + y1, 0), h)
            for pw in range(pooled_w):
                ws = min(max(int(np.floor(F32(pw) * bw)) + x1, 0), w)
                we = min(max(int(np.ceil(F32(pw + 1) * bw)) + x1, 0), w)
                if he <= hs or we <= ws:
                    continue
                patch = x[b, :, hs:he, ws:we].reshape(c, -1)
                k = patch.argmax(axis=1)  # NOTE: first maximum in row-major order, as Caffe2's strict '>'
                y[r, :, ph, pw] = patch[np.arange(c), k]
                arg[r, :, ph, pw] = (hs + k // (we - ws)) * w + ws + k % (we - ws)
    return (y, arg) if len(ctx.op.output) > 1 else y


@kernel("RoIPoolGradient", "RoIPoolFGradient", needs_context=True)
def roi_pool_gradient(xp, x, rois, argmax, dy, *, ctx, spatial_scale: float = 1.0, pooled_h: int = 1,
                      pooled_w: int = 1, order: str = "NCHW"):
    """Each output gradient goes to the input cell its argmax names."""
    _cuda_only(ctx)
    x, rois, argmax, dy = (dev_host(v) for v in (x, rois, argmax, dy))
    dx = np.zeros(np.shape(x), F32)
    n, c, h, w = dx.shape
    arg, g = np.asarray(argmax), np.asarray(dy, F32)
    batch = np.asarray(rois)[:, 0].astype(np.int64)
    r, ch = np.meshgrid(np.arange(arg.shape[0]), np.arange(c), indexing="ij")
    keep = arg >= 0
    flat_b = np.broadcast_to(batch[:, None, None, None], arg.shape)[keep]
    flat_c = np.broadcast_to(ch[:, :, None, None], arg.shape)[keep]
    np.add.at(dx.reshape(n, c, h * w), (flat_b, flat_c, arg[keep]), g[keep])
    return dx


def _ps_bins(roi, spatial_scale: float, group_size: int, h: int, w: int):
    x1, y1 = F32(_cround(roi[1])) * F32(spatial_scale), F32(_cround(roi[2])) * F32(spatial_scale)
    x2 = (F32(_cround(roi[3])) + F32(1.0)) * F32(spatial_scale)
    y2 = (F32(_cround(roi[4])) + F32(1.0)) * F32(spatial_scale)
    rw, rh = max(x2 - x1, F32(0.1)), max(y2 - y1, F32(0.1))
    bh, bw = rh / F32(group_size), rw / F32(group_size)
    for ph in range(group_size):
        hs = min(max(int(np.floor(F32(ph) * bh + y1)), 0), h)
        he = min(max(int(np.ceil(F32(ph + 1) * bh + y1)), 0), h)
        for pw in range(group_size):
            ws = min(max(int(np.floor(F32(pw) * bw + x1)), 0), w)
            we = min(max(int(np.ceil(F32(pw + 1) * bw + x1)), 0), w)
            yield ph, pw, hs, he, ws, we


@kernel("PSRoIPool", needs_context=True)
def ps_roi_pool(xp, x, rois, *, ctx, spatial_scale: float = 1.0, group_size: int = 1, output_dim: int = 1):
    """Position-sensitive RoI pooling (R-FCN): bin (i, j) of output channel k averages input channel
    (k * group_size + i) * group_size + j; the second output names that channel."""
    _cuda_only(ctx)
    x, rois = np.asarray(dev_host(x), F32), np.asarray(dev_host(rois), F32)
    n, c, h, w = x.shape
    y = np.zeros((rois.shape[0], output_dim, group_size, group_size), F32)
    mapping = np.zeros(y.shape, np.int32)
    ks = np.arange(output_dim)
    for r, roi in enumerate(rois):
        b = int(roi[0])
        for ph, pw, hs, he, ws, we in _ps_bins(roi, spatial_scale, group_size, h, w):
            chans = (ks * group_size + ph) * group_size + pw
            mapping[r, :, ph, pw] = chans
            if he > hs and we > ws:
                area = F32((he - hs) * (we - ws))
                y[r, :, ph, pw] = x[b, chans, hs:he, ws:we].sum(axis=(1, 2), dtype=F32) / area
    return y, mapping


@kernel("PSRoIPoolGradient", needs_context=True)
def ps_roi_pool_gradient(xp, x, rois, mapping, dy, *, ctx, spatial_scale: float = 1.0, group_size: int = 1,
                         output_dim: int = 1):
    _cuda_only(ctx)
    x, rois, g = (np.asarray(dev_host(v), F32) for v in (x, rois, dy))
    n, c, h, w = x.shape
    dx = np.zeros_like(x)
    ks = np.arange(output_dim)
    for r, roi in enumerate(rois):
        b = int(roi[0])
        for ph, pw, hs, he, ws, we in _ps_bins(roi, spatial_scale, group_size, h, w):
            if he > hs and we > ws:
                chans = (ks * group_size + ph) * group_size + pw
                dx[b, chans, hs:he, ws:we] += (g[r, :, ph, pw] / F32((he - hs) * (we - ws)))[:, None, None]
    return dx


def _fpn_levels(rois: np.ndarray, lo: int, hi: int, scale: float, level: int, plus_one: bool = True) -> np.ndarray:
    """FPN level of each RoI: floor(level + log2(sqrt(area) / scale + 1e-6)), clipped to [lo, hi]."""
    one = F32(int(plus_one))
    area = (rois[:, -2] - rois[:, -4] + one) * (rois[:, -1] - rois[:, -3] + one)
    s = np.sqrt(area).astype(F32)
    lv = np.floor(F32(level) + np.log(s / F32(scale) + F32(1e-6)) / F32(np.log(2.0)))
    return np.clip(lv, lo, hi).astype(np.int64)


def _distribute(rois, lo: int, hi: int, scale: float, level: int, plus_one: bool = True):
    lv = _fpn_levels(rois, lo, hi, scale, level, plus_one)
    per = [np.flatnonzero(lv == k) for k in range(lo, hi + 1)]
    order = np.concatenate(per) if per else np.zeros(0, np.int64)
    restore = np.argsort(order, kind="stable").astype(np.int32)
    return [rois[i] for i in per], restore


@kernel("DistributeFpnProposals")
def distribute_fpn_proposals(xp, rois, *, roi_canonical_scale: int = 224, roi_canonical_level: int = 4,
                             roi_max_level: int = 5, roi_min_level: int = 2, legacy_plus_one: bool = True):
    """Each RoI to its FPN level's output (in order); the last output restores the original order."""
    parts, restore = _distribute(np.asarray(rois, F32), roi_min_level, roi_max_level, roi_canonical_scale,
                                 roi_canonical_level, legacy_plus_one)
    return (*parts, restore)


def _collect(rois_probs, top_n: int) -> np.ndarray:
    k = len(rois_probs) // 2
    rois = np.concatenate([np.asarray(r, F32) for r in rois_probs[:k]])
    probs = np.concatenate([np.asarray(p, F32).reshape(-1) for p in rois_probs[k:]])
    # NOTE: Caffe2's comparator breaks equal scores by index, i.e. a stable order (not std::sort's).
    order = np.argsort(-probs, kind="stable")[:min(top_n, probs.size)]
    return rois[order]


@kernel("CollectRpnProposals")
def collect_rpn_proposals(xp, *rois_probs, rpn_max_level: int = 6, rpn_min_level: int = 2,
                          rpn_post_nms_topN: int = 2000):
    """The best rpn_post_nms_topN RoIs of all FPN levels by score."""
    return _collect(rois_probs, rpn_post_nms_topN)


@kernel("CollectAndDistributeFpnRpnProposals")
def collect_and_distribute_fpn_rpn_proposals(xp, *rois_probs, roi_canonical_scale: int = 224,
                                             roi_canonical_level: int = 4, roi_max_level: int = 5,
                                             roi_min_level: int = 2, rpn_max_level: int = 6, rpn_min_level: int = 2,
                                             rpn_post_nms_topN: int = 2000, legacy_plus_one: bool = True):
    rois = _collect(rois_probs, rpn_post_nms_topN)
    parts, restore = _distribute(rois, roi_min_level, roi_max_level, roi_canonical_scale, roi_canonical_level,
                                 legacy_plus_one)
    return (rois, *parts, restore)


@kernel("HeatmapMaxKeypoint", needs_context=True)
def heatmap_max_keypoint(xp, heatmaps, boxes, *, ctx, should_output_softmax: bool = False):
    """Keypoints (N, 4, K): x, y, score, prob per heatmap.  The maximum cell is refined with a
    second-order Taylor step on its 3x3 neighbourhood (mirrored at the border), capped at 1.5 cells."""
    hm, boxes = np.asarray(heatmaps, F32), np.asarray(boxes, F32)
    if hm.ndim != 4 or hm.shape[2] != hm.shape[3] or hm.shape[2] < 2 or boxes.ndim != 2 or boxes.shape[1] < 4:
        raise ExecutionError(f"{_where(ctx)}: heatmaps {hm.shape} must be (N, K, S, S), S >= 2, boxes (N, >=4)")
    n, k, size, _ = hm.shape
    flat = hm.reshape(n * k, size * size)
    best = flat.argmax(axis=1)  # NOTE: the first maximum, as Caffe2's scan
    probs = None
    if should_output_softmax:
        e = np.exp(flat)
        probs = e / e.sum(axis=1, keepdims=True)
    out = np.zeros((n, 4, k), F32)
    for b in range(n):
        x0, y0 = boxes[b, 0], boxes[b, 1]
        xlen, ylen = max(boxes[b, 2] - boxes[b, 0], F32(1)), max(boxes[b, 3] - boxes[b, 1], F32(1))
        for j in range(k):
            r = b * k + j
            my, mx = divmod(int(best[r]), size)
            f = np.empty((3, 3), F32)
            for dy in (-1, 0, 1):
                for dx in (-1, 0, 1):
                    xx = dx - 2 * (dx + mx >= size) + 2 * (dx + mx < 0)
                    yy = dy - 2 * (dy + my >= size) + 2 * (dy + my < 0)
                    f[dy + 1, dx + 1] = flat[r, (yy + my) * size + xx + mx]
            g = np.array([-(f[1, 2] - f[1, 0]) / 2, -(f[2, 1] - f[0, 1]) / 2], F32)
            cross = (f[2, 2] - f[2, 0] - f[0, 2] + f[0, 0]) / 4
            a = np.array([[f[1, 0] - 2 * f[1, 1] + f[1, 2], cross], [cross, f[0, 1] - 2 * f[1, 1] + f[2, 1]]], F32)
            if abs(np.linalg.det(a)) < 1e-4:
                delta, score = np.zeros(2, F32), flat[r, best[r]]
            else:
                delta = np.linalg.solve(a.astype(np.float64), g.astype(np.float64)).astype(F32)
                if np.abs(delta).max() > 1.5:
                    delta = delta / np.abs(delta).max() * F32(1.5)
                score = f[1, 1] - g @ delta + 0.5 * delta @ a @ delta
            out[b, 0, j] = x0 + (0.5 + mx + delta[0]) * xlen / size
            out[b, 1, j] = y0 + (0.5 + my + delta[1]) * ylen / size
            out[b, 2, j] = score
            out[b, 3, j] = probs[r, best[r]] if probs is not None else 0.0
    return out


@kernel("RMACRegions")
def rmac_regions(xp, x, *, scales: int = 3, overlap: float = 0.4):
    """R-MAC's square regions at `scales` scales ([batch, x1, y1, x2, y2] rows, repeated per image):
    l regions (plus the best extra `step` along the long side for ~`overlap`) of side 2*min/(l+1)."""
    n, _, h, w = np.shape(x)
    if n == 0 or h == 0 or w == 0:  # NOTE: no image, or an empty one: no regions
        return np.zeros((0, 5), F32)
    short = min(h, w)
    step, best = 0, np.inf
    if w != h:
        for k in range(1, 7):
            b = F32((max(h, w) - short) / float(k))
            val = abs(F32(short * short - short * b) / F32(short * short) - F32(overlap))
            if val < best:
                step, best = k, val
    wd, hd = (step, 0) if w > h else ((0, step) if h > w else (0, 0))
    rows = []
    for lvl in range(1, scales + 1):
        size = 2 * short // (lvl + 1)
        if size == 0:
            break
        bw = F32((w - size) / float(lvl + wd - 1)) if lvl + wd - 1 > 0 else F32(0)
        bh = F32((h - size) / float(lvl + hd - 1)) if lvl + hd - 1 > 0 else F32(0)
        for i in range(lvl + wd):
            for j in range(lvl + hd):
                x1, y1 = int(bw * i), int(bh * j)
                x1 -= max(0, x1 + size - w)
                y1 -= max(0, y1 + size - h)
                rows.append([0, x1, y1, x1 + size - 1, y1 + size - 1])
    one = np.array(rows, F32).reshape(-1, 5)
    out = np.tile(one, (n, 1))
    out[:, 0] = np.repeat(np.arange(n, dtype=F32), one.shape[0])
    return out


# ---- gradients ----
should_not_do_gradient("GenerateProposals", "GenerateProposalsCPP", "BoxWithNMSLimit", "BBoxTransform")
gradient("RoIAlign", "RoIAlignRotated")(simple("{T}Gradient", "I0 I1 GO0", "GI0"))
gradient("BatchPermutation")(simple("BatchPermutationGradient", "I1 GO0", "GI0"))
gradient("RoIPool", "RoIPoolF", "PSRoIPool")(simple("{T}Gradient", "I0 I1 O1 GO0", "GI0"))


# ---- shapes ----

@shape("RoIAlign")
def roi_align_shape(x, rois, *, pooled_h: int = 1, pooled_w: int = 1, order: str = "NCHW"):
    # NOTE: one pooled map per RoI; the RoI count is data-dependent unless `rois` is known.
    r, c = dims(rois)[0], split_layout(dims(x), order)[1]
    return TensorInfo(join_layout(r, c, (pooled_h, pooled_w), order), x.dtype)


@shape("RoIPool", "RoIPoolF")
def roi_pool_shape(x, rois, *, pooled_h: int = 1, pooled_w: int = 1, order: str = "NCHW"):
    # NOTE: Y and the optional argmaxes (int32) are num_rois × C × pooled_h × pooled_w.
    y = roi_align_shape(x, rois, pooled_h=pooled_h, pooled_w=pooled_w, order=order)
    return y, TensorInfo(y.shape, INT32)


shape("RoIAlignGradient")(same_as(0))
@shape("GenerateProposals", "GenerateProposalsCPP")
def generate_proposals_shape(scores, deltas, im_info, anchors):
    # NOTE: how many proposals survive NMS is data-dependent.
    box_dim = dims(anchors)[1] if anchors.rank == 2 else None
    return TensorInfo((None, None if box_dim is None else box_dim + 1), FLOAT), TensorInfo((None,), FLOAT)


@shape("BoxWithNMSLimit")
def box_with_nms_limit_shape(scores, boxes, *splits, rotated: bool = False):
    box_dim = 5 if rotated else 4
    return (TensorInfo((None,), FLOAT), TensorInfo((None, box_dim), FLOAT), TensorInfo((None,), FLOAT),
            TensorInfo((None,), FLOAT), TensorInfo((None,), INT32), TensorInfo((None, None), INT32))


shape("BBoxTransform")(lambda rois, deltas, info: (TensorInfo(deltas.shape, FLOAT), TensorInfo((dims(info)[0],), FLOAT)))


shape("BatchPermutation")(lambda x, indices: TensorInfo((dims(indices)[0], *dims(x)[1:]), x.dtype))


def _collected(rois_probs, top_n: int) -> TensorInfo:
    """The best `top_n` RoIs of all levels: min(top_n, every level's score count) rows."""
    k = len(rois_probs) // 2
    counts = [dims(p) for p in rois_probs[k:]]
    n = None if any(None in c for c in counts) else min(top_n, sum(int(np.prod(c)) for c in counts))
    width = dims(rois_probs[0])[1] if rois_probs[0].rank == 2 else None
    return TensorInfo((n, width), FLOAT)


@shape("CollectRpnProposals")
def collect_rpn_proposals_shape(*rois_probs, rpn_post_nms_topN: int = 2000):
    return _collected(rois_probs, rpn_post_nms_topN)


def _distributed(rois: TensorInfo, n_levels: int) -> tuple[TensorInfo, ...]:
    # NOTE: how many RoIs fall on each level is data-dependent; the restore index has one per RoI.
    width = dims(rois)[1] if rois.rank == 2 else None
    return (*(TensorInfo((None, width), FLOAT) for _ in range(n_levels)), TensorInfo((dims(rois)[0],), INT32))


@shape("DistributeFpnProposals")
def distribute_fpn_proposals_shape(rois, *, roi_max_level: int = 5, roi_min_level: int = 2):
    return _distributed(rois, roi_max_level - roi_min_level + 1)


@shape("CollectAndDistributeFpnRpnProposals")
def collect_and_distribute_shape(*rois_probs, rpn_post_nms_topN: int = 2000, roi_max_level: int = 5,
                                 roi_min_level: int = 2):
    rois = _collected(rois_probs, rpn_post_nms_topN)
    return (rois, *_distributed(rois, roi_max_level - roi_min_level + 1))


shape("HeatmapMaxKeypoint")(lambda heatmaps, boxes: TensorInfo((dims(heatmaps)[0], 4, dims(heatmaps)[1]), FLOAT))


@shape("PSRoIPool")
def ps_roi_pool_shape(x, rois, *, group_size: int = 1, output_dim: int = 1):
    y = (dims(rois)[0], output_dim, group_size, group_size)
    return TensorInfo(y, FLOAT), TensorInfo(y, INT32)


@shape("RMACRegions")
def rmac_regions_shape(x, *, scales: int = 3, overlap: float = 0.4):
    # NOTE: the region count follows from the batch and spatial sizes alone: the kernel on zeros counts it.
    n, _, h, w = known(x)
    return TensorInfo((len(rmac_regions(np, np.zeros((n, 1, h, w), F32), scales=scales, overlap=overlap)), 5), FLOAT)


shape("RoIAlignRotated")(roi_align_shape)


# ---- onnx ----
from engine.catalogue.registry import onnx_converter  # noqa: E402


@onnx_converter("RoIAlign")
def roi_align_onnx(c):
    """ONNX RoiAlign (opset 16+), average mode: Caffe2's rois rows [batch, x1, y1, x2, y2] split into
    boxes and int64 batch indices (4 columns: image 0); aligned=0 is output_half_pixel (RoI sides at
    least 1), a non-positive sampling_ratio adaptive (ONNX's 0)."""
    if c.opset < 16:
        raise c.refuse("ONNX RoiAlign's coordinate modes need opset 16")
    r = c.rank(0)
    cols = c.shape(1)[-1]
    rois = c.emit("Reshape", [c.x(1), c.ints([-1, cols])])
    if cols == 5:
        boxes = c.emit("Slice", [rois, c.ints([1]), c.ints([5]), c.ints([1])])
        batch = c.emit("Cast", [c.emit("Reshape", [c.emit("Slice", [rois, c.ints([0]), c.ints([1]), c.ints([1])]),
                                                   c.ints([-1])])], to=7)
    else:
        boxes = rois
        batch = c.emit("ConstantOfShape", [c.emit("Slice", [c.shape_of(rois), c.ints([0]), c.ints([1])])],
                       value=c.tensor(np.zeros(1, np.int64)))
    y = c.y_nchw(0)
    c.emit("RoiAlign", [c.x_nchw(0), boxes, batch], [y], mode="avg", output_height=int(c.arg("pooled_h", 1)),
           output_width=int(c.arg("pooled_w", 1)), sampling_ratio=max(0, int(c.arg("sampling_ratio", -1))),
           spatial_scale=float(c.arg("spatial_scale", 1.0)),
           coordinate_transformation_mode="half_pixel" if c.arg("aligned", 0) else "output_half_pixel")
    c.done_nchw(0, y, r)


@onnx_converter("BBoxTransform")
def bbox_transform_onnx(c):
    """Upright boxes decoded as the kernel does, in float32 elementwise ops: each RoI's image (its batch
    id; 4-column RoIs: the one image) gives the scale and the rounded unscaled image size, every class's
    deltas decode against the RoI (dw, dh clamped at log(1000/16), exp taken in float64 as glibc's expf),
    the boxes are clipped to the image and scaled back; the second output counts the RoIs per image."""
    if c.arg("rotated", 0):
        raise c.refuse("rotated boxes")
    one = float(bool(c.arg("legacy_plus_one", 1)))
    wts = [float(v) for v in c.arg("weights", [1.0, 1.0, 1.0, 1.0])]
    f = lambda v, hint="k": c.const(np.array(v, F32), hint)  # noqa: E731
    col = lambda t, k: c.emit("Slice", [t, c.ints([k]), c.ints([k + 1]), c.ints([-1])])  # noqa: E731
    rois, deltas, info = c.emit("Cast", [c.x(0)], to=1), c.emit("Cast", [c.x(1)], to=1), c.emit("Cast", [c.x(2)], to=1)
    cols, n_img = c.shape(0)[1], c.shape(2)[0]
    counts = None
    if cols == 5:  # NOTE: as Caffe2, each image takes the next count(id) rows: RoIs are sorted by image
        ids = c.emit("Cast", [c.emit("Reshape", [col(rois, 0), c.ints([-1])])], to=7)
        images = c.emit("Range", [c.const(np.array(0, np.int64)), c.const(np.array(n_img, np.int64)),
                                  c.const(np.array(1, np.int64))])
        hit = c.emit("Cast", [c.emit("Equal", [c.emit("Unsqueeze", [ids, c.ints([1])]), images])], to=7)
        counts = c.emit("ReduceSum", [hit, c.ints([0])], keepdims=0)
        n_rois = c.emit("Gather", [c.shape_of(ids), c.const(np.array(0, np.int64))])
        rows = c.emit("Range", [c.const(np.array(0, np.int64)), n_rois, c.const(np.array(1, np.int64))])
        past = c.emit("GreaterOrEqual", [c.emit("Unsqueeze", [rows, c.ints([1])]),
                                         c.emit("CumSum", [counts, c.const(np.array(0, np.int64))])])
        image = c.emit("ReduceSum", [c.emit("Cast", [past], to=7), c.ints([1])], keepdims=0)
        per = c.emit("Gather", [info, image], axis=0)  # (R, 3)
        boxes = c.emit("Slice", [rois, c.ints([1]), c.ints([5]), c.ints([1])])
    elif n_img == 1:
        per, boxes = info, rois
    else:
        raise c.refuse(f"RoIs without batch ids and {n_img} images")
    before = col(per, 2)
    after = c.emit("Unsqueeze", [before, c.ints([1])]) if c.arg("apply_scale", 1) else f(1.0)
    size = lambda k: c.emit("Floor", [c.emit("Add", [c.emit("Div", [col(per, k), before]), f(0.5)])])  # noqa: E731
    img_h, img_w = (c.emit("Unsqueeze", [size(k), c.ints([1])]) for k in (0, 1))  # (R, 1, 1)
    b = c.emit("Unsqueeze", [c.emit("Div", [boxes, before]), c.ints([1])])  # (R, 1, 4)
    d = c.emit("Reshape", [deltas, c.ints([0, -1, 4])])  # (R, K, 4)
    x1, y1, x2, y2 = (col(b, k) for k in range(4))
    widths = c.emit("Add", [c.emit("Sub", [x2, x1]), f(one)])
    heights = c.emit("Add", [c.emit("Sub", [y2, y1]), f(one)])
    ctr_x = c.emit("Add", [x1, c.emit("Mul", [f(0.5), widths])])
    ctr_y = c.emit("Add", [y1, c.emit("Mul", [f(0.5), heights])])
    dx, dy, dw, dh = (c.emit("Div", [col(d, k), f(wts[k])]) for k in range(4))
    clip = f(BBOX_XFORM_CLIP)
    px = c.emit("Add", [c.emit("Mul", [dx, widths]), ctr_x])
    py = c.emit("Add", [c.emit("Mul", [dy, heights]), ctr_y])
    exp = lambda t: c.emit("Cast", [c.emit("Exp", [c.emit("Cast", [c.emit("Min", [t, clip])], to=11)])], to=1)  # noqa: E731
    pw, ph = c.emit("Mul", [exp(dw), widths]), c.emit("Mul", [exp(dh), heights])
    hw, hh = c.emit("Mul", [f(0.5), pw]), c.emit("Mul", [f(0.5), ph])
    xy = [c.emit("Sub", [px, hw]), c.emit("Sub", [py, hh]),
          c.emit("Sub", [c.emit("Add", [px, hw]), f(one)]), c.emit("Sub", [c.emit("Add", [py, hh]), f(one)])]
    hi = [c.emit("Sub", [s, f(one)]) for s in (img_w, img_h, img_w, img_h)]
    out = [c.emit("Mul", [c.emit("Max", [c.emit("Min", [v, h]), f(0.0)]), after]) for v, h in zip(xy, hi)]
    c.emit("Reshape", [c.emit("Concat", out, axis=2), c.emit("Shape", [deltas])], [c.y(0)])
    if c.n_out > 1:
        counts = counts or c.emit("Slice", [c.shape_of(rois), c.ints([0]), c.ints([1])])
        c.emit("Cast", [counts], [c.y(1)], to=1)
