"""Where an op's blobs live, and Copy ops injected between devices (``core.InjectCrossDeviceCopies``).

Caffe2 asks each op schema's device-inference function; netviz knows the ones that move blobs
between devices (the copy ops below) and otherwise places every input and output on the op's
device option, as Caffe2's default does.  Re-exported by :mod:`engine.caffe2.core`.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any

from proto import caffe2_pb2

__all__ = ["InferOpBlobDevices", "InferOpBlobDevicesAsDict", "InferOpDeviceAsBlobDevices", "InferBlobDevices",
           "device_equal", "device_option_equal", "copy_func_between_devices", "RemapEntry",
           "update_placeholder_op_output", "InjectCrossDeviceCopies", "InjectDeviceCopiesAmongNets",
           "InjectDeviceCopiesAmongNetsWithoutB2D"]

_CPU = caffe2_pb2.DeviceOption()
#: op type -> (inputs on CPU, outputs on CPU); the other side is on the op's device.
_CROSS_DEVICE = {"CopyCPUToGPU": (True, False), "CopyGPUToCPU": (False, True),
                 "CopyFromCPUInput": (True, False), "EnsureCPUOutput": (False, True)}


def _is_gpu(device_type: int) -> bool:
    return device_type in (caffe2_pb2.CUDA, caffe2_pb2.HIP)


def InferOpBlobDevices(op: caffe2_pb2.OperatorDef) -> tuple[list, list]:
    """``(input devices, output devices)``: DeviceOptions, one per input and output of `op`."""
    op_dev = caffe2_pb2.DeviceOption()
    op_dev.CopyFrom(op.device_option)
    in_cpu, out_cpu = _CROSS_DEVICE.get(op.type, (False, False))
    return ([_CPU if in_cpu else op_dev for _ in op.input], [_CPU if out_cpu else op_dev for _ in op.output])


def InferOpBlobDevicesAsDict(op: caffe2_pb2.OperatorDef) -> tuple[dict, dict]:
    """:func:`InferOpBlobDevices` as ``{blob name: DeviceOption}`` for inputs and for outputs."""
    ins, outs = InferOpBlobDevices(op)
    return dict(zip(op.input, ins)), dict(zip(op.output, outs))


def InferOpDeviceAsBlobDevices(op: caffe2_pb2.OperatorDef) -> tuple[list, list]:
    """Every input and output on the op's own device (placeholder ops)."""
    d = op.device_option if op.HasField("device_option") else caffe2_pb2.DeviceOption()
    return [d] * len(op.input), [d] * len(op.output)


def InferBlobDevices(net: Any) -> dict[str, caffe2_pb2.DeviceOption]:
    """Blob -> the device option of the op that (last) writes it."""
    return {b: op.device_option for op in net.Proto().op for b in op.output}


def device_equal(src: caffe2_pb2.DeviceOption, dst: caffe2_pb2.DeviceOption) -> bool:
    """Same device type and id (an unset option equals an explicit CPU 0)."""
    return src.device_type == dst.device_type and src.device_id == dst.device_id


def device_option_equal(opt1: Any, opt2: Any, ignore_node_name: bool = True,
                        ignore_random_seed: bool = True) -> bool:
    """Caffe2's comparison: two CPU options are equal whatever their ids; else ids must match."""
    if not opt1 or not opt2:
        return opt1 == opt2
    if not ignore_node_name and opt1.node_name != opt2.node_name:
        return False
    if not ignore_random_seed and opt1.random_seed != opt2.random_seed:
        return False
    if not opt1.device_type or not opt2.device_type:
        return not opt1.device_type and not opt2.device_type
    return opt1.device_id == opt2.device_id


def copy_func_between_devices(src: caffe2_pb2.DeviceOption, dst: caffe2_pb2.DeviceOption) -> Any:
    """``fn(net, blob_in, blob_out)`` adding the copy op from `src` to `dst`, or None when none is needed."""
    from engine.model.scope import DeviceScope
    if src.device_type == caffe2_pb2.CPU and dst.device_type == caffe2_pb2.CPU:
        return None
    src_gpu, dst_gpu = _is_gpu(src.device_type), _is_gpu(dst.device_type)
    if src_gpu and dst_gpu and src.device_id == dst.device_id:
        return None
    table = {(True, True): ("Copy", dst), (True, False): ("CopyGPUToCPU", src), (False, True): ("CopyCPUToGPU", dst)}
    if (src_gpu, dst_gpu) not in table or (not src_gpu and src.device_type != caffe2_pb2.CPU) or \
            (not dst_gpu and dst.device_type != caffe2_pb2.CPU):
        raise ValueError(f"Non-supported devices: {src} and {dst}")
    op_type, scope = table[(src_gpu, dst_gpu)]

    def copy(net: Any, *args: Any, **kwargs: Any) -> Any:
        with DeviceScope(scope):
            return getattr(net, op_type)(*args, **kwargs)
    return copy


class RemapEntry:
    """Key of a blob already copied to a device: ``(blob, device option)``."""

    def __init__(self, blob: str, device: caffe2_pb2.DeviceOption) -> None:
        self.blob, self.device = blob, device

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RemapEntry) and self.blob == other.blob and self.device == other.device

    def __hash__(self) -> int:
        return hash(self.blob + str(self.device))


def update_placeholder_op_output(op: caffe2_pb2.OperatorDef, blob_to_device: dict) -> None:
    """Placeholder ops run on CPU: an output known to live elsewhere gets a ``_cpu`` twin."""
    outs = [o + "_cpu" if o in blob_to_device and blob_to_device[o].device_type != caffe2_pb2.CPU else o
            for o in op.output]
    del op.output[:]
    op.output.extend(outs)


def _copy_name(blob: str, d: caffe2_pb2.DeviceOption) -> str:
    if d.device_type == caffe2_pb2.CPU:
        return blob + "_cpu"
    if _is_gpu(d.device_type):
        return f"{blob}_gpu_{d.device_id}"
    raise RuntimeError(f"Unknown device type: {d.device_type}")


def InjectCrossDeviceCopies(net: Any, blob_to_device: dict | None = None, blob_remap: dict | None = None,
                            placeHolderOps: list[str] | None = None) -> tuple[Any, dict]:  # noqa: N803
    """A copy of `net` (``<name>_cross_device``) with a copy op before every op that reads a blob
    living on another device; returns it and the updated blob -> device map.

    Raises
    ------
    AttributeError
        An input that is neither external nor in `blob_to_device` (Caffe2's class here).
    RuntimeError
        A blob rewritten by an op on another device (not in place).
    """
    new_net = net.Clone(net.Proto().name + "_cross_device", keep_schema=True)
    del new_net.Proto().op[:]
    blob_to_device = {} if blob_to_device is None else blob_to_device
    blob_remap = {} if blob_remap is None else blob_remap
    net_option = net.Proto().device_option if net.Proto().HasField("device_option") else caffe2_pb2.DeviceOption()
    remaps: dict[str, list[str]] = defaultdict(list)
    for entry, mapped in blob_remap.items():
        remaps[entry.blob].append(mapped)
    new_net.Proto().external_input.extend(m for i in list(new_net.Proto().external_input) for m in remaps.get(i, []))
    placeholders = set(placeHolderOps or ())
    for op in net.Proto().op:
        temp: dict[str, str] = {}
        in_dev, out_dev = (InferOpDeviceAsBlobDevices if op.type in placeholders else InferOpBlobDevices)(op)
        for d, name in zip(in_dev, op.input):
            assert net.BlobIsDefined(name), f"input {name} should be defined in the net."
            if name not in blob_to_device:
                if not net.is_external_input(name):
                    raise AttributeError(f"No device information found for blob {name}.")
                blob_to_device[name] = net_option
            if device_equal(blob_to_device[name], d):
                continue
            key = RemapEntry(name, d)
            if key in blob_remap and blob_to_device[blob_remap[key]] == d:
                temp[name] = blob_remap[key]
                continue
            new_name = _copy_name(name, d)
            copy_func_between_devices(blob_to_device[name], d)(new_net, name, new_name)
            blob_remap[key] = temp[name] = new_name
            blob_to_device[new_name] = d
        if op.type in placeholders:
            update_placeholder_op_output(op, blob_to_device)
        for d, out in zip(out_dev, op.output):
            if out in blob_to_device and out not in op.input and not device_equal(blob_to_device[out], d):
                raise RuntimeError(f"In-place blob: {out} is not supported between operators with different "
                                   f"device option previous:{blob_to_device[out]} now: {d}. Failed op: {op.type}")
        new_op = caffe2_pb2.OperatorDef()
        new_op.CopyFrom(op)
        del new_op.input[:]
        new_op.input.extend(temp.get(b, b) for b in op.input)
        for i, out in enumerate(new_op.output):  # in-place outputs follow their renamed input
            if out in op.input:
                new_op.output[i] = new_op.input[list(op.input).index(out)]
        blob_to_device.update(zip(new_op.output, out_dev))
        new_net.extend_ops([new_op])
    return new_net, blob_to_device


def InjectDeviceCopiesAmongNets(nets: list, blob_to_device_init: dict | None = None) -> tuple[list, dict]:
    """:func:`InjectCrossDeviceCopies` over nets given in execution order, sharing what is known."""
    from engine.caffe2.core import Net
    assert isinstance(nets, list) and all(isinstance(n, Net) for n in nets), f"nets {nets} should be a list of nets."
    blob_to_device, blob_remap, out = blob_to_device_init or {}, {}, []
    for net in nets:
        new, blob_to_device = InjectCrossDeviceCopies(net, blob_to_device=blob_to_device, blob_remap=blob_remap)
        out.append(new)
    return out, blob_to_device


def InjectDeviceCopiesAmongNetsWithoutB2D(nets: list, blob_to_device_init: dict | None = None) -> list:
    return InjectDeviceCopiesAmongNets(nets, blob_to_device_init)[0]
