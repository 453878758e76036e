"""ResNet-50 reference timings under real Caffe2 1.10.2 (C++ executor) and PyTorch eager CPU.

Run by ``benchmarks/bench_resnet.py`` with the oracle venv's Python (3.9)::

    .venv-caffe2/bin/python benchmarks/reference/resnet50.py --threads 2 --batches 1 8 --repeat 3

It prints ONE JSON line: ``{"caffe2": {"fwd_b1": s, "fwd_b8": s, "fwdbwd_b8": s},
"pytorch": {...}, "threads": n}``, each the best of ``--repeat`` runs.  PyTorch runs the very
same nets: the Caffe2 ops are interpreted with ``torch.nn.functional`` on the weights that
Caffe2's init net filled (torchvision is not needed).  Forward+backward uses the training net
(``is_test=0`` SpatialBN, SoftmaxWithLoss) and each tool's own backward pass.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "golden", "models")


def load(name):
    from caffe2.proto import caffe2_pb2
    nets = []
    for f in ("init_net.pb", "predict_net.pb"):
        n = caffe2_pb2.NetDef()
        with open(os.path.join(GOLDEN, name, f), "rb") as fh:
            n.ParseFromString(fh.read())
        nets.append(n)
    return nets


def best(fn, repeat):
    """Best of `repeat` runs after a warm-up (allocations, MKL-DNN caches); a run over 10 s is
    timed once (Caffe2's CPU ConvGradient: ~30 s per ResNet-50 step on 2 cores)."""
    s = time.perf_counter()
    fn()
    t = time.perf_counter() - s
    if t > 10:
        return t
    t = float("inf")
    for _ in range(repeat):
        s = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - s)
    return t


def inputs(batch, rng):
    return rng.standard_normal((batch, 3, 224, 224)).astype(np.float32), np.zeros(batch, np.int32)


def caffe2_times(batches, repeat):
    from caffe2.python import core, workspace
    out, rng = {}, np.random.default_rng(0)
    init, predict = load("resnet50")
    for b in batches:
        workspace.ResetWorkspace()
        workspace.RunNetOnce(init)
        workspace.FeedBlob("data", inputs(b, rng)[0])
        workspace.CreateNet(predict)
        out[f"fwd_b{b}"] = best(lambda: workspace.RunNet(predict.name), repeat)
    init, train = load("resnet50_train")
    net = core.Net(train)
    net.AddGradientOperators(["loss"])
    b = max(batches)
    workspace.ResetWorkspace()
    workspace.RunNetOnce(init)
    x, label = inputs(b, rng)
    workspace.FeedBlob("data", x)
    workspace.FeedBlob("label", label)
    workspace.CreateNet(net.Proto())
    out[f"fwdbwd_b{b}"] = best(lambda: workspace.RunNet(net.Proto().name), repeat)
    return out


def args_of(op):
    return {a.name: (a.i if a.HasField("i") else a.f if a.HasField("f") else a.s.decode() if a.HasField("s")
                     else list(a.ints)) for a in op.arg}


def torch_forward(ops, blobs, training):
    """Interpret the Caffe2 ops with torch.nn.functional; returns the final blob dict."""
    import torch
    import torch.nn.functional as F
    v = dict(blobs)
    for op in ops:
        a, ins = args_of(op), [v.get(i) for i in op.input]
        t = op.type
        if t == "Conv":
            y = F.conv2d(ins[0], ins[1], ins[2] if len(ins) > 2 else None, a.get("stride", 1), a.get("pad", 0))
        elif t == "SpatialBN":
            y = F.batch_norm(ins[0], ins[3], ins[4], ins[1], ins[2], training, 1 - a.get("momentum", 0.9),
                             a.get("epsilon", 1e-5))
        elif t == "Relu":
            y = F.relu(ins[0])
        elif t == "Sum":
            y = ins[0] + ins[1]
        elif t == "MaxPool":
            y = F.max_pool2d(ins[0], a["kernel"], a.get("stride", 1), a.get("pad", 0))
        elif t == "AveragePool":
            y = F.adaptive_avg_pool2d(ins[0], 1) if a.get("global_pooling") else \
                F.avg_pool2d(ins[0], a["kernel"], a.get("stride", 1), a.get("pad", 0))
        elif t == "FC":
            y = F.linear(ins[0].flatten(1), ins[1], ins[2])
        elif t == "Softmax":
            y = F.softmax(ins[0], 1)
        elif t == "SoftmaxWithLoss":
            v[op.output[1]] = F.cross_entropy(ins[0], ins[1].long())
            continue
        else:
            raise NotImplementedError(t)
        v[op.output[0]] = y
    return v


def torch_times(batches, repeat):
    import torch
    from caffe2.python import workspace
    out, rng = {}, np.random.default_rng(0)

    def params(name):
        init, predict = load(name)
        workspace.ResetWorkspace()
        workspace.RunNetOnce(init)
        return predict, {k: torch.from_numpy(np.array(workspace.FetchBlob(k))) for k in workspace.Blobs()}
    predict, blobs = params("resnet50")
    with torch.no_grad():
        for b in batches:
            blobs["data"] = torch.from_numpy(inputs(b, rng)[0])
            out[f"fwd_b{b}"] = best(lambda: torch_forward(predict.op, blobs, False), repeat)
    train, blobs = params("resnet50_train")
    b = max(batches)
    x, label = inputs(b, rng)
    blobs["data"], blobs["label"] = torch.from_numpy(x), torch.from_numpy(label)
    learn = [k for k in blobs if k.endswith(("_w", "_b", "_s"))]
    for k in learn:
        blobs[k].requires_grad_(True)

    def step():
        for k in learn:
            blobs[k].grad = None
        blobs["data"].grad = None
        torch_forward(train.op, blobs, True)["loss"].backward()
    # NOTE: the Caffe2 net's backward pass makes data_grad (conv1's input gradient), so netviz and Caffe2
    # compute it; autograd computes it only when data requires a gradient: asked here, the same work.  The
    # figure without it (autograd's default, what this script timed until session 11) is kept beside.
    blobs["data"].requires_grad_(True)
    out[f"fwdbwd_b{b}"] = best(step, repeat)
    blobs["data"].requires_grad_(False)
    out[f"fwdbwd_b{b}_no_input_grad"] = best(step, repeat)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--only", choices=("caffe2", "pytorch"), default=None)
    ns = p.parse_args()
    import torch
    torch.set_num_threads(ns.threads)
    res = {"threads": torch.get_num_threads()}
    for tool, fn in (("caffe2", caffe2_times), ("pytorch", torch_times)):
        if ns.only in (None, tool):
            try:
                res[tool] = fn(ns.batches, ns.repeat)
            except Exception as e:  # one broken reference must not hide the other
                res[tool + "_error"] = "%s: %s" % (type(e).__name__, e)
    print(json.dumps(res))


if __name__ == "__main__":
    sys.exit(main())
