"""The vocabulary of static shape and dtype inference, which shape rules are written in.

The driver that runs the rules through a NetDef is :mod:`engine.runtime.inference` (above the op
families, whose rules it needs: this module is below them).  A :class:`TensorInfo` is a shape (a tuple whose dims may be ``None`` = unknown, or ``None``
for an unknown rank) and a ``TensorProto.DataType`` (or ``None``).  Rules live beside the
kernels (``# ---- shapes ----`` in ``engine/runtime/ops/*.py``), registered with
:func:`engine.catalogue.registry.shape`; each is a pure function ``rule(*input_infos, **declared_args)``
returning one :class:`TensorInfo` or a tuple of them.  A rule reads only the keyword-only
arguments it declares (as kernels do); one declaring ``n_out`` also gets the op's output count,
one declaring ``in_names`` / ``out_names`` the op's input / output names (RecurrentNetwork maps its
aliases, Do its inner blobs, by name), one declaring ``infer_net`` the driver's net inference.
Unknown stays unknown: a rule that needs an unknown value calls :func:`dims` / :func:`known`,
which abandon the op (its outputs become unknown); it never guesses.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from math import prod
from typing import Any

from engine.errors import ShapeError
from engine.model.opdef import args_of
from proto import caffe2_pb2

__all__ = ["TensorInfo", "UNKNOWN", "OPAQUE", "Unknown", "same_as", "opaque", "dims", "known", "dim_op", "broadcast", "merge",
           "norm_axis", "spatial_out", "split_layout", "join_layout",
           "inference_is_not_run",
           "FLOAT", "INT32", "BOOL", "INT64", "UINT8"]

FLOAT, INT32, UINT8, BOOL, INT64 = (caffe2_pb2.TensorProto.FLOAT, caffe2_pb2.TensorProto.INT32,
                                    caffe2_pb2.TensorProto.UINT8, caffe2_pb2.TensorProto.BOOL,
                                    caffe2_pb2.TensorProto.INT64)
Dim = int | None
NetPath = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """Abstract value of a blob: ``shape`` (dims may be None; None = rank unknown) and ``dtype``.

    Examples
    --------
    >>> TensorInfo((1, None, 7), FLOAT).rank, TensorInfo((2, 3)).size
    (3, 6)
    """

    shape: tuple[Dim, ...] | None = None
    dtype: int | None = None
    #: A declared unknown: the blob is not a tensor (a queue, DB, reader, mutex, map, …) or a tensor
    #: whose shape only the data decides (what a queue or DB hands out); Caffe2's inference knows
    #: nothing there either, so it reads ``opaque``, never ``?`` (which means "could be known").
    opaque: bool = field(default=False, repr=False)

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def size(self) -> int | None:
        """Number of elements, or None when any dim is unknown."""
        return prod(self.shape) if self.is_known else None

    @property
    def is_known(self) -> bool:
        return self.shape is not None and None not in self.shape

    def __str__(self) -> str:
        if self.opaque:
            return "opaque"
        s = "?" if self.shape is None else "×".join("?" if d is None else str(d) for d in self.shape) or "scalar"
        return s if self.dtype is None else f"{s} {_DTYPE_NAME.get(self.dtype, self.dtype)}"


UNKNOWN = TensorInfo()
OPAQUE = TensorInfo(opaque=True)
_DTYPE_NAME = {FLOAT: "float32", INT32: "int32", UINT8: "uint8", BOOL: "bool", INT64: "int64",
               caffe2_pb2.TensorProto.DOUBLE: "float64", caffe2_pb2.TensorProto.FLOAT16: "float16"}


class Unknown(Exception):
    """Raised inside a rule when a value it needs is unknown: the op's outputs become unknown."""


def dims(x: TensorInfo) -> tuple[Dim, ...]:
    """The shape of `x` (dims may be None); :class:`Unknown` when its rank is unknown."""
    if x.shape is None:
        raise Unknown
    return x.shape


def known(x: TensorInfo) -> tuple[int, ...]:
    """The fully known shape of `x`; :class:`Unknown` otherwise."""
    if not x.is_known:
        raise Unknown
    return x.shape  # type: ignore[return-value]


def dim_op(fn: Callable[..., int], *ds: Dim) -> Dim:
    """``fn(*ds)``, or None when any dim is unknown."""
    return None if any(d is None for d in ds) else fn(*ds)


def norm_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ShapeError(f"axis {axis} out of range for rank {rank}")
    return axis % rank


def broadcast(a: Sequence[Dim], b: Sequence[Dim]) -> tuple[Dim, ...]:
    """Numpy broadcast of two shapes with unknown dims (unknown unless the other dim decides)."""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    out: list[Dim] = []
    for x, y in zip(a, b):
        if x is not None and y is not None and x != y and 1 not in (x, y):
            raise ShapeError(f"shapes {tuple(a)} and {tuple(b)} do not broadcast")
        out.append(x if y == 1 else y if x == 1 else x if x is not None else y if y not in (None, 1) else None)
    return tuple(out)


def merge(a: Sequence[Dim], b: Sequence[Dim]) -> tuple[Dim, ...]:
    """Two views of one shape, unknown dims filled from the other; ShapeError on a clash."""
    if len(a) != len(b) or any(x is not None and y is not None and x != y for x, y in zip(a, b)):
        raise ShapeError(f"shapes {tuple(a)} and {tuple(b)} must be equal")
    return tuple(x if x is not None else y for x, y in zip(a, b))


def same_as(*indices: int) -> Callable[..., tuple[TensorInfo, ...]]:
    """Rule: output k is input ``indices[k]`` (``same_as(0)``: elementwise ops, ``XGradient``)."""
    def rule(*ins: TensorInfo) -> tuple[TensorInfo, ...]:
        return tuple(ins[i] if i < len(ins) else UNKNOWN for i in indices)
    return rule


def opaque(*_: TensorInfo, n_out: int) -> tuple[TensorInfo, ...]:
    """Rule: every output is :data:`OPAQUE` (queue, DB, reader and communication ops: what they
    make is an object or whatever the data holds, which no static rule can know)."""
    return (OPAQUE,) * n_out


def with_dtype(x: TensorInfo, dtype: int | None) -> TensorInfo:
    return TensorInfo(x.shape, dtype)


def spatial_out(sp: Sequence[Dim], k: Sequence[Dim], s: Sequence[int], pb: Sequence[int], pe: Sequence[int],
                d: Sequence[int]) -> tuple[Dim, ...]:
    """Output dims of a window op: ``(in + pads - (d*(k-1)+1)) // s + 1`` per spatial dim (floor)."""
    return tuple(dim_op(lambda i, kk: (i + pb[j] + pe[j] - (d[j] * (kk - 1) + 1)) // s[j] + 1, v, k[j])
                 for j, v in enumerate(sp))


def split_layout(xd: Sequence[Dim], order: str) -> tuple[Dim, Dim, tuple[Dim, ...]]:
    """``(N, C, spatial dims)`` of an NCHW or NHWC shape."""
    xd = tuple(xd)
    if len(xd) < 2:
        raise ShapeError(f"an input of rank {len(xd)} where an {order} tensor (N, C, …) is needed")
    return (xd[0], xd[1], xd[2:]) if order == "NCHW" else (xd[0], xd[-1], xd[1:-1])


def join_layout(n: Dim, c: Dim, sp: Sequence[Dim], order: str) -> tuple[Dim, ...]:
    """Inverse of :func:`split_layout`."""
    return (n, c, *sp) if order == "NCHW" else (n, *sp, c)


# ---- what the driver leaves to Caffe2's inference ----

#: Op types whose rule gives Caffe2's shape inference where Caffe2's own kernel writes something else
#: (docs/fidelity.md, "Shape inference that differs from Caffe2's own kernels"): LearningRate infers
#: the iteration's shape (the kernel writes 0-d), TopK int32 indices (the kernel int64), GatherRanges
#: DATA's size for the values, LastNWindowCollector num_to_collect rows before the window fills.
INFERENCE_NOT_RUN = frozenset({"LearningRate", "TopK", "GatherRanges", "LastNWindowCollector"})


def inference_is_not_run(op: caffe2_pb2.OperatorDef) -> bool:
    """True where :func:`engine.runtime.inference.infer_op` gives Caffe2's inference for `op` rather than what its kernel
    writes: the types above, and a Concat with ``add_axis`` but no ``axis`` (the kernel ignores
    add_axis there, the inference adds the axis)."""
    if op.type in INFERENCE_NOT_RUN:
        return True
    args = args_of(op)
    return op.type == "Concat" and bool(args.get("add_axis", 0)) and "axis" not in args
