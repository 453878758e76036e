"""Export a Caffe2 net to ONNX, and the reference run `netviz diff NET OUT.onnx` checks it against.

Each op type's converter sits beside its kernel (the ``# ---- onnx ----`` section of its family in
``engine/runtime/ops``), registered with :func:`engine.catalogue.registry.onnx_converter`.  This module is the driver:
it sets the net up exactly as ``netviz run`` does (init net, ``--input`` feeds, ``--random-params``
seeded and repeatable), runs it once in the engine (every value's shape and dtype, and the
reference values for the diff), then walks the ops and lets each converter emit ONNX nodes
through a :class:`Convert`.  Caffe2 blob names stay the ONNX value names; a blob written a second
time gets ``name@k`` for its k-th rewrite (netviz's SSA versions), so every intermediate the engine
saw can be named and compared.  A training net exports its forward section.

An op with no faithful ONNX form (no converter, or an argument its converter cannot express)
stops the export with one line naming every such op and where it is: never a silently wrong model.
``onnx`` is imported here only, when an export or a diff runs, so the engine stays cheap to import.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from engine.errors import ExecutionError, NetvizError, OnnxExportError  # noqa: F401  (OnnxExportError: export.py's callers import it from here)
from engine.model.opdef import arg_value, has_arg, subnets_of
from engine.catalogue.registry import ONNX
from engine.runtime.shapes import UNKNOWN, TensorInfo
from engine.runtime.inference import infer_op
from proto import caffe2_pb2

#: ONNX opset of an export unless --opset says otherwise (ONNX Runtime 1.14+ runs it; Resize, Split
#: and Squeeze take their sizes as inputs from 13 on, and every converter here is written for >= 13).
DEFAULT_OPSET = 17
MIN_OPSET = 13
INSTALL_HINT = "pip install 'netviz[onnx]'   (or: pip install onnx onnxruntime)"


def export_file(model: Any, feeds: Mapping[str, Any], target: str, *, random_params: bool = False,
                opset: int = DEFAULT_OPSET) -> str:
    """Export a loaded model to `target` (.onnx) and check it with ONNX Runtime against the engine:
    the one-line summary the TUI shows (raises OnnxExportError / NetvizError with one line)."""
    onnx = onnx_module()
    name = str(model.path or "net")
    model = trained_net(model)
    src = prepare_model(model, feeds, where=name, random_params=random_params)
    done = export(src, opset=opset, where=name)
    try:
        save_model(onnx, done.model, str(target))
    except OSError as e:
        raise NetvizError(f"{target}: cannot write it ({e.strerror or e})") from None
    rows = diff_against_runtime(src, done.model)
    bad = next((d for d in rows if not d.ok), None)
    check = (f"ONNX Runtime differs first at op #{bad.op_index} {bad.op_type} '{bad.blob}' (max abs {bad.max_abs:.3g})"
             if bad else f"{len(rows)} values equal in ONNX Runtime (max abs "
             f"{max((d.max_abs for d in rows), default=0.0):.3g})")
    return f"{target} (opset {opset}, {len(done.model.graph.node)} nodes; {check})"


def trained_net(model: Any) -> Any:
    """`model`, or for a plan loaded as a net of its steps (:func:`engine.runtime.plan_view.plan_program`)
    the net the plan trains with the nets before it as init (:func:`~engine.runtime.plan_view.plan_model`):
    a step op has no ONNX form, the net it runs has."""
    from engine.runtime.plan_view import STEP_OP, is_plan_file, plan_model  # noqa: PLC0415
    from engine.runtime.plandef import load_plan  # noqa: PLC0415

    path = getattr(model, "path", None)
    if not (len(model.predict.op) and all(op.type == STEP_OP for op in model.predict.op)
            and path is not None and is_plan_file(path)):
        return model
    return plan_model(load_plan(path), path)


class Refused(Exception):
    """Raised by a converter: why this op, with these arguments, has no faithful ONNX form."""


def onnx_module() -> Any:
    """The ``onnx`` package, or a one-line error saying how to install it."""
    try:
        import onnx  # noqa: PLC0415 - optional dependency, imported only for an export
    except ImportError:
        raise NetvizError(f"ONNX export needs the onnx package: {INSTALL_HINT}") from None
    return onnx


def onnxruntime_module() -> Any:
    """The ``onnxruntime`` package, or a one-line error saying how to install it."""
    try:
        import onnxruntime  # noqa: PLC0415
    except ImportError:
        raise NetvizError(f"netviz diff of an ONNX model needs onnxruntime: {INSTALL_HINT}") from None
    return onnxruntime


# ---- the net as both sides see it ------------------------------------------------------

@dataclass
class Source:
    """A net set up for export and diff: the forward net, the workspace before it runs, which of
    those blobs are graph inputs (fed or synthesised data) and which are parameters, and the
    engine's value of every top-level op's outputs (``trace[i]``: output blob -> value)."""

    net: caffe2_pb2.NetDef
    values: dict[str, Any]
    inputs: list[str]
    params: list[str]
    trace: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    workspace: Any = None


def _reads_before_writes(net: caffe2_pb2.NetDef) -> list[str]:
    seen, written = [], set()
    for op in net.op:
        # NOTE: a blob one op reads twice (WeightedSum given X0 twice) is one input, not two
        seen += [b for b in dict.fromkeys(op.input) if b not in written and b not in seen]
        written.update(op.output)
    return seen


def _subnet_reads(net: caffe2_pb2.NetDef, written: set[str] | None = None) -> list[str]:
    """Blobs the subnets of `net`'s ops read that nothing wrote before (a step net's weights are
    no inputs of its RecurrentNetwork op); the links' own blobs are among them, so callers keep
    only those the workspace holds."""
    written, out = set(written or ()), []
    for op in net.op:
        for _, sub in subnets_of(op):
            out += [b for b in _reads_before_writes(sub) + _subnet_reads(sub, written) if b not in written]
        written.update(op.output)
    return list(dict.fromkeys(out))


def _written(net: caffe2_pb2.NetDef) -> set[str]:
    """Every blob an op of `net` or of its subnets writes."""
    return {o for op in net.op for o in op.output} | {o for op in net.op for _, sub in subnets_of(op)
                                                       for o in _written(sub)}


def prepare(path: str, *, init: str | None = None, inputs: Sequence[str] = (), random_params: bool = False,
            param_width: int = 16, seed: int = 0, run: bool = True) -> Source:
    """Load `path` and set it up as ``netviz run`` does; with `run`, run it once (the trace)."""
    from engine.debugger import parse_input_spec  # noqa: PLC0415 - heavy, and only here
    from engine.model.modelio import load_model  # noqa: PLC0415

    return prepare_model(load_model(path, init=init), dict(parse_input_spec(s) for s in inputs), where=str(path),
                         random_params=random_params, param_width=param_width, seed=seed, run=run)


def prepare_model(model: Any, feeds: Mapping[str, Any], *, where: str = "net", random_params: bool = False,
                  param_width: int = 16, seed: int = 0, run: bool = True) -> Source:
    """:func:`prepare` for a loaded :class:`engine.model.modelio.Model` and feeds (arrays, shapes or
    ``RandomSpec``s, as the debugger takes them): what the TUI's export uses."""
    from engine.debugger.debugger import Debugger  # noqa: PLC0415
    from engine.autodiff.training import forward_net, split_training_net  # noqa: PLC0415

    notes = []
    split = split_training_net(model.predict)
    if split.has_backward:
        fwd = forward_net(model.predict, split)
        notes.append(f"training net: exported its forward section ({len(fwd.op)} of {len(model.predict.op)} "
                     "ops; ONNX holds no backward pass or optimizer)")
        model = replace(model, predict=fwd)
    dbg = Debugger(model, feeds, record_stats=False, budget_bytes=0, keep_budget=0,
                   synthesize_params=random_params, param_width=param_width, seed=seed)
    # NOTE: a copy before the run changes them, of the blobs an op writes only: a weight no op writes is
    # shared with the workspace (a 128 MB init net is not held twice)
    written = _written(model.predict)
    values = {k: _copy(v) if k in written else v for k, v in dbg.ws.values.items()}
    net = model.predict
    made_by_init = {o for op in model.init.op for o in op.output}
    data = set(feeds or {}) | {n for n in model.value_info if n not in made_by_init}
    needed = _reads_before_writes(net)
    missing = [b for b in needed if b not in values]
    if missing:
        hint = "" if random_params or len(model.init.op) else " (a net without weights: --random-params)"
        raise OnnxExportError(f"{where}: no value for {', '.join(missing[:6])}{' …' if len(missing) > 6 else ''}: "
                              f"give --input NAME=SHAPE[:DTYPE] for inputs{hint}")
    needed += [b for b in _subnet_reads(net) if b in values and b not in needed]
    src = Source(net, values, [b for b in needed if b in data], [b for b in needed if b not in data], notes=notes)
    src.workspace = dbg.ws
    if dbg.synthesized:
        notes.append(f"{len(dbg.synthesized)} parameters made up by --random-params (seed {seed})")
    if run:
        src.trace = engine_trace(src, seed)
    return src


def engine_trace(src: Source, seed: int = 0) -> list[dict[str, Any]]:
    """Run the net op by op in the engine, in the workspace :func:`prepare` set up (once: it
    changes); a copy of each op's outputs."""
    from engine.runtime import blocking, executor  # noqa: PLC0415

    ws = src.workspace
    trace = []
    with executor.random_source(np.random.default_rng(seed)), blocking.single_threaded():
        for i, op in enumerate(src.net.op):
            executor.run_op(op, ws, device="cpu", index=i, net_name=src.net.name)
            trace.append({o: _copy(ws.values.get(o)) for o in op.output})
    return trace


# ---- names ----------------------------------------------------------------------------

class Names:
    """Unique ONNX value names for a whole model (subgraphs included: ONNX wants no shadowing).

    A Caffe2 blob keeps its name the first time it is defined; each later write is ``name@k``."""

    def __init__(self) -> None:
        self.used: set[str] = set()
        self.writes: dict[str, int] = {}

    def version(self, blob: str) -> str:
        k = self.writes.get(blob, 0)
        name = blob if k == 0 else f"{blob}@{k}"
        while name in self.used:
            k += 1
            name = f"{blob}@{k}"
        self.writes[blob] = k + 1
        self.used.add(name)
        return name

    def temp(self, hint: str) -> str:
        k = len(self.used)
        while f"{hint}#{k}" in self.used:
            k += 1
        self.used.add(f"{hint}#{k}")
        return f"{hint}#{k}"


# ---- the graph being built ------------------------------------------------------------

_DTYPES = {np.dtype(np.float32): 1, np.dtype(np.uint8): 2, np.dtype(np.int8): 3, np.dtype(np.uint16): 4,
           np.dtype(np.int16): 5, np.dtype(np.int32): 6, np.dtype(np.int64): 7, np.dtype(np.bool_): 9,
           np.dtype(np.float16): 10, np.dtype(np.float64): 11}
_C2_TO_NP = {caffe2_pb2.TensorProto.FLOAT: np.float32, caffe2_pb2.TensorProto.INT32: np.int32,
             caffe2_pb2.TensorProto.INT64: np.int64, caffe2_pb2.TensorProto.BOOL: np.bool_,
             caffe2_pb2.TensorProto.UINT8: np.uint8, caffe2_pb2.TensorProto.INT8: np.int8,
             caffe2_pb2.TensorProto.DOUBLE: np.float64, caffe2_pb2.TensorProto.FLOAT16: np.float16,
             caffe2_pb2.TensorProto.INT16: np.int16, caffe2_pb2.TensorProto.UINT16: np.uint16}


def onnx_dtype(dtype: Any) -> int:
    """ONNX TensorProto element type of a NumPy dtype."""
    try:
        return _DTYPES[np.dtype(dtype)]
    except KeyError:
        raise Refused(f"dtype {np.dtype(dtype)} has no ONNX tensor type") from None


def numpy_dtype(c2_type: int | None) -> Any:
    """NumPy dtype of a Caffe2 TensorProto data type (float32 when unknown)."""
    return _C2_TO_NP.get(c2_type, np.float32) if c2_type is not None else None


class Graph:
    """One ONNX graph under construction: nodes, Caffe2 blob -> current ONNX name (falling back
    to the enclosing graph's, as ONNX subgraphs see outer values), and shapes."""

    def __init__(self, names: Names, parent: Graph | None = None, consts: dict[str, np.ndarray] | None = None):
        self.names, self.parent = names, parent
        self.nodes: list[Any] = []
        self.current: dict[str, str] = {}
        self.infos: dict[str, TensorInfo] = {}      # ONNX name -> shape/dtype
        self.consts = consts if consts is not None else {}   # initializers (top level; subgraphs see them)
        self.opaque: set[str] = set()               # Caffe2 blobs with no ONNX value (scopes)
        self.known: dict[str, np.ndarray] = {}      # ONNX name -> value fixed in the model (fills)
        self.qparams: dict[str, tuple[float, int]] = {}  # ONNX name of an Int8 blob's data -> (scale, zero point)
        self.failed: set[str] = set()               # outputs of ops that did not convert

    def scopes(self) -> Iterator[Graph]:
        """This graph, then each enclosing one (an ONNX subgraph sees its outer values)."""
        g: Graph | None = self
        while g is not None:
            yield g
            g = g.parent

    def lookup(self, blob: str) -> str | None:
        return next((g.current[blob] for g in self.scopes() if blob in g.current), None)

    def info(self, onnx_name: str) -> TensorInfo:
        return next((g.infos[onnx_name] for g in self.scopes() if onnx_name in g.infos), UNKNOWN)

    def is_opaque(self, blob: str) -> bool:
        return any(blob in g.opaque for g in self.scopes())

    def define(self, blob: str, info: TensorInfo = UNKNOWN) -> str:
        name = self.names.version(blob)
        self.current[blob], self.infos[name] = name, info
        return name

    def const(self, value: Any, hint: str = "const") -> str:
        name = self.names.temp(hint)
        self.consts[name] = np.asarray(value)
        self.infos[name] = TensorInfo(tuple(np.shape(value)), None)
        return name

    def node_out(self, op_type: str, inputs: Sequence[str], **attrs: Any) -> str:
        """Add a node with one fresh output; its name."""
        out = self.names.temp(op_type.lower())
        self.node(op_type, inputs, [out], **attrs)
        return out

    def node(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str], **attrs: Any) -> None:
        helper = onnx_module().helper
        self.nodes.append(helper.make_node(op_type, list(inputs), list(outputs),
                                           **{k: v for k, v in attrs.items() if v is not None}))


def _int8_data(value: Any) -> Any:
    """An Int8 tensor's quantised values (its ONNX value); anything else as it is."""
    return value.data if type(value).__name__ == "Int8Tensor" else value


def _copy(value: Any) -> Any:
    """A tensor copied (a later in-place op must not change what was recorded); a NumPy scalar
    (a 0-d kernel result) as a 0-d array; anything else as it is."""
    return np.array(value) if isinstance(value, (np.ndarray, np.generic)) else value


def _c2_info(value: Any) -> TensorInfo:
    value = _int8_data(value)
    if isinstance(value, np.ndarray):
        return TensorInfo(tuple(value.shape), _np_to_c2(value.dtype))
    return UNKNOWN


def _np_to_c2(dtype: Any) -> int | None:
    return next((k for k, v in _C2_TO_NP.items() if np.dtype(v) == np.dtype(dtype)), None)


class Convert:
    """What a converter sees of one op: its arguments, its inputs' ONNX names and shapes, the
    emitting of nodes and constants, and the ONNX names of its outputs.

    Examples (in a converter)::

        @onnx_converter("Relu")
        def relu_onnx(c):
            c.emit("Relu", [c.x(0)], [c.y(0)])
    """

    def __init__(self, op: caffe2_pb2.OperatorDef, graph: Graph, opset: int, out_infos: Sequence[TensorInfo],
                 exporter: Exporter) -> None:
        self.op, self.g, self.opset, self.exporter = op, graph, opset, exporter
        self._out_infos = list(out_infos)
        self._outs: dict[int, str] = {}
        # NOTE: the inputs' names as they are before the op: an in-place op's output is a new version,
        # and a converter reading input i after defining output k must still get the old one
        self._ins = [graph.lookup(b) for b in op.input]

    # arguments and inputs
    def arg(self, name: str, default: Any = None) -> Any:
        return arg_value(self.op, name, default)

    def has(self, name: str) -> bool:
        return has_arg(self.op, name)

    @property
    def n_in(self) -> int:
        return len(self.op.input)

    @property
    def n_out(self) -> int:
        return len(self.op.output)

    def x(self, i: int) -> str:
        """The ONNX name of input `i` (its current version)."""
        blob = self.op.input[i]
        if self.g.is_opaque(blob):
            raise Refused(f"input '{blob}' is a workspace or other non-tensor blob")
        name = self._ins[i]
        if name is None:
            raise Refused(f"input '{blob}' has no value before this op")
        return name

    def info(self, i: int) -> TensorInfo:
        """Shape and dtype of input `i` (from the engine's run, or shape inference in subnets)."""
        return self.g.info(self.x(i))

    def shape(self, i: int) -> tuple[int, ...]:
        """The full static shape of input `i`, or a refusal naming the blob."""
        s = self.info(i).shape
        if s is None or not all(isinstance(d, int) for d in s):
            raise Refused(f"the shape of '{self.op.input[i]}' is not known")
        return tuple(s)

    def rank(self, i: int) -> int:
        s = self.info(i).shape
        if s is None:
            raise Refused(f"the rank of '{self.op.input[i]}' is not known")
        return len(s)

    def qparams(self, i: int) -> tuple[float, int]:
        """(scale, zero point) of Int8 input `i`."""
        name = self.x(i)
        q = next((g.qparams[name] for g in self.g.scopes() if name in g.qparams), None)
        if q is None:
            raise Refused(f"input '{self.op.input[i]}' is not a known Int8 tensor")
        return q

    def set_qparams(self, k: int, scale: float, zero_point: int) -> None:
        self.g.qparams[self.y(k)] = (float(np.float32(scale)), int(zero_point))

    def np_dtype(self, i: int) -> Any:
        """NumPy dtype of input `i` (float32 when unknown)."""
        return np.dtype(numpy_dtype(self.info(i).dtype) or np.float32)

    def const_value(self, i: int) -> np.ndarray | None:
        """Input `i`'s value when it is fixed in the model (an initializer, or a fill op's Constant)."""
        name = self.x(i)
        return next((g.known[name] for g in self.g.scopes() if name in g.known), self.g.consts.get(name))

    def fold(self) -> None:
        """Every output as a Constant: the op run alone in the engine on its fixed inputs (fills,
        shape arithmetic on weights); a refusal when an input is computed at run time."""
        from engine.runtime import executor  # noqa: PLC0415
        from engine.runtime.workspace import Workspace  # noqa: PLC0415

        ws = Workspace("onnx-fold")
        for i, b in enumerate(self.op.input):
            v = self.const_value(i)
            if v is None:
                raise Refused(f"input '{b}' is computed at run time (only a fixed value folds)")
            ws.feed_blob(b, v)
        try:
            executor.run_op(self.op, ws, device="cpu")
        except Exception as e:  # NOTE: the engine's own one-line error, as the refusal's reason
            raise Refused(f"folding it failed: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        for k, o in enumerate(self.op.output):
            v = ws.values.get(o)
            if not isinstance(v, (np.ndarray, np.generic)) or np.asarray(v).dtype.kind not in "biuf":
                raise Refused(f"output '{o}' is no numeric tensor")
            self.constant(k, np.asarray(v))

    def constant(self, k: int, value: Any) -> None:
        """Output `k` is the fixed `value` (a fill op): an ONNX Constant whose value later ops may read."""
        value = np.asarray(value)
        self.emit("Constant", [], [self.y(k)], value=self.tensor(value))
        self.g.known[self.y(k)] = value
        self.g.infos[self.y(k)] = TensorInfo(value.shape, _np_to_c2(value.dtype))

    def out_info(self, i: int) -> TensorInfo:
        return self._out_infos[i] if i < len(self._out_infos) else UNKNOWN

    # emitting
    def y(self, i: int) -> str:
        """The ONNX name output `i` gets (a new SSA version of its blob)."""
        if i not in self._outs:
            self._outs[i] = self.g.define(self.op.output[i], self.out_info(i))
        return self._outs[i]

    def known_info(self, k: int, info: TensorInfo) -> None:
        """Output `k` has `info` when neither the engine's run nor shape inference said (a value
        passed through a subnet keeps its type)."""
        name = self.y(k)
        have = self.g.infos.get(name, UNKNOWN)
        if have.dtype is None or have.shape is None:
            self.g.infos[name] = TensorInfo(have.shape if have.shape is not None else info.shape,
                                            have.dtype if have.dtype is not None else info.dtype)

    def tmp(self, hint: str = "t") -> str:
        return self.g.names.temp(f"{self.op.output[0] if self.op.output else self.op.type}/{hint}")

    def const(self, value: Any, hint: str = "const") -> str:
        return self.g.const(value, f"{self.op.output[0] if self.op.output else self.op.type}/{hint}")

    def ints(self, values: Sequence[int]) -> str:
        """An int64 1-D constant (shapes, axes, starts)."""
        return self.const(np.asarray(list(values), np.int64), "i64")

    def emit(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str] | int = 1, **attrs: Any) -> Any:
        """Add a node; `outputs` as names, or a count of fresh temporaries. Returns the one output
        name, or the list of them."""
        outs = [self.tmp(op_type.lower()) for _ in range(outputs)] if isinstance(outputs, int) else list(outputs)
        self.g.node(op_type, inputs, outs, **attrs)
        return outs[0] if len(outs) == 1 else outs

    # layouts and flattening shared by several families
    @property
    def nchw(self) -> bool:
        order = self.arg("order", "NCHW")
        if order not in ("NCHW", "NHWC"):
            raise Refused(f"order {order!r}")
        return order == "NCHW"

    def x_nchw(self, i: int) -> str:
        """Input `i` in NCHW: itself, or transposed from NHWC (``order`` NHWC)."""
        if self.nchw:
            return self.x(i)
        r = self.rank(i)
        return self.emit("Transpose", [self.x(i)], perm=[0, r - 1, *range(1, r - 1)])

    def y_nchw(self, k: int) -> str:
        """Where an NCHW result for output `k` goes (the output itself, or a temporary that
        :meth:`done_nchw` transposes back to NHWC)."""
        return self.y(k) if self.nchw else self.tmp("nchw")

    def done_nchw(self, k: int, name: str, rank: int) -> None:
        if not self.nchw:
            self.emit("Transpose", [name], [self.y(k)], perm=[0, *range(2, rank), 1])

    def reduce(self, kind: str, name: str, axes: Sequence[int] | None, keepdims: int = 1,
               outputs: Sequence[str] | int = 1) -> Any:
        """An ONNX Reduce* over `axes` (None: all), whichever way the opset takes them (ReduceSum's
        axes are an input from opset 13, the others' from 18)."""
        if axes is None:
            return self.emit(kind, [name], outputs, keepdims=keepdims)
        if kind == "ReduceSum" or self.opset >= 18:
            return self.emit(kind, [name, self.ints(axes)], outputs, keepdims=keepdims)
        return self.emit(kind, [name], outputs, axes=list(axes), keepdims=keepdims)

    def shape_of(self, name: str) -> str:
        return self.emit("Shape", [name])

    def rows(self, name: str, axis: int, rank: int) -> str:
        """`name` flattened to 2-D at `axis` (Caffe2's canonical 2-D view); itself when already."""
        return name if rank == 2 and axis == 1 else self.emit("Flatten", [name], axis=axis)

    def tensor(self, value: Any) -> Any:
        """A TensorProto attribute value (ConstantOfShape's fill, Constant's value)."""
        return onnx_module().numpy_helper.from_array(np.asarray(value))

    def opaque(self, i: int) -> None:
        """Output `i` is no tensor (a workspace scope): it gets no ONNX value."""
        self.g.opaque.add(self.op.output[i])

    def refuse(self, why: str) -> Refused:
        return Refused(why)

    def dtype(self, dtype: Any) -> int:
        """ONNX element type of a NumPy dtype, for a converter's ``to=`` (refused when ONNX has none)."""
        return onnx_dtype(dtype)

    def subgraph(self, nets: Sequence[caffe2_pb2.NetDef], outputs: Sequence[str],
                 inputs: Sequence[tuple[str, str, TensorInfo]] = (), out_infos: Sequence[TensorInfo] = (),
                 cond: str | None = None, pre: Any = None, post: Any = None) -> Any:
        """An ONNX GraphProto running `nets` one after the other (If's branches, Loop's body).

        `inputs`: (Caffe2 blob, ONNX input name, info) the graph receives (Loop's iteration
        count, condition and carried values); other blobs resolve to the enclosing graph's values.
        `outputs`: the Caffe2 blobs whose final values it returns, typed from `out_infos` where
        the subnet's own shape inference leaves a value unknown; `cond`, first, a blob returned
        as a bool scalar (Loop's continue condition).  `pre(g)` and `post(g)` may add nodes to the
        :class:`Graph` before and after the nets (RecurrentNetwork's links)."""
        return self.exporter.subgraph(self.g, nets, inputs, outputs, out_infos, cond, pre, post)

    def inline(self, net: caffe2_pb2.NetDef, bindings: Mapping[str, str]) -> Graph:
        """Convert `net` straight into this graph, its blob names bound to outer blobs (Do's
        inner_blobs); returns its scope, whose ``current`` holds each inner blob's final value."""
        return self.exporter.inline(self.g, net, bindings)


# ---- the driver -----------------------------------------------------------------------

def _where(net: caffe2_pb2.NetDef, i: int, op: caffe2_pb2.OperatorDef, path: str) -> str:
    name = f" '{op.name}'" if op.name else ""
    return f"{path}op #{i}{name}"


class Exporter:
    """Walks a net's ops, converter by converter, collecting every refusal before it stops."""

    def __init__(self, opset: int) -> None:
        self.opset = opset
        self.problems: list[tuple[str, str, str]] = []   # (op type, where, why)
        self.names = Names()
        self.top: list[list[str | None]] = []             # top-level op -> ONNX name of each output
        self.at = ""                                      # the op being converted (subnets name it)
        self.workspace: Any = None                        # the engine's, after its run (the stylizer's noise)

    def convert_ops(self, g: Graph, net: caffe2_pb2.NetDef, trace: Sequence[Mapping[str, Any]] | None,
                    path: str = "") -> None:
        for i, op in enumerate(net.op):
            ins = [g.info(n) if (n := g.lookup(b)) is not None else UNKNOWN for b in op.input]
            if trace is not None and i < len(trace):
                outs = [_c2_info(trace[i].get(o)) for o in op.output]
            else:
                try:
                    outs = list(infer_op(op, ins))
                except Exception:  # NOTE: a rule that cannot follow: converters needing shapes refuse
                    outs = [UNKNOWN] * len(op.output)
            c = Convert(op, g, self.opset, outs, self)
            conv = ONNX.get(op.type)
            self.at = _where(net, i, op, path) + f" {op.type}"
            try:
                if conv is None:
                    raise Refused("no ONNX converter")
                conv(c)
                for k in range(len(op.output)):  # NOTE: a converter must define (or mark opaque) every output
                    if k not in c._outs and op.output[k] not in g.opaque:
                        raise Refused(f"converter left output '{op.output[k]}' undefined")
            except Refused as e:
                # NOTE: an op that converts but reads a failed op's output is that failure's echo: not named
                if conv is None or not any(n in f.failed for n in c._ins if n for f in g.scopes()):
                    self.problems.append((op.type, _where(net, i, op, path), str(e)))
                for k in range(len(op.output)):   # later ops still convert, so every problem is named
                    if k not in c._outs and op.output[k] not in g.opaque:
                        c.y(k)
                g.failed.update(c._outs.values())
            if g.parent is None:
                self.top.append([c._outs.get(k) for k in range(len(op.output))])

    def inline(self, outer: Graph, net: caffe2_pb2.NetDef, bindings: Mapping[str, str]) -> Graph:
        g = Graph(self.names, outer, outer.consts)
        g.nodes = outer.nodes
        for inner, outer_blob in bindings.items():
            if outer.is_opaque(outer_blob):
                g.opaque.add(inner)
            elif (n := outer.lookup(outer_blob)) is not None:
                g.current[inner] = n
        self._convert_subnet(g, net)
        return g

    def _convert_subnet(self, g: Graph, net: caffe2_pb2.NetDef) -> None:
        """Convert a subnet's ops; their places read ``op #i Type › subnet: op #j``."""
        at = self.at
        self.convert_ops(g, net, None, path=f"{at} › {net.name or 'subnet'}: ")
        self.at = at

    def subgraph(self, outer: Graph, nets: Sequence[caffe2_pb2.NetDef], inputs: Sequence[tuple[str, str, TensorInfo]],
                 outputs: Sequence[str], out_infos: Sequence[TensorInfo], cond: str | None,
                 pre: Any = None, post: Any = None) -> Any:
        onnx = onnx_module()
        g = Graph(self.names, outer, outer.consts)
        for blob, name, info in inputs:
            g.current[blob], g.infos[name] = name, info
        if pre is not None:
            pre(g)
        for net in nets:
            self._convert_subnet(g, net)
        if post is not None:
            post(g)
        ins = [_value_info(onnx, name, info) for _, name, info in inputs]
        outs = []
        if cond is not None:
            name = g.lookup(cond)
            if name is None:
                raise Refused(f"the loop condition '{cond}' is never set")
            flag = self.names.temp(f"{cond}/continue")
            g.node("Reshape", [g.node_out("Cast", [name], to=9), g.const(np.zeros(0, np.int64), f"{cond}/scalar")],
                   [flag])
            g.infos[flag] = TensorInfo((), caffe2_pb2.TensorProto.BOOL)
            outs.append(_value_info(onnx, flag, g.infos[flag]))
        inner_made = set(g.infos) - {n for _, n, _ in inputs}
        for k, blob in enumerate(outputs):
            name = g.lookup(blob)
            if name is None:
                raise Refused(f"'{blob}' has no value on every path")
            info = g.info(name)
            if (info.shape is None or info.dtype is None) and k < len(out_infos):
                info = out_infos[k]
            if name not in inner_made:  # NOTE: a graph output must be made inside it: pass outer values through
                fresh = self.names.temp(f"{blob}/out")
                g.node("Identity", [name], [fresh])
                name = fresh
            g.infos[name] = info
            outs.append(_value_info(onnx, name, info))
        return onnx.helper.make_graph(g.nodes, self.names.temp("subgraph"), ins, outs)


def _value_info(onnx: Any, name: str, info: TensorInfo) -> Any:
    elem = onnx_dtype(numpy_dtype(info.dtype) or np.float32)
    shape = None if info.shape is None else [d if isinstance(d, int) else None for d in info.shape]
    return onnx.helper.make_tensor_value_info(name, elem, shape)


@dataclass
class Exported:
    """An exported model and what to tell the user."""

    model: Any
    notes: list[str]


def export(src: Source, *, opset: int = DEFAULT_OPSET, where: str = "net") -> Exported:
    """Build a checked ONNX ModelProto of `src.net` (raises OnnxExportError naming every op that stops it)."""
    onnx = onnx_module()
    import engine.runtime.ops  # noqa: F401, PLC0415 - fills the converter table
    from engine.onnx.opset import check_opset  # noqa: PLC0415  (an opset onnx and ONNX Runtime both take)
    check_opset(onnx, opset, MIN_OPSET)
    ex = Exporter(opset)
    ex.workspace = src.workspace
    g = Graph(ex.names)
    graph_inputs = []
    for b in src.inputs:
        name = g.define(b, _c2_info(np.asarray(src.values[b])))
        graph_inputs.append(_value_info(onnx, name, g.infos[name]))
    for b in src.params:
        v = src.values[b]
        if type(v).__name__ == "Int8Tensor":  # NOTE: quantised values; scale and zero point stay with the name
            name = g.define(b, _c2_info(v))
            g.consts[name], g.qparams[name] = v.data, (float(v.scale), int(v.zero_point))
            continue
        if not isinstance(v, np.ndarray):
            ex.problems.append(("non-tensor inputs", f"'{b}'", f"a {type(v).__name__}"))
            continue
        name = g.define(b, _c2_info(v))
        g.consts[name] = v
    ex.convert_ops(g, src.net, src.trace)
    if ex.problems:
        raise OnnxExportError(f"{where}: no faithful ONNX form (opset {opset}) for " + problems_text(ex.problems))
    final = {b: g.current[b] for b in g.current}
    wanted = list(src.net.external_output) or _unread_outputs(src.net)
    outputs = []
    for b in dict.fromkeys(wanted):
        if b in final and not g.is_opaque(b) and final[b] in g.infos:
            outputs.append(_value_info(onnx, final[b], g.infos[final[b]]))
    shown = {o.name for o in outputs}
    value_infos = [_value_info(onnx, n, i) for n, i in g.infos.items()
                   if n not in shown and i.shape is not None and i.dtype is not None and n not in g.consts
                   and n not in {x.name for x in graph_inputs}]
    graph = onnx.helper.make_graph(g.nodes, src.net.name or "net", graph_inputs, outputs, [], value_info=value_infos)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)],
                                   producer_name="netviz", producer_version=_version())
    del graph  # NOTE: make_model copied it; the initializers go straight into the model (held once)
    onnx.helper.set_model_props(model, {VALUES_KEY: json.dumps(
        [[i, op.type, b, n] for i, (op, names) in enumerate(zip(src.net.op, ex.top))
         for b, n in zip(op.output, names) if n is not None])})
    model.ir_version = min(model.ir_version, _IR_FOR_OPSET.get(opset, model.ir_version))
    slim = onnx.ModelProto()
    slim.CopyFrom(model)
    _add_initializers(onnx, model, slim, g.consts, where)
    try:
        onnx.checker.check_model(slim, full_check=True)
    except Exception as e:
        raise OnnxExportError(f"{where}: the ONNX checker refuses the export: {str(e).splitlines()[0]}") from None
    return Exported(model, list(src.notes))


#: An initializer above this many bytes is checked as a typed graph input (its values add nothing to the
#: checker's shape inference; serializing them for it doubled a 128 MB export's memory)
CHECKED_AS_INPUT = 1 << 20


def _add_initializers(onnx: Any, model: Any, slim: Any, consts: Mapping[str, Any], where: str) -> None:
    """Each const as an initializer of `model`, one tensor at a time; `slim` (the model the checker
    reads) gets the small ones as initializers and the big ones as typed graph inputs."""
    for name, v in consts.items():
        a, t = np.array(v, order="C", copy=None), model.graph.initializer.add()  # NOTE: np.array keeps 0-d
        try:
            if a.dtype.kind in "biuf" and a.dtype.byteorder in "=|<":  # NOTE: numpy_helper.from_array's own
                # form, built in place: from_array then append held a weight three times at once
                t.name, t.data_type, t.raw_data = name, int(onnx.helper.np_dtype_to_tensor_dtype(a.dtype)), a.tobytes()
                t.dims.extend(a.shape)
            else:
                t.CopyFrom(onnx.numpy_helper.from_array(a, name))
        except Exception as e:  # NOTE: object arrays (strings) have no ONNX tensor here
            raise OnnxExportError(f"{where}: initializer '{name}' ({a.dtype}) has no ONNX form: {e}") from None
        if len(t.raw_data) > CHECKED_AS_INPUT:
            slim.graph.input.append(onnx.helper.make_tensor_value_info(name, t.data_type, list(t.dims)))
        else:
            slim.graph.initializer.append(t)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def save_model(onnx: Any, model: Any, path: str) -> None:
    """Write `model` as ``onnx.save`` would, an initializer at a time: serializing a 100 MB model whole
    peaked at 2.5 times its size.  The graph (ModelProto field 7) is written as its fields but the
    initializers, then each initializer as GraphProto field 5: protobuf reads fields in any order."""
    rest, graph = onnx.ModelProto(), onnx.GraphProto()
    for dst, src, skip in ((rest, model, "graph"), (graph, model.graph, "initializer")):
        for f, v in src.ListFields():
            if f.name != skip:
                (getattr(dst, f.name).extend(v) if hasattr(v, "extend") else
                 getattr(dst, f.name).CopyFrom(v) if hasattr(v, "CopyFrom") else setattr(dst, f.name, v))
    head, inits = graph.SerializeToString(), model.graph.initializer
    size = len(head) + sum(1 + len(_varint(n)) + n for n in (t.ByteSize() for t in inits))
    with open(path, "wb") as out:
        out.write(rest.SerializeToString() + b"\x3a" + _varint(size) + head)
        for t in inits:
            out.write(b"\x2a" + _varint(t.ByteSize()))
            out.write(t.SerializeToString())


#: Model metadata key: JSON ``[[op index, op type, Caffe2 blob, ONNX name], ...]`` for every top-level
#: op output, so `netviz diff` pairs the engine's values with ONNX Runtime's however they were renamed.
VALUES_KEY = "netviz.values"

#: The IR version ONNX Runtime expects with each opset (a newer IR than the runtime knows is refused).
_IR_FOR_OPSET = {13: 7, 14: 7, 15: 8, 16: 8, 17: 8, 18: 8, 19: 9, 20: 9, 21: 10}


def _version() -> str:
    from engine import __version__  # noqa: PLC0415
    return str(__version__)


def _unread_outputs(net: caffe2_pb2.NetDef) -> list[str]:
    read = {b for op in net.op for b in op.input}
    return [o for op in net.op for o in op.output if o not in read]


def problems_text(problems: Sequence[tuple[str, str, str]]) -> str:
    """``Type (op #i: why; op #j), Type2 (...)`` grouped by op type, in net order."""
    by_type: dict[str, list[str]] = {}
    for t, where, why in problems:
        by_type.setdefault(t, []).append(where if why == "no ONNX converter" else f"{where}: {why}")
    parts = []
    for t, wheres in by_type.items():
        shown = wheres[:3] + ([f"{len(wheres) - 3} more"] if len(wheres) > 3 else [])
        parts.append(f"{t} ({'; '.join(shown)})")
    return ", ".join(parts)


# ---- the check against ONNX Runtime ----------------------------------------------------

@dataclass(frozen=True, slots=True)
class ValueDiff:
    """One Caffe2 value compared: the op that wrote it, its ONNX name, and how far apart."""

    op_index: int
    op_type: str
    blob: str
    onnx_name: str
    max_abs: float
    max_rel: float
    ok: bool
    engine: Any = None
    runtime: Any = None


def compare(a: Any, b: Any, rtol: float, atol: float) -> tuple[float, float, bool]:
    """(max abs difference, max relative difference, within tolerance) of two values."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return float("inf"), float("inf"), False
    if a.dtype.kind not in "biuf" or b.dtype.kind not in "biuf":
        same = bool(np.array_equal(a, b))
        return (0.0 if same else float("inf")), (0.0 if same else float("inf")), same
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(invalid="ignore"):
        err = np.where(np.isnan(a64) & np.isnan(b64), 0.0, np.abs(a64 - b64))
        rel = err / np.maximum(np.abs(a64), 1e-12)
    scale = max(1.0, float(np.nanmax(np.abs(a64), initial=0.0)))
    ok = bool(np.all(err <= atol * scale + rtol * np.abs(a64)))
    return float(np.nanmax(err, initial=0.0)), float(np.nanmax(rel, initial=0.0)), ok


def _terminate_on(cancel: threading.Event | None, options: Any) -> threading.Event:
    """Watch `cancel` while ONNX Runtime runs and set `options.terminate` when it fires: ORT's run is
    one C call that no Python signal reaches (a Loop whose condition never falls runs forever), and
    its terminate flag is the one way in.  Set the returned event when the run is over."""
    over = threading.Event()

    def watch() -> None:
        while not over.wait(0.05):
            if cancel is not None and cancel.is_set():
                options.terminate = True
                return
    if cancel is not None:
        threading.Thread(target=watch, name="netviz-ort-cancel", daemon=True).start()
    return over


def runtime_values(model: Any, feeds: Mapping[str, np.ndarray], extra: Sequence[str],
                   cancel: threading.Event | None = None) -> dict[str, np.ndarray]:
    """Run `model` in ONNX Runtime on `feeds`, also returning the values named in `extra`
    (made graph outputs for the run; their types come from the model's value_info).  Setting
    `cancel` stops the run (ExecutionError), between two of ORT's nodes."""
    onnx, ort = onnx_module(), onnxruntime_module()
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    infos = {v.name: v for v in m.graph.value_info}
    for name in extra:
        if name not in have and name in infos:
            m.graph.output.append(infos[name])
            have.add(name)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    run_options = ort.RunOptions()
    run_options.log_severity_level = 4  # NOTE: a terminated run logs an error line to stderr: over the TUI
    over = _terminate_on(cancel, run_options)
    try:
        sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        return dict(zip(names, sess.run(names, dict(feeds), run_options)))
    except Exception as e:  # NOTE: ONNX Runtime's own errors (a shape the model was not exported for) as one line
        if cancel is not None and cancel.is_set():
            raise ExecutionError("ONNX Runtime run cancelled") from None
        text = " ".join(str(e).split())
        raise NetvizError(f"ONNX Runtime could not run the model ({text[:300]}); were export and diff given "
                          "the same --input?") from None
    finally:
        over.set()


def diff_against_runtime(src: Source, model: Any, *, rtol: float = 1e-4, atol: float = 1e-4,
                         cancel: threading.Event | None = None) -> list[ValueDiff]:
    """Every top-level value of the engine's run against the same value in ONNX Runtime, in op order.

    The default tolerance, 1e-4 of the value's largest magnitude plus 1e-4 of each element, is float32
    rounding: sums in another order, amplified by the normalisations of a deep net (a training
    SpatialBN over 8 values per channel turns 7e-6 at its input into 5e-5); a wrong op is off by far more."""
    graph_inputs = {i.name for i in model.graph.input}
    missing = [b for b in graph_inputs if b not in src.values]
    if missing:
        raise NetvizError(f"the ONNX model's inputs {', '.join(missing)} are not inputs of the Caffe2 net")
    feeds = {b: np.asarray(src.values[b]) for b in graph_inputs}
    pairs = value_pairs(src.net, model)
    got = runtime_values(model, feeds, [n for _, _, n in pairs], cancel)
    rows = []
    for i, blob, onnx_name in pairs:
        ref = _int8_data(src.trace[i].get(blob)) if i < len(src.trace) else None
        if onnx_name not in got or not isinstance(ref, np.ndarray) or ref.dtype.kind not in "biuf":
            continue
        mx, rel, ok = compare(ref, got[onnx_name], rtol, atol)
        rows.append(ValueDiff(i, src.net.op[i].type, blob, onnx_name, mx, rel, ok, ref, got[onnx_name]))
    return rows


def value_pairs(net: caffe2_pb2.NetDef, model: Any) -> list[tuple[int, str, str]]:
    """(op index, Caffe2 blob, ONNX name) of every top-level op output the model holds: from the
    netviz export's metadata, else (another exporter's model) by equal names."""
    props = {p.key: p.value for p in model.metadata_props}
    if VALUES_KEY in props:
        rows = json.loads(props[VALUES_KEY])
        if all(i < len(net.op) and net.op[i].type == t for i, t, _, _ in rows):
            return [(i, b, n) for i, _, b, n in rows]
    known = {v.name for v in list(model.graph.value_info) + list(model.graph.output)}
    return [(i, o, o) for i, op in enumerate(net.op) for o in op.output if o in known]
