"""Training nets built by Caffe2's own Python builders (kind "builder"): rnn_cell cells (LSTM,
GRU, MILSTM, LayerNormLSTM, multi-layer, every attention type, forward_only), brew MLPs with
the optimizer.py optimizers, models/resnet (train and test), ResNeXt (create_resnext), ShuffleNet
(models/shufflenet, train and test), models/seq2seq (training, and translate.py's beam search).

Each case: the builder's net (forward ops, then AddGradientOperators' ops, then the
optimizer's), frozen parameters and inputs, and what Caffe2 computes running it once: forward
values, every gradient of a parameter, and the parameters after the update.  Written to
OUT/builders/<case>.json + .npz; the net as OUT/builders/<case>.pb, its param init net as
<case>_init.pb.  Read by
tests/differential/test_builders.py.

Big cases (ResNeXt, ShuffleNet, ResNet) store no large arrays: their parameters and inputs are
drawn per blob from NumPy's legacy RandomState (bit-stable across NumPy versions), so the JSON's
"drawn" entry (seed, shape, bounds) lets the test draw the same values; an output or updated
parameter above SAMPLE_ABOVE elements is stored as SAMPLE values at drawn indices plus its
largest magnitude and norm ("sampled").

Run: cd tests/oracle && PYTHONHASHSEED=0 GLOG_minloglevel=2 ../../.venv-caffe2/bin/python gen_builders.py ../golden
"""
import os

from unittest import mock

import numpy as np

from _common import OUT, core, err_info, seed_for, save_npz, workspace, write_case
from caffe2.python import attention, brew, gru_cell, model_helper, optimizer, rnn_cell
from caffe2.python.models import resnet, shufflenet

CASES = []


def case(name, note, rtol=1e-3, big=False):
    def register(fn):
        CASES.append((name, note, rtol, big, fn))
        return fn
    return register


# ---- rnn_cell ------------------------------------------------------------------------------
T, N, D, H = 4, 2, 3, 5


def _seq_feeds(rng, states):
    feeds = {"X": rng.randn(T, N, D).astype(np.float32), "lens": np.array([T, T - 1], np.int32)}
    for s in states:
        feeds[s] = rng.randn(1, N, H).astype(np.float32)
    return feeds


def _rnn(m, kind, forward_only=False):
    kw = dict(forward_only=forward_only)
    if kind == "lstm":
        return rnn_cell.LSTM(m, "X", "lens", ("h0", "c0"), D, H, scope="lstm", **kw)[0]
    if kind == "lstm_memopt":
        return rnn_cell.LSTM(m, "X", "lens", ("h0", "c0"), D, H, scope="lstm", memory_optimization=True, **kw)[0]
    if kind == "lstm_2layer":
        return rnn_cell.LSTM(m, "X", "lens", ("h0", "c0", "h1", "c1"), D, [H, H], scope="lstm2", **kw)[0]
    if kind == "milstm":
        return rnn_cell.MILSTM(m, "X", "lens", ("h0", "c0"), D, H, scope="milstm", **kw)[0]
    if kind == "layernorm_lstm":
        return rnn_cell.LayerNormLSTM(m, "X", "lens", ("h0", "c0"), D, H, scope="lnlstm", **kw)[0]
    if kind == "gru":
        return gru_cell.GRU(m, "X", "lens", ("h0",), D, H, scope="gru", **kw)[0]
    raise ValueError(kind)


def _states(kind):
    return {"gru": ["h0"], "lstm_2layer": ["h0", "c0", "h1", "c1"]}.get(kind, ["h0", "c0"])


def _rnn_case(kind, forward_only=False):
    def build(rng):
        m = model_helper.ModelHelper(name=kind)
        out = _rnn(m, kind, forward_only)
        loss = m.net.AveragedLoss(m.net.Tanh(out, "act"), "loss")
        if not forward_only:
            m.AddGradientOperators([loss])
        return m, _seq_feeds(rng, _states(kind)), [str(out), "loss"], ["loss"]
    return build


for _kind in ("lstm", "lstm_memopt", "lstm_2layer", "milstm", "layernorm_lstm", "gru"):
    case("rnn_" + _kind, "rnn_cell %s T=%d N=%d D=%d H=%d, loss mean(tanh(hidden_all))" % (_kind, T, N, D, H))(
        _rnn_case(_kind))
case("rnn_lstm_forward_only", "rnn_cell.LSTM forward_only=True")(_rnn_case("lstm", True))

ATTENTION = {"regular": attention.AttentionType.Regular, "recurrent": attention.AttentionType.Recurrent,
             "dot": attention.AttentionType.Dot, "soft_coverage": attention.AttentionType.SoftCoverage}


def _attention_case(kind):
    def build(rng):
        S, E = 3, (H if kind == "dot" else 6)
        m = model_helper.ModelHelper(name="att_" + kind)
        out = rnn_cell.LSTMWithAttention(
            m, decoder_inputs="X", decoder_input_lengths="lens", initial_decoder_hidden_state="h0",
            initial_decoder_cell_state="c0", initial_attention_weighted_encoder_context="ctx0",
            encoder_output_dim=E, encoder_outputs="enc", encoder_lengths=None, decoder_input_dim=D,
            decoder_state_dim=H, scope="dec", attention_type=ATTENTION[kind], outputs_with_grads=(0,))
        loss = m.net.AveragedLoss(out[0], "loss")
        m.AddGradientOperators([loss])
        feeds = _seq_feeds(rng, ["h0", "c0"])
        feeds.update(ctx0=rng.randn(1, N, E).astype(np.float32), enc=rng.randn(S, N, E).astype(np.float32))
        return m, feeds, [str(out[0]), str(out[4]), "loss"], ["loss"]
    return build


for _kind in ATTENTION:
    case("attention_" + _kind, "rnn_cell.LSTMWithAttention attention_type=%s" % _kind)(_attention_case(_kind))


# ---- brew MLP + every optimizer ---------------------------------------------------------
OPTIMIZERS = {
    "sgd": lambda m: optimizer.build_sgd(m, base_learning_rate=0.1),
    "sgd_momentum": lambda m: optimizer.build_sgd(m, base_learning_rate=0.1, momentum=0.9),
    "sgd_nesterov_wd": lambda m: optimizer.build_sgd(m, base_learning_rate=0.1, momentum=0.9, nesterov=True,
                                                    weight_decay=1e-2),
    "adagrad": lambda m: optimizer.build_adagrad(m, base_learning_rate=0.1),
    "adam": lambda m: optimizer.build_adam(m, base_learning_rate=0.1),
    "ftrl": lambda m: optimizer.build_ftrl(m, engine=None, alpha=0.1, beta=1.0, lambda1=0.0, lambda2=0.0),
    "gftrl": lambda m: optimizer.build_gftrl(m, engine=None, alpha=0.1, beta=1.0, lambda1=0.0, lambda2=0.0),
    "wngrad": lambda m: optimizer.build_wngrad(m, base_learning_rate=0.1),
    "adadelta": lambda m: optimizer.build_adadelta(m, base_learning_rate=0.1),
    "rms_prop": lambda m: optimizer.build_rms_prop(m, base_learning_rate=0.1),
    "decay_adagrad": lambda m: optimizer.build_decay_adagrad(m, base_learning_rate=0.1),
    "storm": lambda m: optimizer.build_storm(m, base_learning_rate=0.1),
    "yellowfin": lambda m: optimizer.build_yellowfin(m, base_learning_rate=0.1),
}


def _mlp_case(opt):
    def build(rng):
        m = model_helper.ModelHelper(name="mlp_" + opt)
        h = brew.relu(m, brew.fc(m, "data", "fc1", dim_in=6, dim_out=8), "relu1")
        fc2 = brew.fc(m, h, "fc2", dim_in=8, dim_out=3)
        _, loss = m.net.SoftmaxWithLoss([fc2, "label"], ["softmax", "loss"])
        m.AddGradientOperators([loss])
        OPTIMIZERS[opt](m)
        feeds = {"data": rng.randn(5, 6).astype(np.float32), "label": rng.randint(0, 3, size=5).astype(np.int32)}
        return m, feeds, ["softmax", "loss"], ["loss"]
    return build


for _opt in OPTIMIZERS:
    case("mlp_" + _opt, "brew MLP 6-8-3 SoftmaxWithLoss, optimizer.build_%s" % _opt)(_mlp_case(_opt))


# ---- models ------------------------------------------------------------------------------
class Drawn(tuple):
    """A feed drawn by the rule (shape, low, high) instead of stored: see _draw."""


def drawn(shape, low=-1.0, high=1.0):
    return Drawn((tuple(shape), low, high))


def _vision_case(create, data_shape, num_labels, is_test, train=True):
    """A vision builder's net: SoftmaxWithLoss + gradients + momentum SGD (train) or its
    inference net (test, forward only; ResNeXt's ends in Softmax, ShuffleNet's in its FC)."""
    def build(rng):
        m = model_helper.ModelHelper(name="vision", arg_scope={"order": "NCHW"})
        label = "label" if train else None
        create(m, "data", label=label, is_test=is_test)
        feeds = {"data": drawn(data_shape)}
        made = {o for op in m.net.Proto().op for o in op.output}
        fetch = [b for b in ("last_out_L%d" % num_labels, "softmax") if b in made]
        if not train:
            return m, feeds, fetch, []
        m.AddGradientOperators(["loss"])
        optimizer.build_sgd(m, base_learning_rate=0.1, momentum=0.9)
        feeds["label"] = rng.randint(0, num_labels, size=data_shape[0]).astype(np.int32)
        return m, feeds, fetch + ["loss"], ["loss"]
    return build


def _resnet_case(is_test):
    def build(rng):
        m = model_helper.ModelHelper(name="resnet32x32", arg_scope={"order": "NCHW"})
        resnet.create_resnet_32x32(m, "data", num_input_channels=3, num_groups=1, num_labels=4, is_test=is_test)
        _, loss = m.net.SoftmaxWithLoss(["last_out", "label"], ["softmax", "loss"])
        m.AddGradientOperators([loss])
        feeds = {"data": drawn((2, 3, 32, 32)), "label": np.array([1, 3], np.int32)}
        return m, feeds, ["last_out", "loss"], ["loss"]
    return build


case("resnet32x32_train", "models/resnet.create_resnet_32x32 (1 group) training, SpatialBN is_test=0",
     big=True)(_resnet_case(False))
case("resnet32x32_test", "models/resnet.create_resnet_32x32 is_test=1: SpatialBN gradient of an is_test op "
     "(Caffe2 reads running stats as saved mean/inv-std)", big=True)(_resnet_case(True))


def _resnext(m, data, label, is_test):
    # NOTE: ResNeXt-18 (blocks 2,2,2,2; filters 64..512), cardinality 4 x width 2: the grouped 3x3
    # convs of ResNeXt at a size netviz runs in a second; global average pooling takes any input size.
    return resnet.create_resnext(m, data, num_input_channels=3, num_labels=5, num_layers=18, num_groups=4,
                                 num_width_per_group=2, label=label, is_test=is_test)


def _shufflenet(m, data, label, is_test):
    return shufflenet.create_shufflenet(m, data, num_input_channels=3, num_labels=5, label=label,
                                        is_test=is_test)


# NOTE: ShuffleNet's AveragePool has kernel=7 (not global): 199x199 is the smallest input it takes.
for _name, _create, _shape in (("resnext18_4x2d", _resnext, (2, 3, 64, 64)),
                               ("shufflenet_v2", _shufflenet, (1, 3, 200, 200))):
    case(_name + "_train", "models %s training (SpatialBN is_test=0), SoftmaxWithLoss, build_sgd momentum 0.9"
         % _create.__name__.lstrip("_"), big=True)(_vision_case(_create, _shape, 5, False))
    case(_name + "_test", "models %s inference (is_test=1, random running statistics), Softmax"
         % _create.__name__.lstrip("_"), big=True)(_vision_case(_create, _shape, 5, True, train=False))


@case("char_rnn", "caffe2/python/examples/char_rnn.py's model: rnn_cell.LSTM, FC axis=2, Softmax, Reshape, "
      "LabelCrossEntropy, build_sgd with a step policy")
def _char_rnn(rng):
    V, S = 5, 4  # vocabulary, hidden size
    m = model_helper.ModelHelper(name="char_rnn")
    hidden_all, _, _, _ = rnn_cell.LSTM(m, "input_blob", "seq_lengths", ("hidden_init", "cell_init"), V, S,
                                        scope="LSTM")
    output = brew.fc(m, hidden_all, None, dim_in=S, dim_out=V, axis=2)
    softmax = m.net.Softmax(output, "softmax", axis=2)
    reshaped, _ = m.net.Reshape(softmax, ["softmax_reshaped", "_"], shape=[-1, V])
    xent = m.net.LabelCrossEntropy([reshaped, "target"], "xent")
    loss = m.net.AveragedLoss(xent, "loss")
    m.AddGradientOperators([loss])
    optimizer.build_sgd(m, base_learning_rate=0.1 * T, policy="step", stepsize=1, gamma=0.9999)
    feeds = {"input_blob": rng.randn(T, 1, V).astype(np.float32), "seq_lengths": np.array([T], np.int32),
             "hidden_init": np.zeros((1, 1, S), np.float32), "cell_init": np.zeros((1, 1, S), np.float32),
             "target": rng.randint(0, V, size=T).astype(np.int32)}
    return m, feeds, ["softmax", "loss"], ["loss"]


@case("data_parallel_cpu", "data_parallel_model.Parallelize on 2 CPU devices: brew FC + SoftmaxWithLoss, build_sgd")
def _data_parallel(rng):
    from caffe2.python import data_parallel_model as dpm
    m = model_helper.ModelHelper(name="dpm")

    def forward(model, loss_scale):
        fc = brew.fc(model, "data", "fc", dim_in=4, dim_out=3)
        _, loss = model.net.SoftmaxWithLoss([fc, "label"], ["softmax", "loss"])
        return [model.net.Scale(loss, "loss_scaled", scale=loss_scale)]

    dpm.Parallelize(m, input_builder_fun=lambda model: None, forward_pass_builder_fun=forward,
                    optimizer_builder_fun=lambda model: optimizer.build_sgd(model, base_learning_rate=0.1),
                    devices=[0, 1], cpu_device=True)
    feeds = {}
    for d in (0, 1):
        feeds["cpu_%d/data" % d] = rng.randn(3, 4).astype(np.float32)
        feeds["cpu_%d/label" % d] = rng.randint(0, 3, size=3).astype(np.int32)
    return m, feeds, ["cpu_0/softmax", "cpu_1/loss"], ["cpu_0/loss_scaled", "cpu_1/loss_scaled"]


@case("seq2seq_attention", "models/seq2seq/train.py Seq2SeqModelCaffe2 (CPU): embedding encoder, LSTM decoder "
      "with regular attention, softmax loss, norm-clipped gradient update")
def _seq2seq(rng):
    from caffe2.python.models.seq2seq import train as s2s
    params = dict(attention="regular", decoder_layer_configs=[dict(num_units=4)],
                  encoder_type=dict(encoder_layer_configs=[dict(num_units=4)], use_bidirectional_encoder=False),
                  batch_size=2, optimizer_params=dict(learning_rate=0.1), encoder_embedding_size=3,
                  decoder_embedding_size=3, decoder_softmax_size=None, max_gradient_norm=1.0)
    obj = s2s.Seq2SeqModelCaffe2(model_params=params, source_vocab_size=6, target_vocab_size=7, num_gpus=0)
    obj._build_model(init_params=True)
    batch = [([2, 3, 4], [3, 5]), ([5, 2], [4, 6, 2])]
    feeds = dict(zip(s2s.Batch._fields, s2s.prepare_batch(batch)))
    return obj.model, feeds, ["total_loss_scalar"], ["total_loss_scalar"]


def _s2s_params(attention, encoder_units, decoder_units, bidirectional):
    return dict(attention=attention, decoder_layer_configs=[dict(num_units=u) for u in decoder_units],
                encoder_type=dict(encoder_layer_configs=[dict(num_units=u) for u in encoder_units],
                                  use_bidirectional_encoder=bidirectional),
                encoder_embedding_size=3, decoder_embedding_size=3, decoder_softmax_size=None)


def _beam_search_case(models, word_reward, source, max_len):
    """translate.py's Seq2SeqModelCaffe2EnsembleDecoder over `models` (model_params each), beam 3,
    vocabulary 8 (ids 0-3: PAD, GO, EOS, UNK); fetches every blob its net writes, and records
    translate's own decode() of the frozen parameters (the best hypothesis, backtracked)."""
    def build(rng):
        from caffe2.python.models.seq2seq import translate
        V = 8
        vocab = {i: str(i) for i in range(V)}
        rewards = dict(word_reward=word_reward, unk_reward=-1.0)
        dec = translate.Seq2SeqModelCaffe2EnsembleDecoder(dict(
            ensemble_models=[dict(source_vocab=vocab, target_vocab=vocab, model_params=p, model_file=None)
                             for p in models],
            decoding_params=dict(beam_size=3, **rewards)))
        # NOTE: decode()'s feeds: the source reversed, one column per sentence
        feeds = {"encoder_inputs": np.array([[t] for t in reversed(source)], np.int32),
                 "encoder_lengths": np.array([len(source)], np.int32),
                 "max_output_seq_len": np.array([max_len], np.int64),
                 "word_rewards": dec.build_word_rewards(V, **rewards)}
        fetch = sorted({str(o) for op in dec.model.net.Proto().op for o in op.output})

        def decoded():
            tokens, _, score = dec.decode(source, max_len)
            return {"decoded": {"source": source, "max_output_seq_len": max_len,
                                "tokens": [int(t) for t in tokens], "score": float(score)}}
        return dec.model, feeds, fetch, [], decoded
    return build


# NOTE: a word reward above a token's negative log-probability (~log 8) makes the best hypothesis
# run to max_output_seq_len; a smaller one lets a hypothesis ending in EOS win.
case("seq2seq_beam_search", "models/seq2seq/translate.py Seq2SeqModelCaffe2EnsembleDecoder (beam_search.py "
     "BeamSearchForwardOnly, beam 3): bidirectional embedding encoder, LSTM decoder with regular attention, "
     "word/UNK rewards; every blob the net writes, and translate's decode() of them")(
    _beam_search_case([_s2s_params("regular", [4], [4], True)], 2.0, [4, 6, 5, 7], 5))
case("seq2seq_beam_search_ensemble", "translate.py's decoder over an ensemble of two models (2-layer encoder and "
     "decoder with regular attention; 1-layer without attention): log-probabilities and attention averaged by "
     "WeightedSum in the beam search step net")(
    _beam_search_case([_s2s_params("regular", [4, 4], [4, 4], False), _s2s_params("none", [5], [3], False)],
                      1.6, [5, 4, 6], 6))


# ---- recording ---------------------------------------------------------------------------
def _fetch_all():
    out = {}
    for b in workspace.Blobs():
        try:
            v = workspace.FetchBlob(b)
        except BaseException:  # noqa: B902 - scratch workspaces, non-tensor blobs
            continue
        if isinstance(v, np.ndarray) and v.dtype != object:
            out[str(b)] = v
    return out


RANDOM_FILLS = ("XavierFill", "MSRAFill", "GaussianFill", "UniformFill")
#: outputs and updated parameters of a big case above this many elements are stored as SAMPLE values
SAMPLE_ABOVE, SAMPLE = 256, 64
#: SpatialBN inputs 1-4 (scale, bias, running mean, running var) of a big case: drawn in these
#: bounds, so an is_test net's normalisation is not the identity
BN_BOUNDS = ((0.5, 1.5), (-0.5, 0.5), (-0.5, 0.5), (0.5, 1.5))


class Frozen(object):
    """How a case's parameters and inputs get their values.  A big case draws each blob from its
    own legacy RandomState(seed_for("builders/<case>/<blob>")) as uniform(low, high), recorded in
    `rules` instead of stored; a small case draws from the case's one stream and stores values."""

    def __init__(self, name, rng, big):
        self.name, self.rng, self.big, self.rules = name, rng, big, {}

    def draw(self, blob, shape, low, high):
        if not self.big:
            return self.rng.uniform(low, high, size=shape).astype(np.float32)
        seed = seed_for("builders/%s/%s" % (self.name, blob))
        self.rules[blob] = {"seed": seed, "shape": list(shape), "low": low, "high": high}
        return np.random.RandomState(seed).uniform(low, high, size=shape).astype(np.float32)

    def freeze(self, init, net):
        """Seeded values (uniform, Xavier's scale) in place of the init net's random fills, which
        Caffe2 seeds from the clock; a big case's SpatialBN parameters and statistics too."""
        for op in init.Proto().op:
            if op.type in RANDOM_FILLS:
                for o in op.output:
                    shape = workspace.FetchBlob(o).shape
                    a = np.sqrt(3.0 / max(1, int(np.prod(shape[1:])) if len(shape) > 1 else 1))
                    workspace.FeedBlob(o, self.draw(o, shape, -a, a))
        if self.big:
            for op in net.op:
                if op.type == "SpatialBN":
                    for blob, (low, high) in zip(op.input[1:5], BN_BOUNDS):
                        workspace.FeedBlob(blob, self.draw(blob, workspace.FetchBlob(blob).shape, low, high))

    def feed(self, feeds):
        for k, v in feeds.items():
            workspace.FeedBlob(k, self.draw(k, *v) if isinstance(v, Drawn) else v)

    def stored(self, key, v, data):
        """The array kept for `key` ("out/<blob>"): a big case's large one as SAMPLE values at
        indices RandomState(seed).randint(0, size, SAMPLE), with its largest magnitude and norm."""
        if not self.big or v.size <= SAMPLE_ABOVE:
            return v
        seed = seed_for("builders/%s/%s" % (self.name, key))
        idx = np.random.RandomState(seed).randint(0, v.size, SAMPLE)
        w = v.astype(np.float64)
        data.setdefault("sampled", {})[key] = {"seed": seed, "count": SAMPLE, "absmax": float(np.abs(w).max()),
                                               "norm": float(np.sqrt((w * w).sum()))}
        return v.reshape(-1)[idx]


def _seeds(net):
    """Indices of the backward pass's seeds: an <y>_autogen_grad fill, or a builder's own
    ConstantFill(y) -> y_grad (data_parallel_model); the losses are those seeds' inputs."""
    return [i for i, op in enumerate(net.op) if any(o.endswith("_autogen_grad") for o in op.output)
            or (op.type == "ConstantFill" and op.input and list(op.output) == [op.input[0] + "_grad"]
                and any(a.name == "value" and a.f == 1.0 for a in op.arg))]


def _write_nets(name, m):
    os.makedirs(os.path.join(OUT, "builders"), exist_ok=True)
    # NOTE: the init net makes the blobs that are not tensors (the AtomicIter mutex); its fills are
    # overwritten by the frozen values.
    for suffix, net in (("", m.net), ("_init", m.param_init_net)):
        with open(os.path.join(OUT, "builders", name + suffix + ".pb"), "wb") as f:
            f.write(net.Proto().SerializeToString())


def record_case(name, note, rtol, big, build):
    workspace.ResetWorkspace()
    rng = np.random.RandomState(seed_for("builders/" + name))
    # NOTE: some builders draw initial values from NumPy's global RNG into the init net
    # (seq2seq's embeddings): seed it per case so every case is reproducible on its own.
    np.random.seed(seed_for("builders/global/" + name))
    # NOTE: optimizers number their blobs (SgdOptimizer_<k>_lr_cpu) and nets their names
    # (RecurrentBackwardStep_<k>) by process-wide counts: reset both so that a case's names do not
    # depend on which cases ran before it.
    optimizer.reset_optimizer_instance_count()
    core.Net._net_names_used.clear()
    data = {"note": note, "rtol": rtol, "net": "builders/%s.pb" % name, "init": "builders/%s_init.pb" % name}
    arrays = {}
    try:
        # NOTE: seq2seq bakes time.time() into a ConstantFill of its init net: freeze the clock.
        with mock.patch("time.time", return_value=1.6e9):
            built = build(rng)
        m, feeds, fetch, losses = built[:4]
        after_run = built[4] if len(built) > 4 else None  # more to record once the net has run
    except BaseException as e:  # noqa: B902
        data.update(build_error=err_info(e))
        write_case("builders/" + name, "builder", data)
        return
    net = m.net.Proto()
    seeds = _seeds(net)
    n_forward = seeds[0] if seeds else len(net.op)
    losses = [net.op[i].input[0] for i in seeds]
    _write_nets(name, m)
    frozen = Frozen(name, rng, big)
    workspace.RunNetOnce(m.param_init_net)
    frozen.freeze(m.param_init_net, net)
    frozen.feed(feeds)
    start = _fetch_all()
    # NOTE: parameters are frozen as values (no fill ops): netviz runs from exactly these; a big
    # case leaves out the drawn ones and the large constants its init net's ConstantFill makes.
    arrays.update({"in/" + k: v for k, v in start.items() if k not in frozen.rules})
    if big:
        made = {o for op in m.param_init_net.Proto().op if op.type == "ConstantFill" for o in op.output}
        data["from_init"] = sorted(k for k, v in start.items() if k in made and k not in frozen.rules
                                   and v.size > SAMPLE and np.all(v == v.flat[0]))
        for k in data["from_init"]:
            del arrays["in/" + k]
    params = [str(p) for p in m.params]
    grads = {p: str(m.param_to_grad[p]) for p in m.params if p in m.param_to_grad
             and isinstance(m.param_to_grad[p], (str, core.BlobReference))}
    data.update(losses=losses, fetch=fetch, params=params, grad_map={str(k): v for k, v in grads.items()},
                num_forward_ops=n_forward, num_ops=len(net.op),
                num_gradient_ops=sum(1 for op in net.op[n_forward:] if op.is_gradient_op) + len(seeds))
    if frozen.rules:
        data["drawn"] = frozen.rules
    shapes = {}
    try:
        workspace.RunNetOnce(net)
    except BaseException as e:  # noqa: B902
        data.update(run_error=err_info(e))
    else:
        end = _fetch_all()
        if after_run:
            data.update(after_run())
        for b in fetch + list(grads.values()):
            if b not in end:  # NOTE: a net's non-tensor outputs (a step workspace) are not compared
                continue
            shapes["out/" + b] = end[b].shape
            arrays["out/" + b] = frozen.stored("out/" + b, end[b], data)
        # NOTE: "updated" is what the net writes (an optimizer's update op outputs the parameter), not
        # whether its values changed: a step that moves a parameter by less than an ulp on one CPU
        # and by one ulp on another must not decide which arrays the golden holds (issue 28).
        written = {o for op in net.op for o in op.output}
        for p in params:
            if p in end and (p in written or p not in start):  # updated by the optimizer
                shapes["after/" + p] = end[p].shape
                arrays["after/" + p] = frozen.stored("after/" + p, end[p], data)
    # NOTE: save_npz stores 0-d arrays as 1-d; the true shapes go in the JSON.
    data["shapes"] = {k: list(shapes.get(k, np.shape(v))) for k, v in sorted(arrays.items())}
    write_case("builders/" + name, "builder", data)
    save_npz(os.path.join(OUT, "builders", name + ".npz"), arrays)


if __name__ == "__main__":
    import sys
    only = set(sys.argv[2:])
    for name, note, rtol, big, build in CASES:
        if not only or name in only:
            record_case(name, note, rtol, big, build)
            print(name)
