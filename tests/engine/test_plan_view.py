"""engine.runtime.plan_view: plan files for the debugger, `netviz info` and `netviz run`."""
from __future__ import annotations

from pathlib import Path

from google.protobuf import text_format

from engine.runtime.plan_view import is_plan_file, plan_lines, plan_model, run_plan_steps
from engine.runtime.plandef import load_plan
from engine.caffe2.workspace import Workspace
from netviz.cli import main
from proto import caffe2_pb2

PLAN = Path(__file__).resolve().parents[2] / "examples" / "mlp" / "plan.pbtxt"


def test_plan_files_are_told_from_nets():
    assert is_plan_file(PLAN)
    assert not is_plan_file(PLAN.parent / "predict_net.pb") and not is_plan_file(PLAN.parent / "nope.pbtxt")


def test_plan_model_steps_the_repeated_net_after_its_init_nets():
    model = plan_model(load_plan(PLAN), PLAN)
    assert model.predict.name == "mlp_train" and [op.type for op in model.init.op][:2] == ["GivenTensorFill",
                                                                                           "GivenTensorIntFill"]


def test_step_tree_names_iterations_stop_blobs_reporters_and_concurrency():
    plan = caffe2_pb2.PlanDef(name="p", network=[caffe2_pb2.NetDef(name="a"), caffe2_pb2.NetDef(name="b")])
    outer = plan.execution_step.add(name="outer", should_stop_blob="stop", concurrent_substeps=True)
    outer.substep.add(name="s1", network=["a"], num_iter=2)
    outer.substep.add(name="s2", network=["b"])
    outer.substep.add(name="rep", network=["b"], run_every_ms=100)
    text = "\n".join(plan_lines(plan))
    assert "step 'outer' (until stop, concurrent substeps: run in order here)" in text
    assert "  step 's1' (num_iter=2)\n    net a" in text and "step 'rep' (reporter every 100 ms)" in text


def test_run_plan_steps_trains_and_the_cli_prints_every_net_run(capsys):
    ws = Workspace("plan")
    runs = list(run_plan_steps(load_plan(PLAN), ws))
    assert [(r.step_path, r.iteration, r.net) for r in runs[:2]] == [(("init",), 0, "mlp_init"),
                                                                     (("train",), 0, "mlp_train")]
    assert len(runs) == 21 and int(ws.fetch_blob("ITER")[0]) == 20
    assert main(["run", str(PLAN)]) == 0
    out = capsys.readouterr().out
    assert "train    19  mlp_train" in out and "plan 'mlp_plan': 21 net runs" in out
    assert main(["info", str(PLAN)]) == 0
    assert "step 'train' (num_iter=20)" in capsys.readouterr().out
    assert text_format.Parse(PLAN.read_text(), caffe2_pb2.PlanDef()).name == "mlp_plan"
