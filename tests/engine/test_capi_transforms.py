"""Caffe2's graph passes through ``workspace.C`` (engine.caffe2.capi / engine.analysis.transforms).

The differential tests run tests/oracle/transform_scenarios.py through netviz and compare with
what real Caffe2 gave for the same calls (tests/golden/transforms/scenarios.json, written by
tests/oracle/gen_transforms.py): every small net through AddNNPACK, FuseNNPACKConvRelu,
DeadCodeElim and the graph round trip, text for text; Conv+SpatialBN folds weight for weight;
every zoo net byte for byte (memongered nets included).  The value tests run a zoo CNN with synthesised parameters before
and after each rewrite.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.caffe2 import capi, core, workspace
from engine.errors import ExecutionError
from engine.runtime.executor import run_net
from engine.analysis.lint import fix_caffe2
from engine.model.modelio import load_net
from engine.runtime.params import synthesize_params
from engine.analysis.transforms import run_opt_pass
from proto import caffe2_pb2
from tests.conftest import zoo_nets
from tests.oracle import transform_scenarios as S

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = json.loads((ROOT / "tests" / "golden" / "transforms" / "scenarios.json").read_text())




@pytest.fixture(autouse=True)
def _fresh_workspace():
    workspace.ResetWorkspace()
    yield
    workspace.ResetWorkspace()


def test_registries_answer_as_caffe2() -> None:
    got = {n: [capi.transform_exists(n), capi.workspace_transform_exists(n)] for n in S.NAMES}
    assert got == GOLDEN["exists"]


@pytest.mark.parametrize("name", sorted(GOLDEN["passes"]))
def test_small_net_passes_match_caffe2(name: str) -> None:
    """Each pass gives Caffe2's NetDef text (names, op order, externals, args), or its RuntimeError."""
    net = S.small_nets(caffe2_pb2)[name]
    data = net.SerializeToString()
    want = GOLDEN["passes"][name]
    for p in ("AddNNPACK", "FuseNNPACKConvRelu", "DeadCodeElim"):
        assert S._try(lambda p=p: S._text(caffe2_pb2, capi.run_transform(p, data))) == want[p], p
    fused = S._try(lambda: S._text(caffe2_pb2, capi.transform_fuseNNPACKConvRelu(capi.transform_addNNPACK(data))))
    assert fused == want["AddNNPACK+Fuse"]
    assert S._text(caffe2_pb2, capi.transform_optimizeForMKLDNN(data, False)) == want["roundtrip"]
    assert S._text(caffe2_pb2, capi.transform_optimizeForMKLDNN(data, True)) == want["mkldnn_training"]


@pytest.mark.parametrize("name", sorted(GOLDEN["apply_transform"]))
def test_apply_transform_matches_caffe2(name: str) -> None:
    """Caffe2's older registry (``workspace.ApplyTransform``): ConvToNNPack and common
    subexpression elimination give Caffe2's net (op order included); unknown keys raise."""
    net = {**S.small_nets(caffe2_pb2), **S.cse_nets(caffe2_pb2)}[name]
    got = {k: S._try(lambda k=k: S._text(caffe2_pb2, capi.apply_transform(k, net.SerializeToString())))
           for k in GOLDEN["apply_transform"][name]}
    assert got == GOLDEN["apply_transform"][name]


@pytest.mark.parametrize("case", S.CONV_BN_CASES, ids=[c[0] for c in S.CONV_BN_CASES])
def test_fuse_conv_bn_folds_as_caffe2(case: tuple) -> None:
    """The fused net is Caffe2's; the folded weights are bit for bit Caffe2's (float32, epsilon
    1e-5 whatever the op says); the fused net computes what Caffe2's fused net computes."""
    got, want = S._conv_bn(capi, caffe2_pb2, workspace, case), GOLDEN["conv_bn"][case[0]]
    assert (got["net"], got["external_input"]) == (want["net"], want["external_input"])
    assert got["params"].keys() == want["params"].keys()
    for b, v in want["params"].items():
        np.testing.assert_array_equal(np.float32(got["params"][b]), np.float32(v), err_msg=b)
    np.testing.assert_allclose(got["before"], want["before"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["after"], want["after"], rtol=1e-4, atol=1e-5)


#: (zoo net, scenario key) -> why netviz's result differs from Caffe2's.
KNOWN_GAPS: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize("path", zoo_nets(), ids=lambda p: p.parent.name)
def test_zoo_net_passes_and_memonger_match_caffe2(zoo: Path, path: Path) -> None:
    """Every pass, both ApplyTransform transforms and both memonger entry points give Caffe2's
    net byte for byte on every zoo net (memonger: shared-blob names included).  A known gap must
    still differ (when it no longer does, drop it from KNOWN_GAPS)."""
    got, want = S._zoo_net(capi, caffe2_pb2, str(path)), GOLDEN["zoo"][path.parent.name]
    assert got.keys() == want.keys()
    for key in want:
        if (path.parent.name, key) in KNOWN_GAPS:
            assert got[key] != want[key], f"{key} now matches Caffe2: remove it from KNOWN_GAPS"
        else:
            assert got[key] == want[key], key


def test_gradient_blob_sharing_matches_caffe2() -> None:
    """share_grad_blobs' call on a two-branch training net (gradients, then gradients and
    activations): Caffe2's net text exactly."""
    assert S._grad_memonger(capi, caffe2_pb2, core) == GOLDEN["grad_memonger"]


def test_memonger_renames_inside_rnn_and_async_if_as_caffe2() -> None:
    """Step nets (text and NetDef), ``<blob>.rename`` links and AsyncIf branches: Caffe2's text."""
    assert S._subnet_memonger(capi, caffe2_pb2) == GOLDEN["subnet_memonger"]


def test_bindings_read_their_own_registry() -> None:
    """run_transform knows only graph passes, run_workspace_transform only workspace passes;
    transform_fuseConvBN prints a bare NetDef (no name, no net arguments)."""
    assert S._bindings(capi, caffe2_pb2, workspace) == GOLDEN["bindings"]


def test_unknown_pass_is_a_runtime_error() -> None:
    with pytest.raises(RuntimeError, match="Pass doesn't exist: SinkMaxPool"):
        capi.run_transform("SinkMaxPool", caffe2_pb2.NetDef().SerializeToString())


def _resnet(zoo: Path) -> tuple[caffe2_pb2.NetDef, dict[str, np.ndarray]]:
    """ResNet-50 from the zoo with synthesised parameters (8 filters a layer) and one image."""
    net = load_net(str(zoo / "resnet50" / "predict_net.pbtxt"))
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    feeds = {"gpu_0/data": x}
    feeds.update(synthesize_params(net, feeds, width=8, classes=10))
    return net, feeds


def _run(net: caffe2_pb2.NetDef, feeds: dict[str, np.ndarray], fetch: str) -> np.ndarray:
    ws = workspace.Workspace("test")
    for k, v in feeds.items():
        ws.feed_blob(k, v)
    run_net(net, ws)
    return np.asarray(ws.fetch_blob(fetch))


def test_resnet50_values_survive_every_rewrite(zoo: Path) -> None:
    """FuseConvBN (ResNet-50's epsilon is 1e-5, so the fold is exact up to rounding), then
    AddNNPACK + FuseNNPACKConvRelu on the folded net, then DeadCodeElim: same softmax."""
    net, feeds = _resnet(zoo)
    out = net.external_output[0]
    before = _run(net, feeds, out)
    ws = workspace.current()
    for k, v in feeds.items():
        ws.feed_blob(k, v)
    folded = run_opt_pass("FuseConvBN", net)
    assert [op.type for op in folded.op].count("SpatialBN") == 0
    assert len(folded.op) == len(net.op) - 53
    params = {k: np.asarray(ws.fetch_blob(k)) for k in ws.blobs()}
    np.testing.assert_allclose(_run(folded, params, out), before, rtol=1e-4, atol=1e-6)
    fused = run_opt_pass("FuseNNPACKConvRelu", run_opt_pass("AddNNPACK", folded))
    assert sum(op.engine == "NNPACK" for op in fused.op) > 0
    assert sum(op.type == "Relu" for op in fused.op) < sum(op.type == "Relu" for op in folded.op)
    np.testing.assert_allclose(_run(fused, params, out), before, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(_run(run_opt_pass("DeadCodeElim", fused), params, out), before, rtol=1e-4, atol=1e-6)


def _conv_bn_net(eps: float) -> caffe2_pb2.NetDef:
    return S._net(caffe2_pb2, "cbn", [S._op(caffe2_pb2, "Conv", ["X", "w", "b"], ["Y"], kernel=3, order="NCHW"),
                                      S._op(caffe2_pb2, "SpatialBN", ["Y", "s", "o", "m", "v"], ["Z"], is_test=1,
                                            epsilon=eps)], ["X", "w", "b", "s", "o", "m", "v"], ["Z"])


@pytest.mark.parametrize("fix", [False, True])
def test_fuse_conv_bn_epsilon_is_caffe2s_unless_fixed(fix: bool) -> None:
    """Caffe2 folds with 1e-5 and ignores epsilon=0.01; under fix_caffe2() the op's epsilon is used
    and the fused net computes the original's values."""
    rng = np.random.default_rng(1)
    feeds = {"X": rng.random((1, 2, 6, 6)), "w": rng.random((2, 2, 3, 3)), "b": rng.random(2),
             "s": rng.random(2), "o": rng.random(2), "m": rng.random(2), "v": rng.random(2) + 0.5}
    for k, v in feeds.items():
        workspace.FeedBlob(k, v.astype(np.float32))
    net = _conv_bn_net(0.01)
    workspace.RunNetOnce(net)
    before = workspace.FetchBlob("Z")
    with fix_caffe2(fix):
        workspace.RunNetOnce(run_opt_pass("FuseConvBN", net))
    diff = np.abs(workspace.FetchBlob("Z") - before).max()
    assert (diff < 1e-5) if fix else (diff > 1e-3)


def test_fusion_removing_an_external_output_is_refused() -> None:
    """Fusing away a blob that is an external output leaves Caffe2 a dangling node (undefined
    behaviour: a RuntimeError on some runs, a net without that output on others); netviz refuses."""
    net = S._net(caffe2_pb2, "fo", [S._conv(caffe2_pb2, "X", "Y"), S._relu(caffe2_pb2, "Y", "Y2")],
                 ["X", "w", "b"], ["Y"])
    with pytest.raises(ExecutionError, match="external input/output"):
        run_opt_pass("FuseNNPACKConvRelu", run_opt_pass("AddNNPACK", net))


def test_apply_transform_if_faster_times_in_private_workspaces() -> None:
    """Both nets run in workspaces of their own (Caffe2): the current workspace gains nothing;
    a threshold no net can beat keeps the original."""
    init = S._net(caffe2_pb2, "init", [S._op(caffe2_pb2, "ConstantFill", [], [b], shape=s, value=0.5)
                                       for b, s in (("X", [1, 2, 5, 5]), ("w", [2, 2, 3, 3]), ("b", [2]))])
    net = S.small_nets(caffe2_pb2)["relu"]
    kept = caffe2_pb2.NetDef.FromString(capi.apply_transform_if_faster(
        "ConvToNNPack", net.SerializeToString(), init.SerializeToString(), 1, 2, 1e9))
    assert kept == net
    assert workspace.Blobs() == []
    with pytest.raises(RuntimeError, match="main_runs"):
        workspace.ApplyTransformIfFaster("ConvToNNPack", net, init, 1, 0)


def test_common_subexpression_elimination_keeps_values() -> None:
    """The merged FC feeds every former reader: the net's outputs are unchanged."""
    net = S.cse_nets(caffe2_pb2)["fc_twice"]
    del net.external_output[:]
    net.external_output.extend(["S", "T"])
    rng = np.random.default_rng(2)
    feeds = {"X": rng.random((2, 3), dtype=np.float32), "W": rng.random((4, 3), dtype=np.float32),
             "b": rng.random(4, dtype=np.float32)}
    merged = workspace.ApplyTransform("CommonSubexpressionElimination", net)
    assert [op.type for op in merged.op].count("FC") == 1
    for out in ("S", "T"):
        np.testing.assert_array_equal(_run(merged, feeds, out), _run(net, feeds, out))
