"""Record one-op kernel cases from real Caffe2 (runs under .venv-caffe2, never imports engine).

A family script ``tests/oracle/gen_kernels_<family>.py`` lists cases and calls :func:`record`::

    from kernel_oracle import Case, record, rng_for
    def cases():
        r = rng_for("Cos")
        yield Case("Cos", "Cos", {"X": r.randn(3, 4).astype("f4")}, ["Y"], grad=True)
    record("dense_math", cases())

Each case runs in a fresh Caffe2 workspace: inputs are fed, the op runs, outputs are fetched.
With ``grad=True`` the gradient ops Caffe2's maker emits for the op are recorded too, fed
seeded random output gradients and run, and every input gradient is fetched.  A case where
Caffe2 raises is recorded as an error (netviz must raise too).  ``values=False`` records only
shapes and dtypes (random ops).  Output: ``OUT/kernels_<family>/<case>.json`` (+ ``.npz``),
read by ``tests/differential/test_kernels_oracle.py``.
"""
from __future__ import annotations

import os
import zlib
from dataclasses import dataclass, field

import numpy as np

from _common import OUT, caffe2_pb2, core, err_info, pbtxt, save_npz, workspace, write_json

__all__ = ["Case", "record", "rng_for", "seed_random_ops"]


def rng_for(name: str) -> np.random.RandomState:
    """A RandomState seeded by the case name (deterministic across runs and machines)."""
    return np.random.RandomState(zlib.crc32(name.encode()) & 0x7FFFFFFF)


def seed_random_ops(random_ops, seed: int = 1234) -> None:
    """Give every op of `random_ops` that a case creates a fixed ``random_seed``, so its golden is
    reproducible (Caffe2 otherwise draws a fresh seed per op; the seed lands in the op's device option)."""
    create = core.CreateOperator

    def make(op_type, *a, **kw):
        op = create(op_type, *a, **kw)
        if op_type in random_ops:
            op.device_option.random_seed = seed
        return op
    core.CreateOperator = make


@dataclass
class Case:
    name: str                      # unique within the family; used as file name
    op_type: str
    inputs: dict                   # blob name -> np.ndarray (order = op input order)
    outputs: list                  # output blob names (may repeat an input name: in-place)
    args: dict = field(default_factory=dict)
    grad: bool = False             # also record Caffe2's gradient ops and their values
    values: bool = True            # False: compare shapes/dtypes only (random ops)
    rtol: float = 1e-4
    atol: float = 1e-5
    engine: str = ""
    extra_ops: list = field(default_factory=list)  # (type, inputs, outputs, args) run before the op
    note: str = ""


def _is_grad_blob(x):
    return isinstance(x, (core.BlobReference, str))


def record(family: str, cases) -> int:
    """Run every case on real Caffe2 and write its golden; returns the number written."""
    outdir = os.path.join(OUT, "kernels_" + family)
    os.makedirs(outdir, exist_ok=True)
    n = 0
    seen = set()
    for c in cases:
        assert c.name not in seen, "duplicate case name " + c.name
        seen.add(c.name)
        _record_one(outdir, c)
        n += 1
    return n


def _record_one(outdir: str, c: Case) -> None:
    workspace.ResetWorkspace()
    arrays = {}
    # NOTE: a proto argument (a subnet such as ONNXWhile's body) is recorded as its text; the op is in "op".
    args = {k: (pbtxt(v) if hasattr(v, "SerializeToString") else v) for k, v in c.args.items()}
    data = {"case": c.name, "kind": "kernel", "op_type": c.op_type, "args": args,
            "inputs": list(c.inputs), "outputs": list(c.outputs), "values": c.values,
            "rtol": c.rtol, "atol": c.atol, "note": c.note, "format_version": 1}
    for i, (name, arr) in enumerate(c.inputs.items()):
        arr = np.asarray(arr)
        arrays["in%d" % i] = arr
        workspace.FeedBlob(name, arr)
    extra = []
    for (t, ins, outs, args) in c.extra_ops:
        op = core.CreateOperator(t, ins, outs, **args)
        extra.append(pbtxt(op))
        workspace.RunOperatorOnce(op)
    data["extra_ops"] = extra
    op = core.CreateOperator(c.op_type, list(c.inputs), list(c.outputs), engine=c.engine or None, **c.args)
    data["op"] = pbtxt(op)
    try:
        workspace.RunOperatorOnce(op)
    except Exception as e:  # noqa: BLE001 - Caffe2 raises RuntimeError/Exception
        data["error"] = err_info(e)
        _write(outdir, c.name, data, arrays)
        return
    outs = [workspace.FetchBlob(o) for o in c.outputs]
    for k, y in enumerate(outs):
        y = np.asarray(y)
        if y.dtype == object:   # string tensors: store as unicode
            y = y.astype(str)
        # NOTE: values=False (random ops): only shape and dtype are facts; zeros keep the golden reproducible.
        arrays["out%d" % k] = y if c.values else np.zeros_like(y)
    if c.grad:
        _record_grad(c, op, data, arrays)
    _write(outdir, c.name, data, arrays)


def _record_grad(c: Case, op, data, arrays) -> None:
    g_out = [o + "_grad" for o in c.outputs]
    try:
        grad_ops, g_in = core.GradientRegistry.GetGradientForOp(op, g_out)
    except Exception as e:  # noqa: BLE001
        data["grad_error"] = err_info(e)
        return
    data["grad_ops"] = [pbtxt(g) for g in grad_ops]
    data["g_output"] = g_out
    r = rng_for(c.name + "/grad")
    for k, (o, gname) in enumerate(zip(c.outputs, g_out)):
        y = workspace.FetchBlob(o)
        if not (isinstance(y, np.ndarray) and y.dtype.kind == "f"):
            continue
        gy = np.asarray(r.randn(*y.shape)).astype(y.dtype)  # 0-d outputs: randn() is a float
        arrays["gout%d" % k] = gy
        workspace.FeedBlob(gname, gy)
    try:
        for g in grad_ops:
            workspace.RunOperatorOnce(g)
    except Exception as e:  # noqa: BLE001
        data["grad_run_error"] = err_info(e)
        return
    names = []
    for i, g in enumerate(g_in):
        if g is None:
            names.append(None)
            continue
        if isinstance(g, core.GradientSlice):
            names.append(None)   # sparse gradients: compared through grad_ops only
            continue
        names.append(str(g))
        if workspace.HasBlob(str(g)):
            arrays["gin%d" % i] = np.asarray(workspace.FetchBlob(str(g)))
    data["g_input"] = names


def _write(outdir, name, data, arrays):
    if arrays:
        data["npz"] = name + ".npz"
        save_npz(os.path.join(outdir, name + ".npz"), arrays)
    write_json(os.path.join(outdir, name + ".json"), data)
