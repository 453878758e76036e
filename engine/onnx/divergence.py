"""The divergence localizer with ONNX Runtime as side B: `netviz diff NET MODEL.onnx` names the op
whose OWN error in ONNX Runtime starts a difference, not the last op that inherited it.

Side A is the net run in the engine (:func:`engine.onnx.export.prepare`: the same weights the export
saw).  Side B is the ONNX model run whole in ONNX Runtime (each op's output difference, and the
inherited one of its inputs) and, per Caffe2 op, the op's own ONNX nodes cut out into a small model
and run on side A's values of what they read: the op's own error in ONNX Runtime's setting, with
side B's initializers (a weight changed in the file is that op's own error).

An op's nodes are found by the values they make, from the export's ``netviz.values`` metadata
(op, Caffe2 blob, ONNX name): every node that makes one of the op's outputs and, back from there,
every node making an unnamed value it reads.  Reading stops at a graph input, an initializer or
another op's output, which side A's run supplies; an op's node therefore also stays its own after
the file was edited (a node added or an attribute changed).  The table and culprit line are
:mod:`engine.debugger.divergence`'s.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from engine.debugger.divergence import DEFAULT_TOL, Divergence, Side, Trace, localize
from engine.model.modelio import Model
from engine.onnx.export import (Source, ValueDiff, _int8_data, diff_against_runtime, onnx_dtype, onnx_module,
                                onnxruntime_module, value_pairs)
from proto import caffe2_pb2

__all__ = ["OpCut", "cut_ops", "localize_onnx", "onnx_rerun", "onnx_trace"]


@dataclass(frozen=True)
class OpCut:
    """One Caffe2 op's share of an ONNX model: its nodes (model order), the values they read from
    outside (graph inputs and other ops' outputs, by ONNX name), the initializers they read, and
    its outputs (Caffe2 blob -> ONNX name); `why` says why it cannot run alone (empty: it can)."""

    nodes: tuple[Any, ...]
    reads: tuple[str, ...]
    initializers: tuple[str, ...]
    outputs: dict[str, str]
    why: str = ""


def _subgraph_reads(node: Any) -> set[str]:
    """Outer values a node's subgraphs (If branches, Loop bodies) read: what their nodes read and no
    node, input or initializer of theirs makes."""
    out: set[str] = set()
    for attr in node.attribute:
        for g in [attr.g] if attr.HasField("g") else list(attr.graphs):
            made = {i.name for i in g.input} | {t.name for t in g.initializer}
            made |= {o for n in g.node for o in n.output}
            for n in g.node:
                out |= {x for x in _reads(n) if x and x not in made}
    return out


def _reads(node: Any) -> set[str]:
    return {x for x in node.input if x} | _subgraph_reads(node)


def cut_ops(net: caffe2_pb2.NetDef, model: Any) -> list[OpCut]:
    """Each top-level op's :class:`OpCut` of `model` (an op the export gave no ONNX value says why)."""
    g = model.graph
    maker = {o: k for k, n in enumerate(g.node) for o in n.output if o}
    inits = {t.name for t in g.initializer}
    graph_inputs = {i.name for i in g.input}
    named: dict[int, dict[str, str]] = {}
    for i, blob, name in value_pairs(net, model):
        named.setdefault(i, {})[blob] = name
    stops = {name for outs in named.values() for name in outs.values()} | graph_inputs | inits
    cuts = []
    for i in range(len(net.op)):
        outs = named.get(i, {})
        if not outs:
            cuts.append(OpCut((), (), (), {}, "no ONNX value: the export gave this op's outputs none"))
            continue
        mine: set[int] = set()
        todo = [maker[n] for n in outs.values() if n in maker]
        while todo:
            k = todo.pop()
            if k in mine:
                continue
            mine.add(k)
            todo += [maker[x] for x in _reads(g.node[k]) if x not in stops and x in maker]
        nodes = tuple(g.node[k] for k in sorted(mine))
        made = {o for n in nodes for o in n.output}
        read = sorted({x for n in nodes for x in _reads(n)} - made)
        lost = [x for x in read if x not in stops]
        why = (f"reads '{lost[0]}', which no op's value names" if lost
               else "" if nodes or all(n in inits for n in outs.values()) else "no ONNX node makes its outputs")
        cuts.append(OpCut(nodes, tuple(x for x in read if x not in inits), tuple(x for x in read if x in inits),
                          outs, why))
    return cuts


def _elem_types(model: Any) -> dict[str, int]:
    """ONNX name -> element type of every value the model declares."""
    g = model.graph
    vis = list(g.input) + list(g.output) + list(g.value_info)
    types = {v.name: v.type.tensor_type.elem_type for v in vis if v.type.HasField("tensor_type")}
    types.update({t.name: t.data_type for t in g.initializer})
    return types


class OnnxRerun:
    """Side B's re-run of one op: its cut of the model run alone in ONNX Runtime on side A's values
    (a :data:`engine.debugger.divergence.Rerun`)."""

    def __init__(self, model: Any, cuts: Sequence[OpCut], a: Trace, source_of: Mapping[str, tuple[int, str]]):
        self.model, self.cuts, self.a, self.source_of = model, cuts, a, source_of
        self.types = _elem_types(model)
        self.inits = {t.name: t for t in model.graph.initializer}

    def _value(self, name: str) -> Any:
        """Side A's value of ONNX value `name`: the output of the op that made it, else a start value."""
        if name in self.source_of:
            i, blob = self.source_of[name]
            return _int8_data(self.a.outputs[i].get(blob))
        return _int8_data(self.a.start.get(name))

    def __call__(self, b: Trace, op: caffe2_pb2.OperatorDef, j: int, state: Mapping[str, Any]
                 ) -> tuple[dict[str, Any] | None, str]:
        cut = self.cuts[j]
        if cut.why:
            return None, cut.why
        onnx = onnx_module()
        got = {blob: onnx.numpy_helper.to_array(self.inits[n]) for blob, n in cut.outputs.items() if n in self.inits}
        wanted = {blob: n for blob, n in cut.outputs.items() if n not in self.inits}
        if not wanted:
            return got, ""
        feeds = {n: np.asarray(self._value(n)) for n in cut.reads}
        missing = [n for n, v in feeds.items() if v.dtype == object]
        if missing:
            return None, f"no value of '{missing[0]}' from side A"
        try:
            ran = self._run(cut, feeds, list(wanted.values()))
        except Exception as e:  # NOTE: ONNX Runtime's refusal of the cut model is the row's note, not a stop
            text = " ".join(str(e).split()) or type(e).__name__
            return None, f"its nodes do not run alone in ONNX Runtime: {text[:100]}"
        got.update({blob: ran[n] for blob, n in wanted.items()})
        return got, ""

    def _run(self, cut: OpCut, feeds: Mapping[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        onnx, ort = onnx_module(), onnxruntime_module()
        h = onnx.helper
        ins = [h.make_tensor_value_info(n, onnx_dtype(v.dtype), v.shape) for n, v in feeds.items()]
        outs = [h.make_tensor_value_info(n, self.types.get(n, onnx.TensorProto.FLOAT), None) for n in outputs]
        graph = h.make_graph(list(cut.nodes), "op", ins, outs, [self.inits[n] for n in cut.initializers])
        m = h.make_model(graph, opset_imports=list(self.model.opset_import))
        m.ir_version = self.model.ir_version
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        return dict(zip(outputs, sess.run(outputs, dict(feeds))))


def onnx_trace(src: Source, model: Any, label: str = "onnxruntime",
               runtime: Sequence[ValueDiff] | None = None) -> Trace:
    """ONNX Runtime's whole run of `model` as a partial side: per op, the numeric values the export
    names (`runtime`: the rows of :func:`engine.onnx.export.diff_against_runtime`, when already run)."""
    outputs: list[dict[str, Any]] = [{} for _ in src.net.op]
    for r in diff_against_runtime(src, model) if runtime is None else runtime:
        outputs[r.op_index][r.blob] = r.runtime
    return _trace(src, Side(Model(src.net), label=label), outputs, partial=True)


def _trace(src: Source, side: Side, outputs: list[dict[str, Any]], *, partial: bool) -> Trace:
    writes: dict[str, list[int]] = {}
    for i, op in enumerate(src.net.op):
        for o in op.output:
            writes.setdefault(o, []).append(i)
    return Trace(side, src.net, dict(src.values), {}, outputs, "cpu", writes, partial=partial)


def engine_side(src: Source, label: str = "engine") -> Trace:
    """The engine's run :func:`engine.onnx.export.prepare` made, as side A."""
    return _trace(src, Side(Model(src.net), label=label), [dict(t) for t in src.trace], partial=False)


def localize_onnx(src: Source, model: Any, *, tol: float = DEFAULT_TOL,
                  runtime: Sequence[ValueDiff] | None = None) -> Divergence:
    """Each op's output, own and inherited error between the engine (side A) and ONNX Runtime (side B),
    and the culprit; each side's first NaN/Inf back to its origin (`runtime`: as :func:`onnx_trace`).
    Its traces are the two runs (side B partial): for :func:`onnx_rerun`, not for
    :mod:`engine.debugger.descend`, which re-runs subnets in netviz.

    Examples
    --------
    >>> from engine.onnx.export import export, prepare
    >>> src = prepare("examples/mlp_forward/predict_net.pb")
    >>> localize_onnx(src, export(src).model).culprit is None
    True
    """
    from engine.debugger.provenance import explain_nonfinite  # noqa: PLC0415 - only for NaN/Inf

    a, b = engine_side(src), onnx_trace(src, model, runtime=runtime)
    d = localize(a, b, tol=tol, rerun=onnx_rerun(model, a))
    bad = [f"{t.side.label}: {line}" for t in (a, b)
           for line in explain_nonfinite(t.net.op, t.outputs, t.start, params=src.params)]
    return replace(d, nonfinite=tuple(bad), traces=(a, b))


def onnx_rerun(model: Any, a: Trace) -> OnnxRerun:
    """Side B's re-run of one op for side A's run `a` of the net: what :func:`localize_onnx` uses, and an
    inspector's :func:`engine.debugger.divergence.op_values` after it."""
    source_of = {name: (i, blob) for i, blob, name in value_pairs(a.net, model)}
    return OnnxRerun(model, cut_ops(a.net, model), a, source_of)
