"""OpInspector: one OperatorDef — type, category, description, Caffe2 gradient status, net, device,
engine, every argument (defaults dimmed), in-place markers, schema warnings, and the inputs/outputs
under Caffe2's slot names (``X = data@0``) with their shapes. The op facts come from engine.catalogue."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.table import Table
from rich.text import Text
from textual.geometry import Size
from textual.widgets import Static

from engine.runtime.plan_view import STEP_OP, step_summary
from netviz.session import BlobRef, OpRef, Session
from netviz.style import category_style, plain

if TYPE_CHECKING:
    from engine.catalogue.docs import OpDoc


def _shape(table: dict | None, blob: tuple[str, int]) -> Text:
    """Inferred shape and dtype of one blob version: ``1×64×?×? float32``; ``…`` while inferring;
    ``opaque`` for a blob that is no tensor (``?`` would say a shape could be known)."""
    if table is None:
        return Text("…", style="dim")
    info = table.get(blob)
    if info is not None and info.opaque:  # NOTE: a queue, DB, reader or mutex: no shape exists, not "unknown"
        return Text("opaque", style="dim")
    if info is None or info.shape is None:
        return Text("?", style="dim")
    dims = "×".join("?" if d is None else str(d) for d in info.shape) or "scalar"
    dtype = str(info).partition(" ")[2]
    return Text.assemble(dims, (f" {dtype}" if dtype and dtype != "float32" else "", "dim"))


def _pc_outputs(session: Session, ref: OpRef) -> dict[str, Any]:
    """``{output: TensorInfo}`` of the op at the pc from its inputs' values now: exact where the static
    table says ``?`` (a made-up weight's shape is known only once it is made, e.g. resnet50's Softmax)."""
    dbg = session.debugger
    if dbg is None or session.pc != ref or not hasattr(dbg, "output_infos"):
        return {}
    from engine.runtime.shapes import TensorInfo  # noqa: PLC0415 - loaded: the debugger is running
    try:
        infos = dbg.output_infos()
    except Exception:  # noqa: BLE001 - NOTE: a rule refusing the inputs leaves the static shape shown
        return {}
    return {name: TensorInfo(shape, dtype) for name, (shape, dtype) in infos.items() if shape is not None}


def _arg(v: Any) -> str:
    """An argument as a human writes it: Caffe2 stores floats as float32, so ``0.7`` comes back
    as ``0.699999988079071``; the shortest float32 repr undoes that (``1e-05``, ``0.7``)."""
    import numpy as np  # noqa: PLC0415 - NumPy is off the first frame (the inspector fills after it)
    if isinstance(v, float):
        text = str(np.float32(v))
    elif isinstance(v, (list, tuple)) and v and all(isinstance(x, float) for x in v):
        text = "[" + ", ".join(str(np.float32(x)) for x in v) + "]"
    else:
        text = repr(v) if not isinstance(v, str) else v
    return text if len(text) <= 60 else text[:59] + "…"


class _Once:
    """A renderable rendered once per width: Textual measures a Static's height by rendering it,
    then renders it again to draw; a Rich Table is the costliest part of a step's repaint."""

    def __init__(self, renderable: Any) -> None:
        self.renderable = renderable
        self._segments: dict[Any, list[Segment]] = {}

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        # NOTE: no options.height in the key: Textual measures with none and draws with the widget's
        # height, but a Group of Text and a grid Table ignore it (the caller crops/pads the lines), so
        # one render per width serves both (it was 2-3 renders of the table per step)
        key = (options.max_width, options.min_width, options.justify, options.overflow,
               options.no_wrap, options.highlight, options.markup)
        if key not in self._segments:
            self._segments[key] = list(console.render(self.renderable, options))
        return self._segments[key]

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.renderable)


def _doc_rows(facts: Table, doc: OpDoc, warnings: list[str]) -> None:
    """Gradient status, every argument (unset ones dimmed with their default), in-place, schema."""
    facts.add_row("gradient", doc.gradient)
    facts.add_row("support", doc.support)
    # NOTE: the arguments that are set first; the unset ones folded into one row (ResNet-50's Conv has
    # 17 of them, which pushed its blobs off screen)
    unset = []
    for a in sorted(doc.args, key=lambda a: a.is_default and not a.required):
        if not a.is_default:
            facts.add_row(f"·{a.name}", plain(_arg(a.value)))
        elif a.required:
            facts.add_row(f"·{a.name}", Text("required, not set", style="bold #DB4437"))
        else:
            unset.append(f"{a.name}={_arg(a.value)}" if a.known_default and a.value is not None else a.name)
    if unset:
        facts.add_row(Text(f"+{len(unset)} unset", style="dim"), Text(", ".join(unset), style="dim"))
    for line in doc.inplace:
        facts.add_row("in-place", plain(line))
    for w in warnings:
        facts.add_row(Text("schema", style="bold #DB4437"), Text(w, style="#DB4437"))


def _if_rows(facts: Table, session: Session, ref: OpRef, d: dict) -> None:
    """An If's ``cond`` (its value at the version the If reads) and the branch it takes (or took)."""
    name, v = d["inputs"][0]
    value, _ = session.version_value(BlobRef(ref.path, name, v)) if session.debugger is not None else (None, "")
    if value is None or not hasattr(value, "size") or value.size != 1:
        facts.add_row("cond", Text(f"{name}@{v}: no value yet (the If takes then_net when it is true)", style="dim"))
        return
    import numpy as np  # noqa: PLC0415 - NumPy is off the first frame (the inspector fills after it)
    truth = bool(np.asarray(value.get() if hasattr(value, "get") else value).reshape(()))
    facts.add_row("cond", plain(f"{name}@{v} = {truth}"))
    has_else = "else_net" in d["subnets"]
    branch = "then_net" if truth else "else_net" if has_else else "neither (no else_net)"
    tense = "took" if session.record(ref) is not None and not session.stale(ref) else "takes"
    facts.add_row("branch", Text(f"{tense} {branch}", style="bold #4285F4"))


class OpInspector(Static):
    """Shows :meth:`Session.op_details` of the selected op."""

    def show(self, session: Session, ref: OpRef | None) -> None:
        if ref is None:
            self.update(Text("no op selected", style="dim"))
            return
        from engine.catalogue.docs import op_doc  # noqa: PLC0415 - not before the first frame (it fills after)
        from engine.catalogue.schema import violations  # noqa: PLC0415

        d = session.op_details(ref)
        op = session.op(ref)
        doc = op_doc(op, [f"{n}@{v}" for n, v in d["inputs"]], [f"{n}@{v}" for n, v in d["outputs"]])
        head = Text.assemble((d["type"], "bold"), f"  op #{d['index']}", (f"  {d['name']}" if d["name"] else "", "italic"),
                             (f"  [{doc.category}]", category_style(doc.category)))
        step = op.type == STEP_OP  # a plan's execution step (engine.runtime.plan_view), not an op
        about = (f"a plan's execution step{': ' + step_summary(op) if step_summary(op) else ''}" if step
                 else doc.description or "not a Caffe2 op")
        head.append("\n" + about, style="dim" if doc.caffe2 or step else "bold #DB4437")
        if d["backward"]:
            head.append(f"\ngradient op for forward op #{d['forward_op']}" if d["forward_op"] is not None
                        else "\ngradient op (loss seed)", style="#DB4437")
        elif d.get("optimizer"):
            head.append("\noptimizer op (updates parameters after the backward pass)", style="#DB4437")
        for finding in d.get("lint", []):  # NOTE: engine.analysis.lint: Caffe2 computes other values or refuses here
            head.append(f"\n⚑ {finding}", style="bold #F4B400")
        facts = Table.grid(padding=(0, 1))
        facts.add_column(style="dim")
        facts.add_column()
        facts.add_row("net", plain(d["net"]))
        facts.add_row("device", plain(d["device"]))
        facts.add_row("engine", plain(d["engine"]))
        if d["breakpoint"] is not None:
            facts.add_row("break", plain(d["breakpoint"].condition or "always"))
        if not step:
            _doc_rows(facts, doc, [w for w in violations(op) if doc.caffe2])
        if d["subnets"]:
            facts.add_row("subnets", plain(", ".join(d["subnets"])))
        if op.type == "If" and d["inputs"]:
            _if_rows(facts, session, ref, d)
        rec = session.record(ref)
        if rec is not None:
            if getattr(rec, "skipped", False):
                facts.add_row("ran", Text("skipped: its outputs were given (K), its kernel did not run",
                                          style="bold #F4B400"))
            else:
                ran = f"{rec.wall_s * 1e3:.3g} ms" + ("  (stale)" if session.stale(ref) else "")
                facts.add_row("ran", Text(ran, style="#F4B400" if session.stale(ref) else ""))
            ratio = getattr(rec, "update_ratio", None)
            if ratio is not None:
                facts.add_row("‖ΔW‖/‖W‖", f"{ratio:.4g}" if math.isfinite(ratio)
                              else Text("no ratio: ‖W‖ was 0 (a zero-initialised parameter)", style="dim"))
            if rec.has_inf_or_nan:
                facts.add_row("values", Text("NaN/Inf in an output", style="bold #CE93D8"))
            if rec.grad_norm is not None:
                facts.add_row("‖grad‖", f"{rec.grad_norm:.4g}")
        # NOTE: one blob per line, its shape on the next: a name or shape is never cut mid-token by a
        # column (`gpu_0/res2_0_br` / `anch2a_w@0`); only a name wider than the whole pane folds
        io = Text()
        table, now = session.shapes_ready(ref.path), _pc_outputs(session, ref)
        for tag, blobs, slots in (("in", d["inputs"], doc.inputs), ("out", d["outputs"], doc.outputs)):
            for (name, v), (slot, _) in zip(blobs, slots):
                ran = session.runtime_shape(BlobRef(ref.path, name, v)) if session.debugger is not None else None
                static = {(name, v): now[name]} if tag == "out" and name in now else table
                shape = _shape(static, (name, v)) if ran is None else Text(ran.replace(" float32", ""))
                io.append_text(Text.assemble(f"\n{tag:<3} ", (f"{slot} = ", "dim"), plain(f"{name}@{v}"),
                                             "\n    ", shape))
        self._replace(_Once(Group(head, facts, io)))

    def _size_updated(self, size: Size, virtual_size: Size, container_size: Size, layout: bool = True) -> bool:
        # NOTE: a leaf widget: Textual sets a resized widget's virtual size as a reactive that asks for
        # another layout of the whole screen (the second re-layout of each step); nothing lies inside
        # this one to lay out, so the new size is recorded without it
        return super()._size_updated(size, virtual_size, container_size, layout=False)

    def _replace(self, content: _Once) -> None:
        """Show `content`, re-laying out the screen only when its height differs from what is shown.

        Textual re-lays out the whole screen on a Static's update; when the new content is as tall
        as the old, the box keeps its size and a repaint is enough (the height is measured as
        Textual does; :class:`_Once` keeps that render for the drawing)."""
        width, height = self.content_size
        if not self.is_mounted or width <= 0:
            self.update(content)
            return
        self.update(content, layout=False)
        if self.visual.get_height(self.styles, width) != height:
            self.refresh(layout=True)
