"""Keys and flow of issue 42 (items 7, 15, 17, 18, 19, 21), each as a user meets it on the screen."""
from __future__ import annotations

from pathlib import Path

import pytest

from engine.errors import ModelError
from netviz.app import NetvizApp
from netviz.screens.prompt import PromptScreen
from netviz.session import OpRef, Session
from tests.conftest import zoo_nets
from tests.netviz.tui_nets import mlp, while_net, write
from tests.netviz.waiting import answer, asynctest, notified, ready, screen_text, wait_for

ZOO = {p.parent.name: p for p in zoo_nets()}


def test_a_mistyped_input_is_refused_naming_the_closest(tmp_path: Path) -> None:
    """Item 7: ``--input dta=…`` ran the TUI on random data without a word; the CLI warned."""
    path = write(tmp_path, "mlp", mlp())
    with pytest.raises(ModelError, match=r"--input Xx: no blob of 'mlp' has this name; did you mean X\?"):
        Session.open(path, inputs=["Xx=4,8"])
    from netviz.cli import main  # the command line: one line, exit 2, before any screen
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main([str(path), "--input", "Xx=4,8"]) == 2
    assert "--input Xx: no blob of 'mlp' has this name; did you mean X?" in err.getvalue()
    # an inner blob is fed (as Caffe2's FeedBlob takes any name), with a notice
    assert Session.open(path, inputs=["h1=4,3"]).notices == [
        "--input h1: not an external input of the net (fed anyway)"]


async def _at_missing_input(pilot, app: NetvizApp) -> None:
    """`n` on the mlp fed nothing: it stops at X, and the prompt for it opens."""
    await ready(pilot)
    await pilot.press("n")
    await wait_for(pilot, lambda: isinstance(app.screen, PromptScreen), "the missing-input prompt")
    await wait_for(pilot, app.screen.takes_keys, "the prompt to have been seen")  # NOTE: keys before are dropped


@asynctest
async def test_every_missing_input_is_asked_for_in_one_round(tmp_path: Path) -> None:
    """Item 19: the mlp lacks X and label; a run asked for X, and only the next run found label."""
    app = NetvizApp(Session.open(write(tmp_path, "mlp", mlp())))
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await _at_missing_input(pilot, app)
        assert app.screen.title_text.startswith("give input X  [1 of 2: X, label]")
        assert notified(app, "2 inputs nothing gives: X, label (asked for in turn")
        await answer(pilot, app, "4,8", then="give input label  [2 of 2: X, label]")
        await answer(pilot, app, "4:int32")
        await wait_for(pilot, lambda: notified(app, "X = float32[4, 8]; label = int32[4]; restarting"), "the feeds")
        await wait_for(pilot, lambda: app.main.idle and app.session.pc == OpRef((), 0), "the restart")
        await pilot.press("c")
        await wait_for(pilot, lambda: app.main.idle and app.session.last_stop.reason == "end", "the end of the net")


@pytest.mark.skipif("resnet50" not in ZOO, reason="no model zoo")
@asynctest
async def test_skip_default_works_on_a_zoo_net() -> None:
    """Item 15: K then Enter (zeros of the outputs' shapes) said "the shape of gpu_0/conv1 is unknown" on
    every zoo net: the made-up weights' widths are known only once they are made."""
    app = NetvizApp(Session.open(ZOO["resnet50"]))
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        await ready(pilot)
        for k in range(2):
            await pilot.press("K")
            await answer(pilot, app, "", clear=False)
            await wait_for(pilot, lambda: app.main.idle and app.session.pc == OpRef((), k + 1), f"pc at op {k + 1}")
        rec = app.session.record(OpRef((), 0))
        assert rec.skipped and rec.outputs[0].shape == (1, 16, 112, 112)
        assert not [n.message for n in app._notifications if n.severity == "error"]


@pytest.mark.parametrize("name", sorted(ZOO))
def test_skip_default_at_every_zoo_nets_first_op(name: str) -> None:
    """Item 15 on every zoo net: K's default (zeros of the inferred shapes) skips op #0, or, where op #0
    reads an input nothing gives (Mask R-CNN2Go's data), stops naming it (the screen then asks for it)."""
    session = Session.open(ZOO[name])
    session.skip("")
    if name.startswith("mask_rcnn"):
        assert session.last_stop.reason == "error" and "input blob 'data' not found" in session.last_stop.detail
    else:
        assert session.pc == OpRef((), 1) and session.record(OpRef((), 0)).skipped


@pytest.mark.skipif("mask_rcnn_2go_int8" not in ZOO, reason="no model zoo")
def test_skip_at_a_missing_input_asks_for_it() -> None:
    """Item 15 on Mask R-CNN2Go: op #0 reads `data`, which nothing gives; K's stop names it (the screen
    then asks for every missing input, as after n) instead of an unknown shape."""
    session = Session.open(ZOO["mask_rcnn_2go_int8"])
    session.skip("")
    assert session.last_stop.reason == "error" and "input blob 'data' not found" in session.last_stop.detail
    assert session.debugger.missing_inputs() == ["data", "im_info"]
    from netviz import feeding  # the prompts' prefills: the image through NCHW2NHWC to its conv (was "1")
    assert [feeding.suggest(session, n) for n in ("data", "im_info")] == ["1,3,224,224", "1,3"]


def _type_fast(app: NetvizApp, keys: str) -> None:
    """Keys as a terminal hands them over in one read: all queued before any is handled."""
    from textual import events

    names = {"/": "slash", ":": "colon", " ": "space", "#": "number_sign"}
    for ch in keys:
        app.post_message(events.Key(names.get(ch, ch), ch))


def _ranked_net():
    from engine.model.opdef import create_operator as op
    from proto import caffe2_pb2

    net = caffe2_pb2.NetDef(name="ranked", op=[op("FC", ["X", "W", "b"], "relu_in", name="fc"),
                                               *(op("Relu", "relu_in" if i == 0 else f"y{i}", f"y{i + 1}")
                                                 for i in range(12))])
    net.external_input.extend(["X", "W", "b"])
    return net


@asynctest
async def test_search_keeps_keys_typed_at_once_and_finds_ops_by_index(tmp_path: Path) -> None:
    """Item 17: ``/relu`` typed fast lost ``relu`` (4 of 4 tries); ``#N`` found nothing; exact matches
    were not first (``relu`` listed the FC writing ``relu_in`` before the Relu ops)."""
    from netviz.screens.search import SearchScreen

    app = NetvizApp(Session.open(write(tmp_path, "ranked", _ranked_net()), inputs=["X=2,3"]))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        _type_fast(app, "/relu")
        await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen), "the search screen")
        box = app.screen.query_one("#search-input")
        await wait_for(pilot, lambda: box.value == "relu", "the typed text in the search box")
        await wait_for(pilot, lambda: app.screen.hits and app.screen.hits[0][2] == OpRef((), 1), "Relu op #1 first")
        assert app.screen.hits[0][0].split()[2] == "relu"  # the type, exactly
        box.value = "#1"
        await wait_for(pilot, lambda: [h[2].index for h in app.screen.hits if isinstance(h[2], OpRef)][:4] == [1, 10, 11, 12],
                       "op #1 first, then #10-#12")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.screen is app.main and app.main.selected == OpRef((), 1), "the jump to op #1")
        # a prompt too: K's outputs typed at once replace its prefilled "zeros"
        _type_fast(app, "Krelu_in=1")
        await wait_for(pilot, lambda: isinstance(app.screen, PromptScreen), "the skip prompt")
        await wait_for(pilot, lambda: app.screen.query_one("#prompt-input").value == "relu_in=1", "the typed outputs")
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is app.main, "the prompt to close")
        _type_fast(app, ":X.sum()")
        await wait_for(pilot, lambda: app.screen is app.main and notified(app, "not running yet"), "eval's refusal")
        await pilot.pause(0.6)
        assert app.session.debugger is None  # the keys after the refused ':' ran nothing (X, s, u, m...)


def _while_app(tmp_path: Path) -> NetvizApp:
    return NetvizApp(Session.open(write(tmp_path, "loop", while_net()), inputs=["x=3"]))


BODY = ((5, "loop_net"),)  # while_net's While is op #5; its body: double, inc, check


async def _stopped(pilot, app, key: str, pc: OpRef, what: str) -> None:
    before = app.session.last_stop
    await pilot.press(key)
    await wait_for(pilot, lambda: app.main.idle and app.session.last_stop is not before and app.session.pc == pc,
                   what)


@asynctest
async def test_second_t_runs_to_the_next_iteration_and_u_steps_back_into_a_finished_one(tmp_path: Path) -> None:
    """Item 18: a second ``t`` at the same loop-body op did nothing; ``u`` after an iteration (or after
    the loop) undid the whole While instead of going back to the last op that ran in it."""
    app = _while_app(tmp_path)
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        await ready(pilot)
        inc = OpRef(BODY, 1)
        app.main.select(inc)
        await _stopped(pilot, app, "t", inc, "t to inc")
        assert "iteration 0" in app.session.pc_label()
        app.main.select(inc)
        await _stopped(pilot, app, "t", inc, "the second t to inc")
        assert "iteration 1" in app.session.pc_label()
        i_now = float(app.session.debugger.value("i")[0])
        cond = OpRef(((5, "cond_net"),), 0)
        await _stopped(pilot, app, "n", OpRef(BODY, 2), "n to check")
        await _stopped(pilot, app, "n", cond, "n to the next cond_net check")
        await _stopped(pilot, app, "n", OpRef(BODY, 0), "n into the next iteration")
        assert "iteration 2" in app.session.pc_label()
        await _stopped(pilot, app, "u", cond, "u back into cond_net check 2")
        await _stopped(pilot, app, "u", OpRef(BODY, 2), "u back into iteration 1's last op")
        assert "iteration 1" in app.session.pc_label() and float(app.session.debugger.value("i")[0]) == i_now + 1
        assert app.main.canvas.pc_op == 2 and app.main.path == BODY
        await pilot.press("c")
        await wait_for(pilot, lambda: app.main.idle and app.session.last_stop.reason == "end", "the end")
        await _stopped(pilot, app, "r", OpRef((), 0), "restart")
        app.main.select(OpRef((), 6))
        await _stopped(pilot, app, "t", OpRef((), 6), "t past the loop")
        y = app.session.debugger.value("x").copy()
        await _stopped(pilot, app, "u", cond, "u back into the loop's last op (its last cond_net check)")
        assert "check 3" in app.session.pc_label()
        await _stopped(pilot, app, "n", OpRef((), 6), "n out of the loop again")
        assert (app.session.debugger.value("x") == y).all()


@asynctest
async def test_a_move_made_in_the_shell_shows_on_return(tmp_path: Path, monkeypatch) -> None:
    """Item 18: ``!`` then ``dbg.step()`` left the screen showing the old pc."""
    import code
    import contextlib

    app = _while_app(tmp_path)
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        await ready(pilot)
        await _stopped(pilot, app, "n", OpRef((), 1), "n")
        monkeypatch.setattr(code, "interact", lambda local, **kw: (local["dbg"].step(), local["dbg"].step()))
        monkeypatch.setattr(app, "suspend", contextlib.nullcontext)
        await pilot.press("exclamation_mark")
        await wait_for(pilot, lambda: app.session.pc == OpRef((), 3), "the pc the shell moved to")
        await pilot.pause()
        assert app.main.selected == OpRef((), 3) and app.main.canvas.pc_op == 3
        assert "op#3" in app.session.pc_label()


def test_an_elided_name_keeps_where_it_differs() -> None:
    """Item 21: four ``SpatialBNGradi… …2c_grad`` rows (res2_0 / res2_1 / res3_0 / … branch2c) read alike."""
    from netviz.widgets.op_tree import differs_at, elide_distinct

    names = ["res2_0_branch2c_grad", "res2_1_branch2c_grad", "res2_0_branch2b_grad", "res3_0_branch2c_grad",
             "res2_0_branch1_grad", "res3_1_branch2c_grad"]
    forward, backward = sorted(names), sorted(n[::-1] for n in names)
    for room in (8, 10, 14):
        shown = [elide_distinct(n, room, differs_at(n, forward, backward)) for n in names]
        assert len(set(shown)) == len(names) and all(len(s) <= room for s in shown), shown
    assert elide_distinct("res2_0_branch2c_grad", 8, differs_at("res2_0_branch2c_grad", forward, backward)) \
        == "…2_0…2c…"
    assert elide_distinct("conv1_grad", 14, None) == "conv1_grad"


@pytest.mark.skipif("resnet50" not in ZOO, reason="no model zoo")
@asynctest
async def test_backward_rows_of_resnet_read_apart() -> None:
    app = NetvizApp(Session.open(ZOO["resnet50"], loss="gpu_0/softmax"))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("g")
        await wait_for(pilot, lambda: app.session.show_backward and app.main.op_tree.populated, "the backward tree")
        tree = app.main.op_tree
        refs = [OpRef((), i) for i in range(300, 351) if app.session.op(OpRef((), i)).type == "SpatialBNGradient"]
        tree.select_ref(refs[0])
        rows = [str(tree.label_of(r, tree._room(tree.nodes_by_ref[r]))) for r in refs]  # as drawn: room at its depth
        shown = [r.split(maxsplit=1)[1] for r in rows]  # NOTE: without the op index (every row has its own)
        assert len(shown) > 4 and len(set(shown)) == len(shown), rows


@asynctest
async def test_a_notice_is_wide_and_never_over_the_dialog(tmp_path: Path) -> None:
    """Item 21: at 80x24 the missing-input notice was a 40x12 toast drawn over the prompt it explained."""
    from textual.widgets._toast import Toast

    app = NetvizApp(Session.open(write(tmp_path, "mlp", mlp())))
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await _at_missing_input(pilot, app)
        await wait_for(pilot, lambda: bool(app.screen.query(Toast)), "the notice")
        await pilot.pause(0.3)
        box = app.screen.query_one("#prompt-box").region
        toasts = [t.region for t in app.screen.query(Toast)]
        assert all(not t.overlaps(box) for t in toasts), (box, toasts)
        assert all(t.width >= 50 and t.height <= 8 for t in toasts), toasts
        assert any("give input X" in line for line in screen_text(app))


def test_a_cancelled_stop_is_said_once(tmp_path: Path) -> None:
    """Item 21: the status line read ``[cancelled: cancelled]``."""
    from engine.debugger.records import Stopped

    session = Session.open(write(tmp_path, "loop", while_net()), inputs=["x=3"])
    session.step("step")
    session.last_stop = Stopped("cancelled", session.debugger.pc, "cancelled")
    assert session.pc_label().endswith("op#1 ConstantFill  [cancelled]")
    session.last_stop = Stopped("error", session.debugger.pc, "boom")
    assert session.pc_label().endswith("  [error: boom]")


@asynctest
async def test_a_cursor_move_is_one_repaint(tmp_path: Path, monkeypatch) -> None:
    """Item 21: ↓ in the op list drew the moved cursor line in a frame of its own, and the graph,
    inspector and status line in the next (the op reached the screen two messages later)."""
    from netviz.screens.main import MainScreen

    frames: list[set[str]] = []
    draw = MainScreen._compositor_refresh

    def counted(self) -> None:
        frames.append({w.id or type(w).__name__ for w in self._dirty_widgets})
        draw(self)
    monkeypatch.setattr(MainScreen, "_compositor_refresh", counted)
    app = NetvizApp(Session.open(write(tmp_path, "mlp", mlp()), inputs=["X=4,8"]))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.pause(0.5)
        for k in (1, 2, 3):
            frames.clear()
            await pilot.press("down")
            await wait_for(pilot, lambda: app.main.details_ref == OpRef((), k), f"op {k} shown")
            await pilot.pause(0.2)
            with_tree = [f for f in frames if "ops" in f]
            assert with_tree and all({"op-info", "graph", "status"} <= f for f in with_tree), frames


@asynctest
async def test_an_empty_subnet_says_zero_ops(tmp_path: Path) -> None:
    """Item 21: drilling into an empty branch showed a blank canvas and no word of why."""
    from engine.model.opdef import create_operator as op
    from proto import caffe2_pb2

    then = caffe2_pb2.NetDef(name="then", op=[op("Relu", "x", "y")])
    net = caffe2_pb2.NetDef(name="branchy", op=[op("If", ["c"], [], then_net=then,
                                                   else_net=caffe2_pb2.NetDef(name="else"))])
    net.external_input.extend(["c", "x"])
    app = NetvizApp(Session.open(write(tmp_path, "branchy", net)))
    async with app.run_test(size=(120, 30)) as pilot:
        await ready(pilot)
        app.main.path = ((0, "else_net"),)
        await wait_for(pilot, lambda: any("else_net (0 ops: empty)" in line for line in screen_text(app)), "0 ops")


@asynctest
async def test_diffs_of_a_plan_say_why_not() -> None:
    """Driving every help key on examples/mlp/plan.pbtxt: D said "device diff: the cpu run failed: …
    op ExecutionStep is not a Caffe2 op (no kernel)", an error of netviz's own making."""
    app = NetvizApp(Session.open(Path(__file__).resolve().parents[2] / "examples" / "mlp" / "plan.pbtxt"))
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        await ready(pilot)
        for key in ("D", "O"):
            await pilot.press(key)
        await wait_for(pilot, lambda: sum("runs one net, not a PlanDef's steps" in n.message
                                          for n in app._notifications) == 2, "two refusals")
        assert not [n for n in app._notifications if n.severity == "error"]


@asynctest
async def test_a_plans_steps_are_drawn_in_their_order() -> None:
    """Item 21: examples/mlp/plan.pbtxt drew ExecutionStep #1 above #0 (dot's left-right flow stacks a
    rank's nodes upwards); its steps are drawn top-down, #0 first in reading order."""
    app = NetvizApp(Session.open(Path(__file__).resolve().parents[2] / "examples" / "mlp" / "plan.pbtxt"))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        lines = screen_text(app)
        at = {k: next((i, line.index(f"ExecutionStep #{k}")) for i, line in enumerate(lines)
                      if f"ExecutionStep #{k}" in line) for k in (0, 1)}
        assert at[0] < at[1], "\n".join(lines)  # (row, column): above it, or beside it to the left
