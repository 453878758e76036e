"""A model's vital statistics, as ``netviz info`` prints them and tests compare them.

Pure functions of the protos: nothing runs.  Parameter shapes come from the init net's
fill ops (``shape`` argument, or the length of ``values`` for 1-D ``GivenTensor*Fill``).
"""
from __future__ import annotations

from collections import Counter
from typing import Any

from engine.catalogue import facts
from engine.model.modelio import Model
from engine.model.opdef import arg_value, argument_length, subnets_of
from proto import caffe2_pb2

DEVICE_NAMES = {v: k.removeprefix("PROTO_") for k, v in caffe2_pb2.DeviceTypeProto.items()}

#: Fill op → dtype it produces when it has no ``dtype`` argument.
FILL_DTYPES = {
    "GivenTensorFill": "float32", "GivenTensorDoubleFill": "float64", "GivenTensorIntFill": "int32",
    "GivenTensorInt64Fill": "int64", "GivenTensorBoolFill": "bool", "GivenTensorStringFill": "string",
    "GivenTensorInt16Fill": "int16", "GivenTensorByteStringToUInt8Fill": "uint8",
    "ConstantFill": "float32", "GaussianFill": "float32", "XavierFill": "float32", "MSRAFill": "float32",
    "UniformFill": "float32", "UniformIntFill": "int32", "RangeFill": "float32", "DiagonalFill": "float32",
    "Int8GivenTensorFill": "uint8", "Int8GivenIntTensorFill": "int32",
}
#: TensorProto.DataType value → the numpy-style name shown to users.
DTYPE_NAMES = {**{v: k.lower() for k, v in caffe2_pb2.TensorProto.DataType.items()},
               caffe2_pb2.TensorProto.FLOAT: "float32", caffe2_pb2.TensorProto.DOUBLE: "float64",
               caffe2_pb2.TensorProto.BYTE: "uint8"}


def device_name(opt: caffe2_pb2.DeviceOption) -> str:
    """``"CPU"``, ``"CUDA:1"``… for a DeviceOption."""
    name = DEVICE_NAMES.get(opt.device_type, f"device{opt.device_type}")
    return name if opt.device_type == 0 else f"{name}:{opt.device_id}"


def param_info(op: caffe2_pb2.OperatorDef) -> dict[str, Any]:
    """Shape and dtype of what a fill op writes (shape None when it comes from an input)."""
    shape = arg_value(op, "shape")
    if shape is None and op.type.startswith("GivenTensor"):
        # NOTE: the count, not the values (argument_value would copy a real init net's weights: ~1 s for ResNet-50)
        values = next((a for a in op.arg if a.name == "values"), None)
        count = None if values is None else argument_length(values)
        shape = None if count is None else [count]
    dtype = arg_value(op, "dtype")
    dtype_name = DTYPE_NAMES.get(dtype, "unknown") if isinstance(dtype, int) else FILL_DTYPES.get(op.type, "unknown")
    return {"type": op.type, "shape": list(shape) if isinstance(shape, list) else shape, "dtype": dtype_name}


def net_summary(net: caffe2_pb2.NetDef) -> dict[str, Any]:
    """Name, op count, histogram, external blobs, devices and subnets (recursively) of a net."""
    from engine.catalogue.schema import check_net  # noqa: PLC0415 - the TUI imports this module before its first frame

    devices = Counter(device_name(op.device_option) for op in net.op)
    subnets = []
    for i, op in enumerate(net.op):
        for arg_name, sub in subnets_of(op):
            subnets.append({"op_index": i, "op_type": op.type, "arg": arg_name, **net_summary(sub)})
    return {
        "name": net.name,
        "type": net.type or "simple",
        "op_count": len(net.op),
        "op_types": dict(sorted(Counter(op.type for op in net.op).items(), key=lambda kv: (-kv[1], kv[0]))),
        "external_inputs": list(net.external_input),
        "external_outputs": list(net.external_output),
        "devices": dict(devices),
        "subnets": subnets,
        "ops": [op_slots(op) for op in net.op],
        "schema_warnings": check_net(net),
    }


def op_slots(op: caffe2_pb2.OperatorDef) -> dict[str, Any]:
    """``{"type", "name", "inputs": [[slot, blob], …], "outputs": …}`` with Caffe2's slot names."""
    from engine.catalogue.docs import slot_name  # noqa: PLC0415 - see net_summary

    f = facts(op.type)
    ins, outs = (f.inputs, f.outputs) if f else ((), ())
    return {"type": op.type, "name": op.name,
            "inputs": [[slot_name(ins, k, "in"), b] for k, b in enumerate(op.input)],
            "outputs": [[slot_name(outs, k, "out"), b] for k, b in enumerate(op.output)]}


def model_summary(model: Model) -> dict[str, Any]:
    """:func:`net_summary` of the predict net plus parameters from the init net and value_info."""
    params = {out: param_info(op) for op in model.init.op for out in op.output}
    return {
        "path": str(model.path) if model.path else None,
        "init_path": str(model.init_path) if model.init_path else None,
        **net_summary(model.predict),
        "parameters": params,
        "inputs": {k: {"data_type": v.data_type, "shape": list(v.shape)} for k, v in model.value_info.items()},
        "sections": training_summary(model.predict),
    }


def training_summary(net: caffe2_pb2.NetDef) -> dict[str, Any] | None:
    """Sections of a training net (ops per forward/backward/optimizer, the losses it was
    differentiated for, how gradient ops were paired); ``None`` for a forward-only net."""
    from engine.autodiff.training import split_training_net

    split = split_training_net(net)
    if not split.has_backward:
        return None
    return {"ops": split.counts(), "losses": split.losses, "paired_by": split.paired_by,
            "unpaired_backward_ops": sorted(i for i, j in split.partner.items() if j is None)}


def shape_summary(model: Model, problems: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Inferred ``{"name@version": {"shape", "dtype"}}`` of the predict net's blobs (unknown dims None;
    ``"opaque": true`` where no static rule can know: queues, DBs, what they hand out).

    Raises :class:`~engine.errors.ShapeError` when known shapes are incompatible, unless a
    `problems` list is given: then each such op is noted there and its outputs stay unknown.
    """
    from engine.runtime.inference import infer_model_shapes  # noqa: PLC0415

    top = infer_model_shapes(model, problems=problems)[()]
    return {f"{n}@{v}": {"shape": None if i.shape is None else list(i.shape),
                         "dtype": DTYPE_NAMES.get(i.dtype) if i.dtype is not None else None,
                         **({"opaque": True} if i.opaque else {})}
            for (n, v), i in top.items()}


def total_op_count(summary: dict[str, Any]) -> int:
    """Ops in a net and all its subnets."""
    return summary["op_count"] + sum(total_op_count(s) for s in summary["subnets"])
