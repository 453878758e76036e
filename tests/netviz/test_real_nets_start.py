"""Issue #30 item 5, TUI side: real nets start.

A missing input gets the CLI's hint and a prompt prefilled from value_info or the op reading it;
the TUI takes every ``--input`` form ``netviz run`` takes; a plan shows no false schema warnings.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from netviz.app import NetvizApp
from netviz.cli import build_parser
from netviz.screens.prompt import PromptScreen
from netviz.session import OpRef, Session
from netviz.widgets.op_inspector import OpInspector
from tests.conftest import ZOO
from tests.netviz.waiting import answer, asynctest, notified, ready, text_of, wait_for

ROOT = Path(__file__).resolve().parents[2]
FASTER = ZOO / "detectron_e2e_faster_rcnn_R-50-C4_1x" / "predict_net.pbtxt"
MASK = ZOO / "mask_rcnn_2go_fp32" / "model.pbtxt"


def test_the_tui_takes_every_input_form_run_takes(tmp_path):
    np.save(tmp_path / "x.npy", np.arange(6, dtype=np.float64).reshape(2, 3))
    path = str(ROOT / "examples" / "mlp" / "predict_net.pb")
    # NOTE: names of the net's inputs: the TUI refuses a name that is no blob of the net (issue 42 item 7)
    specs = ["data=16,8:int32", "label=16", f"fc1_w={tmp_path / 'x.npy'}", "fc2_b=2x3"]
    args = build_parser().parse_args(["open", path, *(a for s in specs for a in ("--input", s))])
    s = Session.open(path, inputs=args.input)
    assert s.values["data"].dtype == np.int32 and s.values["data"].shape == (16, 8)
    assert set(np.unique(s.values["data"])) <= {0, 1}
    assert s.values["label"].shape == (16,) and s.values["label"].dtype == np.float32
    assert s.values["fc1_w"].dtype == np.float64 and s.values["fc2_b"].shape == (2, 3)


@asynctest
async def test_a_plan_shows_no_false_schema_warning():
    app = NetvizApp(Session.open(ROOT / "examples" / "mlp" / "plan.pbtxt"))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        app.main.select(OpRef((), 0))
        await pilot.pause()
        assert not any("not a Caffe2 op" in n.message for n in app._notifications)
        shown = text_of(app.main.query_one(OpInspector))
        assert "a plan's execution step" in shown
        assert "not a Caffe2 op" not in shown and "no gradient maker" not in shown


@asynctest
async def test_a_missing_input_gets_the_cli_hint_and_a_prefilled_prompt():
    app = NetvizApp(Session.open(FASTER))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("c")
        await wait_for(pilot, lambda: isinstance(app.screen, PromptScreen), "the prompt for im_info", timeout=120)
        hint = ("'im_info' is an input of the net that neither the init net nor --input gives: "
                "feed it with --input im_info=FILE.npy or --input im_info=SHAPE")
        await wait_for(pilot, lambda: notified(app, hint), "the CLI's hint in the stop's notice")
        assert "give input im_info" in app.screen.title_text
        assert app.screen.query_one("#prompt-input").value == "1,3"  # what GenerateProposals reads
        failed = app.session.pc
        await answer(pilot, app, "", clear=False)  # Enter takes the suggestion
        await wait_for(pilot, lambda: app.main.idle and app.session.pc == failed
                       and app.session.last_stop.reason == "step", "the run back to the op", timeout=120)
        assert app.session.values["im_info"].shape == (1, 3)
        await pilot.press("n")  # the op that failed now runs
        await wait_for(pilot, lambda: app.main.idle and app.session.pc != failed, "a step past it", timeout=60)
        assert app.session.last_stop.reason == "step"


def test_an_image_input_is_suggested_from_the_conv_that_reads_it(zoo):
    from netviz.feeding import suggest
    s = Session.open(MASK)  # no value_info: `data` goes through the first conv
    assert suggest(s, "data") == "1,3,224,224"
    assert suggest(s, "im_info") == "1,3"
    faster = Session.open(FASTER)  # value_info has it
    info = faster.model.value_info["data"]
    assert suggest(faster, "data") == ",".join(map(str, info.shape))
