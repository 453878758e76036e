"""Workspaces: named blobs (with their device) and created nets; and which one is current.

A :class:`Workspace` maps blob names to values (arrays, ``bytes`` strings, Python objects
such as child workspaces) and remembers each blob's device type.  The process has one current
workspace (``"default"`` exists from import), as Caffe2's C++ side has; the module API acting on
it (``FeedBlob``, ``RunNet``, ``SwitchWorkspace``…) is :mod:`engine.caffe2.workspace`.
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, MutableMapping
from typing import Any

import numpy as np

from engine.runtime import device as dev
from engine.runtime.nethandle import NetHandle, observers
from engine.runtime.plans import EMPTY
from engine.runtime.blobio import Int8Tensor as Int8Blob  # NOTE: Int8Tensor below is Caffe2's namedtuple
from engine.errors import BlobNotFoundError, ExecutionError
from proto import caffe2_pb2



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

    def child(self, name: str = "child", bindings: dict[str, str] | None = None) -> Workspace:
        """A workspace that sees this one's blobs (control-flow subnets run in one); with `bindings`
        (inner -> parent name) it sees only those, as a ``Do`` net's workspace does."""
        return Workspace(name, self, bindings)

    def step_child(self, name: str) -> Workspace:
        """A child that sees all this one's blobs and whose names can be row views of them
        (:meth:`bind_view`): an RNN timestep's workspace."""
        ws = Workspace(name, self)
        ws.values = _StepBlobs(ws.values.local, self.values)
        return ws

    def bind_view(self, name: str, base: str, rows: slice) -> Any:
        """Make `name` in this step workspace (:meth:`step_child`) the view ``base[rows]``; later writes
        go into `base`."""
        view = self.values[base][rows]
        self.values.views[name] = (base, rows)
        self.values.view_shapes.pop(name, None)
        self.values.local[name] = view
        self.devices.local[name] = self.devices[base]
        return view

    def rebind(self, parent: Workspace, name: str) -> None:
        """Empty this child and make it a fresh child of `parent` that sees only blobs bound later
        (:meth:`add_blob_mapping`): a ``Do`` workspace recycled by its stack."""
        self.parent, self.name = parent, name
        self.values = _ChildBlobs({}, parent.values, {}, False)
        self.devices = _ChildBlobs({}, parent.devices, self.values.bindings, False)
        self.nets.clear()

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
            self.values[name], self.devices[name] = EMPTY, dev.CPU
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
        if v is EMPTY:
            return f"{name}, a C++ native class of type nullptr (uninitialized).".encode()
        if hasattr(v, "cpp_type") and hasattr(v, "describe"):  # a C++ object (engine.runtime.ops.stateful.CppObject)
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
        return NetHandle(self, net.name)

    def run_net(self, name: str, num_iter: int = 1, allow_fail: bool = False) -> bool:
        from engine.runtime import executor

        try:
            compiled = self.nets[name]
        except KeyError:
            raise ExecutionError(f"Can't find net {name}") from None
        watchers = observers.get(name)
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


# ---- the current workspace (the module API in engine.caffe2.workspace acts on it) -------------
_workspaces: dict[str, Workspace] = {"default": Workspace("default")}
_current = ["default"]


def current() -> Workspace:
    """The current :class:`Workspace` object (``workspace.C`` is Caffe2's C-extension API, :mod:`engine.caffe2.capi`)."""
    return _workspaces[_current[0]]


def eval_op(op_type: str, *inputs: Any, n_out: int = 1, device: str | None = None,
            device_option: caffe2_pb2.DeviceOption | None = None, **args: Any) -> tuple[Any, ...]:
    """Run one op alone on arrays and return its `n_out` outputs (kernel tests start here).

    Examples
    --------
    >>> eval_op("LeakyRelu", np.array([-2.0, 3.0]), alpha=0.5)[0].tolist()
    [-1.0, 3.0]
    """
    from engine.model.opdef import create_operator  # noqa: PLC0415
    from engine.runtime import executor  # noqa: PLC0415  (it loads every op family)

    ws = Workspace("eval_op")
    names = [f"I{i}" for i in range(len(inputs))]
    for n, x in zip(names, inputs):
        ws.values[n], ws.devices[n] = x, (device_option.device_type if device_option else dev.CPU)
    op = create_operator(op_type, names, [f"O{i}" for i in range(n_out)], device_option=device_option, **args)
    executor.run_op(op, ws, device=device)
    return tuple(ws.values[f"O{i}"] for i in range(n_out))
