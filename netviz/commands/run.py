"""Run a model forward (and its generated backward pass with --loss) and print a per-op table:
time, output shapes and NaN/Inf counts.  --dump writes every SSA version of every blob as .npy
with an index.json; --break-on-nan stops at the first op that makes a NaN or Inf (exit 1).

A PlanDef file runs with Caffe2's RunPlan semantics (concurrent substeps in order), one row per
net run, then the values of its nets' external outputs; with --break-on-nan the plan debugger
steps it and stops at the first op making a NaN or Inf, naming the step and iteration.

examples:
  netviz run examples/mlp/predict_net.pb
  netviz run examples/mlp/plan.pbtxt
  netviz run examples/mlp_forward/predict_net.pb --init examples/mlp_forward/init_net.pb --input data=16,8 --loss loss --dump out/
  netviz run $NETVIZ_MODEL_ZOO/resnet50/predict_net.pbtxt --random-params      # a zoo net without its weights
"""
from __future__ import annotations

import argparse
import sys
import warnings
import json
import re
from pathlib import Path
from typing import Any

from engine.debugger import Debugger, OpExecuted, parse_input_spec
from engine.debugger.feeds import stray_inputs
from engine.debugger.inspect import check_folder, save_blob
from engine.debugger.records import VersionFinal
from engine.errors import NetvizError
from engine.model.modelio import load_model
from netviz.commands import add_model_arguments, missing_blob_hint, refuse_bad_losses
from netviz.commands.record import finish_recording, recorder_for


def add_input_argument(parser: argparse.ArgumentParser) -> None:
    """--input: a .npy file or random values of a shape (run, check-grad, the TUI, ONNX export)."""
    parser.add_argument("--input", metavar="NAME=FILE.npy|NAME=SHAPE[:DTYPE]", action="append", default=[],
                        help="feed an input from a .npy file, or random values of a shape (data=1,3,224,224; "
                             "label=16:int32 for 0/1 integers); inputs not given get random data from value_info.json")


def add_params_arguments(parser: argparse.ArgumentParser) -> None:
    """--random-params/--param-width: values for a weightless net (seeded: the same in every command)."""
    parser.add_argument("--random-params", action="store_true",
                        help="fill parameters the init net does not make (zoo nets have none) with seeded random "
                             "values of inferred shapes; convs get --param-width filters")
    parser.add_argument("--param-width", type=int, default=16, metavar="N",
                        help="filters per conv for --random-params (default 16)")


def add_session_arguments(parser: argparse.ArgumentParser) -> None:
    """--input/--device/--loss/--random-params, shared by run, check-grad and the TUI."""
    add_input_argument(parser)
    parser.add_argument("--device", choices=("cpu", "gpu", "net"), default="cpu",
                        help="cpu: every op on the CPU (default); gpu: every op on CUDA; net: as the net says")
    parser.add_argument("--loss", metavar="BLOB", action="append", default=None,
                        help="loss blob: also run the generated backward pass (repeatable)")
    add_params_arguments(parser)


def debugger_from_args(args: argparse.Namespace, **kwargs: Any) -> Debugger:
    """Model + feeds + device from the shared arguments."""
    model = load_model(args.path, init=args.init)
    refuse_bad_losses(model.predict, args.loss)
    feeds = dict(parse_input_spec(s) for s in args.input)
    stray, hint = stray_inputs(model.predict, list(feeds))
    if stray:  # NOTE: fed anyway (Caffe2's FeedBlob takes any name), but a typo should not pass unseen
        print(f"netviz: note: --input {', '.join(stray)}: not an external input of the net (fed anyway); {hint}",
              file=sys.stderr)
    device = None if args.device == "net" else args.device
    if args.param_width < 1:
        raise NetvizError("--param-width must be at least 1")
    return Debugger(model, feeds, device=device, loss=args.loss, synthesize_params=args.random_params,
                    param_width=args.param_width, **kwargs)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    add_session_arguments(parser)
    parser.add_argument("--dump", metavar="DIR", help="write every SSA version of every blob as .npy + index.json")
    parser.add_argument("--record", metavar="FILE.nvrec", help="record the run to one file: nets, every blob version, "
                        "op times (read it with `netviz query`)")
    parser.add_argument("--break-on-nan", action="store_true", help="stop at the first op producing NaN/Inf (exit 1)")


def _file_name(blob: str, version: int) -> str:
    return f"{re.sub(r'[^A-Za-z0-9_.-]', '_', blob)}@{version}.npy"


class _Dumper:
    """Writes each new blob version as it is made, and the index at the end."""

    def __init__(self, folder: Path, dbg: Debugger) -> None:
        self.folder, self.dbg, self.index = folder, dbg, []
        if folder.exists() and not folder.is_dir():
            raise NetvizError(f"{folder}: --dump needs a folder, and this is a file")
        # NOTE: the folder named is made, never the ones above it: a typo'd parent is refused in one line,
        # as the TUI's save (S) and `export -o` refuse a file in a missing folder (docs/files.md)
        check_folder(folder)
        try:
            folder.mkdir(exist_ok=True)
        except OSError as e:
            raise NetvizError(f"{folder}: cannot make the --dump folder: {e.strerror}") from None
        for name in sorted(dbg.ws.values):
            self.write(name, 0, None, "")

    def write(self, name: str, version: int, path: Any, op_type: str) -> None:
        value = self.dbg.ws.values.get(name) if path is None else self.dbg.value(name)
        if not hasattr(value, "dtype") or value.dtype == object:
            return
        file = _file_name(name, version)
        save_blob(name, value, self.folder / file)
        self.index.append({"blob": name, "version": version, "file": file, "shape": list(value.shape),
                           "dtype": str(value.dtype), "op": list(path) if path else None, "op_type": op_type})

    def __call__(self, event: Any) -> None:
        if isinstance(event, OpExecuted):
            r = event.record
            for out in r.outputs:
                self.write(out.name, self.dbg.versions.get(out.name, 0), r.path, r.op_type)
        elif isinstance(event, VersionFinal) and hasattr(event.value, "dtype"):
            # NOTE: an RNN state buffer's rows written through a link view after its version was saved
            save_blob(event.name, event.value, self.folder / _file_name(event.name, event.version))

    def finish(self) -> None:
        (self.folder / "index.json").write_text(json.dumps(self.index, indent=1) + "\n")


#: how a top-level row is marked by the training section of its op (engine.autodiff.training)
SECTION_MARK = {"backward": "∇ ", "optimizer": "Δ "}


def _print_records(records: list, sections: list[str] | None = None, max_outputs: int = 4) -> None:
    """The per-op table: columns as wide as their longest cell, at most `max_outputs` outputs a row.

    NOTE: rows are marked by the section of their top-level op (`sections`), so a training net's
    own backward ops read ∇ and its optimizer ops Δ, with or without --loss (the debugger's
    backward flag covers everything after the forward section)."""
    def outs(r) -> str:
        cells = [f"{o.name}{list(o.shape)}" + (f" NaN×{o.nan_count}" if o.nan_count else "")
                 + (f" Inf×{o.inf_count}" if o.inf_count else "") for o in r.outputs]
        more = f", … (+{len(cells) - max_outputs})" if len(cells) > max_outputs else ""
        return ", ".join(cells[:max_outputs]) + more
    def mark(r) -> str:
        if sections is None or len(r.path) < 2 or not 0 <= r.path[1] < len(sections):
            return "∇ " if r.backward else ""
        return SECTION_MARK.get(sections[r.path[1]], "")
    rows = [("/".join(map(str, r.path[1:])), mark(r) + r.op_type, f"{r.wall_s * 1e3:.3f}", outs(r)) for r in records]
    w = [max([len(h)] + [len(row[k]) for row in rows]) for k, h in enumerate(("op", "type", "ms"))]
    print(f"{'op':<{w[0]}}  {'type':<{w[1]}}  {'ms':>{w[2]}}  outputs")
    for path, op_type, ms, out in rows:
        print(f"{path:<{w[0]}}  {op_type:<{w[1]}}  {ms:>{w[2]}}  {out}")


def _run_plan(args: argparse.Namespace) -> int:
    """A PlanDef: run it with Caffe2's RunPlan semantics, one row per net run."""
    from engine.runtime.plan_view import run_plan_steps
    from engine.runtime.plandef import load_plan
    from engine.caffe2.workspace import Workspace

    ignored = [flag for flag, given in (("--init", args.init), ("--input", args.input), ("--loss", args.loss),
                                        ("--random-params", args.random_params), ("--dump", args.dump),
                                        ("--record", getattr(args, "record", None)),
                                        ("--device " + args.device, args.device != "cpu")) if given]
    if ignored:  # NOTE: a plan runs its own nets as written; silently dropping these would mislead
        raise NetvizError(f"{args.path}: a PlanDef runs its own nets as written: {', '.join(ignored)} "
                          "cannot apply (give one of its nets instead)")
    plan, ws = load_plan(args.path), Workspace("plan")
    if args.break_on_nan:
        return _plan_to_nan(plan, Path(args.path))
    rows = [(" › ".join(r.step_path), str(r.iteration), r.net + (" (report)" if r.report else ""),
             f"{r.wall_s * 1e3:.3f}") for r in run_plan_steps(plan, ws)]
    w = [max([len(h)] + [len(row[k]) for row in rows]) for k, h in enumerate(("step", "iter", "net"))]
    print(f"{'step':<{w[0]}}  {'iter':>{w[1]}}  {'net':<{w[2]}}  ms")
    for step, it, net, ms in rows:
        print(f"{step:<{w[0]}}  {it:>{w[1]}}  {net:<{w[2]}}  {ms}")
    outs = [b for n in plan.network for b in n.external_output if ws.has_blob(b)]
    for b in dict.fromkeys(outs):
        value = ws.fetch_blob(b)
        if not hasattr(value, "ravel"):  # a C++ object's description, a string
            print(f"{b} = {value!r}")
            continue
        print(f"{b} = {value.ravel()[:4].tolist()}" + (" …" if value.size > 4 else ""))
    print(f"plan {plan.name!r}: {len(rows)} net runs")
    return 0


def _plan_to_nan(plan: Any, path: Path) -> int:
    """--break-on-nan on a plan: step it in the plan debugger to the first op writing NaN/Inf."""
    from engine.debugger.plan import PlanDebugger

    dbg = PlanDebugger(plan, path, device="cpu")
    dbg.add_breakpoint("condition", condition="has_inf_or_nan")
    stop = dbg.continue_()
    print(f"plan {plan.name!r}: {len(dbg.net_runs)} net runs, {len(dbg.records)} ops; stopped: {stop.reason}")
    if stop.reason == "error":
        raise NetvizError(stop.detail)
    if stop.reason == "condition":
        from engine.debugger.provenance import explain_debugger
        for line in explain_debugger(dbg):  # NOTE: as a net's run: the first bad element, back to its origin
            print(f"  {line}")
        print(f"netviz: NaN/Inf produced; stopped at {stop.pc.text()}")
        return 1
    return 0


_MISSING = re.compile(r"input blob '.+?' not found")


def run(args: argparse.Namespace) -> int:
    # NOTE: NumPy's RuntimeWarnings (with its source paths) say what the table's NaN×/Inf× cells and the
    # note below say better; one line per run, not a warning per op on stderr (issue #42 item 16).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        from engine.runtime.plan_view import is_plan_file
        return _run_plan(args) if is_plan_file(args.path) else _run_net(args)


def _nan_note(records: list) -> str | None:
    """One line naming how many ops made NaN/Inf and the first of them, or None."""
    bad = [r for r in records if any(o.nan_count or o.inf_count for o in r.outputs)]
    if not bad:
        return None
    first = bad[0]
    return (f"note: {len(bad)} op{'s' * (len(bad) != 1)} made NaN/Inf, first op {'/'.join(map(str, first.path[1:]))} "
            f"{first.op_type}; --break-on-nan stops there")


def _blames_params(dbg: Debugger) -> bool:
    """Whether the failing op computes on made-up parameters (read directly or through earlier ops), so their
    guessed widths may be at fault; not when one of its inputs is empty (Mask R-CNN with no boxes fails for that)."""
    op = dbg.current_op()
    if op is None:
        return False
    ws = dbg.ws
    if any(ws.has_blob(n) and getattr(ws.fetch_blob(n), "size", 1) == 0 for n in op.input):
        return False
    tainted = set(dbg.synthesized)
    for prior in (o for f in dbg.frames for o in f.net.op):  # NOTE: net order: taint flows forward
        if tainted & set(prior.input):
            tainted.update(prior.output)
    return bool(tainted & set(op.input))


def _run_net(args: argparse.Namespace) -> int:
    dbg = debugger_from_args(args)
    if dbg.synthesized:
        print(f"note: no values for {len(dbg.synthesized)} parameters; filled with random values "
              f"({args.param_width} filters per conv)")
    if args.break_on_nan:
        dbg.add_breakpoint("condition", condition="has_inf_or_nan")
    dumper = _Dumper(Path(args.dump), dbg) if args.dump else None
    if dumper:
        dbg.listeners.append(dumper)
    recorder = recorder_for(args, dbg)
    if args.loss:
        dbg.backward()
    stop = dbg.continue_()
    if recorder:
        finish_recording(recorder, stop)
    if stop.reason == "error":  # NOTE: the one useful line first; an empty table and "0 ops" said nothing
        message = stop.detail + missing_blob_hint(stop.detail, dbg.model, dbg.synthesize, dbg.missing_inputs())
        if dbg.synthesized and not _MISSING.search(stop.detail) and _blames_params(dbg):  # NOTE: widths are guesses
            message += (f" (the weights were made up by --random-params, {args.param_width} filters per conv: "
                        "another --param-width, or the real weights with --init, may fit)")
        if not dbg.records:
            raise NetvizError(message)
        print(f"netviz: {message}", file=sys.stderr, flush=True)
    from engine.autodiff.training import split_training_net
    _print_records(dbg.records, split_training_net(dbg.frames[0].net).sections)
    if dumper:
        dumper.finish()
        print(f"dumped {len(dumper.index)} blob versions to {Path(args.dump)}/ (index.json)")
    note = None if stop.reason == "condition" else _nan_note(dbg.records)
    if note:  # NOTE: on stderr: stdout keeps the table and its summary line as they were
        print(f"netviz: {note}", file=sys.stderr, flush=True)
    total = sum(r.wall_s for r in dbg.records)
    print(f"{len(dbg.records)} ops in {total * 1e3:.1f} ms; stopped: {stop.reason}")
    if stop.reason == "error":
        return 2
    if stop.reason == "condition":  # NOTE: the pc is the op after the culprit: name the op that wrote it
        last = dbg.records[-1] if dbg.records else None
        made = ", ".join(o.name for o in last.outputs if o.nan_count or o.inf_count) if last else ""
        by = f" by op {'/'.join(map(str, last.path[1:]))} {last.op_type} ({made})" if last else ""
        from engine.debugger.provenance import explain_debugger
        for line in explain_debugger(dbg):  # NOTE: the first bad element and what it was computed from
            print(f"  {line}")
        print(f"netviz: NaN/Inf produced{by}; stopped before {stop.pc.text()}")  # NOTE: last: the run's verdict
        return 1
    return 0
