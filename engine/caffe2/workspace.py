"""``caffe2.python.workspace``: the module API on the current workspace (``FeedBlob``, ``RunNet``,
``SwitchWorkspace``…), as Caffe2 scripts call it.

The workspaces themselves (:class:`~engine.runtime.workspace.Workspace`, the current one) are the
runtime's; this module acts on them with Caffe2's names and semantics.
"""
from __future__ import annotations

import contextlib
import os
import time
from collections import namedtuple
from collections.abc import Iterable, Iterator, MutableMapping
from typing import Any

import numpy as np

from engine.caffe2 import capi as C  # noqa: N812  (Caffe2 scripts call it workspace.C)
from engine.runtime import device as dev
from engine.runtime.blobio import Int8Tensor as Int8Blob  # NOTE: Int8Tensor below is Caffe2's namedtuple
from engine.runtime.plans import EMPTY
from engine.runtime.workspace import (  # noqa: F401  (Caffe2 scripts reach these through workspace.*)
    Workspace, _current, _workspaces, current, tensor_proto_to_array)
from engine.errors import BlobNotFoundError, ExecutionError
from proto import caffe2_pb2


def CurrentWorkspace() -> str:
    return _current[0]


def Workspaces() -> list[str]:
    return list(_workspaces)


def SwitchWorkspace(name: str | Workspace, create_if_missing: bool | None = None) -> None:
    """Make `name` current; create it only when `create_if_missing` is truthy.

    A workspace object (``Workspace`` or ``C.Workspace``) becomes current as itself, registered
    under its name (or, when another workspace has that name, under a unique key)."""
    name = getattr(name, "_ws", name)  # a C.Workspace wraps an engine Workspace
    if isinstance(name, Workspace):
        key = next((k for k, w in _workspaces.items() if w is name), None)
        if key is None:
            key = name.name if name.name not in _workspaces else f"{name.name}#{id(name)}"
            _workspaces[key] = name
        name = key
    if name not in _workspaces:
        if not create_if_missing:
            raise ExecutionError(f"Workspace {name} does not exist")
        _workspaces[name] = Workspace(name)
    _current[0] = name


def ResetWorkspace(root_folder: str | None = None) -> bool:
    """Replace the current workspace by an empty one of the same name (blobs and nets dropped)."""
    old = current()
    ws = _workspaces[_current[0]] = Workspace(old.name)
    ws.root_folder = old.root_folder if root_folder is None else root_folder
    if root_folder is not None and not os.path.exists(root_folder):
        os.makedirs(root_folder)
    return True


def RootFolder() -> str:
    return current().root_folder


def Blobs() -> list[str]:
    return current().blobs()


def HasBlob(name: str) -> bool:
    return current().has_blob(str(name))


def CreateBlob(name: str) -> bool:
    return current().create_blob(str(name))


def FeedBlob(name: str, arr: Any, device_option: caffe2_pb2.DeviceOption | None = None) -> bool:
    """Feed `arr` under `name`; without `device_option` the active DeviceScope applies."""
    if device_option is None:
        from engine.model.scope import CurrentDeviceScope

        device_option = CurrentDeviceScope()
    return current().feed_blob(str(name), arr, device_option)


def FeedBlobs(names: Iterable[str], arrs: Iterable[Any], device_option=None) -> list[bool]:
    return [FeedBlob(n, a, device_option) for n, a in zip(names, arrs)]


def FetchBlob(name: str) -> Any:
    return current().fetch_blob(str(name))


def FetchBlobs(names: Iterable[str]) -> list[Any]:
    return [FetchBlob(n) for n in names]


def CreateNet(net: Any, overwrite: bool = False, input_blobs: Iterable[str] | None = None) -> bool:
    return bool(current().create_net(_netdef(net), overwrite, input_blobs))


def RunNet(name: Any, num_iter: int = 1, allow_fail: bool = False) -> bool:
    return current().run_net(GetNetName(name), num_iter, allow_fail)


def RunNetOnce(net: Any) -> bool:
    return current().run_net_once(_netdef(net))


def RunOperatorOnce(op: Any) -> bool:
    if isinstance(op, bytes):
        op = caffe2_pb2.OperatorDef.FromString(op)
    return current().run_operator_once(op)


def RunOperatorsOnce(ops: Iterable[caffe2_pb2.OperatorDef]) -> bool:
    """Run `ops` in order; a failing op raises (as in Caffe2), see :func:`try_run_operators`."""
    for op in ops:
        RunOperatorOnce(op)
    return True


def try_run_operators(ops: Iterable[caffe2_pb2.OperatorDef]) -> bool:
    """Like :func:`RunOperatorsOnce` but False instead of an :class:`ExecutionError` (debugger use)."""
    try:
        return RunOperatorsOnce(ops)
    except ExecutionError:
        return False


def GetNetName(net: Any) -> str:
    if isinstance(net, str):
        return net
    if isinstance(net, caffe2_pb2.NetDef):
        return net.name
    return net.Name()


def _netdef(net: Any) -> caffe2_pb2.NetDef:
    """A NetDef from a NetDef, a ``core.Net`` or serialized bytes (``StringifyProto``'s output)."""
    if isinstance(net, bytes):
        return caffe2_pb2.NetDef.FromString(net)
    return net if isinstance(net, caffe2_pb2.NetDef) else net.Proto()


# ---- the rest of caffe2.python.workspace ----------------------------------------------------
# Build facts answer for netviz on this machine (engine.caffe2.capi): GPU support = CuPy sees a device.
has_gpu_support = has_cuda_support = C.has_gpu_support
has_hip_support, has_fbgemm, is_asan = False, False, False
GpuDeviceType = caffe2_pb2.CUDA
"""Caffe2 sets CUDA even without GPU support (tests build CUDA device options regardless)."""
NumCudaDevices = NumGpuDevices = C.num_cuda_devices
GetCUDAVersion, GetCuDNNVersion = C.get_cuda_version, C.get_cudnn_version
RegisteredOperators = C.registered_operators
operator_tracebacks: dict[str, dict] = {}


def GlobalInit(args: list[str]) -> None:
    """Caffe2's GlobalInit: remembered (engine.caffe2.capi); the flags netviz honours take effect (engine.runtime.executor)."""
    from engine.runtime import executor
    C.global_init(args)
    executor.set_global_flags(args)


def GetDeviceProperties(device_id: int) -> dict | None:
    cp = dev.cupy_module()
    return dict(cp.cuda.runtime.getDeviceProperties(device_id)) if cp is not None else None


def GetGpuPeerAccessPattern() -> np.ndarray:
    n = NumGpuDevices()
    return np.ones((n, n), dtype=bool) if n else np.array([])


def GetGPUMemoryInfo() -> dict | None:
    cp = dev.cupy_module()
    return None if cp is None else dict(zip(("free", "total"), cp.cuda.runtime.memGetInfo()))


def IsNUMAEnabled() -> bool:
    return False


def GetNumNUMANodes() -> int:
    return -1


def GetBlobNUMANode(name: Any) -> int:
    return -1


def GetBlobSizeBytes(name: Any) -> int:
    """Bytes of the blob's tensor data (0 for a non-tensor), as Caffe2's ``nbytes``."""
    v = current().values.get(StringifyBlobName(name))
    return int(v.nbytes) if hasattr(v, "nbytes") and hasattr(v, "shape") else 0


def ResetBlob(name: Any) -> None:
    """Make the blob uninitialized again (it stays in the workspace)."""
    ws = current()
    if not ws.has_blob(str(name)):
        raise BlobNotFoundError(f"Can't find blob: {name}")
    ws.values[str(name)] = EMPTY


def SerializeBlob(name: Any) -> bytes:
    """The blob as a serialised BlobProto (engine.runtime.blobio; Caffe2 parses the same bytes)."""
    from engine.runtime.blobio import serialize_blob
    return serialize_blob(str(name), FetchBlob(name))


def DeserializeBlob(name: Any, data: bytes) -> None:
    from engine.runtime.blobio import deserialize_blob
    FeedBlob(name, deserialize_blob(data)[1])


def StringifyProto(obj: Any) -> Any:
    """A proto (or anything with ``Proto()``) as serialized bytes; a string passes through."""
    from google.protobuf.message import Message
    if isinstance(obj, (str, bytes)):
        return obj
    if isinstance(obj, Message):
        return obj.SerializeToString()
    if hasattr(obj, "Proto"):
        return obj.Proto().SerializeToString()
    raise ValueError("Unexpected argument to StringifyProto of type " + type(obj).__name__)


def _stringify_name(name: Any, expected_type: str) -> str:
    if isinstance(name, str):
        return name
    assert type(name).__name__ == expected_type, f"Expected a string or {expected_type}"
    return str(name)


def StringifyBlobName(name: Any) -> str:
    return _stringify_name(name, "BlobReference")


def StringifyNetName(name: Any) -> str:
    return _stringify_name(name, "Net")


def RunOperatorMultiple(op: Any, num_runs: int) -> bool:
    """Run one instance of `op` `num_runs` times (as Caffe2: what the op keeps between runs lasts)."""
    from engine.runtime import executor
    if isinstance(op, bytes):
        op = caffe2_pb2.OperatorDef.FromString(op)
    ws = current()
    bound = executor.bind(op, workspace=ws)
    for _ in range(num_runs):
        executor.run_bound(bound, ws)
    return True


def _plan(plan_or_step: Any) -> caffe2_pb2.PlanDef:
    """The PlanDef to run; a ``core.ExecutionStep`` builder becomes a plan carrying its nets."""
    from engine.caffe2.plan_builder import ExecutionStep, Plan
    from engine.runtime import plandef as plans
    return plans.as_plan(Plan(plan_or_step) if isinstance(plan_or_step, ExecutionStep) else plan_or_step)


def RunPlan(plan_or_step: Any) -> bool:
    """Run a Plan / PlanDef / ExecutionStep in the current workspace (engine.runtime.plans)."""
    from engine.runtime import plandef as plans
    return plans.run_plan(_plan(plan_or_step), current())


def RunPlanInBackground(plan_or_step: Any) -> Any:
    """Start the plan on a thread; the handle has ``is_done()`` and ``is_succeeded()``."""
    from engine.runtime import plandef as plans
    return plans.BackgroundPlan(_plan(plan_or_step), current())


def BenchmarkNet(name: Any, warmup_runs: int, main_runs: int, run_individual: bool) -> list[float]:
    """Milliseconds per run of a created net: ``[mean over main_runs]``."""
    import time
    ws, net = current(), GetNetName(name)
    for _ in range(warmup_runs):
        ws.run_net(net)
    t0 = time.perf_counter()
    for _ in range(main_runs):
        ws.run_net(net)
    return [(time.perf_counter() - t0) * 1e3 / max(main_runs, 1)]


def BenchmarkNetOnce(name: Any) -> bool:
    return current().run_net(GetNetName(name))


def GetStats() -> dict[str, int]:
    return {}


def FillRandomNetworkInputs(net: Any, input_dims: list, input_types: list) -> None:
    """Feed random values to the inputs of each op of `net` (one dims/types list per op), as
    Caffe2: "float" uniform in [0, 1), anything else int32."""
    rng = np.random.default_rng()
    ops = list(_netdef(net).op)
    if len(input_dims) != len(ops) or len(input_types) != len(ops):
        raise ExecutionError(f"FillRandomNetworkInputs: {len(input_dims)} dims lists and {len(input_types)} "
                             f"types lists for {len(ops)} ops")
    for i, (op, dims, types) in enumerate(zip(ops, input_dims, input_types)):
        if len(dims) != len(op.input) or len(types) != len(op.input):
            raise ExecutionError(f"FillRandomNetworkInputs: op #{i} {op.type} has {len(op.input)} inputs, "
                                 f"given {len(dims)} dims and {len(types)} types")
        for name, shape, kind in zip(op.input, dims, types):
            arr = (rng.random(shape).astype(np.float32) if kind == "float"
                   else rng.integers(0, 10, shape).astype(np.int32))
            FeedBlob(name, arr)


def InferShapesAndTypes(nets: Iterable[Any], blob_dimensions: dict | None = None, nets_proto: bool = False,
                        blob_types: dict | None = None) -> tuple[dict[str, list[int]], dict[str, int]]:
    """``(shapes, types)`` by blob name from netviz's shape rules, seeded by `blob_dimensions`
    (with `blob_types`) or, when None, by the current workspace's tensors."""
    from engine.runtime.blobio import data_type_of
    from engine.runtime.shapes import TensorInfo
    from engine.runtime.inference import infer_shapes
    if blob_dimensions is None:
        ws = current()
        seeds = {b: TensorInfo(tuple(v.shape), data_type_of(np.asarray(dev.to_host(v))))
                 for b in ws.blobs() if hasattr(v := ws.values[b], "shape")}
    else:
        seeds = {b: TensorInfo(tuple(d), (blob_types or {}).get(b, caffe2_pb2.TensorProto.FLOAT))
                 for b, d in blob_dimensions.items()}
    shapes = {name: list(info.shape) for name, info in seeds.items()}
    types = {name: info.dtype for name, info in seeds.items()}
    for net in nets:  # NOTE: in order, each net seeing what the ones before it made (as Caffe2)
        latest: dict[str, tuple[int, Any]] = {}
        for (name, version), info in infer_shapes(_netdef(net), dict(seeds)).items():
            if name not in latest or version >= latest[name][0]:
                latest[name] = (version, info)
        for name, (_, info) in latest.items():
            if info.shape is not None and all(d is not None for d in info.shape):
                shapes[name], types[name] = [int(d) for d in info.shape], info.dtype
                seeds[name] = info
    return shapes, types


class _BlobDict(MutableMapping):
    """``workspace.blobs``: the current workspace's blobs as a dict (fetch on read, feed on write)."""

    def __getitem__(self, key: Any) -> Any:
        if not HasBlob(key):
            raise KeyError(key)
        return FetchBlob(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        FeedBlob(key, value)

    def __delitem__(self, key: Any) -> None:
        current().remove_blob(str(key))

    def __len__(self) -> int:
        return len(Blobs())

    def __iter__(self) -> Iterator[str]:
        return iter(Blobs())

    def __contains__(self, key: object) -> bool:
        return HasBlob(key)


blobs = _BlobDict()


class Predictor:
    """``workspace.Predictor(init_net, predict_net)``: runs the init net once in a private
    workspace; ``run(inputs)`` feeds a list (external-input order) or a dict and returns the
    external outputs as a list."""

    def __init__(self, init_net: Any, predict_net: Any) -> None:
        self._ws, self._net = Workspace("predictor"), _parse_net(predict_net)
        self._ws.run_net_once(_parse_net(init_net))

    def run(self, inputs: Any) -> list[np.ndarray]:
        names = [i for i in self._net.external_input if not self._ws.has_blob(i)] or list(self._net.external_input)
        for name, value in (inputs.items() if isinstance(inputs, dict) else zip(names, inputs)):
            self._ws.feed_blob(name, value)
        self._ws.run_net_once(self._net)
        return [self._ws.fetch_blob(o) for o in self._net.external_output]


def _parse_net(net: Any) -> caffe2_pb2.NetDef:
    return caffe2_pb2.NetDef.FromString(net) if isinstance(net, bytes) else _netdef(net)


def CallWithExceptionIntercept(func: Any, op_id_fetcher: Any, net_name: str, *args: Any, **kwargs: Any) -> Any:
    """Caffe2 logs the op's Python traceback before re-raising; netviz's message names the op."""
    return func(*args, **kwargs)


@contextlib.contextmanager
def WorkspaceGuard(workspace_name: str) -> Iterator[None]:
    """Switch to (creating) `workspace_name` for the block, then back."""
    previous = CurrentWorkspace()
    SwitchWorkspace(workspace_name, True)
    try:
        yield
    finally:
        SwitchWorkspace(previous)


# ---- immediate mode: ops run as soon as they are made, in a workspace of their own ---------
_immediate_mode = False
_immediate_root_folder = ""
_IMMEDIATE_WORKSPACE = "_CAFFE2_IMMEDIATE"


def IsImmediate() -> bool:
    return _immediate_mode


def StartImmediate(i_know: bool = False) -> None:
    """Enter immediate mode (a fresh ``_CAFFE2_IMMEDIATE`` workspace with a temp root folder)."""
    import tempfile
    global _immediate_mode, _immediate_root_folder
    if IsImmediate():
        StopImmediate()
    _immediate_mode = True
    with WorkspaceGuard(_IMMEDIATE_WORKSPACE):
        _immediate_root_folder = tempfile.mkdtemp()
        ResetWorkspace(_immediate_root_folder)


def StopImmediate() -> None:
    """Leave immediate mode: its workspace is emptied and its root folder deleted."""
    import shutil
    global _immediate_mode, _immediate_root_folder
    if not IsImmediate():
        return
    with WorkspaceGuard(_IMMEDIATE_WORKSPACE):
        ResetWorkspace()
    shutil.rmtree(_immediate_root_folder, ignore_errors=True)
    _immediate_root_folder, _immediate_mode = "", False


def ImmediateBlobs() -> list[str]:
    with WorkspaceGuard(_IMMEDIATE_WORKSPACE):
        return Blobs()


def RunOperatorImmediate(op: Any) -> bool:
    with WorkspaceGuard(_IMMEDIATE_WORKSPACE):
        return RunOperatorOnce(op)


def FetchImmediate(*args: Any, **kwargs: Any) -> Any:
    with WorkspaceGuard(_IMMEDIATE_WORKSPACE):
        return FetchBlob(*args, **kwargs)


def FeedImmediate(*args: Any, **kwargs: Any) -> bool:
    with WorkspaceGuard(_IMMEDIATE_WORKSPACE):
        return FeedBlob(*args, **kwargs)


def FetchTorch(name: Any) -> Any:
    """The blob as a torch tensor (needs torch importable in this Python)."""
    import torch
    return torch.as_tensor(FetchBlob(name))


Cost = namedtuple("Cost", ["flops", "bytes_written", "bytes_read"])


def GetOperatorCost(operator: Any, blobs: Iterable[str]) -> tuple[int, int, int]:
    """``Cost(flops, bytes_written, bytes_read)`` of an op on the current workspace's blobs
    (Caffe2's cost inference, engine.analysis.cost)."""
    from engine.analysis.cost import operator_cost
    op = caffe2_pb2.OperatorDef.FromString(operator) if isinstance(operator, bytes) else operator
    ws = current()
    shapes = [(tuple(ws.values[b].shape), np.asarray(dev.to_host(ws.values[b])).dtype) for b in blobs]
    return Cost(*operator_cost(op, shapes)[:3])


def _conv_to_nnpack(net: caffe2_pb2.NetDef) -> None:
    from engine.analysis.transforms import conv_to_nnpack
    conv_to_nnpack(net)


def _common_subexpression_elimination(net: caffe2_pb2.NetDef) -> None:
    from engine.analysis.transforms import common_subexpression_elimination
    net.CopyFrom(common_subexpression_elimination(net))


#: Caffe2's registered net transforms netviz knows: key -> rewrite of a NetDef in place.
_TRANSFORMS = {"ConvToNNPack": _conv_to_nnpack, "CommonSubexpressionElimination": _common_subexpression_elimination}


def ApplyTransform(transform_key: str, net: caffe2_pb2.NetDef) -> caffe2_pb2.NetDef:
    """A transformed copy of `net` (``ConvToNNPack``, ``CommonSubexpressionElimination``: engine.analysis.transforms).

    Raises
    ------
    ExecutionError
        An unknown transform (a RuntimeError, as Caffe2's registry lookup).
    """
    if transform_key not in _TRANSFORMS:
        raise ExecutionError(f"Transform {transform_key} is not registered (netviz knows {sorted(_TRANSFORMS)})")
    out = caffe2_pb2.NetDef()
    out.CopyFrom(net)
    _TRANSFORMS[transform_key](out)
    return out


def ApplyTransformIfFaster(transform_key: str, net: caffe2_pb2.NetDef, init_net: caffe2_pb2.NetDef,
                           warmup_runs: int = 5, main_runs: int = 10, improvement_threshold: float = 1.01
                           ) -> caffe2_pb2.NetDef:
    """The transformed net when it runs faster by `improvement_threshold`, else `net` unchanged.

    As in Caffe2 each net is timed in a private workspace (the current one is untouched) after
    `init_net`, or, when `init_net` has no ops, with its external inputs created empty.
    """
    import time
    if warmup_runs < 0 or main_runs <= 0:
        raise ExecutionError(f"ApplyTransformIfFaster: warmup_runs must be >= 0 and main_runs > 0, "
                             f"got {warmup_runs} and {main_runs}")
    candidate = ApplyTransform(transform_key, net)

    def timed(n: caffe2_pb2.NetDef) -> float:
        ws = Workspace("ApplyTransformIfFaster")
        if len(init_net.op):
            ws.run_net_once(init_net)
        for name in ([] if len(init_net.op) else n.external_input):
            ws.create_blob(name)
        for _ in range(warmup_runs):
            ws.run_net_once(n)
        t0 = time.perf_counter()
        for _ in range(main_runs):
            ws.run_net_once(n)
        return time.perf_counter() - t0
    return candidate if timed(net) > timed(candidate) * improvement_threshold else net


def GetNameScope() -> str:
    """The current name scope (to build blob names to fetch)."""
    from engine.model.scope import CurrentNameScope
    return CurrentNameScope()


def TriggerLazyImport() -> None:
    """Caffe2 loads lazily registered op libraries here; netviz registers every op at import."""


def ClearGlobalNetObserver() -> None:
    """netviz has no global C++ net observer to clear."""


Int8Tensor = namedtuple("Int8Tensor", ["data", "scale", "zero_point"])


def FetchInt8Blob(name: Any) -> Int8Tensor:
    """An Int8 blob as ``Int8Tensor(data, scale, zero_point)``."""
    v = current().values.get(StringifyBlobName(name))
    assert v is not None and hasattr(v, "scale") and hasattr(v, "zero_point"), \
        f"You are not fetching an Int8Blob {name}. Please use FetchBlob"
    return Int8Tensor(np.array(dev.to_host(v.data)), float(v.scale), int(v.zero_point))


def FetchInt8BlobRealVal(name: Any) -> np.ndarray:
    """An Int8 blob's real values: ``(data - zero_point) * scale``."""
    t = FetchInt8Blob(name)
    return (t.data.astype(np.int32) - t.zero_point).astype(np.float32) * t.scale
