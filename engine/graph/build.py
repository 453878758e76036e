"""Building the graph model (schema in :mod:`engine.graph`) from NetDefs."""
from __future__ import annotations

import gc
import re
from collections.abc import Mapping, Sequence
from typing import Any

import networkx as nx

from engine.model import opdef
from engine.model.optypes import RECURRENT
from engine.model.ssa import get_ssa, get_undefined_blobs
from proto import caffe2_pb2

__all__ = ["from_netdef", "from_model", "op_id", "blob_id", "net_prefix"]

NetPath = tuple[Any, ...]
_GRAD_NAME = re.compile(r"(_grad(_indices|_values|_autosplit_\d+)?|_autogen_grad)$")


def op_id(path: Sequence[Any]) -> str:
    """Node id of the op at `path`: ``("op", 12, "then_net", 3)`` → ``"op:12/then_net:3"``."""
    return "/".join(f"{path[j]}:{path[j + 1]}" for j in range(0, len(path), 2))


def net_prefix(net: NetPath) -> str:
    """``""`` for the top net, else ``"<parent op id>/<arg>/"``."""
    return f"{op_id(net[:-1])}/{net[-1]}/" if net else ""


def blob_id(name: str, version: int | None = None, net: NetPath = ()) -> str:
    """Node id of a blob: ``"blob:conv1@2"`` (SSA) / ``"blob:conv1"`` (compact), net-prefixed."""
    return f"{net_prefix(net)}blob:{name}" + ("" if version is None else f"@{version}")


class _Builder:
    def __init__(self, ssa: bool, params: Mapping[str, int], value_info: Mapping[str, Any],
                 shapes: Mapping[tuple[str, int], Any]) -> None:
        self.G = nx.MultiDiGraph()
        self.ssa = ssa
        self.params = params  # name -> version holding the init net's value
        self.value_info = value_info
        self.shapes = shapes
        self.nets: dict[NetPath, dict[str, Any]] = {}
        self.binds_in: list[tuple[str, str]] = []

    def blob(self, net: NetPath, name: str, version: int) -> str:
        """The node of `name`@`version` in `net`, created with its static attributes."""
        v = version if self.ssa else None
        node = blob_id(name, v, net)
        if node not in self.G:
            top = not net
            info = self.shapes.get((name, version)) if top else None
            vi = self.value_info.get(name) if top and version == 0 else None
            self.G.add_node(
                node, kind="blob", name=name, version=v, net=net, is_external_input=False,
                is_external_output=False, is_gradient=bool(_GRAD_NAME.search(name)),
                is_param=top and name in self.params and (not self.ssa or self.params[name] == version),
                is_undefined=False,
                shape=tuple(info.shape) if info else tuple(vi.shape) if vi else None,
                dtype=info.dtype if info else vi.data_type if vi else None)
        return node

    def add_net(self, net: caffe2_pb2.NetDef, path: NetPath, passes: Sequence[str],
                fwd_index: Sequence[int | None], versions: dict[str, int] | None = None,
                head: str = "op", info: dict[str, Any] | None = None
                ) -> tuple[dict[str, int], set[str]]:
        """Add `net`'s ops and blobs under net path `path`.

        Returns its final blob versions and the names it reads before writing them.
        """
        versions = {} if versions is None else versions
        start = dict(versions)
        for name in net.external_input:
            start.setdefault(name, 0)
        ssa, versions = get_ssa(net, versions)
        read_first = get_undefined_blobs(ssa)
        if info is None:
            info = self.nets[path] = {"name": net.name, "parent": None, "arg": None, "ops": [],
                                      "external_input": list(net.external_input),
                                      "external_output": list(net.external_output)}
        current = dict(start)
        G, blob, known = self.G, self.blob, self.G._node
        prefix = net_prefix(path) + "blob:"
        for i, (op, (ins, outs)) in enumerate(zip(net.op, ssa)):
            op_path = (head, i) if not path else (*path, i)
            node = op_id(op_path)
            if self.ssa:  # NOTE: inlined blob_id(): this loop is the whole cost on big nets
                in_nodes = [b if (b := f"{prefix}{n}@{v}") in known else blob(path, n, v)
                            for n, v in ins]
                out_nodes = [b if (b := f"{prefix}{n}@{v}") in known else blob(path, n, v)
                             for n, v in outs]
            else:
                in_nodes = [blob(path, n, v) for n, v in ins]
                out_nodes = [blob(path, n, v) for n, v in outs]
            subnets = opdef.subnets_of(op)
            current.update(ins)
            before = dict(current) if subnets else current
            current.update(outs)
            G.add_node(node, **{
                "kind": "op", "type": op.type, "name": op.name, "index": i, "path": op_path,
                "net": path, "pass": passes[i], "device": _device(op, net), "engine": op.engine,
                "args": opdef.args_of(op), "subnets": {}, "forward_index": fwd_index[i],
                "inputs": in_nodes, "outputs": out_nodes, "control_input": list(op.control_input),
                "op": op, "has_undefined_input": False})
            info["ops"].append(node)
            for k, b in enumerate(in_nodes):
                G.add_edge(b, node, key=f"in:{k}", kind="input", index=k)
            for k, b in enumerate(out_nodes):
                G.add_edge(node, b, key=f"out:{k}", kind="output", index=k)
                if passes[i] == "backward":
                    known[b]["is_gradient"] = True
            for arg, sub in subnets:
                self._subnet(node, op, arg, sub, before, current)
        if head == "op":
            self._flags(net, path, start, versions, read_first)
        return versions, read_first

    def _subnet(self, node: str, op: caffe2_pb2.OperatorDef, arg: str, sub: caffe2_pb2.NetDef,
                before: Mapping[str, int], after: Mapping[str, int]) -> None:
        attrs = self.G.nodes[node]
        sub_path = (*attrs["path"], arg)
        attrs["subnets"][arg] = sub_path
        name, _, k = arg.partition("[")
        if k:  # element of a `nets` list argument
            attrs["args"][name][int(k[:-1])] = sub_path
        else:
            attrs["args"][arg] = sub_path
        n = len(sub.op)
        sub_versions, reads = self.add_net(sub, sub_path, [attrs["pass"]] * n, [None] * n)
        self.nets[sub_path].update(parent=node, arg=arg)
        outputs = set(op.output)
        net = attrs["net"]
        for inner, outer in _bindings(op, sub_versions):
            if inner in reads and outer in before:
                self._bind(self.blob(net, outer, before[outer]), self.blob(sub_path, inner, 0),
                           node, arg, inner, outer, "in", False)
            if sub_versions.get(inner, 0) > 0 and outer in after:
                self._bind(self.blob(sub_path, inner, sub_versions[inner]),
                           self.blob(net, outer, after[outer]), node, arg, inner, outer, "out",
                           outer in outputs)

    def _bind(self, src: str, dst: str, op_node: str, arg: str, inner: str, outer: str,
              direction: str, via_output: bool) -> None:
        self.G.add_edge(src, dst, key=f"bind:{direction}", kind="bind", op=op_node, arg=arg,
                        inner=inner, outer=outer, direction=direction, via_output=via_output)
        if direction == "in":
            self.binds_in.append((src, dst))

    def _flags(self, net: caffe2_pb2.NetDef, path: NetPath, start: Mapping[str, int],
               final: Mapping[str, int], read_first: set[str]) -> None:
        nodes = self.G.nodes
        for name in net.external_input:
            nodes[self.blob(path, name, start[name])]["is_external_input"] = True
        for name in net.external_output:
            nodes[self.blob(path, name, final.get(name, 0))]["is_external_output"] = True
        for name in read_first - start.keys():
            node = nodes[self.blob(path, name, 0)]
            node["is_undefined"] = not node["is_param"]

    def finish(self) -> nx.MultiDiGraph:
        """Carry outer facts across bind edges (outermost first) and mark ops."""
        nodes = self.G.nodes
        for src, dst in sorted(self.binds_in, key=lambda e: len(nodes[e[1]]["net"])):
            inner, outer = nodes[dst], nodes[src]
            inner["is_undefined"] = False
            for k in ("is_param", "shape", "dtype"):
                inner[k] = outer[k] or inner[k]
        for node, attrs in self.G.nodes(data=True):
            if attrs["kind"] == "op":
                attrs["has_undefined_input"] = any(nodes[b]["is_undefined"] for b in attrs["inputs"])
        return self.G


def _device(op: caffe2_pb2.OperatorDef, net: caffe2_pb2.NetDef) -> tuple[int, int]:
    # NOTE: Caffe2 gives an op without its own device_option the net's one.
    if not op.HasField("device_option") and net.HasField("device_option"):
        d = net.device_option
        return (d.device_type, d.device_id if d.device_type else 0)
    return opdef.device_of(op)


def _bindings(op: caffe2_pb2.OperatorDef, sub_versions: Mapping[str, int]) -> list[tuple[str, str]]:
    """``(inner name, outer name)`` pairs by the op type's workspace rule."""
    if op.type == "Do":
        outer = [*op.input[:-1], *op.output[:-1]]
        inner = opdef.arg_value(op, "inner_blobs", [])
        idx = opdef.arg_value(op, "outer_blobs_idx", [])
        return [(i, outer[k]) for i, k in zip(inner, idx) if 0 <= k < len(outer)]
    pairs = [(n, n) for n in sub_versions]
    if op.type in RECURRENT:
        links = zip(opdef.arg_value(op, "link_internal", []), opdef.arg_value(op, "link_external", []))
        pairs += [(i, o) for i, o in links if i != o]
    return pairs


def from_netdef(net: caffe2_pb2.NetDef, init_net: caffe2_pb2.NetDef | None = None, *,
                ssa: bool = True, fwd_index: Sequence[int | None] | None = None,
                init_ops: bool = False, value_info: Mapping[str, Any] | None = None,
                shapes: Mapping[tuple[str, int], Any] | None = None) -> nx.MultiDiGraph:
    """Build the graph model of `net` (schema: :mod:`engine.graph`).

    Parameters
    ----------
    net : NetDef
        The predict net, or a net with its backward pass appended.
    init_net : NetDef, optional
        Blobs it writes are marked ``is_param``.
    ssa : bool
        One node per blob version (default) or one per blob name (compact drawing).
    fwd_index : list of int or None, optional
        The forward op index of each of the *last* ``len(fwd_index)`` ops, which are then
        the backward pass (``pass="backward"``); what ``gradient_ir.backward_net`` returns.
    init_ops : bool
        Also add the init net's ops (``pass="init"``, ids ``init:<i>``); versions then
        continue from the init net, so parameters are read at version 1.
    value_info : dict, optional
        ``modelio.InputInfo`` by blob name: shape/dtype of the input versions.
    shapes : dict, optional
        ``(name, version) → info`` with ``.shape`` and ``.dtype`` (shape inference).

    Examples
    --------
    >>> from engine.model.opdef import create_operator as op
    >>> G = from_netdef(caffe2_pb2.NetDef(op=[op("FC", ["X", "W", "b"], "Y"),
    ...                                      op("Relu", "Y", "Y")]))
    >>> G.nodes["op:1"]["inputs"], G.nodes["op:1"]["outputs"]
    (['blob:Y@1'], ['blob:Y@2'])
    """
    gc_was_enabled = gc.isenabled()
    gc.disable()  # NOTE: the build makes only acyclic garbage; collections made 100k ops 2x slower
    try:
        return _build(net, init_net, ssa, fwd_index, init_ops, value_info, shapes)
    finally:
        if gc_was_enabled:
            gc.enable()


def _build(net: caffe2_pb2.NetDef, init_net: caffe2_pb2.NetDef | None, ssa: bool,
           fwd_index: Sequence[int | None] | None, init_ops: bool,
           value_info: Mapping[str, Any] | None, shapes: Mapping[tuple[str, int], Any] | None
           ) -> nx.MultiDiGraph:
    n_bwd = len(fwd_index or ())
    n_fwd = len(net.op) - n_bwd
    if n_fwd < 0:
        raise ValueError(f"net {net.name}: fwd_index has {n_bwd} entries for {len(net.op)} ops")
    init_versions: dict[str, int] = {}
    if init_net is not None:
        init_versions = get_ssa(caffe2_pb2.NetDef(op=init_net.op))[1]
    written = {n: v for n, v in init_versions.items() if v > 0}
    b = _Builder(ssa, written if init_ops else dict.fromkeys(written, 0), value_info or {},
                 shapes or {})
    versions: dict[str, int] = {}
    init_info: dict[str, Any] = {"ops": []}
    if init_ops and init_net is not None:
        n = len(init_net.op)
        versions, _ = b.add_net(init_net, (), ["init"] * n, [None] * n, head="init", info=init_info)
    passes = ["forward"] * n_fwd + ["backward"] * n_bwd
    final, _ = b.add_net(net, (), passes, [None] * n_fwd + list(fwd_index or ()), versions)
    b.G.graph.update(name=net.name, ssa=ssa, nets=b.nets, init_ops=init_info["ops"],
                     num_forward=n_fwd, blob_versions=dict(final))
    return b.finish()


def from_model(model: Any, **kwargs: Any) -> nx.MultiDiGraph:
    """:func:`from_netdef` for a :class:`engine.model.modelio.Model` (predict, init, value_info)."""
    init = model.init if len(model.init.op) else None
    return from_netdef(model.predict, init, value_info=model.value_info, **kwargs)
