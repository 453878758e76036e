"""Oracle cases for the last kernels (issue 35 item 6): the Sparse* segment/lengths gradient ops,
TTLinearGradient, C10LayerNorm_DontUseThisOpYet, the two Stylizer ops and the ATen op.

One-op cases go to ``OUT/kernels_last/`` (read by tests/differential/test_kernels_oracle.py and
tests/engine/test_kernels_last.py).  ATen configurations that the torch 1.10.2 ONNX exporter emits
but Caffe2's own ATen op cannot run (``embedding_bag`` with ``include_last_offset``, opset-11
``gather`` with ``dim`` as an input) and whole ONNX-converted nets go to ``OUT/last_nets/`` as
``<name>.pb`` + ``.npz`` (``in/<blob>`` inputs, ``out/<blob>`` results): their reference values
come from torch itself (the nets from Caffe2 where it runs them).
"""
from __future__ import annotations

import io
import os

import numpy as np

from _common import OUT, save_npz
from kernel_oracle import Case, record, rng_for, seed_random_ops
from caffe2.python import workspace

I32, I64, F32, F64, U8 = np.int32, np.int64, np.float32, np.float64, np.uint8
NOISE = "__CAFFE2_STYLIZER_NOISE__"


def _f(name, *shape):
    return rng_for(name).randn(*shape).astype(F32)


def sparse_gradient_cases():
    dy = _f("sg_dy", 3, 2, 2)
    lengths = np.array([2, 0, 3], I32)
    w = _f("sg_w", 5)
    data = _f("sg_data", 7, 2, 2)
    idx = np.array([6, 0, 3, 3, 1], I64)
    yield Case("SparseLengthsMeanGradient", "SparseLengthsMeanGradient", {"GO": dy, "L": lengths}, ["DG"])
    yield Case("SparseLengthsWeightedSumGradient", "SparseLengthsWeightedSumGradient",
               {"W": w, "GO": dy, "L": lengths}, ["DG"])
    yield Case("SparseLengthsWeightedSumWithMainInputGradient", "SparseLengthsWeightedSumWithMainInputGradient",
               {"W": w, "GO": dy, "L": lengths, "D": data, "I": idx}, ["DG", "WG"])
    yield Case("SparseLengthsWeightedSumWithMainInputGradient_i32", "SparseLengthsWeightedSumWithMainInputGradient",
               {"W": w, "GO": dy, "L": lengths, "D": data, "I": idx.astype(I32)}, ["DG", "WG"])
    sorted_ids = np.array([0, 0, 1, 2, 2], I32)
    unsorted_ids = np.array([2, 0, 2, 1, 0], I32)
    for kind in ("Sum", "Mean"):
        yield Case(f"SparseSortedSegment{kind}Gradient", f"SparseSortedSegment{kind}Gradient",
                   {"GO": dy, "S": sorted_ids}, ["DG"])
        yield Case(f"SparseUnsortedSegment{kind}Gradient", f"SparseUnsortedSegment{kind}Gradient",
                   {"GO": dy, "S": unsorted_ids}, ["DG"])
    yield Case("SparseSortedSegmentWeightedSumGradient", "SparseSortedSegmentWeightedSumGradient",
               {"W": w, "GO": dy, "S": sorted_ids}, ["DG"])
    yield Case("SparseUnsortedSegmentWeightedSumGradient", "SparseUnsortedSegmentWeightedSumGradient",
               {"W": w, "GO": dy, "S": unsorted_ids}, ["DG"])
    yield Case("SparseSortedSegmentSumGradient_unsorted_ids", "SparseSortedSegmentSumGradient",
               {"GO": dy, "S": unsorted_ids}, ["DG"])
    # NOTE: the forward Sparse* ops' makers emit the non-Sparse gradient op (a GradientSlice over INDICES).
    yield Case("SparseSortedSegmentMean_maker", "SparseSortedSegmentMean",
               {"D": data, "I": idx, "S": sorted_ids}, ["Y"], grad=True)
    yield Case("SparseLengthsWeightedSum_maker", "SparseLengthsWeightedSum",
               {"D": data, "W": w, "I": idx, "L": lengths}, ["Y"], grad=True)


def tt_linear_gradient_cases():
    # NOTE: Caffe2 1.10.2's TTLinearGradient is a stub (RunOnDevice returns false): it fails on any input.
    x = _f("tt_x", 2, 4)
    yield Case("TTLinearGradient_fails", "TTLinearGradient",
               {"X": x, "b": _f("tt_b", 4), "cores": _f("tt_c", 16), "GO": _f("tt_go", 2, 4)}, ["DX", "Db", "Dc"],
               args={"inp_sizes": [2, 2], "out_sizes": [2, 2], "tt_ranks": [1, 2, 1]})
    yield Case("TTLinearGradient_fails_no_inputs", "TTLinearGradient", {}, ["DX"])


def c10_layer_norm_cases():
    op = "C10LayerNorm_DontUseThisOpYet"
    x = _f("c10ln", 2, 3, 4)
    yield Case("C10LayerNorm", op, {"X": x}, ["Y", "mean", "std"])
    yield Case("C10LayerNorm_axis2_eps", op, {"X": x}, ["Y", "mean", "std"], args={"axis": 2, "epsilon": 1e-3})
    yield Case("C10LayerNorm_axis_neg", op, {"X": x.astype(F64)}, ["Y", "mean", "std"], args={"axis": -2})
    yield Case("C10LayerNorm_axis0", op, {"X": x}, ["Y", "mean", "std"], args={"axis": 0})
    yield Case("C10LayerNorm_affine", op, {"X": x, "g": _f("c10g", 3, 4), "b": _f("c10b", 3, 4)},
               ["Y", "mean", "std"], args={"axis": 1, "epsilon": 1e-4, "elementwise_affine": 1})
    yield Case("C10LayerNorm_affine_missing", op, {"X": x}, ["Y", "mean", "std"], args={"elementwise_affine": 1})
    yield Case("C10LayerNorm_empty_batch", op, {"X": np.zeros((0, 3), F32)}, ["Y", "mean", "std"])


def _noise_fill(values):
    return [("GivenTensorFill", [], [NOISE], {"shape": [len(values)], "values": [float(v) for v in values]})]


def stylizer_cases():
    pre, de = "PackedInt8BGRANHWCToNCHWCStylizerPreprocess", "BRGNCHWCToPackedInt8BGRAStylizerDeprocess"
    r = rng_for("stylizer")
    img = r.randint(0, 256, size=(2, 3, 5, 4)).astype(U8)
    mean = np.array([103.5, 116.25, 123.75], F32)
    # noise-free part exactly: a pre-filled noise blob of zeros, then a short cycle (7 < 3 * H * W).
    yield Case("StylizerPreprocess_zero_noise", pre, {"X": img, "M": mean}, ["Y"],
               extra_ops=_noise_fill(np.zeros(491)), note="the noise blob is pre-filled: no random draw")
    yield Case("StylizerPreprocess_given_noise_cycle", pre, {"X": img, "M": mean}, ["Y"], args={"noise_size": 7},
               extra_ops=_noise_fill(np.arange(9) * 0.5 - 2), note="noise longer than noise_size: the first 7 cycle")
    # seeded noise: Caffe2 draws N(0, noise_std) with the op's generator (random_seed 1234 on every case op).
    yield Case("StylizerPreprocess_seeded", pre, {"X": img, "M": mean}, ["Y"])
    yield Case("StylizerPreprocess_seeded_size_std", pre, {"X": img[:1], "M": mean}, ["Y"],
               args={"noise_size": 11, "noise_std": 2.5})
    yield Case("StylizerPreprocess_noise_too_small", pre, {"X": img, "M": mean}, ["Y"],
               extra_ops=_noise_fill(np.zeros(5)))
    yield Case("StylizerPreprocess_three_channels", pre, {"X": img[..., :3].copy(), "M": mean}, ["Y"])
    yield Case("StylizerPreprocess_bad_mean", pre, {"X": img, "M": mean[:2].copy()}, ["Y"])
    x = (r.randn(2, 3, 3, 5) * 120).astype(F32)
    x[0, 0, 0, :3] = [-1000.0, 1000.0, 151.75]
    yield Case("StylizerDeprocess", de, {"X": x, "M": mean}, ["Y"])
    yield Case("StylizerDeprocess_four_channels", de, {"X": np.zeros((1, 4, 2, 2), F32), "M": mean}, ["Y"])


def aten_cases():
    r = rng_for("aten")
    x = r.randn(2, 3, 4).astype(F32)
    y = r.randn(2, 3, 4).astype(F32)
    w4 = r.randn(4).astype(F32)
    m45 = r.randn(4, 5).astype(F32)
    table = [
        ("add", [x, y], 1, {}), ("add_alpha", [x, y], 1, {"alpha": 2.0}), ("sub", [x, y], 1, {}),
        ("mul", [x, y], 1, {}), ("div", [x, y], 1, {}), ("pow", [np.abs(x)], 1, {"exponent": 2.5}),
        ("pow_tensor", [np.abs(x), y], 1, {}),
        ("sum", [x], 1, {}), ("sum_dim", [x], 1, {"dim": [1]}), ("sum_keepdim", [x], 1, {"dim": [0, 2], "keepdim": 1}),
        ("mean", [x], 1, {}), ("mean_dim", [x], 1, {"dim": [-1]}),
        ("sort", [x], 2, {}), ("sort_desc", [x], 2, {"dim": 1, "descending": 1}),
        ("_unique", [np.array([1, 2, 6, 4, 2, 3, 2], I64)], 2, {"sorted": 1, "return_inverse": 1}),
        ("index_int", [x, np.array([1, 0, 1], I64)], 1, {}),
        ("index_uint8", [x, np.array([[1, 0, 0], [1, 1, 0]], U8)], 1, {}),
        ("index_bool", [x, np.array([False, True])], 1, {}),
        ("index_put", [x[0].copy(), np.array([[1, 1, 0, 0], [1, 0, 0, 1], [0, 1, 1, 0]], bool), r.randn(6).astype(F32)], 1, {}),
        ("index_put_accumulate", [x, np.array([1, 1, 0], I64), np.ones((3, 3, 4), F32)], 1, {"accumulate": 1}),
        ("index_fill", [x, np.array([2, 0], I64), np.array(5.5, F32)], 1, {"dim": 1}),
        ("index_fill_value", [x, np.array([3], I64)], 1, {"dim": 2, "value": -1.0}),
        ("index_copy", [x, np.array([2, 0], I64), np.ones((2, 2, 4), F32)], 1, {"dim": 1}),
        ("index_select", [x, np.array([2, 0, 2], I64)], 1, {"dim": 1}),
        ("gather", [x, r.randint(0, 3, size=(2, 2, 4)).astype(I64)], 1, {"dim": 1}),
        ("scatter", [x, np.array([[[2, 1, 0, 2]]], I64), np.ones((1, 1, 4), F32)], 1, {"dim": 1}),
        ("cumsum", [x], 1, {"dim": 1}), ("cumsum_neg", [x], 1, {"dim": -1}),
        ("transpose", [x], 1, {"dim0": 0, "dim1": 2}), ("type_as", [x * 3, np.zeros(1, I64)], 1, {}),
        ("unfold", [x], 1, {"dimension": 2, "size": 2, "step": 1}),
        ("unfold_step", [x], 1, {"dimension": 1, "size": 2, "step": 2}),
        ("layer_norm", [x, w4, w4 * 0.5], 1, {"normalized_shape": [4], "eps": 1e-5, "cudnn_enable": 1}),
        ("layer_norm_2d", [x, r.randn(3, 4).astype(F32), r.randn(3, 4).astype(F32)], 1,
         {"normalized_shape": [3, 4], "eps": 1e-3, "cudnn_enable": 0}),
        ("embedding_bag_mean", [r.randn(10, 4).astype(F32), np.array([1, 2, 4, 5, 4, 3, 2, 9], I64), np.array([0, 4], I64)], 4,
         {"mode": 1, "scale_grad_by_freq": 0, "sparse": 0}),
        ("embedding_bag_sum", [r.randn(10, 4).astype(F32), np.array([1, 2, 4, 5, 4], I64), np.array([0, 2, 2], I64)], 4,
         {"mode": 0, "scale_grad_by_freq": 0, "sparse": 0}),
        ("embedding_bag_max", [r.randn(10, 4).astype(F32), np.array([1, 2, 4, 5, 4], I64), np.array([0, 3], I64)], 4,
         {"mode": 2, "scale_grad_by_freq": 0, "sparse": 0}),
        ("embedding", [r.randn(10, 4).astype(F32), np.array([[1, 2], [9, 0]], I64)], 1, {}),
        ("relu", [x], 1, {}), ("sigmoid", [x], 1, {}), ("tanh", [x], 1, {}), ("exp", [x], 1, {}),
        ("log", [np.abs(x) + 0.1], 1, {}), ("abs", [x], 1, {}), ("neg", [x], 1, {}), ("sqrt", [np.abs(x)], 1, {}),
        ("rsqrt", [np.abs(x) + 0.1], 1, {}), ("reciprocal", [x], 1, {}), ("floor", [x * 3], 1, {}), ("ceil", [x * 3], 1, {}),
        ("round", [x * 3], 1, {}), ("sign", [x], 1, {}), ("erf", [x], 1, {}),
        ("softmax", [x], 1, {"dim": 1}), ("log_softmax", [x], 1, {"dim": -1}),
        ("leaky_relu", [x], 1, {"negative_slope": 0.1}), ("elu", [x], 1, {}), ("gelu", [x], 1, {}),
        ("hardtanh", [x], 1, {"min_val": -0.5, "max_val": 0.5}), ("softplus", [x], 1, {}),
        ("matmul", [x, m45], 1, {}), ("mm", [x[0].copy(), m45], 1, {}), ("t", [x[0].copy()], 1, {}),
        ("bmm", [x, r.randn(2, 4, 5).astype(F32)], 1, {}),
        ("addmm", [r.randn(5).astype(F32), x[0].copy(), m45], 1, {}),
        ("addmm_scaled", [r.randn(3, 5).astype(F32), x[0].copy(), m45], 1, {"beta": 0.5, "alpha": 2.0}),
        ("linear", [x, r.randn(5, 4).astype(F32), r.randn(5).astype(F32)], 1, {}),
        ("flatten", [x], 1, {"start_dim": 1, "end_dim": -1}), ("reshape", [x], 1, {"shape": [6, -1]}),
        ("view", [x], 1, {"size": [4, 6]}), ("permute", [x], 1, {"dims": [2, 0, 1]}),
        ("squeeze", [x[:, :1].copy()], 1, {"dim": 1}), ("unsqueeze", [x], 1, {"dim": -1}),
        ("expand", [x[:, :1].copy()], 1, {"size": [2, 3, 4]}), ("repeat", [x], 1, {"repeats": [1, 2, 1]}),
        ("narrow", [x], 1, {"dim": 2, "start": 1, "length": 2}), ("select", [x], 1, {"dim": 1, "index": -1}),
        ("cat", [x, y], 1, {"dim": 1}), ("stack", [x, y], 1, {"dim": 0}),
        ("chunk", [x], 2, {"chunks": 2, "dim": 1}), ("split", [x], 2, {"split_size": 2, "dim": 1}),
        ("flip", [x], 1, {"dims": [1]}), ("where", [x > 0, x, y], 1, {}), ("masked_fill", [x, x > 0], 1, {"value": 0.5}),
        ("eq", [x, np.where(x > 0, x, y)], 1, {}), ("gt", [x], 1, {"other": 0.0}),
        ("max", [x], 1, {}), ("max_dim", [x], 2, {"dim": 1, "keepdim": 0}), ("min", [x], 1, {}),
        ("topk", [x], 2, {"k": 2}), ("clone", [x], 1, {}), ("contiguous", [x], 1, {}),
        ("_cast_Long", [x * 3], 1, {}), ("nonzero", [x > 0], 1, {}), ("constant_pad_nd", [x], 1, {"pad": [1, 2]}),
        ("max_pool2d", [x[None]], 1, {"kernel_size": [2, 2]}), ("adaptive_avg_pool2d", [x[None]], 1, {"output_size": [1, 2]}),
        ("upsample_nearest2d", [x[None]], 1, {"output_size": [6, 8]}),
        ("clamp_unsupported", [x], 1, {"min": -0.5, "max": 0.5}),
        ("no_such_operator", [x], 1, {}),
    ]
    for name, ins, nout, args in table:
        op_name = name
        for suffix in ("_alpha", "_tensor", "_dim", "_keepdim", "_desc", "_int", "_uint8", "_bool", "_accumulate",
                       "_value", "_neg", "_step", "_2d", "_mean", "_sum", "_max", "_scaled", "_unsupported"):
            if op_name.endswith(suffix) and op_name not in ("index_put", "max"):
                op_name = op_name[: -len(suffix)]
                break
        yield Case("ATen_" + name, "ATen", {f"in{i}": np.asarray(v) for i, v in enumerate(ins)},
                   [f"out{k}" for k in range(nout)], args=dict(args, operator=op_name))


def cases():
    seed_random_ops({"PackedInt8BGRANHWCToNCHWCStylizerPreprocess"})
    yield from sparse_gradient_cases()
    yield from tt_linear_gradient_cases()
    yield from c10_layer_norm_cases()
    yield from stylizer_cases()
    yield from aten_cases()


# ---------------------------------------------------------------------------------------------------
# ONNX-exported nets and exporter-emitted ATen configurations that Caffe2 cannot run: torch's values
# ---------------------------------------------------------------------------------------------------
def _write_net(outdir, name, net, inputs, outputs):
    with open(os.path.join(outdir, name + ".pb"), "wb") as f:
        f.write(net.SerializeToString(deterministic=True))
    arrays = {f"in/{k}": np.asarray(v) for k, v in inputs.items()}
    arrays.update({f"out/{k}": np.asarray(v) for k, v in outputs.items()})
    save_npz(os.path.join(outdir, name + ".npz"), arrays)


def _onnx_net(module, args, names, out_names, opset):
    """The Caffe2 predict net and parameters of `module` exported by torch.onnx with ATen fallback."""
    import onnx
    import torch
    from caffe2.python.onnx.backend import Caffe2Backend
    f = io.BytesIO()
    torch.onnx.export(module, args, f, opset_version=opset, input_names=names, output_names=out_names,
                      operator_export_type=torch.onnx.OperatorExportTypes.ONNX_ATEN_FALLBACK)
    init, pred = Caffe2Backend.onnx_graph_to_caffe2_net(onnx.load_from_string(f.getvalue()), device="CPU")
    params = {}
    workspace.ResetWorkspace()
    for op in init.op:   # NOTE: only the parameter fills: the converter's init net repeats the predict ops
        if op.type.startswith("GivenTensor"):
            workspace.RunOperatorOnce(op)
            params[op.output[0]] = workspace.FetchBlob(op.output[0])
    return pred, params


def record_onnx(outdir):
    import torch
    from torch import nn
    from caffe2.python import core
    os.makedirs(outdir, exist_ok=True)
    torch.manual_seed(0)

    class Bag(nn.Module):
        """EmbeddingBag + LayerNorm + cumsum: three ATen nodes; Caffe2 stops on the embedding_bag."""
        def __init__(self):
            super().__init__()
            self.emb, self.ln = nn.EmbeddingBag(10, 4, mode="mean"), nn.LayerNorm(4)

        def forward(self, idx, off, x):
            return torch.cumsum(self.ln(self.emb(idx, off) + x), dim=1)

    class Norm(nn.Module):
        """LayerNorm + cumsum: both ATen nodes run in Caffe2."""
        def __init__(self):
            super().__init__()
            self.ln = nn.LayerNorm([3, 4])

        def forward(self, x):
            return torch.cumsum(self.ln(x), dim=2) * 2.0

    idx, off = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 4])
    x = torch.from_numpy(rng_for("onnx_bag").randn(2, 4).astype(F32))
    bag = Bag().eval()
    pred, params = _onnx_net(bag, (idx, off, x), ["idx", "off", "x"], ["y"], 9)
    with torch.no_grad():
        y = bag(idx, off, x).numpy()
    _write_net(outdir, "onnx_embedding_bag_layer_norm", pred,
               dict(params, idx=idx.numpy(), off=off.numpy(), x=x.numpy()), {"y": y})

    xn = torch.from_numpy(rng_for("onnx_norm").randn(2, 3, 4).astype(F32))
    norm = Norm().eval()
    with torch.no_grad():
        norm.ln.weight.copy_(torch.from_numpy(rng_for("onnx_norm_w").randn(3, 4).astype(F32)))
    pred, params = _onnx_net(norm, (xn,), ["x"], ["y"], 9)
    workspace.ResetWorkspace()
    for k, v in dict(params, x=xn.numpy()).items():
        workspace.FeedBlob(k, v)
    workspace.RunNetOnce(pred)   # NOTE: Caffe2 runs this one: its value is the reference
    _write_net(outdir, "onnx_layer_norm_cumsum", pred, dict(params, x=xn.numpy()), {"y": workspace.FetchBlob("y")})

    # exporter-emitted ATen configurations Caffe2's ATen op refuses ("unknown ATen operator configuration")
    r = rng_for("aten_torch")
    w = r.randn(10, 4).astype(F32)
    for mode, last in ((0, 0), (1, 1), (2, 0), (0, 1)):
        ind = np.array([1, 2, 4, 5, 4, 3, 9], I64)
        offs = np.array([0, 2, 2, 7], I64) if last else np.array([0, 2, 2], I64)
        op = core.CreateOperator("ATen", ["w", "i", "o"], ["y", "offset2bag", "bag_size", "max_indices"],
                                 operator="embedding_bag", mode=mode, scale_grad_by_freq=0, sparse=0,
                                 include_last_offset=last)
        outs = torch.embedding_bag(torch.from_numpy(w), torch.from_numpy(ind), torch.from_numpy(offs), False, mode,
                                   False, None, bool(last))
        _write_net(outdir, f"aten_embedding_bag_mode{mode}_last{last}", _one_op_net(op),
                   {"w": w, "i": ind, "o": offs}, {"y": outs[0].numpy()})
    xp_ = r.randn(3, 4).astype(F32)
    for acc in (False, True):   # NOTE: the exporter's index_put: accumulate is a trailing 0-d bool input
        op = core.CreateOperator("ATen", ["x", "idx", "v", "acc"], ["y"], operator="index_put")
        ref = torch.from_numpy(xp_).index_put((torch.tensor([2, 0, 2]),), torch.tensor(3.0), accumulate=acc)
        _write_net(outdir, f"aten_index_put_accumulate_input_{int(acc)}", _one_op_net(op),
                   {"x": xp_, "idx": np.array([2, 0, 2], I64), "v": np.array(3.0, F32), "acc": np.array(acc)},
                   {"y": ref.numpy()})
    xs, isc = r.randn(3, 4).astype(F32), np.array([[0, 1], [2, 3], [1, 0]], I64)
    op = core.CreateOperator("ATen", ["x", "dim", "index", "src"], ["y"], operator="scatter")
    _write_net(outdir, "aten_scatter_dim_input", _one_op_net(op),
               {"x": xs, "dim": np.array(1, I64), "index": isc, "src": np.ones((3, 2), F32)},
               {"y": torch.scatter(torch.from_numpy(xs), 1, torch.from_numpy(isc), torch.ones(3, 2)).numpy()})
    xg = r.randn(2, 3, 4).astype(F32)
    ig = r.randint(0, 3, size=(2, 2, 4)).astype(I64)
    op = core.CreateOperator("ATen", ["x", "dim", "index", "sparse_grad"], ["y"], operator="gather")
    _write_net(outdir, "aten_gather_dim_input", _one_op_net(op),
               {"x": xg, "dim": np.array(1, I64), "index": ig, "sparse_grad": np.array(False)},
               {"y": torch.gather(torch.from_numpy(xg), 1, torch.from_numpy(ig)).numpy()})


def _write_through(out, value):
    """Fill a DLPack output in place.  NOTE: not ``feed(to_dlpack(t))``: Caffe2 1.10.2 shares the fed capsule's
    memory without marking it used, so torch frees it too (garbage values, then a crash at exit)."""
    import torch.utils.dlpack as tdl
    out._reshape(list(value.shape))
    tdl.from_dlpack(out.data).copy_(value)


def dlpack_affine(inputs, outputs):
    """Y = 2 X + 1 through DLPack (the PythonDLPack op's function; netviz's test registers its twin)."""
    import torch.utils.dlpack as tdl
    _write_through(outputs[0], tdl.from_dlpack(inputs[0].data) * 2 + 1)


def dlpack_affine_grad(inputs, outputs):
    """dX = 2 dY (inputs: X, Y, dY)."""
    import torch.utils.dlpack as tdl
    _write_through(outputs[0], tdl.from_dlpack(inputs[2].data) * 2)


def record_python_dlpack(outdir):
    from caffe2.python import core
    token = workspace.C.register_python_op(dlpack_affine, False, "")
    workspace.C.register_python_gradient_op(token, dlpack_affine_grad)
    op = core.CreateOperator("PythonDLPack", ["X"], ["Y"], token=token)
    grad_ops, _ = core.GradientRegistry.GetGradientForOp(op, ["Y_grad"])
    net = _one_op_net(op)
    for g in grad_ops:
        net.op.add().CopyFrom(g)
    x, gy = rng_for("dlpack_x").randn(2, 3).astype(F32), rng_for("dlpack_gy").randn(2, 3).astype(F32)
    workspace.ResetWorkspace()
    workspace.FeedBlob("X", x)
    workspace.FeedBlob("Y_grad", gy)
    workspace.RunNetOnce(net)
    _write_net(outdir, "python_dlpack_affine", net, {"X": x, "Y_grad": gy},
               {"Y": workspace.FetchBlob("Y"), "X_grad": workspace.FetchBlob("X_grad")})


def _one_op_net(op):
    from caffe2.proto import caffe2_pb2
    net = caffe2_pb2.NetDef()
    net.name = "aten"
    net.op.add().CopyFrom(op)
    return net


if __name__ == "__main__":
    print(record("last", cases()), "cases")
    record_onnx(os.path.join(OUT, "last_nets"))
    record_python_dlpack(os.path.join(OUT, "last_nets"))
