"""Write a :class:`~netviz.drawing.Drawing` as graphviz (DOT, SVG, PNG, PDF) or net_drawer JSON.

Layout runs graphviz in subprocesses under one time budget.  :func:`plan_layout` picks the direction:
with ``rankdir="auto"`` a deep net is drawn top-to-bottom, a wide shallow one left-to-right.  A
top-to-bottom drawing (and every drawing with backward ops) is the folded ladder of
:mod:`netviz.ladder`: ``dot`` lays out and draws each piece on its own (85 % of the budget), netviz
places them and composes the SVG from the pieces' drawings (:mod:`netviz.ladder_svg`; a PNG or PDF is
drawn whole by ``neato -n2``), so the cost grows linearly; there is no ``sfdp`` fallback.  A
drawing of more than :data:`BIG_DRAWING` nodes is drawn ops-only, blob names on the edges.  When the
budget runs out the DOT file is written instead and the returned :class:`ExportResult` says how to
lay it out elsewhere; a crash is reported as a crash.  Existing files are never overwritten
without ``force``.
"""
from __future__ import annotations

import gc
import json
import math
import os
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import BlobNotFoundError, NetvizError
from netviz import style as S
from netviz.drawing import DrawOptions, Drawing, Index, draw_net, focus, ops_only_indexed
from netviz.graphviz_support import find_program, missing_program, pygraphviz
from netviz.layout import (DEFAULT_TIMEOUT, LayoutError, LayoutTimeout, run_graphviz, run_graphviz_many,
                           run_graphviz_stream)
from proto import caffe2_pb2

if TYPE_CHECKING:
    import pygraphviz as pgv

__all__ = ["ExportError", "ExportResult", "FORMATS", "LayoutPlan", "plan_layout", "build_agraph", "drawing_json",
           "export_drawing", "gc_paused",
           "export_net", "backward_drawing_net", "default_loss", "count_summary", "output_format"]

FORMATS = ("dot", "svg", "png", "pdf", "json")


class ExportError(NetvizError):
    """An output cannot be written (exists, unknown format, unwritable)."""


@dataclass(frozen=True, slots=True)
class ExportResult:
    """What was written: `path` (the DOT fallback on timeout), and a `note` for the user, if any."""

    path: Path
    timed_out: bool = False
    note: str = ""
    layout: str = ""  # how it was laid out, e.g. "dot, TB in 6 columns"; empty for DOT/JSON


#: Drawings with more nodes than this are drawn ops-only, blob names on the edges (:func:`netviz.drawing.ops_only`).
BIG_DRAWING = 500
#: The share of the time budget the pieces' ``dot`` runs get (a PNG or PDF's ``neato -n2`` gets what is left).
DOT_SHARE = 0.85
#: Points per node across (with the weights beside it) and per rank down, measured on ResNet-50 at fontsize 10.
_NODE_W, _NODE_H = 300.0, 76.0
#: Wrapped columns aim at this width:height ratio (a screen), never more than _MAX_COLUMNS columns.
_TARGET_RATIO, _MAX_COLUMNS = 1.5, 16


@dataclass(frozen=True, slots=True)
class LayoutPlan:
    """Flow direction and column count for a drawing, with the depth/width estimate behind them."""

    rankdir: str
    columns: int
    ranks: int
    width: int

    def describe(self) -> str:
        wrap = f" in {self.columns} columns" if self.columns > 1 else ""
        return f"{self.rankdir}{wrap} ({self.ranks} ranks deep, up to {self.width} nodes wide)"


def plan_layout(d: Drawing, rankdir: str = "auto") -> LayoutPlan:
    """Direction and wrapping that keep `d`'s picture near a screen's shape.

    The depth is the longest chain of data edges, the width the most nodes sharing a depth.  An
    explicit `rankdir` ("TB"/"LR") is kept as it is, one column.  With ``"auto"``, a net wider than
    deep flows LR; a deep one flows TB, wrapped into ``sqrt(depth·h / (width·w·ratio))`` columns.
    """
    level: dict[str, int] = {}
    preds: dict[str, list[str]] = {}
    for e in d.edges:
        if e.kind == "data":
            preds.setdefault(e.target, []).append(e.source)
    # NOTE: nodes are in execution order (an op, then the blob versions it writes): one pass ranks them.
    for nid in d.nodes:
        level[nid] = 1 + max((level.get(p, 0) for p in preds.get(nid, ())), default=0)
    ranks = max(level.values(), default=1)
    # NOTE: inputs (weights) have no writer and would all count at depth 1; they sit beside their reader.
    width = max(_counts(v for k, v in level.items() if k in preds or d.nodes[k].kind == "op"), default=1)
    if rankdir != "auto":
        return LayoutPlan(rankdir, 1, ranks, width)
    tall, wide = ranks * _NODE_H, width * _NODE_W
    if wide >= tall:
        return LayoutPlan("LR" if ranks * _NODE_W < 3 * width * _NODE_H * _TARGET_RATIO else "TB", 1, ranks, width)
    cols = max(1, min(_MAX_COLUMNS, round(math.sqrt(tall / (wide * _TARGET_RATIO)))))
    return LayoutPlan("TB", cols, ranks, width)


def _counts(values: Any) -> list[int]:
    out: dict[int, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return list(out.values())


def build_agraph(d: Drawing, plan: LayoutPlan | None = None) -> pgv.AGraph:
    """A pygraphviz graph of `d`: clusters as ``cluster_*`` subgraphs, styles from :mod:`netviz.style`.

    `plan` overrides the direction and wraps the drawing into columns (:func:`_wrap`).
    """
    g = pygraphviz().AGraph(directed=True, strict=False, name=d.name)
    g.graph_attr.update(S.GRAPH_ATTRS, rankdir=plan.rankdir if plan else d.options.rankdir, compound="true",
                        label=S.legend_html(), labelloc="t", labeljust="l")
    g.node_attr.update(S.NODE_DEFAULTS)
    subs: dict[str | None, pgv.AGraph] = {None: g}

    def sub(cid: str | None) -> pgv.AGraph:
        if cid not in subs:
            c = d.clusters[cid]
            name = cid if cid.startswith("cluster") else "cluster_" + _safe(cid)
            subs[cid] = sub(c.parent).add_subgraph(name=name, label=c.label,
                                                   **S.cluster_style(c.kind).attrs())
        return subs[cid]

    for n in d.nodes.values():
        sub(n.cluster).add_node(n.id, label=n.label, **n.style.attrs())
    col = _columns(d, plan.columns) if plan is not None and plan.columns > 1 and d.ops() else {}
    for e in d.edges:
        attrs = e.style.attrs()
        if e.kind == "subnet" and d.nodes[e.target].cluster:
            attrs["lhead"] = sub(d.nodes[e.target].cluster).name
        if col and col.get(e.source) != col.get(e.target):
            attrs["constraint"] = "false"
        g.add_edge(e.source, e.target, **attrs)
    if col:
        heads: dict[int, str] = {}
        for nid in d.nodes:
            heads.setdefault(col.get(nid, 0), nid)
        order = [heads[c] for c in sorted(heads)]
        g.add_subgraph(order, name="columns", rank="same")
        for a, b in zip(order, order[1:]):
            g.add_edge(a, b, style="invis")
    return g


def _columns(d: Drawing, columns: int) -> dict[str, int]:
    """Node id → column when `d` is wrapped into `columns` runs of consecutive ops, side by side.

    Each op goes to column ``index·columns // n_ops`` (subnet ops with their top-level op), each
    blob with its writer (an input with its first reader).  :func:`build_agraph` keeps edges between
    columns but drops their rank constraint, so every column starts at the top, and chains the
    columns' first nodes invisibly in one rank so they stand in order, left to right.
    """
    n_ops = 1 + max((n.path[0][0] if n.path else n.op_index or 0) for n in d.ops())
    col: dict[str, int] = {}
    for n in d.nodes.values():
        if n.kind == "op":
            col[n.id] = (n.path[0][0] if n.path else n.op_index or 0) * columns // n_ops
    for e in d.edges:  # writers first: a blob version has one
        if e.kind == "data" and e.source in col and e.target not in col:
            col[e.target] = col[e.source]
    for e in d.edges:
        if e.kind == "data" and e.target in col and e.source not in col:
            col[e.source] = col[e.target]
    return col


def _safe(cid: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in cid)


def drawing_json(d: Drawing) -> dict[str, list[dict[str, Any]]]:
    """net_drawer's ``GetGraphInJson`` shape: ``{"nodes": [...], "edges": [{source, target}]}``.

    Op nodes are ``{id, label, op_id, type: "op"}`` (label ``name/type`` or ``type``), blobs
    ``{id, label, type: "blob"}``; netviz adds ``backward`` / ``subnet`` where they apply.
    """
    nodes = []
    for n in d.nodes.values():
        item: dict[str, Any] = {"id": n.id, "label": n.label, "type": n.kind}
        if n.kind == "op":
            item.update(label=f"{n.name}/{n.op_type}" if n.name else n.op_type, op_id=n.op_index)
        if n.backward:
            item["backward"] = True
        if n.path:
            item["subnet"] = "/".join(f"op{i}:{arg}" for i, arg in n.path)
        nodes.append(item)
    edges = [{"source": e.source, "target": e.target} | ({} if e.kind == "data" else {"kind": e.kind})
             for e in d.edges]
    return {"nodes": nodes, "edges": edges}


def default_loss(net: caffe2_pb2.NetDef) -> str:
    """The blob ``--backward`` differentiates without ``--loss``: the last external output, else the last op's."""
    if net.external_output:
        return net.external_output[-1]
    for op in reversed(net.op):
        if op.output:
            return op.output[0]
    raise BlobNotFoundError(f"{net.name or 'net'}: no blob to use as loss (net has no outputs); pass --loss")


def backward_drawing_net(net: caffe2_pb2.NetDef, loss: str | None
                         ) -> tuple[caffe2_pb2.NetDef, int, list[int | None]]:
    """`net` with its backward pass for `loss` appended, the forward op count, and each grad op's origin.

    A training net (backward pass already in it) is drawn as it is, its own backward ops paired
    with their forward ops; `loss` then only has to be one it was differentiated for.
    """
    from engine.autodiff.training import backward_program, split_training_net
    split = split_training_net(net)
    if split.has_backward and (loss is None or loss in split.losses):
        full, origin, _ = backward_program(net)
        return full, len(full.op) - len(origin), origin
    from netviz.commands import loss_error
    loss = loss or default_loss(net)
    if (why := loss_error(net, split, loss)) is not None:
        raise BlobNotFoundError(why)
    full, origin, _ = backward_program(net, [loss], regenerate=True)
    return full, len(full.op) - len(origin), origin  # forward ops: may include saving Copies


_gc_lock = threading.Lock()
_gc_holds = 0
_gc_was_enabled = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while an export runs, as it was before afterwards.

    Why: an export allocates a few hundred container objects per op (drawing records, DOT lines, the
    pieces' json0) that reference counting frees; the collector finds no cycles among them but still
    walks them all at each full pass, and a growing heap triggers a full pass every ~25 % of growth:
    at 10k ops that was 5-6 passes (0.45 s) against 0-1 at 1k, a cost that grows faster than the net.
    Nested and concurrent exports (a TUI worker beside the main thread) share one pause: the
    collector comes back when the last one leaves, and only if it was on when the first one came.
    """
    global _gc_holds, _gc_was_enabled
    with _gc_lock:
        if _gc_holds == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_holds += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_holds -= 1
            if _gc_holds == 0 and _gc_was_enabled:
                gc.enable()


def export_net(net: caffe2_pb2.NetDef, out: str | Path | None, options: DrawOptions = DrawOptions(), *,
               backward: bool = False, loss: str | None = None, focus_on: str | None = None, depth: int = 2,
               fmt: str | None = None, timeout: float = DEFAULT_TIMEOUT, force: bool = False,
               rankdir: str | None = None, progress: Callable[[str], None] | None = None,
               flags: Collection[int] = ()) -> ExportResult:
    """Draw `net` and write it to `out` (format from `fmt` or the suffix); `flags` are the ops marked ``⚑``
    (:func:`netviz.drawing.draw_net`). See :func:`export_drawing`."""
    with gc_paused():
        n_fwd, origin = None, []
        if backward:
            net, n_fwd, origin = backward_drawing_net(net, loss)
        d = draw_net(net, options, n_fwd, origin, flags=flags)
        if focus_on is not None:
            d = focus(d, focus_on, depth)
        return export_drawing(d, out, fmt=fmt, timeout=timeout, force=force, rankdir=rankdir, progress=progress)


def output_format(out: str | Path | None, fmt: str | None) -> str:
    """The format to write: `fmt`, else `out`'s suffix; ExportError when unknown."""
    if out is None and fmt is None:
        raise ExportError("an output file is needed: -o OUT.dot|.svg|.png|.pdf|.json, or --json for stdout")
    f = (fmt or (Path(out).suffix.lstrip(".").lower() if out else "")).lower()
    if f not in FORMATS:
        raise ExportError(f"{out}: unknown output format {f or '(none)'!r}; use one of "
                          + ", ".join(f".{x}" for x in FORMATS))
    return f


def export_drawing(d: Drawing, out: str | Path | None, *, fmt: str | None = None,
                   timeout: float = DEFAULT_TIMEOUT, force: bool = False, rankdir: str | None = "auto",
                   progress: Callable[[str], None] | None = None) -> ExportResult:
    """Write `d` to `out` (``None`` with JSON: returned in the note, for stdout).

    `rankdir` ("TB", "LR" or "auto", see :func:`plan_layout`) overrides the drawing's direction;
    `timeout` is the budget of the whole layout (:func:`_lay_out`); `progress` gets one line per
    layout step (what runs, what it gave).

    Raises
    ------
    ExportError
        If `out` exists and not `force`, its format is unknown, or it cannot be written.
    LayoutError
        If graphviz is missing or fails.
    """
    with gc_paused():
        return _export_drawing(d, out, fmt, timeout, force, rankdir, progress)


def _export_drawing(d: Drawing, out: str | Path | None, fmt: str | None, timeout: float, force: bool,
                    rankdir: str | None, progress: Callable[[str], None] | None) -> ExportResult:
    """:func:`export_drawing`'s work, with the cyclic garbage collector paused around it."""
    f = output_format(out, fmt)
    if out is None:
        if f != "json":
            raise ExportError("an output file (-o OUT.dot|.svg|.png|.pdf) is needed")
        return ExportResult(Path("-"), note=json.dumps(drawing_json(d), indent=1))
    path = Path(out)
    _check_writable(path, force)
    if f == "json":
        _atomic_write(path, json.dumps(drawing_json(d), indent=1).encode())
        return ExportResult(path)
    if f == "dot":
        _atomic_write(path, build_agraph(d, plan_layout(d, rankdir) if rankdir else None).string().encode())
        return ExportResult(path)
    whole, ix = d, None
    if len(d.nodes) > BIG_DRAWING and d.options.mode != "minimal":
        d, ix = ops_only_indexed(d)  # NOTE: blob names go on the edges: half the nodes to lay out and to read
    if find_program("dot") is None:  # NOTE: one line saying what to install, before any progress line
        raise LayoutError(missing_program("dot"))
    try:
        data, how = _lay_out(d, f, timeout, plan_layout(d, rankdir) if rankdir else None, progress or (lambda _: None),
                             ix)
    except LayoutTimeout:
        fallback = path.with_suffix(".dot")
        _check_writable(fallback, force)
        _atomic_write(fallback, build_agraph(whole, plan_layout(whole, rankdir) if rankdir else None).string().encode())
        return ExportResult(fallback, True, f"layout took longer than {timeout:g} s; wrote {fallback} instead. "
                            f"Lay it out elsewhere: `dot -T{f} {fallback} -o {path}` (or raise --timeout)")
    _atomic_write(path, data)
    return ExportResult(path, layout=how)


def _lay_out(d: Drawing, fmt: str, budget: float, plan: LayoutPlan | None,
             say: Callable[[str], None], ix: Index | None = None) -> tuple[bytes | list[str], str]:
    """Render `d` as `fmt` (`ix`: its :class:`~netviz.drawing.Index`, if made already); returns (bytes or
    text lines, how it was laid out).

    A top-to-bottom drawing (the auto plan, ``TB``, or any drawing with backward ops) is the folded
    ladder of :mod:`netviz.ladder`: ``dot`` lays out each piece (:data:`ladder.PIECE_NODES` nodes at
    most) within 85 % of `budget`, the pieces placed by netviz; an SVG is composed from the pieces' own
    ``dot`` drawings (:func:`netviz.ladder_svg.compose_svg`), a PNG or PDF rendered whole by ``neato -n2``
    in what is left, so the cost grows linearly.  A wide, shallow drawing (``LR``) is one ``dot`` run.  There
    is no ``sfdp`` fallback.  Ctrl-C kills the running programs (:func:`netviz.layout.run_graphviz_many`
    kills and reaps them) and nothing is written.

    Raises
    ------
    LayoutTimeout
        If the layout ran out of time.
    LayoutCrash
        If a graphviz program crashed.
    """
    from netviz import ladder, ladder_svg

    shape, start = plan.describe() if plan else "", time.monotonic()
    backward = any(n.role != "forward" for n in d.nodes.values())
    if not backward and (plan is None or plan.rankdir != "TB"):
        say(f"layout: dot{', ' + shape if shape else ''}, {len(d.nodes)} nodes, up to {budget:g} s …")
        data = run_graphviz(build_agraph(d, plan).string(), fmt, budget, "dot",
                            tick=lambda t: say(f"layout: dot still running, {t:.0f} s of up to {budget:g} s …"))
        say(f"layout: dot finished in {time.monotonic() - start:.1f} s")
        return data, f"dot{', ' + shape if shape else ''}"
    pieces = ladder.split(d, max(plan.columns if plan else 1, math.ceil(len(d.nodes) / ladder.PIECE_NODES)), ix)
    kind = "ladder" if backward else "columns"
    how = f"dot, TB {kind} in {pieces.count} piece{'s' * (pieces.count > 1)} placed by netviz"
    limit = budget * DOT_SHARE
    say(f"layout: {how}, {len(d.nodes)} nodes, up to {limit:.3g} s …")
    def still(t: float) -> None:
        say(f"layout: dot still running, {t:.0f} s of up to {limit:.3g} s …")
    svg = fmt == "svg"  # NOTE: the pieces' dot runs draw them too, while the next ones are written
    try:
        if svg:
            data = ladder_svg.draw_svg(d, pieces, lambda dots, take: run_graphviz_stream(
                dots, take, ladder.JOBS, "svg", limit, "dot", tick=still))
        else:
            layouts = ladder.run_pieces(ladder.piece_dots(d, pieces),
                                        lambda batches: run_graphviz_many(batches, "json0", limit, "dot", tick=still))
            whole = ladder.compose(d, pieces, layouts)
    finally:
        ladder.forget_styles()
    if not svg:
        left = max(budget - (time.monotonic() - start), 0.5)
        data = run_graphviz(whole, fmt, left, "neato", extra=["-n2"])
    count = f"{pieces.count} piece{'s' * (pieces.count > 1)}"
    say(f"layout: dot finished in {time.monotonic() - start:.1f} s ({count}, placed and drawn)")
    return data, how


def _check_writable(path: Path, force: bool) -> None:
    if path.exists() and not force:
        raise ExportError(f"{path}: already exists; pass --force to overwrite")
    if path.is_dir():
        raise ExportError(f"{path}: is a directory")
    if not path.parent.is_dir():
        raise ExportError(f"{path}: folder {path.parent} does not exist")


def _process_umask() -> int:
    """The umask, read once at import (``os.umask`` can only be read by setting it, which races threads)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _process_umask()


def _atomic_write(path: Path, data: bytes | Sequence[str]) -> None:
    """Write through a temporary file beside `path`, so a failure leaves no half file.

    `data` is bytes or text lines; lines go out a few thousand at a time, never joined whole (a composed
    10k-op SVG is 22 MB: one string of it and its encoded copy cost more per op than at 1k ops)."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "wb") as fh:
            if isinstance(data, bytes):
                fh.write(data)
            for i in range(0, 0 if isinstance(data, bytes) else len(data), 4096):
                fh.write(("\n".join(data[i:i + 4096]) + "\n").encode())
        # NOTE: mkstemp makes the file 0600; an exported diagram is an ordinary file (0644 less umask).
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except OSError as e:
        raise ExportError(f"{path}: cannot write: {e.strerror or e}") from e


def count_summary(d: Drawing) -> str:
    """``"N ops, M blobs, E edges, C clusters"`` for the CLI's closing line."""
    return (f"{len(d.ops())} ops, {len(d.blobs())} blobs, {len(d.edges)} edges, "
            f"{sum(c.kind == 'subnet' for c in d.clusters.values())} subnet clusters")

