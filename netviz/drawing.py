"""What a diagram of a net contains: styled nodes, edges and clusters, before any layout.

One :class:`Drawing` serves ``netviz export`` (as DOT/SVG/… or net_drawer JSON) and the TUI canvas.
Modes follow Caffe2's ``net_drawer``: ``full`` draws ops and blobs with a new blob node per write
(labelled with the plain name), ``ssa`` is the same graph with blob nodes labelled ``name@v``,
``minimal`` draws ops only, one edge from the last producer of each input (``minimal_dependency``
keeps only edges not implied by others: the transitive reduction).

Subnets of If/While/Do/RecurrentNetwork are drawn as clusters (``cluster``), in the main graph
(``inline``), or not at all (``none``).  Inside If/While/RecurrentNetwork subnets, names read
before any inner write are the outer blobs, so edges run from the outer node into the cluster.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any


from engine.errors import GraphError
from engine.model.opdef import subnets_of
from engine.model.optypes import CONTROL_FLOW, RECURRENT, SHARED_WORKSPACE
from netviz import style as S
from proto import caffe2_pb2

__all__ = ["DrawOptions", "DrawNode", "DrawEdge", "DrawCluster", "Drawing", "draw_net", "focus", "subnet_at", "top_roles",
           "ops_only", "ops_only_indexed", "Index", "index", "MODES", "SUBNET_MODES"]

MODES = ("full", "minimal", "ssa")
SUBNET_MODES = ("cluster", "inline", "none")


@dataclass(frozen=True, slots=True)
class DrawOptions:
    """What to draw; the CLI flags of ``netviz export`` one to one."""

    mode: str = "full"
    minimal_dependency: bool = False
    subnets: str = "cluster"
    group_scopes: bool = False
    append_output: bool = False
    rankdir: str = "LR"


@dataclass(frozen=True, slots=True)
class DrawNode:
    """An op (``kind="op"``), blob version (``"blob"``) or note (``"note"``, e.g. an empty subnet).

    ``op_index`` is the op's index in its own net, ``path`` the subnet path from the top net
    (``()`` at top level, ``((99, "else_net"),)`` inside op #99's else_net); blobs carry
    ``blob`` and ``version``.
    """

    id: str
    kind: str
    label: str
    style: S.Style
    cluster: str | None = None
    op_index: int | None = None
    op_type: str = ""
    name: str = ""
    path: tuple[tuple[int, str], ...] = ()
    blob: str = ""
    version: int = 0
    backward: bool = False
    #: "forward", "gradient" or "optimizer": the ladder column it stands in (subnet nodes: their op's)
    role: str = "forward"


@dataclass(frozen=True, slots=True)
class DrawEdge:
    """``"data"`` (blob↔op or op→op), ``"forward_link"`` (backward op → its forward op) or ``"subnet"``."""

    source: str
    target: str
    kind: str
    style: S.Style


@dataclass(frozen=True, slots=True)
class DrawCluster:
    """A subnet (``kind="subnet"``) or name scope (``"scope"``); `parent` nests clusters."""

    id: str
    label: str
    kind: str
    parent: str | None


@dataclass
class Drawing:
    """Nodes (in insertion order), edges and clusters of one diagram."""

    name: str
    options: DrawOptions
    nodes: dict[str, DrawNode] = field(default_factory=dict)
    edges: list[DrawEdge] = field(default_factory=list)
    clusters: dict[str, DrawCluster] = field(default_factory=dict)
    shapes: Mapping[tuple[str, int], Any] = field(default_factory=dict)  # top net: (blob, version) → TensorInfo

    def ops(self) -> list[DrawNode]:
        return [n for n in self.nodes.values() if n.kind == "op"]

    def blobs(self) -> list[DrawNode]:
        return [n for n in self.nodes.values() if n.kind == "blob"]


@dataclass
class _Env:
    """Per name, its current blob (:data:`_Blob`)."""

    blobs: dict[str, _Blob] = field(default_factory=dict)

    def copy(self) -> _Env:
        return _Env(dict(self.blobs))


#: a name's current blob: its node id, version, producing op node id (None: external) and the node's role.
#: One tuple in one dict: three dicts keyed by name cost three look-ups in tables that leave the cache at 10k ops.
_Blob = tuple[str, int, "str | None", str]


def draw_net(net: caffe2_pb2.NetDef, options: DrawOptions = DrawOptions(),
             n_forward: int | None = None, origin: Sequence[int | None] = (),
             shapes: Mapping[tuple[str, int], Any] | None = None, flags: Collection[int] = ()) -> Drawing:
    """Build the drawing of `net`.

    Parameters
    ----------
    net : NetDef
    options : DrawOptions
    n_forward : int, optional
        Ops from this index on are generated backward ops (from
        :func:`engine.autodiff.gradient_ir.backward_net`); they and the gradient blobs they write get the
        backward style.
    origin : sequence of int or None
        One entry per backward op: the forward op it was made for (dashed link), or None.
    shapes : mapping, optional
        ``{(blob, version): TensorInfo}`` of the top net (:func:`engine.runtime.inference.infer_shapes`);
        known shapes are added under blob labels.
    flags : collection of int, optional
        Top-level ops where Caffe2 computes other values or refuses (:func:`engine.analysis.lint.lint_net`):
        their label ends in ``⚑``, as in the TUI's op list.

    Raises
    ------
    GraphError
        If an option value is unknown.
    """
    if options.mode not in MODES or options.subnets not in SUBNET_MODES:
        raise GraphError(f"{net.name or 'net'}: unknown drawing mode {options.mode!r}/{options.subnets!r}")
    d = Drawing(net.name or "unnamed", options, shapes=shapes or {})
    env = _Env()
    roles = top_roles(net, n_forward if n_forward is not None else len(net.op))
    _add_ops(d, net, env, (), None, roles)
    for i in flags:
        if (n := d.nodes.get(_op_id((), i))) is not None:
            d.nodes[n.id] = replace(n, label=f"{n.label} {S.FIX_MARK}")
    for i, j in enumerate(origin):
        src, dst = _op_id((), (n_forward or 0) + i), _op_id((), j) if j is not None else None
        if dst is not None and src in d.nodes:
            d.edges.append(DrawEdge(src, dst, "forward_link", S.FORWARD_LINK_EDGE))
    if options.mode == "minimal" and options.minimal_dependency:
        _reduce(d)
    return d


def subnet_at(net: caffe2_pb2.NetDef, path: Sequence[tuple[int, str]]) -> caffe2_pb2.NetDef:
    """The subnet reached by `path` (``[(op index, arg name), …]``, as :attr:`DrawNode.path`).

    Raises
    ------
    GraphError
        If a step names no op or no subnet of it.
    """
    for i, arg in path:
        subs = dict(subnets_of(net.op[i])) if 0 <= i < len(net.op) else {}
        if arg not in subs:
            raise GraphError(f"{net.name or 'net'}: op #{i} has no subnet {arg!r}")
        net = subs[arg]
    return net


def _op_id(path: tuple[tuple[int, str], ...], i: int) -> str:
    return "".join(f"op{j}:{arg}/" for j, arg in path) + f"op{i}"


def top_roles(net: caffe2_pb2.NetDef, n_forward: int) -> list[str]:
    """Each top-level op's ladder column: ``"forward"`` before `n_forward`, then ``"gradient"``, or
    ``"optimizer"`` for what :func:`engine.autodiff.training.split_training_net` calls an update (SGD,
    Adam, Iter, LearningRate, a WeightedSum writing a parameter): it is coloured and placed apart.
    Only the sections are read (:func:`engine.autodiff.training.sections_of`): pairing backward ops with
    forward ones regenerated the gradient pass, a third of drawing a 10k-op chain's backward pass."""
    roles = ["forward"] * min(n_forward, len(net.op)) + ["gradient"] * max(0, len(net.op) - n_forward)
    if n_forward < len(net.op):
        from engine.autodiff.training import OPTIMIZER, sections_of
        sections = sections_of(net)
        roles[n_forward:] = ["optimizer" if sections[i] == OPTIMIZER else "gradient"
                             for i in range(n_forward, len(net.op))]
    return roles


def _blob_node(d: Drawing, env: _Env, name: str, cluster: str | None, path: tuple, grad: bool,
               read: bool = False, producer: str | None = None, role: str = "forward") -> _Blob:
    """Current blob of `name` when read (made at version 0 if new), else a new version's; its node is drawn
    unless the drawing is ``minimal``.

    Like net_drawer, blobs appear when first used: declared but unused inputs are not drawn.
    """
    cur = env.blobs.get(name)
    if read and cur is not None:
        return cur
    v = 0 if read else (cur[1] if cur is not None else 0) + 1  # Caffe2 get_ssa: first write is version 1
    prefix = "".join(f"op{j}:{arg}/" for j, arg in path)
    nid = f"{prefix}{name}@{v}"
    env.blobs[name] = rec = (nid, v, producer, role)
    if d.options.mode != "minimal":
        st = S.blob_style(grad, role)
        label = S.blob_label(name, v, d.options.mode == "ssa")
        info = d.shapes.get((name, v)) if not path else None
        if info is not None and info.shape is not None:
            label += "\n" + str(info)
        d.nodes[nid] = DrawNode(nid, "blob", label, st,
                                cluster, path=path, blob=name, version=v, backward=grad, role=role)
    return rec


def _scope_cluster(d: Drawing, op: caffe2_pb2.OperatorDef, parent: str | None) -> str | None:
    """The name-scope cluster of an op (scope of its first output, else of its name), nested."""
    name = op.output[0] if op.output else op.name
    parts, outer = name.split("/")[:-1], parent or ""
    for k in range(len(parts)):
        cid = f"{outer}|scope:{'/'.join(parts[:k + 1])}"
        d.clusters.setdefault(cid, DrawCluster(cid, parts[k] + "/", "scope", parent))
        parent = cid
    return parent


def _add_ops(d: Drawing, net: caffe2_pb2.NetDef, env: _Env, path: tuple, cluster: str | None,
             roles: Sequence[str] | str) -> None:
    """Draw `net`'s ops; `roles` is one per op at top level, or the one role of the op holding a subnet."""
    blobs = d.options.mode != "minimal"
    for i, op in enumerate(net.op):
        role = roles if isinstance(roles, str) else roles[i]
        bw = role != "forward" and not path
        oc = _scope_cluster(d, op, cluster) if d.options.group_scopes else cluster
        oid = _op_id(path, i)
        label = S.op_label(op.type, i, op.name, list(op.output) if d.options.append_output else None)
        style = S.op_style(op.type, bw, op.type in CONTROL_FLOW, role, bool(set(op.input) & set(op.output)))
        d.nodes[oid] = DrawNode(oid, "op", label, style, oc, op_index=i, op_type=op.type, name=op.name, path=path,
                                backward=bw, role=role)
        edge = S.edge_style(role) if bw else S.DATA_EDGE
        parents: set[str] = set()  # NOTE: net_drawer's minimal graph has one edge per distinct parent
        for name in op.input:
            blob = _blob_node(d, env, name, cluster, path, False, read=True, role=role)
            src = blob[0] if blobs else blob[2]
            if src is not None and (blobs or src not in parents):
                parents.add(src)
                read = bw and blobs and blob[3] == "forward"  # NOTE: the role its node was drawn with
                d.edges.append(DrawEdge(src, oid, "data", S.READ_EDGE if read else edge))
        if op.type in CONTROL_FLOW and d.options.subnets != "none":
            _add_subnets(d, op, oid, env, path, i, cluster, role)
        for name in op.output:
            out = _blob_node(d, env, name, oc, path, bw, producer=oid, role=role)[0]
            if blobs:
                d.edges.append(DrawEdge(oid, out, "data", edge))


def _add_subnets(d: Drawing, op: caffe2_pb2.OperatorDef, oid: str, env: _Env, outer: tuple, i: int,
                 cluster: str | None, role: str) -> None:
    for arg, sub in subnets_of(op):
        path = outer + ((i, arg),)
        shared = op.type in SHARED_WORKSPACE or op.type in RECURRENT
        inner = env.copy() if shared else _Env()
        cid = cluster
        if d.options.subnets == "cluster":
            cid = "cluster_" + _op_id(path, 0).rsplit("/", 1)[0].replace(":", "_").replace("/", "__")
            d.clusters[cid] = DrawCluster(cid, f"{op.type} op#{i} {arg}: {sub.name or '-'}",
                                          "subnet", cluster)
        if not sub.op:
            nid = _op_id(path, 0) + ":empty"
            d.nodes[nid] = DrawNode(nid, "note", f"(empty {arg})", S.Style("note", S.BLUE, None, S.BLUE),
                                    cid, path=path, role=role)
        _add_ops(d, sub, inner, path, cid, role)
        first = _op_id(path, 0) + ("" if sub.op else ":empty")
        d.edges.append(DrawEdge(oid, first, "subnet", S.Style(color=S.BLUE, dashed=True)))


def _reduce(d: Drawing) -> None:
    """Keep only data edges between ops that no longer path implies (net_drawer minimal_dependency)."""
    import networkx as nx  # NOTE: here, not at the top: 0.2-0.8 s of the TUI's start-up for two CLI options

    g = nx.DiGraph((e.source, e.target) for e in d.edges if e.kind == "data")
    if not nx.is_directed_acyclic_graph(g):
        return
    keep = set(nx.transitive_reduction(g).edges)
    d.edges = [e for e in d.edges if e.kind != "data" or (e.source, e.target) in keep]


@dataclass(frozen=True, slots=True)
class Index:
    """A drawing's nodes numbered in its order, and each edge's ends as those numbers.

    Why: every stage of a ladder export walks the whole drawing, and a walk that looks each edge's ends up
    by name in a 20k-60k-entry dict leaves the L2 cache at 10k ops (a lookup cost ~28 ns at 1k ops, ~58 ns
    at 10k, measured); a list indexed by number stays in order in memory, flat per op at any size.  The
    names are looked up once here (or not at all: :func:`ops_only_indexed` numbers what it keeps), and
    :func:`ops_only` and the ladder's stages (:mod:`netviz.ladder`, :mod:`netviz.ladder_svg`) work on the numbers.
    """

    ids: list[str]
    nodes: list[DrawNode]
    src: list[int]
    dst: list[int]


def index(d: Drawing) -> Index:
    """The :class:`Index` of `d` as it is now (a drawing changed after is indexed anew)."""
    at = {nid: i for i, nid in enumerate(d.nodes)}
    return Index(list(d.nodes), list(d.nodes.values()), [at[e.source] for e in d.edges],
                 [at[e.target] for e in d.edges])


def ops_only(d: Drawing) -> Drawing:
    """`d` without blob nodes: an edge from each blob's writer to each of its readers, labelled with the
    blob's name (what a big export draws: half the nodes, every name kept).

    A blob no op writes stays a node when some op reads it first (``data``); one read only in later
    slots (a weight, a bias, a learning rate) is left out.  A blob no op reads (an output) stays.
    """
    return ops_only_indexed(d)[0]


def ops_only_indexed(d: Drawing) -> tuple[Drawing, Index]:
    """:func:`ops_only` and the :class:`Index` of what it gives (numbered as it is built: no look-up by name).

    The walks go by node number (:func:`index`): the writers, readers and slots are lists, not dicts keyed
    by name over the whole drawing (ops_only cost 6.6 / 9.6 / 13.2 µs an op at 1k / 10k / 30k ops that way)."""
    ix = index(d)
    nodes, ids = ix.nodes, ix.ids
    writer = [-1] * len(nodes)
    readers: dict[int, list[tuple[int, Any]]] = {}
    slot = [0] * len(nodes)
    first_slot = [False] * len(nodes)
    for e, s, t in zip(d.edges, ix.src, ix.dst):
        if e.kind != "data":
            continue
        sn = nodes[s]
        if sn.kind == "op" and nodes[t].kind == "blob":
            writer[t] = s
        elif sn.kind == "blob":
            readers.setdefault(s, []).append((t, e.style))
            if slot[t] == 0 and sn.version == 0:
                first_slot[s] = True
            slot[t] += 1
    num = [-1] * len(nodes)  # NOTE: old number → new (-1: left out)
    kept_ids: list[str] = []
    kept: list[DrawNode] = []
    for i, n in enumerate(nodes):
        if n.kind != "blob" or (first_slot[i] if writer[i] < 0 else i not in readers):
            num[i] = len(kept)
            kept_ids.append(ids[i])
            kept.append(n)
    out = Drawing(d.name, d.options, dict(zip(kept_ids, kept)), clusters=dict(d.clusters), shapes=d.shapes)
    src: list[int] = []
    dst: list[int] = []
    for e, s, t in zip(d.edges, ix.src, ix.dst):
        if (a := num[s]) >= 0 and (b := num[t]) >= 0:
            out.edges.append(e)
            src.append(a)
            dst.append(b)
    for blob, reads in readers.items():
        w = writer[blob]
        w = blob if w < 0 else w
        if num[w] < 0 or w == blob:
            continue
        label = nodes[blob].label.split("\n")[0]
        for target, st in reads:
            if num[target] >= 0:
                # NOTE: a gradient op's read of a forward blob crosses the columns: its name there is clutter
                extra = st.extra + (() if st is S.READ_EDGE else
                                    (("xlabel", label), ("fontsize", "8"), ("fontcolor", st.color)))
                # NOTE: Style(...) as dataclasses.replace would make it, at a fifth of its cost (one per edge)
                out.edges.append(DrawEdge(ids[w], ids[target], "data", S.Style(st.shape, st.color, st.fill,
                                                                                st.fontcolor, st.dashed, extra)))
                src.append(num[w])
                dst.append(num[target])
    return out, Index(kept_ids, kept, src, dst)


def focus(d: Drawing, target: str, depth: int) -> Drawing:
    """The part of `d` within `depth` ops of `target` (op index ``"#3"``/``"3"``, op name, or blob name).

    Raises
    ------
    GraphError
        If nothing in the drawing matches `target`.
    """
    seeds = [n.id for n in d.nodes.values() if _matches(n, target)]
    if not seeds:
        raise GraphError(f"{d.name}: no op or blob matches --focus {target!r}")
    import networkx as nx

    g = nx.Graph((e.source, e.target) for e in d.edges)
    g.add_nodes_from(d.nodes)
    # NOTE: with blob nodes an op-to-op step is 2 hops; +1 keeps an op's boundary blobs.
    def hops(s: str) -> int:
        return depth if d.options.mode == "minimal" else 2 * depth + (d.nodes[s].kind == "op")
    keep = set().union(*(nx.single_source_shortest_path_length(g, s, cutoff=hops(s)) for s in seeds))
    out = Drawing(d.name, d.options, clusters=dict(d.clusters))
    for nid, n in d.nodes.items():
        if nid in keep:
            out.nodes[nid] = replace(n, style=replace(n.style, color=S.AMBER, extra=S.FOCUS_NODE.extra)) if nid in seeds else n
    out.edges = [e for e in d.edges if e.source in keep and e.target in keep]
    return out


def _matches(n: DrawNode, target: str) -> bool:
    if n.kind == "blob":
        return n.blob == target and not n.path
    if n.kind != "op" or n.path:
        return False
    t = target.removeprefix("op").removeprefix("#")
    return (t.isdigit() and n.op_index == int(t)) or (bool(n.name) and n.name == target)
