"""Image ops: Im2Col / Col2Im, PadImage, UpsampleBilinear, ResizeNearest3D, SpaceToBatch / BatchToSpace,
IntegralImage, DepthConcat, and Detectron's UpsampleNearest and SpatialNarrowAs.

Resampling ops are linear maps along each spatial axis, so they are written as small per-axis
matrices (built with Caffe2's float32 index arithmetic) applied with einsum: the gradient is the
same matrices transposed, which is exactly the scatter-add Caffe2's gradient kernels perform.
"""
from __future__ import annotations

import math

import numpy as np

from engine.runtime import device as dev
from engine.errors import ExecutionError
from engine.runtime.grad_makers import cc_maker, simple
from engine.runtime.fidelity import fixes_enabled
from engine.runtime.ops.conv import (col2im, from_nchw, geometry, geometry_args, onnx_geometry, require_image, to_nchw,
                                     windows)
from engine.runtime.ops.tensor import concat, concat_gradient, concat_shape
from engine.catalogue.registry import gradient, kernel, shape
from engine.runtime.shapes import FLOAT, UINT8, TensorInfo, dim_op, dims, same_as, split_layout

# ---- kernels ----


def _im2col_geometry(g):
    """Im2Col's own arg reading: one symmetric `pad`, kernel/stride/dilation with _h/_w overrides."""
    k = [int(g["kernel_h"] or g["kernel"]), int(g["kernel_w"] or g["kernel"])]
    s = [int(g["stride_h"] or g["stride"]), int(g["stride_w"] or g["stride"])]
    d = [int(g["dilation_h"] or g["dilation"]), int(g["dilation_w"] or g["dilation"])]
    p = int(g["pad"])
    if min(k) <= 0:
        raise ExecutionError("Im2Col/Col2Im need a positive kernel size")
    return k, s, [p, p], [p, p], d


@kernel("Im2Col")
@geometry_args
def im2col_op(xp, x, **g):
    # NOTE: NCHW -> (N, C*kh*kw, out_h, out_w) (c, kh, kw order); NHWC -> (N, out_h, out_w, kh*kw*C).
    if x.ndim != 4:
        raise ExecutionError(f"Im2Col needs a 4-D input, got {x.ndim}-D")
    k, s, pb, pe, d = _im2col_geometry(g)
    xc = to_nchw(x, g["order"])
    if any(size < dd * (kk - 1) + 1 for size, kk, dd in zip(xc.shape[2:], k, d)):  # NOTE: pads do not count
        raise ExecutionError(f"Im2Col: image {tuple(xc.shape[2:])} is smaller than its dilated kernel (Caffe2 "
                             "refuses it, whatever the pads)")
    win = windows(xp, xc, k, s, pb, pe, d)  # (N, C, oh, ow, kh, kw)
    n, c, oh, ow = win.shape[:4]
    if g["order"] == "NCHW":
        return xp.ascontiguousarray(win.transpose(0, 1, 4, 5, 2, 3)).reshape(n, c * k[0] * k[1], oh, ow)
    return xp.ascontiguousarray(win.transpose(0, 2, 3, 4, 5, 1)).reshape(n, oh, ow, k[0] * k[1] * c)


@kernel("Col2Im")
@geometry_args
def col2im_op(xp, cols, like, **g):
    # NOTE: the adjoint of Im2Col into the shape of `like` (overlapping windows add up).
    k, s, pb, pe, d = _im2col_geometry(g)
    n, c, sp = split_layout(like.shape, g["order"])
    out = tuple((sp[i] + 2 * pb[i] - (d[i] * (k[i] - 1) + 1)) // s[i] + 1 for i in range(2))
    if g["order"] == "NCHW":
        c5 = cols.reshape(n, c, k[0], k[1], *out)
    else:
        c5 = cols.reshape(n, *out, k[0], k[1], c).transpose(0, 5, 3, 4, 1, 2)
    y = col2im(xp, c5, (n, c) + tuple(sp), k, s, pb, pe, d, out)
    return from_nchw(xp.ascontiguousarray(y), g["order"]).astype(cols.dtype)


def _pad_index(size, before, after, mode):
    """Source index of every padded position along one axis (-1: the constant value)."""
    i = np.arange(-before, size + after)
    if mode == "reflect":
        i = np.abs(i)
        i = np.where(i >= size, 2 * size - i - 2, i)
    elif mode == "edge":
        i = np.clip(i, 0, size - 1)
    else:
        i = np.where((i < 0) | (i >= size), -1, i)
    return i


def _pad_geometry(x, g, mode):
    require_image(x)
    _, _, pb, pe, _ = geometry(2, g)
    if mode not in ("constant", "reflect", "edge"):
        raise ExecutionError(f"PadImage: unknown mode '{mode}' (constant, reflect, edge)")
    sp = split_layout(x.shape, g["order"])[2]
    return [_pad_index(sp[i], pb[i], pe[i], mode) for i in range(2)]


@kernel("PadImage")
@geometry_args
def pad_image(xp, x, *, mode: str = "constant", value: float = 0.0, **g):
    # NOTE: 2-D images only; reflect mirrors without repeating the edge (numpy's "reflect").
    xc = to_nchw(x, g["order"])
    ih, iw = _pad_geometry(x, g, mode)
    y = xc[:, :, np.maximum(ih, 0)][:, :, :, np.maximum(iw, 0)]
    if mode == "constant":
        y = xp.where(xp.asarray((ih[:, None] < 0) | (iw[None, :] < 0)), x.dtype.type(value), y)
    return from_nchw(xp.ascontiguousarray(y), g["order"])


@kernel("PadImageGradient")
@geometry_args
def pad_image_gradient(xp, dy, *, mode: str = "constant", value: float = 0.0, **g):
    # NOTE: every padded position's gradient goes back to its source pixel (reflect/edge add up).
    dyc = to_nchw(dy, g["order"])
    _, _, pb, pe, _ = geometry(2, g)
    size = [dyc.shape[2] - pb[0] - pe[0], dyc.shape[3] - pb[1] - pe[1]]
    ih, iw = (_pad_index(size[i], pb[i], pe[i], mode) for i in range(2))
    ah, aw = _scatter_matrix(xp, ih, size[0], dy.dtype), _scatter_matrix(xp, iw, size[1], dy.dtype)
    return from_nchw(xp.ascontiguousarray(xp.einsum("ncij,ih,jw->nchw", dyc, ah, aw)), g["order"])


def _scatter_matrix(xp, idx, size, dtype):
    """(len(idx), size) 0/1 matrix: row r picks source idx[r] (no column where idx[r] < 0)."""
    m = np.zeros((idx.size, size), dtype=dtype)
    ok = idx >= 0
    m[np.flatnonzero(ok), idx[ok]] = 1
    return xp.asarray(m)


def _bilinear_matrix(xp, n_in, n_out, dtype):
    """(n_out, n_in) weights of Caffe2's align-corners bilinear resize along one axis (float32 math)."""
    f = np.float32
    r = f(n_in - 1) / f(n_out - 1) if n_out > 1 else f(0)
    src = r * np.arange(n_out, dtype=f)
    lo = src.astype(np.int64)
    lam = (src - lo).astype(f)
    hi = lo + (lo < n_in - 1)
    m = np.zeros((n_out, n_in), dtype=f)
    np.add.at(m, (np.arange(n_out), lo), f(1) - lam)
    np.add.at(m, (np.arange(n_out), hi), lam)
    return xp.asarray(m.astype(dtype))


def _upsample_sizes(x_hw, scales, height_scale, width_scale):
    if scales is not None:
        height_scale, width_scale = (float(v) for v in np.asarray(dev.to_host(scales)).reshape(-1)[:2])
    return int(x_hw[0] * np.float32(height_scale)), int(x_hw[1] * np.float32(width_scale))


@kernel("UpsampleBilinear")
def upsample_bilinear(xp, x, scales=None, *, width_scale: float = 1.0, height_scale: float = 1.0):
    # NOTE: NCHW; out = floor(in * scale); corners aligned (src = (in - 1) / (out - 1) * dst).
    oh, ow = _upsample_sizes(x.shape[2:], scales, height_scale, width_scale)
    ah, aw = _bilinear_matrix(xp, x.shape[2], oh, x.dtype), _bilinear_matrix(xp, x.shape[3], ow, x.dtype)
    return xp.einsum("nchw,ih,jw->ncij", x, ah, aw).astype(x.dtype)


@kernel("UpsampleBilinearGradient")
def upsample_bilinear_gradient(xp, dy, x, scales=None, *, width_scale: float = 1.0, height_scale: float = 1.0):
    ah = _bilinear_matrix(xp, x.shape[2], dy.shape[2], dy.dtype)
    aw = _bilinear_matrix(xp, x.shape[3], dy.shape[3], dy.dtype)
    return xp.einsum("ncij,ih,jw->nchw", dy, ah, aw).astype(dy.dtype)


def _nearest_index(n_in, n_out, scale):
    return np.minimum((np.arange(n_out) / np.float32(scale)).astype(np.int64), n_in - 1)


def _resize3d_indices(x_shape, y_shape, temporal_scale, height_scale, width_scale):
    return [_nearest_index(x_shape[2 + i], y_shape[2 + i], s)
            for i, s in enumerate((temporal_scale, height_scale, width_scale))]


@kernel("ResizeNearest3D")
def resize_nearest_3d(xp, x, *, temporal_scale: float = 1.0, width_scale: float = 1.0, height_scale: float = 1.0,
                      order: str = "NCHW"):
    # NOTE: (N, C, T, H, W); out = int(in * scale); source = min(int(dst / scale), in - 1).
    if x.ndim != 5:
        raise ExecutionError(f"ResizeNearest3D needs a 5-D (N, C, T, H, W) input, got {x.ndim}-D")
    if temporal_scale not in (1.0, 2.0):
        raise ExecutionError(f"ResizeNearest3D: temporal_scale must be either 1 or 2, got {temporal_scale}")
    if height_scale != 2.0 or width_scale != 2.0:
        raise ExecutionError("ResizeNearest3D: not implemented when height and width scale are not 2 (as in Caffe2)")
    out = tuple(int(n * np.float32(s)) for n, s in zip(x.shape[2:], (temporal_scale, height_scale, width_scale)))
    it, ih, iw = _resize3d_indices(x.shape, x.shape[:2] + out, temporal_scale, height_scale, width_scale)
    return xp.ascontiguousarray(x[:, :, it][:, :, :, ih][:, :, :, :, iw])


@kernel("ResizeNearest3DGradient")
def resize_nearest_3d_gradient(xp, dy, x, *, temporal_scale: float = 1.0, width_scale: float = 1.0,
                               height_scale: float = 1.0, order: str = "NCHW"):
    it, ih, iw = _resize3d_indices(x.shape, dy.shape, temporal_scale, height_scale, width_scale)
    mt, mh, mw = (_scatter_matrix(xp, i, n, dy.dtype) for i, n in zip((it, ih, iw), x.shape[2:]))
    return xp.einsum("ncijk,it,jh,kw->ncthw", dy, mt, mh, mw).astype(dy.dtype)


def _space_batch_geometry(g, block_size):
    _, _, pb, pe, _ = geometry(2, g)
    if block_size < 1:
        raise ExecutionError("block_size must be positive")
    if g["order"] != "NCHW":
        raise ExecutionError(f"SpaceToBatch/BatchToSpace support only NCHW, as in Caffe2 (order {g['order']})")
    return pb, pe


@kernel("SpaceToBatch")
@geometry_args
def space_to_batch(xp, x, *, block_size: int = 2, **g):
    # NOTE: NCHW (N, C, H, W) -> (bs*bs*N, C, (H+pads)/bs, (W+pads)/bs); batch b = (oh*bs + ow)*N + n.
    pb, pe = _space_batch_geometry(g, block_size)
    xc = to_nchw(x, g["order"])
    n, c, h, w = xc.shape
    hp, wp = h + pb[0] + pe[0], w + pb[1] + pe[1]
    if hp % block_size or wp % block_size:
        raise ExecutionError(f"padded size {hp}x{wp} is not a multiple of block_size {block_size}")
    xpad = xp.pad(xc, ((0, 0), (0, 0), (pb[0], pe[0]), (pb[1], pe[1])))
    y = xpad.reshape(n, c, hp // block_size, block_size, wp // block_size, block_size)
    y = y.transpose(3, 5, 0, 1, 2, 4).reshape(block_size * block_size * n, c, hp // block_size, wp // block_size)
    return from_nchw(xp.ascontiguousarray(y), g["order"])


@kernel("BatchToSpace")
@geometry_args
def batch_to_space(xp, x, *, block_size: int = 2, **g):
    # NOTE: the inverse of SpaceToBatch: batches interleave back into space, then the pads are cropped.
    pb, pe = _space_batch_geometry(g, block_size)
    xc = to_nchw(x, g["order"])
    b, c, h, w = xc.shape
    n = b // (block_size * block_size)
    y = xc.reshape(block_size, block_size, n, c, h, w).transpose(2, 3, 4, 0, 5, 1)
    y = y.reshape(n, c, h * block_size, w * block_size)
    y = y[:, :, pb[0]:h * block_size - pe[0], pb[1]:w * block_size - pe[1]]
    return from_nchw(xp.ascontiguousarray(y), g["order"])


@kernel("IntegralImage")
def integral_image(xp, x):
    # NOTE: (N, C, H, W) -> (N, C, H+1, W+1): a zero first row and column, then 2-D cumulative sums.
    if x.ndim != 4:
        raise ExecutionError(f"IntegralImage needs a 4-D input, got {x.ndim}-D")
    y = xp.zeros(x.shape[:2] + (x.shape[2] + 1, x.shape[3] + 1), dtype=x.dtype)
    y[:, :, 1:, 1:] = x.cumsum(axis=2).cumsum(axis=3)
    return y


@kernel("IntegralImageGradient")
def integral_image_gradient(xp, x, dy):
    # NOTE: Caffe2 (exact mode) returns the PREFIX sums of dY's first H x W block; the adjoint
    # (--fix-caffe2) is dX[h, w] = sum of dY[h' > h, w' > w] (docs/fidelity.md).
    h, w = x.shape[2:]
    if not fixes_enabled():
        return dy[:, :, :h, :w].cumsum(axis=2).cumsum(axis=3).astype(x.dtype)
    r = dy[:, :, 1:, 1:][:, :, ::-1, ::-1].cumsum(axis=2).cumsum(axis=3)[:, :, ::-1, ::-1]
    return xp.ascontiguousarray(r).astype(x.dtype)


@kernel("DepthConcat")
def depth_concat(xp, *xs, order: str = "NCHW"):
    """The deprecated Concat along the channel axis: 1 (NCHW) or 3 (NHWC, so inputs must be 4-D)."""
    axis = 1 if order == "NCHW" else 3
    if xs[0].ndim <= axis:
        raise ExecutionError(f"DepthConcat axis {axis} ({order}) needs inputs of rank > {axis}, got {xs[0].ndim}")
    return concat(xp, *xs, axis=axis)


@kernel("UpsampleNearest")
def upsample_nearest(xp, x, *, scale: int = 2):
    # NOTE: Detectron's: the last two dims repeated `scale` times each (3-D or 4-D input).
    return xp.repeat(xp.repeat(x, scale, axis=-2), scale, axis=-1)


@kernel("UpsampleNearestGradient")
def upsample_nearest_gradient(xp, x, dy, *, scale: int = 2):
    s = int(scale)
    return dy.reshape(dy.shape[:-2] + (dy.shape[-2] // s, s, dy.shape[-1] // s, s)).sum(axis=(-3, -1)).astype(dy.dtype)


@kernel("SpatialNarrowAs")
def spatial_narrow_as(xp, a, b):
    # NOTE: Detectron's: crop A (N, C, H, W) to B's height and width (B is (N, C, h, w) or (N, h, w)).
    if a.shape[0] != b.shape[0]:
        raise ExecutionError("SpatialNarrowAs: input dim 0 must be equal")
    h, w = b.shape[-2:]
    if h > a.shape[2] or w > a.shape[3]:
        raise ExecutionError(f"SpatialNarrowAs: input 0 ({a.shape[2]}x{a.shape[3]}) is smaller than {h}x{w}")
    return xp.ascontiguousarray(a[:, :, :h, :w])


@kernel("SpatialNarrowAsGradient")
def spatial_narrow_as_gradient(xp, a, b, dc):
    da = xp.zeros(a.shape, dtype=dc.dtype)
    da[:, :, :dc.shape[2], :dc.shape[3]] = dc
    return da


STYLIZER_NOISE = "__CAFFE2_STYLIZER_NOISE__"


def caffe2_gaussian(seed: int, n: int, mean: float, std: float) -> np.ndarray:
    """The `n` float32 draws of Caffe2's CPU RandGaussian from a generator seeded with `seed`.

    Why: so a seeded random op gives Caffe2's own numbers.  Caffe2 1.10 draws from ATen's mt19937 (the
    standard generator, as NumPy's legacy RandomState seeds it) through ATen's Box-Muller normal: two 24-bit
    uniforms give r = sqrt(-2 log(1 - u2)) and theta = 2 pi u1 in float, log/sqrt/sin/cos in double, and
    each pair is r cos(theta) then r sin(theta), scaled in float."""
    f32 = np.float32
    raw = np.random.RandomState(seed & 0xFFFFFFFF).randint(0, 2**32, size=2 * ((n + 1) // 2), dtype=np.uint64)
    u = ((raw & 0xFFFFFF).astype(np.float64) * 2.0 ** -24).astype(f32)
    out = np.empty(u.size, f32)
    two_pi = f32(2.0) * f32(np.pi)
    for k in range(0, u.size, 2):  # NOTE: glibc's log/sin/cos (math), not NumPy's vector ones: last-bit equal
        r = float(f32(math.sqrt(-2.0 * math.log(float(f32(1.0) - u[k + 1])))))
        theta = float(f32(two_pi * u[k]))
        out[k], out[k + 1] = r * math.cos(theta), r * math.sin(theta)
    return out[:n] * f32(std) + f32(mean)


@kernel("PackedInt8BGRANHWCToNCHWCStylizerPreprocess", needs_context=True)
def stylizer_preprocess(xp, x, mean, *, ctx, noise_size: int = 491, noise_std: float = 10.0):
    # NOTE: (N, H, W, BGRA uint8) -> (N, BGR, H, W) float: value - mean[c] + noise, the noise read cyclically
    # (noise_size values, restarting with each image) from the workspace blob __CAFFE2_STYLIZER_NOISE__,
    # which the first run fills with N(0, noise_std) from the op's generator and later runs reuse.
    noise = ctx.workspace.values.get(STYLIZER_NOISE)
    if not hasattr(noise, "dtype"):
        seed = (ctx.op.device_option.random_seed if ctx.op.device_option.HasField("random_seed")
                else int(ctx.rng.integers(2**32)))
        noise = caffe2_gaussian(seed, noise_size, 0.0, noise_std)
        ctx.workspace.feed_blob(STYLIZER_NOISE, noise)
    if noise.dtype != np.float32 or noise.size < noise_size:
        raise ValueError(f"{STYLIZER_NOISE} must hold at least noise_size={noise_size} float32 values, "
                         f"has {noise.size} {noise.dtype}")
    if x.ndim != 4 or x.shape[3] != 4 or mean.size != 3:
        raise ValueError(f"needs X as (N, H, W, 4) BGRA and a 3-value mean, got X {x.shape} and mean {mean.shape}")
    h, w = x.shape[1:3]
    cycle = dev.to_host(noise).reshape(-1)[np.arange(h * w * 3) % noise_size].reshape(h, w, 3)
    y = x[..., :3].astype(np.float32) - mean.reshape(-1).astype(np.float32) + xp.asarray(cycle)
    return xp.ascontiguousarray(y.transpose(0, 3, 1, 2))


@kernel("BRGNCHWCToPackedInt8BGRAStylizerDeprocess")
def stylizer_deprocess(xp, x, mean):
    # NOTE: (N, BGR, H, W) float -> (N, H, W, BGRA uint8): value + mean[c] clamped to [0, 255] and truncated;
    # alpha is 255.
    if x.ndim != 4 or x.shape[1] != 3 or mean.size != 3:
        raise ValueError(f"needs X as (N, 3, H, W) and a 3-value mean, got X {x.shape} and mean {mean.shape}")
    v = x.astype(np.float32) + mean.reshape(1, 3, 1, 1).astype(np.float32)
    bgr = xp.clip(v, 0, 255).astype(np.uint8).transpose(0, 2, 3, 1)
    return xp.concatenate([bgr, xp.full(bgr.shape[:3] + (1,), 255, np.uint8)], axis=3)


# ---- gradients ----

gradient("Im2Col")(simple("Col2Im", "GO0 I0", "GI0"))
gradient("Col2Im")(simple("Im2Col", "GO0", "GI0"))
gradient("PadImage")(simple("PadImageGradient", "GO0", "GI0"))
gradient("ResizeNearest3D")(simple("ResizeNearest3DGradient", "GO0 I0", "GI0"))
gradient("SpaceToBatch")(simple("BatchToSpace", "GO0", "GI0"))
gradient("BatchToSpace")(simple("SpaceToBatch", "GO0", "GI0"))
gradient("IntegralImage")(simple("IntegralImageGradient", "I0 GO0", "GI0"))
gradient("DepthConcat")(concat_gradient)


@gradient("UpsampleBilinear")
@cc_maker
def upsample_bilinear_gradient_maker(g):
    """[GO0, I0, (scales I1)] -> [GI0]."""
    return [g.op_("UpsampleBilinearGradient", [g.GO(0)] + list(g.op.input), [g.GI(0)])]


gradient("UpsampleNearest")(simple("UpsampleNearestGradient", "I0 GO0", "GI0"))
gradient("SpatialNarrowAs")(simple("SpatialNarrowAsGradient", "I0 I1 GO0", "GI0"))


# ---- shapes ----

@shape("Im2Col")
@geometry_args
def im2col_shape(x, **g):
    k, s, pb, pe, d = _im2col_geometry(g)
    n, c, sp = split_layout(dims(x), g["order"])
    out = [dim_op(lambda v, i=i: (v + pb[i] + pe[i] - (d[i] * (k[i] - 1) + 1)) // s[i] + 1, sp[i]) for i in range(2)]
    kc = dim_op(lambda v: v * k[0] * k[1], c)
    return TensorInfo((n, kc, *out) if g["order"] == "NCHW" else (n, *out, kc), x.dtype)


shape("Col2Im")(lambda cols, like, **_: TensorInfo(like.shape, cols.dtype))
shape("UpsampleBilinearGradient", "ResizeNearest3DGradient")(same_as(1))
shape("IntegralImageGradient")(same_as(0))


def _padded_shape(x, g, sign):
    _, _, pb, pe, _ = geometry(2, g)
    n, c, sp = split_layout(dims(x), g["order"])
    out = [dim_op(lambda v, i=i: v + sign * (pb[i] + pe[i]), sp[i]) for i in range(2)]
    return TensorInfo((n, c, *out) if g["order"] == "NCHW" else (n, *out, c), x.dtype)


shape("PadImage")(geometry_args(lambda x, **g: _padded_shape(x, g, 1)))
shape("PadImageGradient")(geometry_args(lambda dy, **g: _padded_shape(dy, g, -1)))  # NOTE: dY -> dX un-pads


@shape("IntegralImage")
def integral_image_shape(x):
    d = dims(x)
    return TensorInfo(d[:2] + tuple(dim_op(lambda v: v + 1, v) for v in d[2:]), x.dtype)


shape("DepthConcat")(lambda *xs, order="NCHW": concat_shape(*xs, axis=1 if order == "NCHW" else 3))
shape("UpsampleBilinear")(lambda x, scales=None, *, width_scale=1.0, height_scale=1.0: TensorInfo(
    dims(x)[:2] + ((dim_op(lambda v: int(v * np.float32(height_scale)), dims(x)[2]),
                    dim_op(lambda v: int(v * np.float32(width_scale)), dims(x)[3])) if scales is None else
                   (None, None)), FLOAT))


def _space_batch_dims(x, bs, g, to_space=False):
    """SpaceToBatch: (N, C, H+pads, W+pads) -> (bs^2 N, C, ./bs, ./bs); BatchToSpace (`to_space`) inverts it."""
    _, _, pb, pe, _ = geometry(2, g)
    n, c, h, w = dims(x)
    if to_space:
        return TensorInfo((dim_op(lambda v: v // (bs * bs), n), c, dim_op(lambda v: v * bs - pb[0] - pe[0], h),
                           dim_op(lambda v: v * bs - pb[1] - pe[1], w)), x.dtype)
    return TensorInfo((dim_op(lambda v: v * bs * bs, n), c, dim_op(lambda v: (v + pb[0] + pe[0]) // bs, h),
                       dim_op(lambda v: (v + pb[1] + pe[1]) // bs, w)), x.dtype)


shape("SpaceToBatch")(geometry_args(lambda x, *, block_size=2, **g: _space_batch_dims(x, block_size, g)))
shape("BatchToSpace")(geometry_args(lambda x, *, block_size=2, **g: _space_batch_dims(x, block_size, g, True)))
shape("ResizeNearest3D")(lambda x, *, temporal_scale=1.0, width_scale=1.0, height_scale=1.0: TensorInfo(
    dims(x)[:2] + tuple(dim_op(lambda v, s=s: int(v * np.float32(s)), v)
                        for v, s in zip(dims(x)[2:], (temporal_scale, height_scale, width_scale))), x.dtype))

shape("UpsampleNearest")(lambda x, *, scale=2: TensorInfo(
    dims(x)[:-2] + tuple(dim_op(lambda v: v * int(scale), v) for v in dims(x)[-2:]), x.dtype))
shape("UpsampleNearestGradient", "SpatialNarrowAsGradient")(same_as(0))
shape("SpatialNarrowAs")(lambda a, b: TensorInfo(dims(a)[:2] + dims(b)[-2:], a.dtype))


# NOTE: the stylizer's packed BGRA uint8 image (N, H, W, 4) <-> its float BGR planes (N, 3, H, W).
shape("PackedInt8BGRANHWCToNCHWCStylizerPreprocess")(
    lambda x, mean: TensorInfo((dims(x)[0], 3, *dims(x)[1:3]), FLOAT))
shape("BRGNCHWCToPackedInt8BGRAStylizerDeprocess")(
    lambda x, mean: TensorInfo((dims(x)[0], *dims(x)[2:4], 4), UINT8))


# ---- onnx ----
from engine.catalogue.registry import onnx_converter  # noqa: E402


@onnx_converter("PadImage")
def pad_image_onnx(c):
    """ONNX Pad in the same mode on the two spatial dims: constant (with `value`), reflect (NumPy's:
    the edge not repeated) and edge, as Caffe2 pads (checked with Caffe2 1.10.2, NCHW and NHWC).
    reflect needs every pad smaller than its dim: Caffe2 then reads outside the image."""
    mode = c.arg("mode", "constant")
    if mode not in ("constant", "reflect", "edge"):
        raise c.refuse(f"mode {mode!r}")
    r = c.rank(0)
    if r != 4:
        raise c.refuse(f"a {r}-D input (PadImage pads 2-D images)")
    _, _, pb, pe, _ = onnx_geometry(c, 2, None)  # NOTE: as the kernel reads them (no legacy_pad)
    sp = [1, 2] if c.arg("order", "NCHW") == "NHWC" else [2, 3]
    if mode == "reflect" and any(p >= c.shape(0)[a] for a, p in zip(sp + sp, pb + pe)):
        raise c.refuse(f"reflect pads {pb + pe} not smaller than the image {[c.shape(0)[a] for a in sp]}")
    begin, end = [0] * r, [0] * r
    for a, b, e in zip(sp, pb, pe):
        begin[a], end[a] = b, e
    value = [c.const(np.array(c.arg("value", 0.0), c.np_dtype(0)), "value")] if mode == "constant" else []
    c.emit("Pad", [c.x(0), c.ints(begin + end), *value], [c.y(0)], mode=mode)


@onnx_converter("PackedInt8BGRANHWCToNCHWCStylizerPreprocess")
def stylizer_preprocess_onnx(c):
    """BGR of the packed BGRA image as float, minus the mean, plus the stylizer's noise, to NCHW: the
    noise is the one the engine's run drew (``__CAFFE2_STYLIZER_NOISE__``, read cyclically per image),
    an initializer of the image's (H, W, 3)."""
    ws = getattr(c.exporter, "workspace", None)
    noise = None if ws is None else ws.values.get(STYLIZER_NOISE)
    if not hasattr(noise, "dtype"):
        raise c.refuse(f"no {STYLIZER_NOISE} in the workspace (the net has not run)")
    n, h, w, _ = c.shape(0)
    size = int(c.arg("noise_size", 491))
    cycle = dev.to_host(noise).reshape(-1)[np.arange(h * w * 3) % size].reshape(h, w, 3).astype(np.float32)
    bgr = c.emit("Cast", [c.emit("Slice", [c.x(0), c.ints([0]), c.ints([3]), c.ints([3])])], to=1)
    mean = c.emit("Reshape", [c.emit("Cast", [c.x(1)], to=1), c.ints([3])])
    y = c.emit("Add", [c.emit("Sub", [bgr, mean]), c.const(cycle, "noise")])
    c.emit("Transpose", [y], [c.y(0)], perm=[0, 3, 1, 2])


@onnx_converter("BRGNCHWCToPackedInt8BGRAStylizerDeprocess")
def stylizer_deprocess_onnx(c):
    """Value plus the mean, clipped to [0, 255] and cast to uint8 (truncating, as the kernel), to NHWC,
    then the alpha plane of 255 padded on."""
    mean = c.emit("Reshape", [c.emit("Cast", [c.x(1)], to=1), c.ints([1, 3, 1, 1])])
    v = c.emit("Clip", [c.emit("Add", [c.emit("Cast", [c.x(0)], to=1), mean]),
                        c.const(np.array(0, np.float32), "lo"), c.const(np.array(255, np.float32), "hi")])
    bgr = c.emit("Transpose", [c.emit("Cast", [v], to=2)], perm=[0, 2, 3, 1])
    c.emit("Pad", [bgr, c.ints([0, 0, 0, 0, 0, 0, 0, 1]), c.const(np.array(255, np.uint8), "alpha")], [c.y(0)],
           mode="constant")
