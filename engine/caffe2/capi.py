"""What Caffe2 scripts reach through ``workspace.C`` (Caffe2's pybind11 module), for netviz.

Caffe2 scripts and tests use the C extension directly in a few places: ``C.Workspace()`` for a
private workspace, ``ws.blobs["x"].feed(a)`` / ``.fetch()``, ``C.Workspace.current``,
``C.OpSchema.get("Relu")``, ``C.registered_operators()`` and build flags such as
``C.has_mkldnn``.  This module answers those with netviz's engine; ``engine.caffe2.workspace.C`` is this
module, and the conformance harness maps ``caffe2.python._import_c_extension`` to it.

Flags answer truthfully for netviz on this machine: GPU support means CuPy sees a CUDA device;
netviz has no MKL-DNN, TensorRT, FBGEMM, NUMA or ASAN builds.
"""
from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from engine.runtime import device as _dev
from engine.errors import ExecutionError
from engine.analysis.nomnigraph import (  # noqa: F401  (Caffe2's nomnigraph bindings, C.NNModule & co.)
    Annotation, Edge, Graph, MatchPredicateRef, NeuralNetData, NeuralNetOperator, NNGraph, NNMatchGraph,
    NNModule, NNModuleFromProtobuf, NNModuleFromProtobufDistributed, NNSubgraph, Node, NodeRef,
    matchSubgraph, replaceAllUsesWith, replaceAsConsumer, replaceProducer)
from engine.runtime.pybind import (  # noqa: F401  (C.Workspace, C.Blob and net observers live in the runtime)
    Blob, NetHandle, Observer, Workspace, _Blobs, _CurrentDescriptor, _netdef, observers)

has_mkldnn = False
use_mkldnn = False
use_trt = False
use_rocm = False
has_fbgemm = False
has_hip_support = False
is_asan = False
define_caffe2_no_operator_schema = False


def __getattr__(name: str) -> Any:
    # GPU flags are computed on first use: importing CuPy is slow and optional.
    if name in ("has_gpu_support", "has_cuda_support"):
        return _dev.has_gpu()
    raise AttributeError(f"module 'engine.caffe2.capi' has no attribute '{name}'")


def num_cuda_devices() -> int:
    cp = _dev.cupy_module()
    return int(cp.cuda.runtime.getDeviceCount()) if cp is not None else 0


def get_cuda_version() -> int:
    cp = _dev.cupy_module()
    return int(cp.cuda.runtime.runtimeGetVersion()) if cp is not None else 0


def get_cudnn_version() -> int:
    return 0


def get_build_options() -> dict[str, str]:
    """Build facts in Caffe2's key names (``USE_CUDA``, ``USE_MKLDNN``, …) for netviz."""
    gpu = "ON" if _dev.has_gpu() else "OFF"
    return {"USE_CUDA": gpu, "USE_ROCM": "OFF", "USE_MKLDNN": "OFF", "USE_NNPACK": "OFF",
            "USE_FBGEMM": "OFF", "USE_NUMA": "OFF", "BUILD_BINARY": "OFF"}


_global_init_args: list[str] = []


def global_init(args: list[str]) -> None:
    """Caffe2's GlobalInit: netviz has no gflags; the arguments are remembered and otherwise ignored."""
    _global_init_args[:] = list(args)


def registered_operators() -> list[str]:
    """Op types netviz can run (its kernel registry), sorted."""
    import engine.runtime.ops  # noqa: F401  (registers every family)
    from engine.catalogue.registry import KERNELS
    return sorted(KERNELS)


def register_python_op(func: Any, pass_workspace: bool = False, name: str = "") -> str:
    from engine.runtime.ops.python_op import register_python_op as register
    return register(func, pass_workspace, name)


def register_python_gradient_op(token: str, grad_func: Any) -> None:
    from engine.runtime.ops.python_op import register_python_gradient_op as register
    register(token, grad_func)


def add_observer_to_net(net_name: str, observer_type: str) -> Observer:
    ob = Observer(observer_type)
    observers.setdefault(net_name, []).append(ob)
    return ob


def remove_observer_from_net(net_name: str, observer: Observer) -> None:
    observers.get(net_name, []).remove(observer)


def num_observers_on_net(net_name: str) -> int:
    return len(observers.get(net_name, []))


class Mode(enum.IntEnum):
    """``C.Mode``: how ``create_db`` opens a database."""

    read = 0
    write = 1
    new = 2


def registered_dbs() -> list[str]:
    """Database types netviz reads and writes (Caffe2's ``minidb`` file format)."""
    return ["minidb"]


class _Transaction:
    """Puts go straight to the file (Caffe2 commits when the transaction is dropped)."""

    def __init__(self, db: "DB") -> None:
        self._db = db

    def put(self, key: bytes | str, value: bytes) -> None:
        from engine.runtime.blobio import write_minidb
        k = key.decode("utf-8", "surrogateescape") if isinstance(key, bytes) else key
        self._db._records.append((k, bytes(value)))
        write_minidb(self._db.path, self._db._records)

    def commit(self) -> None:
        """Nothing pending: every put is already written."""


class _Cursor:
    def __init__(self, records: list[tuple[str, bytes]]) -> None:
        self._records, self._i = records, 0

    def supports_seek(self) -> bool:
        return False

    def seek_to_first(self) -> None:
        self._i = 0

    def next(self) -> None:  # noqa: A003 (Caffe2's name)
        self._i += 1

    def valid(self) -> bool:
        return self._i < len(self._records)

    def key(self) -> bytes:
        return self._records[self._i][0].encode("utf-8", "surrogateescape")

    def value(self) -> bytes:
        return self._records[self._i][1]


class DB:
    """A minidb file opened by ``create_db`` (engine.runtime.blobio's reader and writer)."""

    def __init__(self, path: str, mode: int) -> None:
        import os
        from engine.runtime.blobio import read_minidb
        self.path = path
        if mode == Mode.new and os.path.exists(path):
            raise ExecutionError(f"minidb {path}: file already exists (mode new)")
        self._records = list(read_minidb(path)) if mode == Mode.read else []
        if mode != Mode.read:
            open(path, "wb").close()

    def new_transaction(self) -> _Transaction:
        return _Transaction(self)

    def new_cursor(self) -> _Cursor:
        return _Cursor(list(self._records))

    def close(self) -> None:
        """Nothing to flush."""


def create_db(db_type: str, path: str, mode: int) -> DB:
    if db_type not in registered_dbs():
        raise ExecutionError(f"db type {db_type!r}: netviz knows {registered_dbs()}")
    return DB(path, mode)


class OpSchema:
    """``C.OpSchema.get(name)``: Caffe2's schema facts for an op type (engine.catalogue), or None
    when Caffe2 registers no schema for it.  Counts, slot names, arguments and source file are
    Caffe2's; ``doc`` is empty (netviz does not copy Caffe2's doc strings)."""

    INF = 2 ** 31 - 1

    class Argument:
        def __init__(self, name: str, required: bool) -> None:
            self.name, self.required, self.description = name, required, ""

    def __init__(self, facts: Any) -> None:
        self.name, self.file, self.line, self.doc, self.private = facts.type, facts.file, 0, "", False
        self.min_input, self.min_output = facts.min_input, facts.min_output
        self.max_input = self.INF if facts.max_input is None else facts.max_input
        self.max_output = self.INF if facts.max_output is None else facts.max_output
        self.inf = self.INF
        self.args = [OpSchema.Argument(n, r) for n, r in facts.args]
        self.input_desc = [(n, "") for n in facts.inputs]
        self.output_desc = [(n, "") for n in facts.outputs]
        self._facts = facts

    @staticmethod
    def get(name: str) -> "OpSchema | None":
        from engine.catalogue.facts import facts
        f = facts(name)
        return OpSchema(f) if f is not None and f.has_schema else None

    def num_inputs_allowed(self, n: int) -> bool:
        allowed = self._facts.inputs_allowed
        return self.min_input <= n <= self.max_input and (allowed is None or n in allowed or n > self.min_input + 8)

    def num_outputs_allowed(self, n: int) -> bool:
        allowed = self._facts.outputs_allowed
        return self.min_output <= n <= self.max_output and (allowed is None or n in allowed or n > self.min_output + 8)

    def num_inputs_outputs_allowed(self, n_in: int, n_out: int) -> bool:
        return self.num_inputs_allowed(n_in) and self.num_outputs_allowed(n_out)

    def inplace_enforced(self, i: int, o: int) -> bool:
        return (i, o) in self._facts.inplace_enforced

    def CalculateOutput(self, num_input: int) -> int:  # noqa: N802 (Caffe2's name)
        """The output count the schema gives for `num_input` inputs, else the fixed count, else -1."""
        computed = self._facts.outputs_for_inputs or {}
        if num_input in computed:
            return computed[num_input]
        return self.min_output if self.min_output == self.max_output else -1


# ---- C++ transforms and memonger (caffe2.python.transformations / memonger) ----

def _str(b: bytes | str) -> str:
    return b.decode() if isinstance(b, bytes) else str(b)


def transform_exists(name: str) -> bool:
    """Whether ``name`` is a graph pass (Caffe2's OptimizationPassRegistry; engine.analysis.transforms)."""
    from engine.analysis.transforms import OPT_PASSES
    return name in OPT_PASSES


def workspace_transform_exists(name: str) -> bool:
    """Whether ``name`` is a pass that also rewrites workspace blobs (``FuseConvBN``)."""
    from engine.analysis.transforms import WORKSPACE_OPT_PASSES
    return name in WORKSPACE_OPT_PASSES


def run_transform(name: str, net_def: bytes) -> bytes:
    """The serialized net after graph pass `name` (RuntimeError for a name that is not one)."""
    from engine.analysis.transforms import run_opt_pass
    if not transform_exists(name):
        raise ExecutionError(f"Pass doesn't exist: {name}")
    return run_opt_pass(name, _netdef(net_def)).SerializeToString()


def run_workspace_transform(name: str, net_def: bytes) -> bytes:
    """The serialized net after workspace pass `name`, which also rewrites current-workspace blobs."""
    from engine.analysis.transforms import run_opt_pass
    if not workspace_transform_exists(name):
        raise ExecutionError(f"Pass doesn't exist: {name}")
    return run_opt_pass(name, _netdef(net_def)).SerializeToString()


def transform_addNNPACK(net_def: bytes) -> bytes:  # noqa: N802 (Caffe2's name)
    """``transformations.addNNPACK``: as ``run_transform("AddNNPACK", ...)``."""
    return run_transform("AddNNPACK", net_def)


def transform_fuseNNPACKConvRelu(net_def: bytes) -> bytes:  # noqa: N802 (Caffe2's name)
    """``transformations.fuseNNPACKConvRelu``: as ``run_transform("FuseNNPACKConvRelu", ...)``."""
    return run_transform("FuseNNPACKConvRelu", net_def)


def transform_fuseConvBN(net_def: bytes) -> bytes:  # noqa: N802 (Caffe2's name)
    """``transformations.fuseConvBN``: FuseConvBN, the net printed back bare as Caffe2 does here
    (no name or arguments; external names in graph order, Caffe2's in hash order)."""
    from engine.analysis.transforms import run_opt_pass
    return run_opt_pass("FuseConvBN", _netdef(net_def), keep_net=False).SerializeToString()


def transform_optimizeForMKLDNN(net_def: bytes, training_mode: bool = False) -> bytes:  # noqa: N802
    """Caffe2's MKL-DNN graph optimisation for ops off the IDEEP device (engine.analysis.transforms)."""
    from engine.analysis.transforms import optimize_for_mkldnn
    return optimize_for_mkldnn(_netdef(net_def), bool(training_mode)).SerializeToString()


def apply_transform(transform_key: str, net_def: bytes) -> bytes:
    """``workspace.ApplyTransform`` on a serialized net (Caffe2's older transform registry)."""
    from engine.caffe2 import workspace
    return workspace.ApplyTransform(transform_key, _netdef(net_def)).SerializeToString()


def apply_transform_if_faster(transform_key: str, net_def: bytes, init_def: bytes, warmup_runs: int,
                              main_runs: int, improvement_threshold: float) -> bytes:
    """``workspace.ApplyTransformIfFaster`` on serialized nets."""
    from engine.caffe2 import workspace
    return workspace.ApplyTransformIfFaster(transform_key, _netdef(net_def), _netdef(init_def), warmup_runs,
                                            main_runs, improvement_threshold).SerializeToString()


def memonger_compute_blob_recycling_for_dag(net_def: bytes, input_blobs: list, op_indices: list,
                                            shareable_blob_names: Any, namescope: bytes | str,
                                            dont_share_blob_names: Any, blob_shapes: Mapping) -> bytes:
    """engine.analysis.memonger.compute_blob_recycling_for_dag with Caffe2's arguments (bytes names, sets)."""
    from engine.analysis import memonger
    return memonger.compute_blob_recycling_for_dag(
        _netdef(net_def), [_str(b) for b in input_blobs], [int(i) for i in op_indices],
        {_str(b) for b in shareable_blob_names}, _str(namescope), {_str(b) for b in dont_share_blob_names},
        {_str(k): list(v) for k, v in blob_shapes.items()}).SerializeToString()


def memonger_optimize_inference_net(net_def: bytes, static_blobs: list) -> bytes:
    """engine.analysis.memonger.optimize_inference_net with Caffe2's arguments (serialized net, bytes names)."""
    from engine.analysis import memonger
    return memonger.optimize_inference_net(_netdef(net_def), [_str(b) for b in static_blobs]).SerializeToString()
