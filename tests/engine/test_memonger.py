"""engine.analysis.memonger: Caffe2's C++ blob recycling (``workspace.C.memonger_*``).

Memongered nets are checked byte for byte against real Caffe2 on every zoo net in
test_capi_transforms.py (golden scenarios); here: memongered ResNet-50 computes the same values with fewer blobs, and
the rules each algorithm keeps (schema check, statics, devices, parallel branches, sizes).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.caffe2 import capi
from engine.analysis import memonger
from engine.errors import ExecutionError, SchemaError
from engine.runtime.executor import run_net
from engine.model.modelio import load_net
from engine.model.opdef import create_operator as op
from engine.runtime.params import synthesize_params
from engine.caffe2.workspace import Workspace
from proto import caffe2_pb2


def _blobs(net: caffe2_pb2.NetDef) -> set[str]:
    return {b for o in net.op for b in [*o.input, *o.output]}


def _net(*ops: caffe2_pb2.OperatorDef, ext_in=(), ext_out=(), name="n") -> caffe2_pb2.NetDef:
    return caffe2_pb2.NetDef(name=name, op=list(ops), external_input=list(ext_in), external_output=list(ext_out))


def _run(net: caffe2_pb2.NetDef, feeds: dict, fetch: str) -> np.ndarray:
    ws = Workspace("memonger-test")
    for k, v in feeds.items():
        ws.feed_blob(k, v)
    run_net(net, ws)
    return np.asarray(ws.fetch_blob(fetch))


@pytest.fixture(scope="module")
def resnet(zoo: Path) -> tuple[caffe2_pb2.NetDef, dict]:
    net = load_net(str(zoo / "resnet50" / "predict_net.pbtxt"))
    feeds = {"gpu_0/data": np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)}
    feeds.update(synthesize_params(net, feeds, width=8, classes=10))
    return net, feeds


def test_resnet50_fewer_blobs_same_softmax(resnet) -> None:
    """Both entry points shrink ResNet-50's 325 activations by about a third; outputs are identical."""
    net, feeds = resnet
    out = net.external_output[0]
    statics = [*net.external_input, *net.external_output]
    acts = sorted(_blobs(net) - set(statics))
    before = _run(net, feeds, out)
    fast = memonger.optimize_inference_net(net, statics)
    dag = memonger.compute_blob_recycling_for_dag(net, [net.external_input[0]], range(len(net.op)), acts)
    for optimized in (fast, dag):
        assert len(_blobs(optimized) - set(statics)) < 0.75 * len(acts)
        assert [o.type for o in optimized.op] == [o.type for o in net.op]
        np.testing.assert_array_equal(_run(optimized, feeds, out), before)


def test_capi_takes_caffe2s_bytes_and_sets() -> None:
    """The bindings take what Caffe2's memonger.py passes: serialized nets, utf-8 bytes, sets."""
    net = _net(op("Relu", "X", "A"), op("Relu", "A", "B"), op("Relu", "B", "C"), op("Relu", "C", "D"),
               ext_in=["X"], ext_out=["D"])
    out = caffe2_pb2.NetDef.FromString(capi.memonger_compute_blob_recycling_for_dag(
        net.SerializeToString(), [b"X"], [0, 1, 2, 3], {b"A", b"B", b"C"}, b"", set(), {}))
    assert [list(o.output) for o in out.op] == [["__m0_shared"], ["B"], ["__m0_shared"], ["D"]]
    fast = caffe2_pb2.NetDef.FromString(capi.memonger_optimize_inference_net(net.SerializeToString(), [b"X", b"D"]))
    assert len(_blobs(fast)) < len(_blobs(net))


def test_schema_violation_is_a_runtime_error() -> None:
    """IndexFreeze must run in place (Caffe2's run_schema_check, as memonger_test expects)."""
    net = _net(op("IndexFreeze", "A", "B"), op("Sum", ["B", "B"], "C"))
    for call in (lambda: memonger.compute_blob_recycling_for_dag(net, ["A"], [0, 1], {"B", "C"}),
                 lambda: memonger.optimize_inference_net(net, [])):
        with pytest.raises(SchemaError, match="in-place") as e:
            call()
        assert isinstance(e.value, RuntimeError)


def test_input_read_before_written_is_refused() -> None:
    net = _net(op("Relu", "B", "C"), op("Relu", "A", "B"))
    with pytest.raises(ExecutionError, match="'B' was not output by an op before"):
        memonger.compute_blob_recycling_for_dag(net, ["A"], [0, 1], {"B", "C"})


def test_fast_leaves_nets_it_cannot_handle() -> None:
    """Other net types, RecurrentNetwork ops and already memongered nets come back as they are."""
    chain = [op("Relu", "X", "A"), op("Relu", "A", "B"), op("Relu", "B", "C")]
    dag = _net(*chain)
    dag.type = "dag"
    rnn = _net(*chain, op("RecurrentNetwork", ["C"], ["D", "E"]))
    done = memonger.optimize_inference_net(_net(*chain, op("Relu", "C", "D")), ["X", "D"])
    for net in (dag, rnn, done):
        assert memonger.optimize_inference_net(net, ["X"]) == net


def test_dag_never_shares_across_parallel_branches() -> None:
    """Two branches from one blob run in either order: a blob freed in one is not reused in the other."""
    net = _net(op("Relu", "X", "A"), op("Relu", "A", "L1"), op("Relu", "L1", "L2"),
               op("Relu", "A", "R1"), op("Relu", "R1", "R2"), op("Sum", ["L2", "R2"], "Y"))
    acts = {"A", "L1", "L2", "R1", "R2"}
    out = memonger.compute_blob_recycling_for_dag(net, ["X"], range(6), acts)
    left = {out.op[i].output[0] for i in (1, 2)}
    right = {out.op[i].output[0] for i in (3, 4)}
    assert not left & right


def test_dag_keeps_devices_and_dont_share_apart() -> None:
    gpu = caffe2_pb2.DeviceOption(device_type=1)
    net = _net(op("Relu", "X", "A"), op("Relu", "A", "B"), op("Relu", "B", "C", device_option=gpu),
               op("Relu", "C", "D"), op("Relu", "D", "E"))
    out = memonger.compute_blob_recycling_for_dag(net, ["X"], range(5), {"A", "B", "C", "D"}, dont_share_blob_names={"B"})
    names = [o.output[0] for o in out.op]
    assert names[2] not in (names[0], names[1], names[3])  # C lives on the GPU
    assert names[1] == "B"                                  # never recycled into nor out of


def test_dag_with_shapes_picks_by_size_and_names_in_scope() -> None:
    """With shapes a freed blob is chosen by size; recycled blobs are named in the namescope."""
    net = _net(op("Relu", "X", "A"), op("Relu", "X", "B"), op("Sum", ["A", "B"], "C"), op("Relu", "C", "D"),
               op("Relu", "D", "E"))
    shapes = {"A": [10], "B": [2], "C": [2], "D": [9], "E": [1]}
    out = memonger.compute_blob_recycling_for_dag(net, ["X"], range(5), set(shapes), "ns/", set(), shapes)
    assert {b for o in out.op for b in o.output if b.startswith("ns/__m")}
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(_run(out, {"X": x}, out.op[-1].output[0]), 2 * x)


_CXX_ORDER = r"""
#include <iostream>
#include <string>
#include <unordered_set>
int main() {
  std::string line;
  while (std::getline(std::cin, line)) {  // one test a line: the keys, space-separated
    std::unordered_set<std::string> s;
    std::string key;
    for (char c : line + " ") {
      if (c != ' ') { key += c; continue; }
      if (!key.empty()) s.insert(key);
      key.clear();
    }
    for (const auto& k : s) std::cout << k << " " << std::hash<std::string>()(k) << " ";
    std::cout << "\n";
  }
}
"""


def test_std_unordered_order_is_libstdcxx(tmp_path: Path) -> None:
    """Hash values and iteration orders (small sets, rehashes, repeated keys, long names) as a
    real libstdc++ gives them; skipped without a C++ compiler."""
    import shutil
    import subprocess
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    (tmp_path / "order.cc").write_text(_CXX_ORDER)
    subprocess.run([cxx, "-O1", "-o", str(tmp_path / "order"), str(tmp_path / "order.cc")], check=True)
    tests = [[f"blob{i}" for i in range(n)] + ["blob0"] for n in (1, 5, 13, 14, 40, 300)]
    tests.append([f"gpu_0/res{i}_branch2a_bn_grad_autosplit_{i % 3}" for i in range(60)])
    run = subprocess.run([str(tmp_path / "order")], input="\n".join(" ".join(t) for t in tests) + "\n",
                         capture_output=True, text=True, check=True)
    for keys, line in zip(tests, run.stdout.splitlines(), strict=True):
        words = line.split()
        assert memonger.std_unordered_order(keys) == words[0::2]
        assert [memonger._std_hash(k) for k in words[0::2]] == [int(h) for h in words[1::2]]


def test_long_chain_needs_no_deep_recursion() -> None:
    """Caffe2 recurses once per op; netviz walks the graph with its own stack (3000 ops)."""
    ops = [op("Relu", f"b{i}", f"b{i + 1}") for i in range(3000)]
    out = memonger.compute_blob_recycling_for_dag(_net(*ops), ["b0"], range(3000), {f"b{i}" for i in range(1, 3000)})
    assert len(_blobs(out)) <= 4


def test_recurrent_step_nets_are_renamed_with_links() -> None:
    """RecurrentNetwork step nets (NetDef or text) are renamed too, and the op records
    ``<blob>.rename`` arguments for its links."""
    from google.protobuf import text_format
    step = _net(op("Relu", "A", "R"))
    rnn = op("RecurrentNetwork", ["A"], ["R", "R_last"], step_net=text_format.MessageToString(step), backward_step_net=step)
    net = _net(op("Relu", "X", "Z"), op("Relu", "Z", "A"), rnn, op("Relu", "R", "Y"))
    out = memonger.compute_blob_recycling_for_dag(net, ["X"], range(4), {"Z", "A", "R"})
    rop = out.op[2]
    mapped = {a.name: a.s.decode() for a in rop.arg if a.name.endswith(".rename")}
    assert mapped and all(v.startswith("__m") for v in mapped.values())
    back = next(a.n for a in rop.arg if a.name == "backward_step_net")
    fwd = text_format.Parse(next(a.s for a in rop.arg if a.name == "step_net").decode(), caffe2_pb2.NetDef())
    assert back.op[0].output[0] == fwd.op[0].output[0] == mapped["R.rename"]
