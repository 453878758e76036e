"""Nomnigraph scenarios run through Caffe2's C bindings (gen_nomnigraph.py, the oracle) and through
netviz's engine.caffe2.capi (tests/engine/test_nomnigraph.py): same calls, results compared as JSON.

Python 3.9 compatible; imports neither caffe2 nor netviz: `run(C, caffe2_pb2, zoo)` is given the
binding module and the proto module of its side.  Zoo nets are read from the zoo folder, never
copied; results hold counts, names, orders and sha256 digests of serialized NetDefs.
"""
import glob
import hashlib
import os
import random

from google.protobuf import text_format

#: Patterns matched on every zoo net: op names, "T" (any tensor), "*" (any node); the last is
#: non-strict (matching stops there), every other node strict.
PATTERNS = [("Conv", "T", "BatchNormalization"), ("BatchNormalization", "T", "Relu"),
            ("Conv", "T", "Relu"), ("Conv", "T", "BatchNormalization", "T", "Relu"),
            ("Relu",), ("T", "*"), ("Conv", "*")]


def _digest(data):
    return hashlib.sha256(data).hexdigest()


def _proto_digest(pb2, data):
    """Digest of a serialized NetDef, re-serialized by Python protobuf (same bytes on both sides)."""
    return _digest(pb2.NetDef.FromString(data).SerializeToString())


def _text(pb2, data):
    return text_format.MessageToString(pb2.NetDef.FromString(data), as_one_line=True)


def _pattern(C, names):
    mg, prev = C.NNMatchGraph(), None
    for i, n in enumerate(names):
        strict = i < len(names) - 1
        if n == "T":
            cur = mg.createNode(C.NeuralNetData("t"), strict=strict)
        elif n == "*":
            cur = mg.createNode(strict=strict)
        else:
            cur = mg.createNode(C.NeuralNetOperator(n), strict=strict)
        if prev is not None:
            mg.createEdge(prev, cur)
        prev = cur
    return mg


def _matches(C, nn, mg):
    out = []
    for n in nn.dataFlow().getMutableNodes():
        m = C.matchSubgraph(n, mg)
        if len(m):
            out.append(m)
    return out


def _zoo_net(C, pb2, path):
    """Round trips (without an old NetDef only the ops: Caffe2 orders the external names of a
    NetDef made from scratch by pointer hash), matches, a Conv+BN fusion by replaceSubgraph, and ops appended after it."""
    net = pb2.NetDef()
    with open(path) as f:
        text_format.Merge(f.read(), net)
    nn, ops = C.NNModuleFromProtobuf(net.SerializeToString())
    df = nn.dataFlow()
    plain = pb2.NetDef.FromString(nn.convertToCaffe2Proto(pb2.NetDef()))
    r = {"ops": len(ops), "nodes": [len(df.nodes), len(df.operators), len(df.tensors)],
         "roundtrip": _proto_digest(pb2, nn.convertToCaffe2Proto(net)),
         "no_old_ops": _digest(b"".join(o.SerializeToString() for o in plain.op)),
         "matches": {}}
    for pat in PATTERNS:
        found = sorted(sorted(x.name for x in m.nodes) for m in _matches(C, nn, _pattern(C, pat)))
        r["matches"]["->".join(pat)] = [len(found), _digest(repr(found).encode()), found[:2]]
    fused = _matches(C, nn, _pattern(C, ("Conv", "T", "BatchNormalization")))
    for m in fused:
        conv = [x for x in m.nodes if x.isOperator() and x.name == "Conv"][0]
        bn = [x for x in m.nodes if x.isOperator() and x.name != "Conv"][0]
        nn.replaceSubgraph(m, df.createNode(C.NeuralNetOperator("ConvBN")),
                           conv.inputs + bn.inputs[1:], bn.outputs)
    order = [o.name for o in nn.getExecutionOrder()]
    r["fused"] = [len(fused), _proto_digest(pb2, nn.convertToCaffe2Proto(net)), order[:8]]
    written = [t for t in df.tensors if t.hasProducer()]
    for t in random.Random(0).sample(written, min(5, len(written))):
        probe = df.createNode(C.NeuralNetOperator("Probe"))
        df.createEdge(t, probe)
        df.createEdge(probe, nn.createUniqueDataNode(t.name + "_probe"))
    r["probed"] = [_proto_digest(pb2, nn.convertToCaffe2Proto(net)), [o.name for o in nn.getExecutionOrder()][-8:]]
    return r


def _small(C, pb2):
    """Hand-made graphs: distributed device maps, annotations, OperatorDef nodes, ordering."""
    r = {}
    net = pb2.NetDef()
    net.name = "d"
    for t, ins, outs in [("FC", ["X", "W", "b"], ["Y"]), ("Relu", ["Y"], ["Z"])]:
        op = net.op.add()
        op.type = t
        op.input.extend(ins)
        op.output.extend(outs)
    net.external_input.append("X")  # NOTE: one each: Caffe2 orders Declare/Export ops by pointer hash.
    net.external_output.append("Z")
    d = pb2.DeviceOption()
    d.device_type, d.device_id = 1, 3
    nn = C.NNModuleFromProtobufDistributed(net.SerializeToString(),
                                           {"X": d.SerializeToString(), "Z": d.SerializeToString()})
    r["distributed"] = _text(pb2, nn.convertToCaffe2Proto(net))
    try:
        C.NNModuleFromProtobufDistributed(net.SerializeToString(), {"Q": d.SerializeToString()})
        r["distributed_unused"] = "no error"
    except RuntimeError:
        r["distributed_unused"] = "RuntimeError"

    nn = C.NNModule()
    df = nn.dataFlow()
    n = df.createNode(C.NeuralNetOperator("TestOp"))
    a = n.annotation
    a.setDeviceType(2)
    a.setDevice("dev")
    dd = pb2.DeviceOption()
    dd.node_name = "nn"
    a.device_option = dd
    df.createEdge(n, df.createNode(C.NeuralNetData("x")))
    r["annotation"] = [_text(pb2, nn.convertToCaffe2Proto(pb2.NetDef())), n.annotation.getDevice(),
                       n.annotation.getDeviceType(), n.annotation.hasDeviceOption()]

    opd = pb2.OperatorDef()
    opd.type, opd.engine = "MaxPool", "X"
    opd.input.append("zz")
    a1, a2 = opd.arg.add(), opd.arg.add()
    a1.name, a1.s, a2.name, a2.i = "order", b"nhwc", "kernel", 2
    nn = C.NNModule()
    df = nn.dataFlow()
    p, i, o = df.createNode(opd), df.createNode(C.NeuralNetData("i")), df.createNode(C.NeuralNetData("o"))
    df.createEdge(i, p)
    df.createEdge(p, o)
    q = df.createNode(C.NeuralNetOperator("Sum"))
    df.createEdge(o, q)
    df.createEdge(i, q)
    df.createEdge(q, df.createNode(C.NeuralNetData("r")))
    r["opdef_node"] = _text(pb2, nn.convertToCaffe2Proto(pb2.NetDef()))

    nn = C.NNModule()
    df = nn.dataFlow()
    ops = [df.createNode(C.NeuralNetOperator("op%d" % k)) for k in range(6)]
    ts = [df.createNode(C.NeuralNetData("t%d" % k)) for k in range(7)]
    for k in reversed(range(6)):
        df.createEdge(ts[k], ops[5 - k])
        df.createEdge(ops[5 - k], ts[k + 1])
    r["reverse_chain_order"] = [x.name for x in nn.getExecutionOrder()]

    net = pb2.NetDef()
    for t, ins, outs in [("A", ["x"], ["y"]), ("B", ["y"], ["u"]), ("C", ["y", "y"], ["v"]), ("D", ["u", "v"], ["w"])]:
        op = net.op.add()
        op.type = t
        op.input.extend(ins)
        op.output.extend(outs)
    nn, ops = C.NNModuleFromProtobuf(net.SerializeToString())
    r["diamond"] = [[[s.name for s in o.getOperatorSuccessors()] for o in ops],
                    [[s.name for s in o.getOperatorPredecessors()] for o in ops],
                    [nn.createUniqueDataNode("y").name for _ in range(3)], nn.createUniqueDataNode("A").name]
    return r


def run(C, pb2, zoo):
    """Every scenario's result (JSON-able); zoo nets only when `zoo` is a folder."""
    out = {"small": _small(C, pb2), "zoo": {}}
    for path in sorted(glob.glob(os.path.join(zoo, "*", "*.pbtxt"))):
        if os.path.basename(path) in ("predict_net.pbtxt", "model.pbtxt"):
            out["zoo"][os.path.basename(os.path.dirname(path))] = _zoo_net(C, pb2, path)
    return out
