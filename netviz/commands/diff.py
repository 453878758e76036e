"""Run a model on two devices and list every blob by its largest difference, worst first; or,
given a second net, list how its ops differ from the first's (a training net against its test net).

Without CuPy and a GPU the GPU side runs on the stand-in device (NumPy behind CUDA device
options): the output says so, and differences are then float rounding only (the CPU side takes
NumPy-only fast paths, e.g. a conv's GEMM per image, that sum in another order).  Exit status 1 when a
blob differs by more than --threshold.

With OTHER, the two nets' ops are aligned by type and first output: ops only in PATH (`-`), only in
OTHER (`+`), and aligned ops whose inputs or arguments differ (`~`, e.g. SpatialBN `is_test 0 → 1`),
then external inputs/outputs that differ.  Exit status 1 when the nets differ.

With OTHER ending in .onnx (from `netviz export NET -o OTHER.onnx`, same --init/--random-params/--input),
the net runs in the engine (side A) and the model in ONNX Runtime (side B) on the same inputs; every
value both expose is compared op by op, and the first op whose output differs beyond --rtol/--atol is
printed with its values side by side.  Then the localizer's table and culprit line below, with side B
ONNX Runtime: an op's OWN error is its ONNX nodes cut out of OTHER and run alone in ONNX Runtime on the
engine's inputs (with OTHER's initializers), so a weight or attribute changed in the file names its op
even where later ops inherit a larger difference; an op whose nodes cannot run alone says why in its
row (`-`).  Exit 1 on either finding; --json prints the localizer's document only.

Two runs of one net, op by op (the divergence localizer, docs/debugging.md): give a side its own
init net (--init-a/--init-b: two checkpoints), netviz's Caffe2 fixes (--fix-caffe2-a/-b), a device
(--device-a/-b cpu|gpu), or give OTHER with --run (another model file of the same net).  Each op's
row holds its output difference, its OWN error (the op re-run in side B's setting on side A's
inputs, against side A's output) and the difference its inputs inherited; errors are
max|a-b| / max(1, max|a|).  The first op whose own error exceeds --tol is printed as
`culprit: op #N Type 'name': own error E (inherited I)` (exit 1); --json gives the same.

examples:
  netviz diff examples/mlp_forward/predict_net.pb --init-a examples/mlp_forward/init_net.pb --init-b examples/mlp/init_net.pb   # which op do the weights change?
  netviz diff examples/mlp_forward/predict_net.pb examples/mlp/predict_net.pb --run      # the same net in another file
  netviz diff examples/mlp/predict_net.pb --fix-caffe2-b --loss loss                     # what netviz's fixes change
  netviz diff examples/mlp_forward/predict_net.pb --devices cpu,gpu
  netviz diff $NETVIZ_MODEL_ZOO/resnet50/predict_net.pbtxt --devices cpu,gpu --threshold 1e-3 --top 20 --random-params
  netviz diff examples/mlp/predict_net.pb examples/mlp_forward/predict_net.pb          # what the training net adds
  netviz export $NETVIZ_MODEL_ZOO/resnet50/predict_net.pbtxt -o resnet50.onnx --random-params --force
  netviz diff $NETVIZ_MODEL_ZOO/resnet50/predict_net.pbtxt resnet50.onnx --random-params   # engine vs ONNX Runtime
  netviz export examples/mlp_forward/predict_net.pb -o mlp.onnx --force
  netviz diff examples/mlp_forward/predict_net.pb mlp.onnx --all --json      # each op's own error in ONNX Runtime
"""
from __future__ import annotations

import argparse
import contextlib
import difflib
import sys
from typing import Any

from engine.debugger import parse_input_spec
from engine.debugger.diff import device_diff
from engine.errors import NetvizError
from engine.model.modelio import load_model, load_net
from engine.model.opdef import args_of
from proto import caffe2_pb2
from netviz.commands import add_model_arguments
from netviz.commands.onnx_io import add_source_arguments, is_onnx, run_diff


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("other", metavar="OTHER", nargs="?", default=None,
                        help="a second net: compare its ops with PATH's instead of running on two devices")
    parser.add_argument("--devices", default="cpu,gpu", metavar="A,B", help="the two devices (only cpu,gpu)")
    parser.add_argument("--input", metavar="NAME=FILE.npy|NAME=SHAPE[:DTYPE]", action="append", default=[],
                        help="feed an input (others get random data from value_info.json)")
    parser.add_argument("--loss", metavar="BLOB", default=None, help="also run and compare the backward pass")
    parser.add_argument("--threshold", type=float, default=1e-4, help="max abs difference allowed (1e-4)")
    parser.add_argument("--top", type=int, default=30, metavar="N", help="print the N worst blobs (30)")
    add_source_arguments(parser, with_input=False)
    parser.add_argument("--rtol", type=float, default=1e-4, help="with an .onnx OTHER: relative tolerance (1e-4)")
    parser.add_argument("--atol", type=float, default=1e-4,
                        help="with an .onnx OTHER: absolute tolerance, times the value's largest magnitude (1e-4)")
    run = parser.add_argument_group("two runs, op by op (the divergence localizer; --tol, --all and --json "
                                    "also with an .onnx OTHER)")
    run.add_argument("--run", action="store_true", help="with a Caffe2 OTHER: run both nets op by op (not only "
                     "compare their ops)")
    for side in "ab":
        run.add_argument(f"--init-{side}", metavar="INIT", default=None, help=f"side {side.upper()}'s init net")
        run.add_argument(f"--fix-caffe2-{side}", action="store_true", help=f"side {side.upper()} applies netviz's "
                         "fixes of Caffe2 bugs")
        run.add_argument(f"--device-{side}", choices=("cpu", "gpu"), default=None, help=f"side {side.upper()}'s "
                         "device (cpu by default)")
    run.add_argument("--tol", type=float, default=1e-4, help="an op's error allowed, max|a-b| / max(1, max|a|) (1e-4)")
    run.add_argument("--all", action="store_true", help="print every op's row (default: those over --tol)")
    run.add_argument("--json", action="store_true", help="print the rows and the culprit as JSON")


def _shown(v: Any) -> str:
    """An argument's value as a user wrote it: a float arg is float32, so 1e-05 (not 9.999999747378752e-06)."""
    if isinstance(v, float):
        return f"{v:.7g}"
    return f"<net {v.name!r}>" if isinstance(v, caffe2_pb2.NetDef) else "(unset)" if v is _UNSET else repr(v)


_UNSET = object()


def _op_text(i: int, op: caffe2_pb2.OperatorDef) -> str:
    name = f" {op.name!r}" if op.name else ""
    return f"#{i} {op.type}{name}: {', '.join(op.input) or '-'} → {', '.join(op.output) or '-'}"


def net_diff(a: caffe2_pb2.NetDef, b: caffe2_pb2.NetDef) -> list[str]:
    """One line per difference between two nets' top-level ops and external blobs (empty: same)."""
    key = lambda op: (op.type, op.output[0] if op.output else "")  # noqa: E731 - type and first output
    lines: list[str] = []
    matcher = difflib.SequenceMatcher(None, [key(op) for op in a.op], [key(op) for op in b.op], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for i, j in zip(range(i1, i2), range(j1, j2)):
                oa, ob = a.op[i], b.op[j]
                for what in ("input", "output"):
                    if list(getattr(oa, what)) != list(getattr(ob, what)):
                        lines.append(f"~ #{i}/#{j} {oa.type}: {what}s {', '.join(getattr(oa, what))} → "
                                     f"{', '.join(getattr(ob, what))}")
                xa, xb = args_of(oa), args_of(ob)
                for k in sorted(set(xa) | set(xb)):
                    va, vb = xa.get(k, _UNSET), xb.get(k, _UNSET)
                    if va != vb:
                        lines.append(f"~ #{i}/#{j} {oa.type}: {k} {_shown(va)} → {_shown(vb)}")
                if oa.device_option != ob.device_option:
                    lines.append(f"~ #{i}/#{j} {oa.type}: device option differs")
            continue
        lines += [f"- {_op_text(i, a.op[i])}" for i in range(i1, i2)]
        lines += [f"+ {_op_text(j, b.op[j])}" for j in range(j1, j2)]
    for what in ("external_input", "external_output"):
        ea, eb = list(getattr(a, what)), list(getattr(b, what))
        gone, new = [x for x in ea if x not in eb], [x for x in eb if x not in ea]
        if gone or new:
            lines.append(f"{what.replace('_', ' ')}s: " + ", ".join([f"-{x}" for x in gone] + [f"+{x}" for x in new]))
    return lines


def _run_net_diff(args: argparse.Namespace) -> int:
    runs = [f for f, given in (("--input", args.input), ("--loss", args.loss), ("--init", args.init)) if given]
    if runs:  # NOTE: comparing two nets runs neither; dropping these silently would mislead
        raise NetvizError(f"{', '.join(runs)}: diff of two nets compares their ops and runs neither "
                          "(give one net to compare a cpu and a gpu run)")
    a, b = load_net(args.path), load_net(args.other)
    lines = net_diff(a, b)
    print(f"--- {args.path} ({a.name or 'net'}: {len(a.op)} ops)\n+++ {args.other} ({b.name or 'net'}: {len(b.op)} ops)")
    if lines:
        print("\n".join(lines))
    count = {c: sum(ln.startswith(c) for ln in lines) for c in "-+~"}
    print(f"{count['-']} ops only in {args.path}, {count['+']} only in {args.other}, {count['~']} differences "
          "in aligned ops" + ("" if lines else "; the nets are the same"))
    return 1 if lines else 0


def _localizing(args: argparse.Namespace) -> bool:
    """Whether the command line asks for two runs op by op (any side option, or OTHER with --run)."""
    return bool(args.run or args.init_a or args.init_b or args.fix_caffe2_a or args.fix_caffe2_b
                or args.device_a or args.device_b)


def _stand_in_gpu(args: argparse.Namespace) -> contextlib.AbstractContextManager[Any]:
    """--device-a/-b gpu without CuPy and a GPU: that side runs on the stand-in device (NumPy behind CUDA
    device options), as --devices cpu,gpu does, with one line saying so (on stderr under --json, whose
    stdout is the document); either side alike (--device-b gpu was refused while --devices ran)."""
    from engine.runtime import device as dev  # noqa: PLC0415

    gpu = [f"--device-{side} gpu" for side in "ab" if getattr(args, f"device_{side}") == "gpu"]
    if not gpu or dev.has_gpu():
        return contextlib.nullcontext()
    print(f"note: no CUDA GPU here: {' and '.join(gpu)} ran on the stand-in device (NumPy), so differences are "
          "float rounding only", file=sys.stderr if args.json else sys.stdout)
    return dev.use_fake_cuda()


def run(args: argparse.Namespace) -> int:
    if is_onnx(args.other):
        return run_diff(args)
    if _localizing(args):
        from netviz.commands.divergence import run_localizer  # noqa: PLC0415 - only this mode needs it
        with _stand_in_gpu(args):
            return run_localizer(args)
    if args.other is not None:
        return _run_net_diff(args)
    if sorted(d.strip() for d in args.devices.split(",")) != ["cpu", "gpu"]:
        raise NetvizError(f"--devices {args.devices!r}: only cpu,gpu can be compared")
    model = load_model(args.path, init=args.init)
    feeds = dict(parse_input_spec(s) for s in args.input)
    report = device_diff(model, feeds, loss=args.loss, synthesize_params=not len(model.init.op))
    if report.stand_in:
        print("note: no CUDA GPU here: the gpu side ran on the stand-in device (NumPy), so differences are "
              "float rounding only (the CPU side's NumPy fast paths sum in another order)")
    if not len(model.init.op):
        print("note: no init net: parameters filled with random values (the same on both devices)")
    print(f"{'blob':<40} {'shape':<20} {'max abs':>10} {'max rel':>10}")
    for d in report.diffs[: max(args.top, 0)]:
        print(f"{d.name:<40} {'×'.join(map(str, d.shape)) or 'scalar':<20} {d.max_abs:>10.3g} {d.max_rel:>10.3g}")
    first = report.first_over(args.threshold)
    print(f"{len(report.diffs)} blobs compared; "
          + (f"first over {args.threshold:g} in execution order: {first.name} (abs {first.max_abs:.3g})"
             if first else f"none differs by more than {args.threshold:g}"))
    return 1 if first else 0
