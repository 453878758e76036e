"""Caffe2's SSA helpers: blob versions per op, producers, consumers and op paths.

Numbering is Caffe2's ``core.get_ssa``: a blob never written is version 0, its first write
makes version 1, every later write adds one.  Declared external inputs start at 0; when a net
declares *no* external input, every op input not yet seen is registered at 0 as it is met.
All functions are linear in the size of the net (a 100k-op chain takes well under a second).

An SSA is a list with one ``(inputs, outputs)`` pair per op, each a list of
``(name, version)`` tuples in argument order.
"""
from __future__ import annotations

import gc
from collections.abc import Iterable, MutableMapping, Sequence
from typing import Any

from proto import caffe2_pb2

__all__ = ["VersionedBlob", "OpSSA", "get_ssa", "get_undefined_blobs", "get_output_producers",
           "get_op_ids_in_path", "get_producer_map", "get_consumer_map"]

VersionedBlob = tuple[str, int]
OpSSA = tuple[list[VersionedBlob], list[VersionedBlob]]


def _proto(net: Any) -> caffe2_pb2.NetDef:
    return net.Proto() if hasattr(net, "Proto") else net


def get_ssa(net: Any, blob_versions: MutableMapping[str, int] | None = None
            ) -> tuple[list[OpSSA], MutableMapping[str, int]]:
    """Return ``(ssa, blob_versions)`` for a ``Net`` or ``NetDef``, as Caffe2 numbers them.

    Parameters
    ----------
    net : Net, NetDef, or a list of them
        A list is versioned in order through one shared `blob_versions`; the first result
        is then the list of per-net SSAs.
    blob_versions : dict, optional
        Current version of each blob name; read and updated in place (pass the result of an
        init net to continue its numbering).

    Returns
    -------
    ssa : list of (inputs, outputs)
        Per op, ``[(name, version), …]`` for its inputs then its outputs.
    blob_versions : dict
        The latest version of every blob seen.

    Examples
    --------
    >>> from engine.model.opdef import create_operator as op
    >>> net = caffe2_pb2.NetDef(op=[op("FC", ["X", "W", "b"], "Y"), op("Relu", "Y", "Y")])
    >>> ssa, versions = get_ssa(net)
    >>> ssa[1]
    ([('Y', 1)], [('Y', 2)])
    >>> versions
    {'X': 0, 'W': 0, 'b': 0, 'Y': 2}
    """
    if blob_versions is None:
        blob_versions = {}
    if isinstance(net, (list, tuple)):
        return [get_ssa(n, blob_versions)[0] for n in net], blob_versions
    gc_was_enabled = gc.isenabled()
    gc.disable()  # NOTE: only acyclic tuples/lists are made; collections cost 2x on 100k ops
    try:
        return _versions(_proto(net), blob_versions)
    finally:
        if gc_was_enabled:
            gc.enable()


def _versions(proto: caffe2_pb2.NetDef, blob_versions: MutableMapping[str, int]
              ) -> tuple[list[OpSSA], MutableMapping[str, int]]:
    for name in proto.external_input:
        blob_versions.setdefault(name, 0)
    register_inputs = not proto.external_input
    ssa: list[OpSSA] = []
    get = blob_versions.get
    for op in proto.op:
        if register_inputs:
            for name in op.input:
                blob_versions.setdefault(name, 0)
        inputs = [(name, get(name, 0)) for name in op.input]
        for name in op.output:
            blob_versions[name] = get(name, 0) + 1
        # NOTE: outputs are read after all increments, so Op(..)->[X, X] records (X, v+2) twice.
        ssa.append((inputs, [(name, blob_versions[name]) for name in op.output]))
    return ssa, blob_versions


def get_undefined_blobs(ssa: Iterable[OpSSA]) -> set[str]:
    """Names read at version 0 anywhere: used before any op of the SSA wrote them.

    Examples
    --------
    >>> get_undefined_blobs([([("X", 0)], [("Y", 1)]), ([("Y", 1)], [("Z", 1)])])
    {'X'}
    """
    return {name for inputs, _ in ssa for name, version in inputs if version == 0}


def get_output_producers(ssa: Sequence[OpSSA]) -> dict[VersionedBlob, int]:
    """Map ``(name, version)`` to the index of the op that writes that version.

    Examples
    --------
    >>> get_output_producers([([("X", 0)], [("Y", 1)]), ([("Y", 1)], [("Y", 2)])])
    {('Y', 1): 0, ('Y', 2): 1}
    """
    return {blob: i for i, (_, outputs) in enumerate(ssa) for blob in outputs}


def get_op_ids_in_path(ssa: Sequence[OpSSA], blob_versions: MutableMapping[str, int],
                       inputs: Iterable[Any], outputs: Iterable[Any]) -> list[int]:
    """Sorted indices of the ops needed to compute `outputs` given `inputs`.

    Both are blob names taken at their latest version in `blob_versions`; the walk goes
    backwards through producers and stops at the given inputs.

    Raises
    ------
    KeyError
        If an input or output name is not in `blob_versions` (as Caffe2).

    Examples
    --------
    >>> ssa = [([("X", 0)], [("Y", 1)]), ([("Y", 1)], [("Z", 1)])]
    >>> get_op_ids_in_path(ssa, {"X": 0, "Y": 1, "Z": 1}, ["Y"], ["Z"])
    [1]
    """
    stop = {(str(i), blob_versions[str(i)]) for i in inputs}
    producers = get_output_producers(ssa)
    queue = [(str(o), blob_versions[str(o)]) for o in outputs]
    used: set[int] = set()
    while queue:
        blob = queue.pop()
        if blob in stop or blob not in producers:
            continue
        op_id = producers[blob]
        if op_id not in used:
            used.add(op_id)
            queue.extend(ssa[op_id][0])
    return sorted(used)


def get_producer_map(ssa: Sequence[OpSSA]) -> dict[VersionedBlob, tuple[int, int]]:
    """Map ``(name, version)`` to ``(op index, output index)`` of its writer.

    An op listing one blob twice among its outputs maps to the last position.

    Examples
    --------
    >>> get_producer_map([([("X", 0)], [("Y", 1), ("Z", 1)])])
    {('Y', 1): (0, 0), ('Z', 1): (0, 1)}
    """
    return {blob: (i, k) for i, (_, outputs) in enumerate(ssa) for k, blob in enumerate(outputs)}


def get_consumer_map(ssa: Sequence[OpSSA]) -> dict[VersionedBlob, list[tuple[int, int]]]:
    """Map ``(name, version)`` to every ``(op index, input index)`` that reads it, in order.

    Examples
    --------
    >>> get_consumer_map([([("X", 0), ("X", 0)], [("Y", 1)]), ([("Y", 1)], [("Y", 2)])])
    {('X', 0): [(0, 0), (0, 1)], ('Y', 1): [(1, 0)]}
    """
    consumers: dict[VersionedBlob, list[tuple[int, int]]] = {}
    for i, (inputs, _) in enumerate(ssa):
        for k, blob in enumerate(inputs):
            consumers.setdefault(blob, []).append((i, k))
    return consumers
