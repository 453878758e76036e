"""``param_info``: what the TUI shows of an init net's blobs (type, shape, dtype), read at open."""
from __future__ import annotations

from engine.analysis.summary import param_info
from engine.model.opdef import argument_length, argument_value, create_operator as op
from proto import caffe2_pb2


def test_a_given_tensor_without_shape_is_as_long_as_its_values():
    assert param_info(op("GivenTensorFill", [], "w", values=[1.0, 2.0, 3.0])) == \
        {"type": "GivenTensorFill", "shape": [3], "dtype": "float32"}
    assert param_info(op("GivenTensorIntFill", [], "i", values=[1, 2]))["shape"] == [2]
    assert param_info(op("GivenTensorStringFill", [], "s", values=[b"a"]))["shape"] == [1]
    assert param_info(op("GivenTensorFill", [], "w", shape=[3, 1], values=[1.0, 2.0, 3.0]))["shape"] == [3, 1]
    assert param_info(op("GivenTensorFill", [], "w", values=1.5))["shape"] is None  # a scalar: no count
    assert param_info(op("GivenTensorFill", [], "w"))["shape"] is None
    assert param_info(op("ConstantFill", [], "c", value=1.0))["shape"] is None  # only GivenTensor* count values


def test_argument_length_is_the_length_of_the_list_argument_value_makes():
    args = [caffe2_pb2.Argument(name="a", floats=[1.0, 2.0]), caffe2_pb2.Argument(name="a", ints=[1, 2, 3]),
            caffe2_pb2.Argument(name="a", strings=[b"x"]), caffe2_pb2.Argument(name="a"),
            caffe2_pb2.Argument(name="a", f=1.0), caffe2_pb2.Argument(name="a", i=0), caffe2_pb2.Argument(name="a", s=b"")]
    for a in args:
        v = argument_value(a)
        assert argument_length(a) == (len(v) if isinstance(v, list) else None), a
