"""netviz on training nets built by Caffe2's own builders (goldens from tests/oracle/gen_builders.py).

Per case: the net's sections as engine.training sees them match where Caffe2's builder put its
ops; the backward pass netviz generates for the forward section is the one Caffe2 generated
(same ops, names and arguments); running the whole net from the frozen parameters gives Caffe2's
forward values, gradients and updated parameters (relative error ≤ the case's rtol, 1e-3).
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format

from engine import executor
from engine.gradient_ir import IR
from engine.modelio import load_net
from engine.training import BACKWARD, FORWARD, seeds_of, split_training_net
from engine.workspace import Workspace

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
CASES = sorted(p.stem for p in (GOLDEN / "builders").glob("*.json"))

#: case → why netviz differs from Caffe2 there (each one a documented gap, xfail strict)
KNOWN: dict[str, str] = {
}
#: below this fraction of a case's largest gradient a value is rounding noise of an exact zero
#: (biases of convs that feed a training-mode SpatialBN: the batch mean removes them)
NOISE = 1e-3


def _load(name: str) -> tuple[dict, object, dict[str, np.ndarray]]:
    meta = json.loads((GOLDEN / "builders" / f"{name}.json").read_text())
    net = load_net(GOLDEN / meta["net"])
    with np.load(GOLDEN / "builders" / f"{name}.npz") as z:
        arrays = {k: z[k] for k in z.files}
    return meta, net, arrays


def _xfail(name: str, what: str) -> None:
    reason = KNOWN.get(f"{name}:{what}")
    if reason:
        pytest.xfail(reason)


def _key(op) -> str:
    return text_format.MessageToString(op, as_one_line=True)


@pytest.mark.parametrize("name", CASES)
def test_sections_match_where_the_builder_put_its_ops(name):
    meta, net, _ = _load(name)
    split = split_training_net(net)
    assert split.indices(FORWARD) == list(range(meta["num_forward_ops"]))
    flagged = [i for i, op in enumerate(net.op) if op.is_gradient_op]
    assert set(flagged) <= set(split.indices(BACKWARD))
    if meta["num_forward_ops"] < meta["num_ops"]:
        assert split.losses == meta["losses"]
        assert split.paired_by == "regenerated" or split.paired_by == "regenerated+names" and all(
            split.partner[i] is None or i not in split.partner for i in split.indices(BACKWARD)
            if net.op[i].type == "ConstantFill")


@pytest.mark.parametrize("name", CASES)
def test_generated_backward_pass_is_caffe2s(name):
    meta, net, _ = _load(name)
    if meta["num_forward_ops"] == meta["num_ops"]:
        pytest.skip("forward-only net")
    _xfail(name, "ops")
    split = split_training_net(net)
    theirs = [net.op[i] for i in split.indices(BACKWARD)]
    seeds = seeds_of(theirs)
    # NOTE: a builder's own seeds (data_parallel_model's ConstantFill(loss) -> loss_grad) are given, not made
    own = not all(g.endswith("_autogen_grad") for g in seeds.values())
    if own:
        theirs = [op for op in theirs if not (op.type == "ConstantFill" and list(op.output) in
                                              ([g] for g in seeds.values()))]
    ys = seeds if own else meta["losses"]
    grad_ops, grads = IR([net.op[i] for i in split.indices(FORWARD)]).GetBackwardPass(ys)
    assert Counter(map(_key, grad_ops)) == Counter(map(_key, theirs))
    assert {p: str(grads[p]) for p in meta["grad_map"]} == meta["grad_map"]


@pytest.mark.parametrize("name", CASES)
def test_running_the_net_gives_caffe2s_values(name):
    meta, net, arrays = _load(name)
    if "run_error" in meta:
        pytest.skip(f"Caffe2 could not run it: {meta['run_error']['error'][:80]}")
    _xfail(name, "values")
    ws = Workspace("builders")
    executor.run_net(load_net(GOLDEN / meta["init"]), ws)  # non-tensor blobs (mutexes); values come next
    for k, v in arrays.items():
        if k.startswith("in/"):
            ws.feed_blob(k[3:], v.reshape(meta["shapes"][k]))
    executor.run_net(net, ws)
    rtol = meta["rtol"]
    floor = NOISE * max((float(np.abs(v).max()) for k, v in arrays.items()
                         if k.startswith("out/") and k.endswith("_grad") and v.size), default=0.0)
    bad = []
    for k, want in arrays.items():
        if k.startswith(("out/", "after/")):
            got = np.asarray(ws.values[k.split("/", 1)[1]])
            want = want.reshape(meta["shapes"][k])  # the .npz holds 0-d arrays as 1-d
            scale = max(float(np.abs(want).max()), floor if k.endswith("_grad") else 0.0) if want.size else 0.0
            err = float(np.abs(got.astype(np.float64) - want).max()) / (scale or 1.0) if want.size else 0.0
            if got.shape != want.shape or err > rtol:
                bad.append(f"{k}: rel err {err:.2e}" if got.shape == want.shape else f"{k}: shape {got.shape}")
    assert not bad, "; ".join(bad)
