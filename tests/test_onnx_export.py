"""`netviz export NET -o OUT.onnx` and `netviz diff NET OUT.onnx` on real nets (issue #34).

Every net here is exported through the CLI, the file is read back and passes ``onnx.checker`` (full
check), and the diff runs the net in the engine and the model in ONNX Runtime on the same inputs and
finds every output and intermediate equal within float32 tolerance.  Nets with an op that has no
faithful ONNX form must stop with one line naming those ops.  Nets: the model zoo (weightless:
``--random-params``, seeded), the bundled examples (control flow and the LSTM), and the ONNX-exported
and builder nets of the test corpus (their own init nets, inputs from the goldens).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="netviz[onnx] not installed (pip install 'netviz[onnx]')")
pytest.importorskip("onnxruntime", reason="netviz[onnx] not installed (pip install 'netviz[onnx]')")

from engine.model.modelio import load_net  # noqa: E402
from netviz.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
EXAMPLES = ROOT / "examples"

#: zoo nets whose every op has an ONNX form (weightless: --random-params; one 224x224 image)
ZOO_CLEAN = ["resnet50", "densenet121", "inception_v1", "inception_v2", "vgg19", "bvlc_alexnet", "zfnet512"]
#: zoo detection nets and the ops that stop their export (one line names them all; BBoxTransform converts
#: since issue #44, and an op reading a refused op's output is not named again)
ZOO_STOPPED = {
    "detectron_e2e_faster_rcnn_R-50-C4_1x/predict_net.pbtxt": ["GenerateProposals", "BoxWithNMSLimit"],
    "mask_rcnn_2go_fp32/model.pbtxt": ["GenerateProposals", "BoxWithNMSLimit"],
    "mask_rcnn_2go_int8/model.pbtxt": ["GenerateProposals", "BoxWithNMSLimit"],
}
#: test-corpus nets (tests/golden/builders*) that export and diff clean: inference nets and the
#: forward sections of training nets
CORPUS_CLEAN = [
    "builders/attention_dot", "builders/attention_recurrent", "builders/attention_regular",
    "builders/attention_soft_coverage", "builders/char_rnn", "builders/data_parallel_cpu",
    "builders/mlp_adadelta", "builders/mlp_adagrad", "builders/mlp_adam", "builders/mlp_decay_adagrad",
    "builders/mlp_ftrl", "builders/mlp_gftrl", "builders/mlp_rms_prop", "builders/mlp_sgd",
    "builders/mlp_sgd_momentum", "builders/mlp_sgd_nesterov_wd", "builders/mlp_storm", "builders/mlp_wngrad",
    "builders/mlp_yellowfin", "builders/resnet32x32_test", "builders/resnet32x32_train",
    "builders/resnext18_4x2d_test", "builders/resnext18_4x2d_train", "builders/rnn_gru",
    "builders/rnn_layernorm_lstm", "builders/rnn_lstm", "builders/rnn_lstm_2layer",
    "builders/rnn_lstm_forward_only", "builders/rnn_lstm_memopt", "builders/rnn_milstm",
    "builders/seq2seq_attention", "builders/seq2seq_beam_search", "builders/seq2seq_beam_search_ensemble",
    "builders/shufflenet_v2_test", "builders/shufflenet_v2_train",
    "builders_layers/lr_sgd_adagrad", "builders_layers/lr_sgd_adagrad_eval",
    "builders_layers/lr_sgd_adagrad_predict", "builders_layers/multitask_reg",
    "builders_layers/multitask_reg_eval", "builders_layers/multitask_reg_predict",
    "builders_layers/sampled_softmax", "builders_layers/sampled_softmax_eval", "builders_layers/sampled_softmax_predict",
    "builders_layers/softmax_bn_ftrl", "builders_layers/softmax_bn_ftrl_eval", "builders_layers/softmax_bn_ftrl_predict",
    "builders_layers/xent_adam_rowwise", "builders_layers/xent_adam_rowwise_eval",
    "builders_layers/xent_adam_rowwise_predict",
    "builders_onnx/onnx_cnn",
    "builders_onnx/onnx_cnn_grad", "builders_onnx/onnx_decoder", "builders_onnx/onnx_decoder_grad",
    "builders_onnx/onnx_mlp", "builders_onnx/onnx_mlp_grad", "builders_onnx/onnx_resblock",
    "builders_onnx/onnx_resblock_grad", "builders_onnx/onnx_seqconv", "builders_onnx/onnx_seqconv_grad",
]
#: the other corpus nets: each stops with one line naming its ops without an ONNX form
CORPUS_STOPPED = sorted(p.relative_to(GOLDEN).with_suffix("").as_posix() for p in GOLDEN.glob("builders*/*.json")
                        if p.relative_to(GOLDEN).with_suffix("").as_posix() not in CORPUS_CLEAN)


def _cli(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


def _export_and_diff(capsys, tmp_path: Path, net: Path, *opts: object) -> str:
    """Export, check the file, diff; the diff's output (asserted clean)."""
    out = tmp_path / "net.onnx"
    rc, text, err = _cli(capsys, "export", net, "-o", out, *opts)
    assert rc == 0, err
    assert text.startswith(f"wrote {out}") and "onnx.checker: ok" in text
    model = onnx.load(str(out))
    onnx.checker.check_model(model, full_check=True)
    rc, text, err = _cli(capsys, "diff", net, out, *opts)
    assert rc == 0, text + err
    assert "all equal within tolerance" in text, text
    return text


def _golden_args(case: str, tmp: Path) -> list[str]:
    """--init and --input for a test-corpus case: its init net and the golden's own input arrays."""
    meta = json.loads((GOLDEN / f"{case}.json").read_text())
    net = load_net(GOLDEN / meta["net"])
    made = {o for op in load_net(GOLDEN / meta["init"]).op for o in op.output} if meta.get("init") else set()
    args = ["--init", str(GOLDEN / meta["init"])] if meta.get("init") else []
    with np.load(GOLDEN / f"{case}.npz") as z:
        for b in net.external_input:
            if b not in made and f"in/{b}" in z.files:
                path = tmp / f"in{len(args)}.npy"
                np.save(path, z[f"in/{b}"])
                args += ["--input", f"{b}={path}"]
            elif b not in made and b in meta.get("drawn", {}):
                args += ["--input", f"{b}={','.join(map(str, meta['drawn'][b]['shape']))}"]
    return args


@pytest.mark.parametrize("name", ZOO_CLEAN)
def test_zoo_net_exports_and_matches_onnxruntime(name, zoo, tmp_path, capsys):
    text = _export_and_diff(capsys, tmp_path, zoo / name / "predict_net.pbtxt", "--random-params")
    n_ops = len(load_net(zoo / name / "predict_net.pbtxt").op)
    assert f"of {n_ops} ops compared" in text  # every op's outputs, intermediates included


@pytest.mark.parametrize("rel", sorted(ZOO_STOPPED))
def test_detection_nets_name_the_ops_that_stop_them(rel, zoo, tmp_path, capsys):
    info = tmp_path / "im_info.npy"
    np.save(info, np.array([[192, 192, 1.0]], np.float32))
    out = tmp_path / "det.onnx"
    rc, text, err = _cli(capsys, "export", zoo / rel, "-o", out, "--random-params", "--input", "data=1,3,192,192",
                         "--input", f"im_info={info}")
    lines = [ln for ln in err.splitlines() if not ln.startswith("netviz: note")]
    assert rc == 2 and len(lines) == 1 and "no faithful ONNX form" in lines[0], err
    for op_type in ZOO_STOPPED[rel]:
        assert f"{op_type} (op #" in lines[0]
    assert "BBoxTransform" not in lines[0]
    assert not out.exists()


@pytest.mark.parametrize("name", sorted(p.parent.name for p in EXAMPLES.glob("*/predict_net.pb")))
def test_bundled_example_exports_and_matches_onnxruntime(name, tmp_path, capsys):
    _export_and_diff(capsys, tmp_path, EXAMPLES / name / "predict_net.pb")


@pytest.mark.parametrize("cond", [True, False])
def test_if_example_both_branches(cond, tmp_path, capsys):
    """The If becomes an ONNX If: the diff agrees whichever branch the condition picks."""
    path = tmp_path / "cond.npy"
    np.save(path, np.array([cond]))
    _export_and_diff(capsys, tmp_path, EXAMPLES / "if_net" / "predict_net.pb", "--input", f"cond={path}")


def test_while_loop_runs_inside_onnx(tmp_path, capsys):
    """The While is an ONNX Loop (not unrolled): the model holds one Loop node."""
    _export_and_diff(capsys, tmp_path, EXAMPLES / "while_net" / "predict_net.pb")
    assert [n.op_type for n in onnx.load(str(tmp_path / "net.onnx")).graph.node].count("Loop") == 1


@pytest.mark.parametrize("case", CORPUS_CLEAN)
def test_corpus_net_exports_and_matches_onnxruntime(case, tmp_path, capsys):
    meta = json.loads((GOLDEN / f"{case}.json").read_text())
    _export_and_diff(capsys, tmp_path, GOLDEN / meta["net"], *_golden_args(case, tmp_path))


@pytest.mark.parametrize("case", CORPUS_STOPPED)
def test_corpus_net_without_onnx_form_names_its_ops(case, tmp_path, capsys):
    meta = json.loads((GOLDEN / f"{case}.json").read_text())
    rc, _, err = _cli(capsys, "export", GOLDEN / meta["net"], "-o", tmp_path / "n.onnx", *_golden_args(case, tmp_path))
    lines = [ln for ln in err.splitlines() if not ln.startswith("netviz: note")]
    assert rc == 2 and len(lines) == 1 and "no faithful ONNX form" in lines[0] and "op #" in lines[0], err


def test_blob_names_and_ssa_versions(zoo, tmp_path, capsys):
    """Caffe2 blob names are the ONNX value names; an in-place write (Relu on a SpatialBN output)
    is the blob's next version `name@1`; the init net's values are initializers."""
    net = zoo / "resnet50" / "predict_net.pbtxt"
    out = tmp_path / "r.onnx"
    assert _cli(capsys, "export", net, "-o", out, "--random-params")[0] == 0
    g = onnx.load(str(out)).graph
    names = {o for n in g.node for o in n.output}
    assert [i.name for i in g.input] == ["gpu_0/data"] and [o.name for o in g.output] == ["gpu_0/softmax"]
    assert {"gpu_0/conv1", "gpu_0/res_conv1_bn", "gpu_0/res_conv1_bn@1", "gpu_0/pool5"} <= names
    assert "gpu_0/conv1_w" in {t.name for t in g.initializer}


def test_diff_finds_a_wrong_model(zoo, tmp_path, capsys):
    """A model changed after export (one Relu made a Sigmoid) is caught at that op, values side by side."""
    net = zoo / "bvlc_alexnet" / "predict_net.pbtxt"
    out = tmp_path / "a.onnx"
    assert _cli(capsys, "export", net, "-o", out, "--random-params")[0] == 0
    model = onnx.load(str(out))
    relu = next(n for n in model.graph.node if n.op_type == "Relu" and n.output[0].startswith("conv2"))
    relu.op_type = "Sigmoid"
    onnx.save(model, str(out))
    rc, text, _ = _cli(capsys, "diff", net, out, "--random-params")
    assert rc == 1
    first = next(ln for ln in text.splitlines() if ln.startswith("first difference"))
    assert "Relu" in first and f"output '{relu.output[0].split('@')[0]}'" in first
    assert "engine" in text and "onnxruntime" in text


def test_random_params_are_repeatable(zoo, tmp_path, capsys):
    net = zoo / "zfnet512" / "predict_net.pbtxt"
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    for out in (a, b):
        assert _cli(capsys, "export", net, "-o", out, "--random-params")[0] == 0
    ia = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(str(a)).graph.initializer}
    ib = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(str(b)).graph.initializer}
    assert ia.keys() == ib.keys() and all(np.array_equal(ia[k], ib[k]) for k in ia)


def test_weightless_net_without_random_params_says_how(zoo, tmp_path, capsys):
    rc, _, err = _cli(capsys, "export", zoo / "vgg19" / "predict_net.pbtxt", "-o", tmp_path / "v.onnx")
    assert rc == 2 and len(err.splitlines()) == 1 and "--random-params" in err


def test_opset_choice(tmp_path, capsys):
    net = EXAMPLES / "mlp_forward" / "predict_net.pb"
    out = tmp_path / "net.onnx"
    assert _cli(capsys, "export", net, "-o", out, "--opset", "13")[0] == 0
    assert onnx.load(str(out)).opset_import[0].version == 13
    assert _cli(capsys, "diff", net, out)[0] == 0
    rc, _, err = _cli(capsys, "export", net, "-o", tmp_path / "old.onnx", "--opset", "9")
    assert rc == 2 and "opset 13 or newer" in err


@pytest.mark.parametrize("opset", [13, 18, 21])
@pytest.mark.parametrize("name", ["lstm", "nested_if_in_while"])
def test_other_opsets(name, opset, tmp_path, capsys):
    """Reductions take their axes as inputs from opset 18; the Loop / If / RNN forms hold in each."""
    net, out = EXAMPLES / name / "predict_net.pb", tmp_path / "m.onnx"
    assert _cli(capsys, "export", net, "-o", out, "--opset", opset)[0] == 0
    assert onnx.load(str(out)).opset_import[0].version == opset
    rc, text, _ = _cli(capsys, "diff", net, out)
    assert rc == 0 and "all equal within tolerance" in text


def test_unwritable_target_is_one_line(tmp_path, capsys):
    rc, _, err = _cli(capsys, "export", EXAMPLES / "mlp_forward" / "predict_net.pb", "-o", tmp_path / "no" / "m.onnx")
    assert rc == 2 and len(err.splitlines()) == 1 and "cannot write it" in err


def test_coverage_doc_lists_every_converter():
    """docs/onnx.md's tables come from the converter table: every converted op is listed with how."""
    from engine.onnx.coverage import families, render
    from engine.catalogue.registry import ONNX

    text = render()
    converted = [t for yes, _ in families().values() for t in yes]
    assert converted and all(t in ONNX for t in converted)
    assert all(f"| {t} | " in text for t in converted)
    assert "Caffe2 1.10.2's own frontend" in text and f"netviz converts **{len(converted)}**" in text
    assert (ROOT / "docs" / "onnx.md").read_text() == text, "docs/onnx.md is stale: python -m engine.onnx.coverage"


def test_missing_onnx_says_how_to_install(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)  # NOTE: `import onnx` now raises ImportError
    rc, _, err = _cli(capsys, "export", EXAMPLES / "mlp_forward" / "predict_net.pb", "-o", tmp_path / "m.onnx")
    assert rc == 2 and len(err.splitlines()) == 1 and "pip install 'netviz[onnx]'" in err


def test_tui_export_offers_onnx(tmp_path):
    """`e` → "ONNX model" (the third row) writes the model, checked against ONNX Runtime, and says so."""
    from netviz.app import NetvizApp
    from netviz.screens.pick import PickScreen
    from netviz.session import Session
    from tests.netviz.waiting import answer, asynctest, notified, ready, wait_for

    target = tmp_path / "mlp.onnx"

    @asynctest
    async def run():
        app = NetvizApp(Session.open(EXAMPLES / "mlp_forward" / "predict_net.pb"))
        async with app.run_test(size=(160, 48), notifications=True) as pilot:
            await ready(pilot)
            await pilot.press("e")
            await wait_for(pilot, lambda: isinstance(app.screen, PickScreen), "the export choice")
            await pilot.pause()
            await pilot.press("down", "down", "enter")
            await answer(pilot, app, str(target))
            await wait_for(pilot, lambda: notified(app, f"wrote {target}"), "the ONNX export", timeout=60)
            assert notified(app, "values equal in ONNX Runtime")
    run()
    onnx.checker.check_model(onnx.load(str(target)), full_check=True)


def _unlisted_if_net():
    """``x = x * 2 if cond else x + 1; y = Relu(x)`` with an If that lists no outputs, as hand-written
    nets do (Caffe2 runs the branch in the same workspace, so x changes all the same)."""
    from engine.model.opdef import create_operator as op  # noqa: PLC0415
    from proto import caffe2_pb2  # noqa: PLC0415

    two = op("ConstantFill", [], "two", shape=[1], value=2.0)
    one = op("ConstantFill", [], "one", shape=[1], value=1.0)
    then = caffe2_pb2.NetDef(name="then", op=[op("Mul", ["x", "two"], "x")])
    other = caffe2_pb2.NetDef(name="else", op=[op("Add", ["x", "one"], "x")])
    net = caffe2_pb2.NetDef(name="unlisted_if", op=[two, one, op("If", ["cond"], [], then_net=then, else_net=other),
                                                    op("Relu", "x", "y")])
    net.external_input.extend(["x", "cond"])
    net.external_output.append("y")
    return net


def test_while_and_if_that_list_no_outputs_carry_what_they_write(tmp_path, capsys):
    """A While or If listing no outputs still changes the blobs its subnets write: the Loop carries the
    counter and x (it ran forever in ONNX Runtime, reading the counter from before the loop) and the If
    returns x; the diff is clean and y is the engine's (3 doubled three times; 3 doubled, or plus one)."""
    from engine.model.modelio import save_net  # noqa: PLC0415
    from tests.netviz.tui_nets import while_net  # noqa: PLC0415

    x = tmp_path / "x.npy"
    np.save(x, np.array([3.0], np.float32))
    net = tmp_path / "while.pb"
    save_net(while_net(), net)
    _export_and_diff(capsys, tmp_path, net, "--input", f"x={x}")
    model = onnx.load(str(tmp_path / "net.onnx"))
    loop = next(n for n in model.graph.node if n.op_type == "Loop")
    assert len(loop.output) == 3  # x, i and the condition
    for cond, want in ((True, 6.0), (False, 4.0)):
        c = tmp_path / f"cond{cond}.npy"
        np.save(c, np.array([cond]))
        path, where = tmp_path / f"if{cond}.pb", tmp_path / f"if{cond}"
        save_net(_unlisted_if_net(), path)
        where.mkdir()
        _export_and_diff(capsys, where, path, "--input", f"x={x}", "--input", f"cond={c}")
        import onnxruntime as ort  # noqa: PLC0415
        got = ort.InferenceSession(str(where / "net.onnx")).run(
            ["y"], {"x": np.array([3.0], np.float32), "cond": np.array([cond])})[0]
        assert got.tolist() == [want]


def test_a_runtime_run_that_never_ends_is_cancelled():
    """ONNX Runtime's run is one C call: a Loop whose condition never falls is stopped through its
    terminate flag when the diff's cancel event fires (Esc, or the TUI quitting), as one ExecutionError."""
    import threading  # noqa: PLC0415

    from onnx import TensorProto, helper  # noqa: PLC0415

    from engine.errors import ExecutionError  # noqa: PLC0415
    from engine.onnx.export import runtime_values  # noqa: PLC0415

    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node("Add", ["v_in", "v_in"], ["v_out"])],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [1])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["", "cond", "x"], ["y"], body=body)], "forever",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    with pytest.raises(ExecutionError, match="cancelled"):
        runtime_values(model, {"cond": np.array(True), "x": np.zeros(1, np.float32)}, [], cancel)
