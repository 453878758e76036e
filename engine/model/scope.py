"""Thread-local name scope and device scope, as ``caffe2.python.scope`` keeps them.

``NameScope("gpu_0")`` prefixes blob names made by net builders (``gpu_0/conv1``);
``DeviceScope(opt)`` gives ops created without an explicit device option that option.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from proto import caffe2_pb2

_NAMESCOPE_SEPARATOR = "/"
_state = threading.local()


def CurrentNameScope() -> str:
    """The active name scope, ending in ``/`` unless empty."""
    return getattr(_state, "namescope", "")


def CurrentDeviceScope() -> caffe2_pb2.DeviceOption | None:
    """The active device option, or None outside any DeviceScope."""
    return getattr(_state, "devicescope", None)


@contextlib.contextmanager
def NameScope(prefix: str | None, reset: bool = False) -> Iterator[None]:
    """Append `prefix` to the name scope (``reset`` starts from empty) for the block."""
    old = CurrentNameScope()
    prefix = str(prefix or "")
    if prefix and not prefix.endswith(_NAMESCOPE_SEPARATOR):
        prefix += _NAMESCOPE_SEPARATOR
    _state.namescope = prefix if reset else old + prefix
    try:
        yield
    finally:
        _state.namescope = old


@contextlib.contextmanager
def DeviceScope(device_option: caffe2_pb2.DeviceOption | None,
                node_name: str | None = None) -> Iterator[None]:
    """Make `device_option` the default for ops created in the block.

    As in Caffe2: a nested scope inherits the outer ``node_name`` unless it sets one, and its
    ``extra_info`` tags are the outer ones plus its own, sorted.  ``None`` needs a `node_name`.
    """
    assert device_option or node_name, "At least one argument should be non-null in DeviceScope"
    assert not device_option or isinstance(device_option, caffe2_pb2.DeviceOption), \
        "DeviceScope takes in a caffe2_pb2.DeviceOption as its argument."
    old = CurrentDeviceScope()
    new = caffe2_pb2.DeviceOption()
    if device_option:
        new.CopyFrom(device_option)
    if node_name:
        new.node_name = node_name
    if old is not None:
        if old.HasField("node_name") and not new.HasField("node_name"):
            new.node_name = old.node_name
        new.extra_info.extend(old.extra_info)
    new.extra_info.sort()
    _state.devicescope = new
    try:
        yield
    finally:
        _state.devicescope = old


@contextlib.contextmanager
def EmptyNameScope() -> Iterator[None]:
    """No name scope inside the block (names are not prefixed), the outer one after."""
    old = CurrentNameScope()
    _state.namescope = ""
    try:
        yield
    finally:
        _state.namescope = old


@contextlib.contextmanager
def EmptyDeviceScope() -> Iterator[None]:
    """No device scope inside the block (ops get no device option from a scope)."""
    old = CurrentDeviceScope()
    _state.devicescope = None
    try:
        yield
    finally:
        _state.devicescope = old
