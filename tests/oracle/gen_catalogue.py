"""Oracle: the op catalogue (issue 17), measured from real Caffe2 1.10.2.

    cd tests/oracle && PYTHONHASHSEED=0 GLOG_minloglevel=2 \
        ../../.venv-caffe2/bin/python gen_catalogue.py [OUT_JSON | GOLDEN_DIR]

Writes ``engine/catalogue/ops.json`` (default, and under ``make oracle``): one entry per key of Caffe2's operator
registries (core + the Detectron ops library), facts only, no doc text:

* ``cpu`` / ``cuda``: a kernel is registered there; ``engine``: an ``X_ENGINE_Y`` key;
* ``schema``: min/max inputs and outputs (``null`` = unbounded), slot names, documented
  arguments (name, required), source file, the allowed counts / (in, out) pairs where the
  schema restricts them inside its ranges, the output count it computes per input count,
  and the in-place pairs it allows or enforces (measured by Caffe2's own schema check);
* ``gradient``: status (has_gradient, NO_GRADIENT, SHOULD_NOT_DO_GRADIENT,
  GRADIENT_NOT_IMPLEMENTED_YET, no_maker) and ``gradient_op`` (the op is a gradient op);
* ``probe``: a minimal op, the output gradients given, and what Caffe2's maker returned
  on it (gradient ops as text protos, input-gradient names) or its error.

The probe op definitions are taken from ``../shared/catalogue/caffe2-ops.json`` where it has
one (control-flow probes need real subnets); everything recorded is re-measured here.
"""
import base64
import json
import os
import re
import sys

from caffe2.proto import caffe2_pb2
from caffe2.python import core, dyndep, workspace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import ROOT, grad_to_json, pbtxt, sanitize, write_json  # noqa: E402

DATA = os.path.join(ROOT, "engine", "catalogue", "ops.json")
ARG = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else None
# A .json path: write there. A directory (scripts/oracle.sh passes the golden tree): the repo's
# own tests/golden means "regenerate the committed data file"; any other tree gets a copy inside.
OUT = (ARG if ARG and ARG.endswith(".json") else
       DATA if ARG is None or ARG == os.path.join(ROOT, "tests", "golden") else
       os.path.join(ARG, "catalogue", "ops.json"))
SHARED = os.path.join(ROOT, "..", "shared", "catalogue", "caffe2-ops.json")
CAP = 8  # counts enumerated: min .. min(max, min + CAP)
INF = 2147483647
MARKERS = {
    "caffe2::NoGradient": "NO_GRADIENT",
    "caffe2::ThrowInTheTowelIfGradientIsCalled": "SHOULD_NOT_DO_GRADIENT",
    "caffe2::GradientNotImplementedYet": "GRADIENT_NOT_IMPLEMENTED_YET",
}
GRADIENT_NAME = re.compile(r"(Gradient|Grad|_gradient_input)(Approx)?$")


def load_detectron():
    import caffe2
    lib = os.path.join(os.path.dirname(caffe2.__file__), "..", "torch", "lib",
                       "libcaffe2_detectron_ops_gpu.so")
    before = set(workspace.RegisteredOperators())
    dyndep.InitOpsLibrary(os.path.normpath(lib))
    return set(workspace.RegisteredOperators()) - before


def bounded(n):
    return None if n >= INF else n


def counts(lo, hi, allowed):
    """The counts in [lo, min(hi, lo + CAP)] that `allowed` accepts (None: all of them)."""
    rng = range(lo, min(hi, lo + CAP) + 1)
    ok = [n for n in rng if allowed(n)]
    return None if len(ok) == len(rng) else ok


def io_facts(s):
    fin = counts(s.min_input, s.max_input, s.num_inputs_allowed)
    fout = counts(s.min_output, s.max_output, s.num_outputs_allowed)
    ins = fin if fin is not None else list(range(s.min_input, min(s.max_input, s.min_input + CAP) + 1))
    outs = fout if fout is not None else list(range(s.min_output, min(s.max_output, s.min_output + CAP) + 1))
    pairs = [[i, o] for i in ins for o in outs if s.num_inputs_outputs_allowed(i, o)]
    calc = {str(i): s.CalculateOutput(i) for i in ins}
    calc = {k: v for k, v in calc.items() if v >= 0} if s.min_output != s.max_output else {}
    if calc:  # the output count is computed: only those pairs can pass
        pairs = [p for p in pairs if calc.get(str(p[0]), p[1]) == p[1]]
    return {"inputs_allowed": fin, "outputs_allowed": fout,
            "io_pairs": None if len(pairs) == len(ins) * len(outs) else pairs,
            "outputs_for_inputs": calc or None}, pairs


def verify(name, ins, outs, required=()):
    """True when Caffe2's schema check accepts the op (it runs before the op is built)."""
    op = core.CreateOperator(name, ins, outs, **{a: 0 for a in required})
    net = caffe2_pb2.NetDef()
    net.name = "catalogue_probe"
    net.op.add().CopyFrom(op)
    try:
        workspace.CreateNet(net, True)
    except RuntimeError as e:
        return "did not pass schema checking" not in str(e)
    return True


def inplace_facts(name, s, pairs):
    """Allowed and enforced (input, output) in-place pairs, on the largest valid counts
    (at most 6 x 6: the probe), and the probe's counts."""
    if not pairs:
        return [], [], None
    small = [p for p in pairs if p[0] <= 6 and p[1] <= 6]
    if not small:
        return [], [], None
    n_in, n_out = max(small, key=lambda p: (p[0] * p[1], p))
    enforced = [[i, o] for i in range(n_in) for o in range(n_out) if s.inplace_enforced(i, o)]
    ins = ["X%d" % i for i in range(n_in)]
    base = ["Y%d" % o for o in range(n_out)]
    for i, o in enforced:
        base[o] = ins[i]
    required = [a.name for a in s.args if a.required]
    if not verify(name, ins, base, required):
        return None, enforced, [n_in, n_out]
    allowed = []
    for i in range(n_in):
        for o in range(n_out):
            if [i, o] in enforced or base[o] in ins:
                continue
            outs = list(base)
            outs[o] = ins[i]
            if verify(name, ins, outs, required):
                allowed.append([i, o])
    return allowed, enforced, [n_in, n_out]


def schema_facts(name):
    s = workspace.C.OpSchema.get(name)
    if s is None:
        return None
    facts, pairs = io_facts(s)
    allowed, enforced, probe_io = inplace_facts(name, s, pairs)
    facts.update({
        "min_input": s.min_input, "max_input": bounded(s.max_input),
        "min_output": s.min_output, "max_output": bounded(s.max_output),
        "inputs": [n for n, _ in s.input_desc], "outputs": [n for n, _ in s.output_desc],
        "args": [[a.name, bool(a.required)] for a in s.args],
        "file": re.sub(r"^(\.\./)+", "", s.file), "private": bool(s.private),
        "inplace": allowed, "inplace_enforced": enforced, "inplace_probe": probe_io,
    })
    return facts


def gradient_status(name):
    impl = workspace.C.OpSchema.get_gradient_impl(name)
    if impl:
        return MARKERS.get(impl, "has_gradient"), impl
    if name in core.GradientRegistry.gradient_registry_:
        return "has_gradient", "python"
    return "no_maker", None


def default_probe(name):
    s = workspace.C.OpSchema.get(name)
    n_in, n_out = (s.min_input, max(s.min_output, 1)) if s is not None else (1, 1)
    if s is not None and s.CalculateOutput(n_in) > 0:
        n_out = s.CalculateOutput(n_in)
    op = core.CreateOperator(name, ["X%d" % i for i in range(n_in)], ["Y%d" % o for o in range(n_out)])
    return op, ["Y%d_grad" % o for o in range(n_out)]


def probe(name, shared):
    p = shared.get(name, {}).get("probe")
    if p:
        op = caffe2_pb2.OperatorDef()
        op.ParseFromString(base64.b64decode(p["probe_op"]))
        g_output = p["g_output"]
    else:
        op, g_output = default_probe(name)
    rec = {"op": pbtxt(op), "g_output": g_output}
    try:
        ops, g_input = core.GradientRegistry.GetGradientForOp(op, g_output)
    except Exception as e:  # noqa: BLE001 - the error text is the fact
        rec["error"] = sanitize(e).strip().split("\n")[0]
        return rec
    rec["grad_ops"] = [pbtxt(g) for g in ops]
    rec["g_input"] = [grad_to_json(g) for g in g_input]
    return rec


def main():
    detectron = load_detectron()
    shared = json.load(open(SHARED))["ops"] if os.path.exists(SHARED) else {}
    names = sorted(set(workspace.RegisteredOperators()))
    out, emitted = {}, {}
    for name in names:
        status, impl = gradient_status(name)
        e = {
            "origin": "detectron" if name in detectron else "core",
            "cpu": bool(workspace.C.OpSchema.get_cpu_impl(name)),
            "cuda": bool(workspace.C.OpSchema.get_cuda_impl(name)),
            "engine": "_ENGINE_" in name,
            "schema": schema_facts(name),
            "gradient": status,
        }
        if not e["engine"] and (e["cpu"] or e["cuda"]) and (status != "no_maker" or impl):
            e["probe"] = probe(name, shared)
            for text in e["probe"].get("grad_ops", []):
                t = re.search(r'^type: "([^"]+)"', text, re.M).group(1)
                emitted[t] = emitted.get(t, 0) + 1
        elif not e["engine"] and status == "no_maker" and name in shared and "probe" in shared[name]:
            e["probe"] = probe(name, shared)
        out[name] = e
    for name, e in out.items():
        doc = e["schema"] is not None and workspace.C.OpSchema.get(name).doc
        named = GRADIENT_NAME.search(name) and "Fused" not in name
        e["gradient_op"] = (not e["engine"] and e["gradient"] == "no_maker"
                            and bool(named or (emitted.get(name) and not doc)))
    meta = {"torch": __import__("torch").__version__, "keys": len(out),
            "detectron_keys": len(detectron), "hashseed": os.environ.get("PYTHONHASHSEED")}
    write_json(OUT, {"meta": meta, "ops": out}, compact=True)
    fwd = [n for n, e in out.items() if e["cpu"] and not e["engine"] and not e["gradient_op"]]
    grad = [n for n, e in out.items() if e["cpu"] and not e["engine"] and e["gradient_op"]]
    print("%d keys; %d CPU forward, %d CPU gradient op types -> %s" % (len(out), len(fwd), len(grad), OUT))


if __name__ == "__main__":
    main()
