"""Caffe2's protobuf schema (``caffe2.proto``) and its generated module.

``from proto import caffe2_pb2`` works like Caffe2's ``caffe2.proto.caffe2_pb2``,
including the un-prefixed device aliases (``caffe2_pb2.CPU``, ``caffe2_pb2.CUDA``)
that ``caffe2/python/__init__.py`` patches onto the generated module.
"""
from proto import caffe2_pb2

for _name, _value in caffe2_pb2.DeviceTypeProto.items():
    setattr(caffe2_pb2, _name.removeprefix("PROTO_"), _value)

__all__ = ["caffe2_pb2"]
