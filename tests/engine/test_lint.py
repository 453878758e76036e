"""engine.analysis.lint: one rule per docs/fidelity.md entry (each fires on a net it is about), the
Caffe2-exact default (netviz then equals Caffe2 where Caffe2 is wrong) and `netviz lint`."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.caffe2 import core
from engine.analysis.lint import RULES, fix_caffe2, fixes_enabled, lint_net
from engine.model.modelio import load_net
from netviz.cli import main
from tests.differential.goldens import check_backward_case, load, parse_net, ys_of

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def _golden(name: str):
    case = load(name)
    ys = ys_of(case)
    return parse_net(case["forward_net"]), list(ys) if not isinstance(ys, str) else [ys]


def _example(name: str):
    return load_net(EXAMPLES / name / "predict_net.pb"), []


def _two_char():
    net = core.Net("two")
    net.Relu("X", "Z")
    net.AddGradientOperators({"Z": "dZ"})
    return net.Proto(), ["Z"]


def _matmul_axis():
    net = core.Net("mm")
    net.MatMul(["A", "B"], "C", axis_a=2)
    net.AveragedLoss("C", "L")
    return net.Proto(), ["L"]


def _one(op_type: str, inputs: list[str], outputs: list[str], **args):
    net = core.Net(op_type.lower())
    getattr(net, op_type)(inputs, outputs, **args)
    net.AveragedLoss(outputs[0], "L")
    return net.Proto(), ["L"]


def _builders(name: str):
    net = load_net(ROOT / "tests" / "golden" / "builders" / f"{name}.pb")
    return net, []


#: rule → a net it must fire on (goldens recorded from Caffe2 where the doc cites one)
FIRES = {
    "while-writes-outer-blob": lambda: _golden("control/while_counter_accumulate"),
    "if-then-only-overwrite": lambda: _golden("control/if_then_only"),
    "if-cond-name-chars": lambda: _golden("control/if_cond_name_chars_bug"),
    "set-order": lambda: _golden("control/if_then_else"),
    "recycled-do-workspace": lambda: _example("while_net"),
    "inplace-gradient-read": lambda: _golden("op/Mul_inplace0"),
    "two-char-gradient-name": _two_char,
    "accumulation-hash-order": lambda: _golden("net/fanout_2_and_3"),
    "pow-tensor-exponent": lambda: _golden("op/Pow_tensor"),
    "matmul-axis-gradient": _matmul_axis,
    "spatialbn-is-test-gradient": lambda: _golden("op/SpatialBN_test"),
    "cpu-only-build": lambda: _golden("op/CopyCPUToGPU"),
    "random-ops": lambda: _golden("op/Dropout_train"),
    "recurrent-network": lambda: _example("lstm"),
    "zero-gradient-noise": lambda: _builders("resnet32x32_train"),
    "max-min-accumulate-shapes": lambda: _one("Max", ["A", "B"], ["C"]),
    "adjoint-gradients": lambda: _one("Conv", ["X", "W", "b"], ["Y"], kernels=[2, 2, 2], order="NHWC"),
    "range-tile-args": lambda: _one("Range", ["stop"], ["R"]),
    "sparse-ops": lambda: _one("BooleanMask", ["D", "M"], ["Y"]),
    "inference-not-run": lambda: _one("TopK", ["X"], ["V", "I"], k=2),
    "fuse-conv-bn-epsilon": lambda: _conv_bn(epsilon=1e-3),
}


def _conv_bn(epsilon: float):
    net = core.Net("conv_bn")
    net.Conv(["X", "W", "b"], "Y", kernel=1)
    net.SpatialBN(["Y", "s", "bias", "mean", "var"], "Z", is_test=1, epsilon=epsilon)
    return net.Proto(), []


def test_fuse_epsilon_rule_quiet_at_caffe2s_epsilon():
    """The default 1e-5 (stored as float32 in the arg) folds to the same values: nothing to report."""
    net, _ = _conv_bn(epsilon=1e-5)
    assert [f for f in lint_net(net) if f.rule == "fuse-conv-bn-epsilon"] == []


def test_every_fidelity_entry_has_one_rule_and_every_rule_a_test():
    sections = re.findall(r"^## (.+)$", (ROOT / "docs" / "fidelity.md").read_text(), re.M)
    ruled = {r.section for r in RULES}
    assert not set(sections) - ruled, f"docs/fidelity.md sections without a rule in engine/analysis/lint.py: {set(sections) - ruled}"
    assert not ruled - set(sections), f"engine/analysis/lint.py rules naming no docs/fidelity.md section: {ruled - set(sections)}"
    assert len(sections) == len(set(sections)) == len(RULES)
    assert sorted(FIRES) == sorted(r.id for r in RULES)


@pytest.mark.parametrize("rule_id", sorted(FIRES))
def test_rule_fires_on_its_net(rule_id):
    net, losses = FIRES[rule_id]()
    found = [f for f in lint_net(net, losses) if f.rule == rule_id]
    assert found, f"{rule_id} found nothing"
    assert all(0 <= f.op_index < len(net.op) and net.op[f.op_index].type == f.op_type for f in found)


def test_plain_training_net_is_clean():
    assert lint_net(load_net(EXAMPLES / "mlp" / "predict_net.pb")) == []


@pytest.mark.parametrize("name", ["op/Mul_inplace0", "op/Mul_inplace_y_eq_y_times_x", "op/Log_inplace",
                                  "op/Sqr_inplace", "op/SpatialBN_test"])
def test_exact_mode_computes_caffe2s_wrong_values(name):
    """The default mode reproduces Caffe2's values where Caffe2 is wrong (tests/differential/test_op.py
    checks that --fix-caffe2 gives the mathematically right ones)."""
    assert not fixes_enabled()
    check_backward_case(load(name))


def test_fix_caffe2_mode_is_scoped():
    with fix_caffe2():
        assert fixes_enabled()
        with fix_caffe2(False):
            assert not fixes_enabled()
        assert fixes_enabled()
    assert not fixes_enabled()


def test_lint_command_lists_findings_and_exits_1_when_values_differ(tmp_path, capsys):
    assert main(["lint", str(EXAMPLES / "mlp" / "predict_net.pb")]) == 0
    assert "0 findings" in capsys.readouterr().out
    assert main(["lint", str(EXAMPLES / "while_net" / "predict_net.pb"), "--loss", "loss"]) == 1
    out = capsys.readouterr().out
    assert "op #2 While: [while-writes-outer-blob] (Caffe2 refuses)" in out
    assert "docs/fidelity.md: While body that writes an outer blob" in out


def test_python_api_keyword_and_context_manager_choose_the_mode():
    from engine.autodiff.gradient_ir import backward_net
    net = core.Net("k")
    net.Mul(["y", "x"], "y")
    net.AveragedLoss("y", "L")
    exact, _ = backward_net(net.Proto(), ["L"])
    fixed, _ = backward_net(net.Proto(), ["L"], fix_caffe2=True)
    assert "Copy" not in [op.type for op in exact.op] and [op.type for op in fixed.op][0] == "Copy"
    with fix_caffe2():
        assert [op.type for op in backward_net(net.Proto(), ["L"])[0].op][0] == "Copy"
