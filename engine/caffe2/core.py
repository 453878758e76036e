"""``caffe2.python.core`` for netviz: scripts port by changing ``from caffe2.python import core``.

Blob references, scopes, ``CreateOperator``, the ``Net`` builder and the SSA helpers behave as
Caffe2's do (names, numbering, auto-generated blob names).  Gradient generation lives in
:mod:`engine.autodiff.gradient_ir`; ``IR``, ``GradientRegistry``, ``GradientSlice`` and ``backward_net``
are re-exported from there lazily, so this module imports without it.
(About 480 lines: it mirrors one Caffe2 module, and splitting ``Net`` would split its surface.)
"""
from __future__ import annotations

from collections import OrderedDict, defaultdict, namedtuple
from collections.abc import Iterable
from typing import Any

import sys

import numpy as np

from engine.model import netnames, opdef
from engine.errors import GraphError
from engine.model.optypes import CONTROL_FLOW
from engine.model.scope import CurrentDeviceScope, CurrentNameScope, DeviceScope, NameScope
from engine.model.ssa import (get_consumer_map, get_op_ids_in_path, get_output_producers,
                        get_producer_map, get_ssa, get_undefined_blobs)
from proto import caffe2_pb2

__all__ = ["BlobReference", "ScopedName", "ScopedBlobReference", "NameScope", "DeviceScope",
           "CurrentNameScope", "CurrentDeviceScope", "DeviceOption", "IsGPUDeviceType",
           "DataType", "CreateOperator", "Net", "get_ssa", "get_undefined_blobs",
           "get_output_producers", "get_op_ids_in_path", "get_producer_map",
           "get_consumer_map", "IR", "GradientRegistry", "GradientSlice", "backward_net"]

_GRADIENT_EXPORTS = ("IR", "GradientRegistry", "GradientSlice", "backward_net")
DataType = caffe2_pb2.TensorProto.DataType
"""``core.DataType.FLOAT`` etc.: the TensorProto data-type enum."""


_PLAN_EXPORTS = ("Plan", "ExecutionStep", "execution_step", "scoped_execution_step", "to_execution_step",
                 "add_nets_in_order")


_REGISTRY_FACES: dict[type, type] = {}


def _gradient_registry(base: type) -> type:
    """``core.GradientRegistry``: the autodiff layer's registry, its backward-pass map made of BlobReferences."""
    if base not in _REGISTRY_FACES:
        class GradientRegistry(base):  # type: ignore[valid-type, misc]
            __doc__, __qualname__ = base.__doc__, "GradientRegistry"

            @classmethod
            def GetBackwardPass(cls, operators: Any, ys: Any) -> tuple[list[caffe2_pb2.OperatorDef], dict[Any, Any]]:
                ops, grads = super().GetBackwardPass(operators, ys)
                return ops, as_blob_references(grads)

        _REGISTRY_FACES[base] = GradientRegistry
    return _REGISTRY_FACES[base]


def as_blob_references(grads: Any) -> dict[Any, Any]:
    """``{BlobReference: BlobReference | GradientSlice of BlobReferences}`` (Caffe2's gradient map)."""
    from engine.autodiff.gradient_ir import GradientSlice
    return {BlobReference(k): (GradientSlice(BlobReference(v[0]), BlobReference(v[1])) if isinstance(v, tuple)
                               else BlobReference(v)) for k, v in grads.items() if v is not None}


def __getattr__(name: str) -> Any:
    if name in _GRADIENT_EXPORTS:
        from engine.autodiff import gradient_ir
        return _gradient_registry(gradient_ir.GradientRegistry) if name == "GradientRegistry" else getattr(gradient_ir, name)
    if name in _PLAN_EXPORTS:
        from engine.caffe2 import plan_builder
        return getattr(plan_builder, name)
    from engine.caffe2 import device_copies
    if name in device_copies.__all__:
        return getattr(device_copies, name)
    if name == "_REGISTERED_OPERATORS":
        return set(_registered())
    if name in ("workspace", "scope", "C"):  # Caffe2's core has these module attributes
        from engine.caffe2 import capi, workspace
        from engine.model import scope
        return {"C": capi, "workspace": workspace, "scope": scope}[name]
    raise AttributeError(f"module 'engine.caffe2.core' has no attribute '{name}'")


def _op_name(attr: str) -> bool:
    # NOTE: Caffe2 asks its operator registry; every Caffe2 op type is CamelCase.
    return attr[:1].isupper()


class BlobReference:
    """A blob name, optionally bound to the ``Net`` that makes it; ``x.Relu([], "y")`` adds an op.

    Compares and hashes equal to its name as ``str``; ``+`` appends to the name.

    Examples
    --------
    >>> b = BlobReference("gpu_0/conv1")
    >>> (b + "_w", b.GetNameScope(), b == "gpu_0/conv1")
    (BlobReference("gpu_0/conv1_w"), 'gpu_0/', True)
    """

    def __init__(self, name: Any, net: "Net | None" = None) -> None:
        self._name = name.decode("utf-8") if isinstance(name, bytes) else str(name)
        self._from_net = net
        self.meta: dict[str, Any] = {}

    def __hash__(self) -> int:
        return hash(self._name)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, bytes):
            other = other.decode("utf-8")
        if isinstance(other, BlobReference):
            other = other._name
        return isinstance(other, str) and self._name == other

    def __lt__(self, other: object) -> bool:
        """Order by name (so gradient maps sort), as names do."""
        return str(self) < str(other)

    def __str__(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return f'BlobReference("{self._name}")'

    def __add__(self, other: str) -> "BlobReference":
        if not isinstance(other, str):
            raise TypeError("Cannot add BlobReference to a non-string.")
        return BlobReference(self._name + other, self._from_net)

    def __radd__(self, other: str) -> "BlobReference":
        if not isinstance(other, str):
            raise TypeError("Cannot add a non-string to BlobReference.")
        return BlobReference(other + self._name, self._from_net)

    def Net(self) -> "Net | None":
        return self._from_net

    def GetNameScope(self) -> str:
        return self._name[:self._name.rfind("/") + 1]

    def __getattr__(self, op_type: str) -> Any:
        if not _op_name(op_type):
            raise AttributeError(f"Attribute {op_type} not found.")
        if self._from_net is None:
            raise GraphError(f"blob '{self._name}': cannot create {op_type} from a blob "
                             "reference without a net; call it on the Net")

        def build(inputs: Any = None, *args: Any, **kwargs: Any) -> Any:
            inputs = [] if inputs is None else inputs
            inputs = [inputs] if isinstance(inputs, (str, bytes, BlobReference)) else list(inputs)
            return getattr(self._from_net, op_type)([self, *inputs], *args, **kwargs)
        return build


def ScopedName(name: str | bytes) -> str:
    """`name` prefixed with the current name scope."""
    return CurrentNameScope() + (name.decode("ascii") if isinstance(name, bytes) else name)


def ScopedBlobReference(name: str | bytes, *args: Any, **kwargs: Any) -> BlobReference:
    """A BlobReference whose name carries the current name scope."""
    return BlobReference(ScopedName(name), *args, **kwargs)


def _rectify(blobs: Any, net: "Net | None" = None) -> list[BlobReference]:
    """Strings get the name scope; BlobReferences are taken as they are (Caffe2's rule)."""
    if isinstance(blobs, (str, bytes)):
        return [ScopedBlobReference(blobs, net=net)]
    if isinstance(blobs, BlobReference):
        return [blobs]
    if isinstance(blobs, (list, tuple)):
        out = []
        for b in blobs:
            if isinstance(b, (str, bytes)):
                out.append(ScopedBlobReference(b, net=net))
            elif isinstance(b, BlobReference):
                out.append(b)
            else:
                raise TypeError(f"I/O blob #{len(out)} of unsupported type: {b} of type {type(b)}")
        return out
    raise TypeError(f"Unknown input/output type: {blobs} of type {type(blobs)}.")


def DeviceOption(device_type: int, device_id: int = 0, random_seed: int | None = None,
                 node_name: str | None = None, numa_node_id: int | None = None,
                 extra_info: Iterable[str] | None = None) -> caffe2_pb2.DeviceOption:
    """A DeviceOption proto; ``device_id`` is always set, even for CPU (as Caffe2)."""
    option = opdef.device_option(device_type, device_id)
    if node_name is not None:
        option.node_name = node_name
    if random_seed is not None:
        option.random_seed = random_seed
    if numa_node_id is not None:
        if device_type != caffe2_pb2.CPU:
            raise ValueError("numa_node_id is only allowed for CPU device options")
        option.numa_node_id = numa_node_id
    if extra_info is not None:
        option.extra_info.extend(extra_info)
    return option


def IsGPUDeviceType(device_type: int) -> bool:
    """True for CUDA and HIP."""
    return device_type in (caffe2_pb2.CUDA, caffe2_pb2.HIP)


def CreateOperator(operator_type: str, inputs: Any, outputs: Any, name: str = "",
                   control_input: Any = None, device_option: caffe2_pb2.DeviceOption | None = None,
                   arg: Any = None, engine: str | None = None, **kwargs: Any
                   ) -> caffe2_pb2.OperatorDef:
    """Caffe2's ``CreateOperator``: :func:`engine.model.opdef.create_operator` after scoping names.

    String blob names get the current name scope; BlobReferences keep theirs.

    Examples
    --------
    >>> with NameScope("gpu_0"):
    ...     op = CreateOperator("Relu", "X", BlobReference("Y"))
    >>> list(op.input), list(op.output)
    (['gpu_0/X'], ['Y'])
    """
    op = opdef.create_operator(
        operator_type, [str(i) for i in _rectify(inputs)], [str(o) for o in _rectify(outputs)],
        name=name, control_input=[str(c) for c in _rectify(control_input)] if control_input else None,
        device_option=device_option, arg=arg, engine=engine, **kwargs)
    from engine.caffe2 import workspace
    if workspace.IsImmediate():  # NOTE: Caffe2's immediate mode runs every op as it is made.
        workspace.RunOperatorImmediate(op)
    return op


def _remap_net(net: caffe2_pb2.NetDef, remap: dict[str, str]) -> None:
    """Rename blobs of `net` in place, into the subnets of control-flow ops too."""
    def rename(field: Any) -> None:
        names = [remap.get(b, b) for b in field]
        del field[:]
        field.extend(names)
    for op in net.op:
        _remap_op(op, remap)
    rename(net.external_input)
    rename(net.external_output)


def _remap_op(op: caffe2_pb2.OperatorDef, remap: dict[str, str]) -> None:
    for field in (op.input, op.output):
        names = [remap.get(b, b) for b in field]
        del field[:]
        field.extend(names)
    if op.type not in CONTROL_FLOW:
        return
    for a in op.arg:
        if a.HasField("n"):
            _remap_net(a.n, remap)
        for n in a.nets:
            _remap_net(n, remap)
        if op.type.startswith("Recurrent") and len(a.strings):
            names = [remap.get(s.decode(), s.decode()).encode() for s in a.strings]
            del a.strings[:]
            a.strings.extend(names)


class _NetNameCounters:
    """``Net._net_names_used_counters`` is :data:`engine.model.netnames.USED`, the one counter gradient makers
    name their nets from too (reset it there: ``monkeypatch.setattr(netnames, "USED", {})``)."""

    def __get__(self, obj: Any, owner: type) -> dict[str, int]:
        return netnames.USED


class Net:
    """Caffe2's net builder: ``net.FC([x, w, b], "y")`` appends an op and returns its outputs.

    Net names are unique per process: a second ``Net("train")`` is named ``train_1``.

    Examples
    --------
    >>> net = Net("doc_example")
    >>> y = net.FC(["X", "W", "b"], "Y")
    >>> y.Relu([], "Z")
    BlobReference("Z")
    >>> [op.type for op in net.Proto().op], list(net.Proto().external_input)
    (['FC', 'Relu'], ['X', 'W', 'b'])
    """

    _net_names_used_counters = _NetNameCounters()
    current_prefix = staticmethod(netnames.current_prefix)
    _get_next_net_name = staticmethod(netnames.next_net_name)

    def __init__(self, name_or_proto: str | caffe2_pb2.NetDef, inplace: bool = False) -> None:
        self._registered_blob_names: set[str] = set()
        self._next_blob_name_ids: dict[str, int] = {}
        if isinstance(name_or_proto, caffe2_pb2.NetDef):
            self._net = name_or_proto if inplace else caffe2_pb2.NetDef()
            if not inplace:
                self._net.CopyFrom(name_or_proto)
            prefix = self._net.name + "_blob_"
            used = {b for op in self._net.op for b in (*op.input, *op.output)}
            # NOTE: Caffe2 reads only the first digit after the prefix; so do we.
            indices = [int(s[len(prefix)]) for s in used
                       if s.startswith(prefix) and s[len(prefix):len(prefix) + 1].isdigit()]
            self._next_name_index = max(indices) + 1 if indices else 0
            name = self._net.name
        else:
            # NOTE: Net(None) is named "" (Caffe2 assigns None to the proto field, which clears it)
            name = "" if name_or_proto is None else str(name_or_proto)
            self._net, self._next_name_index = caffe2_pb2.NetDef(), 0
        self._net.name = Net._get_next_net_name(name)
        self._defined: set[str] | None = None  # op outputs + external inputs; None = stale
        self._attr_dict: defaultdict[str, list] = defaultdict(list)
        self._input_record: Any = None
        self._output_record: Any = None

    # ---- names ----
    def Name(self) -> str:
        return self._net.name

    def __str__(self) -> str:
        return self.Name()

    def Proto(self) -> caffe2_pb2.NetDef:
        self._defined = None  # NOTE: the caller may edit the proto, as in Caffe2.
        return self._net

    def _op_outputs(self) -> set[str]:
        return {o for op in self._net.op for o in op.output}

    def BlobIsDefined(self, blob: Any) -> bool:
        """True when an op of this net writes `blob` or it is a declared external input."""
        if self._defined is None:
            self._defined = self._op_outputs() | set(self._net.external_input)
        return str(blob) in self._defined

    def UsesBlob(self, blob: Any) -> bool:
        name = str(blob)
        return any(name in op.input for op in self._net.op) or name in self._net.external_input

    def UsedBlobNames(self) -> set[str]:
        names = {b for op in self._net.op for b in (*op.input, *op.output)}
        return names | set(self._net.external_input) | set(self._net.external_output)

    def GetBlobRef(self, blob_name: Any) -> BlobReference:
        if not self.BlobIsDefined(blob_name):
            raise KeyError(f"Net does not define blob {blob_name}")
        return BlobReference(str(blob_name), self)

    def NextBlob(self, prefix: str = "unnamed") -> BlobReference:
        """`prefix`, or ``prefix_auto_<k>`` if taken; never the same name twice."""
        base = out = BlobReference(prefix)
        k = 0
        while str(out) in self._registered_blob_names or self.BlobIsDefined(out):
            out, k = base + f"_auto_{k}", k + 1
        self._registered_blob_names.add(str(out))
        return out

    def NextScopedBlob(self, prefix: str = "unnamed") -> BlobReference:
        return self.NextBlob(ScopedName(prefix))

    def NextName(self, prefix: str | None = None, output_id: int | None = None) -> str:
        """``<net>/<prefix>[:id]`` (``_2``, ``_3``… on clashes) or ``<net>_blob_<k>``."""
        if not prefix:
            self._next_name_index += 1
            return f"{self._net.name}_blob_{self._next_name_index - 1}"
        base = f"{self._net.name}/{prefix}"
        suffix = "" if output_id is None else f":{output_id}"
        name, index = base + suffix, self._next_blob_name_ids.get(base + suffix, 2)
        while self.BlobIsDefined(ScopedName(name)):
            name, index = f"{base}_{index}{suffix}", index + 1
            self._next_blob_name_ids[base + suffix] = index
        return name

    # ---- external inputs / outputs, arguments ----
    def AddExternalInput(self, *inputs: Any) -> Any:
        names = [str(i) for i in inputs]
        if not names:
            raise GraphError(f"net {self.Name()}: AddExternalInput needs at least one blob")
        for k, name in enumerate(names):
            if name in self._net.external_input or name in names[:k]:
                raise GraphError(f"net {self.Name()}: Net already contains an input named {name}")
        self._net.external_input.extend(names)
        if self._defined is not None:
            self._defined.update(names)
        refs = [BlobReference(n) for n in names]
        return refs[0] if len(refs) == 1 else refs

    AddExternalInputs = AddExternalInput

    def AddExternalOutput(self, *outputs: Any) -> None:
        for o in outputs:
            if not self.BlobIsDefined(o):
                raise GraphError(f"net {self.Name()}: blob '{o}' is not defined")
        self._net.external_output.extend(str(o) for o in outputs)

    AddExternalOutputs = AddExternalOutput

    def AddScopedExternalInputs(self, *inputs: Any) -> list[BlobReference]:
        res = self.AddExternalInput(*[ScopedBlobReference(b) for b in inputs])
        return res if isinstance(res, list) else [res]

    def AddScopedExternalOutputs(self, *outputs: Any) -> None:
        self.AddExternalOutput(*[ScopedBlobReference(b) for b in outputs])

    @property
    def external_inputs(self) -> list[BlobReference]:
        return [BlobReference(x) for x in self._net.external_input]

    @property
    def external_outputs(self) -> list[BlobReference]:
        return [BlobReference(x) for x in self._net.external_output]

    def is_external_input(self, blob: Any) -> bool:
        return str(blob) in self._net.external_input

    def AddArgument(self, arg_name: str, arg_value: Any) -> None:
        self._net.arg.append(opdef.make_argument(arg_name, arg_value))

    # ---- ops ----
    def extend_ops(self, new_ops: Iterable[caffe2_pb2.OperatorDef]) -> None:
        new_ops = list(new_ops)
        self._net.op.extend(new_ops)
        if self._defined is not None:
            self._defined.update(o for op in new_ops for o in op.output)

    def _CreateAndAddToSelf(self, op_type: str, inputs: Any, outputs: Any = None,
                            **kwargs: Any) -> Any:
        inputs = _rectify(inputs)
        for blob in inputs:
            if not self.BlobIsDefined(blob):
                if blob.Net() is self:
                    raise GraphError(f"net {self.Name()}: {op_type} reads '{blob}', "
                                     "which this net never defines")
                self.AddExternalInput(blob)
        if outputs is None:
            outputs = self.NextName(prefix=op_type)
        elif isinstance(outputs, int):
            outputs = [self.NextName(prefix=op_type, output_id=i) for i in range(outputs)]
        outputs = _rectify(outputs, net=self)
        op = CreateOperator(op_type, inputs, outputs, **kwargs)
        self.extend_ops([op])
        from engine.caffe2.workspace import operator_tracebacks
        operator_tracebacks.setdefault(self.Name(), {})[len(self._net.op) - 1] = _extract_stacktrace()
        refs = tuple(BlobReference(o, self) for o in op.output)
        return None if not refs else refs[0] if len(refs) == 1 else refs

    def __getattr__(self, op_type: str) -> Any:
        if not _op_name(op_type):
            raise AttributeError(f"Attribute {op_type} not found.")

        def add_op(*args: Any, **kwargs: Any) -> Any:
            return self._CreateAndAddToSelf(op_type, *args, **kwargs)
        return add_op

    def LogInfo(self, *msg_or_blobs: Any) -> None:
        """A ``Print`` op per argument: blobs as they are, other values as string constants."""
        for m in msg_or_blobs:
            blob = m if isinstance(m, BlobReference) else self.GivenTensorStringFill(
                [], self.NextName("log"), shape=[], values=[m])
            self.Print(blob, [])

    # ---- attributes, records, observers (Caffe2's Net bookkeeping) ----
    def add_attribute(self, name: str, obj: Any) -> None:
        """Attach `obj` under `name` (net_builder/task keep their per-net objects here)."""
        self._attr_dict[name].append(obj)

    def get_attributes(self, name: str) -> list[Any]:
        return self._attr_dict.get(name, [])

    def _CheckLookupTables(self) -> None:
        """Tests call this: the defined-blob cache agrees with the proto."""
        self._defined = None
        assert all(self.BlobIsDefined(o) for op in self._net.op for o in op.output)
        assert all(self.BlobIsDefined(i) for i in self._net.external_input)

    def set_input_record(self, input_record: Any) -> Any:
        """Set the input schema record (a ``schema.Field``); a record without blobs gets new ones
        in this net's name scope.  Its blobs become external inputs."""
        assert self._input_record is None or (input_record.has_blobs() and set(input_record.field_blobs()) ==
                                              set(self._input_record.field_blobs())), "Input schema cannot be reset"
        if not input_record.has_blobs():
            schema = sys.modules[type(input_record).__module__]  # the record's own schema module
            with NameScope(self.Name()):
                input_record = schema.NewRecord(self, input_record)
        self._input_record = input_record
        for blob in input_record.field_blobs():
            if not self.is_external_input(blob):
                self.AddExternalInput(blob)
        return self._input_record

    def set_output_record(self, record: Any) -> None:
        assert self._output_record is None or (record.has_blobs() and set(record.field_blobs()) ==
                                               set(self._output_record.field_blobs())), "Output schema cannot be reset"
        for blob in record.field_blobs():
            assert self.BlobIsDefined(blob), f"{blob} is not defined in net {self.Name()}"
        for blob in record.field_blobs():
            if blob not in self.external_outputs:
                self.AddExternalOutput(blob)
        self._output_record = record

    def AppendOutputRecordField(self, field_name: str, record: Any) -> None:
        assert self._output_record is not None, "Tried to append to missing output record"
        schema = sys.modules[type(record).__module__]
        for blob in record.field_blobs():
            assert self.BlobIsDefined(blob), f"{blob} is not defined"
        for blob in record.field_blobs():
            self.AddExternalOutput(blob)
        self._output_record = self._output_record + schema.Struct((field_name, record))

    def input_record(self) -> Any:
        return self._input_record

    def output_record(self) -> Any:
        return self._output_record

    def AddObserver(self, observer_type: str) -> Any:
        """A ``TimeObserver`` or ``RunCountObserver`` on this net's runs (engine.caffe2.capi.Observer)."""
        from engine.caffe2.capi import add_observer_to_net
        return add_observer_to_net(self.Name(), observer_type)

    def RemoveObserver(self, observer: Any) -> None:
        from engine.caffe2.capi import remove_observer_from_net
        remove_observer_from_net(self.Name(), observer)

    def NumObservers(self) -> int:
        from engine.caffe2.capi import num_observers_on_net
        return num_observers_on_net(self.Name())

    def PopulateProtoWithFileName(self) -> None:
        """Name each op ``file:line:function`` of the Python line that added it."""
        from engine.caffe2.workspace import operator_tracebacks
        for idx, tb in operator_tracebacks.get(self.Name(), {}).items():
            if idx < len(self._net.op) and tb:
                self._net.op[idx].name = ":".join(map(str, tb[0]))

    # ---- whole-net edits ----
    def set_rand_seed(self, seed: int = 100, sequence_seed: bool = True, seed_on_op_def: bool = False) -> None:
        """A random seed on every op: ``seed + i`` (sequence), a hash of the op, or `seed`."""
        assert not (sequence_seed and seed_on_op_def), \
            "sequence_seed and seed_on_op_def cannot be both set to True."
        for i, op in enumerate(self._net.op):
            op.device_option.random_seed = (seed + i if sequence_seed else
                                            hash(str(op) + str(seed)) % np.iinfo(np.uint32).max
                                            if seed_on_op_def else seed)

    @staticmethod
    def _RunAllOnGPU(net: caffe2_pb2.NetDef, gpu_id: int = 0, use_cudnn: bool = False) -> None:
        net.device_option.CopyFrom(caffe2_pb2.DeviceOption(device_type=caffe2_pb2.CUDA, device_id=gpu_id))
        for op in net.op:
            if use_cudnn:
                op.engine = "CUDNN"
            if op.type == "RecurrentNetwork":
                for a in op.arg:
                    if a.name == "step_net":
                        Net._RunAllOnGPU(a.n, gpu_id, use_cudnn)

    def RunAllOnGPU(self, gpu_id: int = 0, use_cudnn: bool = False) -> None:
        """The net's device option becomes GPU `gpu_id` (RNN step nets too)."""
        self._RunAllOnGPU(self._net, gpu_id, use_cudnn)

    def RunAllOnMKL(self) -> None:
        self._net.device_option.CopyFrom(caffe2_pb2.DeviceOption(device_type=caffe2_pb2.MKLDNN))

    def RunAllOnIDEEP(self) -> None:
        self._net.device_option.CopyFrom(caffe2_pb2.DeviceOption(device_type=caffe2_pb2.IDEEP))

    def insert_op_at_idx(self, op: caffe2_pb2.OperatorDef, op_idx: int) -> None:
        """Insert `op` before op `op_idx` (as Caffe2, its blobs are added to the external lists)."""
        assert op_idx >= 0
        ops = list(self._net.op)
        del self._net.op[:]
        self._net.op.extend([*ops[:op_idx], op, *ops[op_idx:]])
        self._net.external_output.extend(op.output)
        self._net.external_input.extend(op.input)
        self._defined = None

    def reroute_tensor(self, tensor: Any, new_producer: caffe2_pb2.OperatorDef, can_modify: Any = None) -> int:
        """Insert `new_producer` (reads `tensor`) right after the inputs it needs exist, point
        external outputs and the ops in `can_modify` at its output; returns how many ops changed."""
        tensor = str(tensor)

        def producer_index(t: str) -> int:
            if t in self._net.external_input:
                return -1
            assert t in new_producer.input, f"new producer {new_producer.type} is not taking in {t}"
            return next((i for i, op in enumerate(self._net.op) if t in op.output), -2)
        self.insert_op_at_idx(new_producer, max(producer_index(t) for t in new_producer.input) + 1)
        new_tensor = new_producer.output[0]
        if tensor in self._net.external_output:
            names = [new_tensor if b == tensor else b for b in self._net.external_output]
            del self._net.external_output[:]
            self._net.external_output.extend(names)
        count = 0
        for op in self._net.op if can_modify else ():
            if op in can_modify:
                remap_input(op, {tensor: new_tensor})
                count += 1
        return count

    def DeduplicateGradientSlices(self, g: Any, aggregator: str = "sum") -> Any:
        """One row per distinct index: ``Unique`` then ``UnsortedSegmentSum``/``Mean`` of the values."""
        from engine.autodiff.gradient_ir import GradientSlice
        assert isinstance(g, GradientSlice)
        unique, remapping = self.Unique([g.indices], 2, engine="SparseHash")
        reduce = {"sum": "UnsortedSegmentSum", "mean": "UnsortedSegmentMean"}.get(aggregator.lower())
        if reduce is None:
            raise ValueError(f"{aggregator} is not supported")
        return GradientSlice(indices=unique, values=getattr(self, reduce)([g.values, remapping], 1))

    def Const(self, array: Any, blob_out: Any = None, dtype: Any = None) -> BlobReference:
        """A fill op holding `array` (``ConstantFill`` for a bool, ``GivenTensor*Fill`` else)."""
        if isinstance(array, bool):
            return self.ConstantFill([], blob_out or 1, dtype=DataType.BOOL, value=array)
        array = np.array(array, dtype=dtype)
        fill = {np.dtype(np.int32): "GivenTensorIntFill", np.dtype(np.int64): "GivenTensorInt64Fill",
                np.dtype(np.bool_): "GivenTensorBoolFill"}.get(array.dtype, "GivenTensorFill")
        if array.dtype.kind in "US":
            fill = "GivenTensorStringFill"
        return getattr(self, fill)([], blob_out or 1, shape=array.shape,  # NOTE: numbers as packed bytes
                                   values=array.flatten() if array.dtype.kind in "fiub" else array.flatten().tolist())

    def AppendNet(self, net: "Net") -> "Net":
        defined = self._op_outputs()
        self._net.external_input.extend(i for i in net.Proto().external_input
                                        if i not in self._net.external_input and i not in defined)
        self._net.external_output.extend(o for o in net.Proto().external_output
                                         if o not in self._net.external_output)
        self.extend_ops(net.Proto().op)
        return self

    def AddGradientOperators(self, ys: Any, skip: int = 0) -> dict[Any, Any]:
        """Append the backward pass of ``op[skip:]`` for `ys`; return ``{blob: gradient}``.

        See :mod:`engine.autodiff.gradient_ir` (``IR.GetBackwardPass``).  Where a gradient needs an input
        that an op overwrote in place, a ``Copy`` saving it is inserted before that op
        (``IR.ForwardWithSaves``; Caffe2 reads the new value there, docs/fidelity.md).
        """
        from engine.autodiff.gradient_ir import IR
        ir = IR(self._net.op[skip:])
        grad_ops, input_to_grad = ir.GetBackwardPass(ys)
        input_to_grad = {BlobReference(k): (type(v)(*map(BlobReference, v)) if isinstance(v, tuple) else BlobReference(v))
                         for k, v in input_to_grad.items() if v is not None}  # NOTE: as Caffe2's map
        fwd, _ = ir.ForwardWithSaves()
        if len(fwd) != len(self._net.op) - skip:
            del self._net.op[skip:]
            self.extend_ops(fwd)
        self.extend_ops(grad_ops)
        return input_to_grad

    # ---- cloning ----
    def Clone(self, name: str, blob_remap: dict[str, str] | None = None,
              op_id_mask: Iterable[int] | None = None, keep_schema: bool = True,
              update_external_list: bool = False) -> "Net":
        """A renamed copy; `blob_remap` renames blobs (into control-flow subnets too)."""
        remap = {str(k): str(v) for k, v in (blob_remap or {}).items()}
        proto = caffe2_pb2.NetDef()
        proto.CopyFrom(self._net)
        proto.name = name
        ids = range(len(self._net.op)) if op_id_mask is None else op_id_mask
        del proto.op[:]
        proto.op.extend(self._net.op[i] for i in ids)
        _remap_net(proto, remap)
        if update_external_list:
            _recompute_external_lists(proto)
        new = Net(proto, inplace=True)
        if keep_schema:  # schema records follow the renamed blobs (the record's own schema module)
            for attr in ("_input_record", "_output_record"):
                rec = getattr(self, attr)
                if rec is not None:
                    schema = sys.modules[type(rec).__module__]
                    setattr(new, attr, schema.from_blob_list(
                        rec, [BlobReference(remap.get(str(b), str(b))) for b in rec.field_blobs()]))
        new._attr_dict.update(self._attr_dict)
        return new

    def ClonePartial(self, name: str, inputs: Any, outputs: Iterable[Any]
                     ) -> tuple["Net", list[BlobReference]]:
        """Only the ops computing `outputs` from `inputs`; internal blobs get ``name/``."""
        if isinstance(inputs, (dict, OrderedDict)):
            pairs = inputs
        elif isinstance(inputs, list) and all(isinstance(i, tuple) and len(i) == 2 for i in inputs):
            pairs = OrderedDict(inputs)
        else:
            pairs = OrderedDict(zip(inputs, inputs))
        input_names = {str(k): str(v) for k, v in pairs.items()}
        output_names = [str(o) for o in outputs]
        for o in output_names:
            if not self.BlobIsDefined(o):
                raise GraphError(f"net {self.Name()}: blob '{o}' is not defined")
        ssa, versions = get_ssa(self._net, {i: 0 for i in input_names})
        used = get_op_ids_in_path(ssa, versions, input_names, output_names)
        if set(used) & set(get_op_ids_in_path(ssa, versions, [], input_names)):
            raise GraphError(f"net {self.Name()}: Cannot partially clone net: some of the ops "
                             "required would generate the given input.")
        undefined = get_undefined_blobs([ssa[i] for i in used]) - set(input_names)
        prefix = f"{name}/" if name else ""
        mapping = {b: input_names.get(b, b if b in undefined else prefix + b) for b in versions}
        new = self.Clone(name, mapping, used)
        new_in = [mapping[i] for i in input_names] + sorted(undefined)
        new_out = [mapping[o] for o in output_names]
        proto = new.Proto()
        del proto.external_input[:], proto.external_output[:]
        proto.external_input.extend(new_in)
        proto.external_output.extend(new_out)
        return new, [new.GetBlobRef(o) for o in new_out]


def _recompute_external_lists(proto: caffe2_pb2.NetDef) -> None:
    written: dict[str, None] = {}
    used: set[str] = set()
    del proto.external_input[:], proto.external_output[:]
    for op in proto.op:
        for b in op.input:
            if b in written:
                used.add(b)
            else:
                proto.external_input.append(b)
        written.update(dict.fromkeys(op.output))
    proto.external_output.extend(b for b in written if b not in used)


# ---- the rest of caffe2.python.core's module functions -----------------------------------
GradGenMeta = namedtuple("GradGenMeta", ["grad_op", "idx", "gradient", "device_option"])
SparseGradGenMeta = namedtuple("SparseGradGenMeta", ["grad_op_indices", "idx_indices", "grad_op_values",
                                                     "idx_values", "gradient", "device_option"])
_engine_prefs: dict[str, Any] = {"global": {}, "per_op": {}}


def _registered() -> list[str]:
    from engine.caffe2.capi import registered_operators
    return registered_operators()


def RefreshRegisteredOperators(trigger_lazy: bool = True) -> None:
    """Kept for scripts; netviz's registry is always current."""


def IsOperatorWithEngine(op_type: str, engine: str) -> bool:
    """True when netviz runs `op_type` with `engine` ("DEFAULT", or "" — netviz has one engine per op)."""
    return engine in ("DEFAULT", "") and op_type in set(_registered())


def IsOperator(op_type: str) -> bool:
    """True when netviz has a kernel for `op_type` (Caffe2: a CPU/CUDA registry entry)."""
    return IsOperatorWithEngine(op_type, "DEFAULT")


def SetPerOpEnginePref(op_engine_pref: dict) -> None:
    """Remembered for scripts; netviz has one implementation per op, so engine choice changes nothing."""
    _engine_prefs["per_op"] = dict(op_engine_pref)


def SetGlobalEnginePref(global_engine_pref: dict) -> None:
    _engine_prefs["global"] = dict(global_engine_pref)


def SetEnginePref(global_engine_pref: dict, op_engine_pref: dict) -> None:
    SetGlobalEnginePref(global_engine_pref)
    SetPerOpEnginePref(op_engine_pref)


def SetOpEnginePref(op_type: str, op_engine_pref: dict) -> None:
    _engine_prefs["per_op"].setdefault(op_type, {}).update(op_engine_pref)


def GlobalInit(args: list[str]) -> None:
    from engine.caffe2.workspace import GlobalInit as global_init
    global_init(args)


def get_net_name(netlike: Any) -> Any:
    """The name of a Net or NetDef; anything else is returned as is."""
    if isinstance(netlike, Net):
        return netlike.Proto().name
    return netlike.name if isinstance(netlike, caffe2_pb2.NetDef) else netlike


def output_to_list(op_output: Any) -> list:
    """An op's outputs as a list (one BlobReference, or a tuple/list of them)."""
    assert type(op_output) in (list, tuple, BlobReference)
    return [op_output] if isinstance(op_output, BlobReference) else list(op_output)



def _extract_stacktrace() -> list[tuple[str, int, str]]:
    """``(file, line, function)`` of the frames above the net builder call, innermost first."""
    frame = sys._getframe(3)  # this function, _CreateAndAddToSelf, the add_op closure
    out = []
    while frame:
        out.append((frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))
        frame = frame.f_back
    return out


def remap_input(op: caffe2_pb2.OperatorDef, blob_name_remapping: dict[str, str]) -> None:
    """Rename inputs of `op` (and of its If/While/Do/RNN subnets) in place."""
    _remap_op_inputs(op, {str(k): str(v) for k, v in blob_name_remapping.items()})


def _remap_op_inputs(op: caffe2_pb2.OperatorDef, remap: dict[str, str]) -> None:
    names = [remap.get(b, b) for b in op.input]
    del op.input[:]
    op.input.extend(names)
    for a in op.arg:
        for n in ([a.n] if a.HasField("n") else []) + list(a.nets):
            for sub in n.op:
                _remap_op_inputs(sub, remap)


def _register_python_impl(f: Any, grad_f: Any = None, python_func_type: Any = None,
                          pass_workspace: bool = False) -> str:
    """Register a Python op body (and its gradient) and return its token; `python_func_type(f)`
    gives an object with ``forward``/``backward``; a ``(func, args, kwargs)`` tuple is built now."""
    from engine.runtime.ops.python_op import register_python_gradient_op, register_python_op
    if python_func_type:
        obj = python_func_type(f)
        f, grad_f = obj.forward, obj.backward
    else:
        f = f[0](*f[1], **f[2]) if isinstance(f, tuple) else f
        grad_f = grad_f[0](*grad_f[1], **grad_f[2]) if isinstance(grad_f, tuple) else grad_f
    token = register_python_op(f, pass_workspace, "")
    if grad_f:
        register_python_gradient_op(token, grad_f)
    return token


def CreatePythonOperator(f: Any, inputs: Any, outputs: Any, grad_f: Any = None, pass_workspace: bool = False,
                         python_func_type: Any = None, *args: Any, **kwargs: Any) -> caffe2_pb2.OperatorDef:
    """A ``Python`` op calling ``f(inputs, outputs)`` (``+ workspace`` with `pass_workspace`)
    when it runs; `grad_f` is its ``PythonGradient`` body (engine.runtime.ops.python_op)."""
    kwargs["token"] = _register_python_impl(f, grad_f, python_func_type, pass_workspace=pass_workspace)
    return CreateOperator("Python", inputs, outputs, *args, **kwargs)


def _net_python(self: Net, f: Any, grad_f: Any = None, python_func_type: Any = None, pass_workspace: bool = False,
                grad_output_indices: list[int] | None = None, grad_input_indices: list[int] | None = None) -> Any:
    """``net.Python(f, grad_f)(inputs, outputs)`` adds a Python op (see :func:`CreatePythonOperator`).

    `f`/`grad_f` may be ``(func, args, kwargs)`` builder tuples, built where the op runs (the op
    carries the key of the builder kept in this process: see :mod:`engine.runtime.ops.python_op`)."""
    from engine.runtime.ops.python_op import register_builder

    def builder(t: Any) -> bytes:
        if not isinstance(t, tuple):
            return b""
        assert len(t) == 3, "Expected builder tuple (func, args, kwargs)"
        return register_builder(*t)
    f_builder, grad_builder = builder(f), builder(grad_f)
    assert (not grad_f) or ((not f_builder) == (not grad_builder)), \
        "A tuple has to be passed to both f and grad_f or neither."
    extra: dict[str, Any] = ({"pickled_builder": f_builder, "pickled_grad_builder": grad_builder,
                              "pass_workspace": pass_workspace} if f_builder else
                             {"token": _register_python_impl(f, grad_f, python_func_type, pass_workspace)})

    def add(*args: Any, **kwargs: Any) -> Any:
        return self._CreateAndAddToSelf("Python", *args, grad_output_indices=grad_output_indices or [],
                                        grad_input_indices=grad_input_indices or [], **{**kwargs, **extra})
    return add


Net.Python = _net_python


OpSSA = namedtuple("OpSSA", ["op", "in_versions", "out_versions"])


def GetIndexFromGradientList(g_list: list, name: Any) -> int | None:
    """Index of `name` in a gradient list (a dense name, or either part of a GradientSlice), or None."""
    for i, g in enumerate(g_list):
        if g == name or (isinstance(g, tuple) and name in (g[0], g[1])):
            return i
    return None


def GetGlobalInitArgs() -> list[str]:
    from engine.caffe2.capi import _global_init_args
    return list(_global_init_args)


def TriggerLazyImport() -> None:
    """Caffe2 loads lazily registered op libraries here; netviz registers every op at import."""


def remap_proto(argument: caffe2_pb2.Argument, blob_remap: dict[str, str]) -> None:
    """Rename blobs inside the net held by `argument` (``argument.n``), in place."""
    _remap_net(argument.n, {str(k): str(v) for k, v in blob_remap.items()})


def recurrent_network_op_remap(op: caffe2_pb2.OperatorDef, prefix: str, blob_remap: dict[str, str]) -> None:
    """Rename blobs named by a RecurrentNetwork(Gradient) op's arguments: string lists,
    ``timestep`` and the step nets (`prefix` is unused, as in Caffe2)."""
    def renamed(b: Any) -> bytes:
        b = b.decode("utf-8") if isinstance(b, bytes) else b
        return blob_remap.get(b, b).encode("utf-8")
    for a in op.arg:
        if len(a.strings):
            a.strings[:] = [renamed(x) for x in a.strings]
        elif a.name == "timestep":
            a.s = renamed(a.s)
        elif a.name.endswith("step_net"):
            remap_proto(a, blob_remap)


def control_op_remap(op: caffe2_pb2.OperatorDef, prefix: str, blob_remap: dict[str, str]) -> None:
    """Rename blobs inside an If/AsyncIf (then/else) or While (loop/cond) op's nets."""
    names = ("then_net", "else_net") if op.type in ("If", "AsyncIf") else ("loop_net", "cond_net")
    for a in op.arg:
        if a.name in names:
            assert a.n, f"Expected non empty net in {op.type}'s {a.name} argument"
            remap_proto(a, blob_remap)


DEFAULT_REMAP_FUNCS = {"RecurrentNetwork": recurrent_network_op_remap,
                       "RecurrentNetworkGradient": recurrent_network_op_remap,
                       "If": control_op_remap, "While": control_op_remap, "AsyncIf": control_op_remap}


def clone_and_bind_net(net: Net, name: str, prefix: str, blob_remap: dict | None = None, inputs: Any = None,
                       keep_schema: bool = True) -> tuple[Net, dict[str, str]]:
    """Clone `net` as `name` with its own blobs prefixed by `prefix` (inputs it only reads keep
    their names), binding its input record to the `inputs` record; returns ``(clone, remap)``."""
    blob_remap = {} if blob_remap is None else blob_remap
    if inputs is not None:
        original = net.input_record()
        assert original is not None
        extra = set(original.field_names()) - set(inputs.field_names())
        assert not extra, f"Schemas don't match, extra fields {extra} found in the net {net.Name()}."
        mapping = dict(zip(original.field_names(), original.field_blobs()))
        blob_remap.update({str(mapping[f]): str(b) for f, b in zip(inputs.field_names(), inputs.field_blobs())
                           if f in mapping})
    ssa, versions = get_ssa(net.Proto())
    undefined = get_undefined_blobs(ssa)
    for blob in versions:
        blob_remap.setdefault(blob, blob if blob in undefined else prefix + blob)
    cloned = net.Clone(name, blob_remap, keep_schema=keep_schema)
    if not keep_schema and inputs:
        cloned.set_input_record(inputs)
    return cloned, blob_remap
