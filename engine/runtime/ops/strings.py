"""String tensor ops: StringPrefix, StringSuffix, StringStartsWith, StringEndsWith, StringEquals, StringJoin.

A string tensor is a NumPy object array of ``bytes``, as Caffe2's ``FetchBlob`` gives it (fed ``str``,
``bytes_`` or ``str_`` arrays are read the same way); the inspector prints each element.
"""
from __future__ import annotations

import numpy as np

from engine.runtime import device as dev
from engine.runtime.grad_makers import should_not_do_gradient
from engine.catalogue.registry import kernel, shape
from engine.runtime.shapes import BOOL, TensorInfo, dims
from proto import caffe2_pb2

# ---- kernels ----


def _bytes(s) -> bytes:
    """One element as Caffe2's std::string: its bytes (text is UTF-8 encoded)."""
    return s if isinstance(s, bytes) else str(s).encode("utf-8", "surrogateescape")


def _map(x, fn, dtype=object):
    """`fn` on every element's bytes (byte-wise, as Caffe2: a prefix may split a UTF-8 character)."""
    h = dev.to_host(x)
    if h.dtype.kind not in "OSU":
        raise TypeError(f"expected a string tensor, got {h.dtype}")
    out = np.empty(h.shape, dtype=dtype)
    out.ravel()[:] = [fn(_bytes(v)) for v in h.ravel()]
    return out


@kernel("StringPrefix")
def string_prefix(xp, x, *, length: int = 0):
    return _map(x, lambda v: v[:length])


@kernel("StringSuffix")
def string_suffix(xp, x, *, length: int = 0):
    return _map(x, lambda v: v[max(len(v) - length, 0):])


@kernel("StringStartsWith")
def string_starts_with(xp, x, *, prefix: str = ""):
    return _map(x, lambda v: v.startswith(_bytes(prefix)), bool)


@kernel("StringEndsWith")
def string_ends_with(xp, x, *, suffix: str = ""):
    return _map(x, lambda v: v.endswith(_bytes(suffix)), bool)


@kernel("StringEquals")
def string_equals(xp, x, *, text: str = ""):
    return _map(x, lambda v: v == _bytes(text), bool)


def _cell(v) -> bytes:
    """One element as C++ ``operator<<`` prints it (6 significant digits for floats)."""
    if isinstance(v, (str, bytes)):
        return _bytes(v)
    if isinstance(v, (float, np.floating)):
        return format(float(v), "g").encode()
    if isinstance(v, (bool, np.bool_)):
        return str(int(v)).encode()
    return str(v).encode()


@kernel("StringJoin")
def string_join(xp, x, *, delimiter: str = ",", axis: int = 0):
    # NOTE: every element is followed by the delimiter (the last one too); axis 0 joins each row,
    # axis 1 each column of a 2-D input.
    h = dev.to_host(x)
    if h.ndim > 2 or axis not in (0, 1) or (axis == 1 and h.ndim != 2):
        raise ValueError(f"StringJoin needs a 1-D or 2-D input and axis 0 or 1, got rank {h.ndim}, axis {axis}")
    m = h.reshape(h.shape[0], -1) if h.ndim else h.reshape(1, 1)
    if axis == 1:
        m = m.T
    d = _bytes(delimiter)
    out = np.empty(m.shape[0], dtype=object)
    out[:] = [b"".join(_cell(v) + d for v in row) for row in m]
    return out


# ---- gradients ----

should_not_do_gradient("StringPrefix", "StringSuffix", "StringStartsWith", "StringEndsWith", "StringEquals",
                       "StringJoin")


# ---- shapes ----

shape("StringPrefix", "StringSuffix")(lambda x: x)
shape("StringStartsWith", "StringEndsWith", "StringEquals")(lambda x: TensorInfo(dims(x), BOOL))



@shape("StringJoin")
def string_join_shape(x, *, axis: int = 0):
    d = dims(x)
    return TensorInfo((d[axis] if axis < len(d) else 1,), caffe2_pb2.TensorProto.STRING)
