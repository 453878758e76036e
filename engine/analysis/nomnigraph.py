"""Nomnigraph for netviz: Caffe2's dataflow-graph form of a NetDef, with matching and rewriting.

Caffe2 ships ``caffe2.python.nomnigraph`` (``NNModule``, ``NeuralNetOperator``, ``NNMatchGraph``,
…) as a thin Python layer over C++ bindings; scripts reach those bindings through
``workspace.C``.  This module is netviz's implementation of them, exported on :mod:`engine.caffe2.capi`
under Caffe2's names, so Caffe2's own pure-Python wrappers (``nomnigraph.py``,
``nomnigraph_transformations.py``) run on it unmodified.

The model, as in Caffe2:

* an :class:`NNModule` holds a **dataflow graph** (:class:`NNGraph`) whose nodes
  (:class:`NodeRef`) hold either an operator (:class:`NeuralNetOperator`) or a tensor
  (:class:`NeuralNetData`); edges run tensor -> operator (an input, in the op's input order) and
  operator -> tensor (an output).  Every write of a blob is a new tensor node (SSA-like), so an
  in-place op reads one ``Y`` node and writes another;
* a **control flow** of basic blocks fixes the op order: the NetDef's ops in order, then ops created
  later, placed by their data dependencies when the order is asked for (``getExecutionOrder``,
  ``convertToCaffe2Proto``);
* each operator built from an OperatorDef keeps it in its :class:`Annotation`, so converting back
  keeps the op's name, engine, arguments and device option; inputs and outputs are re-read from the
  graph's edges, so rewiring the graph rewires the NetDef.

Caffe2 facts kept (checked against Caffe2 1.10.2): ``SpatialBN`` operators are named
``BatchNormalization`` in the graph; operator nodes named as an op type Caffe2 has a converter
for (:data:`CONVERTER_TYPES`) go back to their stored OperatorDef unchanged, every other annotated
operator (SpatialBN's ``BatchNormalization`` included) gets an explicit
``device_option.device_type`` (the annotation's); an ``order`` argument is normalised to
``NCHW``/``NHWC``; external inputs no op reads are dropped, and external names keep the old
NetDef's order.

Where Caffe2's result is unspecified netviz picks the deterministic answer: external names new to
the old NetDef follow the order the graph first met them (Caffe2: hash order); reading the producer
of a tensor that has none, or an annotation of a tensor node, raises :class:`NomnigraphError`
(Caffe2: undefined behaviour, a crash); ``replaceSubgraph`` refuses input/output lists that miss a
boundary tensor (Caffe2 asserts it only in debug builds).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from google.protobuf.message import DecodeError

from engine.errors import GraphError
from proto import caffe2_pb2

__all__ = [
    "NomnigraphError", "NeuralNetOperator", "NeuralNetData", "Annotation", "Node", "Edge", "NodeRef",
    "Graph", "NNGraph", "NNSubgraph", "NNMatchGraph", "MatchPredicateRef", "NNModule",
    "from_netdef", "to_netdef", "NNModuleFromProtobuf", "NNModuleFromProtobufDistributed",
    "replaceProducer", "replaceAllUsesWith", "replaceAsConsumer", "matchSubgraph", "CONVERTER_TYPES",
]


class NomnigraphError(GraphError, RuntimeError):
    """A nomnigraph call on the wrong kind of node, an ill-formed graph or a bad argument
    (Caffe2 raises RuntimeError from ``CAFFE_ENFORCE`` in the same places)."""


#: Op types Caffe2 registers a nomnigraph converter for: they convert back to their stored
#: OperatorDef as it is (no device type is written into it).
CONVERTER_TYPES = frozenset({"Conv", "ConvTranspose", "Relu", "Sum", "SpatialBN", "Flatten", "Clip",
                             "AveragePool", "MaxPool", "Concat", "FC", "Declare", "Export"})
#: Op types whose graph node Caffe2 names differently.
_NODE_NAMES = {"SpatialBN": "BatchNormalization"}
#: Arguments a converter reads and requires to be an int (`i`) or a float (`f`).
_INT_ARGS = {"Conv": ("kernel", "stride", "pad", "dilation", "group"),
             "ConvTranspose": ("kernel", "stride", "pad", "group"),
             "AveragePool": ("kernel",), "MaxPool": ("kernel",),
             "Concat": ("axis", "add_axis"), "FC": ("axis", "axis_w")}
_FLOAT_ARGS = {"Clip": ("min", "max")}
_LAYOUTS = {"NCHW": "NCHW", "nchw": "NCHW", "NHWC": "NHWC", "nhwc": "NHWC"}


def _parse(cls: type, data: Any, what: str) -> Any:
    """A proto of class `cls` from bytes or from any message (Caffe2 takes anything with
    ``SerializeToString``)."""
    if not isinstance(data, (bytes, bytearray)):
        if not hasattr(data, "SerializeToString"):
            raise NomnigraphError(f"nomnigraph: {what} takes a {cls.__name__}, got {type(data).__name__}")
        data = data.SerializeToString()
    try:
        return cls.FromString(bytes(data))
    except DecodeError as e:
        raise NomnigraphError(f"nomnigraph: {what}: not a serialized {cls.__name__} ({e})") from e


# ---- node values ----------------------------------------------------------------------------

class NeuralNetOperator:
    """An operator value: its name (the op type, or Caffe2's kind name), its tensor layout
    (``NCHW``/``NHWC``/None, from an ``order`` argument) and its :class:`Annotation`."""

    def __init__(self, name: str) -> None:
        self._name, self.layout, self.annotation = str(name), None, None

    def getName(self) -> str:  # noqa: N802 (Caffe2's names throughout this module)
        return self._name

    def __repr__(self) -> str:
        return f"NeuralNetOperator({self._name!r})"


class NeuralNetData:
    """A tensor value: a blob name (one write of it, when the graph came from a NetDef)."""

    def __init__(self, name: str) -> None:
        self._name = str(name)

    def getName(self) -> str:  # noqa: N802
        return self._name

    def __repr__(self) -> str:
        return f"NeuralNetData({self._name!r})"


def _annotated(value: Any, what: str) -> Any:
    if value is None:
        raise NomnigraphError(f"nomnigraph annotation: no {what} has been set")
    return value


class Annotation:
    """Caffe2's ``Caffe2Annotation`` of an operator: the OperatorDef it came from, a device name
    and type, and the distributed-execution facts (key/length nodes, component levels).

    ``node.annotation`` is the node's own annotation (changes stick); ``operator_def`` and
    ``device_option`` read as copies and are set whole, as in Caffe2."""

    def __init__(self) -> None:
        self._op_def, self._has_op_def = caffe2_pb2.OperatorDef(), False
        self._device, self._device_type = "", 0
        self._key_node: NodeRef | None = None
        self._length_node: NodeRef | None = None
        self._component_levels: list[str] = []

    def copy(self) -> "Annotation":
        """An independent copy (what ``setAnnotation`` stores)."""
        a = Annotation()
        a._op_def.CopyFrom(self._op_def)
        a._has_op_def, a._device, a._device_type = self._has_op_def, self._device, self._device_type
        a._key_node, a._length_node = self._key_node, self._length_node
        a._component_levels = list(self._component_levels)
        return a

    def setDevice(self, device: str) -> None:  # noqa: N802
        self._device = str(device)

    def getDevice(self) -> str:  # noqa: N802
        return self._device

    def setDeviceType(self, device_type: int) -> None:  # noqa: N802
        self._device_type = int(device_type)

    def getDeviceType(self) -> int:  # noqa: N802
        return self._device_type

    def setKeyNode(self, node: "NodeRef") -> None:  # noqa: N802
        self._key_node = node

    def getKeyNode(self) -> "NodeRef":  # noqa: N802
        return _annotated(self._key_node, "key node")

    def setLengthNode(self, node: "NodeRef") -> None:  # noqa: N802
        self._length_node = node

    def getLengthNode(self) -> "NodeRef":  # noqa: N802
        return _annotated(self._length_node, "length node")

    def setComponentLevels(self, levels: Iterable[str]) -> None:  # noqa: N802
        self._component_levels = [str(s) for s in levels]

    def getComponentLevels(self) -> list[str]:  # noqa: N802
        return list(self._component_levels)

    def hasDeviceOption(self) -> bool:  # noqa: N802
        return self._op_def.HasField("device_option")

    @property
    def operator_def(self) -> caffe2_pb2.OperatorDef:
        if not self._has_op_def:
            raise NomnigraphError("nomnigraph annotation: no OperatorDef has been set")
        return _parse(caffe2_pb2.OperatorDef, self._op_def, "operator_def")

    @operator_def.setter
    def operator_def(self, op: Any) -> None:
        self._op_def, self._has_op_def = _parse(caffe2_pb2.OperatorDef, op, "operator_def"), True

    @property
    def device_option(self) -> caffe2_pb2.DeviceOption:
        if not self.hasDeviceOption():
            raise NomnigraphError("nomnigraph annotation: no DeviceOption has been set")
        return _parse(caffe2_pb2.DeviceOption, self._op_def.device_option, "device_option")

    @device_option.setter
    def device_option(self, d: Any) -> None:
        self._op_def.device_option.SetInParent()  # NOTE: an empty DeviceOption still counts as set.
        self._op_def.device_option.CopyFrom(_parse(caffe2_pb2.DeviceOption, d, "device_option"))


# ---- graphs ---------------------------------------------------------------------------------

class Edge:
    """A directed edge ``tail -> head``."""

    __slots__ = ("tail", "head")

    def __init__(self, tail: "Node", head: "Node") -> None:
        self.tail, self.head = tail, head


class Node:
    """A node of a :class:`Graph`: its value (``data``) and its in- and out-edges in the order
    they were made (that order is an operator's input and output order)."""

    __slots__ = ("data", "_in", "_out", "_id")

    def __init__(self, data: Any, ident: int) -> None:
        self.data, self._in, self._out, self._id = data, [], [], ident

    def _label(self) -> str:
        return f'label="{_dot_escape(str(self.data))}"'


def _dot_escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"')


def _dot(nodes: Iterable[Node], keep_edge: Callable[[Edge], bool]) -> str:
    """Graphviz text in Caffe2's layout: each node, then the edges leaving it."""
    lines = ["digraph G {", "rankdir=LR"]
    for n in nodes:
        lines.append(f"{n._id}[{n._label()},];")
        lines += [f"{e.tail._id} -> {e.head._id}[];" for e in n._out if keep_edge(e)]
    return "\n".join(lines + ["}"])


def _sccs(nodes: Sequence[Node], edges: Iterable[Edge]) -> list[list[Node]]:
    """Tarjan's strongly connected components, in Caffe2's order: roots taken in node order,
    successors in edge-creation order, components in the order they complete (reverse
    topological).  Iterative, so deep nets do not hit the recursion limit."""
    succ: dict[Node, list[Node]] = {n: [] for n in nodes}
    for e in edges:
        if e.tail in succ and e.head in succ:
            succ[e.tail].append(e.head)
    index: dict[Node, int] = {}
    low: dict[Node, int] = {}
    stack: list[Node] = []
    on_stack: set[Node] = set()
    out: list[list[Node]] = []

    def visit(v: Node) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)

    for root in nodes:
        if root in index:
            continue
        visit(root)
        work = [(root, 0)]
        while work:
            v, i = work[-1]
            if i < len(succ[v]):
                work[-1] = (v, i + 1)
                w = succ[v][i]
                if w not in index:
                    visit(w)
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
            if low[v] == index[v]:
                scc: list[Node] = []
                while not scc or scc[-1] is not v:
                    scc.append(stack.pop())
                    on_stack.discard(scc[-1])
                out.append(scc)
    return out


class Graph:
    """Caffe2's generic ``C.Graph``: nodes hold any Python object; ``str(g)`` is Graphviz text."""

    _node_type: type = Node

    def __init__(self) -> None:
        self._nodes: dict[Node, None] = {}  # NOTE: dicts keep creation order, as Caffe2's lists do.
        self._edges: dict[Edge, None] = {}
        self._next_id = 0

    def _add_node(self, data: Any) -> Any:
        self._next_id += 1
        n = self._node_type(data, self._next_id)
        self._nodes[n] = None
        return n

    def _add_edge(self, tail: Node, head: Node) -> Edge:
        e = Edge(tail, head)
        self._edges[e] = None
        tail._out.append(e)
        head._in.append(e)
        return e

    def _delete_edge(self, e: Edge) -> None:
        if e not in self._edges:
            raise NomnigraphError("nomnigraph deleteEdge: the edge is not in this graph")
        e.tail._out.remove(e)
        e.head._in.remove(e)
        self._edges.pop(e, None)

    def _delete_node(self, n: Node) -> None:
        if n not in self._nodes:
            return
        for e in list(n._in) + list(n._out):
            self._delete_edge(e)
        del self._nodes[n]

    def hasNode(self, n: Node) -> bool:  # noqa: N802
        return n in self._nodes

    def createNode(self, data: Any) -> Node:  # noqa: N802
        return self._add_node(data)

    def createEdge(self, a: Node, b: Node) -> Edge | None:  # noqa: N802
        return self._add_edge(a, b)

    def getMutableNodes(self) -> list[Any]:  # noqa: N802
        return list(self._nodes)

    def __repr__(self) -> str:
        return _dot(self._nodes, lambda e: True)


class NodeRef(Node):
    """A node of an :class:`NNGraph`: an operator or a tensor, with Caffe2's accessors.

    Accessors that only make sense for one kind (``inputs`` of an operator, ``producer`` of a
    tensor) raise :class:`NomnigraphError` on the other kind."""

    __slots__ = ()

    def _label(self) -> str:
        shape = ',shape="box"' if self.isOperator() else ""
        return f'label="{_dot_escape(self.getName())}"{shape}'

    def _need(self, kind: type, what: str) -> None:
        if not isinstance(self.data, kind):
            want = "an operator" if kind is NeuralNetOperator else "a tensor"
            raise NomnigraphError(f"nomnigraph node '{self.getName()}' ({self.getType()}): "
                                  f"{what} needs {want} node")

    def isOperator(self) -> bool:  # noqa: N802
        return isinstance(self.data, NeuralNetOperator)

    def isTensor(self) -> bool:  # noqa: N802
        return isinstance(self.data, NeuralNetData)

    def getType(self) -> str:  # noqa: N802
        return "Operator" if self.isOperator() else "Tensor" if self.isTensor() else "Unknown"

    def getName(self) -> str:  # noqa: N802
        return self.data.getName() if isinstance(self.data, (NeuralNetOperator, NeuralNetData)) else "Unknown"

    def getOperator(self) -> NeuralNetOperator:  # noqa: N802
        self._need(NeuralNetOperator, "getOperator")
        return self.data

    def getTensor(self) -> NeuralNetData:  # noqa: N802
        self._need(NeuralNetData, "getTensor")
        return self.data

    def getInputs(self) -> list["NodeRef"]:  # noqa: N802
        self._need(NeuralNetOperator, "inputs")
        return [e.tail for e in self._in]

    def getOutputs(self) -> list["NodeRef"]:  # noqa: N802
        self._need(NeuralNetOperator, "outputs")
        return [e.head for e in self._out]

    def hasProducer(self) -> bool:  # noqa: N802
        return bool(self._in)

    def getProducer(self) -> "NodeRef":  # noqa: N802
        self._need(NeuralNetData, "producer")
        if not self._in:
            raise NomnigraphError(f"nomnigraph tensor '{self.getName()}' has no producer")
        return self._in[0].tail

    def getConsumers(self) -> list["NodeRef"]:  # noqa: N802
        self._need(NeuralNetData, "consumers")
        return [e.head for e in self._out]

    def getAnnotation(self) -> Annotation:  # noqa: N802
        """The operator's annotation, made from the operator (its type) when it has none."""
        self._need(NeuralNetOperator, "annotation")
        if self.data.annotation is None:
            a = Annotation()
            a.operator_def = _operator_def(self)
            self.data.annotation = a
        return self.data.annotation

    def setAnnotation(self, annotation: Annotation) -> None:  # noqa: N802
        self._need(NeuralNetOperator, "setAnnotation")
        self.data.annotation = annotation.copy()

    def getOperatorPredecessors(self) -> list["NodeRef"]:  # noqa: N802
        """Producers of this operator's inputs (one per input that has a producer)."""
        return [t._in[0].tail for t in self.getInputs() if t._in]

    def getOperatorSuccessors(self) -> list["NodeRef"]:  # noqa: N802
        """Consumers of this operator's outputs (one per consuming edge)."""
        return [e.head for t in self.getOutputs() for e in t._out]

    type = property(getType)
    name = property(getName)
    operator = property(getOperator)
    tensor = property(getTensor)
    inputs = property(getInputs)
    outputs = property(getOutputs)
    producer = property(getProducer)
    consumers = property(getConsumers)
    annotation = property(getAnnotation, setAnnotation)

    def __repr__(self) -> str:
        return f"<NodeRef {self.getType()} {self.getName()!r}>"


class NNGraph(Graph):
    """The dataflow graph of an :class:`NNModule` (``nn.dataFlow``)."""

    _node_type = NodeRef

    def createNode(self, value: Any) -> NodeRef:  # noqa: N802
        """A node for a ``NeuralNetOperator``/``NeuralNetData`` (copied by name) or an
        OperatorDef (converted as a NetDef's op is; its inputs and outputs are not wired)."""
        if isinstance(value, NeuralNetOperator):
            return self._add_node(NeuralNetOperator(value.getName()))
        if isinstance(value, NeuralNetData):
            return self._add_node(NeuralNetData(value.getName()))
        if not hasattr(value, "SerializeToString"):
            raise NomnigraphError(f"nomnigraph createNode: takes an OperatorDef, a NeuralNetOperator "
                                  f"or a NeuralNetData, got {type(value).__name__}")
        return self._add_node(_operator_from_def(_parse(caffe2_pb2.OperatorDef, value, "createNode")))

    def createEdge(self, a: NodeRef, b: NodeRef) -> None:  # noqa: N802
        if not ((a.isOperator() and b.isTensor()) or (a.isTensor() and b.isOperator())):
            raise NomnigraphError(f"nomnigraph createEdge '{a.getName()}' -> '{b.getName()}': edges must "
                                  "join a NeuralNetOperator and a NeuralNetData")
        self._add_edge(a, b)

    def deleteEdge(self, a: NodeRef | Edge, b: NodeRef | None = None) -> None:  # noqa: N802
        """Delete an edge, or the edge ``a -> b`` when there is one."""
        if b is None:
            if not isinstance(a, Edge):
                raise NomnigraphError(f"nomnigraph deleteEdge: takes an edge or two nodes, got {type(a).__name__}")
            self._delete_edge(a)
            return
        edge = next((e for e in b._in if e.tail is a), None)
        if edge is not None:
            self._delete_edge(edge)

    def deleteNode(self, n: NodeRef) -> None:  # noqa: N802
        self._delete_node(n)

    def replaceNode(self, old: NodeRef, new: NodeRef) -> None:  # noqa: N802
        """`new` takes over `old`'s in- and out-edges (appended in order); `old` stays, unwired."""
        replaceAsConsumer(old, new)
        replaceAllUsesWith(old, new)

    @property
    def nodes(self) -> list[NodeRef]:
        return list(self._nodes)

    @property
    def operators(self) -> list[NodeRef]:
        return [n for n in self._nodes if n.isOperator()]

    @property
    def tensors(self) -> list[NodeRef]:
        return [n for n in self._nodes if n.isTensor()]


def _move_tail(e: Edge, tail: Node) -> None:
    e.tail._out.remove(e)
    e.tail = tail
    tail._out.append(e)


def _move_head(e: Edge, head: Node) -> None:
    e.head._in.remove(e)
    e.head = head
    head._in.append(e)


def replaceProducer(tensor: NodeRef, producer: NodeRef) -> None:  # noqa: N802
    """`producer` becomes the writer of `tensor` (the old producer loses that output)."""
    tensor.getProducer()
    _move_tail(tensor._in[0], producer)


def replaceAllUsesWith(old: NodeRef, new: NodeRef) -> None:  # noqa: N802
    """Every consumer of tensor `old` reads tensor `new` instead (same input slot)."""
    for e in list(old._out):
        _move_tail(e, new)


def replaceAsConsumer(old: NodeRef, new: NodeRef) -> None:  # noqa: N802
    """Operator `new` takes over every input of operator `old`, in order."""
    for e in list(old._in):
        _move_head(e, new)


class NNSubgraph:
    """A set of nodes (and edges) of one dataflow graph: a match result or a hand-made set.
    ``len()`` counts nodes, so an empty subgraph (no match) is falsy."""

    def __init__(self) -> None:
        self._nodes: dict[NodeRef, None] = {}
        self._edges: dict[Edge, None] = {}

    def addNode(self, node: NodeRef) -> None:  # noqa: N802
        self._nodes[node] = None

    def hasNode(self, node: NodeRef) -> bool:  # noqa: N802
        return node in self._nodes

    def induceEdges(self) -> None:  # noqa: N802
        """Add every edge of the graph that joins two of the subgraph's nodes."""
        for n in self._nodes:
            for e in n._out:
                if e.head in self._nodes:
                    self._edges[e] = None

    @property
    def nodes(self) -> list[NodeRef]:
        return list(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    def __repr__(self) -> str:
        return _dot(self._nodes, lambda e: e in self._edges)


# ---- matching -------------------------------------------------------------------------------

class _Predicate:
    """What a match-graph node accepts, and whether matching stops at it (non-terminal)."""

    def __init__(self, test: Callable[[NodeRef], bool], what: str, non_terminal: bool) -> None:
        self.test, self.what, self.non_terminal = test, what, non_terminal

    def __str__(self) -> str:
        return self.what


class MatchPredicateRef(Node):
    """A node of an :class:`NNMatchGraph`."""

    __slots__ = ()


class NNMatchGraph(Graph):
    """A pattern: operator nodes match by name, tensor nodes match any tensor, bare nodes match
    anything.  A strict node must account for every out-edge of the node it matches (each in
    turn against its own out-edges, in order); a non-strict one (the default) matches by itself."""

    _node_type = MatchPredicateRef

    def createNode(self, node: Any = None, strict: bool = False, *,  # noqa: N802
                   tensor: NeuralNetData | None = None) -> MatchPredicateRef:
        if isinstance(node, bool):  # NOTE: createNode(True) is Caffe2's any-node overload.
            node, strict = None, node
        node = tensor if node is None else node
        if isinstance(node, NeuralNetOperator):
            name = node.getName()
            pred = _Predicate(lambda n: n.isOperator() and n.getName() == name, name, not strict)
        elif isinstance(node, NeuralNetData):
            pred = _Predicate(NodeRef.isTensor, "Tensor", not strict)
        elif node is None:
            pred = _Predicate(lambda n: True, "*", not strict)
        else:
            raise NomnigraphError(f"nomnigraph NNMatchGraph.createNode: takes a NeuralNetOperator, a "
                                  f"NeuralNetData or nothing, got {type(node).__name__}")
        return self._add_node(pred)

    def createEdge(self, a: MatchPredicateRef, b: MatchPredicateRef) -> None:  # noqa: N802
        self._add_edge(a, b)


def _match(node: NodeRef, crit: MatchPredicateRef, matched: dict, sg: NNSubgraph) -> bool:
    """Caffe2's subgraph matcher (every pattern node counted once, all included), following
    out-edges: `crit`'s children match `node`'s out-edges one to one, in order."""
    if crit in matched:
        return matched[crit] is node
    pred = crit.data
    if not pred.test(node):
        return False
    if not pred.non_terminal:
        if len(crit._out) != len(node._out):
            return False
        for c_edge, edge in zip(crit._out, node._out):
            if not _match(edge.head, c_edge.head, matched, sg):
                return False
            sg._edges[edge] = None
    matched[crit] = node
    sg.addNode(node)
    return True


def matchSubgraph(node: NodeRef, pattern: NNMatchGraph) -> NNSubgraph:  # noqa: N802
    """The subgraph rooted at `node` that `pattern` matches, or an empty one.  The pattern's
    root is Caffe2's: a node of the last strongly connected component Tarjan's algorithm finds."""
    comps = _sccs(list(pattern._nodes), pattern._edges)
    if not comps:
        raise NomnigraphError("nomnigraph matchSubgraph: the match graph is empty")
    sg = NNSubgraph()
    return sg if _match(node, comps[-1][-1], {}, sg) else NNSubgraph()


# ---- NetDef conversion ----------------------------------------------------------------------

def _check_converter_args(op: caffe2_pb2.OperatorDef) -> None:
    """The argument types Caffe2's converter for `op.type` insists on."""
    args = {a.name: a for a in op.arg}
    names = list(_INT_ARGS.get(op.type, ()))
    if "kernel" in names and "kernel" not in args and "kernels" not in args:
        names += ["kernel_h", "kernel_w"] if "kernel_h" in args and "kernel_w" in args else []
    bad = [n for n in names if n in args and not args[n].HasField("i")]
    bad += [n for n in _FLOAT_ARGS.get(op.type, ()) if n in args and not args[n].HasField("f")]
    if bad:
        raise NomnigraphError(f"nomnigraph: op {op.type} '{op.name}': invalid '{bad[0]}' argument")


def _operator_from_def(op: caffe2_pb2.OperatorDef) -> NeuralNetOperator:
    """An operator value for `op`, keeping a copy of it in the annotation."""
    _check_converter_args(op)
    nn_op = NeuralNetOperator(_NODE_NAMES.get(op.type, op.type))
    order = next((a.s.decode("utf-8", "replace") for a in op.arg if a.name == "order"), "")
    nn_op.layout = _LAYOUTS.get(order)
    a = Annotation()
    a._op_def.CopyFrom(op)
    a._has_op_def = True
    if op.device_option.node_name:
        a.setDevice(op.device_option.node_name)
    a.setDeviceType(op.device_option.device_type)
    nn_op.annotation = a
    return nn_op


def _operator_def(node: NodeRef) -> caffe2_pb2.OperatorDef:
    """The OperatorDef of an operator node, without inputs and outputs (the caller adds them
    from the edges)."""
    nn_op: NeuralNetOperator = node.getOperator()
    a = nn_op.annotation
    if a is None:
        op = caffe2_pb2.OperatorDef(type=nn_op.getName())
    else:
        op = a.operator_def
        if nn_op.getName() not in CONVERTER_TYPES:
            op.device_option.device_type = a.getDeviceType()
    del op.input[:]
    del op.output[:]
    return op


def from_netdef(net: caffe2_pb2.NetDef, strict: bool = False) -> tuple["NNModule", list[NodeRef]]:
    """The NNModule of `net` and its operator nodes in op order.

    Each op is a node wired to the latest node of each blob it reads and to a new node for each
    blob it writes.  External inputs some op reads are the module's inputs; the others become
    lone tensor nodes (``strict``: an error); external outputs name the last write of the blob
    (``strict``: an error when nothing writes it, else it is skipped)."""
    m = NNModule()
    df, latest, ops = m._df, {}, []
    unread = dict.fromkeys(net.external_input)
    for op in net.op:
        node = df._add_node(None)
        for name in op.input:
            if name not in latest:
                latest[name] = df._add_node(NeuralNetData(name))
                if name in unread:
                    del unread[name]
                    m.inputs[latest[name]] = None
            df._add_edge(latest[name], node)
        for name in op.output:
            latest[name] = df._add_node(NeuralNetData(name))
            df._add_edge(node, latest[name])
        node.data = _operator_from_def(op)
        ops.append(node)
    if unread and strict:
        raise NomnigraphError(f"net {net.name}: external_input has {len(unread)} blobs no op reads: "
                              + " ".join(f'"{n}"' for n in unread))
    for name in unread:
        latest[name] = df._add_node(NeuralNetData(name))
    for name in net.external_output:
        if name in latest:
            m.outputs[latest[name]] = None
        elif strict:
            raise NomnigraphError(f"net {net.name}: external_output '{name}' is never written")
    m._blocks.append(list(ops))
    return m, ops


def _merge_external(nodes: Iterable[NodeRef], old: Sequence[str]) -> list[str]:
    """External names: those of `old` still external, in `old`'s order, then the new ones."""
    names: dict[str, None] = {}
    for n in nodes:
        if not n.isTensor():
            raise NomnigraphError(f"nomnigraph: operator '{n.getName()}' is listed as an external tensor")
        names[n.getName()] = None
    kept = [s for s in dict.fromkeys(old) if s in names]
    return kept + [s for s in names if s not in set(kept)]


def to_netdef(m: "NNModule", old: caffe2_pb2.NetDef | None = None) -> caffe2_pb2.NetDef:
    """The NetDef of `m`: `old`'s fields (name, type, arguments, …) with the module's ops in
    execution order, each op's inputs and outputs read from the graph."""
    net = caffe2_pb2.NetDef()
    if old is not None:
        net.CopyFrom(old)
    del net.op[:]
    for node in m.getExecutionOrder():
        op = _operator_def(node)
        op.input.extend(e.tail.getName() for e in node._in)
        op.output.extend(e.head.getName() for e in node._out)
        layout = node.data.layout
        if layout is not None:
            arg = next((a for a in op.arg if a.name == "order"), None) or op.arg.add(name="order")
            arg.s = layout.encode()
        net.op.append(op)
    alive = m._df._nodes
    ext_in = _merge_external((n for n in m.inputs if n in alive), net.external_input)
    ext_out = _merge_external((n for n in m.outputs if n in alive), net.external_output)
    del net.external_input[:]
    del net.external_output[:]
    net.external_input.extend(ext_in)
    net.external_output.extend(ext_out)
    return net


class NNModule:
    """Caffe2's ``NNModule``: a dataflow graph, the control flow that orders its operators, and
    the tensor nodes that are the net's external inputs and outputs."""

    def __init__(self) -> None:
        self._df = NNGraph()
        self._blocks: list[list[NodeRef]] = []
        self.inputs: dict[NodeRef, None] = {}
        self.outputs: dict[NodeRef, None] = {}

    def dataFlow(self) -> NNGraph:  # noqa: N802
        return self._df

    def createUniqueDataNode(self, prefix: str = "_unique") -> NodeRef:  # noqa: N802
        """A new tensor node named `prefix`, else ``prefix_0``, ``prefix_1``, … (the first name no
        node of the graph has)."""
        taken = {n.getName() for n in self._df._nodes}
        name, i = prefix, 0
        while name in taken:
            name, i = f"{prefix}_{i}", i + 1
        return self._df._add_node(NeuralNetData(name))

    def convertToCaffe2Proto(self, old: Any) -> bytes:  # noqa: N802
        return to_netdef(self, _parse(caffe2_pb2.NetDef, old, "convertToCaffe2Proto")).SerializeToString()

    def _coalesce(self) -> None:
        """Caffe2's ``coalesceInsertedDataDependencies``: deleted ops leave their block; an
        untracked op producing a tracked op's input goes just before it (until nothing moves);
        the remaining untracked ops form a new block in dataflow topological order; then, in
        each block, an op found after a consumer of its outputs moves before it, until stable."""
        alive = self._df._nodes
        self._blocks = [[n for n in b if n in alive] for b in self._blocks]
        tracked = {n for b in self._blocks for n in b}
        grew = True
        while grew:
            grew = False
            for block in self._blocks:
                for instr in list(block):
                    for t in instr.getInputs():
                        p = t._in[0].tail if t._in else None
                        if p is not None and p.isOperator() and p not in tracked:
                            block.insert(block.index(instr), p)
                            tracked.add(p)
                            grew = True
        new = {n for n in alive if n.isOperator() and n not in tracked}
        if new:
            comps = _sccs(list(alive), self._df._edges)
            self._blocks.append([n for comp in reversed(comps) for n in comp if n in new])
        for block in self._blocks:
            self._reorder(block)

    @staticmethod
    def _reorder(block: list[NodeRef]) -> None:
        """Move each op before any earlier consumer of its outputs (Caffe2's in-place pass over
        the instruction vector: the scan index keeps going after a move)."""
        for _ in range(len(block) ** 2 + 2):
            seen: set[NodeRef] = set()
            moved = 0
            for i in range(len(block)):
                instr = block[i]
                for c in (e.head for t in instr.getOutputs() for e in t._out):
                    if c in seen:
                        j1, j2 = block.index(instr), block.index(c)
                        del block[j1]
                        block.insert(j2, instr)
                        moved += 1
                seen.add(instr)
            if not moved:
                return
        raise NomnigraphError("nomnigraph: the dataflow graph has a cycle; its ops have no order")

    def getExecutionOrder(self) -> list[NodeRef]:  # noqa: N802
        """Every operator node in run order (see :meth:`_coalesce`)."""
        self._coalesce()
        return [n for b in self._blocks for n in b]

    def replaceSubgraph(self, sg: NNSubgraph, node: NodeRef,  # noqa: N802
                        inputs: Sequence[NodeRef], outputs: Sequence[NodeRef]) -> None:
        """Replace `sg` by operator `node`, which reads `inputs` and writes `outputs` in that order.

        `inputs` must list every tensor entering the subgraph and `inputs` + `outputs` every
        tensor leaving it; an output that is also a subgraph input gets a fresh unique tensor."""
        sg_in, sg_out = _boundary(sg)
        missing = [t for t in sg_in if t not in inputs] + [t for t in sg_out if t not in inputs and t not in outputs]
        if missing:
            raise NomnigraphError(f"nomnigraph replaceSubgraph: boundary tensor '{missing[0].getName()}' "
                                  "is not in the given inputs/outputs")
        doomed = dict(sg._nodes)
        for t in inputs:
            self._df._add_edge(t, node)
            doomed.pop(t, None)
        for t in outputs:
            if t in sg_in:
                self._df._add_edge(node, self.createUniqueDataNode())
                continue
            self._df._add_edge(node, t)
            doomed.pop(t, None)
        for n in doomed:
            self._df._delete_node(n)

    def deleteSubgraph(self, sg: NNSubgraph) -> None:  # noqa: N802
        for n in list(sg._nodes):
            self._df._delete_node(n)


def _boundary(sg: NNSubgraph) -> tuple[list[NodeRef], list[NodeRef]]:
    """Tensors of `sg` entering it (no producer inside) and leaving it (a consumer outside, or none)."""
    tensors = [n for n in sg._nodes if n.isTensor()]
    ins = [t for t in tensors if not t._in or t._in[0].tail not in sg._nodes]
    outs = [t for t in tensors if not t._out or any(e.head not in sg._nodes for e in t._out)]
    return ins, outs


# ---- the C-extension entry points -----------------------------------------------------------

def NNModuleFromProtobuf(data: bytes) -> tuple[NNModule, list[NodeRef]]:  # noqa: N802
    """``C.NNModuleFromProtobuf(serialized NetDef)``: the module and its op nodes in op order."""
    return from_netdef(_parse(caffe2_pb2.NetDef, data, "NNModuleFromProtobuf"))


def NNModuleFromProtobufDistributed(data: bytes, device_map: Mapping[str, bytes]) -> NNModule:  # noqa: N802
    """The module with a ``Declare`` op writing each external input and an ``Export`` op reading
    each external output; those of the blobs `device_map` names carry its DeviceOption.  Every
    name in the map must be such a blob, and only once."""
    m, _ = from_netdef(_parse(caffe2_pb2.NetDef, data, "NNModuleFromProtobufDistributed"))
    devices = {k: _parse(caffe2_pb2.DeviceOption, v, f"device map entry '{k}'") for k, v in device_map.items()}
    for t in m.inputs:
        m._df._add_edge(m._df._add_node(NeuralNetOperator("Declare")), t)
    for t in m.outputs:
        m._df._add_edge(t, m._df._add_node(NeuralNetOperator("Export")))
    m.inputs.clear()
    m.outputs.clear()
    seen: set[str] = set()
    for kind, tensor_of in (("Declare", NodeRef.getOutputs), ("Export", NodeRef.getInputs)):
        done: set[str] = set()
        for node in [n for n in m._df._nodes if n.isOperator() and n.getName() == kind]:
            tensors = tensor_of(node)
            name = tensors[0].getName() if tensors else None
            if name not in devices:
                continue
            if name in done:
                raise NomnigraphError(f"nomnigraph: blob '{name}' has two {kind} ops; its device is ambiguous")
            done.add(name)
            node.getAnnotation().device_option = devices[name]
        seen |= done
    unused = [k for k in devices if k not in seen]
    if unused:
        raise NomnigraphError("nomnigraph: the device map names blobs that are not external inputs "
                              "or outputs: " + " ".join(f'"{k}"' for k in unused))
    return m
