"""Issue #42 items 2, 3, 4, 9, 10, 11, 13, 14: what the inspector, the REPL and the overlays show is right.

Each test drives the real code on a real input (an example net, a tiny net written here) and reads
what is shown: the inspector's rendered text, the op list's line, the canvas's cells, the notices.
"""
from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from engine.debugger import Debugger
from engine.debugger.records import BlobSummary, OpRecord
from engine.debugger.repl import evaluate
from engine.debugger.values import BadValueError
from engine.model.modelio import load_model, save_net
from engine.model.opdef import create_operator as op
from netviz.app import NetvizApp
from netviz.overlays import OVERLAYS
from netviz.session import BlobRef, OpRef, Session
from netviz.widgets.blob_inspector import BlobInspector, value_history, values_table
from netviz.widgets.status_line import StatusLine
from proto import caffe2_pb2
from tests.netviz.waiting import answer, asynctest, continue_to_end, ready, text_of, tree_line, wait_for

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MLP = EXAMPLES / "mlp" / "predict_net.pb"
WHILE = EXAMPLES / "while_net" / "predict_net.pb"
BODY = ((2, "loop_net"), (0, "net"))  # while_net: the Do's net inside the loop body (FC then Tanh)
LEARNING_RATE = 10  # examples/mlp: LearningRate ['ITER'] -> ['LR']


def rendered(renderable, width: int = 100) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


@contextlib.asynccontextmanager
async def ended(path: Path):
    """The app on `path` at 160×48, run to its end (``c``)."""
    app = NetvizApp(Session.open(path))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await continue_to_end(pilot, app)
        yield pilot, app


def blob_text(app) -> str:
    return "\n".join(text_of(w) for w in app.main.query_one(BlobInspector).query("Static"))


# ---- item 2: a zero-size blob of rank >= 3 ------------------------------------------------------
@pytest.mark.parametrize("shape", [(0, 6, 6, 16), (2, 0, 3), (0,)])
def test_values_table_of_a_zero_size_blob_says_it_has_no_values(shape):
    assert "no values: the shape " + "×".join(map(str, shape)) in rendered(values_table(np.zeros(shape, np.float32)))


@asynctest
async def test_selecting_a_zero_size_rank_4_blob_shows_it(tmp_path):
    net = caffe2_pb2.NetDef(name="empty_batch", op=[op("Relu", "X", "Y")])
    net.external_input.append("X")
    net.external_output.append("Y")
    app = NetvizApp(Session.open(save_net(net, tmp_path / "empty.pbtxt"), inputs=["X=0,6,6,16"]))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await continue_to_end(pilot, app)
        app.main.select_blob(BlobRef((), "Y", 1))
        await pilot.pause()
        assert "no values: the shape 0×6×6×16 has a zero dimension" in blob_text(app)
        assert not any("Internal error" in (n.title or "") for n in app._notifications)


# ---- item 3: the REPL ---------------------------------------------------------------------------
def _at_end(path: Path) -> Debugger:
    dbg = Debugger(load_model(path))
    dbg.continue_()
    return dbg


def test_a_blob_named_b_does_not_hide_the_helpers():
    dbg = _at_end(WHILE)  # while_net has a bias blob named b
    b = dbg.value("b")
    assert np.array_equal(evaluate(dbg, "b"), b)  # the blob wins over the helper b(...)
    assert np.array_equal(evaluate(dbg, 'nv.b("b")'), b)  # nv is never shadowed
    assert np.array_equal(evaluate(dbg, 'nv.blobs["acc"] + nv.np.zeros(1)'), dbg.value("acc"))


def test_tuple_and_list_results_are_shown_part_by_part():
    from engine.debugger.repl import parts_of

    dbg = _at_end(WHILE)
    value = evaluate(dbg, "acc.mean(), W @ b")
    parts = parts_of(value)
    assert [label for label, _ in parts] == ["[0]", "[1]"]
    assert parts_of(evaluate(dbg, "[W, W]")) is None  # one array: shown as one


@asynctest
async def test_eval_of_a_tuple_shows_each_part_in_the_inspector():
    async with ended(WHILE) as (pilot, app):
        await pilot.press("colon")
        await answer(pilot, app, "acc.mean(), W @ b")
        await wait_for(pilot, lambda: "tuple of 2" in blob_text(app), "the tuple in the inspector")
        dbg = app.session.debugger
        shown = blob_text(app)
        assert f"float32 scalar {float(dbg.value('acc').mean()):.4g}" in shown, shown
        assert "[1]" in shown and "float32 3" in shown, shown
        assert not any("Internal error" in n.title for n in app._notifications)


# ---- item 4: each loop version shows its own value -------------------------------------------------
def _to_check_2() -> Session:
    s = Session.open(WHILE)
    while "cond_net check 2" not in s.pc_label():
        s.step("step_into")
    return s


def test_loop_body_versions_show_their_own_iteration():
    s = _to_check_2()  # iterations 0 and 1 have run
    acc0, _ = s.version_value(BlobRef(BODY, "acc", 0))
    acc1, _ = s.version_value(BlobRef(BODY, "acc", 1))
    rows = value_history(s, BlobRef(BODY, "acc", 1))
    assert [label for label, _ in rows] == ["iteration 0", "iteration 1"]
    # acc@1: iteration 1's Tanh output; acc@0: what iteration 1 read, iteration 0's Tanh output
    assert np.linalg.norm(acc1) == pytest.approx(rows[1][1].norm, rel=1e-6)
    assert np.linalg.norm(acc0) == pytest.approx(rows[0][1].norm, rel=1e-6)
    assert not np.allclose(acc0, acc1)
    assert value_history(s, BlobRef(BODY, "acc", 0)) == []  # no op of the body writes @0: no rows


def test_a_loop_body_just_entered_shows_its_last_runs_versions():
    """The oracle's find (the PlanDef's train iterations): with the pc at the first op of iteration 1,
    before any op of it ran, @0 and @1 are both iteration 0's (@0 was iteration 1's input, equal to @1)."""
    s = Session.open(WHILE)
    while "iteration 1 › Do op#0 › op#0 FC" not in s.pc_label():
        s.step("step_into")
    acc0, _ = s.version_value(BlobRef(BODY, "acc", 0))
    acc1, _ = s.version_value(BlobRef(BODY, "acc", 1))
    (_, first), = value_history(s, BlobRef(BODY, "acc", 1))
    assert np.linalg.norm(acc1) == pytest.approx(first.norm, rel=1e-6)  # iteration 0's Tanh output
    assert not np.allclose(acc0, acc1)  # what iteration 0 read


def test_history_rows_keep_their_norms_in_a_narrow_pane():
    """The oracle's find (the PlanDef at 160×48): a long run label cut the norm off the row."""
    from netviz.widgets.blob_inspector import _history_table

    rows = [(f"train iteration {i} · net mlp_train", BlobSummary("fc1", (16, 16), "float32", (0, 0, 1.2345 + i)))
            for i in range(3)]
    text = rendered(_history_table(rows), width=34)
    assert all(f"‖·‖ {1.2345 + i:.4g}" in text for i in range(3)), text


# ---- item 9: no ✓ on an op that wrote NaN/Inf ------------------------------------------------------
@asynctest
async def test_an_op_that_wrote_nan_is_not_ticked_on_the_canvas():
    app = NetvizApp(Session.open(MLP))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("n")
        await wait_for(pilot, lambda: app.main.idle and app.session.pc == OpRef((), 1), "the first step")
        app.session.inject("fc1", "nan")  # Relu(NaN) is NaN: op 1 writes NaN
        await pilot.press("n")
        await wait_for(pilot, lambda: app.main.idle and app.session.pc == OpRef((), 2), "the second step")
        canvas = app.main.canvas
        await wait_for(pilot, lambda: 1 in canvas.nan_ops, "op 1 marked as writing NaN")
        node = next(n for n in canvas.scene.nodes if n.op == 1)
        rows = ["".join(c for c, _ in canvas._node_row(node, r)) for r in range(node.h)]
        assert not any("✓" in r for r in rows) and any("!" in r for r in rows), rows
        done = next(n for n in canvas.scene.nodes if n.op == 0)  # a clean op keeps its ✓
        assert any("✓" in "".join(c for c, _ in canvas._node_row(done, r)) for r in range(done.h))


# ---- item 10: only gradient blobs get ‖g‖ -------------------------------------------------------------
def test_grad_norm_counts_only_gradient_blobs():
    rate = OpRecord(0, ("op", 10), "LearningRate", "main", 0.0, (BlobSummary("LR", (1,), "float32", (0, 0, 0.1)),),
                    backward=True)
    assert rate.grad_norm is None
    grads = OpRecord(1, ("op", 6), "FCGradient", "main", 0.0,
                     (BlobSummary("fc2_w_grad", (2,), "float32", (0, 0, 3.0)),
                      BlobSummary("fc2_b_grad", (2,), "float32", (0, 0, 4.0))), backward=True)
    assert grads.grad_norm == pytest.approx(5.0)


@asynctest
async def test_learning_rate_has_no_gradient_norm_in_the_overlay():
    async with ended(MLP) as (pilot, app):
        app.main.overlay = OVERLAYS.index("grad-norm")
        await pilot.pause()
        line = tree_line(app, OpRef((), LEARNING_RATE))
        assert "LearningRate" in line and "‖" not in line, line
        assert "‖" in tree_line(app, OpRef((), 6)), tree_line(app, OpRef((), 6))  # FCGradient keeps its norm


# ---- item 11: a loss that is no scalar is warned about ---------------------------------------------
def _relu_net(tmp_path: Path) -> Path:
    net = caffe2_pb2.NetDef(name="nonscalar", op=[op("FC", ["X", "W", "b"], "h"), op("Softmax", "h", "y")])
    net.external_input.extend(["X", "W", "b"])
    net.external_output.append("y")
    return save_net(net, tmp_path / "nonscalar.pbtxt")


def test_a_non_scalar_loss_is_warned_and_seeded_with_ones_as_caffe2(tmp_path):
    s = Session.open(_relu_net(tmp_path), inputs=["X=2,3", "W=4,3", "b=4"])
    s.shapes(())
    s.set_backward(True, "y")
    notes = s.pop_notices()
    assert any("loss 'y' is 2×4, not a scalar" in n for n in notes), notes
    while not (s.debugger is not None and s.debugger.finished):
        s.step("continue_")
    seed = next(r for r in s.state.history if r.op_type == "ConstantFill")
    assert seed.outputs[0].shape == (2, 4) and seed.outputs[0].norm == pytest.approx(np.sqrt(8))  # ones
    x_grad = s.debugger.value("X_grad")
    assert np.abs(x_grad).max() < 1e-5  # the sum of a softmax is constant: Caffe2 gives ~0 too


# ---- item 13: inject into an output not written yet ------------------------------------------------
def test_inject_into_an_unwritten_output_keeps_its_shape_or_asks_for_one():
    s = Session.open(MLP)
    s.step("step")
    assert s.inject("fc2", "0.5").shape == (16, 4)  # inferred in the main net
    s = Session.open(WHILE)
    s.step("step")
    with pytest.raises(BadValueError, match="inject h: its shape is not known"):
        s.inject("h", "0.5", path=BODY)  # the loop body's FC output: no inferred shape, never a scalar
    assert s.inject("h", "full((2,3), 0.5)", path=BODY).shape == (2, 3)


# ---- item 14: random parameters are marked as long as they are used --------------------------------
def _weightless_mlp(tmp_path: Path) -> Path:
    net = caffe2_pb2.NetDef(name="weightless", op=[op("FC", ["X", "W1", "b1"], "h1"), op("Relu", "h1", "y")])
    net.external_input.extend(["X", "W1", "b1"])
    net.external_output.append("y")
    return save_net(net, tmp_path / "weightless.pbtxt")


@asynctest
async def test_random_parameters_are_marked_in_the_status_line_and_inspector(tmp_path):
    app = NetvizApp(Session.open(_weightless_mlp(tmp_path), inputs=["X=2,3"]))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("n")
        await wait_for(pilot, lambda: app.main.idle and app.session.debugger is not None, "the first step")
        await pilot.pause(6)  # longer than the toast
        made = app.session.debugger.synthesized
        assert "W1" in made
        status = app.main.query_one(StatusLine).content.plain
        assert f"params:random({len(made)})" in status, status
        app.main.select_blob(BlobRef((), "W1", 0))
        await wait_for(pilot, lambda: "random values (no init net)" in blob_text(app), "the inspector's mark")


def test_a_state_buffer_written_through_a_view_has_no_update_ratio():
    """The oracle's find (lstm, grad-norm overlay): rnn_internal_apply_link hands back the buffer it
    was given, rows written through a view; its tag read Δ0, as if a parameter had not moved."""
    from engine.autodiff.training import update_ratio

    link = op("rnn_internal_apply_link", ["h0", "states"], ["h_prev", "states"])
    states = np.ones((3, 2), np.float32)
    assert update_ratio(link, [(None, "states", states, None, states)], {"states"}) is None
    moved = states + 1
    assert update_ratio(link, [(None, "states", states, None, moved)], {"states"}) == pytest.approx(1.0)


def test_an_exported_view_marks_a_nan_op_nan_not_ticked(tmp_path):
    """Issue 42 item 9 in the view export (e in the TUI): an executed op that wrote NaN/Inf is marked
    NaN, not also ✓."""
    pgv = pytest.importorskip("pygraphviz")
    from netviz.view_export import ViewSpec

    s = Session.open(MLP)
    s.export_view(ViewSpec((), "main", executed=frozenset({0, 1}), nan=frozenset({1})), str(tmp_path / "v.dot"))
    drawn = pgv.AGraph(str(tmp_path / "v.dot"))
    relu, fc = (drawn.get_node(n).attr["label"] for n in ("op1", "op0"))
    assert "NaN" in relu and "✓" not in relu, relu
    assert fc.endswith("✓"), fc
