"""Workspaces: named blobs (with their device) and created nets, plus Caffe2's module API.

A :class:`Workspace` maps blob names to values (arrays, ``bytes`` strings, Python objects
such as child workspaces) and remembers each blob's device type.  The module-level
functions (``FeedBlob``, ``RunNet``, ``SwitchWorkspace``…) act on the current workspace,
as ``caffe2.python.workspace`` does; ``"default"`` exists from import.
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
from engine.errors import BlobNotFoundError, ExecutionError
from proto import caffe2_pb2

_EMPTY = object()  # a created but never written blob (Caffe2's uninitialized blob)


class _ChildBlobs(MutableMapping):
    """Blobs of a child workspace: local ones, then bound names (inner -> parent name, resolved
    lazily), then, for a *shared* child, every parent blob.  Writes to a bound or visible parent
    blob go to the parent (Caffe2's forwarded blobs; an unbound, unshared name stays local)."""

    def __init__(self, local: dict, parent: MutableMapping, bindings: dict | None = None,
                 shared: bool = True) -> None:
        self.local, self.parent = local, parent
        self.bindings, self.shared = ({} if bindings is None else bindings), shared

    def _outer(self, k: str) -> str | None:
        """The parent name `k` resolves to when it is not local, else None."""
        if k in self.bindings:
            return self.bindings[k]
        return k if self.shared else None

    def __getitem__(self, k: str) -> Any:
        try:
            return self.local[k]
        except KeyError:
            outer = self._outer(k)
            if outer is None:
                raise
            return self.parent[outer]

    def __setitem__(self, k: str, v: Any) -> None:
        outer = None if k in self.local else self._outer(k)
        if outer is not None and (k in self.bindings or outer in self.parent):
            self.parent[outer] = v
        else:
            self.local[k] = v

    def __delitem__(self, k: str) -> None:
        del self.local[k]

    def __iter__(self) -> Iterator[str]:
        yield from self.local
        yield from (k for k, o in self.bindings.items() if k not in self.local and o in self.parent)
        if self.shared:
            yield from (k for k in self.parent if k not in self.local and k not in self.bindings)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, k: object) -> bool:
        if k in self.local:
            return True
        outer = self._outer(k)  # type: ignore[arg-type]
        return outer is not None and outer in self.parent


class _StepBlobs(_ChildBlobs):
    """Blobs of an RNN step workspace: some names are views of rows of a parent buffer.

    Writing a view name copies into those rows (Caffe2's ``rnn_internal_apply_link`` makes the
    internal blob share the buffer's memory, so a step's output lands in the state sequence).
    Reading one gives a copy of the rows as they are now, so a value read (and kept, e.g. by the
    debugger's undo) is never changed by later writes.
    """

    def __init__(self, local: dict, parent: MutableMapping) -> None:
        super().__init__(local, parent)
        self.views: dict[str, tuple[str, slice]] = {}
        self.view_shapes: dict[str, tuple[int, ...]] = {}  # a view last written with another shape

    def __getitem__(self, k: str) -> Any:
        if k in self.views:
            base, rows = self.views[k]
            value = self[base][rows].copy()
            shape = self.view_shapes.get(k)
            return value if shape is None else value.reshape(shape)
        return super().__getitem__(k)

    def __setitem__(self, k: str, v: Any) -> None:
        if k not in self.views:
            return super().__setitem__(k, v)
        if v is self.local.get(k):
            return None
        base, rows = self.views[k]
        dst = self[base][rows]
        shape = tuple(getattr(v, "shape", ()))
        if shape != tuple(dst.shape):
            # NOTE: Caffe2's Resize keeps a tensor's memory when its element count is unchanged, so a
            # write of another shape (the attention cells' BatchMatMul N x E x 1, then Reshape to
            # 1 x N x E) still lands in the buffer rows, in C order.  Another count reallocates.
            if getattr(v, "size", None) != dst.size:
                raise ExecutionError(f"blob '{k}' is a view of rows {rows.start}:{rows.stop} of '{base}' "
                                     f"{tuple(dst.shape)}; cannot write shape {shape}")
            self.view_shapes[k] = shape
            dst[...] = v.reshape(dst.shape)
            return None
        self.view_shapes.pop(k, None)
        dst[...] = v
        return None

    def __delitem__(self, k: str) -> None:
        self.views.pop(k, None)
        self.view_shapes.pop(k, None)
        super().__delitem__(k)


def step_workspace(parent: Workspace, name: str) -> Workspace:
    """A child of `parent` (sees all its blobs) whose names can be views (:func:`bind_view`)."""
    ws = Workspace(name, parent)
    ws.values = _StepBlobs(ws.values.local, parent.values)
    return ws


def bind_view(ws: Workspace, name: str, base: str, rows: slice) -> Any:
    """Make `name` in step workspace `ws` the view ``base[rows]``; later writes go into `base`."""
    view = ws.values[base][rows]
    ws.values.views[name] = (base, rows)
    ws.values.view_shapes.pop(name, None)
    ws.values.local[name] = view
    ws.devices.local[name] = ws.devices[base]
    return view


def _caffe2_strings(arr: np.ndarray) -> np.ndarray:
    """A fed text array as Caffe2 stores it: an object array of ``bytes`` (``str`` is UTF-8 encoded), so
    ``FetchBlob`` gives bytes back whatever was fed; other objects in an object array are kept as they are."""
    out = arr.astype(object, order="C")
    flat = out.reshape(-1)  # a view: C order
    text = [i for i, v in enumerate(flat) if isinstance(v, str)]
    if text:
        flat[text] = [flat[i].encode("utf-8") for i in text]
    return out


class Workspace:
    """Blobs by name with their devices, and the nets created in it.

    Examples
    --------
    >>> ws = Workspace("demo")
    >>> ws.feed_blob("X", np.ones(2, np.float32))
    True
    >>> ws.fetch_blob("X").tolist()
    [1.0, 1.0]
    """

    def __init__(self, name: str = "default", parent: Workspace | None = None,
                 bindings: dict[str, str] | None = None) -> None:
        self.name, self.parent = name, parent
        self.root_folder = "."
        if parent is None:
            self.values: MutableMapping[str, Any] = {}
            self.devices: MutableMapping[str, int] = {}
        else:
            shared, bound = bindings is None, dict(bindings or {})  # one dict: values and devices agree
            self.values = _ChildBlobs({}, parent.values, bound, shared)
            self.devices = _ChildBlobs({}, parent.devices, bound, shared)
        self.nets: dict[str, Any] = {}
        self.gpu_used = parent.gpu_used if parent is not None else False  # any non-CPU blob written yet

    def child(self, name: str = "child") -> Workspace:
        """A workspace that sees this one's blobs (control-flow subnets run in one)."""
        return Workspace(name, parent=self)

    # -- forwarded blobs (Caffe2's Workspace(parent, forwarded_blobs)) ------------------
    def add_blob_mapping(self, bindings: dict[str, str], skip_defined: bool = False) -> None:
        """Bind inner names to parent blobs (``AddBlobMapping``).

        Raises
        ------
        ExecutionError
            "Invalid parent workspace blob X" / "Redefinition of blob X".
        """
        vals = self.values
        if self.parent is None or not isinstance(vals, _ChildBlobs) or vals.shared:
            raise ExecutionError(f"workspace {self.name}: blob bindings need a child workspace made with bindings")
        for inner, outer in bindings.items():
            if outer not in vals.parent:
                raise ExecutionError(f"workspace {self.name}: Invalid parent workspace blob {outer}")
            if inner in vals.bindings:
                if vals.bindings[inner] != outer:
                    raise ExecutionError(f"workspace {self.name}: Redefinition of blob {inner}")
            elif inner in vals:
                if not skip_defined:
                    raise ExecutionError(f"workspace {self.name}: Redefinition of blob {inner}")
            else:
                vals.bindings[inner] = outer

    def copy_forwarded_tensors(self, names: Iterable[str]) -> None:
        """Replace each currently bound name by a local copy of the parent's value (unbinds it)."""
        vals, devs = self.values, self.devices
        for n in names:
            if isinstance(vals, _ChildBlobs) and n in vals.bindings and n not in vals.local:
                outer = vals.bindings.pop(n)
                v = vals.parent[outer]
                vals.local[n] = v.copy() if hasattr(v, "copy") and hasattr(v, "shape") else v
                devs.local[n] = devs.parent.get(outer, dev.CPU)

    def bindings(self) -> dict[str, str]:
        """Inner name -> parent name of the forwarded blobs (empty for a root or shared child)."""
        return dict(getattr(self.values, "bindings", {}))

    # -- blobs --------------------------------------------------------------------------
    def has_blob(self, name: str) -> bool:
        return name in self.values

    def blobs(self) -> list[str]:
        """Visible blob names: local ones sorted, then the parent's."""
        if self.parent is None:
            return sorted(self.values)
        local = sorted(self.values.local)
        if not self.values.shared:
            return local + [b for b in self.values if b not in self.values.local]
        return local + [b for b in self.parent.blobs() if b not in self.values.local]

    def create_blob(self, name: str) -> bool:
        if name not in self.values:
            self.values[name], self.devices[name] = _EMPTY, dev.CPU
        return True

    def remove_blob(self, name: str) -> bool:
        """Drop a blob of this workspace (Caffe2's ``RemoveBlob``); False when it has none."""
        if name not in self.values:
            return False
        target = self.values if self.parent is None else self.values.local
        target.pop(name, None)
        (self.devices if self.parent is None else self.devices.local).pop(name, None)
        return True

    def feed_blob(self, name: str, arr: Any, device_option: caffe2_pb2.DeviceOption | None = None) -> bool:
        """Store a copy of `arr` under `name` on the device of `device_option` (CPU when None)."""
        device_type = device_option.device_type if device_option is not None else dev.CPU
        if isinstance(arr, caffe2_pb2.TensorProto):
            arr = tensor_proto_to_array(arr)
        if isinstance(arr, str):
            arr = arr.encode("utf-8")
        if isinstance(arr, Int8Blob):  # NOTE: an Int8 blob keeps its scale and zero point
            arr = arr.copy()
        elif not isinstance(arr, bytes):
            arr = np.array(dev.to_host(arr) if not isinstance(arr, (list, tuple, int, float)) else arr)
            if arr.dtype.kind in "SUO":
                arr = _caffe2_strings(arr)
            if device_type in dev.GPU_TYPES:
                arr = dev.to_device(arr, dev.namespace(device_type))
            old = self.values.get(name)
            if getattr(old, "shared_buffer", False) and old.shape == arr.shape and old.dtype == arr.dtype:
                old[...] = arr  # NOTE: memory other blobs view (UnsafeCoalesce): written in place, as Caffe2
                return True
        self.values[name], self.devices[name] = arr, device_type
        self.gpu_used = self.gpu_used or device_type != dev.CPU
        return True

    def fetch_blob(self, name: str) -> Any:
        """A host copy of blob `name` (bytes for string blobs).

        Raises
        ------
        BlobNotFoundError
            "Can't find blob: <name>".
        """
        try:
            v = self.values[name]
        except KeyError:
            raise BlobNotFoundError(f"Can't find blob: {name}") from None
        if v is _EMPTY:
            return f"{name}, a C++ native class of type nullptr (uninitialized).".encode()
        if hasattr(v, "cpp_type") and hasattr(v, "describe"):  # a C++ object (engine.runtime.ops.runtime.CppObject)
            return v.describe(name)  # NOTE: Caffe2 fetches its description, not the object
        if isinstance(v, bytes) or not hasattr(v, "shape"):
            return v
        host = np.array(dev.to_host(v), copy=True)
        return _caffe2_strings(host) if host.dtype.kind in "OSU" else host  # NOTE: text comes back as bytes

    def device_of(self, name: str) -> int:
        return self.devices[name]

    def reset(self) -> None:
        """Drop every blob and net."""
        self.values.clear() if self.parent is None else self.values.local.clear()
        self.devices.clear() if self.parent is None else self.devices.local.clear()
        self.nets.clear()

    # -- nets ---------------------------------------------------------------------------
    def create_net(self, net: caffe2_pb2.NetDef, overwrite: bool = False,
                   input_blobs: Iterable[str] | None = None, *, device: str | None = None) -> Any:
        """Create (compile) `net` (a NetDef or a core.Net); returns the net, runnable and truthy
        (``workspace.Workspace().create_net(net).run()``, as Caffe2's C.Workspace)."""
        from engine.runtime import executor

        net = net.Proto() if hasattr(net, "Proto") else net
        for b in input_blobs or ():
            self.create_blob(b)
        if not net.HasField("name"):  # NOTE: an explicitly empty name is fine, as in Caffe2
            raise ExecutionError("Net definition should have a name.")
        if net.name in self.nets and not overwrite:
            raise ExecutionError(f"{net.name}: I respectfully refuse to overwrite an existing net of the same name "
                                 f"\"{net.name}\", unless you explicitly specify overwrite=true.")
        made: set[str] = set()
        for i, op in enumerate(net.op):  # NOTE: Caffe2's op constructors look their inputs up
            missing = next((b for b in op.input if b not in made and not self.has_blob(b)), None)
            if missing is not None:
                raise ExecutionError(f"{net.name}: op #{i} {op.type} '{op.name}': Encountered a non-existing "
                                     f"input blob: {missing}")
            made.update(op.output)
        compiled = executor.compile_net(net, self, device=device)
        for op in net.op:
            for o in op.output:
                self.create_blob(o)
        self.nets[net.name] = compiled
        return C._Net(self, net.name)

    def run_net(self, name: str, num_iter: int = 1, allow_fail: bool = False) -> bool:
        from engine.runtime import executor

        try:
            compiled = self.nets[name]
        except KeyError:
            raise ExecutionError(f"Can't find net {name}") from None
        watchers = C.observers.get(name)
        try:
            for _ in range(num_iter):
                t0, ops0 = time.perf_counter(), executor.OPS_RUN[0]
                executor.run_compiled(compiled, self)
                for ob in watchers or ():  # NOTE: ops of subnets (RNN timesteps, If/While bodies) count too
                    ob.record((time.perf_counter() - t0) * 1e3, executor.OPS_RUN[0] - ops0)
        except ExecutionError:
            if allow_fail:
                return False
            raise
        return True

    def run_net_once(self, net: caffe2_pb2.NetDef, *, device: str | None = None) -> bool:
        from engine.runtime import executor

        executor.run_net(net, self, device=device)
        return True

    def run_operator_once(self, op: caffe2_pb2.OperatorDef, *, device: str | None = None) -> bool:
        from engine.runtime import executor

        executor.run_op(op, self, device=device)
        return True


class WorkspaceStack:
    """Child workspaces of ``Do`` ops, pushed by forward runs and popped by gradient runs.

    The value of a ``CreateScope`` blob.  Workspaces above the top are kept for reuse, as in
    Caffe2, so a net run twice does not grow the list.

    Examples
    --------
    >>> parent = Workspace("p"); parent.feed_blob("x", np.ones(1))
    True
    >>> st = WorkspaceStack(); w = st.push_forward_workspace(parent, {"a": "x"})
    >>> w.fetch_blob("a").tolist(), st.empty()
    ([1.0], False)
    >>> st.pop_gradient_workspace(parent, {}) is w, st.empty()
    (True, True)
    """

    def __init__(self) -> None:
        self.workspaces: list[Workspace] = []
        self.top = -1

    def clear(self) -> None:
        """Empty the stack (``CreateScope`` run again); spare workspaces stay for reuse."""
        self.top = -1

    def snapshot(self) -> int:
        """The state the debugger saves before a control-flow op (undo restores it)."""
        return self.top

    def restore(self, state: int) -> None:
        """Undo pushes and pops since :meth:`snapshot` (popped workspaces keep their blobs)."""
        self.top = state

    def empty(self) -> bool:
        return self.top < 0

    def __len__(self) -> int:
        return self.top + 1

    def push_forward_workspace(self, parent: Workspace, bindings: dict[str, str]) -> Workspace:
        """A fresh (or recycled, emptied) child of `parent` with `bindings`, now on top."""
        self.top += 1
        name = f"{parent.name}/do_{self.top}"
        if self.top == len(self.workspaces):
            self.workspaces.append(Workspace(name, parent, {}))
        w = self.workspaces[self.top]
        # NOTE: Caffe2 keeps a recycled workspace's locals; we empty it (same results, no stale blobs).
        w.parent, w.name = parent, name
        w.values = _ChildBlobs({}, parent.values, {}, False)
        w.devices = _ChildBlobs({}, parent.devices, w.values.bindings, False)
        w.nets.clear()
        w.add_blob_mapping(bindings)
        return w

    def pop_gradient_workspace(self, parent: Workspace, grad_bindings: dict[str, str]) -> Workspace | None:
        """The top workspace with `grad_bindings` added (names defined there keep their local
        meaning), popped; None when empty."""
        if self.top < 0:
            return None
        w = self.workspaces[self.top]
        self.top -= 1
        w.add_blob_mapping(grad_bindings, skip_defined=True)
        return w

    def reuse_last_forward_workspace(self, parent: Workspace, bindings: dict[str, str]) -> Workspace:
        """The top workspace with `bindings` added (``reuse_workspace``), not pushed."""
        w = self.workspaces[self.top]
        w.add_blob_mapping(bindings, skip_defined=True)
        return w


def tensor_proto_to_array(t: caffe2_pb2.TensorProto) -> np.ndarray:
    """A TensorProto's content as a numpy array (float/int/string fields)."""
    dt = caffe2_pb2.TensorProto
    table = {dt.FLOAT: ("float_data", np.float32), dt.DOUBLE: ("double_data", np.float64),
             dt.INT32: ("int32_data", np.int32), dt.INT64: ("int64_data", np.int64),
             dt.BOOL: ("int32_data", np.bool_), dt.UINT8: ("int32_data", np.uint8),
             dt.INT8: ("int32_data", np.int8), dt.INT16: ("int32_data", np.int16),
             dt.UINT16: ("int32_data", np.uint16), dt.FLOAT16: ("int32_data", np.float16)}
    if t.data_type == dt.STRING:
        return np.array(list(t.string_data), dtype=object).reshape(tuple(t.dims))
    field, np_type = table[t.data_type]
    return np.array(getattr(t, field), dtype=np_type).reshape(tuple(t.dims))


# ---- module-level API on the current workspace (caffe2.python.workspace) ----------------
_workspaces: dict[str, Workspace] = {"default": Workspace("default")}
_current = ["default"]


def current() -> Workspace:
    """The current :class:`Workspace` object (``workspace.C`` is Caffe2's C-extension API, :mod:`engine.caffe2.capi`)."""
    return _workspaces[_current[0]]


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
    ws.values[str(name)] = _EMPTY


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


def RunPlan(plan_or_step: Any) -> bool:
    """Run a Plan / PlanDef / ExecutionStep in the current workspace (engine.runtime.plans)."""
    from engine.runtime import plandef as plans
    return plans.run_plan(plans.as_plan(plan_or_step), current())


def RunPlanInBackground(plan_or_step: Any) -> Any:
    """Start the plan on a thread; the handle has ``is_done()`` and ``is_succeeded()``."""
    from engine.runtime import plandef as plans
    return plans.BackgroundPlan(plans.as_plan(plan_or_step), current())


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
    from engine.runtime.shapes import TensorInfo, infer_shapes
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
