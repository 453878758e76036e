"""Shared helpers for the Caffe2 oracle scripts (tests/oracle/gen_*.py).

Runs under .venv-caffe2 (Python 3.9, torch==1.10.2 -> caffe2.python).
Never imports netviz / engine.  Everything written here must be
deterministic: JSON with sorted keys, text-format protobufs, and .npz files
written with fixed zip timestamps (see save_npz).
"""
import io
import json
import os
import re
import sys
import zipfile
import zlib

import numpy as np
from google.protobuf import text_format

from caffe2.proto import caffe2_pb2
from caffe2.python import core, workspace

OUT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                      os.path.join(os.path.dirname(__file__), "..", "golden"))
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ZOO = os.environ.get("NETVIZ_MODEL_ZOO") or os.path.join(
    ROOT, "..", "shared", "models", "caffe2-model-zoo")

FORMAT_VERSION = 1

workspace.GlobalInit(["caffe2", "--caffe2_log_level=3"])


# ----------------------------------------------------------------------------
# text helpers
# ----------------------------------------------------------------------------
def pbtxt(msg):
    """Protobuf text format (protobuf 3.20 python implementation)."""
    return text_format.MessageToString(msg)


def netdef(ops, name="net", external_input=(), external_output=()):
    n = caffe2_pb2.NetDef()
    n.name = name
    for op in ops:
        n.op.add().CopyFrom(op)
    n.external_input.extend([str(b) for b in external_input])
    n.external_output.extend([str(b) for b in external_output])
    return n


_FRAME = re.compile(r"^(frame #\d+:.*|<omitting python frames>)$")
_ADDR = re.compile(r"0x[0-9a-f]{6,}")


def sanitize(text):
    """Remove C++ backtraces and addresses from a Caffe2 error message.

    Caffe2's enforce failures append 'frame #k: ...' lines whose addresses
    change from run to run; they are dropped.  Absolute paths of the venv are
    shortened to '<site-packages>'.
    """
    lines = [l for l in str(text).split("\n") if not _FRAME.match(l.strip())]
    text = "\n".join(lines)
    text = _ADDR.sub("0x?", text)
    text = re.sub(r"/[^ \"']*/site-packages", "<site-packages>", text)
    return text


def err_info(e):
    return {"error_type": type(e).__name__, "error": sanitize(e)}


def seed_for(name):
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


# ----------------------------------------------------------------------------
# gradient maps
# ----------------------------------------------------------------------------
def grad_to_json(g):
    if g is None:
        return None
    if isinstance(g, core.GradientSlice):
        return {"indices": str(g.indices), "values": str(g.values)}
    return str(g)


def grad_map_to_json(m):
    return {str(k): grad_to_json(v) for k, v in m.items()}


def ys_to_json(ys):
    if isinstance(ys, str):
        return ys
    if isinstance(ys, dict):
        return {str(k): grad_to_json(v) for k, v in ys.items()}
    return [str(y) for y in ys]


def unordered_ranges(grad_ops):
    """Index ranges [start, end) of >=2 consecutive auto-generated Sum/Concat
    accumulation ops.  Caffe2 emits the accumulations for the distinct inputs
    of one forward op in Python *set* order, so a consumer should compare the
    ops inside such a range as a multiset."""
    def is_auto(op):
        return "is_auto_gen_sum_ops:1" in list(op.device_option.extra_info)
    ranges, i = [], 0
    ops = list(grad_ops)
    while i < len(ops):
        if is_auto(ops[i]):
            j = i
            while j < len(ops) and is_auto(ops[j]):
                j += 1
            # a sparse accumulation is 2 Concat ops for ONE input: only flag
            # ranges that span more than one accumulated blob
            outs = set()
            for op in ops[i:j]:
                base = op.output[0]
                for suf in ("_indices_concat", "_values_concat"):
                    if base.endswith(suf):
                        base = base[: -len(suf)]
                outs.add(base)
            if len(outs) >= 2:
                ranges.append([i, j])
            i = j
        else:
            i += 1
    return ranges


def backward_desc(ops, ys, name="grad"):
    """Run core.GradientRegistry.GetBackwardPass; returns (desc, ops, map).

    desc is the JSON 'backward' object; ops/map are None on error."""
    try:
        grad_ops, gmap = core.GradientRegistry.GetBackwardPass(list(ops), ys)
    except BaseException as e:  # noqa: B902 - Caffe2 raises plain strings too
        return err_info(e), None, None
    res = {
        "grad_net": pbtxt(netdef(grad_ops, name=name)),
        "grad_map": grad_map_to_json(gmap),
    }
    ur = unordered_ranges(grad_ops)
    if ur:
        res["unordered_op_ranges"] = ur
    return res, grad_ops, gmap


# ----------------------------------------------------------------------------
# writing
# ----------------------------------------------------------------------------
def save_npz(path, arrays):
    """np.savez-compatible archive with sorted keys and fixed zip timestamps
    (np.savez stamps the current time into the zip, which would break
    byte-for-byte determinism).  Arrays only; never pickled objects."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for key in sorted(arrays):
            arr = np.asarray(arrays[key])
            if arr.ndim:  # NOTE: ascontiguousarray turns a 0-d array into shape (1,); a 0-d one is contiguous
                arr = np.ascontiguousarray(arr)
            if arr.dtype == object:
                raise TypeError("object array for %s" % key)
            b = io.BytesIO()
            np.lib.format.write_array(b, arr, allow_pickle=False)
            info = zipfile.ZipInfo(key + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, b.getvalue())
    with open(path, "wb") as f:
        f.write(buf.getvalue())


def write_json(path, data, compact=False):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        if compact:
            json.dump(data, f, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
        else:
            json.dump(data, f, indent=1, sort_keys=True, ensure_ascii=True)
        f.write("\n")


def write_case(case, kind, data, arrays=None, compact=False):
    """Write OUT/<case>.json (+ OUT/<case>.npz when arrays is non-empty)."""
    data = dict(data)
    # hoist accumulation-op ranges into the generic compare_as_sets list
    cs = list(data.get("compare_as_sets", []))
    for key in ("backward", "fallback"):
        obj = data.get(key)
        prefix = key
        if key == "fallback" and isinstance(obj, dict):
            obj = obj.get("backward")
            prefix = "fallback.backward"
        if isinstance(obj, dict) and "unordered_op_ranges" in obj:
            for a, b in obj.pop("unordered_op_ranges"):
                cs.append("%s.grad_net.op[%d:%d]" % (prefix, a, b))
    if cs:
        data["compare_as_sets"] = cs
    data["case"] = case
    data["kind"] = kind
    data["format_version"] = FORMAT_VERSION
    path = os.path.join(OUT, case + ".json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if arrays:
        data["npz"] = os.path.basename(case) + ".npz"
        save_npz(os.path.join(OUT, case + ".npz"), arrays)
    write_json(path, data, compact=compact)


# ----------------------------------------------------------------------------
# running
# ----------------------------------------------------------------------------
def fetch_all(names):
    out = {}
    for n in names:
        n = str(n)
        if workspace.HasBlob(n):
            try:
                v = workspace.FetchBlob(n)
            except Exception:
                continue
            if isinstance(v, np.ndarray) and v.dtype != object:
                out[n] = v
            elif isinstance(v, (np.generic, int, float, bool)):
                out[n] = np.asarray(v)
    return out


def grad_blob_names(gmap):
    names = []
    for v in gmap.values():
        if v is None:
            continue
        if isinstance(v, core.GradientSlice):
            names += [str(v.indices), str(v.values)]
        else:
            names.append(str(v))
    return sorted(set(names))


def forward_backward(name, ops, inputs, external_output, ys, rng, run=True,
                     net_name=None):
    """Common runner for 'op_gradient' / 'net_backward' cases.

    inputs: list of (blob, ndarray or None); ys: list or dict as accepted by
    GetBackwardPass.  Returns (data, arrays) for write_case.
    """
    workspace.ResetWorkspace()
    net_name = net_name or name.split("/")[-1]
    in_names = [n for n, _ in inputs]
    out_names = []
    for op in ops:
        for o in op.output:
            if o not in out_names:
                out_names.append(o)
    fwd = netdef(ops, name=net_name, external_input=in_names,
                 external_output=external_output)
    arrays = {}
    data = {"forward_net": pbtxt(fwd)}
    fwd_vals = {}
    ran = False
    if run:
        for n, v in inputs:
            if v is not None:
                arrays["input/" + n] = v
                workspace.FeedBlob(n, v)
        try:
            workspace.RunNetOnce(fwd)
            ran = True
            fwd_vals = fetch_all(out_names)
            for k, v in fwd_vals.items():
                arrays["forward/" + k] = v
        except BaseException as e:
            data["forward_error"] = err_info(e)
    else:
        data["forward_error"] = None
    data["forward_ran"] = ran
    data["ys"] = ys_to_json(ys)
    desc, grad_ops, gmap = backward_desc(ops, ys, name=net_name + "_grad")
    data["backward"] = desc
    data["grad_ran"] = False
    if ran and grad_ops is not None:
        ok = True
        if isinstance(ys, dict):
            for y, g in ys.items():
                if g is None:
                    continue
                if not isinstance(g, str) or str(y) not in fwd_vals:
                    ok = False
                    break
                fv = fwd_vals[str(y)]
                dt = fv.dtype if fv.dtype in (np.float32, np.float64) else np.float32
                gv = np.asarray(rng.randn(*fv.shape)).astype(dt)
                arrays["output_grad/" + g] = gv
                workspace.FeedBlob(g, gv)
        if ok:
            try:
                workspace.RunNetOnce(netdef(grad_ops, name=net_name + "_grad"))
                data["grad_ran"] = True
                for k, v in fetch_all(grad_blob_names(gmap)).items():
                    arrays["grad/" + k] = v
            except BaseException as e:
                data["grad_error"] = err_info(e)
    return data, arrays
