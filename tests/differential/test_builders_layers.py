"""Sparse gradients of the layer_model_helper nets (tests/oracle/gen_builders_layers.py) and of the
ONNX-exported embedding (gen_builders_onnx.py's Gather).

test_builders.py checks every builders* case (sections, generated backward ops, values); this
adds what only these nets have: embedding tables whose gradient is a GradientSlice (the ids
that were looked up and one gradient row per id), which netviz's backward pass must name as
Caffe2 does, because the sparse optimizers (SparseAdagrad, RowWiseSparseAdagrad) read exactly
those two blobs; and a trained layer model's workspace (mutex included) checkpoints.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from engine import blobio
from engine.gradient_ir import IR, GradientSlice
from engine.training import FORWARD, split_training_net
from proto import caffe2_pb2
from tests.differential.test_builders import CASES, GOLDEN, _load, _run

SPARSE = [c for c in CASES if json.loads((GOLDEN / f"{c}.json").read_text()).get("grad_slices")]


def test_the_corpus_has_sparse_training_nets():
    assert {c.split("/")[0] for c in SPARSE} >= {"builders_layers", "builders_onnx"}


@pytest.mark.parametrize("name", SPARSE)
def test_embedding_gradients_are_caffe2s_gradient_slices(name):
    meta, net, arrays = _load(name)
    forward = [net.op[i] for i in split_training_net(net).indices(FORWARD)]
    _, grads = IR(forward).GetBackwardPass(meta["losses"])
    for param, want in meta["grad_slices"].items():
        got = grads[param]
        assert isinstance(got, GradientSlice), f"{param}: {got!r}"
        assert {"indices": str(got.indices), "values": str(got.values)} == want
        # one gradient row per looked-up id (duplicates included): the sparse update's contract
        if "in/" + want["indices"] in arrays:
            ids = arrays["in/" + want["indices"]]
            assert arrays["out/" + want["values"]].shape[:ids.ndim] == ids.shape


def test_a_trained_layer_model_checkpoints_every_blob():
    """Save after a training step, as a trainer's checkpoint does: every blob of the workspace
    serializes (the AtomicIter's mutex as Caffe2 writes one: its type, no content) and loads back."""
    meta, net, arrays = _load("builders_layers/lr_sgd_adagrad")
    ws = _run(meta, net, arrays)
    for name, value in ws.values.items():
        proto = caffe2_pb2.BlobProto.FromString(blobio.serialize_blob(name, value))
        back = blobio.deserialize_blob(proto.SerializeToString())[1]
        if name == "iteration_mutex":
            assert (proto.type, proto.content) == ("std::unique_ptr<std::mutex>", b"")
            assert type(back) is type(value) and back.cpp_type == value.cpp_type
        else:
            np.testing.assert_array_equal(back, value, err_msg=name)
