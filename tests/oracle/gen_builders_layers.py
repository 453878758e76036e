"""Recommendation nets built with Caffe2's layer_model_helper (kind "builder", folder
builders_layers/): LayerModelHelpers over schemas of dense float features and sparse id-list /
id-score-list features, SparseLookup embeddings (Sum, Mean, Sqrt, Max, LogSumExp, WeightedSum,
PositionWeighted, RecencyWeighted; SparseFeatureHash, MergeIdLists), FC towers with
BatchNormalization / LayerNormalization, a sampled softmax (SamplingTrain),
BatchLRLoss / BatchSigmoidCrossEntropyLoss / BatchSoftmaxLoss / BatchMSELoss + BatchHuberLoss,
regularizers, a global constant, and per-parameter optimizers (SparseAdagrad, RowWiseSparseAdagrad,
SparseAdam, SparseFtrl for embeddings; SGD, momentum SGD, Adam, Adagrad with weight decay for the
dense part); per model the nets layer_model_instantiator makes: the training net (forward, the
generated backward pass, the optimizers), the eval net and the predict net.

Each case is written in gen_builders.py's format, so tests/differential/test_builders.py reads
it: OUT/builders_layers/<case>.pb (the net), <case>_init.pb (train_init_net), <case>.json + .npz
with the frozen parameters and inputs ("in/"), what Caffe2 computes running the net once
("out/": fetched outputs, dense parameter gradients and the values of sparse gradients), and the
parameters the optimizers changed ("after/").  A sparse gradient (GradientSlice) is listed in
the JSON's "grad_slices" (param -> indices and values blobs).

The recorder (record_net) is shared with gen_builders_onnx.py.

Run: cd tests/oracle && PYTHONHASHSEED=0 GLOG_minloglevel=2 ../../.venv-caffe2/bin/python gen_builders_layers.py ../golden
"""
import os
from types import SimpleNamespace
from unittest import mock

import numpy as np

from _common import OUT, core, err_info, save_npz, seed_for, workspace, write_case
from gen_builders import Frozen, _fetch_all
from caffe2.python import layer_model_helper, layer_model_instantiator, optimizer, regularizer, schema

FOLDER = "builders_layers"
B = 4  # batch size


# ---- recording (shared with gen_builders_onnx.py) -----------------------------------------
def _split_grads(grad_map, params):
    """Dense gradients (param -> blob) and sparse ones (param -> {indices, values})."""
    dense, sparse = {}, {}
    for p in params:
        g = grad_map.get(p)
        if isinstance(g, core.GradientSlice):
            sparse[p] = {"indices": str(g.indices), "values": str(g.values)}
        elif g is not None:
            dense[p] = str(g)
    return dense, sparse


def record_net(folder, name, note, net, init_net, feeds, fetch, params=(), grad_map=None, rtol=1e-3, extra=None):
    """Write one case: run init_net, freeze its random fills (as gen_builders.py does), feed
    `feeds`, store every blob as in/, run `net` once and store `fetch`, the gradients of `params`
    and the updated params.

    net / init_net are NetDef protos; grad_map maps param -> gradient (str or GradientSlice);
    extra: more JSON fields."""
    workspace.ResetWorkspace()
    rng = np.random.RandomState(seed_for("%s/%s" % (folder, name)))
    case = "%s/%s" % (folder, name)
    os.makedirs(os.path.join(OUT, folder), exist_ok=True)
    for suffix, proto in (("", net), ("_init", init_net)):
        with open(os.path.join(OUT, folder, name + suffix + ".pb"), "wb") as f:
            f.write(proto.SerializeToString())
    # NOTE: the backward pass starts at the <loss>_autogen_grad fills; their inputs are the losses
    seeds = [i for i, op in enumerate(net.op) if any(o.endswith("_autogen_grad") for o in op.output)]
    n_forward = seeds[0] if seeds else len(net.op)
    params = [str(p) for p in params]
    dense, sparse = _split_grads(grad_map or {}, params)
    data = {"note": note, "rtol": rtol, "net": case + ".pb", "init": case + "_init.pb",
            "losses": [net.op[i].input[0] for i in seeds], "fetch": list(fetch), "params": params,
            "grad_map": dense, "grad_slices": sparse, "num_forward_ops": n_forward, "num_ops": len(net.op),
            "num_gradient_ops": sum(1 for op in net.op[n_forward:] if op.is_gradient_op) + len(seeds),
            **(extra or {})}
    workspace.RunNetOnce(init_net)
    frozen = Frozen(name, rng, big=False)  # gen_builders.py's: seeded values for the random fills
    # NOTE: freeze reads init.Proto(); a core.Net would take a name from the process-wide count
    frozen.freeze(SimpleNamespace(Proto=lambda: init_net), net)
    frozen.feed(feeds)
    start = _fetch_all()
    arrays = {"in/" + k: v for k, v in start.items()}
    try:
        workspace.RunNetOnce(net)
    except BaseException as e:  # noqa: B902
        data.update(run_error=err_info(e))
    else:
        end = _fetch_all()
        for b in list(fetch) + list(dense.values()) + [s["values"] for s in sparse.values()]:
            arrays["out/" + b] = end[b]
        for p in params:
            if p in end and not np.array_equal(end[p], start.get(p)):
                arrays["after/" + p] = end[p]  # updated by an optimizer
    # NOTE: save_npz stores 0-d arrays as 1-d; the true shapes go in the JSON.
    data["shapes"] = {k: list(np.shape(v)) for k, v in sorted(arrays.items())}
    write_case(case, "builder", data)
    save_npz(os.path.join(OUT, folder, name + ".npz"), arrays)


# ---- the models ----------------------------------------------------------------------------
def _id_list(limit):
    return schema.List(schema.Scalar(np.int64, metadata=schema.Metadata(categorical_limit=limit)))


def _id_score_list(limit):
    return schema.Map(schema.Scalar(np.int64, metadata=schema.Metadata(categorical_limit=limit)), np.float32)


def _sparse_feeds(rng, blobs, limit, lengths, scored=False):
    """lengths, ids (with repeats across rows: sparse optimizers see duplicate indices) and,
    for an id-score list, scores; fed in the schema's field order."""
    lengths = np.asarray(lengths, np.int32)
    ids = rng.randint(0, limit, size=int(lengths.sum())).astype(np.int64)
    ids[-1] = ids[0]
    values = [lengths, ids] + ([rng.uniform(0.5, 1.5, size=ids.size).astype(np.float32)] if scored else [])
    return dict(zip([str(b) for b in blobs], values))


def _lr_model(rng):
    """Dense FC + an id list (Sum) + an id-score list (WeightedSum), concatenated into a 2-layer
    ReLU tower whose logit is scaled by a global constant; BatchLRLoss with example weights; SGD
    for the dense parameters (the model's default optimizer), Adagrad (SparseAdagrad) for the
    embeddings."""
    feat = schema.Struct(("float_features", schema.Scalar((np.float32, (4,)))),
                         ("sparse", schema.Struct(("ids", _id_list(20)), ("scored", _id_score_list(15)))))
    extra = schema.Struct(("label", schema.Scalar(np.float32)), ("weight", schema.Scalar(np.float32)))
    model = layer_model_helper.LayerModelHelper("lr", input_feature_schema=feat, trainer_extra_schema=extra)
    model.default_optimizer = optimizer.SgdOptimizer(base_learning_rate=0.1)
    adagrad = optimizer.AdagradOptimizer(alpha=0.1)
    sparse = model.input_feature_schema.sparse
    emb_ids = model.SparseLookup(sparse.ids, [3], "Sum", weight_optim=adagrad)
    emb_scored = model.SparseLookup(sparse.scored, [3], "WeightedSum", weight_optim=adagrad)
    dense = model.FC(model.input_feature_schema.float_features, 3)
    joined = model.Concat(schema.Struct(("ids", emb_ids), ("scored", emb_scored), ("dense", dense)))
    hidden = model.Relu(model.FC(joined, 5), 1)
    scale = model.add_global_constant("logit_scale", [0.5], dtype=np.float32)
    logit = model.Mul(schema.Tuple(model.FC(hidden, 1), schema.Scalar((np.float32, (1,)), scale)), 1,
                      broadcast=1)
    model.output_schema = schema.Struct(("logit", logit))
    extra = model.trainer_extra_schema
    model.add_loss(model.BatchLRLoss(schema.Struct(("label", extra.label), ("logit", logit),
                                                   ("weight", extra.weight))))
    feeds = {"float_features": rng.randn(B, 4).astype(np.float32),
             "label": rng.randint(0, 2, size=B).astype(np.float32),
             "weight": rng.uniform(0.5, 2.0, size=B).astype(np.float32)}
    feeds.update(_sparse_feeds(rng, sparse.ids.field_blobs(), 20, [2, 0, 3, 1]))
    feeds.update(_sparse_feeds(rng, sparse.scored.field_blobs(), 15, [1, 2, 2, 1], scored=True))
    return model, feeds, [logit()]


def _xent_model(rng):
    """Id lists pooled by Mean, Sqrt and Max, an id list turned into an id-score list by a
    PositionWeighted layer (its weights trained too), and dense features through an FC tower;
    BatchSigmoidCrossEntropyLoss; Adam for the dense parameters, row-wise Adagrad
    (RowWiseSparseAdagrad) and plain Adagrad for the embedding tables."""
    feat = schema.Struct(("dense", schema.Scalar((np.float32, (3,)))),
                         ("a", _id_list(12)), ("b", _id_list(10)), ("c", _id_list(8)), ("d", _id_list(9)))
    extra = schema.Struct(("label", schema.Scalar((np.float32, (2,)))))
    model = layer_model_helper.LayerModelHelper("xent", input_feature_schema=feat, trainer_extra_schema=extra)
    model.default_optimizer = optimizer.AdamOptimizer(alpha=0.05)
    rowwise = optimizer.AdagradOptimizer(alpha=0.1, rowWise=True)
    adagrad = optimizer.AdagradOptimizer(alpha=0.2, epsilon=1e-3)
    f = model.input_feature_schema
    pos = model.PositionWeighted(f.d, weight_optim=adagrad)
    weighted_d = schema.Map(f.d.items, pos.position_weights, lengths_blob=f.d.lengths)
    pooled = [model.SparseLookup(f.a, [2], "Mean", weight_optim=rowwise),
              model.SparseLookup(f.b, [2], "Sqrt", weight_optim=adagrad),
              model.SparseLookup(f.c, [2], "Max", weight_optim=adagrad),
              model.SparseLookup(weighted_d, [2], "PositionWeighted", weight_optim=adagrad),
              model.Tanh(model.FC(f.dense, 2), 1)]
    joined = model.Concat(schema.Struct(*[("f%d" % i, p) for i, p in enumerate(pooled)]))
    prediction = model.FC(model.Relu(model.FC(joined, 4), 1), 2)
    model.output_schema = schema.Struct(("prediction", prediction))
    model.add_loss(model.BatchSigmoidCrossEntropyLoss(
        schema.Struct(("label", model.trainer_extra_schema.label), ("prediction", prediction))))
    feeds = {"dense": rng.randn(B, 3).astype(np.float32),
             "label": rng.randint(0, 2, size=(B, 2)).astype(np.float32)}
    for field, limit, lengths in (("a", 12, [1, 3, 0, 2]), ("b", 10, [2, 2, 1, 0]), ("c", 8, [1, 2, 3, 1]),
                                  ("d", 9, [3, 1, 2, 2])):
        feeds.update(_sparse_feeds(rng, f[field].field_blobs(), limit, lengths))
    return model, feeds, [prediction()]


def _softmax_model(rng):
    """Dense features through the BatchNormalization layer (a SpatialBN on an ExpandDims'd 4-D
    view: training statistics in the training net, running ones in eval/predict), an FC, the
    LayerNormalization layer and FCWithoutBias; an id list pooled by LogSumExp and an id-score list
    by Mean; BatchSoftmaxLoss over 3 classes.  Adagrad with weight decay for the dense
    parameters, Adam (SparseAdam) and FTRL (SparseFtrl) for the embedding tables."""
    feat = schema.Struct(("dense", schema.Scalar((np.float32, (5,)))),
                         ("ids", _id_list(11)), ("scored", _id_score_list(7)))
    extra = schema.Struct(("label", schema.Scalar(np.int32)))
    model = layer_model_helper.LayerModelHelper("softmax", input_feature_schema=feat, trainer_extra_schema=extra)
    model.default_optimizer = optimizer.AdagradOptimizer(alpha=0.1, weight_decay=1e-2)
    # NOTE: float lambdas: FtrlOptimizer's integer defaults (0) fail SparseFtrl's float arguments
    ftrl = optimizer.FtrlOptimizer(alpha=0.5, beta=1.0, lambda1=0.01, lambda2=0.001)
    f = model.input_feature_schema
    dense = model.LayerNormalization(model.FC(model.BatchNormalization(f.dense), 4))
    pooled = [model.Relu(dense, 1),
              model.SparseLookup(f.ids, [3], "LogSumExp", weight_optim=optimizer.AdamOptimizer(alpha=0.05)),
              model.SparseLookup(f.scored, [3], "Mean", weight_optim=ftrl)]
    joined = model.Concat(schema.Struct(*[("f%d" % i, p) for i, p in enumerate(pooled)]))
    logits = model.FCWithoutBias(joined, 3)
    loss = model.BatchSoftmaxLoss(schema.Struct(("label", model.trainer_extra_schema.label), ("prediction", logits)))
    model.output_schema = schema.Struct(("softmax", loss.softmax))
    model.add_loss(loss.loss)
    feeds = {"dense": rng.randn(B, 5).astype(np.float32), "label": rng.randint(0, 3, size=B).astype(np.int32)}
    feeds.update(_sparse_feeds(rng, f.ids.field_blobs(), 11, [2, 1, 3, 2]))
    feeds.update(_sparse_feeds(rng, f.scored.field_blobs(), 7, [1, 0, 2, 3], scored=True))
    return model, feeds, [loss.softmax()]


def _multitask_model(rng):
    """Two regression tasks on a shared tower: ids hashed by SparseFeatureHash (IndexHash + Mod)
    into a table with a SparseL2Norm regularizer (SparseLpRegularizer after the update), an FC
    with an L1Norm weight regularizer (added to the loss); a BatchMSELoss and a BatchHuberLoss
    head, both model losses; momentum SGD for the dense parameters, Adagrad for the table."""
    feat = schema.Struct(("dense", schema.Scalar((np.float32, (4,)))), ("ids", _id_list(1000)))
    extra = schema.Struct(("y1", schema.Scalar(np.float32)), ("y2", schema.Scalar(np.float32)))
    model = layer_model_helper.LayerModelHelper("mtl", input_feature_schema=feat, trainer_extra_schema=extra)
    model.default_optimizer = optimizer.SgdOptimizer(base_learning_rate=0.05, momentum=0.9)
    f, y = model.input_feature_schema, model.trainer_extra_schema
    hashed = model.SparseFeatureHash(f.ids, modulo=13, seed=7)
    emb = model.SparseLookup(hashed, [3], "Sum", weight_optim=optimizer.AdagradOptimizer(alpha=0.1),
                             regularizer=regularizer.SparseL2Norm(0.05))
    shared = model.Relu(model.FC(model.Concat(schema.Struct(("emb", emb), ("dense", f.dense))), 4,
                                 weight_reg=regularizer.L1Norm(0.01)), 1)
    p1, p2 = model.FC(shared, 1), model.FC(shared, 1)
    losses = [model.BatchMSELoss(schema.Struct(("label", y.y1), ("prediction", p1))),
              model.BatchHuberLoss(schema.Struct(("label", y.y2), ("prediction", p2)), delta=0.5)]
    model.output_schema = schema.Struct(("p1", p1), ("p2", p2))
    # NOTE: two losses, two <loss>_autogen_grad seeds.  (AdaptiveWeight over them cannot be trained
    # in Caffe2 1.10.2: its Reshape of a 0-d loss has an empty shape in the gradient, "shape.numel() > 0")
    for name, loss in zip(("mse", "huber"), losses):
        model.add_loss(loss, name)
    feeds = {"dense": rng.randn(B, 4).astype(np.float32), "y1": rng.randn(B).astype(np.float32),
             "y2": rng.randn(B).astype(np.float32)}
    feeds.update(_sparse_feeds(rng, f.ids.field_blobs(), 1000, [2, 3, 1, 2]))
    return model, feeds, [p1(), p2()]


def _sampled_model(rng):
    """Candidate retrieval trained with a sampled softmax: two id lists merged by MergeIdLists and
    pooled, an id-score list pooled by RecencyWeighted, dense features; SamplingTrain's FC over
    the sampled classes (Gather of its weight rows: a GradientSlice, updated by SparseAdam as the
    embedding table by SparseAdagrad) with the log sampling probability subtracted;
    BatchSoftmaxLoss on the position of the true class among the samples."""
    feat = schema.Struct(("dense", schema.Scalar((np.float32, (3,)))), ("a", _id_list(9)), ("b", _id_list(14)),
                         ("recent", _id_score_list(6)))
    extra = schema.Struct(("label", schema.Scalar(np.int32)), ("sampled", schema.Scalar((np.int32, (5,)))),
                          ("sampled_prob", schema.Scalar((np.float32, (5,)))))
    model = layer_model_helper.LayerModelHelper("sampled", input_feature_schema=feat, trainer_extra_schema=extra)
    model.default_optimizer = optimizer.AdamOptimizer(alpha=0.05)
    f, y = model.input_feature_schema, model.trainer_extra_schema
    merged = model.MergeIdLists(schema.Tuple(f.a, f.b))
    pooled = [model.SparseLookup(merged, [3], "Sum", weight_optim=optimizer.AdagradOptimizer(alpha=0.1)),
              model.SparseLookup(f.recent, [3], "RecencyWeighted"), f.dense]
    user = model.Relu(model.FC(model.Concat(schema.Struct(*[("f%d" % i, p) for i, p in enumerate(pooled)])), 4), 1)
    logits = model.SamplingTrain(schema.Struct(("input", user), ("indices", y.sampled),
                                               ("sampling_prob", y.sampled_prob)), "FC", 20)
    loss = model.BatchSoftmaxLoss(schema.Struct(("label", y.label), ("prediction", logits)))
    model.output_schema = schema.Struct(("logits", logits))
    model.add_loss(loss.loss)
    feeds = {"dense": rng.randn(B, 3).astype(np.float32), "label": rng.randint(0, 5, size=B).astype(np.int32),
             "sampled": np.array([3, 17, 8, 0, 11], np.int32),
             "sampled_prob": rng.uniform(0.05, 0.3, size=5).astype(np.float32)}
    feeds.update(_sparse_feeds(rng, f.a.field_blobs(), 9, [1, 2, 0, 2]))
    feeds.update(_sparse_feeds(rng, f.b.field_blobs(), 14, [2, 1, 1, 3]))
    feeds.update(_sparse_feeds(rng, f.recent.field_blobs(), 6, [2, 1, 3, 1], scored=True))
    return model, feeds, [logits()]


def _reservoir_model(rng):
    """A sample collector (no loss: generate_training_nets makes a forward-only net): dense rows
    into a ReservoirSampling layer deduplicated by object id (CreateMap bookkeeping); ids repeat
    within the batch, and the reservoir has room for every new object (no random draw).  NOTE:
    Caffe2 erases the previous occupant of every position it writes, a zero for a fresh one:
    object 0, kept at position 0, leaves the map when object 4 takes position 1."""
    feat = schema.Struct(("dense", schema.Scalar((np.float32, (2,)))), ("object_id", schema.Scalar(np.int64)))
    model = layer_model_helper.LayerModelHelper("reservoir", input_feature_schema=feat,
                                                trainer_extra_schema=schema.Struct())
    f = model.input_feature_schema
    reservoir = model.ReservoirSampling(schema.Struct(("data", f.dense), ("object_id", f.object_id)), 6)
    # the object -> position map's entries, in the container's order (MapToKeyValue)
    keys, positions = model.MapToKeyValue(schema.Scalar(blob=core.BlobReference("reservoir_sampling/object_to_pos")),
                                          2).field_blobs()
    model.output_schema = schema.Struct()
    feeds = {"dense": rng.randn(5, 2).astype(np.float32), "object_id": np.array([0, 4, 0, 7, 4], np.int64)}
    return model, feeds, [reservoir.reservoir(), reservoir.num_visited(), "reservoir_sampling/pos_to_object", keys,
                          positions]


MODELS = {"lr_sgd_adagrad": (_lr_model, "LayerModelHelper: dense FC + id list (SparseLookup Sum) + id-score "
                             "list (WeightedSum), ReLU FC tower, logit * add_global_constant, BatchLRLoss; "
                             "SGD dense, SparseAdagrad embeddings"),
          "xent_adam_rowwise": (_xent_model, "LayerModelHelper: id lists pooled by Mean / Sqrt / Max / "
                                "PositionWeighted, dense FC+Tanh, ReLU FC tower, BatchSigmoidCrossEntropyLoss; "
                                "Adam dense, RowWiseSparseAdagrad + SparseAdagrad embeddings"),
          "softmax_bn_ftrl": (_softmax_model, "LayerModelHelper: BatchNormalization, FC, LayerNormalization, "
                              "id list LogSumExp, id-score list Mean, FCWithoutBias, BatchSoftmaxLoss; Adagrad "
                              "with weight decay dense, SparseAdam + SparseFtrl embeddings"),
          "multitask_reg": (_multitask_model, "LayerModelHelper: SparseFeatureHash + SparseLookup with a SparseL2Norm "
                            "regularizer, FC with an L1Norm regularizer, BatchMSELoss + BatchHuberLoss heads (two "
                            "losses); momentum SGD dense, Adagrad embeddings"),
          "sampled_softmax": (_sampled_model, "LayerModelHelper: MergeIdLists + SparseLookup Sum, RecencyWeighted "
                              "pooling, SamplingTrain FC over sampled classes, BatchSoftmaxLoss; Adam dense, "
                              "SparseAdam for the sampled FC's rows, SparseAdagrad embeddings"),
          "reservoir_dedup": (_reservoir_model, "LayerModelHelper: ReservoirSampling with object-id deduplication "
                              "(forward only)")}


def record_model(name, build, note):
    """The training net (with its backward pass and optimizers), the eval net and the predict
    net of one model, each a case."""
    workspace.ResetWorkspace()
    # NOTE: net and optimizer names come from process-wide counts: reset them (as gen_builders.py
    # does per case) so that a model's names do not depend on the models built before it
    optimizer.reset_optimizer_instance_count()
    core.Net._net_names_used.clear()
    model, feeds, outputs = build(np.random.RandomState(seed_for("%s/%s/feeds" % (FOLDER, name))))
    captured = {}
    add_gradients = core.Net.AddGradientOperators

    def capture(net, *args, **kwargs):
        captured.update(add_gradients(net, *args, **kwargs))
        return captured

    with mock.patch.object(core.Net, "AddGradientOperators", capture):
        train_init, train = layer_model_instantiator.generate_training_nets(model)
    params = [str(p) for p in model.get_parameter_blobs()]
    fetch = [str(b) for b in outputs] + ([str(b) for b in model.loss.field_blobs()] if model.has_loss() else [])
    record_net(FOLDER, name, note + "; generate_training_nets", train.Proto(), train_init.Proto(), feeds,
               fetch, params, captured)
    for kind, gen in (("eval", layer_model_instantiator.generate_eval_net),
                      ("predict", layer_model_instantiator.generate_predict_net)):
        net = gen(model).Proto()
        made = {o for op in net.op for o in op.output}
        record_net(FOLDER, "%s_%s" % (name, kind), "%s; generate_%s_net" % (note, kind), net, train_init.Proto(),
                   feeds, [b for b in fetch if b in made])


if __name__ == "__main__":
    import sys
    only = set(sys.argv[2:])
    for _name, (_build, _note) in MODELS.items():
        if not only or _name in only:
            record_model(_name, _build, _note)
            print(_name)
