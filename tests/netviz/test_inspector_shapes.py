"""The op inspector's inferred shapes: an opaque blob (a mutex, a queue) reads ``opaque``, never ``?``;
one op whose shapes do not fit leaves its own outputs unknown, keeps every other shape, and is named
once in a notice (it used to drop every shape of the net)."""
from __future__ import annotations

from engine.model.opdef import create_operator as op
from netviz.app import NetvizApp
from netviz.session import OpRef, Session
from netviz.widgets.op_inspector import OpInspector
from proto import caffe2_pb2
from tests.netviz.tui_nets import write
from tests.netviz.waiting import asynctest, ready, text_of, wait_for


def _shown(app, index: int) -> str:
    app.main.select(OpRef((), index))
    return text_of(app.main.query_one(OpInspector))


@asynctest
async def test_an_opaque_blob_reads_opaque(tmp_path):
    net = caffe2_pb2.NetDef(name="locks", op=[op("CreateMutex", [], "mutex"),
                                              op("ConstantFill", [], "x", shape=[2, 3], value=1.0)])
    app = NetvizApp(Session.open(write(tmp_path, "locks", net)))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await wait_for(pilot, lambda: app.main.session.shapes_ready(()) is not None, "shape inference")
        await wait_for(pilot, lambda: "opaque" in _shown(app, 0), "the mutex's shape")
        mutex = _shown(app, 0).split("mutex@1", 1)[1].splitlines()[1]
        assert mutex.strip() == "opaque", mutex
        assert "2×3" in _shown(app, 1)  # a tensor keeps its shape


@asynctest
async def test_one_misfit_op_keeps_the_other_shapes_and_is_named_once(tmp_path):
    net = caffe2_pb2.NetDef(name="misfit", op=[
        op("ConstantFill", [], "a", shape=[2, 3], value=1.0), op("ConstantFill", [], "b", shape=[4, 5], value=1.0),
        op("Add", ["a", "b"], "c"), op("Relu", ["a"], "d")])
    app = NetvizApp(Session.open(write(tmp_path, "misfit", net)))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await wait_for(pilot, lambda: app.main.session.shapes_ready(()) is not None, "shape inference")
        await wait_for(pilot, lambda: "2×3" in _shown(app, 3), "the Relu's inferred shape")
        relu = _shown(app, 3)
        assert relu.split("d@1", 1)[1].splitlines()[1].strip() == "2×3", relu
        add_out = _shown(app, 2).split("c@1", 1)[1].splitlines()[1].strip()
        assert add_out == "?", add_out  # the op that does not fit: its output unknown
        await pilot.pause()
        shapes = [n.message for n in app._notifications if n.title == "Shapes"]
        assert len(shapes) == 1 and "op #2" in shapes[0] and "Add" in shapes[0] and "do not broadcast" in shapes[0], shapes
