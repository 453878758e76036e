"""Sparse gradients of the layer_model_helper nets (tests/oracle/gen_builders_layers.py) and of the
ONNX-exported embedding (gen_builders_onnx.py's Gather).

test_builders.py checks every builders* case (sections, generated backward ops, values); this
adds what only these nets have: embedding tables whose gradient is a GradientSlice (the ids
that were looked up and one gradient row per id), which netviz's backward pass must name as
Caffe2 does, because the sparse optimizers (SparseAdagrad, RowWiseSparseAdagrad) read exactly
those two blobs; a trained layer model's workspace (mutex included) checkpoints, and a
checkpointed PackRecords reservoir loads as Caffe2's does (null records, a restarted count).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from engine.runtime import blobio
from engine.errors import NetvizError
from engine.runtime.workspace import eval_op
from engine.autodiff.gradient_ir import IR, GradientSlice
from engine.autodiff.training import FORWARD, split_training_net
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


def test_a_checkpointed_packed_reservoir_loads_null_and_restarts():
    """ReservoirSampling over PackRecords (layers_test's object-id reservoir): Caffe2 serializes a
    pack's records as their type alone, so after a checkpoint the reservoir holds null records and
    the next run starts counting again; unpacking null records is an error (Caffe2 crashes)."""
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    (packed,) = eval_op("PackRecords", x, fields=["x"])
    proto = caffe2_pb2.BlobProto.FromString(blobio.serialize_blob("packed", packed))
    assert proto.tensor.data_type == caffe2_pb2.TensorProto.UNDEFINED and list(proto.tensor.dims) == [3]
    assert {caffe2_pb2.BlobProto.FromString(r).type for r in proto.tensor.string_data} == {
        "std::shared_ptr<std::vector<TensorCPU>>"}
    loaded = blobio.deserialize_blob(proto.SerializeToString())[1]
    assert loaded.tolist() == [None, None, None]
    (mutex,) = eval_op("CreateMutex")
    res, seen = eval_op("ReservoirSampling", loaded, np.array(5, np.int64), packed[:2], mutex, n_out=2,
                        num_to_collect=4)
    assert int(seen) == 2 and all(r is not None for r in res)
    with pytest.raises(NetvizError, match="null records"):
        eval_op("UnPackRecords", loaded, fields=["x"])
