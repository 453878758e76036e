"""Semantically broken nets: one clear line naming op index, type and blob; state survives.

Each case runs three ways: the executor (``engine.runtime.executor.run_net``), the debugger
(:class:`engine.debugger.Debugger`: it stops with reason "error", keeps the blobs written before
the failing op and continues after an inject) and the CLI (``netviz run``: exit 2, one line on
stderr, no traceback).  Nets are the committed examples, edited, or small hand-built ones.
"""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from engine.debugger.values import ShapeMismatch

from engine.runtime import executor
from engine.caffe2.core import Net
from engine.debugger import Debugger
from engine.errors import ExecutionError, GradientError, NetvizError
from engine.runtime.grad_makers import GradientNotImplementedYetError, NoGradientMakerError
from engine.model.modelio import Model, load_model, save_net
from engine.runtime.ops import control as control_ops
from engine.caffe2.workspace import Workspace
from netviz.cli import main
from proto import caffe2_pb2

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
F32 = np.float32


def _init(**blobs: np.ndarray) -> caffe2_pb2.NetDef:
    """An init net filling each blob with the given float32 or int32 values."""
    init = Net("init")
    for name, v in blobs.items():
        fill = "GivenTensorIntFill" if v.dtype == np.int32 else "GivenTensorFill"
        getattr(init, fill)([], name, shape=list(v.shape), values=v.reshape(-1).tolist())
    return init.Proto()


def _model(build: Callable[[Net], None], name: str, **blobs: np.ndarray) -> Model:
    net = Net(name)
    build(net)
    net.Proto().name = name  # Net() makes names unique ("x_2"); messages below name the net
    return Model(net.Proto(), _init(**blobs), {})


X = np.array([[-1.0, 2.0, 3.0], [4.0, -5.0, 6.0]], F32)


def _relu_then(bad: Callable[[Net], None]) -> Callable[[Net], None]:
    """Relu(X) -> a (op #0), Scale(a) -> a (op #1, in place), then the bad op #2."""
    def build(net: Net) -> None:
        net.Relu("X", "a")
        net.Scale("a", "a", scale=2.0)
        bad(net)
    return build


# name → (net builder for op #2, extra blobs, expected text, blob to inject that fixes it, or None)
CASES: dict[str, tuple[Callable[[Net], None], dict[str, np.ndarray], str, tuple[str, np.ndarray] | None]] = {
    "undefined_input": (lambda n: n.Add(["a", "nope"], "a"), {},
                        "op #2 Add '': input blob 'nope' not found", ("nope", np.ones((2, 3), F32))),
    "wrong_arity": (lambda n: n.Relu(["a", "X"], "a"), {}, "op #2 Relu '': takes 1..1 inputs, got 2", None),
    "too_few_inputs": (lambda n: n.FC(["a"], "a"), {}, "op #2 FC '': takes 2..3 inputs, got 1", None),
    "arg_type": (lambda n: n.Softmax("a", "a", axis="x"), {},
                 "op #2 Softmax '': argument 'axis' must be a number, got 'x'", None),
    "arg_type_conv": (lambda n: n.Conv(["a4", "K"], "a4", kernel="x"),
                      {"a4": np.ones((1, 1, 4, 4), F32), "K": np.ones((1, 1, 3, 3), F32)},
                      "op #2 Conv '': argument 'kernel' must be a number, got 'x'", None),
    "shape_mismatch": (lambda n: n.FC(["a", "W", "b"], "a"), {"W": np.ones((4, 5), F32), "b": np.ones(4, F32)},
                       "op #2 FC '': X has 3 columns (flattened at axis 1) but W has 5", ("W", np.ones((4, 3), F32))),
    "broadcast_mismatch": (lambda n: n.Add(["a", "W"], "a"), {"W": np.ones((4, 5), F32)},
                           "op #2 Add '': inputs it cannot take: inputs of shapes (2,3) (4,5) do not broadcast",
                           ("W", np.ones((1, 3), F32))),
    "dtype_mismatch": (lambda n: n.Add(["a", "I"], "a"), {"I": np.ones((2, 3), np.int32)},
                       "op #2 Add '': an input or argument of the wrong type: A is float32 but B is int32", None),
    "unknown_op": (lambda n: n.NoSuchOp("a", "a"), {}, "op #2 NoSuchOp '': op NoSuchOp is not a Caffe2 op (no kernel)", None),
}


BIND_TIME = {"wrong_arity", "too_few_inputs", "unknown_op"}


def _case_model(case: str) -> Model:
    bad, blobs, _, _ = CASES[case]
    return _model(_relu_then(bad), case, X=X, **blobs)


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("case", CASES)
def test_executor_names_op_and_keeps_earlier_blobs(case: str) -> None:
    m = _case_model(case)
    ws = Workspace("t")
    executor.run_net(m.init, ws)
    with pytest.raises(ExecutionError) as e:
        executor.run_net(m.predict, ws)
    msg = _one_line(str(e.value))
    assert msg.startswith(f"{case}: ") and CASES[case][2] in msg
    if case in BIND_TIME:  # found when the net is created (as Caffe2's CreateNet): nothing ran
        assert "a" not in ws.values and set(ws.values) == {"X", *CASES[case][1]}
    else:
        np.testing.assert_array_equal(ws.values["a"], 2 * np.maximum(X, 0))  # op #2 wrote nothing


@pytest.mark.parametrize("case", CASES)
def test_debugger_stops_keeps_state_and_continues_after_inject(case: str) -> None:
    dbg = Debugger(_case_model(case))
    stop = dbg.continue_()
    assert stop.reason == "error" and CASES[case][2] in _one_line(stop.detail)
    assert stop.pc.path == ("op", 2)
    np.testing.assert_array_equal(dbg.value("a"), 2 * np.maximum(X, 0))
    fix = CASES[case][3]
    if fix is None:
        assert dbg.step_back().reason == "step" and dbg.pc.path == ("op", 1)  # can still move
        return
    name, value = fix
    if name in dbg.frames[-1].ws.values and np.shape(value) != np.shape(dbg.value(name)):  # new shape: confirm
        with pytest.raises(ShapeMismatch):
            dbg.inject(name, value)
    dbg.inject(name, value, reshape=True)
    assert dbg.continue_().reason == "end"
    assert dbg.value("a").shape in {(2, 3), (2, 4)}


@pytest.mark.parametrize("case", CASES)
def test_cli_run_exits_2_with_one_line(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = _case_model(case)
    save_net(m.init, tmp_path / "init_net.pb")
    assert main(["run", str(save_net(m.predict, tmp_path / "predict_net.pb"))]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"netviz: {case}: op #2") and CASES[case][2] in line


def test_cli_error_in_a_fresh_process_has_no_traceback(tmp_path: Path) -> None:
    m = _case_model("undefined_input")
    save_net(m.init, tmp_path / "init_net.pb")
    p = subprocess.run([sys.executable, "-m", "netviz.cli", "run", str(save_net(m.predict, tmp_path / "p.pb")),
                        "--init", str(tmp_path / "init_net.pb")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert _one_line(p.stderr) == ("netviz: undefined_input: op #2 Add '': input blob 'nope' not found; 'nope' is "
                                   "an input of the net that neither the init net nor --input gives: feed it with "
                                   "--input nope=FILE.npy or --input nope=SHAPE")


# ---- real example nets, edited -----------------------------------------------------------

def _example(name: str) -> Model:
    return load_model(EXAMPLES / name / "predict_net.pb")


def test_mlp_with_a_producer_removed_names_the_undefined_blob() -> None:
    m = _example("mlp")
    del m.predict.op[1]  # Relu(fc1) -> relu1 gone: op #1 FC now reads an undefined relu1
    dbg = Debugger(m)
    stop = dbg.continue_()
    assert stop.reason == "error"
    assert stop.detail == f"{m.predict.name}: op #1 FC '': input blob 'relu1' not found"
    fc1 = dbg.value("fc1").copy()
    dbg.inject("relu1", np.maximum(fc1, 0))
    assert dbg.continue_().reason == "end"
    np.testing.assert_array_equal(dbg.value("fc1"), fc1)


@pytest.mark.parametrize("name", ["if_net", "do_net", "nested_if_in_while", "lstm"])
def test_examples_with_an_undefined_input_name_the_blob(name: str) -> None:
    m = _example(name)
    op = next(i for i, op in enumerate(m.predict.op) if op.type == "AveragedLoss")
    m.predict.op[op].input[0] = "not_a_blob"
    with pytest.raises(ExecutionError, match=rf"^{m.predict.name}: op #{op} AveragedLoss '': input blob 'not_a_blob' not found$"):
        ws = Workspace("t")
        executor.run_net(m.init, ws)
        executor.run_net(m.predict, ws)


def test_do_with_duplicate_outputs_is_refused() -> None:
    m = _example("do_net")
    do = m.predict.op[1]
    do.output.insert(1, do.output[0])  # Y, Y, workspace
    stop = Debugger(m).continue_()
    assert stop.reason == "error"
    assert stop.detail == f"{m.predict.name}: op #1 Do '': Found duplicates in Do op outputs"


def _capped_while(cap: int) -> Model:
    m = _example("while_net")
    while_op = m.predict.op[2]
    while_op.arg.add(name="max_iterations", i=cap)
    return m


def test_while_that_exceeds_its_cap_stops_with_a_clear_error() -> None:
    dbg = Debugger(_capped_while(2))  # while_net runs 3 iterations
    acc0 = dbg.value("acc").copy()
    stop = dbg.continue_()
    assert stop.reason == "error"
    assert stop.detail.startswith(f"{dbg.model.predict.name}: op #2 While '': While loop exceeded 2 iterations")
    assert not np.array_equal(dbg.value("acc"), acc0)  # the 2 iterations that ran are kept
    assert Debugger(_capped_while(3)).continue_().reason == "end"


def test_never_ending_while_hits_the_module_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(control_ops, "MAX_WHILE_ITERATIONS", 25)
    from engine.caffe2 import control
    net, body = Net("forever"), Net("body")
    body.Add(["x", "one"], "x")
    net.AddExternalInput("c", "x", "one")
    control.While(net, "c", body, lexical_scope={"c", "x", "one"})
    ws = Workspace("t")
    for k, v in {"c": np.array([True]), "x": np.zeros(1, F32), "one": np.ones(1, F32)}.items():
        ws.feed_blob(k, v)
    with pytest.raises(ExecutionError, match=r"^forever: op #1 While '': While loop exceeded 25 iterations"):
        executor.run_net(net.Proto(), ws)
    assert ws.values["x"][0] == 25.0


def test_cli_run_on_a_never_ending_while_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = _capped_while(1)
    save_net(m.init, tmp_path / "init_net.pb")
    assert main(["run", str(save_net(m.predict, tmp_path / "predict_net.pb"))]) == 2
    assert "op #2 While '': While loop exceeded 1 iterations" in _one_line(capsys.readouterr().err)


def _nested_do(depth: int) -> caffe2_pb2.NetDef:
    """`depth` Do ops, each running the next in its own workspace; Relu(x) -> y innermost."""
    top = cur = caffe2_pb2.NetDef(name="do0")
    for k in range(depth):
        cur.op.add(type="CreateScope", output=["ws"])
        do = cur.op.add(type="Do", input=["x", "ws"], output=["y", "ws"])
        do.arg.add(name="inner_blobs", strings=[b"x", b"y"])
        do.arg.add(name="outer_blobs_idx", ints=[0, 1])
        cur = do.arg.add(name="net").n
        cur.name = f"do{k + 1}"
    cur.op.add(type="Relu", input=["x"], output=["y"])
    return top


def test_deeply_nested_do_is_a_clear_error_not_a_recursion_error() -> None:
    ws = Workspace("t")
    ws.feed_blob("x", -np.ones(3, F32))
    with pytest.raises(ExecutionError, match=rf"op #1 Do '': subnets nested more than {executor.MAX_SUBNET_DEPTH} deep"):
        executor.run_net(_nested_do(500), ws)
    assert not hasattr(ws.values.get("y"), "shape")  # Do creates its outputs empty, as Caffe2 does
    executor.run_net(_nested_do(50), ws)  # a reasonable depth runs, and the state is usable
    np.testing.assert_array_equal(ws.values["y"], np.zeros(3, F32))


def test_debugger_steps_through_500_nested_do_without_recursion() -> None:
    dbg = Debugger(Model(_nested_do(500), caffe2_pb2.NetDef(), {}), {"x": -np.ones(3, F32)})
    assert dbg.continue_().reason == "end"
    np.testing.assert_array_equal(dbg.value("y"), np.zeros(3, F32))


# ---- gradients ----------------------------------------------------------------------------

def _grad_model(op_type: str) -> Model:
    def build(n: Net) -> None:
        n.FC(["X", "W", "b"], "h")
        getattr(n, op_type)("h", "c")
        n.AveragedLoss("c", "loss")
    return _model(build, f"grad_{op_type}", X=X, W=np.ones((4, 3), F32), b=np.zeros(4, F32))


@pytest.mark.parametrize(("op_type", "error", "text"), [
    ("NoSuchOp", NoGradientMakerError, "No gradient registered for op type 'NoSuchOp' (op #1)"),
    ("Ceil", GradientNotImplementedYetError, "Exception when creating gradient for [Ceil] (op #1)"),
])
def test_missing_gradient_maker(op_type: str, error: type, text: str, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    dbg = Debugger(_grad_model(op_type))
    with pytest.raises(error) as e:
        dbg.backward("loss")
    assert text in _one_line(str(e.value))
    assert dbg.num_forward == 3 and dbg.continue_().reason in {"end", "error"}  # forward still usable
    m = _grad_model(op_type)
    save_net(m.init, tmp_path / "init_net.pb")
    path = str(save_net(m.predict, tmp_path / "predict_net.pb"))
    assert main(["grad", path, "--loss", "loss"]) == 2
    assert text in _one_line(capsys.readouterr().err)
    assert main(["run", path, "--loss", "loss"]) == 2
    assert text in _one_line(capsys.readouterr().err)


def test_gradient_error_is_a_netviz_error() -> None:
    assert issubclass(NoGradientMakerError, GradientError) and issubclass(GradientError, NetvizError)


# ---- NaN ----------------------------------------------------------------------------------

def _nan_model() -> Model:
    def build(n: Net) -> None:
        n.Relu("X", "a")
        n.Log("X", "l")          # op #1: log of a negative -> NaN
        n.Relu("l", "z")
    return _model(build, "nan", X=X)


def test_has_inf_or_nan_breakpoint_stops_after_the_op_and_inject_recovers() -> None:
    dbg = Debugger(_nan_model())
    dbg.add_breakpoint("condition", condition="has_inf_or_nan")
    with np.errstate(all="ignore"):
        stop = dbg.continue_()
    assert stop.reason == "condition" and "after l" in stop.detail and stop.pc.path == ("op", 2)
    np.testing.assert_array_equal(dbg.value("a"), np.maximum(X, 0))
    dbg.inject("l", np.nan_to_num(dbg.value("l")))
    assert dbg.continue_().reason == "end"
    assert np.isfinite(dbg.value("z")).all()


def test_cli_break_on_nan_exits_1_on_the_mlp_with_a_nan_input(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    data = np.full((16, 8), np.nan, F32)
    np.save(tmp_path / "data.npy", data, allow_pickle=False)
    mlp = str(EXAMPLES / "mlp" / "predict_net.pb")
    with np.errstate(all="ignore"):
        assert main(["run", mlp, "--input", f"data={tmp_path / 'data.npy'}", "--break-on-nan"]) == 1
    out = capsys.readouterr().out
    assert "NaN/Inf produced by op 0 FC (fc1)" in out  # the op that made it, not the next one


# ---- CUDA without a GPU -------------------------------------------------------------------

def _has_gpu() -> bool:
    try:
        import cupy  # noqa: PLC0415
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001
        return False


def _cuda_model() -> Model:
    m = _model(lambda n: (n.Relu("X", "a"), n.Scale("a", "b", scale=3.0)), "cuda_net", X=X)
    for op in m.predict.op:
        op.device_option.device_type = 1  # CUDA
    return m


@pytest.mark.skipif(_has_gpu(), reason="a GPU is present: the CUDA ops would run")
def test_cuda_ops_without_a_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = _cuda_model()
    stop = Debugger(m, device=None).continue_()
    assert stop.reason == "error" and stop.detail.startswith("cuda_net: op #0 Relu '': CUDA op needs CuPy and a GPU")
    save_net(m.init, tmp_path / "init_net.pb")
    path = str(save_net(m.predict, tmp_path / "predict_net.pb"))
    assert main(["run", path, "--device", "net"]) == 2
    assert "op #0 Relu '': CUDA op needs CuPy and a GPU" in _one_line(capsys.readouterr().err)
    assert main(["run", path, "--device", "cpu"]) == 0
    capsys.readouterr()
    assert main(["run", path, "--device", "gpu"]) == 2
    assert "CUDA" in _one_line(capsys.readouterr().err)


def test_cuda_net_runs_on_the_cpu_with_device_cpu() -> None:
    dbg = Debugger(_cuda_model(), device="cpu")
    assert dbg.continue_().reason == "end"
    np.testing.assert_array_equal(dbg.value("b"), 3 * np.maximum(X, 0))
