"""Write a :class:`~netviz.drawing.Drawing` as graphviz (DOT, SVG, PNG, PDF) or net_drawer JSON.

Layout runs graphviz in a subprocess with a time limit; when it runs out, the DOT file is written
instead and the returned :class:`ExportResult` says how to lay it out elsewhere.  Existing files
are never overwritten without ``force``.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pygraphviz as pgv

from engine.errors import BlobNotFoundError, NetvizError
from netviz import style as S
from netviz.drawing import DrawOptions, Drawing, draw_net, focus
from netviz.layout import DEFAULT_TIMEOUT, LayoutTimeout, run_graphviz
from proto import caffe2_pb2

__all__ = ["ExportError", "ExportResult", "FORMATS", "build_agraph", "drawing_json", "export_drawing",
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


def build_agraph(d: Drawing) -> pgv.AGraph:
    """A pygraphviz graph of `d`: clusters as ``cluster_*`` subgraphs, styles from :mod:`netviz.style`."""
    g = pgv.AGraph(directed=True, strict=False, name=d.name)
    g.graph_attr.update(S.GRAPH_ATTRS, rankdir=d.options.rankdir, compound="true")
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
    for e in d.edges:
        attrs = e.style.attrs()
        if e.kind == "subnet" and d.nodes[e.target].cluster:
            attrs["lhead"] = sub(d.nodes[e.target].cluster).name
        g.add_edge(e.source, e.target, **attrs)
    return g


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
    from engine.training import backward_program, split_training_net
    split = split_training_net(net)
    if split.has_backward and (loss is None or loss in split.losses):
        full, origin, _ = backward_program(net)
        return full, len(full.op) - len(origin), origin
    fwd = [op for op, s in zip(net.op, split.sections) if s == "forward"]
    loss = loss or default_loss(net)
    if not any(loss in op.output for op in fwd):
        raise BlobNotFoundError(f"{net.name or 'net'}: no op writes loss blob '{loss}'")
    full, origin, _ = backward_program(net, [loss], regenerate=True)
    return full, len(full.op) - len(origin), origin  # forward ops: may include saving Copies


def export_net(net: caffe2_pb2.NetDef, out: str | Path | None, options: DrawOptions = DrawOptions(), *,
               backward: bool = False, loss: str | None = None, focus_on: str | None = None, depth: int = 2,
               fmt: str | None = None, timeout: float = DEFAULT_TIMEOUT, force: bool = False) -> ExportResult:
    """Draw `net` and write it to `out` (format from `fmt` or the suffix). See :func:`export_drawing`."""
    n_fwd, origin = None, []
    if backward:
        net, n_fwd, origin = backward_drawing_net(net, loss)
    d = draw_net(net, options, n_fwd, origin)
    if focus_on is not None:
        d = focus(d, focus_on, depth)
    return export_drawing(d, out, fmt=fmt, timeout=timeout, force=force)


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
                   timeout: float = DEFAULT_TIMEOUT, force: bool = False) -> ExportResult:
    """Write `d` to `out` (``None`` with JSON: returned in the note, for stdout).

    Raises
    ------
    ExportError
        If `out` exists and not `force`, its format is unknown, or it cannot be written.
    LayoutError
        If graphviz is missing or fails.
    """
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
    dot = build_agraph(d).string()
    if f == "dot":
        _atomic_write(path, dot.encode())
        return ExportResult(path)
    try:
        data = run_graphviz(dot, f, timeout)
    except LayoutTimeout:
        fallback = path.with_suffix(".dot")
        _check_writable(fallback, force)
        _atomic_write(fallback, dot.encode())
        return ExportResult(fallback, True, f"layout took longer than {timeout:g} s; wrote {fallback} instead. "
                            f"Lay it out elsewhere: `dot -T{f} {fallback} -o {path}` (or raise --timeout)")
    _atomic_write(path, data)
    return ExportResult(path)


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


def _atomic_write(path: Path, data: bytes) -> None:
    """Write through a temporary file beside `path`, so a failure leaves no half file."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        # NOTE: mkstemp makes the file 0600; an exported diagram is an ordinary file (0644 less umask).
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except OSError as e:
        raise ExportError(f"{path}: cannot write: {e.strerror or e}") from e


def count_summary(d: Drawing) -> str:
    """``"N ops, M blobs, E edges, C clusters"`` for the CLI's closing line."""
    return (f"{len(d.ops())} ops, {len(d.blobs())} blobs, {len(d.edges)} edges, "
            f"{sum(c.kind == 'subnet' for c in d.clusters.values())} subnet clusters")

