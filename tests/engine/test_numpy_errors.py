"""A kernel's NumPy failure reads in the op's terms (issue #42 item 16), and int8 ops take an empty batch (item 1)."""
from __future__ import annotations

import numpy as np
import pytest

from engine.errors import ExecutionError
from engine.runtime.numpy_errors import numpy_in_op_terms
from engine.runtime.workspace import eval_op


def _error(op_type: str, *inputs: np.ndarray, **args) -> str:
    with pytest.raises(ExecutionError) as e:
        eval_op(op_type, *inputs, n_out=2 if op_type == "Reshape" else 1, **args)
    return str(e.value)


def test_reshape_says_the_shape_argument_and_the_input_size():
    """It said NumPy's "cannot reshape array of size 90 into shape (1,newaxis,0)"."""
    msg = _error("Reshape", np.zeros((9, 10), np.float32), shape=[1, -1, 0])
    assert "Reshape" in msg and "shape [1, -1, 0]" in msg and "90 values (9, 10)" in msg
    assert "newaxis" not in msg and "array of size" not in msg and "\n" not in msg


def test_reshape_names_how_it_read_a_zero_dim():
    msg = _error("Reshape", np.zeros((9, 10), np.float32), shape=[0, -1, 7])
    assert "read as (9, -1, 7)" in msg


def test_reshape_still_infers_and_copies():
    y, old = eval_op("Reshape", np.zeros((9, 10), np.float32), n_out=2, shape=[0, -1])
    assert y.shape == (9, 10) and old.tolist() == [9, 10]
    assert eval_op("Reshape", np.zeros((0, 10), np.float32), n_out=2, shape=[-1, 5])[0].shape == (0, 5)


def test_a_broadcast_failure_names_the_input_shapes_in_words():
    msg = _error("Add", np.zeros((2, 3), np.float32), np.zeros((4,), np.float32))
    assert "inputs of shapes (2,3) (4,) do not broadcast" in msg and "operands" not in msg


@pytest.mark.parametrize("numpy_text, words", [
    ("cannot reshape array of size 90 into shape (1,newaxis,0)", "its 90 values do not fit shape (1, -1, 0)"),
    ("cannot reshape array of size 0 into shape (0,newaxis)", "an empty input leaves the -1 of shape (0, -1)"),
    ("index 7 is out of bounds for axis 0 with size 3", "index 7 is past dim 0 of size 3"),
    ("zero-size array to reduction operation maximum which has no identity", "maximum of an empty input"),
    ("need at least one array to concatenate", "nothing to concatenate"),
])
def test_numpy_phrases_are_rewritten(numpy_text: str, words: str):
    assert numpy_in_op_terms(numpy_text).startswith(words)


def test_other_text_is_left_as_it_is():
    assert numpy_in_op_terms("LENGTHS sum to 0 but there are 5 indices") == "LENGTHS sum to 0 but there are 5 indices"


def _q(data: np.ndarray, scale: float = 0.05, zp: int = 128):
    from engine.runtime.int8tensor import Int8Tensor
    return Int8Tensor(np.asarray(data), scale, zp)


def test_int8_conv_relu_on_no_boxes_gives_caffe2s_empty_shape():
    """Int8 Mask R-CNN with 0 boxes: Int8ConvRelu on (0, 6, 6, 16) is (0, 6, 6, 32) in Caffe2."""
    x = _q(np.zeros((0, 6, 6, 16), np.uint8))
    w = _q(np.full((32, 3, 3, 16), 130, np.uint8), 0.02, 128)
    b = _q(np.zeros(32, np.int32), 0.001, 0)
    y, = eval_op("Int8ConvRelu", x, w, b, kernel=3, pad=1, order="NHWC", Y_scale=0.5, Y_zero_point=0)
    assert y.data.shape == (0, 6, 6, 32) and y.data.dtype == np.uint8


@pytest.mark.parametrize("op_type, shape, args, out", [
    ("Int8FC", (0, 20), {}, (0, 7)),
    ("Int8Flatten", (0, 3, 4), {}, (0, 12)),
    ("Int8Softmax", (0, 10), {"Y_scale": 1.0 / 256}, (0, 10)),
])
def test_int8_ops_take_an_empty_batch(op_type: str, shape: tuple, args: dict, out: tuple):
    ins = [_q(np.zeros(shape, np.uint8))]
    if op_type == "Int8FC":
        ins += [_q(np.full((7, 20), 129, np.uint8), 0.02), _q(np.zeros(7, np.int32), 0.001, 0)]
        args = {"Y_scale": 0.5, "Y_zero_point": 0}
    assert eval_op(op_type, *ins, **args)[0].data.shape == out
