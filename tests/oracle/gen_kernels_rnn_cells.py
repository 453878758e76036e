"""Training nets built by Caffe2's rnn_cell / gru_cell (GRU, MILSTM, LayerNormLSTM, LSTM and
LSTMWithAttention in four attention types): the unit kernels (GRUUnit, LSTMUnit, ...) inside a real
RecurrentNetwork, forward and backward.  Writes OUT/kernels_rnn_cells/<name>.pb (the net, gradient
ops included) and <name>.npz (inputs, parameters, the loss and every parameter gradient), read by
tests/engine/test_kernels_rnn_cells.py.

Run from tests/oracle: ``../../.venv-caffe2/bin/python gen_kernels_rnn_cells.py ../golden``.
"""
import os

import numpy as np

from _common import OUT, save_npz, workspace
from caffe2.python import attention, gru_cell, model_helper, rnn_cell
from kernel_oracle import rng_for

T, N, D, H, S = 3, 2, 4, 5, 4


def cell_net(kind, m, seq, lens, h0, c0):
    if kind == "GRU":
        cell = gru_cell.GRUCell(input_size=D, hidden_size=H, forget_bias=0.0, memory_optimization=False, name="gru")
        return cell.apply_over_sequence(m, seq, lens, initial_states=[h0])[0]
    cls = {"MILSTM": rnn_cell.MILSTMCell, "LayerNormLSTM": rnn_cell.LayerNormLSTMCell, "LSTM": rnn_cell.LSTMCell}[kind]
    cell = cls(input_size=D, hidden_size=H, forget_bias=0.0, memory_optimization=False, name=kind.lower())
    return cell.apply_over_sequence(m, seq, lens, initial_states=[h0, c0])[0]


def attention_net(kind, m, seq, lens, h0, c0, feeds, r):
    dim = H if kind == "Dot" else 6
    enc, ctx0 = m.net.AddExternalInputs("enc", "ctx0")
    feeds.update(enc=r.randn(S, N, dim).astype("f4"), ctx0=r.randn(1, N, dim).astype("f4"))
    return rnn_cell.LSTMWithAttention(
        model=m, decoder_inputs=seq, decoder_input_lengths=lens, initial_decoder_hidden_state=h0,
        initial_decoder_cell_state=c0, initial_attention_weighted_encoder_context=ctx0, encoder_output_dim=dim,
        encoder_outputs=enc, encoder_lengths=None, decoder_input_dim=D, decoder_state_dim=H, scope="dec",
        attention_type=getattr(attention.AttentionType, kind), forget_bias=0.0, outputs_with_grads=(0,))[0]


def record_one(name, build):
    workspace.ResetWorkspace()
    r = rng_for(name)
    m = model_helper.ModelHelper(name=name)
    seq, lens, h0, c0 = m.net.AddExternalInputs("seq", "lens", "h0", "c0")
    feeds = {"seq": r.randn(T, N, D).astype("f4"), "lens": np.array([3, 2], "i4"),
             "h0": r.randn(1, N, H).astype("f4"), "c0": r.randn(1, N, H).astype("f4")}
    out = build(m, seq, lens, h0, c0, feeds, r)
    m.net.SumElements(out, "loss")
    m.AddGradientOperators(["loss"])
    for k, v in feeds.items():
        workspace.FeedBlob(k, v)
    workspace.RunNetOnce(m.param_init_net)
    for p in m.params:  # NOTE: the cells' random fills are unseeded: overwrite them for deterministic goldens
        workspace.FeedBlob(str(p), (0.5 * r.randn(*workspace.FetchBlob(str(p)).shape)).astype("f4"))
    workspace.RunNetOnce(m.net)
    arrays = {"in/" + str(b): workspace.FetchBlob(str(b)) for b in m.net.Proto().external_input
              if workspace.HasBlob(str(b))}
    arrays["loss"] = workspace.FetchBlob("loss")
    arrays.update({"grad/" + str(p): workspace.FetchBlob(str(m.param_to_grad[p])) for p in m.params})
    d = os.path.join(OUT, "kernels_rnn_cells")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name + ".pb"), "wb") as f:
        f.write(m.net.Proto().SerializeToString())
    save_npz(os.path.join(d, name + ".npz"), arrays)


for kind in ("GRU", "MILSTM", "LayerNormLSTM", "LSTM"):
    record_one(kind, lambda m, seq, lens, h0, c0, feeds, r, k=kind: cell_net(k, m, seq, lens, h0, c0))
for kind in ("Regular", "Recurrent", "Dot", "SoftCoverage"):
    record_one("Attention" + kind, lambda m, seq, lens, h0, c0, feeds, r, k=kind:
               attention_net(k, m, seq, lens, h0, c0, feeds, r))
