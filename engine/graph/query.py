"""Queries over the graph model: order, neighbourhoods, name-scope groups, producers."""
from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from typing import Any

import networkx as nx

from engine.errors import BlobNotFoundError, GraphError

__all__ = ["op_order", "net_view", "subnet_view", "neighbourhood", "scope_of", "group_by_scope",
           "producers", "consumers", "ops", "blobs"]

_PASS_RANK = {"init": 0, "forward": 1, "backward": 2}
_PREFIX_TOKEN = re.compile(r"\d$")


def ops(G: nx.MultiDiGraph, net: tuple[Any, ...] | None = ()) -> list[str]:
    """Op node ids of `net` (``None``: every net), in execution order."""
    if net is None:
        return [n for n, k in G.nodes(data="kind") if k == "op"]
    return (list(G.graph["init_ops"]) if net == () else []) + list(G.graph["nets"][net]["ops"])


def blobs(G: nx.MultiDiGraph, net: tuple[Any, ...] | None = ()) -> list[str]:
    """Blob node ids of `net` (``None``: every net), in creation order."""
    return [n for n, d in G.nodes(data=True) if d["kind"] == "blob" and (net is None or d["net"] == net)]


def op_order(G: nx.MultiDiGraph, net: tuple[Any, ...] = ()) -> list[str]:
    """Op node ids of `net` in execution order: init ops, forward ops, backward ops.

    In SSA mode this is a topological order of the input/output edges (every read names a
    version written earlier).  Compact graphs have cycles (in-place ops); the execution
    order is still the one to draw and step in.

    Examples
    --------
    >>> from engine.graph import from_netdef
    >>> from engine.model.opdef import create_operator as op
    >>> from proto import caffe2_pb2
    >>> op_order(from_netdef(caffe2_pb2.NetDef(op=[op("Relu", "X", "Y"), op("Relu", "Y", "Y")])))
    ['op:0', 'op:1']
    """
    nodes = G.nodes
    return sorted(ops(G, net), key=lambda n: (_PASS_RANK[nodes[n]["pass"]], nodes[n]["index"]))


def net_view(G: nx.MultiDiGraph, net: tuple[Any, ...] = ()) -> nx.MultiDiGraph:
    """Read-only subgraph view of one net's ops and blobs (bind edges to other nets left out)."""
    members = {n for n, d in G.nodes(data="net") if d == net}
    return G.subgraph(members)


def subnet_view(G: nx.MultiDiGraph, op: str, arg: str) -> nx.MultiDiGraph:
    """The nested graph of op `op`'s subnet argument `arg` (``"then_net"``, ``"net"``…).

    Raises
    ------
    GraphError
        If `op` holds no subnet called `arg`.
    """
    subnets = G.nodes[op].get("subnets", {})
    if arg not in subnets:
        raise GraphError(f"op {op} {G.nodes[op].get('type')}: no subnet argument '{arg}'")
    return net_view(G, subnets[arg])


def neighbourhood(G: nx.MultiDiGraph, node: str, k: int = 1,
                  kinds: Iterable[str] = ("input", "output", "bind")) -> nx.MultiDiGraph:
    """Subgraph view of the nodes at most `k` edges from `node`, either direction.

    Op→blob→op is two edges, so ``k=2`` from an op reaches its neighbouring ops.  Only
    edges whose ``kind`` is in `kinds` are followed.  Cost is linear in what is visited.

    Raises
    ------
    GraphError
        If `node` is not in the graph.
    """
    if node not in G:
        raise GraphError(f"graph {G.graph.get('name')}: no node '{node}'")
    kinds = frozenset(kinds)
    seen, frontier = {node: 0}, deque([node])
    while frontier:
        n = frontier.popleft()
        if seen[n] == k:
            continue
        for adj in (G._succ[n], G._pred[n]):
            for m, edges in adj.items():
                if m not in seen and any(d["kind"] in kinds for d in edges.values()):
                    seen[m] = seen[n] + 1
                    frontier.append(m)
    return G.subgraph(seen)


def scope_of(name: str) -> str:
    """The group a blob name belongs to: its name scope, else its layer prefix.

    ``gpu_0/res2_0_branch2a`` → ``gpu_0/``; ``res2_0_branch2a`` → ``res2_0``;
    ``conv2_1`` → ``conv2_1``; ``pool5_7x7_s1`` → ``pool5``; no digit → the whole name.

    Examples
    --------
    >>> [scope_of(n) for n in ("gpu_0/conv1", "res2_0_branch2a", "inception_3a/1x1", "data")]
    ['gpu_0/', 'res2_0', 'inception_3a/', 'data']
    """
    if "/" in name:
        return name[:name.rfind("/") + 1]
    tokens = name.split("_")
    for j, tok in enumerate(tokens):
        if _PREFIX_TOKEN.search(tok):
            j += 1
            while j < len(tokens) and tokens[j].isdigit():
                j += 1
            return "_".join(tokens[:j])
    return name


def group_by_scope(G: nx.MultiDiGraph, net: tuple[Any, ...] = ()) -> dict[str, list[str]]:
    """``{scope: [op ids]}`` for `net`, keyed by :func:`scope_of` of each op's first output
    (first input for ops without outputs), groups and members in execution order."""
    groups: dict[str, list[str]] = {}
    nodes = G.nodes
    for op in op_order(G, net):
        blob = (nodes[op]["outputs"] or nodes[op]["inputs"] or [None])[0]
        key = scope_of(nodes[blob]["name"]) if blob else ""
        groups.setdefault(key, []).append(op)
    return groups


def _named(G: nx.MultiDiGraph, name: str, net: tuple[Any, ...]) -> list[str]:
    found = [n for n, d in G.nodes(data=True)
             if d["kind"] == "blob" and d["name"] == name and d["net"] == net]
    if not found:
        raise BlobNotFoundError(f"graph {G.graph.get('name')}: no op reads or writes blob '{name}'")
    return found


def producers(G: nx.MultiDiGraph, blob: str, net: tuple[Any, ...] = ()) -> list[int]:
    """Indices of the ops of `net` that write `blob` (a name, no version); init ops excluded.

    Raises
    ------
    BlobNotFoundError
        If no op of `net` reads or writes `blob`.

    Examples
    --------
    >>> from engine.graph import from_netdef
    >>> from engine.model.opdef import create_operator as op
    >>> from proto import caffe2_pb2
    >>> producers(from_netdef(caffe2_pb2.NetDef(op=[op("FC", ["X", "W", "b"], "Y"),
    ...                                            op("Relu", "Y", "Y")])), "Y")
    [0, 1]
    """
    nodes = G.nodes
    return sorted({nodes[u]["index"] for b in _named(G, blob, net)
                   for u, _, kind in G.in_edges(b, data="kind")
                   if kind == "output" and nodes[u]["pass"] != "init"})


def consumers(G: nx.MultiDiGraph, blob: str, net: tuple[Any, ...] = ()) -> list[int]:
    """Indices of the ops of `net` that read `blob` (a name, no version); init ops excluded.

    Raises
    ------
    BlobNotFoundError
        If no op of `net` reads or writes `blob`.
    """
    nodes = G.nodes
    return sorted({nodes[v]["index"] for b in _named(G, blob, net)
                   for _, v, kind in G.out_edges(b, data="kind")
                   if kind == "input" and nodes[v]["pass"] != "init"})
