"""SSA-based rewrites of NetDefs: renames, dead-op removal, copy fusion, Reshape-for-FC removal,
device-type propagation, parameter export and the ONNX frontend's SSA renaming; and Caffe2's
own C++ rewrites that scripts reach through ``workspace.C``.

Behaviours follow Detectron2's Caffe2 export helpers and Caffe2's ``mobile_exporter`` /
ONNX frontend; every function works on the top net only (subnets are left as they are).
As in those tools the rewrites work **in place** on the NetDefs they are given, except
:func:`remove_reshape_for_fc`, which returns new ones.  Versions are those of
:func:`engine.model.ssa.get_ssa`.

Caffe2's graph passes (``run_transform``: AddNNPACK, FuseNNPACKConvRelu, DeadCodeElim;
``run_workspace_transform``: FuseConvBN) edit an :class:`engine.analysis.nomnigraph.NNModule` as Caffe2
edits its graph, and :func:`run_opt_pass` prints it back; ``workspace.ApplyTransform``'s older
registry (ConvToNNPack, CommonSubexpressionElimination) works on NetDefs.
"""
from __future__ import annotations

import copy
import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from engine.errors import ExecutionError, GraphError, IllegalGraphTransformError
from engine.model.opdef import args_of, create_operator
from engine.model.optypes import CONTROL_FLOW
from engine.model.ssa import VersionedBlob, get_consumer_map, get_producer_map, get_ssa
from proto import caffe2_pb2

__all__ = ["rename_op_input", "rename_op_output", "remove_dead_end_ops", "fuse_copy_gpu_cpu",
           "identify_reshape_sub_graph", "remove_reshape_for_fc", "get_sub_graph_external_input_output",
           "propagate_status", "infer_device_type", "get_params_from_init_net", "Export", "ssa_rewrite",
           "add_nnpack", "fuse_nnpack_conv_relu", "fuse_conv_bn", "dead_code_elim", "run_opt_pass",
           "conv_to_nnpack", "common_subexpression_elimination", "optimize_for_mkldnn"]

COPY_OPS = ("CopyCPUToGPU", "CopyGPUToCPU")


def _rename_version(net: caffe2_pb2.NetDef, ssa: Sequence[Any], old: str, new: str, version: int,
                    start: Mapping[str, int], end: Mapping[str, int]) -> None:
    """Rename every read and write of `old`@`version` (and the external names holding it)."""
    for op, (ins, outs) in zip(net.op, ssa):
        for i, b in enumerate(ins):
            if b == (old, version):
                op.input[i] = new
        for i, b in enumerate(outs):
            if b == (old, version):
                op.output[i] = new
    if start.get(old, 0) == version:
        net.external_input[:] = [new if n == old else n for n in net.external_input]
    if end.get(old, 0) == version:
        net.external_output[:] = [new if n == old else n for n in net.external_output]


def rename_op_output(predict_net: caffe2_pb2.NetDef, op_id: int, output_id: int, new_name: str) -> None:
    """Rename output `output_id` of op `op_id`: that version, every read of it and the external output.

    Examples
    --------
    >>> net = caffe2_pb2.NetDef(op=[create_operator("Relu", "X", "Y"), create_operator("Relu", "Y", "Z")],
    ...                         external_output=["Z"])
    >>> rename_op_output(net, 0, 0, "H"); [list(o.input) for o in net.op]
    [['X'], ['H']]
    """
    ssa, versions = get_ssa(predict_net)
    old, version = ssa[op_id][1][output_id]
    _rename_version(predict_net, ssa, old, new_name, version, {}, versions)


def rename_op_input(predict_net: caffe2_pb2.NetDef, init_net: caffe2_pb2.NetDef, op_id: int, input_id: int,
                    new_name: str, from_producer: bool = False) -> None:
    """Rename input `input_id` of op `op_id`, or with `from_producer` the producer's output.

    A version read at 0 (an external input or parameter) is renamed in the predict net's
    external inputs and, when the init net writes it, in the init net too.

    Raises
    ------
    IllegalGraphTransformError
        When other ops read the same version (rename the producer's output instead).
    NotImplementedError
        With `from_producer`, when the version comes from the init net (no producer here).
    """
    ssa, versions = get_ssa(predict_net)
    blob = old, version = ssa[op_id][0][input_id]
    if from_producer:
        producers = get_producer_map(ssa)
        if blob not in producers:
            raise NotImplementedError(f"input '{old}' of op #{op_id} has no producer in the predict net "
                                      "(it probably comes from the init net); not supported")
        rename_op_output(predict_net, *producers[blob], new_name)
        return
    readers = {i for i, _ in get_consumer_map(ssa)[blob]}
    if len(readers) > 1:
        raise IllegalGraphTransformError(
            f"{predict_net.name or '<net>'}: op #{op_id} {predict_net.op[op_id].type}: input '{old}' "
            f"(version {version}) is also read by op(s) {sorted(readers - {op_id})}; "
            "rename the producer's output instead (from_producer=True)")
    if version == 0 and init_net is not None and len(init_net.op):
        init_ssa, init_versions = get_ssa(init_net)
        if old in init_versions and init_versions[old] > 0:
            _rename_version(init_net, init_ssa, old, new_name, init_versions[old], {}, init_versions)
    _rename_version(predict_net, ssa, old, new_name, version, {}, versions)
    if version == 0:
        predict_net.external_input[:] = [new_name if n == old else n for n in predict_net.external_input]


def remove_dead_end_ops(net: caffe2_pb2.NetDef) -> None:
    """Remove ops none of whose outputs are read later (by a kept op) or are external outputs.

    NOTE: unlike Detectron2, ops without outputs and control-flow ops are kept: they act
    through side effects (``Print``, an ``If`` writing shared blobs).
    """
    ssa, versions = get_ssa(net)
    ext = {(n, versions.get(n, 0)) for n in net.external_output}
    consumers = get_consumer_map(ssa)
    removed: set[int] = set()

    def dead(b: VersionedBlob) -> bool:
        return b not in ext and all(i in removed for i, _ in consumers.get(b, []))

    for i in reversed(range(len(net.op))):
        op = net.op[i]
        if op.output and op.type not in CONTROL_FLOW and all(dead(b) for b in ssa[i][1]):
            removed.add(i)
    _keep_ops(net, lambda i: i not in removed)


def _keep_ops(net: caffe2_pb2.NetDef, keep: Callable[[int], bool]) -> None:
    ops = [op for i, op in enumerate(net.op) if keep(i)]
    del net.op[:]
    net.op.extend(ops)


def _written_between(ssa: Sequence[Any], name: str, lo: int, hi: int, skip: Iterable[int]) -> bool:
    return any(n == name for k in range(lo + 1, hi) if k not in skip for n, _ in ssa[k][1])


def _fuse_once(net: caffe2_pb2.NetDef) -> bool:
    ssa, versions = get_ssa(net)
    consumers = get_consumer_map(ssa)
    ext = {(n, versions.get(n, 0)) for n in net.external_output}
    for i, op in enumerate(net.op):
        if op.type not in COPY_OPS:
            continue
        mid, src = ssa[i][1][0], op.input[0]
        back = [c for c, _ in consumers.get(mid, [])]
        reverse = COPY_OPS[1 - COPY_OPS.index(op.type)]
        if not back or mid in ext or any(net.op[c].type != reverse or ssa[c][1][0] in ext for c in back):
            continue
        rewires = [(j, k) for c in back for j, k in consumers.get(ssa[c][1][0], [])]
        if any(_written_between(ssa, src, i, j, back) for j, _ in rewires):
            continue  # NOTE: the source was overwritten before a reader: fusing would change its value.
        for j, k in rewires:
            net.op[j].input[k] = src
        _keep_ops(net, lambda n: n != i and n not in back)
        return True
    return False


def fuse_copy_gpu_cpu(net: caffe2_pb2.NetDef) -> None:
    """Remove ``CopyCPUToGPU``→``CopyGPUToCPU`` (and reverse) pairs, readers rewired to the source.

    A pair is fused only when every reader of the first copy is the reverse copy and neither
    copy's output is an external output.
    """
    while _fuse_once(net):
        pass


def _dependency_chain(ssa: Sequence[Any], target: VersionedBlob, source: VersionedBlob) -> list[int]:
    """Ops on a path from blob `source` to blob `target` (those computing target from source)."""
    producers = get_producer_map(ssa)
    ancestors: set[int] = set()
    stack = [target]
    while stack:
        b = stack.pop()
        if b in producers and producers[b][0] not in ancestors:
            ancestors.add(producers[b][0])
            stack.extend(ssa[producers[b][0]][0])
    reached = {source}
    chain = []
    for i in sorted(ancestors):
        if any(b in reached for b in ssa[i][0]):
            chain.append(i)
            reached.update(ssa[i][1])
    return chain


def identify_reshape_sub_graph(net: caffe2_pb2.NetDef) -> list[list[int]]:
    """For every two-input ``Reshape``: ``[ops computing its shape from its data input…, reshape]``.

    Examples
    --------
    >>> net = caffe2_pb2.NetDef(op=[create_operator("Shape", "X", "s"), create_operator("Reshape", ["X", "s"],
    ...                                                                                  ["Y", "old"])])
    >>> identify_reshape_sub_graph(net)
    [[0, 1]]
    """
    ssa, _ = get_ssa(net)
    return [_dependency_chain(ssa, ssa[i][0][1], ssa[i][0][0]) + [i]
            for i, op in enumerate(net.op) if op.type == "Reshape" and len(op.input) == 2]


def get_sub_graph_external_input_output(net: caffe2_pb2.NetDef, op_indices: Iterable[int]
                                        ) -> tuple[list[VersionedBlob], list[VersionedBlob]]:
    """Versioned blobs a sub-graph reads from outside, and those it writes that are read outside.

    External outputs of the net (final versions) count as read outside.
    """
    ssa, versions = get_ssa(net)
    inside = set(op_indices)
    ins: list[VersionedBlob] = []
    outs: list[VersionedBlob] = []
    for i in sorted(inside):
        ins += [b for b in ssa[i][0] if b not in ins]
        outs += list(ssa[i][1])
    read_outside = {b for i, (r, _) in enumerate(ssa) if i not in inside for b in r}
    read_outside |= {(n, versions.get(n, 0)) for n in net.external_output}
    return [b for b in ins if b not in outs], [b for b in outs if b in read_outside]


def remove_reshape_for_fc(predict_net: caffe2_pb2.NetDef, params: dict[str, Any]
                          ) -> tuple[caffe2_pb2.NetDef, dict[str, Any]]:
    """Drop Reshape sub-graphs that only feed FC ops (FC flattens N-D input itself).

    Returns a new predict net and a new params dict without the sub-graphs' own params.
    NOTE: as in Detectron2, the Reshape is assumed to flatten to ``(N, -1)``; only isolated
    sub-graphs (one data input, one output, read only by FC) are removed.
    """
    net, params = copy.deepcopy(predict_net), dict(params)
    removed: list[int] = []
    for sub in identify_reshape_sub_graph(net):
        reshape = sub[-1]
        ssa, _ = get_ssa(net)
        out = ssa[reshape][1][0]
        readers = [i for i, _ in get_consumer_map(ssa).get(out, [])]
        if not readers or any(net.op[i].type != "FC" for i in readers):
            continue
        ext_in, ext_out = get_sub_graph_external_input_output(net, sub)
        data = [b for b in ext_in if b[0] not in params]
        if len(data) != 1 or ext_out != [out]:
            continue
        rename_op_output(net, reshape, 0, net.op[reshape].input[0])
        ssa, _ = get_ssa(net)
        if ssa[reshape][1][0] != (data[0][0], data[0][1] + 1):
            rename_op_output(net, reshape, 0, out[0])  # NOTE: the data blob is rewritten in between
            continue
        removed += sub
        for name, _ in ext_in:
            if name in params and not _read_elsewhere(net, name, set(sub)):
                del params[name]
                net.external_input[:] = [n for n in net.external_input if n != name]
    _keep_ops(net, lambda i: i not in set(removed))
    return net, params


def _read_elsewhere(net: caffe2_pb2.NetDef, name: str, skip: set[int]) -> bool:
    return any(name in op.input for i, op in enumerate(net.op) if i not in skip)


# ---- status propagation (device type, layout, dtype…) ----

StatusUpdater = Callable[[caffe2_pb2.OperatorDef, list[Any], list[Any]], tuple[list[Any], list[Any]]]


def propagate_status(net: caffe2_pb2.NetDef, updater: StatusUpdater, known_status: Mapping[VersionedBlob, Any],
                     strict: bool = True) -> dict[VersionedBlob, Any]:
    """Spread a per-blob status over SSA versions, forwards then backwards, until nothing changes.

    ``updater(op, input_statuses, output_statuses)`` returns the statuses it implies for the
    op's inputs and outputs (None = no opinion).

    Raises
    ------
    GraphError
        When two ops imply different statuses for one version, or (`strict`) when some
        version stays unknown.
    """
    ssa, _ = get_ssa(net)
    status = dict(known_status)
    changed = True
    while changed:
        changed = False
        for i in [*range(len(ssa)), *reversed(range(len(ssa)))]:
            ins, outs = ssa[i]
            new_in, new_out = updater(net.op[i], [status.get(b) for b in ins], [status.get(b) for b in outs])
            for b, s in zip(ins + outs, new_in + new_out):
                if s is None or status.get(b) == s:
                    continue
                if b in status:
                    raise GraphError(f"{net.name or '<net>'}: op #{i} {net.op[i].type}: conflicting status for "
                                     f"'{b[0]}' version {b[1]}: {status[b]!r} vs {s!r}")
                status[b] = s
                changed = True
    missing = sorted({b for ins, outs in ssa for b in ins + outs} - set(status))
    if strict and missing:
        raise GraphError(f"{net.name or '<net>'}: cannot infer the status of {len(missing)} blob version(s), "
                         f"first '{missing[0][0]}' version {missing[0][1]}")
    return status


def infer_device_type(net: caffe2_pb2.NetDef, known_status: Mapping[VersionedBlob, str],
                      device_name_style: str = "caffe2") -> dict[VersionedBlob, str]:
    """``"cpu"`` / ``"gpu"`` (``"cuda"`` with ``device_name_style="pytorch"``) of every blob version.

    Copy ops are device boundaries; every other op keeps all its blobs on one device.

    Examples
    --------
    >>> net = caffe2_pb2.NetDef(op=[create_operator("CopyCPUToGPU", "X", "Xg"), create_operator("Relu", "Xg", "Y")])
    >>> infer_device_type(net, {("X", 0): "cpu"})[("Y", 1)]
    'gpu'
    """
    if device_name_style not in ("caffe2", "pytorch"):
        raise ValueError(f"device_name_style must be 'caffe2' or 'pytorch', not {device_name_style!r}")
    cpu, gpu = "cpu", ("gpu" if device_name_style == "caffe2" else "cuda")

    def updater(op: caffe2_pb2.OperatorDef, ins: list[Any], outs: list[Any]) -> tuple[list[Any], list[Any]]:
        if op.type in COPY_OPS:
            src, dst = (cpu, gpu) if op.type == "CopyCPUToGPU" else (gpu, cpu)
            return [src] + [None] * (len(ins) - 1), [dst] * len(outs)
        seen = {s for s in ins + outs if s is not None}
        if len(seen) > 1:
            raise GraphError(f"{net.name or '<net>'}: op {op.type} '{op.name}' mixes devices {sorted(seen)}")
        the = seen.pop() if seen else None
        return [the] * len(ins), [the] * len(outs)

    return propagate_status(net, updater, known_status)


# ---- parameters and export ----

def get_params_from_init_net(init_net: caffe2_pb2.NetDef
                             ) -> tuple[dict[str, Any], dict[str, caffe2_pb2.DeviceOption]]:
    """Run `init_net` in a fresh workspace; return ``(params, device_options)`` by blob name."""
    from engine.runtime.executor import run_net  # noqa: PLC0415
    from engine.runtime.workspace import Workspace  # noqa: PLC0415

    ws = Workspace("get_params_from_init_net")
    run_net(init_net, ws)
    params, devices = {}, {}
    for op in init_net.op:
        opt = op.device_option if op.HasField("device_option") else init_net.device_option
        for name in op.output:
            params[name] = ws.fetch_blob(name)
            devices[name] = caffe2_pb2.DeviceOption()
            devices[name].CopyFrom(opt)
    return params, devices


_FILL_FOR = {np.dtype(np.float32): "GivenTensorFill", np.dtype(np.float64): "GivenTensorDoubleFill",
             np.dtype(np.int32): "GivenTensorIntFill", np.dtype(np.int64): "GivenTensorInt64Fill",
             np.dtype(np.bool_): "GivenTensorBoolFill", np.dtype(np.int16): "GivenTensorInt16Fill",
             np.dtype(np.uint8): "GivenTensorByteStringToUInt8Fill", np.dtype(object): "GivenTensorStringFill"}


def _fill_op(name: str, value: Any) -> caffe2_pb2.OperatorDef:
    a = np.asarray(value)
    if a.dtype not in _FILL_FOR:
        raise GraphError(f"blob '{name}': no GivenTensor*Fill for dtype {a.dtype}")
    # NOTE: uint8 as one string; numbers as the array itself, which make_argument writes as packed bytes
    flat = a.reshape(-1)
    values = [a.tobytes()] if a.dtype == np.uint8 else flat if a.dtype.kind in "fib" else flat.tolist()
    return create_operator(_FILL_FOR[a.dtype], [], [name], shape=list(a.shape), values=values)


def Export(workspace: Any, net: Any, params: Iterable[Any]) -> tuple[caffe2_pb2.NetDef, caffe2_pb2.NetDef]:  # noqa: N802
    """``mobile_exporter.Export``: an init net of GivenTensor*Fill ops holding `params` (read from
    `workspace`), and a copy of `net` whose external inputs/outputs are what a Predictor expects.

    Inputs (version-0 blobs that are not params) get a placeholder 1×1 fill; external outputs
    become every written blob that no op reads.
    """
    proto = net.Proto() if hasattr(net, "Proto") else net
    fetch = getattr(workspace, "fetch_blob", None) or workspace.FetchBlob
    predict = caffe2_pb2.NetDef()
    predict.CopyFrom(proto)
    ssa, versions = get_ssa(proto)
    names = [str(p) for p in params]
    read = {n for ins, _ in ssa for n, _ in ins}
    inputs = [n for n, v in versions.items() if v == 0 and n not in names]
    outputs = [n for n, v in versions.items() if v != 0 and n not in read]
    init = caffe2_pb2.NetDef(op=[_fill_op(n, fetch(n)) for n in names])
    init.op.extend(create_operator("GivenTensorFill", [], [n], shape=[1, 1], values=[0.0]) for n in inputs)
    predict.external_input[:] = inputs + [n for n in proto.external_input if n not in inputs]
    predict.external_output[:] = outputs
    return init, predict


def ssa_rewrite(net: caffe2_pb2.NetDef, init_net: caffe2_pb2.NetDef | None, value_info: dict[str, Any] | None
                ) -> None:
    """Rename every blob of `net` to ``<name>_<version>`` in place (Caffe2's ONNX frontend).

    Init-net outputs, external inputs and `value_info` keys become ``<name>_0``; external
    outputs take their final version.

    Raises
    ------
    IllegalGraphTransformError
        When the init net holds other ops than single-output ``GivenTensor*Fill``.
    """
    def ssa_name(name: str, version: int) -> str:
        return f"{name}_{version}"

    if init_net is not None:
        for op in init_net.op:
            if not op.type.startswith("GivenTensor") or len(op.output) != 1:
                raise IllegalGraphTransformError(f"ssa_rewrite: init net op {op.type} '{op.name}' is not a "
                                                 "single-output GivenTensor*Fill")
            op.output[0] = ssa_name(op.output[0], 0)
        init_net.external_input[:] = [ssa_name(n, 0) for n in init_net.external_input]
        init_net.external_output[:] = [ssa_name(n, 0) for n in init_net.external_output]
    if value_info:
        renamed = {ssa_name(k, 0): v for k, v in value_info.items()}
        value_info.clear()
        value_info.update(renamed)
    net.external_input[:] = [ssa_name(n, 0) for n in net.external_input]
    ssa, versions = get_ssa(net)
    for op, (ins, outs) in zip(net.op, ssa):
        op.input[:] = [ssa_name(*b) for b in ins]
        op.output[:] = [ssa_name(*b) for b in outs]
    net.external_output[:] = [ssa_name(n, versions.get(n, 0)) for n in net.external_output]



# ---- graph passes (Caffe2's caffe2/opt, reached through workspace.C) ----
#
# Caffe2 runs these on the nomnigraph dataflow graph of a net (engine.analysis.nomnigraph: every write of
# a blob is its own tensor node) and prints the graph back to a NetDef; so do we, with the same
# graph edits, so names, op order and external lists come out as Caffe2's.

#: NNPACK algorithms for which a fused Conv+Relu is worth it (besides AUTO, judged by geometry).
_NNPACK_FAST_ALGOS = ("WINOGRAD", "WINOGRAD_FP16", "FT8x8", "FT16x16")
#: BatchNormalization's epsilon in Caffe2's graph: the converter does not read SpatialBN's arg.
_GRAPH_BN_EPSILON = 1e-5


def _op_def(node: Any) -> caffe2_pb2.OperatorDef | None:
    """The OperatorDef an operator node was made from (a copy), None for a bare node."""
    from engine.analysis.nomnigraph import NomnigraphError  # noqa: PLC0415

    try:
        return node.data.annotation.operator_def if node.data.annotation is not None else None
    except NomnigraphError:  # an annotation without an OperatorDef
        return None


def _conv_geometry(op: caffe2_pb2.OperatorDef) -> tuple[list[int], list[int]]:
    """(kernel shape, strides) as Caffe2's graph Conv holds them: the kernel from ``kernel``
    (square), else ``kernels``, else ``kernel_h``/``kernel_w``; strides only from ``stride``."""
    args = args_of(op)
    if "kernel" in args:
        kernel = [int(args["kernel"])] * 2
    elif "kernels" in args:
        kernel = [int(k) for k in args["kernels"]]
    elif "kernel_h" in args and "kernel_w" in args:
        kernel = [int(args["kernel_h"]), int(args["kernel_w"])]
    else:
        kernel = []
    return kernel, [int(args["stride"])] * 2 if "stride" in args else []


def _convs(m: Any) -> list[Any]:
    return [n for n in m.dataFlow().getMutableNodes() if n.isOperator() and n.getName() == "Conv"]


def add_nnpack(m: Any) -> None:
    """``AddNNPACK``: NCHW 2-D stride-1 Convs with a bias get engine NNPACK (precomputed transform).

    Only an explicit ``order`` NCHW counts; Kx1 and 1xK kernels are left alone.
    """
    for node in _convs(m):
        op = _op_def(node)
        if op is None or len(node.getInputs()) < 3 or node.data.layout != "NCHW":
            continue
        kernel, strides = _conv_geometry(op)
        if any(s != 1 for s in strides) or len(kernel) != 2 or (kernel[0] != kernel[1] and 1 in kernel):
            continue
        op.engine = "NNPACK"
        op.arg.add(name="convolution_transform_strategy", s=b"PRECOMPUTE")
        node.data.annotation.operator_def = op


def _nnpack_relu_fast(op: caffe2_pb2.OperatorDef) -> bool:
    """Whether Caffe2 judges an NNPACK Conv+Relu fusion worth it (its ``algo``, else geometry)."""
    algo = _text(args_of(op).get("algo", "AUTO"))
    if algo in ("AUTO", ""):
        kernel, strides = _conv_geometry(op)
        return all(s <= 1 for s in strides) and all(k >= 2 for k in kernel)
    return algo in _NNPACK_FAST_ALGOS


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def fuse_nnpack_conv_relu(m: Any) -> None:
    """``FuseNNPACKConvRelu``: an NNPACK Conv whose output only a Relu reads becomes one Conv with
    ``activation="Relu"`` writing the Relu's output.

    Conv cannot run in place: when the Relu writes the Conv's input, the Conv keeps its own
    output and the Relu's readers read that.  When a reader of the fused output writes the same
    name, the fused output becomes ``<name>_fusion_fix``.
    """
    from engine.analysis.nomnigraph import NeuralNetData  # noqa: PLC0415

    df = m.dataFlow()
    for conv in _convs(m):
        outs = conv.getOutputs()
        if len(outs) != 1 or len(outs[0].getConsumers()) != 1:
            continue
        out, relu = outs[0], outs[0].getConsumers()[0]
        op = _op_def(conv)
        if (relu.getName() != "Relu" or len(relu.getOutputs()) != 1 or op is None or op.engine != "NNPACK"
                or not _nnpack_relu_fast(op)):
            continue
        relu_out = relu.getOutputs()[0]
        if relu_out.getName() != conv.getInputs()[0].getName():
            df.replaceNode(out, relu_out)
            dead, fused = out, relu_out
        else:  # NOTE: Conv cannot be in place: keep its output, the Relu's readers read it
            df.replaceNode(relu_out, out)
            dead, fused = relu_out, out
        df.deleteNode(relu)
        df.deleteNode(dead)
        name = fused.getName()
        if any(o.getName() == name for c in fused.getConsumers() for o in c.getOutputs()):
            df.replaceNode(fused, df.createNode(NeuralNetData(f"{name}_fusion_fix")))
        op.arg.add(name="activation", s=b"Relu")
        conv.data.annotation.operator_def = op


def fuse_conv_bn(m: Any, workspace: Any) -> None:
    """``FuseConvBN``: fold a SpatialBN that alone reads a Conv's output into the Conv.

    The Conv's filter and bias blobs in `workspace` are rewritten
    (``W' = W s / sqrt(var + eps)``, ``b' = (b - mean) s / sqrt(var + eps) + bias``, float32);
    a Conv without bias gets a zero one, ``<conv name>_bias<k>`` (the first k not in the
    workspace), which becomes an external input.

    NOTE: Caffe2 folds with epsilon 1e-5 whatever the SpatialBN's ``epsilon`` (its graph node
    never reads the argument), so the fused net differs from the original when it is not 1e-5.
    netviz does the same, and uses the op's epsilon under ``engine.analysis.lint.fix_caffe2()``.
    """
    from engine.runtime.fidelity import fixes_enabled  # noqa: PLC0415

    while _fuse_one_conv_bn(m, workspace, fixes_enabled()):
        pass


def _fuse_one_conv_bn(m: Any, ws: Any, own_epsilon: bool) -> bool:
    from engine.analysis.nomnigraph import NeuralNetData  # noqa: PLC0415

    df = m.dataFlow()
    for conv in _convs(m):
        out = conv.getOutputs()[:1]
        if not out or len(out[0].getConsumers()) != 1 or out[0].getConsumers()[0].getName() != "BatchNormalization":
            continue
        bn = out[0].getConsumers()[0]
        if len(bn.getOutputs()) != 1 or len(conv.getInputs()) < 2:
            continue
        bn_in = [t.getName() for t in bn.getInputs()]
        if len(bn_in) < 5:
            raise ExecutionError(f"FuseConvBN: SpatialBN reading '{out[0].getName()}' has {len(bn_in)} inputs, "
                                 "needs 5 (Invalid batch normalization input size)")
        w = np.asarray(ws.fetch_blob(conv.getInputs()[1].getName()), dtype=np.float32)
        scale, bias_bn, mean, var = (np.asarray(ws.fetch_blob(b), dtype=np.float32) for b in bn_in[1:5])
        if len(conv.getInputs()) == 2:
            op = _op_def(conv)
            if op is None:
                continue
            k = 0
            while ws.has_blob(f"{op.name}_bias{k}"):
                k += 1
            ws.feed_blob(f"{op.name}_bias{k}", np.zeros(w.shape[0], dtype=np.float32))
            bias_node = df.createNode(NeuralNetData(f"{op.name}_bias{k}"))
            m.inputs[bias_node] = None
            df.createEdge(bias_node, conv)
        w_name, b_name = (t.getName() for t in conv.getInputs()[1:3])
        b = np.asarray(ws.fetch_blob(b_name), dtype=np.float32)
        eps = np.float32(args_of(_op_def(bn) or caffe2_pb2.OperatorDef()).get("epsilon", _GRAPH_BN_EPSILON)
                         if own_epsilon else _GRAPH_BN_EPSILON)
        coeff = scale / np.sqrt(var + eps)
        ws.feed_blob(w_name, (w.reshape(w.shape[0], -1) * coeff[:, None]).reshape(w.shape))
        ws.feed_blob(b_name, (b - mean) * coeff + bias_bn)
        bn_out = bn.getOutputs()[0]
        df.deleteNode(out[0])
        df.createEdge(conv, bn_out)
        df.deleteNode(bn)
        return True
    return False


def dead_code_elim(m: Any) -> None:
    """``DeadCodeElim``: remove, one at a time until none is left, an op none of whose outputs is
    read or external (ops without outputs go too, unlike :func:`remove_dead_end_ops`)."""
    df = m.dataFlow()
    changed = True
    while changed:
        changed = False
        for node in df.getMutableNodes():
            if node.isOperator() and not any(t.getConsumers() or t in m.outputs for t in node.getOutputs()):
                for t in node.getOutputs():
                    df.deleteNode(t)
                df.deleteNode(node)
                changed = True
                break


def conv_to_nnpack(net: caffe2_pb2.NetDef) -> None:
    """``ConvToNNPack`` (Caffe2's older transform registry, ``workspace.ApplyTransform``): every
    CPU Conv gets engine NNPACK, in place; Convs with another device type are left alone."""
    for op in net.op:
        if op.type == "Conv" and op.device_option.device_type == caffe2_pb2.CPU:
            op.engine = "NNPACK"


#: Op types ``CommonSubexpressionElimination`` merges (Caffe2's allowed list).
_CSE_OPS = frozenset({"LearningRate", "FC"})


def _args_match(pattern: caffe2_pb2.OperatorDef, op: caffe2_pb2.OperatorDef) -> bool:
    """Caffe2's ``MatchArguments``: every argument of `pattern` is on `op` with the same values
    (one way only: `op` may have more; a string may list ``a|b`` alternatives or be ``*``)."""
    def strings_match(p: bytes, s: bytes) -> bool:
        return p == b"*" or s in p.split(b"|")

    for p in pattern.arg:
        found = [a for a in op.arg if a.name == p.name]
        if not found:
            return False
        for a in found:
            if ((p.HasField("f") and (not a.HasField("f") or p.f != a.f))
                    or (p.HasField("i") and (not a.HasField("i") or p.i != a.i))
                    or (p.HasField("s") and (not a.HasField("s") or not strings_match(p.s, a.s)))
                    or list(p.floats) != list(a.floats) or list(p.ints) != list(a.ints)
                    or len(p.strings) != len(a.strings)
                    or not all(strings_match(x, y) for x, y in zip(p.strings, a.strings))):
                return False
    return True


class _OpGraph:
    """Caffe2's ``transform::Graph``: ops as nodes, an edge from the last writer of each blob to
    its readers (per edge, the blobs in read order), and nodes switched off by a rewrite."""

    def __init__(self, net: caffe2_pb2.NetDef) -> None:
        self.net = net
        self.ops = [copy.deepcopy(op) for op in net.op]
        self.active = [True] * len(self.ops)
        self.parents: list[dict[int, list[str]]] = [{} for _ in self.ops]
        self.children: list[dict[int, list[str]]] = [{} for _ in self.ops]
        writer: dict[str, int] = {}
        for i, op in enumerate(self.ops):
            for b in op.input:
                if b in writer:
                    self.parents[i].setdefault(writer[b], []).append(b)
                    self.children[writer[b]].setdefault(i, []).append(b)
            writer.update((b, i) for b in op.output)

    def add(self, op: caffe2_pb2.OperatorDef, parents: dict[int, list[str]]) -> int:
        self.ops.append(op)
        self.active.append(True)
        self.parents.append(dict(parents))
        self.children.append({})
        return len(self.ops) - 1

    def deactivate(self, nodes: Iterable[int]) -> None:
        for i in nodes:
            for p in self.parents[i]:
                self.children[p].pop(i, None)
            for c in self.children[i]:
                self.parents[c].pop(i, None)
            self.active[i] = False

    def netdef(self) -> caffe2_pb2.NetDef:
        """The net with the active ops in the smallest topological order by node index (the
        original order when nothing was added; a node a rewrite added goes as late as it can)."""
        out = caffe2_pb2.NetDef()
        out.CopyFrom(self.net)
        del out.op[:]
        waiting = [len(p) for p in self.parents]
        seen = [not p and a for p, a in zip(self.parents, self.active)]
        ready = [i for i, s in enumerate(seen) if s]
        heapq.heapify(ready)
        while ready:
            i = heapq.heappop(ready)
            out.op.append(self.ops[i])
            for c in self.children[i]:
                if not seen[c] and self.active[c]:
                    waiting[c] -= 1
                    if not waiting[c]:
                        seen[c] = True
                        heapq.heappush(ready, c)
        return out


def _cse_common(g: _OpGraph, a: int, b: int) -> bool:
    x, y = g.ops[a], g.ops[b]
    return (x.type == y.type and _args_match(x, y) and list(x.input) == list(y.input)
            and g.parents[a] == g.parents[b] and len(x.output) == len(y.output))


def common_subexpression_elimination(net: caffe2_pb2.NetDef) -> caffe2_pb2.NetDef:
    """``CommonSubexpressionElimination`` (``workspace.ApplyTransform``): FC and LearningRate ops
    that compute the same thing (type, arguments, inputs and their writers) become one op writing
    ``transform/<output>``; their readers read that.  Returns a new NetDef.

    NOTE: as in Caffe2, external outputs are not renamed (an eliminated op's external output is
    then no longer written).
    """
    g = _OpGraph(net)
    matched = [False] * len(g.ops)
    matches = []
    for i in range(len(g.ops)):
        if matched[i] or g.ops[i].type not in _CSE_OPS:
            continue
        group = [i] + [j for j in range(i + 1, len(g.ops)) if not matched[j] and _cse_common(g, i, j)]
        if len(group) >= 2:
            matches.append(group)
            for j in group:
                matched[j] = True
    for group in matches:
        first = g.ops[group[0]]
        merged = copy.deepcopy(first)
        merged.output[:] = [f"transform/{b}" for b in first.output]
        parents = g.parents[group[0]]
        new = g.add(merged, parents)
        for p, blobs in parents.items():
            for j in group:
                g.children[p].pop(j, None)
            g.children[p][new] = blobs
        for j in group:
            renamed = dict(zip(g.ops[j].output, merged.output))
            for c, blobs in g.children[j].items():
                g.children[new][c] = [renamed[b] for b in blobs]
                g.parents[c][new] = g.children[new][c]
                g.parents[c].pop(j, None)
                g.ops[c].input[:] = [renamed.get(b, b) for b in g.ops[c].input]
        g.deactivate(group)
    return g.netdef()


#: Caffe2's ``OptimizationPassRegistry`` as netviz has it: name -> pass over an NNModule.
OPT_PASSES: dict[str, Callable[[Any], None]] = {
    "AddNNPACK": add_nnpack, "FuseNNPACKConvRelu": fuse_nnpack_conv_relu, "DeadCodeElim": dead_code_elim}
#: Caffe2's ``WorkspaceOptimizationPassRegistry``: passes that also rewrite workspace blobs.
WORKSPACE_OPT_PASSES: dict[str, Callable[[Any, Any], None]] = {"FuseConvBN": fuse_conv_bn}


def _on_graph(net: caffe2_pb2.NetDef, edit: Callable[[Any], None], what: str, keep_net: bool = True
              ) -> caffe2_pb2.NetDef:
    """`net` turned into Caffe2's graph, changed by `edit`, and printed back (a new NetDef; without
    `keep_net` a bare one: no name, type or arguments, external names in graph order).

    Raises
    ------
    ExecutionError
        `edit` removed a blob that is an external input or output (Caffe2: "A non-tensor node
        was added to external inputs/outputs"; a RuntimeError, as there).
    """
    from engine.analysis.nomnigraph import from_netdef, to_netdef  # noqa: PLC0415

    m, _ = from_netdef(net)
    edit(m)
    alive = set(m.dataFlow().getMutableNodes())
    gone = [t.getName() for t in [*m.inputs, *m.outputs] if t not in alive]
    if gone:
        raise ExecutionError(f"{net.name or '<net>'}: {what} removed '{gone[0]}', an external input/output "
                             "(Caffe2: A non-tensor node was added to external inputs/outputs of the NNModule)")
    return to_netdef(m, net if keep_net else None)


def run_opt_pass(name: str, net: caffe2_pb2.NetDef, workspace: Any = None, keep_net: bool = True
                 ) -> caffe2_pb2.NetDef:
    """The NetDef Caffe2's ``run_transform`` / ``run_workspace_transform`` gives for pass `name`
    (`workspace`, default the current one, is changed by workspace passes).  ``keep_net=False``
    prints a bare NetDef, as Caffe2's ``transform_fuseConvBN`` does (see :func:`_on_graph`).

    Raises
    ------
    ExecutionError
        An unknown pass ("Pass doesn't exist"), or see :func:`_on_graph`.
    """
    if name in OPT_PASSES:
        return _on_graph(net, OPT_PASSES[name], f"pass {name}", keep_net)
    if name not in WORKSPACE_OPT_PASSES:
        raise ExecutionError(f"Pass doesn't exist: {name} (netviz has {sorted({**OPT_PASSES, **WORKSPACE_OPT_PASSES})})")
    if workspace is None:
        from engine.runtime.workspace import current  # noqa: PLC0415
        workspace = current()
    return _on_graph(net, lambda m: WORKSPACE_OPT_PASSES[name](m, workspace), f"pass {name}", keep_net)


#: ``output_order`` values (MKL-DNN memory formats) Int8Quantize/Int8Dequantize get when an order
#: switch is folded into them.
_MKLDNN_NHWC, _MKLDNN_NCHW = 20, 5


def _set_arg_last(node: Any, name: str, value: int) -> None:
    """Replace every `name` argument of operator `node` by one at the end (Caffe2's removeArg + add)."""
    op = _op_def(node)
    kept = [a for a in op.arg if a.name != name]
    del op.arg[:]
    op.arg.extend(kept)
    op.arg.add(name=name, i=value)
    node.data.annotation.operator_def = op


def _drop_in_place_stop_gradient(m: Any) -> bool:
    """An in-place StopGradient does nothing at inference: its readers read its input."""
    df = m.dataFlow()
    for node in df.getMutableNodes():
        op = _op_def(node) if node.isOperator() else None
        if op is None or op.type != "StopGradient":
            continue
        x, y = node.getInputs()[0], node.getOutputs()[0]
        if x.getName() == y.getName():
            df.replaceNode(y, x)
            df.deleteNode(node)
            return True
    return False


def _fold_order_switch(m: Any) -> bool:
    """NCHW2NHWC -> Int8Quantize and Int8Dequantize -> NHWC2NCHW become the quantize op alone,
    with an ``output_order`` argument."""
    df = m.dataFlow()
    for node in df.getMutableNodes():
        op = _op_def(node) if node.isOperator() else None
        if op is None:
            continue
        if op.type == "NCHW2NHWC":
            out = node.getOutputs()[0]
            readers = out.getConsumers()
            if len(readers) != 1 or getattr(_op_def(readers[0]), "type", None) != "Int8Quantize":
                continue
            _set_arg_last(readers[0], "output_order", _MKLDNN_NHWC)
            df.replaceNode(out, node.getInputs()[0])
            df.deleteNode(node)
            df.deleteNode(out)
            return True
        if op.type == "NHWC2NCHW":
            x = node.getInputs()[0]
            if not x.hasProducer() or getattr(_op_def(x.getProducer()), "type", None) != "Int8Dequantize":
                continue
            _set_arg_last(x.getProducer(), "output_order", _MKLDNN_NCHW)
            df.replaceNode(x, node.getOutputs()[0])
            df.deleteNode(node)
            df.deleteNode(x)
            return True
    return False


def optimize_for_mkldnn(net: caffe2_pb2.NetDef, training_mode: bool = False) -> caffe2_pb2.NetDef:
    """``transform_optimizeForMKLDNN`` on a net without IDEEP ops: at inference, in-place
    StopGradients go and order switches fold into Int8Quantize/Int8Dequantize; in training mode
    the net only makes the round trip through the graph.

    NOTE: Caffe2's other MKL-DNN fusions (Conv+BN/AffineChannel, Conv+Sum, Conv+Relu, filter
    pre-conversion) apply to ops on the IDEEP device only, which netviz does not have.
    """
    def edit(m: Any) -> None:
        if not training_mode:
            for fuser in (_drop_in_place_stop_gradient, _fold_order_switch):
                while fuser(m):
                    pass
    return _on_graph(net, edit, "optimizeForMKLDNN")
