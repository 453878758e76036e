"""An LSTM over 5 timesteps (``rnn_cell.LSTM``), its backward pass and an SGD step.

The predict net is FC (input projection) → RecurrentNetwork (the LSTM cell per timestep) →
AveragedLoss, then the generated RecurrentNetworkGradient and FCGradient, then SGD updates;
netviz can step into each forward and backward timestep.  The init net fills the input
sequence, sequence lengths (the second sequence stops after 3 steps), initial states and
parameters.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from engine.caffe2 import core, rnn_cell
from examples.build import example
from proto import caffe2_pb2


@example("lstm")
def build_lstm(T: int = 5, N: int = 2, D: int = 3, H: int = 4) -> tuple[caffe2_pb2.NetDef, caffe2_pb2.NetDef]:
    """LSTM T x N x D -> H, loss = mean of all hidden states, trained by plain SGD."""
    saved = dict(core.Net._net_names_used_counters)
    core.Net._net_names_used_counters.clear()  # NOTE: step-net names must not depend on history.
    try:
        init, train = core.Net("lstm_init"), core.Net("lstm_train")
        x = np.random.default_rng(0).standard_normal((T, N, D)).astype(np.float32)
        init.GivenTensorFill([], "input", shape=list(x.shape), values=x.flatten().tolist())
        init.GivenTensorIntFill([], "seq_lengths", shape=[N], values=[T] + [3] * (N - 1))
        for s in ("hidden_init", "cell_init"):
            init.ConstantFill([], s, shape=[1, N, H], value=0.0)
        hidden_all, *_, params = rnn_cell.LSTM(SimpleNamespace(net=train, param_init_net=init), "input",
                                               "seq_lengths", ("hidden_init", "cell_init"), D, H, scope="lstm",
                                               return_params=True)
        loss = train.AveragedLoss(hidden_all, "loss")
        grads = train.AddGradientOperators([loss])
        init.ConstantFill([], "ITER", shape=[1], value=0, dtype=core.DataType.INT64)
        init.ConstantFill([], "ONE", shape=[1], value=1.0)
        train.Iter("ITER", "ITER")
        lr = train.LearningRate("ITER", "LR", base_lr=-0.5, policy="fixed")
        for p in params["input"] + params["recurrent"]:
            train.WeightedSum([p, "ONE", grads[p], lr], p)
        train.AddExternalOutput(loss)
        return train.Proto(), init.Proto()
    finally:
        core.Net._net_names_used_counters.clear()
        core.Net._net_names_used_counters.update(saved)
