"""The ONNX side of `netviz export` (OUT ending in .onnx) and `netviz diff` (OTHER ending in .onnx).

`export` writes the net as a checked ONNX model; `diff` runs the Caffe2 net in the engine and the
ONNX model in ONNX Runtime on the same inputs and compares every value both expose, op by op.
Both take the same --init / --random-params / --input options, so both sides hold the same weights
(--random-params is seeded: the same values every time).  docs/onnx.md lists what converts.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import NetvizError
from engine.onnx.export import (DEFAULT_OPSET, Source, ValueDiff, diff_against_runtime, export, onnx_module,
                                prepare, save_model)
from netviz.commands.run import add_input_argument, add_params_arguments


def add_source_arguments(parser: argparse.ArgumentParser, *, with_input: bool) -> None:
    """--random-params (and --input where the command lacks it): how the net gets its values, as
    `run` takes them, so an export and its diff see the same weights."""
    if with_input:
        add_input_argument(parser)
    add_params_arguments(parser)


def is_onnx(path: str | None) -> bool:
    return path is not None and Path(path).suffix.lower() == ".onnx"


def _source(args: argparse.Namespace, run: bool):
    if args.param_width < 1:
        raise NetvizError("--param-width must be at least 1")
    src = prepare(args.path, init=args.init, inputs=args.input, random_params=args.random_params,
                  param_width=args.param_width, run=run)
    for note in src.notes:
        print(f"netviz: note: {note}", file=sys.stderr)
    return src


def run_export(args: argparse.Namespace) -> int:
    """`netviz export NET -o OUT.onnx`: one line on success, one line naming every refused op."""
    onnx = onnx_module()
    out = Path(args.output)
    if out.exists() and not args.force:
        raise NetvizError(f"{out}: exists (give --force to overwrite)")
    src = _source(args, run=True)
    done = export(src, opset=args.opset if args.opset is not None else DEFAULT_OPSET, where=args.path)
    try:
        save_model(onnx, done.model, str(out))
    except OSError as e:
        raise NetvizError(f"{out}: cannot write it ({e.strerror or e})") from None
    g = done.model.graph
    print(f"wrote {out} (ONNX opset {done.model.opset_import[0].version}: {len(g.node)} nodes, "
          f"{len(g.initializer)} initializers, {len(g.input)} inputs, {len(g.output)} outputs; onnx.checker: ok)")
    return 0


def _where(d: ValueDiff, net) -> str:
    op = net.op[d.op_index]
    name = f" '{op.name}'" if op.name else ""
    return f"op #{d.op_index} {d.op_type}{name}"


def _side_by_side(d: ValueDiff, n: int = 6) -> list[str]:
    a, b = np.asarray(d.engine), np.asarray(d.runtime)
    if a.shape != b.shape:
        return [f"    shapes differ: engine {a.shape}, ONNX Runtime {b.shape}"]
    with np.errstate(invalid="ignore"):
        err = np.abs(a.astype(np.float64) - b.astype(np.float64)).ravel()
    worst = np.argsort(-np.nan_to_num(err, nan=np.inf))[:n]
    rows = [f"    {'index':<18} {'engine':>14} {'onnxruntime':>14} {'abs diff':>10}"]
    for k in worst:
        idx = np.unravel_index(k, a.shape) if a.ndim else ()
        rows.append(f"    {str(tuple(int(i) for i in idx)):<18} {a.ravel()[k]!s:>14.14} {b.ravel()[k]!s:>14.14} "
                    f"{err[k]:>10.3g}")
    return rows


def run_diff(args: argparse.Namespace) -> int:
    """`netviz diff NET OUT.onnx`: every value the engine and ONNX Runtime both expose, op by op, then the
    localizer's table (each op's output, own and inherited error; its own error is the op's ONNX nodes
    run alone in ONNX Runtime on the engine's inputs) and culprit line.  Exit 1 on a value beyond
    --rtol/--atol or an op's error beyond --tol; --json prints only the localizer's document."""
    onnx = onnx_module()
    if not Path(args.other).is_file():  # onnx.load's "[Errno 2] …" is Python's words, not the user's
        raise NetvizError(f"{args.other}: no such file")
    try:
        model = onnx.load(args.other)
    except Exception as e:  # NOTE: any parse failure of a user's file is one line
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise NetvizError(f"{args.other}: not an ONNX model ({why})") from None
    src = _source(args, run=True)
    rows = diff_against_runtime(src, model, rtol=args.rtol, atol=args.atol)
    if not rows:
        raise NetvizError(f"{args.other}: no value of the ONNX model matches a blob of {args.path}")
    from engine.onnx.divergence import localize_onnx  # noqa: PLC0415 - only this mode needs it
    from netviz.commands.divergence import report  # noqa: PLC0415
    d = localize_onnx(src, model, tol=args.tol, runtime=rows)
    sides = [f"A: {args.path} (the engine; {_params(args, src)})",
             f"B: {args.other} (ONNX Runtime {_ort_version()}; each op's own error: its ONNX nodes run alone)"]
    if args.json:
        return report(d, sides, args)
    lines, bad = _values_summary(args, src, model, rows)
    return max(report(d, sides, args, notes=lines), int(bad))


def _params(args: argparse.Namespace, src: Source) -> str:
    """Where side A's parameters came from."""
    where = (f"init {args.init}" if args.init else "--random-params" if args.random_params
             else "the init net beside it" if src.params else "no parameters")
    return f"{len(src.params)} parameters: {where}"


def _values_summary(args: argparse.Namespace, src: Source, model: Any, rows: list[ValueDiff]
                    ) -> tuple[list[str], bool]:
    """The whole-model comparison's lines (every value both expose, tolerance --rtol/--atol) and whether a
    value differs beyond it."""
    out: list[str] = []
    inits = {t.name: t for t in model.graph.initializer}
    numpy_helper = onnx_module().numpy_helper
    changed = [b for b in src.params if b in inits
               and not np.array_equal(numpy_helper.to_array(inits[b]), np.asarray(src.values[b]))]
    if changed:
        out.append(f"note: {len(changed)} initializers differ from the net's values ({', '.join(changed[:3])}"
                   f"{' …' if len(changed) > 3 else ''}): were export and diff given the same "
                   "--init/--random-params?")
    bad = next((d for d in rows if not d.ok), None)
    worst = max(rows, key=lambda d: d.max_abs)
    ops = len({d.op_index for d in rows})
    out.append(f"{len(rows)} values of {ops} ops compared (engine vs ONNX Runtime {_ort_version()}; "
               f"tolerance {args.atol:g} x max|value| + {args.rtol:g} x |value|)")
    if bad is None:
        out.append(f"all equal within tolerance; largest difference {worst.max_abs:.3g} "
                   f"({worst.blob} at {_where(worst, src.net)})")
        return out, False
    shape = "x".join(map(str, np.shape(bad.engine))) or "scalar"
    out.append(f"first difference: {_where(bad, src.net)} output '{bad.blob}' (ONNX '{bad.onnx_name}', "
               f"shape {shape}): max abs {bad.max_abs:.3g}, max rel {bad.max_rel:.3g}")
    out += _side_by_side(bad)
    out.append(f"{sum(not d.ok for d in rows)} of {len(rows)} values differ beyond tolerance")
    return out, True


def _ort_version() -> str:
    from engine.onnx.export import onnxruntime_module  # noqa: PLC0415
    return str(onnxruntime_module().__version__)
