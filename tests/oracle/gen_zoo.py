"""Model-zoo goldens (kind "zoo_net"): core.get_ssa and the backward pass of
the final external output for every net under $NETVIZ_MODEL_ZOO.

The zoo nets themselves are NOT copied: each case names its net by a path
relative to the zoo folder ("zoo_path")."""
import os

from google.protobuf import text_format

from _common import (ZOO, caffe2_pb2, core, err_info, netdef, pbtxt,
                     unordered_ranges, grad_map_to_json, write_case)

MAX_RETRIES = 25


class _Spy(object):
    last = None


_orig = core.GradientRegistry.GetGradientForOp.__func__


def _spy(cls, op, g_output):
    _Spy.last = op
    return _orig(cls, op, g_output)


core.GradientRegistry.GetGradientForOp = classmethod(_spy)


def op_index(ops, op):
    for i in range(len(ops) - 1, -1, -1):
        if ops[i] is op:
            return i
    s = op.SerializeToString()
    for i in range(len(ops) - 1, -1, -1):
        if ops[i].SerializeToString() == s:
            return i
    return None


def try_backward(ops, ys, name):
    _Spy.last = None
    try:
        grad_ops, gmap = core.GradientRegistry.GetBackwardPass(ops, ys)
    except BaseException as e:
        d = err_info(e)
        idx = op_index(ops, _Spy.last) if _Spy.last is not None else None
        d["failed_op_index"] = idx
        d["failed_op_type"] = ops[idx].type if idx is not None else None
        return d, None
    d = {"grad_net": pbtxt(netdef(grad_ops, name=name)), "grad_map": grad_map_to_json(gmap),
         "num_grad_ops": len(grad_ops)}
    ur = unordered_ranges(grad_ops)
    if ur:
        d["unordered_op_ranges"] = ur
    return d, grad_ops


def ssa_json(net):
    ssa, versions = core.get_ssa(net)
    return ([[[[str(n), v] for n, v in ins], [[str(n), v] for n, v in outs]] for ins, outs in ssa],
            {str(k): v for k, v in versions.items()})


def main():
    found = []
    for d in sorted(os.listdir(ZOO)):
        for fn in ("predict_net.pbtxt", "model.pbtxt"):
            p = os.path.join(ZOO, d, fn)
            if os.path.isfile(p):
                found.append((d, d + "/" + fn))
    for d, rel in found:
        net = caffe2_pb2.NetDef()
        with open(os.path.join(ZOO, rel)) as f:
            text_format.Merge(f.read(), net)
        data = {"zoo_path": rel, "net_name": net.name, "num_ops": len(net.op)}
        try:
            ssa, versions = ssa_json(net)
            data["ssa"] = ssa
            data["ssa_blob_versions"] = versions
        except BaseException as e:
            data["ssa_error"] = err_info(e)
        ops = list(net.op)
        if net.external_output:
            y = net.external_output[-1]
        else:
            y = ops[-1].output[0]
        data["y"] = y
        bw, _ = try_backward(ops, [y], name=net.name + "_grad")
        data["backward"] = bw
        if "error" in bw and bw.get("failed_op_index") is not None:
            # retry from the latest output (of an op before the failing one)
            # whose backward pass Caffe2 can generate
            tries = []
            j = bw["failed_op_index"] - 1
            while j >= 0 and len(tries) < MAX_RETRIES:
                cand = ops[j].output[0] if ops[j].output else None
                if cand is not None:
                    r, _ = try_backward(ops, [cand], name=net.name + "_grad")
                    if "error" not in r:
                        data["fallback"] = {"y": cand, "producer_op_index": j, "backward": r}
                        break
                    tries.append(cand)
                j -= 1
            data["fallback_tried"] = tries
        write_case("zoo/" + d, "zoo_net", data, compact=True)


if __name__ == "__main__":
    main()
