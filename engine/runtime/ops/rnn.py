"""Recurrent nets: RecurrentNetwork and its gradient, the rnn_internal_* link ops, LSTMUnit, GRUUnit,
InferenceLSTM, SinusoidPositionEncoding.

RecurrentNetwork runs its step net once per timestep, each in its own step workspace, by
``yield``ing a :class:`~engine.runtime.plans.SubnetRun` per timestep (the executor runs each whole, the
debugger steps into them).  As in Caffe2, the step net it yields starts with one
``rnn_internal_apply_link`` op per link, which makes the link's internal blob a view of rows of
the external sequence blob (:meth:`engine.runtime.workspace.Workspace.bind_view`), so the step's outputs land in
the recurrent state buffer ``(T + 1) x N x D`` and the next step reads them back.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.runtime import device as dev
from engine.errors import ExecutionError
from engine.runtime.grad_makers import cc_maker, no_gradient
from engine.model.opdef import args_of, create_operator
from engine.runtime.plans import SubnetRun
from engine.catalogue.registry import gradient, kernel, shape
from engine.runtime.shapes import FLOAT, OPAQUE, UNKNOWN, TensorInfo, dim_op, dims, opaque, same_as
from proto import caffe2_pb2


@dataclass(slots=True)
class StepWorkspaces:
    """RecurrentNetwork's last output (Caffe2's ScratchWorkspaces): one workspace per timestep,
    all children of one shared-blobs workspace (itself a child of the op's workspace)."""

    shared: Any  # engine.runtime.workspace.Workspace (above this family: reached through its methods)
    steps: list[Any] = field(default_factory=list)
    #: the timestep blob as Caffe2's RNN executor names it in step t: ``<timestep>_rnnexec_t<t>`` (what
    #: RecurrentNetworkBlobFetcher lists); "" without the executor (enable_rnn_executor=0)
    executor_timestep: str = ""


def _t(t: Any) -> int:
    return int(np.asarray(dev.to_host(t)).reshape(-1)[0])


def _put(ctx: Any, name: str, value: Any) -> None:
    ws = ctx.workspace
    ws.values[name] = value
    ws.devices[name] = dev.CPU if ctx.force_cpu else ctx.op.device_option.device_type


def _set_timestep(ws: Any, name: str, t: int) -> None:
    # NOTE: written locally even when the parent has a blob of that name.
    ws.values.local[name], ws.devices.local[name] = np.array([t], dtype=np.int32), dev.CPU


# ---- kernels ----

def _sigmoid(xp, x):
    return 1.0 / (1.0 + xp.exp(-x))


def _lstm_parts(xp, c_prev, gates, rest, sequence_lengths, forget_bias):
    """Gates i, f, o, g (each rows x D), the valid-row mask, and the inputs after the timestep."""
    k = 1 if sequence_lengths else 0
    if len(rest) < k + 1:
        raise ExecutionError(f"LSTMUnit needs {'seq_lengths and ' if k else ''}a timestep input")
    D = c_prev.shape[-1]
    x = gates.reshape(-1, 4, D)
    if x.shape[0] * D != c_prev.size:
        raise ExecutionError(f"gates {tuple(gates.shape)} must hold 4 x {D} values per row of {tuple(c_prev.shape)}")
    t = _t(rest[k])
    valid = xp.ones((x.shape[0], 1), dtype=bool)
    if k:
        valid = (t < xp.asarray(rest[0]).reshape(-1, 1))
    i, f, o = _sigmoid(xp, x[:, 0]), _sigmoid(xp, x[:, 1] + forget_bias), _sigmoid(xp, x[:, 2])
    return i, f, o, xp.tanh(x[:, 3]), valid, rest[k + 1:]


@kernel("LSTMUnit")
def lstm_unit(xp, h_prev, c_prev, gates, *rest, forget_bias: float = 0.0, drop_states: int = 0,
              sequence_lengths: int = 1):
    # NOTE: gates are [i, f, o, g] per row; rows past a sequence's length copy (or, with drop_states, zero) the state.
    i, f, o, g, valid, _ = _lstm_parts(xp, c_prev, gates, rest, sequence_lengths, forget_bias)
    cp, hp = c_prev.reshape(i.shape), h_prev.reshape(i.shape)
    c = f * cp + i * g
    h = o * xp.tanh(c)
    c, h = xp.where(valid, c, 0 if drop_states else cp), xp.where(valid, h, 0 if drop_states else hp)
    return h.reshape(c_prev.shape).astype(c_prev.dtype), c.reshape(c_prev.shape).astype(c_prev.dtype)


@kernel("LSTMUnitGradient")
def lstm_unit_gradient(xp, h_prev, c_prev, gates, *rest, forget_bias: float = 0.0, drop_states: int = 0,
                       sequence_lengths: int = 1):
    # inputs: h_prev, c_prev, gates, [seq_lengths], timestep, h, c, h_grad, c_grad
    i, f, o, g, valid, after = _lstm_parts(xp, c_prev, gates, rest, sequence_lengths, forget_bias)
    if len(after) != 4:
        raise ExecutionError("LSTMUnitGradient needs h, c, h_grad and c_grad after the timestep")
    _, c, dh, dc = (a.reshape(i.shape) for a in after)
    tanh_c = xp.tanh(c)
    dct = dc + dh * o * (1 - tanh_c * tanh_c)
    dx = xp.stack([dct * g * i * (1 - i), dct * c_prev.reshape(i.shape) * f * (1 - f),
                   dh * tanh_c * o * (1 - o), dct * i * (1 - g * g)], axis=1)
    dc_prev = xp.where(valid, dct * f, 0 if drop_states else dc)
    dh_prev = xp.where(valid | bool(drop_states), 0 * dh, dh)  # NOTE: a valid row's h_prev gradient comes via gates only.
    dx = xp.where(valid[:, :, None], dx, 0)
    dt = c_prev.dtype
    return (dh_prev.reshape(h_prev.shape).astype(dt), dc_prev.reshape(c_prev.shape).astype(dt),
            dx.reshape(gates.shape).astype(dt))


def _gru_parts(xp, h_prev, gates, rest, sequence_lengths):
    """Update gate u, candidate o (rows x D), the valid-row mask, and the inputs after the timestep.
    Gates are [reset, update, output] per row; the reset gate was applied upstream (rnn_cell), so unused."""
    k = 1 if sequence_lengths else 0
    if len(rest) < k + 1:
        raise ExecutionError(f"GRUUnit needs {'seq_lengths and ' if k else ''}a timestep input")
    D = h_prev.shape[-1]
    x = gates.reshape(-1, 3, D)
    t = _t(rest[k])
    valid = (t < xp.asarray(rest[0]).reshape(-1, 1)) if k else xp.ones((x.shape[0], 1), dtype=bool)
    return _sigmoid(xp, x[:, 1]), xp.tanh(x[:, 2]), valid, rest[k + 1:]


@kernel("GRUUnit")
def gru_unit(xp, h_prev, gates, *rest, drop_states: int = 0, sequence_lengths: int = 1):
    # NOTE: h = u * h_prev + (1 - u) * o; rows past their length copy (drop_states: zero) h_prev.
    u, o, valid, _ = _gru_parts(xp, h_prev, gates, rest, sequence_lengths)
    hp = h_prev.reshape(u.shape)
    h = xp.where(valid, hp * u + o * (1 - u), 0 if drop_states else hp)
    return h.reshape(h_prev.shape).astype(h_prev.dtype)


@kernel("GRUUnitGradient")
def gru_unit_gradient(xp, h_prev, gates, *rest, drop_states: int = 0, sequence_lengths: int = 1):
    # inputs: h_prev, gates, [seq_lengths], timestep, h, h_grad -> h_prev_grad, gates_grad (reset part 0)
    u, o, valid, after = _gru_parts(xp, h_prev, gates, rest, sequence_lengths)
    if len(after) != 2:
        raise ExecutionError("GRUUnitGradient needs h and h_grad after the timestep")
    dh = after[1].reshape(u.shape)
    hp = h_prev.reshape(u.shape)
    dh_prev = xp.where(valid, dh * u, 0 if drop_states else dh)
    dx = xp.stack([0 * dh, dh * (hp - o) * u * (1 - u), dh * (1 - u) * (1 - o * o)], axis=1)
    dx = xp.where(valid[:, :, None], dx, 0)
    dt = h_prev.dtype
    return dh_prev.reshape(h_prev.shape).astype(dt), dx.reshape(gates.shape).astype(dt)


def _lstm_layer(xp, xs, h, c, w_ih, w_hh, b_ih, b_hh, reverse=False):
    """One LSTM direction over (T, N, I) `xs` with PyTorch's gate order [i, f, g, o]; returns (T, N, H), h, c."""
    gx = xs @ w_ih.T + (0 if b_ih is None else b_ih)  # the input part of every step at once
    out = []
    steps = range(xs.shape[0] - 1, -1, -1) if reverse else range(xs.shape[0])
    for t in steps:
        g = gx[t] + h @ w_hh.T + (0 if b_hh is None else b_hh)
        i, f, gg, o = (g[:, k * h.shape[1]:(k + 1) * h.shape[1]] for k in range(4))
        c = _sigmoid(xp, f) * c + _sigmoid(xp, i) * xp.tanh(gg)
        h = _sigmoid(xp, o) * xp.tanh(c)
        out.append(h)
    if reverse:
        out.reverse()
    return xp.stack(out) if out else xp.zeros(xs.shape[:2] + (h.shape[1],), dtype=xs.dtype), h, c


@kernel("InferenceLSTM")
def inference_lstm(xp, x, hx, cx, *weights, num_layers: int = 1, has_biases: int = 1, batch_first: int = 0,
                   bidirectional: int = 0):
    # NOTE: PyTorch's nn.LSTM forward: weights per layer (and direction) are w_ih, w_hh[, b_ih, b_hh];
    # hx/cx are (layers * directions, N, H); outputs (output, hy, cy).
    per = 4 if has_biases else 2
    if len(weights) % per:
        raise ExecutionError("InferenceLSTM: got an incorrect number of LSTM parameters")
    cells = [tuple(weights[k:k + per]) + ((None, None) if per == 2 else ()) for k in range(0, len(weights), per)]
    dirs = 2 if bidirectional else 1
    if len(cells) != num_layers * dirs or hx.shape[0] != num_layers * dirs:
        raise ExecutionError(f"InferenceLSTM: {len(cells)} weight sets and {hx.shape[0]} states for "
                             f"{num_layers} layer(s) x {dirs} direction(s)")
    inp = xp.swapaxes(x, 0, 1) if batch_first else x
    hs, cs = [], []
    for layer in range(num_layers):
        outs = []
        for d in range(dirs):
            k = layer * dirs + d
            o, h, c = _lstm_layer(xp, inp, hx[k], cx[k], *cells[k], reverse=d == 1)
            outs.append(o)
            hs.append(h)
            cs.append(c)
        inp = xp.concatenate(outs, axis=-1) if dirs == 2 else outs[0]
    y = xp.swapaxes(inp, 0, 1) if batch_first else inp
    return xp.ascontiguousarray(y).astype(x.dtype), xp.stack(hs).astype(x.dtype), xp.stack(cs).astype(x.dtype)


@kernel("SinusoidPositionEncoding")
def sinusoid_position_encoding(xp, positions, *, embedding_size: int = 100, alpha: float = 10000.0,
                               amplitude: float = 1.0):
    # NOTE: (M, K) -> (M, K, E); every column k uses row i's FIRST position; odd entries are cosines.
    if positions.ndim != 2:
        raise ExecutionError("POSITIONS should be a 2-D tensor")
    m, k = positions.shape
    e = int(embedding_size)
    f = np.float32
    pos = xp.asarray(dev.to_host(positions)[:, :1] if xp is np else positions[:, :1]).astype(f)
    with np.errstate(divide="ignore"):
        log_pos = xp.log(pos)
    steps = xp.arange(e, dtype=f) / f(max(e - 1, 1)) * f(-np.log(f(alpha)) * f((e - 1.0) / e)) if e > 1 \
        else xp.zeros(1, f)
    row = xp.exp(log_pos + steps) + xp.where(xp.arange(e) % 2 == 1, f(np.pi / 2), f(0))
    out = (f(amplitude) * xp.sin(row)).astype(f)
    return xp.ascontiguousarray(xp.broadcast_to(out[:, None, :], (m, k, e)))


@kernel("rnn_internal_apply_link", needs_context=True)
def apply_link(xp, t, external, *, ctx, offset: int = 0, window: int = 1):
    # NOTE: the internal blob shares memory with rows [t+offset, t+offset+window) of external.
    start = _t(t) + offset
    if start < 0 or start + window > external.shape[0]:
        raise ExecutionError(f"link rows {start}:{start + window} outside '{ctx.op.input[1]}' "
                             f"of {external.shape[0]} rows")
    rows = slice(start, start + window)
    if not hasattr(ctx.workspace.values, "views"):
        return external[rows], external
    return ctx.workspace.bind_view(ctx.op.output[0], ctx.op.input[1], rows), external


@kernel("rnn_internal_accumulate_gradient_input")
def accumulate_gradient_input(xp, t, og, g, *, offset: int = -1):
    # NOTE: returns a new buffer (inputs are never mutated); the step's link views read it lazily.
    t = _t(t)
    if offset < 0:
        raise ExecutionError("Offset not set")
    if t + offset >= g.shape[0] or t >= og.shape[0]:
        raise ExecutionError("Accumulation destination address over bounds")
    g = g.copy()
    g[t + offset] += og[t].reshape(g[t + offset].shape)
    return g


def _netdef(v: Any, what: str) -> caffe2_pb2.NetDef:
    if isinstance(v, caffe2_pb2.NetDef):
        return v
    from google.protobuf import text_format

    if not v:
        raise ExecutionError(f"argument '{what}' (a NetDef) is required")
    try:
        return text_format.Parse(v if isinstance(v, str) else v.decode(), caffe2_pb2.NetDef())
    except text_format.ParseError as e:
        raise ExecutionError(f"argument '{what}': Invalid NetDef ({e})") from e


def _links(internal, external, offset, window=None) -> list[tuple[str, str, int, int]]:
    window = list(window) if window else [1] * len(offset)
    if not len(internal) == len(external) == len(offset) == len(window):
        raise ExecutionError("link internal/external/offset/window lengths differ")
    return list(zip(internal, external, offset, window))


def _with_links(net: caffe2_pb2.NetDef, links, timestep: str, device) -> caffe2_pb2.NetDef:
    """Prepend one ``rnn_internal_apply_link`` per link; the first op writing an internal blob
    (before any op reads it) gets it as a control input, as Caffe2 orders it."""
    ops = []
    for internal, external, offset, window in links:
        ops.append(create_operator("rnn_internal_apply_link", [timestep, external], [internal, external],
                                   device_option=device, offset=offset, window=window))
        for op in net.op:
            if internal in op.input:
                continue
            if internal in op.output:
                op.control_input.append(internal)
                break
        net.external_input.extend([internal, external])
    ops.extend(net.op)
    del net.op[:]
    net.op.extend(ops)
    return net


def _initial_state(xp, init, T: int, N: int):
    """The ``(T + L) x N x D`` state buffer with the initial value in its first L rows."""
    if not 1 <= init.ndim <= 3:
        raise ExecutionError(f"initial recurrent state must be 1-D to 3-D, got shape {tuple(init.shape)}")
    L, D = (init.shape[0] if init.ndim == 3 else 1), init.shape[-1]
    if init.ndim >= 2 and init.shape[-2] != N:
        raise ExecutionError(f"initial recurrent state {tuple(init.shape)} must have batch size {N}")
    buf = xp.zeros((T + L, N, D), dtype=init.dtype)
    buf[:L] = init.reshape(L, N, D) if init.ndim >= 2 else init
    return buf


def _scratch(ws: Any, name: str) -> StepWorkspaces:
    old = ws.values.get(name) if name in ws.values else None
    if isinstance(old, StepWorkspaces) and old.shared.parent is ws:
        return old  # NOTE: reused across runs, as Caffe2 keeps its step workspaces.
    return StepWorkspaces(ws.child(f"{ws.name}/{name}"))


@kernel("RecurrentNetwork", needs_context=True)
def recurrent_network(xp, *inputs, ctx, step_net=None, timestep: str = "timestep", recurrent_states=(),
                      initial_recurrent_state_ids=(), link_internal=(), link_external=(), link_offset=(),
                      link_window=None, alias_src=(), alias_dst=(), alias_offset=(),
                      recompute_blobs_on_backward=(), backward_step_net=None, num_workspaces: int = 0,
                      enable_rnn_executor: int = 0):
    """Run the step net for t = 0..T-1 (one workspace per t when a backward step net exists),
    then expose state rows through the aliases (``<o>_all`` = rows 1..T, ``<o>_last`` = row T)."""
    ws, op = ctx.workspace, ctx.op
    if len(recurrent_states) != len(initial_recurrent_state_ids):
        raise ExecutionError("recurrent_states/initial_recurrent_state_ids mismatch")
    T, N = inputs[0].shape[0], inputs[0].shape[1]
    for s, k in zip(recurrent_states, initial_recurrent_state_ids):
        _put(ctx, s, _initial_state(xp, inputs[k], T, N))
    scratch = _scratch(ws, op.output[-1])
    for b in recompute_blobs_on_backward:
        scratch.shared.create_blob(b)  # NOTE: one buffer for all steps; backward recomputes it.
    has_backward = isinstance(backward_step_net, caffe2_pb2.NetDef) or bool(backward_step_net)
    k = T if has_backward else (num_workspaces or (4 if enable_rnn_executor else 2))
    while len(scratch.steps) < k:
        scratch.steps.append(scratch.shared.step_child(f"{scratch.shared.name}/step_{len(scratch.steps)}"))
    net = timestep_program(op, "step_net")
    scratch.executor_timestep = timestep if enable_rnn_executor else ""
    for t in range(T):
        step = scratch.steps[t if has_backward else t % k]
        _set_timestep(step, timestep, t)
        yield SubnetRun(net, step, f"timestep {t}", "step_net")
    aliased = {}
    for src, dst, off in zip(alias_src, alias_dst, alias_offset):
        buf = ws.values[src]
        aliased[dst] = buf[(off if off >= 0 else buf.shape[0] + off):]
        if dst not in op.output:
            _put(ctx, dst, aliased[dst])
    return (*(aliased[n] if n in aliased else ws.values[n] for n in op.output[:-1]), scratch)


def _renamer(op: caffe2_pb2.OperatorDef) -> Any:
    renames = {k[:-len(".rename")]: v for k, v in args_of(op).items() if k.endswith(".rename")}
    return lambda n: renames.get(n, n)  # memonger's "<blob>.rename" arguments


def _backward_program(op: caffe2_pb2.OperatorDef) -> tuple[caffe2_pb2.NetDef, list, list]:
    """A RecurrentNetworkGradient's timestep net, its (param, grad, per-step grad) and state gradients."""
    a, rename = args_of(op), _renamer(op)
    a.setdefault("timestep", "timestep")
    for k in ("outputs_with_grads", "param", "param_grads", "recurrent_states", "alias_src", "alias_offset",
              "link_internal", "link_external", "link_offset", "backward_link_internal", "backward_link_external",
              "backward_link_offset"):
        a.setdefault(k, [])
    links = [(rename(i), rename(e), o, w) for i, e, o, w in
             _links(a["link_internal"], a["link_external"], a["link_offset"], a.get("link_window"))
             + _links(a["backward_link_internal"], a["backward_link_external"], a["backward_link_offset"])]
    return _backward_net(op, len(a["outputs_with_grads"]), a["timestep"], rename, links, a)


def timestep_program(op: caffe2_pb2.OperatorDef, arg: str = "step_net") -> caffe2_pb2.NetDef:
    """The net one timestep of a RecurrentNetwork (``step_net``) or RecurrentNetworkGradient
    (``backward_step_net``) runs: the cell net with the ``rnn_internal_*`` link and accumulation ops
    (and parameter-gradient ``Sum`` ops) Caffe2 adds around it.  The debugger steps this program, so
    views of a timestep show it, link ops as rows of their own."""
    if arg == "backward_step_net" and op.type == "RecurrentNetworkGradient":
        return _backward_program(op)[0]
    a = args_of(op)
    timestep = a.get("timestep", "timestep")
    net = caffe2_pb2.NetDef()
    net.CopyFrom(_netdef(a.get(arg), arg))
    if arg != "step_net":  # a forward op's backward_step_net is only carried along
        return net
    net.external_input.append(timestep)
    links = _links(a.get("link_internal", ()), a.get("link_external", ()), a.get("link_offset", ()),
                   a.get("link_window"))
    return _with_links(net, links, timestep, op.device_option)


def _backward_net(op, G: int, timestep: str, rename, links, a) -> tuple[caffe2_pb2.NetDef, list, list]:
    """Caffe2's backward step net: apply-link ops, gradient-input accumulation, the cell's
    gradient ops (param gradients renamed ``<g>_tmpstep``), then ``Sum`` into each param gradient."""
    net = caffe2_pb2.NetDef()
    net.CopyFrom(_netdef(a["backward_step_net"], "backward_step_net"))
    net.external_input.append(timestep)
    params = []
    for i, p in enumerate(a["param"]):
        grad = op.output[i + 1]
        step_grad = rename(a["param_grads"][i]) if a["param_grads"] else grad
        cell = step_grad + "_tmpstep"
        for o in net.op:
            for field_ in (o.input, o.output):
                field_[:] = [cell if n == step_grad else n for n in field_]
        params.append((op.input[p + G], grad, cell))
    rgs, acc = [], []
    for s in a["recurrent_states"]:
        grad, ext, last = rename(s + "_grad"), None, None
        for j, (src, off) in enumerate(zip(a["alias_src"], a["alias_offset"])):
            idx = max((k for k, w in enumerate(a["outputs_with_grads"]) if w == j), default=-1)
            if src != s or idx < 0:
                continue
            if off not in (1, -1):
                raise ExecutionError(f"alias offset of a gradient output must be 1 or -1, got {off}")
            ext, last = (op.input[idx], last) if off == 1 else (ext, idx)
        rgs.append((s, grad, last))
        if ext is not None:
            deps = {f"rnn_dependency.{i}": i for i, e, _, _ in links if e == grad}
            acc.append(create_operator("rnn_internal_accumulate_gradient_input", [timestep, ext, grad], [grad],
                                       device_option=op.device_option, **deps, offset=1))
            net.external_input.extend([ext, grad])
    acc.extend(net.op)
    del net.op[:]
    net.op.extend(acc)
    net = _with_links(net, links, timestep, op.device_option)
    for _, grad, cell in params:
        net.op.append(create_operator("Sum", [grad, cell], [grad], device_option=op.device_option))
        net.external_input.append(grad)
    return net, params, rgs


@kernel("RecurrentNetworkGradient", needs_context=True)
def recurrent_network_gradient(xp, *inputs, ctx, backward_step_net=None, timestep: str = "timestep",
                               outputs_with_grads=(), param=(), param_grads=(), recurrent_states=(),
                               initial_recurrent_state_ids=(), alias_src=(), alias_offset=(),
                               link_internal=(), link_external=(), link_offset=(), link_window=None,
                               backward_link_internal=(), backward_link_external=(), backward_link_offset=()):
    """Run the backward step net for t = T-1..0 in the forward step workspace of t; parameter
    gradients accumulate over steps, state gradients flow back through ``<state>_grad`` rows."""
    ws, op = ctx.workspace, ctx.op
    rename = _renamer(op)
    G, seq, scratch = len(outputs_with_grads), inputs[len(outputs_with_grads)], inputs[-1]
    T = seq.shape[0]
    if not isinstance(scratch, StepWorkspaces) or len(scratch.steps) < T:
        raise ExecutionError(f"last input '{op.input[-1]}' must hold the forward op's {T} step workspaces "
                             "(was the forward RecurrentNetwork run with a backward_step_net?)")
    net, params, rgs = _backward_program(op)
    for p, grad, _ in params:
        _put(ctx, grad, xp.zeros_like(ws.values[p]))
    for s, grad, last in rgs:
        _put(ctx, grad, g := xp.zeros_like(ws.values[s]))
        if last is not None:
            g[-1] += inputs[last].reshape(g[-1].shape)
    seq_grad = rename(op.input[G] + "_grad")
    _put(ctx, seq_grad, xp.zeros_like(seq))
    for o in dict.fromkeys(o for bop in net.op for o in bop.output):
        if o not in scratch.steps[0].values:
            scratch.shared.create_blob(o)  # NOTE: blobs no step defines are shared by all steps.
    for t in reversed(range(T)):
        _set_timestep(scratch.steps[t], timestep, t)
        yield SubnetRun(net, scratch.steps[t], f"timestep {t}", "backward_step_net")
    outs = [ws.values[seq_grad]] + [ws.values[grad] for _, grad, _ in params]
    for (_, grad, _), k in zip(rgs, initial_recurrent_state_ids):
        init, sg = inputs[k + G], ws.values[grad]
        # NOTE: a >=2-D initial state's gradient is a view of the first rows of the state gradient.
        outs.append(sg.reshape(-1)[:init.size].reshape(init.shape) if init.ndim >= 2 else sg[0].sum(axis=0))
    return tuple(outs)


@kernel("RecurrentNetworkBlobFetcher", needs_context=True)
def recurrent_network_blob_fetcher(xp, scratch, *, ctx, prefix: str = "rnn"):
    """Copy every step workspace's local blobs into the op's workspace as ``<prefix>_<blob><t>``."""
    names = []
    for i, step in enumerate(scratch.steps):
        for b in list(step.values.local):
            v = step.values.local[b]
            if hasattr(v, "shape"):
                shown = f"{b}_rnnexec_t{i}" if b == scratch.executor_timestep else b
                names.append(f"{prefix}_{shown}{i}")
                _put(ctx, names[-1], dev.to_host(v).copy())
    return np.array([n.encode() for n in names], dtype=object)  # NOTE: a string tensor: bytes, as Caffe2


# ---- gradients ----

@gradient("LSTMUnit")
@cc_maker
def lstm_unit_gradient_maker(g):
    """Without ``sequence_lengths`` the op has no seq_lengths input, so the gradient reads I0..I3."""
    n = 5 if g.arg("sequence_lengths", 1) else 4
    ins = [g.I(k) for k in range(n)] + [g.O(0), g.O(1), g.GO(0), g.GO(1)]
    return [g.op_("LSTMUnitGradient", ins, [g.GI(0), g.GI(1), g.GI(2)])]


@gradient("GRUUnit")
@cc_maker
def gru_unit_gradient_maker(g):
    """[I0..I3 (no seq_lengths: I0..I2), O0, GO0] -> [GI0, GI1]."""
    n = 4 if g.arg("sequence_lengths", 1) else 3
    return [g.op_("GRUUnitGradient", [g.I(k) for k in range(n)] + [g.O(0), g.GO(0)], [g.GI(0), g.GI(1)])]


no_gradient("InferenceLSTM")


# ---- shapes ----
shape("LSTMUnit")(same_as(1, 1))
shape("LSTMUnitGradient")(same_as(0, 1, 2))
shape("GRUUnit")(same_as(0))
shape("GRUUnitGradient")(same_as(0, 1))
shape("SinusoidPositionEncoding")(lambda p, *, embedding_size=100, alpha=10000.0, amplitude=1.0: TensorInfo(
    dims(p) + (int(embedding_size),), FLOAT))
shape("rnn_internal_accumulate_gradient_input")(same_as(2))


@shape("InferenceLSTM")
def inference_lstm_shape(x, hx, cx, *weights, num_layers: int = 1, has_biases: int = 1, batch_first: int = 0,
                         bidirectional: int = 0):
    # NOTE: the output's last dim is H (x 2 when bidirectional); hy, cy have hx's shape.
    h = dims(hx)[-1] if hx.shape is not None else None
    out = dims(x)[:-1] + ((h * (2 if bidirectional else 1)) if h is not None else None,)
    return TensorInfo(out, x.dtype), hx, cx



@shape("RecurrentNetwork")
def recurrent_network_shape(*ins, recurrent_states=(), initial_recurrent_state_ids=(), alias_src=(), alias_dst=(),
                            alias_offset=(), out_names):
    """Each state buffer is (T + L) x N x D (input 0 is T x N x ...; the initial state gives L and D);
    an alias is the buffer's rows from its offset on; the last output holds the step workspaces."""
    name = lambda v: v.decode() if isinstance(v, bytes) else v  # noqa: E731
    xd = ins[0].shape or ()  # NOTE: unknown T and N still leave D and the step workspaces known
    t, n = (xd[0], xd[1]) if len(xd) >= 2 else (None, None)
    bufs = {}
    for s, k in zip(map(name, recurrent_states), initial_recurrent_state_ids):
        init = ins[k] if k < len(ins) else UNKNOWN
        idims = init.shape or (None,)
        lead = idims[0] if len(idims) == 3 else 1
        bufs[s] = TensorInfo((dim_op(lambda a, b: a + b, t, lead), n, idims[-1]), init.dtype)
    aliases = {name(d): (name(s), off) for s, d, off in zip(alias_src, alias_dst, alias_offset)}

    def info(out: str) -> TensorInfo:
        if out in aliases and aliases[out][0] in bufs:
            buf, off = bufs[aliases[out][0]], aliases[out][1]
            kept = dim_op(lambda r: r - off, buf.shape[0]) if off >= 0 else -off  # NOTE: -1 keeps the last row
            return TensorInfo((kept, *buf.shape[1:]), buf.dtype)
        return bufs.get(out, UNKNOWN)
    return (*(info(o) for o in out_names[:-1]), OPAQUE)


# NOTE: the link op writes the internal blob (a row window of the external buffer) and passes the buffer on.
shape("rnn_internal_apply_link")(lambda t, external, *, window=1: (
    TensorInfo((window, *dims(external)[1:]), external.dtype), external))
shape("RecurrentNetworkBlobFetcher")(opaque)  # NOTE: its output lists blob names made at run time


# ---- onnx ----
from engine.catalogue.registry import onnx_converter  # noqa: E402
from engine.runtime.shapes import TensorInfo  # noqa: E402


@onnx_converter("LSTMUnit")
def lstm_unit_onnx(c):
    """Gates [i, f, o, g] per row (forget_bias added to f), c = f c' + i g, h = o tanh(c); rows at or
    past their sequence length keep the previous state (drop_states: zero)."""
    d = c.shape(1)[-1]
    rows = lambda name: c.emit("Reshape", [name, c.ints([-1, d])])  # noqa: E731
    parts = c.emit("Split", [c.emit("Reshape", [c.x(2), c.ints([-1, 4, d])]), c.ints([1, 1, 1, 1])], 4, axis=1)
    i, f, o, g = (rows(p) for p in parts)
    f = c.emit("Add", [f, c.const(np.array(c.arg("forget_bias", 0.0), np.float32), "forget_bias")])
    i, f, o, g = c.emit("Sigmoid", [i]), c.emit("Sigmoid", [f]), c.emit("Sigmoid", [o]), c.emit("Tanh", [g])
    cp, hp = rows(c.x(1)), rows(c.x(0))
    cell = c.emit("Add", [c.emit("Mul", [f, cp]), c.emit("Mul", [i, g])])
    hid = c.emit("Mul", [o, c.emit("Tanh", [cell])])
    c.emit("Reshape", [_onnx_past_length(c, hid, hp, 3), c.shape_of(c.x(1))], [c.y(0)])
    c.emit("Reshape", [_onnx_past_length(c, cell, cp, 3), c.shape_of(c.x(1))], [c.y(1)])


def _onnx_past_length(c, new, prev, k):
    """`new` where the timestep (input k + 1) is below the row's sequence length (input k), else
    `prev` (drop_states: 0); `new` itself without sequence_lengths."""
    if not c.arg("sequence_lengths", 1):
        return new
    t = c.emit("Reshape", [c.emit("Cast", [c.x(k + 1)], to=7), c.ints([1, 1])])
    valid = c.emit("Less", [t, c.emit("Reshape", [c.emit("Cast", [c.x(k)], to=7), c.ints([-1, 1])])])
    keep = c.const(np.zeros((1, 1), c.np_dtype(0)), "zero") if c.arg("drop_states", 0) else prev
    return c.emit("Where", [valid, new, keep])


@onnx_converter("GRUUnit")
def gru_unit_onnx(c):
    """Gates [reset, update, output] per row (reset applied upstream): u = sigmoid, o = tanh,
    h = u h' + (1 - u) o; rows past their length keep h' (drop_states: zero)."""
    d = c.shape(0)[-1]
    parts = c.emit("Split", [c.emit("Reshape", [c.x(1), c.ints([-1, 3, d])]), c.ints([1, 1, 1])], 3, axis=1)
    u = c.emit("Sigmoid", [c.emit("Reshape", [parts[1], c.ints([-1, d])])])
    o = c.emit("Tanh", [c.emit("Reshape", [parts[2], c.ints([-1, d])])])
    hp = c.emit("Reshape", [c.x(0), c.ints([-1, d])])
    one = c.const(np.ones((1, 1), c.np_dtype(0)), "one")
    h = c.emit("Add", [c.emit("Mul", [hp, u]), c.emit("Mul", [o, c.emit("Sub", [one, u])])])
    c.emit("Reshape", [_onnx_past_length(c, h, hp, 2), c.shape_of(c.x(0))], [c.y(0)])


@onnx_converter("RecurrentNetwork")
def recurrent_network_onnx(c):
    """An ONNX Loop over the T rows of input 0, carrying each recurrent state as its whole
    (T + L) x N x D buffer: per step the links slice their rows (``timestep`` is the int32 [t]),
    the step net runs, and internals written back land in their buffer rows (ScatterND); after it
    the aliases slice the buffers (``_all`` rows from offset on, ``_last`` the final row)."""
    a = {k: c.arg(k) for k in ("recurrent_states", "initial_recurrent_state_ids", "link_internal", "link_external",
                               "link_offset", "link_window", "alias_src", "alias_dst", "alias_offset")}
    dec = lambda v: [s if isinstance(s, str) else s.decode() for s in v or []]  # noqa: E731
    states = dec(a["recurrent_states"])
    links = list(zip(dec(a["link_internal"]), dec(a["link_external"]), a["link_offset"] or [],
                     a["link_window"] or [1] * len(a["link_internal"] or [])))
    step = _netdef(c.arg("step_net"), "step_net")
    timestep = c.arg("timestep", "timestep")
    written = {o for op in step.op for o in op.output}
    if any(w != 1 for *_, w in links) and any(i in written for i, _, _, w in links if w != 1):
        raise c.refuse("a link of window > 1 written by the step net")
    if any(i in written and e not in states for i, e, _, _ in links):
        raise c.refuse("the step net writes a link into a blob that is not a recurrent state")
    t_max, n = c.shape(0)[0], c.shape(0)[1]
    bufs, infos = {}, {}
    for s, k in zip(states, c.arg("initial_recurrent_state_ids") or []):
        init = c.x(k)
        shp = c.shape(k)
        lead, d = (shp[0] if len(shp) == 3 else 1), shp[-1]
        first = c.emit("Expand", [c.emit("Reshape", [init, c.ints([lead, -1, d])]), c.ints([lead, n, d])])
        rest = c.emit("ConstantOfShape", [c.ints([t_max, n, d])], value=c.tensor(np.zeros(1, c.np_dtype(k))))
        bufs[s] = c.emit("Concat", [first, rest], axis=0)
        infos[s] = TensorInfo((t_max + lead, n, d), c.info(k).dtype)
    ins = [("", c.tmp("iteration"), TensorInfo((), caffe2_pb2.TensorProto.INT64)),
           ("", c.tmp("cond_in"), TensorInfo((), caffe2_pb2.TensorProto.BOOL))]
    ins += [(s, c.tmp(f"{s}/in"), infos[s]) for s in states]
    it = ins[0][1]

    def rows_at(g, buf, offset, window):
        start = g.node_out("Add", [g.node_out("Reshape", [it, g.const(np.array([1], np.int64), "one")]),
                                   g.const(np.array([offset], np.int64), "offset")])
        end = g.node_out("Add", [start, g.const(np.array([window], np.int64), "window")])
        return g.node_out("Slice", [buf, start, end, g.const(np.array([0], np.int64), "axis0")]), start

    def pre(g):
        g.current[timestep] = g.node_out("Cast", [g.node_out("Reshape", [it, g.const(np.array([1], np.int64), "one")])],
                                         to=6)
        g.infos[g.current[timestep]] = TensorInfo((1,), caffe2_pb2.TensorProto.INT32)
        for internal, external, off, win in links:
            src = g.lookup(external)
            if src is None:
                raise c.refuse(f"link source '{external}' has no value")
            name, _ = rows_at(g, src, off, win)
            g.current[internal] = name
            info = g.info(src)
            g.infos[name] = TensorInfo((win, *info.shape[1:]) if info.shape else None, info.dtype)

    def post(g):
        for internal, external, off, _ in links:
            if internal not in written:
                continue
            buf = g.lookup(external)
            _, start = rows_at(g, buf, off, 1)
            idx = g.node_out("Reshape", [start, g.const(np.array([1, 1], np.int64), "idx")])
            # NOTE: Caffe2 copies the step value's elements into the row whatever its shape ((1, 3)
            # into a (3, 1) row in beam search): reshaped to the row's shape
            row = g.node_out("Concat", [g.const(np.array([1], np.int64), "one"), g.node_out(
                "Slice", [g.node_out("Shape", [buf]), g.const(np.array([1], np.int64), "one"),
                          g.const(np.array([np.iinfo(np.int64).max], np.int64), "end")])], axis=0)
            value = g.node_out("Reshape", [g.lookup(internal), row])
            g.current[external] = g.node_out("ScatterND", [buf, idx, value])
            g.infos[g.current[external]] = g.info(buf)
        g.current["__continue__"] = ins[1][1]

    body = c.subgraph([step], states, inputs=ins, out_infos=[infos[s] for s in states], cond="__continue__",
                      pre=pre, post=post)
    finals = c.emit("Loop", [c.const(np.array(t_max, np.int64), "T"), c.const(np.array(True), "true")]
                    + [bufs[s] for s in states], len(states), body=body)
    finals = dict(zip(states, finals if isinstance(finals, list) else [finals]))
    alias = {d: (s, o) for s, d, o in zip(dec(a["alias_src"]), dec(a["alias_dst"]), a["alias_offset"] or [])}
    for k, out in enumerate(c.op.output[:-1]):
        if out in alias:
            s, off = alias[out]
            start = off if off >= 0 else infos[s].shape[0] + off
            c.emit("Slice", [finals[s], c.ints([start]), c.ints([infos[s].shape[0]]), c.ints([0])], [c.y(k)])
        elif out in finals:
            c.emit("Identity", [finals[out]], [c.y(k)])
        else:
            raise c.refuse(f"output '{out}' is neither a recurrent state nor an alias of one")
    c.opaque(c.n_out - 1)
