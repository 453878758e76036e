"""The fixer's pass over qa's findings in the TUI: what the screen shows after the user's keys."""
from __future__ import annotations

from pathlib import Path

from netviz.app import NetvizApp
from netviz.session import Session
from tests.netviz.test_qa_values_markup import blob_text
from tests.netviz.waiting import answer, asynctest, notified, ready, text_of, wait_for

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MLP = EXAMPLES / "mlp" / "predict_net.pb"


@asynctest
async def test_a_string_result_of_eval_shows_the_string():
    """`: 'hello'` showed "value <U5 scalar", then "values []" and no string."""
    app = NetvizApp(Session.open(MLP))
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        await pilot.press("n")
        await wait_for(pilot, lambda: app.main.idle and app.session.debugger is not None, "a step")
        await pilot.press("colon")
        await answer(pilot, app, "'hello'")
        await wait_for(pilot, lambda: "<U5" in blob_text(app), "the value in the inspector")
        await pilot.pause()
        assert "value 'hello'  (<U5 scalar)" in blob_text(app), blob_text(app)


@asynctest
async def test_a_plans_how_to_is_an_information_toast_titled_plan():
    """The plan's how-to ("s steps into …") was a yellow warning titled "Parameters"."""
    app = NetvizApp(Session.open(EXAMPLES / "mlp" / "plan.pbtxt"))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await pilot.press("n")
        await wait_for(pilot, lambda: notified(app, "s steps into"), "the plan's how-to")
        toast = next(n for n in app._notifications if "s steps into" in n.message)
        assert (toast.title, toast.severity) == ("Plan", "information")


@asynctest
async def test_g_on_a_plan_says_it_has_no_backward_view():
    """g on a PlanDef asked for a loss from an empty "outputs:" list, nothing a user could pick."""
    app = NetvizApp(Session.open(EXAMPLES / "mlp" / "plan.pbtxt"))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await pilot.press("g")
        await wait_for(pilot, lambda: notified(app, "a plan has no backward view"), "the refusal")
        assert app.screen is app.main  # no loss prompt opened
        assert not app.session.show_backward


def test_one_filled_parameter_is_one_parameter(tmp_path):
    """The notice said "1 parameters filled with random values"."""
    path = tmp_path / "one_param.pbtxt"
    path.write_text('name: "one" external_input: "x" external_input: "s" external_output: "y"\n'
                    'op { type: "Mul" input: "x" input: "s" output: "y" }\n')
    session = Session.open(path, inputs=["x=2,3"])
    session.step("continue_")
    assert "no init net: 1 parameter filled with random values" in session.pop_notices()


@asynctest
async def test_the_op_at_the_pc_shows_its_output_shape_from_its_inputs_values(tmp_path):
    """resnet50 (random params), pc on Softmax: "in X = pred@1 1×1000" but "out Y = softmax@1 1×?": the
    static table could not know a made-up weight's width; the inputs' values now tell it."""
    from engine.model.opdef import create_operator as op  # noqa: PLC0415
    from netviz.session import OpRef  # noqa: PLC0415
    from netviz.widgets.op_inspector import OpInspector  # noqa: PLC0415
    from proto import caffe2_pb2  # noqa: PLC0415
    from tests.netviz.tui_nets import write  # noqa: PLC0415

    net = caffe2_pb2.NetDef(name="head", op=[op("FC", ["data", "fc_w", "fc_b"], "pred"),
                                             op("Softmax", ["pred"], "prob")])
    net.external_input.extend(["data", "fc_w", "fc_b"])
    app = NetvizApp(Session.open(write(tmp_path, "head", net), inputs=["data=1,8"]))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await wait_for(pilot, lambda: app.session.shapes_ready(()) is not None, "shape inference")
        await pilot.press("n")
        await wait_for(pilot, lambda: app.main.idle and app.session.pc == OpRef((), 1), "the pc on Softmax")
        app.main.select(OpRef((), 1))
        await pilot.pause()
        shown = text_of(app.main.query_one(OpInspector))
        width = shown.split("pred@1", 1)[1].splitlines()[1].strip()
        assert width.startswith("1×") and "?" not in width, shown
        assert shown.split("prob@1", 1)[1].splitlines()[1].strip() == width, shown


@asynctest
async def test_moves_typed_ahead_of_a_missing_input_are_dropped(tmp_path):
    """n n n on a net whose input nothing gives: each queued n re-ran the failure (3 error toasts) and
    pushed its own "give input" prompt (three stacked)."""
    from engine.model.opdef import create_operator as op  # noqa: PLC0415
    from netviz.screens.prompt import PromptScreen  # noqa: PLC0415
    from proto import caffe2_pb2  # noqa: PLC0415
    from tests.netviz.tui_nets import write  # noqa: PLC0415

    net = caffe2_pb2.NetDef(name="fed", op=[op("Relu", ["data"], "y"), op("Relu", ["y"], "z")])
    net.external_input.append("data")
    app = NetvizApp(Session.open(write(tmp_path, "fed", net)))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        for _ in range(3):  # NOTE: in one go: the 2nd and 3rd wait in the move queue behind the 1st
            app.main.move("step")
        await wait_for(pilot, lambda: app.main.idle and isinstance(app.screen, PromptScreen), "the feed prompt")
        await pilot.pause()
        errors = [n for n in app._notifications if n.severity == "error"]
        assert len(errors) == 1 and "input blob 'data' not found" in errors[0].message, errors
        assert sum(isinstance(s, PromptScreen) for s in app.screen_stack) == 1


@asynctest
async def test_a_bad_global_condition_is_titled_in_words():
    """C with "nope(x) > 1": a toast titled "ConditionError", a Python class name."""
    app = NetvizApp(Session.open(MLP))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await pilot.press("C")
        await answer(pilot, app, "nope(x) > 1", then="break when")  # it reopens on the text to fix
        await wait_for(pilot, lambda: any(n.severity == "error" for n in app._notifications), "the refusal")
        titles = [n.title for n in app._notifications if n.severity == "error"]
        assert titles == ["Bad condition"], titles


@asynctest
async def test_g_prompt_offers_the_only_output_and_says_why_on_an_in_place_net(tmp_path):
    """bvlc_alexnet, g: an EMPTY loss box (the net has one output); an empty Enter closed it silently; the
    gradient version error came without the CLI's "(op #… overwrote it in place …)" and titled by its class."""
    from engine.model.opdef import create_operator as op  # noqa: PLC0415
    from netviz.screens.prompt import PromptScreen  # noqa: PLC0415
    from proto import caffe2_pb2  # noqa: PLC0415
    from tests.netviz.tui_nets import write  # noqa: PLC0415

    net = caffe2_pb2.NetDef(name="inplace", op=[op("Relu", ["x"], "y"), op("Relu", ["y"], "y"), op("Relu", ["y"], "z")])
    net.external_input.append("x")
    net.external_output.append("z")
    app = NetvizApp(Session.open(write(tmp_path, "inplace", net), inputs=["x=2,3"]))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await pilot.press("g")
        await wait_for(pilot, lambda: isinstance(app.screen, PromptScreen), "the loss prompt")
        assert app.screen.query_one("#prompt-input").value == "z"
        await answer(pilot, app, "")  # emptied, then Enter
        await wait_for(pilot, lambda: notified(app, "no loss blob given"), "why nothing happened")
        await pilot.press("g")
        await answer(pilot, app, "", clear=False)  # the offered output
        await wait_for(pilot, lambda: any(n.severity == "error" for n in app._notifications), "the refusal")
        (err,) = [n for n in app._notifications if n.severity == "error"]
        assert err.title == "Backward pass", err.title
        assert "(op #1 Relu overwrote it in place; Caffe2 refuses this net too)" in err.message, err.message


@asynctest
async def test_device_diff_list_writes_a_0d_blob_as_scalar():
    """D's list showed a 0-d blob's shape as "[]" (LR  []  abs 0) where the inspector says "scalar"."""
    from netviz.screens.pick import PickScreen  # noqa: PLC0415

    app = NetvizApp(Session.open(MLP))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("D")
        await wait_for(pilot, lambda: isinstance(app.screen, PickScreen), "the device diff list", timeout=60)
        rows = {r.split()[0]: r for r in app.screen.rows}
        assert rows["LR"].split()[1] == "scalar", rows["LR"]
        assert all("[" not in r for r in app.screen.rows), app.screen.rows


def test_saving_into_a_missing_folder_says_so_and_one_version_is_one(tmp_path):
    """S to /nonexistent/dir/x.npy said "cannot write blob …: No such file or directory"; S to a .npz with
    one version said "(1 versions: relu1@1)"."""
    import pytest  # noqa: PLC0415

    from engine.errors import NetvizError  # noqa: PLC0415
    from netviz.session import BlobRef  # noqa: PLC0415

    session = Session.open(MLP)
    session.step("step")
    session.step("step")
    ref = BlobRef((), "relu1", 1)
    missing = tmp_path / "no" / "x.npy"
    with pytest.raises(NetvizError, match=r"^.*x\.npy: folder .*/no does not exist$"):
        session.save(ref, str(missing))
    with pytest.raises(NetvizError, match=r"folder .*/no does not exist$"):
        session.save(ref, str(tmp_path / "no" / "x.npz"))
    assert session.save(ref, str(tmp_path / "saved.npz")) == f"{tmp_path / 'saved.npz'} (1 version: relu1@1)"


@asynctest
async def test_a_toast_leaves_the_status_line_whole():
    """80x24, m: the toast covered the status line's right part and left one stray letter at column 79."""
    from textual.widgets._toast import Toast  # noqa: PLC0415

    from netviz.widgets.status_line import StatusLine  # noqa: PLC0415

    app = NetvizApp(Session.open(MLP))
    async with app.run_test(size=(80, 24), notifications=True) as pilot:  # NOTE: toasts drawn, as in a terminal
        await ready(pilot)
        await pilot.press("m")
        await wait_for(pilot, lambda: bool(app.screen.query(Toast)), "a toast")
        await pilot.pause()
        status = app.main.query_one(StatusLine).region
        toasts = [t.region for t in app.screen.query(Toast)]
        assert toasts and all(r.height and not r.overlaps(status) for r in toasts), (status, toasts)
