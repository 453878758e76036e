"""docs/onnx.md from the converter table: per op family, what exports to ONNX, how, and what does not;
and how that compares with Caffe2's own ONNX frontend (``docs/onnx_caffe2_frontend.json``, counted
from the oracle venv by ``tests/oracle/gen_onnx_frontend.py``).

    python -m engine.onnx.coverage            # rewrite docs/onnx.md
    python -m engine.onnx.coverage --check    # exit 1 when docs/onnx.md is stale
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import engine.runtime.ops  # noqa: F401 - fills the tables
from engine.onnx.export import DEFAULT_OPSET
from engine.catalogue.registry import KERNELS, ONNX

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "onnx.md"
FRONTEND = ROOT / "docs" / "onnx_caffe2_frontend.json"

INTRO = f"""# ONNX export

`netviz export NET -o OUT.onnx` writes a Caffe2 net as an ONNX model (opset {DEFAULT_OPSET} unless `--opset N`,
13 or newer) that passes `onnx.checker` (full check); `netviz diff NET OUT.onnx` runs the net in
netviz's engine and the model in ONNX Runtime on the same inputs and compares every value both sides
expose, op by op (each top-level Caffe2 blob version is also an ONNX value: intermediates are added as
graph outputs for the run).  Both take `--init`, `--input NAME=SHAPE[:DTYPE]` and `--random-params`
(seeded: the same weights in both).  Install the extra with `pip install 'netviz[onnx]'`.

The diff then localizes, as `netviz diff` does for two netviz runs (docs/debugging.md): per Caffe2 op,
`out` is ONNX Runtime's value against the engine's, `own` is the op's own ONNX nodes cut out of the file
and run alone in ONNX Runtime on the engine's inputs (with the file's initializers), `inherited` how far
its inputs were already apart; the first op whose own error exceeds `--tol` (1e-4) is the `culprit:`,
exit 1, `--json` the same.  An op that cannot run alone shows `-` and why.  On the bundled MLP:

```
$ netviz export examples/mlp_forward/predict_net.pb -o mlp.onnx
$ netviz diff examples/mlp_forward/predict_net.pb mlp.onnx --all
A: examples/mlp_forward/predict_net.pb (the engine; 6 parameters: the init net beside it)
B: mlp.onnx (ONNX Runtime 1.32.0; each op's own error: its ONNX nodes run alone)
5 values of 4 ops compared (engine vs ONNX Runtime 1.32.0; tolerance 0.0001 x max|value| + 0.0001 x |value|)
all equal within tolerance; largest difference 5.96e-08 (softmax at op #3 SoftmaxWithLoss)
   op type                   name                                   out       own inherited
   #0 FC                     fc1                                      0         0         0
   #1 Relu                   relu1                                    0         0         0
   #2 FC                     fc2                                      0         0         0
   #3 SoftmaxWithLoss        softmax                           5.96e-08  5.96e-08         0
4 ops compared (errors: max|a-b| / max(1, max|a|); tolerance 0.0001)
no culprit: all 4 ops within tolerance 0.0001
```

With `fc1_w` times 1.01 in `mlp.onnx` the last line reads `culprit: op #0 FC 'fc1': own error 0.01
(inherited 0)` (exit 1).

- Names: Caffe2 blob names are the ONNX value names; a blob written again gets `name@k` for its k-th
  rewrite (netviz's SSA versions).  The init net's values (and `--random-params`' made-up ones) are
  initializers; the inputs keep the fed or `value_info.json` shapes.  Layout stays NCHW (NHWC ops are
  transposed around their ONNX op).
- A training net exports its forward section (ONNX holds no backward pass or optimizer).
- An op with no faithful ONNX form stops the export with one line naming every such op and where it is
  (`op #i`, or `subnet: op #i` inside a control-flow or recurrent net).
- Control flow: `Do` is inlined (it only scopes blobs); `If` becomes ONNX `If` (each branch returns every
  blob the op writes); `While` becomes ONNX `Loop` (cond_net once before, loop_net + cond_net per
  iteration); `RecurrentNetwork` becomes a `Loop` over its step net, carrying its state buffers.
- Int8 ops stay integer, bit for bit: an Int8 blob is its uint8 values (NHWC, as Caffe2 keeps them),
  `Int8Quantize`/`Int8Dequantize` are QuantizeLinear/DequantizeLinear, `Int8Conv(Relu)` and `Int8FC` are
  ConvInteger/MatMulInteger plus QNNPACK's Q31 requantisation spelled out in int64 ops (ONNX's
  QLinearConv rounds a float product half to even and would differ in the last bit now and then),
  `Int8Sum`/`Int8Add` QNNPACK's multiplier-and-shift add, `Int8AveragePool` its 24-bit average-pool
  requantisation, `Int8Softmax` its exp table, and `Int8Reshape`/`Flatten`/`Transpose`/`Slice`/`Concat`
  move the uint8 values as the float ops do: not a dequantised float model.  Int8 ops without a
  converter are refused by name.
- Checked by `tests/test_onnx_export.py`: ResNet-50, DenseNet-121, Inception v1/v2, VGG-19, AlexNet and
  ZFNet from the model zoo, every bundled example (If, While, nested If in While, Do, the LSTM), and the
  test corpus's ONNX-exported and builder nets, equal within float32 tolerance (1e-4 of each value's
  largest magnitude plus 1e-4 relative; int8 values exactly); the detection nets stop on
  GenerateProposals and BoxWithNMSLimit (ONNX's NonMaxSuppression neither keeps Caffe2's +1-pixel box
  areas nor its per-class limits); BBoxTransform's decoding converts (elementwise float32 ops, checked
  alone in ONNX Runtime), so the one-line refusal names only those two.
- What real nets use beyond the zoo (`tests/engine/test_onnx_real_nets.py`, each checked in ONNX Runtime):
  `PadImage` is `Pad` in its mode (constant, reflect, edge; a reflect pad as wide as the image is refused:
  Caffe2 reads outside the image there); `ScatterAssign` is `ScatterND`; a `Reshape` to a shape the net
  computes reads it at run time; the fused row-wise 8/4/2-bit `SparseLengths{{Sum,Mean,WeightedSum}}` (and their pruned `*RowwiseSparse` forms) and the
  8-bit `SparseLengths*8BitsRowwise` lookups are Gather, dequantise (q * scale + bias) and a segment sum
  (the fused table is split into values, scales and biases at export: ONNX cannot read a row's trailing
  bytes as floats, so that table must be fixed in the model); the Stylizer's pre- and post-processing are
  Slice, Cast, Sub, Add (the noise the engine's run drew, as an initializer), Transpose, Clip and Pad.  A
  style-transfer net and a DLRM-shaped ranking net built of them export whole and equal.  Measured on the
  12 real style-transfer nets of `facebookarchive/AICamera-Style-Transfer` (their own weights, a 96x128
  image; none exported before): all 12 export, 9 equal in every value, and in 3 the packed output image
  differs by 1 in one of its 49,152 bytes: the float before the deprocess's truncation lies within 2e-5
  of an integer (36.000023 in netviz, just under 36 in ONNX Runtime), float32 rounding, not a wrong op.
- Of the test corpus's 63 builder and ONNX-exported nets, 60 export and diff clean.  The three
  `reservoir_dedup` nets stop on purpose: `ReservoirSampling` keeps its reservoir in a mutex
  (NativeBlob) and an id-to-position map (UnorderedMap) that live in the workspace across runs and
  draws from Caffe2's random generator, and `MapToKeyValue` reads that map; an ONNX graph has no
  mutable state carried between runs and no map-valued tensors its ops can update, so no ONNX model
  computes the same thing.  The export names those blobs and both ops in its one-line refusal.

Regenerate this file with `python -m engine.onnx.coverage`.
"""


def _is_forward(op_type: str) -> bool:
    return not any(k in op_type for k in ("Gradient", "_grad", "Grad"))


def _how(op_type: str) -> str:
    doc = (ONNX[op_type].__doc__ or "").strip()
    first = doc.split("\n\n")[0].replace("\n", " ")
    return " ".join(first.split()) or "the same-named ONNX op"


def families() -> dict[str, tuple[list[str], list[str]]]:
    """Family module -> (forward op types with a converter, forward op types without)."""
    out: dict[str, tuple[list[str], list[str]]] = {}
    for t, spec in sorted(KERNELS.items()):
        if not _is_forward(t):
            continue
        fam = spec.fn.__module__.rsplit(".", 1)[-1]
        yes, no = out.setdefault(fam, ([], []))
        (yes if t in ONNX else no).append(t)
    return dict(sorted(out.items()))


def render() -> str:
    fams = families()
    total = sum(len(y) + len(n) for y, n in fams.values())
    done = sorted(t for y, _ in fams.values() for t in y)
    lines = [INTRO, "## Coverage", ""]
    if FRONTEND.exists():
        fe = json.loads(FRONTEND.read_text())
        theirs = set(fe["cpp"]) | set(fe["renamed"]) | set(fe["same_name"])
        both, only_us, only_them = set(done) & theirs, sorted(set(done) - theirs), sorted(theirs - set(done))
        lines += [
            f"netviz converts **{len(done)}** of the {total} forward op types it runs.  Caffe2 {fe['caffe2']}'s own "
            f"frontend (`caffe2.python.onnx.frontend`, with onnx {fe['onnx']}) converts {len(theirs)} of "
            f"{fe['registered']}: {len(fe['cpp'])} through its C++ exporter, {len(fe['renamed'])} renamed, and "
            f"{len(fe['same_name'])} passed through because an ONNX op has the same name (arguments copied "
            "as they are, unchecked).  "
            f"{len(both)} op types are in both; netviz also converts {len(only_us)} the frontend does not, and "
            f"the frontend {len(only_them)} netviz does not.  netviz checks each conversion against ONNX Runtime; "
            "the frontend verifies nothing.",
            "",
            f"- Only netviz: {', '.join(only_us)}",
            f"- Only Caffe2's frontend: {', '.join(only_them)}",
            "",
        ]
    lines += ["## Per family", "", "| family | converts | not converted |", "|---|---|---|"]
    for fam, (yes, no) in fams.items():
        lines.append(f"| {fam} | {len(yes)} | {len(no)} |")
    for fam, (yes, no) in fams.items():
        lines += ["", f"### {fam}", ""]
        if yes:
            lines += ["| op | how |", "|---|---|"] + [f"| {t} | {_how(t).replace('|', '/')} |" for t in yes]
        lines += ["", f"Not converted: {', '.join(no) if no else 'none'}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.onnx.coverage", description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 when docs/onnx.md is not what the table gives")
    args = p.parse_args(argv)
    text = render()
    if args.check:
        stale = not DOC.exists() or DOC.read_text() != text
        print(f"{DOC}: {'stale (run python -m engine.onnx.coverage)' if stale else 'up to date'}")
        return int(stale)
    DOC.write_text(text)
    fams = families()
    print(f"wrote {DOC}: {sum(len(y) for y, _ in fams.values())} of "
          f"{sum(len(y) + len(n) for y, n in fams.values())} forward op types convert")
    return 0


if __name__ == "__main__":
    sys.exit(main())
