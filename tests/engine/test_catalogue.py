"""engine.catalogue: Caffe2's op facts, categories, descriptions, schema checks, op docs, coverage."""
from __future__ import annotations

import json

import numpy as np
import pytest

import engine.runtime.ops  # noqa: F401 - fills the registries
from engine.runtime import executor
from engine.catalogue import CATEGORIES, category, facts, forward_ops, gradient_ops, is_caffe2_op
from engine.caffe2 import coverage
from engine.catalogue import schema
from engine.catalogue.docs import description, op_doc
from engine.catalogue.schema import check_net, check_op, violations
from engine.errors import SchemaError, UnknownOpError
from engine.autodiff.gradient_ir import GradientRegistry
from engine.model.opdef import create_operator
from engine.caffe2.workspace import Workspace
from netviz.cli import main
from proto import caffe2_pb2


def test_table_covers_caffe2s_629_forward_and_186_gradient_cpu_op_types() -> None:
    fwd, grad = forward_ops(), gradient_ops()
    assert (len(fwd), len(grad)) == (629, 186)
    assert sum(facts(t).origin == "detectron" for t in fwd) == 11
    assert all(facts(t).has_schema for t in fwd)
    assert "ReluGradient" in grad and "Relu" in fwd and "Conv_ENGINE_CUDNN" not in fwd + grad


def test_facts_are_caffe2s_schema() -> None:
    conv, sbn = facts("Conv"), facts("SpatialBN")
    assert conv.inputs == ("X", "filter", "bias") and (conv.min_input, conv.max_input) == (2, 3)
    assert sbn.inputs_allowed == (5, 7) and sbn.required_args == ("is_test",)
    assert (0, 0) in facts("Relu").inplace and not facts("Conv").inplace
    assert facts("Iter").inplace_enforced == {(0, 0)}
    assert facts("Sum").max_input is None  # unbounded
    assert (facts("Relu").cpu, facts("Relu").cuda, facts("Relu").gradient) == (True, True, "has_gradient")
    assert facts("NoSuchOp") is None and not is_caffe2_op("NoSuchOp")


def test_every_op_has_a_category_and_a_description() -> None:
    ops = forward_ops() + gradient_ops()
    assert {category(t) for t in ops} <= set(CATEGORIES)
    assert [t for t in ops if not description(t)] == []
    assert (category("Conv"), category("SpatialBN"), category("Relu"), category("MaxPool")) == \
        ("conv", "norm", "activation", "pool")
    assert (category("Adam"), category("If"), category("SoftmaxWithLoss"), category("Int8Conv")) == \
        ("optimizer", "control", "loss", "quantized")
    assert category("RoIAlign") == "detection" and category("ConvGradient") == "conv"
    assert category("NoSuchOp") == "unknown"


@pytest.mark.parametrize("op, expected", [
    (create_operator("Relu", ["X", "Z"], ["Y"]), "Input size 2 not in range [min=1, max=1]."),
    (create_operator("FC", ["X", "W"], ["Y"]), "Input size 2 not in range [min=3, max=3]."),
    (create_operator("SpatialBN", ["X", "s", "b", "m", "v", "a"], ["Y"], is_test=1),
     "Input size 6 not in allowed input sizes [5, 7]."),
    (create_operator("Dropout", ["X"], ["Y", "mask"]), "Argument 'is_test' is required for Operator 'Dropout'."),
    (create_operator("Conv", ["X", "w", "b"], ["X"]),
     "Input index 0 and output idx 0 (X) are set to be in-place but this is actually not supported by op Conv"),
    (create_operator("Iter", ["it"], ["it2"]),
     "Input index 0 (it) and output idx 0 (it2) are not in-place but should be as required by op Iter"),
    (create_operator("NoSuchOp", ["X"], ["Y"]), "'NoSuchOp' is not a Caffe2 op"),
])
def test_violations_use_caffe2s_wording(op: caffe2_pb2.OperatorDef, expected: str) -> None:
    assert violations(op) == [expected]


def test_valid_ops_pass() -> None:
    ok = [create_operator("Relu", ["X"], ["X"]), create_operator("Conv", ["X", "w"], ["Y"], kernel=3),
          create_operator("Sum", ["a", "b", "c"], ["a"]), create_operator("Iter", ["it"], ["it"]),
          create_operator("SpatialBN", ["X", "s", "b", "m", "v"], ["Y"], is_test=1)]
    assert [violations(op) for op in ok] == [[]] * len(ok)


def test_check_net_names_net_op_index_and_type(tmp_path, capsys) -> None:
    net = caffe2_pb2.NetDef(name="mynet")
    net.op.extend([create_operator("Relu", ["X"], ["Y"]), create_operator("FC", ["Y", "W"], ["Z"], name="fc")])
    assert check_net(net) == ["mynet: op #1 FC 'fc': Input size 2 not in range [min=3, max=3]."]
    path = tmp_path / "bad.pbtxt"
    path.write_text(str(net))
    assert main(["info", str(path)]) == 0  # warnings, not failure
    assert "warning: mynet: op #1 FC 'fc': Input size 2 not in range [min=3, max=3]." in capsys.readouterr().out
    assert main(["info", str(path), "--json"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert js["ops"][1]["inputs"] == [["X", "Y"], ["W", "W"]] and js["ops"][1]["outputs"] == [["Y", "Z"]]
    assert js["schema_warnings"] == check_net(net)


def test_zoo_nets_pass_the_schema(zoo) -> None:
    from engine.model.modelio import load_model

    for path in sorted(zoo.glob("*/*.pbtxt")):
        model = load_model(path)
        assert check_net(model.predict) == [], path


def test_unknown_op_is_not_a_caffe2_op_distinct_from_no_kernel() -> None:
    with pytest.raises(UnknownOpError, match=r"op #0 NoSuchOp '': op NoSuchOp is not a Caffe2 op"):
        executor.bind(create_operator("NoSuchOp", ["X"], ["Y"]))
    no_kernel = [t for t in forward_ops() if t not in engine.catalogue.registry.KERNELS and facts(t).min_input <= 1]
    op = create_operator(no_kernel[0], ["X"] * facts(no_kernel[0]).min_input, ["Y"])
    with pytest.raises(UnknownOpError, match="has no kernel"):
        executor.bind(op)


def test_schema_policy_error_refuses_what_caffe2_refuses(monkeypatch) -> None:
    op = create_operator("Relu", ["X", "Z"], ["Y"])
    monkeypatch.setattr(schema, "SCHEMA_POLICY", "error")
    with pytest.raises(SchemaError, match=r"op #3 Relu '': Input size 2 .* \(did not pass schema checking\)"):
        executor.bind(op, 3, "net")
    ws = Workspace()
    ws.feed_blob("X", np.ones(3, np.float32))
    with pytest.raises(SchemaError, match="required for Operator 'Dropout'"):
        executor.run_op(create_operator("Dropout", ["X"], ["Y", "m"]), ws)
    executor.run_op(create_operator("Dropout", ["X"], ["Y", "m"], is_test=1), ws)


def test_op_doc_names_slots_args_defaults_inplace_and_gradient() -> None:
    d = op_doc(create_operator("Conv", ["data", "w", "b"], ["y"], kernel=3), inputs=["gpu_0/data@0", "w@0", "b@0"])
    assert d.inputs == (("X", "gpu_0/data@0"), ("filter", "w@0"), ("bias", "b@0")) and d.outputs == (("Y", "y"),)
    args = {a.name: a for a in d.args}
    assert (args["kernel"].value, args["kernel"].is_default) == (3, False)
    assert (args["stride"].value, args["stride"].is_default) == (1, True)
    assert d.gradient == "has gradient" and d.category == "conv" and "filter" in d.description
    relu = op_doc(create_operator("Relu", ["x"], ["x"]))
    assert relu.inplace == ("X -> Y in place (x)",)
    assert op_doc(create_operator("Iter", ["it"], ["it"])).gradient == "no gradient (flow stops)"
    assert op_doc(create_operator("Print", ["x"], [])).gradient.startswith("should not differentiate")
    assert op_doc(create_operator("ReluGradient", ["y", "dy"], ["dx"])).gradient == "is a gradient op"
    sbn = {a.name: a for a in op_doc(create_operator("SpatialBN", ["X"], ["Y"])).args}
    assert sbn["is_test"].required and sbn["is_test"].is_default


def test_no_gradient_readers_are_skipped_silently() -> None:
    """TensorProtosDBInput feeding a training net: Caffe2 emits nothing for it and raises nothing."""
    ops = [create_operator("TensorProtosDBInput", ["reader"], ["data", "label"], batch_size=2),
           create_operator("FC", ["data", "W", "b"], ["y"]),
           create_operator("SoftmaxWithLoss", ["y", "label"], ["p", "loss"])]
    grad_ops, grads = GradientRegistry.GetBackwardPass(ops, ["loss"])
    assert [g.type for g in grad_ops] == ["ConstantFill", "SoftmaxWithLossGradient", "FCGradient"]
    assert grads["data"] == "data_grad" and "reader" not in grads


def test_coverage_counts_and_gaps_allow_list() -> None:
    rows = coverage.rows()
    totals = coverage.totals(rows)
    assert totals["forward op types with a schema"] == "629/629"
    assert totals["Caffe2 markers"].startswith("277/277")
    gaps = set(coverage.gaps(rows))
    new = sorted(gaps - coverage.known_gaps())
    assert not new, f"makers emit op types without a kernel while the forward op has one: {new}"
    if coverage.known_gaps() - gaps:
        print("no longer gaps (regenerate with python -m engine.caffe2 --coverage):",
              sorted(coverage.known_gaps() - gaps))


def test_workspace_c_opschema_is_caffe2s_schema() -> None:
    from engine.caffe2 import workspace

    conv = workspace.C.OpSchema.get("Conv")
    assert [n for n, _ in conv.input_desc] == ["X", "filter", "bias"] and (conv.min_input, conv.max_input) == (2, 3)
    sbn = workspace.C.OpSchema.get("SpatialBN")
    assert [sbn.num_inputs_allowed(n) for n in (5, 6, 7)] == [True, False, True]
    assert [(a.name, a.required) for a in sbn.args][0] == ("is_test", True)
    assert workspace.C.OpSchema.get("Iter").inplace_enforced(0, 0)
    assert workspace.C.OpSchema.get("NoSuchOp") is None and workspace.C.OpSchema.get("Sum").max_input == 2 ** 31 - 1


def test_info_lists_every_kind_of_violation_as_a_warning(tmp_path, capsys) -> None:
    net = caffe2_pb2.NetDef(name="bad")
    net.op.extend([create_operator("Relu", ["X", "Z"], ["Y"]),               # wrong arity
                   create_operator("Dropout", ["Y"], ["D", "m"]),            # missing is_test
                   create_operator("Softmax", ["D"], ["D"]),                 # illegal in-place
                   create_operator("Frobnicate", ["D"], ["E"])])             # not a Caffe2 op
    path = tmp_path / "bad.pbtxt"
    path.write_text(str(net))
    assert main(["info", str(path)]) == 0
    warnings = [ln.strip() for ln in capsys.readouterr().out.splitlines() if "warning:" in ln]
    assert warnings == [
        "warning: bad: op #0 Relu '': Input size 2 not in range [min=1, max=1].",
        "warning: bad: op #1 Dropout '': Argument 'is_test' is required for Operator 'Dropout'.",
        "warning: bad: op #2 Softmax '': Input index 0 and output idx 0 (D) are set to be in-place but this is "
        "actually not supported by op Softmax",
        "warning: bad: op #3 Frobnicate '': 'Frobnicate' is not a Caffe2 op",
    ]


def test_registries_hold_only_caffe2_op_types() -> None:
    """Every kernel, maker and shape rule is for an op type Caffe2 1.10.2 registers."""
    from engine.catalogue.registry import GRADIENTS, KERNELS, SHAPES

    extras = {"ReluFp16"}  # engine/runtime/ops/activation.py: a maker and shape rule for a type this build lacks
    assert {t for table in (KERNELS, GRADIENTS, SHAPES) for t in table if not is_caffe2_op(t)} <= extras


@pytest.mark.parametrize("module", ["engine.catalogue", "engine.catalogue.category", "engine.catalogue.docs",
                                    "engine.catalogue.facts", "engine.catalogue.schema"])
def test_docstring_examples_run(module: str) -> None:
    import doctest
    import importlib

    assert doctest.testmod(importlib.import_module(module)).failed == 0
