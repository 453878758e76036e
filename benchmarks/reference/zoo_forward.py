"""PyTorch eager forward time of a model-zoo net, run by ``benchmarks/bench_zoo.py`` under ``.venv-caffe2``::

    .venv-caffe2/bin/python benchmarks/reference/zoo_forward.py NET.pb PARAMS.npz --batch 8 --threads 2

NET.pb is the predict net netviz timed, PARAMS.npz its very parameters and input (``data``): both
tools run the same graph on the same arrays.  The Caffe2 ops are interpreted with
``torch.nn.functional`` (the op set of DenseNet-121, Inception v2 and VGG-19: Conv, SpatialBN,
Mul/Add with a per-channel operand, Relu (in place where the op is), Max/AveragePool (per-side
pads), Concat, FC, Dropout, Softmax).  Prints ONE JSON line ``{"pytorch": seconds}``: the best of
``--repeat`` runs after a warm-up.
"""
import argparse
import json
import sys
import time

import numpy as np


def arguments(op):
    return {a.name: (a.i if a.HasField("i") else a.f if a.HasField("f") else a.s.decode() if a.HasField("s")
                     else list(a.ints)) for a in op.arg}


def pads(a):
    """(left, right, top, bottom) as F.pad takes them, from Caffe2's pad / pad_t,l,b,r."""
    p = a.get("pad", 0)
    return a.get("pad_l", p), a.get("pad_r", p), a.get("pad_t", p), a.get("pad_b", p)


def layer(t, a, ins, inplace):
    """One Caffe2 op's output(s) in torch."""
    import torch
    import torch.nn.functional as F
    x = ins[0]
    if t in ("Conv", "MaxPool") and len(set(pads(a))) > 1:
        x, a = F.pad(x, pads(a), value=0.0 if t == "Conv" else float("-inf")), dict(a, pad=0, pad_t=0, pad_l=0,
                                                                                      pad_b=0, pad_r=0)
    if t == "Conv":
        return F.conv2d(x, ins[1], ins[2] if len(ins) > 2 else None, a.get("stride", 1), pads(a)[0],
                        a.get("dilation", 1), a.get("group", 1))
    if t == "SpatialBN":
        return F.batch_norm(x, ins[3], ins[4], ins[1], ins[2], False, 0.0, a.get("epsilon", 1e-5))
    if t in ("Mul", "Add"):
        other = ins[1].view(1, -1, *([1] * (x.dim() - 2))) if ins[1].dim() == 1 else ins[1]
        return x * other if t == "Mul" else x + other
    if t == "Relu":
        return F.relu(x, inplace=inplace)
    if t == "MaxPool":
        return F.max_pool2d(x, a["kernel"], a.get("stride", 1), pads(a)[0])
    if t == "AveragePool":
        if a.get("global_pooling"):
            return F.adaptive_avg_pool2d(x, 1)
        return F.avg_pool2d(x, a["kernel"], a.get("stride", 1), pads(a)[0], count_include_pad=False)
    if t == "Concat":
        return torch.cat(ins, a.get("axis", 1))
    if t == "FC":
        return F.linear(x.flatten(1), ins[1], ins[2])
    if t == "Softmax":
        return F.softmax(x, 1)
    if t == "Dropout":
        return x
    raise NotImplementedError(t)


def forward(ops, blobs):
    v = dict(blobs)
    for t, a, ins, out, inplace in ops:
        v[out] = layer(t, a, [v[i] for i in ins], inplace)
    return v


def main():
    p = argparse.ArgumentParser()
    p.add_argument("net")
    p.add_argument("params")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3)
    ns = p.parse_args()
    import torch
    from caffe2.proto import caffe2_pb2
    torch.set_num_threads(ns.threads)
    net = caffe2_pb2.NetDef()
    with open(ns.net, "rb") as fh:
        net.ParseFromString(fh.read())
    ops = [(op.type, arguments(op), list(op.input), op.output[0], op.input[0] == op.output[0]) for op in net.op]
    blobs = {k: torch.from_numpy(v) for k, v in np.load(ns.params).items()}
    with torch.no_grad():
        forward(ops, blobs)
        best = float("inf")
        for _ in range(ns.repeat):
            s = time.perf_counter()
            forward(ops, blobs)
            best = min(best, time.perf_counter() - s)
    print(json.dumps({"pytorch": best, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    sys.exit(main())
