"""Zero-size sweep (issue #42): every kernel oracle case again, with its batch emptied, and again
with the last dim of its first input emptied (``<case>~last``).

Run from tests/oracle: ``../../.venv-caffe2/bin/python gen_zero_size.py ../golden``.
The cases are the kernel oracle's own (``gen_kernels_<family>.py``'s ``cases()``), so every op type
netviz has a kernel case for gets a zero-batch case without a second list.  A case's batch is the
first dimension of its first input: every input whose first dimension has that size gets it cut
to 0 (an Int8 input is remade by its ``Int8Given*Fill`` extra op with the cut data).  Each case
runs in a forked child, so an op that kills Caffe2 is recorded as ``"crash"`` instead of ending
the sweep.  Written: ``OUT/zero_size/<family>.<case>.json`` (+ ``.npz``) in the kernel oracle's
format, read by ``tests/engine/test_zero_size.py``; the folder is emptied first.
"""
import importlib
import json
import os
import shutil
import sys

import numpy as np

import kernel_oracle
from _common import OUT, core, pbtxt, save_npz, workspace, write_json

# NOTE: runtime (queues, cursors) and sampling (reservoirs) cases build state with extra ops fed by
# the inputs; optim_nets and rnn_cells are nets, not one-op cases.
FAMILIES = ("control", "conv", "detection", "features", "histogram", "int8", "last", "lengths", "loss",
            "math", "norm", "optim", "reduce", "rnn", "rowwise_quant", "segment", "sequence", "tensor")
_INT8_FILLS = ("Int8GivenTensorFill", "Int8GivenIntTensorFill")
#: Cases whose cut leaves indices or lengths pointing past the emptied data: Caffe2 runs them and reads
#: memory it does not own, so their output values change from run to run (found by regenerating
#: several times); only their shapes are recorded.
SHAPES_ONLY = frozenset({"features.MergeMultiListFeatureTensors", "features.MergeMultiMapFeatureTensors",
                         "features.MergeMultiScalarFeatureTensors", "last.ATen_embedding",
                         "last.ATen_embedding_bag_mean", "last.ATen_embedding_bag_sum"})
SHAPES_ONLY_NOTE = "indices past the emptied data: Caffe2 reads memory it does not own, shapes only"


def family_cases(family):
    """The Case objects of gen_kernels_<family>.py, imported without writing its goldens."""
    kernel_oracle.record = lambda _family, _cases: 0   # NOTE: module-level record() calls become no-ops
    return list(importlib.import_module("gen_kernels_" + family).cases())


def _cut_fill(extra, cut):
    """Remake an Int8 fill extra op whose output was cut, so it fills the empty data."""
    t, ins, outs, args = extra
    if t not in _INT8_FILLS or outs[0] not in cut:
        return extra
    data = cut[outs[0]]
    args = dict(args, shape=list(data.shape))
    args["values"] = data.tobytes() if t == "Int8GivenTensorFill" else []
    return (t, ins, outs, args)


def _cut(c, suffix, what, cut):
    """`c` with the inputs in `cut` replaced (Int8 fills remade), named ``<case><suffix>``."""
    return kernel_oracle.Case(
        c.name + suffix, c.op_type, {k: cut.get(k, a) for k, a in c.inputs.items()}, c.outputs, c.args,
        grad=False, values=c.values, rtol=c.rtol, atol=c.atol, engine=c.engine,
        extra_ops=[_cut_fill(e, cut) for e in c.extra_ops], note="%s of %s cut to 0" % (what, ", ".join(cut)))


def zero_batch(c):
    """The case with its batch cut to 0, or None when it has no batch (scalar or already empty)."""
    arrays = {k: np.asarray(a) for k, a in c.inputs.items()}
    first = next(iter(arrays.values()), np.zeros(()))
    if first.ndim == 0 or first.shape[0] == 0:
        return None
    n = first.shape[0]
    return _cut(c, "", "batch", {k: a[:0] for k, a in arrays.items() if a.ndim and a.shape[0] == n})


def zero_last(c):
    """The case with the last dim of its first input cut to 0 (and of every input of that rank and
    size there: an elementwise partner), or None when the first input has rank < 2."""
    arrays = {k: np.asarray(a) for k, a in c.inputs.items()}
    first = next(iter(arrays.values()), np.zeros(()))
    if first.ndim < 2 or first.shape[-1] == 0:
        return None
    same = {k: a[..., :0] for k, a in arrays.items() if a.ndim == first.ndim and a.shape[-1] == first.shape[-1]}
    return _cut(c, "~last", "last dim", same)


def _fetch_untyped(untyped):
    """FetchBlob that also answers for an empty output Caffe2 never gave a type (zeros of its shape,
    float32, the name noted in `untyped`): its shape is a fact, its dtype is not."""
    fetch = workspace.FetchBlob

    def fetch_any(name):
        try:
            return fetch(name)
        except RuntimeError as e:
            if "data type is not supported" not in str(e):
                raise
            untyped.append(str(name))
            return np.zeros(workspace.C.Workspace.current.blobs[str(name)].tensor().shape, np.float32)
    return fetch_any


def _crash_golden(outdir, name, c, signal):
    """The case as the kernel oracle writes it, with the signal that killed Caffe2 for outputs."""
    arrays = {"in%d" % i: np.asarray(a) for i, a in enumerate(c.inputs.values())}
    op = core.CreateOperator(c.op_type, list(c.inputs), list(c.outputs), engine=c.engine or None, **c.args)
    data = {"case": name, "kind": "kernel", "op_type": c.op_type, "inputs": list(c.inputs),
            "outputs": list(c.outputs), "crash": signal, "op": pbtxt(op), "note": c.note, "format_version": 1,
            "extra_ops": [pbtxt(core.CreateOperator(t, i, o, **a)) for t, i, o, a in c.extra_ops],
            "npz": name + ".npz"}
    save_npz(os.path.join(outdir, name + ".npz"), arrays)
    write_json(os.path.join(outdir, name + ".json"), data)


def _fork_record(outdir, name, c):
    """Record case `c` as `name` into `outdir` in a child process; returns the child's wait status."""
    pid = os.fork()
    if pid == 0:
        code, untyped = 0, []
        workspace.FetchBlob = _fetch_untyped(untyped)
        try:
            kernel_oracle._record_one(outdir, kernel_oracle.Case(**dict(c.__dict__, name=name)))
            if untyped:
                path = os.path.join(outdir, name + ".json")
                with open(path) as f:
                    data = json.load(f)
                write_json(path, dict(data, untyped_outputs=untyped))
        except BaseException as e:  # noqa: B902 - an extra op failing on empty data: no case
            sys.stderr.write("gen_zero_size: %s skipped (%s)\n" % (name, str(e).splitlines()[0][:100]))
            code = 3
        os._exit(code)
    return os.waitpid(pid, 0)[1]


def run_forked(outdir, family, c):
    """Record one case in a child process; a child killed by Caffe2 leaves a 'crash' golden.
    Returns whether a golden was written."""
    name = family + "." + c.name
    if name in SHAPES_ONLY:  # NOTE: its values are whatever lies past an emptied table
        c = kernel_oracle.Case(**dict(c.__dict__, values=False, note=c.note + "; " + SHAPES_ONLY_NOTE))
    status = _fork_record(outdir, name, c)
    if os.WIFSIGNALED(status):
        _crash_golden(outdir, name, c, os.WTERMSIG(status))
    return os.WIFSIGNALED(status) or os.WEXITSTATUS(status) == 0


def main():
    outdir = os.path.join(OUT, "zero_size")
    shutil.rmtree(outdir, ignore_errors=True)
    os.makedirs(outdir)
    written = 0
    for family in FAMILIES:
        for c in family_cases(family):
            for z in (zero_batch(c), zero_last(c)):
                if z is not None:
                    written += run_forked(outdir, family, z)
    print(written, "zero-size cases")


if __name__ == "__main__":
    main()
