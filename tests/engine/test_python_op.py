"""The Python op: user functions as ops, forward and gradient (engine.runtime.ops.python_op)."""
from __future__ import annotations

import numpy as np
import pytest

from engine.caffe2 import core, workspace


def test_forward_reads_inputs_and_writes_outputs() -> None:
    def double(inputs, outputs):
        outputs[0].reshape(inputs[0].shape)
        outputs[0].data[...] = inputs[0].data * 2

    workspace.FeedBlob("px", np.arange(3, dtype=np.float32))
    workspace.RunOperatorOnce(core.CreatePythonOperator(double, ["px"], ["py"]))
    np.testing.assert_array_equal(workspace.FetchBlob("py"), [0, 2, 4])


def test_gradient_op_gets_inputs_outputs_and_output_gradients() -> None:
    def square(i, o):
        o[0].feed(i[0].data ** 2)

    def square_grad(i, o):  # i = [x, y, dy]
        o[0].feed(2 * i[0].data * i[2].data)

    net = core.Net("python_grad")
    y = net.Python(square, square_grad)(["gx"], ["gy"])
    net.AddGradientOperators([y])
    assert [op.type for op in net.Proto().op][-1] == "PythonGradient"
    workspace.FeedBlob("gx", np.array([1.0, 3.0], np.float32))
    workspace.RunNetOnce(net)
    np.testing.assert_array_equal(workspace.FetchBlob("gx_grad"), [2.0, 6.0])


def test_a_users_exception_keeps_its_class_and_names_the_op() -> None:
    class Mine(Exception):
        pass

    def boom(i, o):
        raise Mine("intentional")

    with pytest.raises(Mine, match="op #0 Python .*intentional") as info:
        workspace.RunOperatorOnce(core.CreatePythonOperator(boom, [], []))
    assert isinstance(info.value, RuntimeError)  # also netviz's ExecutionError


def make_counter(scale: float):
    """A builder (pickled into the op): the op writes scale × the number of ``seen_*`` blobs."""
    def f(i, o, ws):
        o[0].feed(np.array([scale * sum(b.startswith("seen_") for b in ws.blobs)], np.float32))
    return f


def test_pass_workspace_and_builder_tuples() -> None:
    workspace.FeedBlob("seen_a", np.zeros(1))
    workspace.FeedBlob("seen_b", np.zeros(1))
    net = core.Net("python_builder")
    net.Python((make_counter, [2.0], {}), pass_workspace=True)([], ["count"])
    workspace.RunNetOnce(net)
    assert workspace.FetchBlob("count")[0] == 2.0 * 2


def test_a_pickled_builder_from_a_file_is_refused_never_unpickled(tmp_path) -> None:
    """A model file's Python op could carry any pickle: netviz names the problem and runs nothing."""
    import pickle

    from engine.errors import ExecutionError

    marker = tmp_path / "ran"
    payload = pickle.dumps((open, (str(marker), "w"), {}))  # unpickling + calling would create `marker`
    op = core.CreateOperator("Python", [], ["Y"], pickled_builder=payload)
    with pytest.raises(ExecutionError, match="does not unpickle"):
        workspace.RunOperatorOnce(op)
    assert not marker.exists()
