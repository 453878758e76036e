"""Every gradient maker and marker against real Caffe2, on the oracle's probe op of each op type.

The probes and Caffe2's answers are in ``engine/catalogue/ops.json`` (``tests/oracle/gen_catalogue.py``).
A maker must emit byte-identical gradient ops (text proto) and the same input-gradient names; a
marker must do what Caffe2's does (no ops, or Caffe2's error text). Ops whose maker no one has
written yet are xfail, so the count of known gaps is printed.
"""
from __future__ import annotations

import pytest
from google.protobuf import text_format

import engine.runtime.ops  # noqa: F401 - fills the registries
from engine.catalogue import facts, forward_ops
from engine.caffe2.coverage import _grad_json, comparable, run_probe
from engine.runtime.grad_makers import MARKERS, GradientMakerError
from engine.catalogue.registry import GRADIENTS

MAKER_OPS = [t for t in forward_ops() if facts(t).gradient == "has_gradient"]
MARKER_OPS = [t for t in forward_ops()
              if facts(t).gradient in ("NO_GRADIENT", "SHOULD_NOT_DO_GRADIENT", "GRADIENT_NOT_IMPLEMENTED_YET")]
NO_MAKER_OPS = [t for t in forward_ops() if facts(t).gradient == "no_maker"]
#: Known deviations, each owned by the family module that registers it (must shrink).
REGISTERED_WITHOUT_CAFFE2_MAKER = {
    "SparseLengthsPositionalWeightedSum": "engine/runtime/ops/segment.py registers NO_GRADIENT; Caffe2 has no maker "
                                          "(a gradient reaching it is an error there)",
}


def _run(op_type: str) -> tuple[list[str], list[object]]:
    ops, g_input = run_probe(facts(op_type))
    return [text_format.MessageToString(g) for g in ops], [_grad_json(g) for g in g_input]


def test_counts_match_the_issue() -> None:
    assert (len(MAKER_OPS), len(MARKER_OPS), len(NO_MAKER_OPS)) == (233, 277, 119)


@pytest.mark.parametrize("op_type", MAKER_OPS)
def test_maker_matches_caffe2_on_probe(op_type: str) -> None:
    if op_type not in GRADIENTS:
        pytest.xfail("no gradient maker written yet")
    p = facts(op_type).probe
    got, g_input = _run(op_type)
    assert comparable(got) == comparable(p["grad_ops"])  # text protos; While's lists as sets
    assert g_input == p["g_input"]


@pytest.mark.parametrize("op_type", MARKER_OPS)
def test_marker_matches_caffe2(op_type: str) -> None:
    p = facts(op_type).probe
    if "error" not in p:  # NO_GRADIENT: no ops, no input gradients
        assert _run(op_type) == (p["grad_ops"], p["g_input"])
        return
    with pytest.raises(GradientMakerError) as e:
        _run(op_type)
    assert p["error"].endswith("] . " + e.value.caffe2_message), (p["error"], e.value.caffe2_message)


@pytest.mark.parametrize("op_type", NO_MAKER_OPS)
def test_ops_without_caffe2_maker_have_none(op_type: str) -> None:
    """Reaching such an op must fail: no maker, or a marker that raises (only the text differs)."""
    if op_type in REGISTERED_WITHOUT_CAFFE2_MAKER:
        pytest.xfail(REGISTERED_WITHOUT_CAFFE2_MAKER[op_type])
    maker = GRADIENTS.get(op_type)
    assert maker in (None, MARKERS["SHOULD_NOT_DO_GRADIENT"], MARKERS["GRADIENT_NOT_IMPLEMENTED_YET"]), \
        f"Caffe2 has no gradient maker for {op_type}; netviz registers one that does not fail"
