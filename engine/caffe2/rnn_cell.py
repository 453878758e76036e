"""An ``rnn_cell.LSTM``-style builder: input projection, an LSTM cell net, and its RecurrentNetwork.

Blob and parameter names follow Caffe2's ``rnn_cell.LSTM`` (``<scope>/i2h``, ``<scope>/gates_t_w``,
``<scope>/hidden_t_prev``, ``<scope>/hidden_state_all``…), so nets built here line up with ones
built by Caffe2.  Only the single-layer LSTM is provided.
"""
from __future__ import annotations

from typing import Any

from engine.caffe2 import core
from engine.caffe2.recurrent import recurrent_net


def _nets(model_or_net: Any) -> tuple[core.Net, core.Net | None]:
    """(net, param_init_net) of a model-like object, or (net, None) for a bare ``core.Net``."""
    if hasattr(model_or_net, "param_init_net"):
        return model_or_net.net, model_or_net.param_init_net
    return model_or_net, None


def _fc(net: core.Net, init: core.Net | None, x: Any, out: str, dim_in: int, dim_out: int
        ) -> tuple[core.BlobReference, list[str]]:
    """``brew.fc(..., axis=2)``: params ``<out>_w``, ``<out>_b`` (Xavier / constant fills in `init`)."""
    w, b = f"{out}_w", f"{out}_b"
    if init is not None:
        init.XavierFill([], w, shape=[dim_out, dim_in])
        init.ConstantFill([], b, shape=[dim_out])
    return net.FC([x, w, b], out, axis=2), [w, b]


def LSTM(model_or_net: Any, input_blob: Any, seq_lengths: Any, initial_states: tuple[Any, Any], dim_in: int,
         dim_out: int, scope: str, outputs_with_grads: tuple[int, ...] = (0,), return_params: bool = False,
         memory_optimization: bool = False, forget_bias: float = 0.0, forward_only: bool = False,
         drop_states: bool = False) -> tuple[Any, ...]:
    """Add a one-layer LSTM over `input_blob` (``T x N x dim_in``) to `model_or_net`.

    `model_or_net` is a ``core.Net`` (parameters become its external inputs) or any object
    with ``.net`` and ``.param_init_net`` (parameters are also filled there, as brew does).
    `seq_lengths` may be None (every sequence runs T steps).

    Returns
    -------
    tuple
        ``(hidden_all, hidden_last, cell_all, cell_last)`` blob references, plus
        ``{"input": [i2h_w, i2h_b], "recurrent": [gates_t_w, gates_t_b]}`` when `return_params`.

    Examples
    --------
    >>> net = core.Net("doc_lstm")
    >>> outs = LSTM(net, "X", None, ("h0", "c0"), 3, 4, scope="lstm")
    >>> [str(o) for o in outs], [op.type for op in net.Proto().op]
    (['lstm/hidden_state_all', 'lstm/hidden_state_last', 'lstm/cell_state_all', 'lstm/cell_state_last'], ['FC', 'RecurrentNetwork'])
    """
    net, init = _nets(model_or_net)
    sc = f"{scope}/".__add__
    i2h, input_params = _fc(net, init, input_blob, sc("i2h"), dim_in, 4 * dim_out)
    cell = core.Net(scope)
    input_t, timestep = cell.AddScopedExternalInputs("input_t", "timestep")
    h_prev, c_prev = cell.AddScopedExternalInputs(sc("hidden_t_prev"), sc("cell_t_prev"))
    gates, recurrent_params = _fc(cell, init, h_prev, sc("gates_t"), dim_out, 4 * dim_out)
    cell.Sum([gates, input_t], gates)
    ins = [h_prev, c_prev, gates] + ([seq_lengths] if seq_lengths is not None else []) + [timestep]
    h, c = cell.LSTMUnit(ins, [sc("hidden_state"), sc("cell_state")], forget_bias=forget_bias,
                         drop_states=drop_states, sequence_lengths=seq_lengths is not None)
    cell.AddExternalOutputs(h, c)
    result = recurrent_net(net, cell, [(input_t, i2h)], list(zip((h_prev, c_prev), initial_states)),
                           {h_prev: h, c_prev: c}, timestep=timestep, scope=scope, forward_only=forward_only,
                           outputs_with_grads=outputs_with_grads,
                           recompute_blobs_on_backward=[gates] if memory_optimization else None)
    if return_params:
        return (*result, {"input": input_params, "recurrent": recurrent_params})
    return tuple(result)
