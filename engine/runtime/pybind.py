"""What Caffe2's C extension hands to Python, over the runtime's workspaces: ``C.Workspace``, ``C.Blob``,
and (from :mod:`engine.runtime.nethandle`) a created net's handle and net observers.

A Python op registered with ``pass_workspace=True`` gets a :class:`Workspace` of these (as in Caffe2):
this module sits above the executor, so it lends the class to :mod:`engine.runtime.ops.python_op` when
it loads (``python_op.WORKSPACE_FACE``); :mod:`engine.caffe2.capi` (``workspace.C``) re-exports them all.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from engine.runtime.nethandle import NetHandle, Observer, observers  # noqa: F401  (C's objects)
from engine.runtime.ops import python_op
from proto import caffe2_pb2


class Blob:
    """One named blob of a workspace, as Caffe2's ``C.Blob``: ``feed``/``fetch``."""

    def __init__(self, ws: Any, name: str) -> None:
        self._ws, self._name = ws, name

    def feed(self, arg: Any, device_option: caffe2_pb2.DeviceOption | None = None) -> bool:
        if device_option is not None and not isinstance(device_option, caffe2_pb2.DeviceOption):
            raise TypeError(f"blob {self._name}: device_option must be a DeviceOption")
        return self._ws.feed_blob(self._name, arg, device_option)

    _feed = feed

    def fetch(self) -> Any:
        return self._ws.fetch_blob(self._name)

    def tensor(self) -> Any:
        """The blob as a Python op's tensor view (``.data``, ``.shape``, ``.feed``, ``.reshape``)."""
        if not self._ws.has_blob(self._name):
            self._ws.create_blob(self._name)
        return python_op.TensorCPU(self._ws, self._name)

    as_tensor = tensor

    def is_tensor(self) -> bool:
        return hasattr(self._ws.values.get(self._name), "shape")

    def serialize(self, name: str) -> bytes:
        from engine.runtime.blobio import serialize_blob
        return serialize_blob(name, self._ws.fetch_blob(self._name))

    def deserialize(self, data: bytes) -> None:
        from engine.runtime.blobio import deserialize_blob
        self._ws.feed_blob(self._name, deserialize_blob(data)[1])


class _Blobs(Mapping):
    """``ws.blobs``: a read-only mapping from blob name to :class:`Blob`."""

    def __init__(self, ws: Any) -> None:
        self._ws = ws

    def __getitem__(self, name: str) -> Blob:
        if not self._ws.has_blob(str(name)):
            raise KeyError(name)
        return Blob(self._ws, str(name))

    def __iter__(self) -> Iterator[str]:
        return iter(self._ws.blobs())

    def __len__(self) -> int:
        return len(self._ws.blobs())


class _CurrentDescriptor:
    def __get__(self, obj: Any, owner: type) -> "Workspace":
        from engine.runtime import workspace
        return owner(workspace.current())


class Workspace:
    """Caffe2's ``C.Workspace``: a private workspace (not the one ``workspace.*`` acts on).

    ``Workspace.current`` is the current module-level workspace.
    """

    current = _CurrentDescriptor()

    def __init__(self, ws: Any = None) -> None:
        """``C.Workspace()``: a new empty workspace; ``C.Workspace(parent)``: a child that sees
        (and writes through to) the parent's blobs, new blobs staying its own."""
        from engine.runtime import workspace
        if isinstance(ws, Workspace):
            self._ws = ws._ws.child("C.Workspace")
        else:
            self._ws = ws if isinstance(ws, workspace.Workspace) else workspace.Workspace("C.Workspace")

    @property
    def blobs(self) -> _Blobs:
        return _Blobs(self._ws)

    @property
    def nets(self) -> dict[str, NetHandle]:
        return {n: NetHandle(self._ws, n) for n in self._ws.nets}

    def create_blob(self, name: str) -> Blob:
        self._ws.create_blob(str(name))
        return Blob(self._ws, str(name))

    def feed_blob(self, name: str, arr: Any, device_option: Any = None) -> bool:
        return self._ws.feed_blob(str(name), arr, device_option)

    def fetch_blob(self, name: str) -> Any:
        return self._ws.fetch_blob(str(name))

    def has_blob(self, name: str) -> bool:
        return self._ws.has_blob(str(name))

    def remove_blob(self, name: str) -> None:
        self._ws.remove_blob(str(name))

    _remove_blob = remove_blob

    def create_net(self, net: Any, overwrite: bool = False) -> NetHandle:
        proto = _netdef(net)
        self._ws.create_net(proto, overwrite)
        return NetHandle(self._ws, proto.name)

    def _create_net(self, data: bytes, overwrite: bool = False) -> NetHandle:
        return self.create_net(caffe2_pb2.NetDef.FromString(data), overwrite)

    def _run_net(self, data: bytes) -> bool:
        return self._ws.run_net_once(caffe2_pb2.NetDef.FromString(data))

    def _run_operator(self, data: bytes) -> bool:
        return self._ws.run_operator_once(caffe2_pb2.OperatorDef.FromString(data))

    def _run_plan(self, data: bytes) -> bool:
        from engine.runtime import plandef as plans
        return plans.run_plan(caffe2_pb2.PlanDef.FromString(data), self._ws)

    def run(self, obj: Any) -> bool:
        """Run a NetDef/Net, OperatorDef, PlanDef/Plan or ExecutionStep in this workspace."""
        from engine.runtime import plandef as plans
        proto = obj.Proto() if hasattr(obj, "Proto") else obj
        if isinstance(proto, caffe2_pb2.OperatorDef):
            return self._ws.run_operator_once(proto)
        if isinstance(proto, caffe2_pb2.NetDef):
            return self._ws.run_net_once(proto)
        if isinstance(proto, caffe2_pb2.ExecutionStep):
            return plans.run_plan(plans.as_plan(proto), self._ws)
        if isinstance(proto, caffe2_pb2.PlanDef):
            return plans.run_plan(proto, self._ws)
        raise TypeError(f"Workspace.run: cannot run a {type(obj).__name__}")


def _netdef(net: Any) -> caffe2_pb2.NetDef:
    if isinstance(net, bytes):
        return caffe2_pb2.NetDef.FromString(net)
    if isinstance(net, caffe2_pb2.NetDef):
        return net
    if not hasattr(net, "Proto"):
        raise TypeError(f"expected a NetDef, a Net or serialized bytes, got {type(net).__name__}")
    return net.Proto()


python_op.WORKSPACE_FACE = Workspace  # NOTE: lent downwards (see the module docstring)
