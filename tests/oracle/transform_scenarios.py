"""Graph passes and memonger through the C bindings: run by gen_transforms.py against Caffe2 (the
oracle) and by tests/engine/test_capi_transforms.py against netviz's engine.caffe2.capi; same calls,
results compared as JSON.

Python 3.9 compatible; imports neither caffe2 nor netviz: `run(C, pb2, ws, core, zoo)` is given
the binding, proto, workspace and core modules of its side.  Zoo nets are read from
the zoo folder, never copied; results hold texts of small nets, fused weights, and sha256 digests
of serialized zoo nets.
"""
import glob
import hashlib
import os

import numpy as np
from google.protobuf import text_format

#: Pass names asked of transform_exists / workspace_transform_exists.
NAMES = ["AddNNPACK", "FuseNNPACKConvRelu", "DeadCodeElim", "FuseConvBN", "SinkMaxPool", "ConvToNNPack",
         "OptimizeForMkldnn", "NoSuchPass"]


def _op(pb2, op_type, ins, outs, name="", engine="", device=None, **args):
    op = pb2.OperatorDef(type=op_type, name=name, engine=engine)
    op.input.extend(ins)
    op.output.extend(outs)
    for k, v in args.items():
        a = op.arg.add(name=k)
        if isinstance(v, float):
            a.f = v
        elif isinstance(v, int):
            a.i = v
        elif isinstance(v, str):
            a.s = v.encode()
        else:
            a.ints.extend(v)
    if device is not None:
        op.device_option.device_type, op.device_option.device_id = device
    return op


def _net(pb2, name, ops, ext_in=(), ext_out=()):
    net = pb2.NetDef(name=name)
    net.op.extend(ops)
    net.external_input.extend(ext_in)
    net.external_output.extend(ext_out)
    return net


def _conv(pb2, x, y, **kw):
    args = dict(stride=1, pad=0, kernel=3, order="NCHW")
    args.update(kw)
    return _op(pb2, "Conv", [x, "w", "b"], [y], **args)


def _relu(pb2, x, y):
    return _op(pb2, "Relu", [x], [y])


def small_nets(pb2):
    """Name -> NetDef of hand-made nets (transformations_test's shapes and edge cases)."""
    c, r = (lambda x, y, **kw: _conv(pb2, x, y, **kw)), (lambda x, y: _relu(pb2, x, y))
    ext = ["X", "w", "b"]
    nets = {
        "relu": [c("X", "Y"), r("Y", "Y2")],
        "relu_twice": [c("X", "Y"), r("Y", "Y2"), r("Y", "Y3")],
        "relu_writes_input": [c("X", "Y"), r("Y", "X")],
        "relu_in_place": [c("X", "Y"), r("Y", "Y")],
        "ping_pong": [c("X", "Y"), r("Y", "X"), c("X", "Y")],
        "followed_by_conv": [c("X", "Y"), r("Y", "Y2"), c("Y2", "Y"), r("Y", "Y2")],
        "in_place_followed_by_conv": [c("X", "Y"), r("Y", "Y"), c("Y", "Y2"), r("Y2", "Y2")],
        "stride2_kernel1": [c("X", "Y", stride=2), r("Y", "Y2"), c("Y2", "Z", kernel=1), r("Z", "Z2")],
        "algos": [c("X", "Y", algo="WINOGRAD"), r("Y", "Y2"), c("Y2", "Z", algo="IMPLICIT_GEMM"), r("Z", "Z2")],
        "nhwc_lowercase": [c("X", "Y", order="nhwc"), r("Y", "Y2"), c("Y2", "Z", order="nchw"), r("Z", "Z2"),
                           _op(pb2, "MaxPool", ["Z2"], ["P"], kernel=2, order="nchw")],
        "kernel_forms": [c("X", "A", kernel_h=3, kernel_w=1), c("X", "B", kernels=[3, 3]),
                         c("X", "C", strides=[2, 2]), c("X", "D", kernel_h=2, kernel_w=3),
                         _op(pb2, "Conv", ["X", "w"], ["E"], kernel=3, order="NCHW"),
                         _op(pb2, "Conv", ["X", "w", "b"], ["F"], kernel=3)],
        "mixed_types": [_op(pb2, "Conv", ["X", "w", "b"], ["Y"], name="c", engine="X", device=(1, 0),
                            kernel=3, order="NCHW"),
                        _op(pb2, "Sigmoid", ["Y"], ["Z"], device=(1, 1)),
                        _op(pb2, "ConvFusion", ["Z", "w", "b"], ["Q"], kernel=3, order="NCHW", fusion_type=1),
                        _op(pb2, "SpatialBN", ["Q", "s", "bb", "m", "v"], ["R"], is_test=1),
                        _op(pb2, "FC", ["R", "w", "b"], ["S"]), _op(pb2, "Add", ["S", "S"], ["T"])],
        "dead_code": [r("X", "Y"), r("X", "Z"), _op(pb2, "Sigmoid", ["Y"], ["W"]), _op(pb2, "Print", ["Z"], []),
                      _op(pb2, "Relu", ["W"], ["W2"]), _op(pb2, "Tanh", ["Z"], ["Z"])],
    }
    nets["stop_gradient"] = [r("X", "A"), _op(pb2, "StopGradient", ["A"], ["A"]), _op(pb2, "Sigmoid", ["A"], ["B"]),
                             _op(pb2, "StopGradient", ["B"], ["C"]), _op(pb2, "Tanh", ["C"], ["D"])]
    nets["order_switch"] = [
        _op(pb2, "NCHW2NHWC", ["X"], ["Xh"]), _op(pb2, "Int8Quantize", ["Xh"], ["Q"], output_order=3, Y_scale=0.5),
        _op(pb2, "Int8Relu", ["Q"], ["R"]), _op(pb2, "Int8Dequantize", ["R"], ["Dh"]),
        _op(pb2, "NHWC2NCHW", ["Dh"], ["Y"]), _op(pb2, "Relu", ["Dh"], ["Z"]),
        _op(pb2, "NCHW2NHWC", ["Y"], ["Yh"]), _op(pb2, "Int8Quantize", ["Yh"], ["Q2"]), _op(pb2, "Relu", ["Yh"], ["Z2"]),
        _op(pb2, "NHWC2NCHW", ["X"], ["W"])]
    out = {k: _net(pb2, k, v, ext) for k, v in nets.items()}
    out["dead_code"].external_output.extend(["W", "fake"])
    out["unused_inputs"] = _net(pb2, "u", [r("X", "Y")], ["fake", "X", "Y2"], ["fake2", "Y"])
    out["written_before_read"] = _net(pb2, "wbr", [r("A", "Y"), r("Y", "Z")], ["Y", "A", "A"], ["Z", "Z"])
    return out


def cse_nets(pb2):
    """Name -> NetDef for Caffe2's older transform registry (ApplyTransform): common
    subexpressions of FC/LearningRate ops, and ops that only look alike."""
    fc = lambda x, y, w="W", **kw: _op(pb2, "FC", [x, w, "b"], [y], **kw)  # noqa: E731
    lr = lambda y, **kw: _op(pb2, "LearningRate", ["ITER"], [y], **kw)  # noqa: E731
    nets = {
        "fc_twice": [fc("X", "A"), _op(pb2, "Relu", ["X"], ["R"]), fc("X", "B"), _op(pb2, "Sum", ["A", "B"], ["S"]),
                     _op(pb2, "Relu", ["A"], ["T"])],
        "fc_args": [fc("X", "A", axis=1), fc("X", "B", axis=2), fc("X", "C"), fc("X", "D", axis=1, extra=3),
                    fc("X", "E", axis=1), _op(pb2, "Sum", ["A", "B", "C", "D", "E"], ["S"])],
        "fc_rewritten_input": [_op(pb2, "Relu", ["X"], ["H"]), fc("H", "A"), _op(pb2, "Tanh", ["X"], ["H"]),
                               fc("H", "B"), _op(pb2, "Sum", ["A", "B"], ["S"])],
        "learning_rates": [_op(pb2, "Iter", ["ITER"], ["ITER"]), lr("lr1", policy="step", base_lr=-0.1, stepsize=5),
                           lr("lr2", policy="step", base_lr=-0.1, stepsize=5), lr("lr3", policy="fixed", base_lr=-0.1),
                           _op(pb2, "Mul", ["lr1", "g1"], ["u1"]), _op(pb2, "Mul", ["lr2", "g2"], ["u2"]),
                           lr("lr4", policy="step", base_lr=-0.1, stepsize=5), _op(pb2, "Mul", ["lr4", "g3"], ["u3"])],
        "late_readers": [fc("X", "A"), fc("A", "A2"), fc("X", "B"), _op(pb2, "Relu", ["Y"], ["Y2"]),
                         _op(pb2, "Relu", ["B"], ["B2"]), _op(pb2, "Sigmoid", ["Y2"], ["Y3"])],
        "sums_stay": [_op(pb2, "Sum", ["X", "Y"], ["A"]), _op(pb2, "Sum", ["X", "Y"], ["B"])],
    }
    out = {k: _net(pb2, k, v, ["X", "W", "b", "ITER", "Y"]) for k, v in nets.items()}
    out["fc_twice"].external_output.extend(["B", "S"])
    return out


def _apply_transforms(C, pb2):
    nets = dict(small_nets(pb2), **cse_nets(pb2))
    return {name: {k: _try(lambda k=k: _text(pb2, C.apply_transform(k, net.SerializeToString())))
                   for k in ("ConvToNNPack", "CommonSubexpressionElimination", "NoSuchTransform")}
            for name, net in sorted(nets.items())}


def _text(pb2, data):
    return text_format.MessageToString(pb2.NetDef.FromString(data), as_one_line=True)


def _digest(pb2, data):
    """Digest of a serialized NetDef, re-serialized by Python protobuf (same bytes on both sides)."""
    return hashlib.sha256(pb2.NetDef.FromString(data).SerializeToString()).hexdigest()


def _try(fn):
    try:
        return fn()
    except RuntimeError:
        return "RuntimeError"


def _passes(C, pb2):
    """Each small net through each pass, and AddNNPACK then FuseNNPACKConvRelu."""
    r = {}
    for name, net in sorted(small_nets(pb2).items()):
        data = net.SerializeToString()
        res = {p: _try(lambda p=p: _text(pb2, C.run_transform(p, data)))
               for p in ("AddNNPACK", "FuseNNPACKConvRelu", "DeadCodeElim")}
        res["AddNNPACK+Fuse"] = _try(lambda: _text(pb2, C.transform_fuseNNPACKConvRelu(C.transform_addNNPACK(data))))
        res["roundtrip"] = _try(lambda: _text(pb2, C.transform_optimizeForMKLDNN(data, False)))
        res["mkldnn_training"] = _try(lambda: _text(pb2, C.transform_optimizeForMKLDNN(data, True)))
        r[name] = res
    return r


CONV_BN_CASES = [  # name, order, with conv bias, epsilon, spatial rank, conv name, blobs already there
    ("nchw_bias", "NCHW", True, 1e-5, 2, "c1", []),
    ("nhwc_bias", "NHWC", True, 1e-5, 2, "c1", []),
    ("nchw_nobias_eps1e-3", "NCHW", False, 1e-3, 2, "c1", []),
    ("nhwc_nobias_taken", "NHWC", False, 1e-2, 2, "", ["_bias0"]),
    ("conv3d", "NCHW", True, 1e-4, 3, "c3", []),
]


def _feed(ws, rng, name, shape, offset=0.0):
    ws.FeedBlob(name, (rng.rand(*shape) + offset).astype(np.float32))


def _conv_bn(C, pb2, ws, case):
    """Conv+SpatialBN (twice, so two biases get made) folded by FuseConvBN: the net, the folded
    weights and the outputs before and after."""
    name, order, bias, eps, rank, conv_name, taken = case
    ws.ResetWorkspace()
    rng = np.random.RandomState(len(name))
    c, k, size = 3, 3, 6
    ops = []
    for i, (x, y, z) in enumerate([("X", "Y", "Z"), ("Z", "Y1", "Z1")]):
        w_ins = [x, "w%d" % i] + (["b%d" % i] if bias else [])
        kw = dict(kernels=[k] * rank) if rank != 2 else dict(kernel=k, order=order)
        ops.append(_op(pb2, "Conv", w_ins, [y], name=conv_name, **kw))
        bn_ins = [y] + ["%s%d" % (p, i) for p in ("scale", "bias", "mean", "var")]
        ops.append(_op(pb2, "SpatialBN", bn_ins, [z], is_test=1, epsilon=eps, **({} if rank != 2 else dict(order=order))))
        w_shape = (c, c) + (k,) * rank if order == "NCHW" else (c,) + (k,) * rank + (c,)
        _feed(ws, rng, "w%d" % i, w_shape, -0.5)
        for p in ["b", "scale", "bias", "mean"][0 if bias else 1:]:
            _feed(ws, rng, "%s%d" % (p, i), (c,), -0.5)
        _feed(ws, rng, "var%d" % i, (c,), 0.5)
    for t in taken:
        ws.FeedBlob(t, np.ones(2, dtype=np.float32))
    x_shape = (1, c) + (size + 2 * k,) * rank if order == "NCHW" else (1,) + (size + 2 * k,) * rank + (c,)
    _feed(ws, rng, "X", x_shape, -0.5)
    reads = [b for op in ops for b in op.input if b not in ("Y", "Z", "Y1")]
    net = _net(pb2, "bn_" + name, ops, sorted(set(reads)), ["Z1"])
    ws.RunNetOnce(net)
    before = ws.FetchBlob("Z1")
    fused = pb2.NetDef.FromString(C.run_workspace_transform("FuseConvBN", net.SerializeToString()))
    params = {b: ws.FetchBlob(b).ravel().tolist() for op in fused.op for b in op.input[1:]}
    ws.RunNetOnce(fused)
    ext_in = sorted(fused.external_input)  # NOTE: Caffe2 appends the new biases in pointer-hash order
    del fused.external_input[:]
    return {"net": text_format.MessageToString(fused, as_one_line=True), "external_input": ext_in, "params": params,
            "before": before.ravel().tolist(), "after": ws.FetchBlob("Z1").ravel().tolist()}


def _bindings(C, pb2, ws):
    """Which registry each binding reads, and ``transform_fuseConvBN``'s bare NetDef (its external
    names sorted: Caffe2 prints them in pointer-hash order)."""
    net = _net(pb2, "bn", [_conv(pb2, "X", "Y"), _op(pb2, "SpatialBN", ["Y", "s", "o", "m", "v"], ["Z"], is_test=1),
                           _relu(pb2, "Z", "R")], ["X", "w", "b", "s", "o", "m", "v"], ["R"])
    net.arg.add(name="keep", i=1)
    data = net.SerializeToString()
    ws.ResetWorkspace()
    for b, shape in (("X", (1, 2, 5, 5)), ("w", (2, 2, 3, 3)), ("b", (2,)), ("s", (2,)), ("o", (2,)), ("m", (2,)),
                     ("v", (2,))):
        ws.FeedBlob(b, np.ones(shape, dtype=np.float32))
    r = {"%s(%s)" % (f, p): _try(lambda f=f, p=p: len(pb2.NetDef.FromString(getattr(C, f)(p, data)).op))
         for f in ("run_transform", "run_workspace_transform") for p in ("AddNNPACK", "FuseConvBN")}
    ws.ResetWorkspace()
    for b, shape in (("w", (2, 2, 3, 3)), ("b", (2,)), ("s", (2,)), ("o", (2,)), ("m", (2,)), ("v", (2,))):
        ws.FeedBlob(b, np.ones(shape, dtype=np.float32))
    bare = pb2.NetDef.FromString(C.transform_fuseConvBN(data))
    r["fuseConvBN_externals"] = [sorted(bare.external_input), sorted(bare.external_output)]
    del bare.external_input[:]
    del bare.external_output[:]
    r["fuseConvBN"] = text_format.MessageToString(bare, as_one_line=True)
    return r


def _distinct(net):
    return len({b for op in net.op for b in list(op.input) + list(op.output)})


def _memonger(C, pb2, net):
    """Both memonger entry points (and the size-driven DAG path with a namescope) on a predict
    net: distinct blob counts and digests of the nets, shared-blob names included."""
    data = net.SerializeToString()
    ext = set(net.external_input) | set(net.external_output)
    acts = sorted({b for op in net.op for b in list(op.input) + list(op.output) if b not in ext})
    fast = C.memonger_optimize_inference_net(data, [s.encode() for s in sorted(ext)])
    dag = C.memonger_compute_blob_recycling_for_dag(
        data, [net.external_input[0].encode()], list(range(len(net.op))), {a.encode() for a in acts}, b"", set(), {})
    shapes = {a: [1 + (len(a) * 7 + i) % 13, 3] for i, a in enumerate(acts)}
    sized = C.memonger_compute_blob_recycling_for_dag(
        data, [net.external_input[0].encode()], list(range(len(net.op))), {a.encode() for a in acts}, b"ns/",
        set(acts[::5]), shapes)
    out = {"before": _distinct(net)}
    for k, m in (("fast", fast), ("dag", dag), ("dag_sized", sized)):
        out[k] = [_distinct(pb2.NetDef.FromString(m)), _digest(pb2, m)]
    return out


def _grad_memonger(C, pb2, core):
    """Gradient blob sharing as memonger.share_grad_blobs asks for it, on a small two-branch
    training net built by each side's core (gradient ops included): with and without activations."""
    net = core.Net("train")
    h = net.FC(["X", "W1", "b1"], "h")
    r = net.Relu(h, "r")
    a = net.FC([r, "W2", "b2"], "a")
    b = net.Sigmoid(net.FC([r, "W3", "b3"], "bf"), "b")
    s = net.Sum([a, b], "s")
    c = net.Concat([s, r], ["c", "c_dims"], axis=1)
    p = net.Softmax(net.FC([c[0], "W4", "b4"], "logits"), "p")
    loss = net.AveragedLoss(net.LabelCrossEntropy([p, "label"], "xent"), "loss")
    grads = net.AddGradientOperators([loss])
    proto = net.Proto()
    params = {str(grads[w]) for w in ("W1", "b1", "W2", "b2", "W3", "b3", "W4", "b4")}
    grad_ops = [i for i, op in enumerate(proto.op)
                if any(str(x).endswith("_grad") for x in list(op.input) + list(op.output))]
    blobs = {x for op in proto.op for x in list(op.input) + list(op.output)}
    shared = {x for x in blobs if x.endswith("_grad") and x not in params}
    acts = {"h", "r", "a", "bf", "b", "s", "c"}
    r = {"ops": len(proto.op)}
    for k, share, idx in (("grads", shared, grad_ops), ("with_activations", shared | acts, grad_ops)):
        out = pb2.NetDef.FromString(C.memonger_compute_blob_recycling_for_dag(
            proto.SerializeToString(), [b"loss"], idx, {x.encode() for x in share}, b"", set(), {}))
        r[k] = [_distinct(out), text_format.MessageToString(out, as_one_line=True)]
    return r


def _subnet_memonger(C, pb2):
    """DAG memonger over ops holding nets: a RecurrentNetwork (step net as text and as a NetDef)
    and an AsyncIf get their inner nets renamed and ``<blob>.rename`` links."""
    step = _net(pb2, "step", [_relu(pb2, "A", "R"), _relu(pb2, "Z", "q")], ["A", "Z"], ["R"])
    rnn = _op(pb2, "RecurrentNetwork", ["A", "Z"], ["R", "R_last"], step_net=text_format.MessageToString(step))
    rnn.arg.add(name="backward_step_net").n.CopyFrom(step)
    branch = _net(pb2, "then", [_relu(pb2, "B", "C")], ["B"], ["C"])
    async_if = _op(pb2, "AsyncIf", ["cond", "B"], ["C"])
    async_if.arg.add(name="then_net").n.CopyFrom(branch)
    async_if.arg.add(name="else_net").n.CopyFrom(branch)
    ops = [_relu(pb2, "X", "Z"), _relu(pb2, "Z", "A"), rnn, _relu(pb2, "R", "B"), async_if, _relu(pb2, "C", "Y")]
    net = _net(pb2, "sub", ops, ["X", "cond"], ["Y"])
    out = C.memonger_compute_blob_recycling_for_dag(net.SerializeToString(), [b"X"], list(range(len(ops))),
                                                    {b"Z", b"A", b"R", b"B", b"C"}, b"", set(), {})
    return _text(pb2, out)


def _zoo_net(C, pb2, path):
    net = pb2.NetDef()
    with open(path) as f:
        text_format.Merge(f.read(), net)
    data = net.SerializeToString()
    r = {}
    for p in ("AddNNPACK", "FuseNNPACKConvRelu", "DeadCodeElim"):
        r[p] = _try(lambda p=p: _digest(pb2, C.run_transform(p, data)))
    fused = _try(lambda: C.run_transform("FuseNNPACKConvRelu", C.run_transform("AddNNPACK", data)))
    r["AddNNPACK+Fuse"] = fused if fused == "RuntimeError" else [_digest(pb2, fused), len(pb2.NetDef.FromString(fused).op)]
    r["roundtrip"] = _try(lambda: _digest(pb2, C.transform_optimizeForMKLDNN(data, False)))
    for k in ("ConvToNNPack", "CommonSubexpressionElimination"):
        r[k] = _try(lambda k=k: _digest(pb2, C.apply_transform(k, data)))
    if not any(op.type.startswith("Int8") or op.type in ("If", "While", "RecurrentNetwork") for op in net.op):
        r["memonger"] = _try(lambda: _memonger(C, pb2, net))
    return r


def run(C, pb2, ws, core, zoo):
    """Every scenario's result (JSON-able); zoo nets only when `zoo` is a folder."""
    out = {"grad_memonger": _grad_memonger(C, pb2, core), "subnet_memonger": _subnet_memonger(C, pb2), "bindings": _bindings(C, pb2, ws), "exists": {n: [bool(C.transform_exists(n)), bool(C.workspace_transform_exists(n))] for n in NAMES},
           "passes": _passes(C, pb2), "apply_transform": _apply_transforms(C, pb2), "conv_bn": {c[0]: _conv_bn(C, pb2, ws, c) for c in CONV_BN_CASES},
           "zoo": {}}
    for path in sorted(glob.glob(os.path.join(zoo, "*", "*.pbtxt"))):
        if os.path.basename(path) in ("predict_net.pbtxt", "model.pbtxt"):
            out["zoo"][os.path.basename(os.path.dirname(path))] = _zoo_net(C, pb2, path)
    return out
