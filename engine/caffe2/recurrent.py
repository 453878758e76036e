"""Build a RecurrentNetwork op from a cell net, as ``caffe2.python.recurrent.recurrent_net`` does.

The op carries the cell (``step_net``), its links to the sequence and state buffers, the aliases
that expose the states, and (unless ``forward_only``) the cell's backward step net with the
links and parameter bookkeeping :func:`engine.runtime.ops.rnn.recurrent_network_gradient` needs.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from engine.caffe2 import core, workspace
from engine.errors import GraphError
from proto import caffe2_pb2


def _proto(net: Any) -> caffe2_pb2.NetDef:
    return net if isinstance(net, caffe2_pb2.NetDef) else net.Proto()


def _backward_cell(cell: caffe2_pb2.NetDef, recompute: set[str] | None
                   ) -> tuple[core.Net, dict[str, Any], dict[str, int]]:
    """The cell's gradient ops (after any recompute ops) and the scratches they read."""
    grad_ops, mapping = core.IR(list(cell.op), save_inputs=False).GetBackwardPass(  # Caffe2's in-place reads
        {o: o + "_grad" for o in cell.external_output})
    mapping = {str(k): v for k, v in mapping.items()}
    bwd = core.Net("RecurrentBackwardStep")
    proto = bwd.Proto()
    for op in cell.op if recompute is not None else ():
        if recompute & set(op.output):
            if not set(op.output) <= recompute:
                raise GraphError(f"recurrent_net: op {op.type} recomputed on backward also writes "
                                 f"{sorted(set(op.output) - recompute)}, not in recompute_blobs_on_backward")
            proto.op.append(op)
    proto.op.extend(grad_ops)
    ssa, bwd_versions = core.get_ssa(proto)
    undefined = core.get_undefined_blobs(ssa)
    _, fwd_versions = core.get_ssa(cell)
    # NOTE: scratches = cell-internal forward blobs the backward reads before writing them.
    proto.external_input.extend(b for b, v in fwd_versions.items()
                                if v > 0 and b in undefined and b not in cell.external_output)
    proto.type = "simple"
    return bwd, mapping, bwd_versions


def _accumulate_external(bwd: core.Net) -> None:
    """An op writing a backward external input writes ``<b>_accum`` and a Sum adds it into ``b``,
    so gradients arriving from outside the step are added to, not overwritten."""
    proto = bwd.Proto()
    ops = list(proto.op)
    del proto.op[:]
    for op in ops:
        proto.op.append(op)
        for j, out in enumerate(op.output):
            if out in proto.external_input and out not in op.input:
                bwd.Proto().op[-1].output[j] = out + "_accum"  # NOTE: Proto() also drops Net's lookup cache.
                bwd.Sum([core.BlobReference(out), core.BlobReference(out + "_accum")], [core.BlobReference(out)])


def _unzip(triples: list[tuple]) -> tuple[list, list, list]:
    return tuple(map(list, zip(*triples))) if triples else ([], [], [])  # type: ignore[return-value]


def recurrent_net(net: Any, cell_net: Any, inputs: Sequence[tuple[Any, Any]],
                  initial_cell_inputs: Sequence[tuple[Any, Any]], links: Mapping[Any, Any],
                  timestep: Any = None, scope: str | None = None, outputs_with_grads: Iterable[int] = (0,),
                  recompute_blobs_on_backward: Iterable[Any] | None = None, forward_only: bool = False
                  ) -> tuple[core.BlobReference, ...]:
    """Add a RecurrentNetwork op running `cell_net` over a sequence to `net`.

    Parameters
    ----------
    net : core.Net
        Where the op goes.
    cell_net : core.Net or NetDef
        One timestep; its external outputs are the next step's recurrent inputs.
    inputs : [(cell input name, sequence blob)]
        Exactly one sequence, ``T x N x ...``.
    initial_cell_inputs : [(cell input name, initial value blob)]
        One per recurrent state.
    links : {cell input name: cell output name}
        Output at t feeds input at t + 1.
    timestep, scope, outputs_with_grads, recompute_blobs_on_backward, forward_only
        As in Caffe2: timestep blob name (default ``"timestep"``), prefix of the state buffers
        (default ``net.NextName("recurrent")``), which op outputs get external gradients, cell
        blobs recomputed on backward instead of kept per step, and no backward step net.

    Returns
    -------
    tuple of BlobReference
        ``(<o>_all, <o>_last)`` per recurrent state, in order (the step-workspaces blob left out).

    Examples
    --------
    >>> cell = core.Net("doc_cell")
    >>> h = cell.Add(["h_prev", "x_t"], "h")
    >>> cell.AddExternalOutput(h)
    >>> outs = recurrent_net(core.Net("doc_rnn"), cell, [("x_t", "X")], [("h_prev", "h0")], {"h_prev": "h"},
    ...                      scope="rnn")
    >>> [str(o) for o in outs]
    ['h_all', 'h_last']
    """
    if len(inputs) != 1:
        raise GraphError("recurrent_net: Only one input blob is supported so far")
    cell = _proto(cell_net)
    op_name = net.NextName("recurrent")

    def s(name: str) -> str:
        return f"{op_name if scope is None else scope}/{name}"

    known = [str(i[0]) for i in inputs] + [str(x[1]) for x in initial_cell_inputs]
    known += [str(x[0]) for x in initial_cell_inputs] + ([str(timestep)] if timestep is not None else [])
    references = [core.BlobReference(b) for b in cell.external_input if b not in known]
    recompute = None if recompute_blobs_on_backward is None else {str(b) for b in recompute_blobs_on_backward}
    bwd = mapping = versions = None
    if not forward_only:
        bwd, mapping, versions = _backward_cell(cell, recompute)
    # NOTE: the blobs are passed on as given: a BlobReference stays as it is (already scoped by whoever
    # made it), a string is scoped by the current NameScope once, when the op is added, as in Caffe2.
    all_inputs = [i[1] for i in inputs] + [x[1] for x in initial_cell_inputs] + references
    cell.type = "simple"
    fwd_links, bwd_links, aliases, states, all_outputs = [], [], [], [], []
    for cell_input, _ in initial_cell_inputs:
        cell_input = str(cell_input)
        state, out = s(cell_input + "_states"), links[cell_input]
        fwd_links += [(cell_input, state, 0), (str(out), state, 1)]
        aliases += [(state, out + "_all", 1), (state, out + "_last", -1)]
        all_outputs += [out + "_all", out + "_last"]
        states.append(state)
        if bwd is not None:
            bwd_links.append((str(out) + "_grad", state + "_grad", 1))
            bwd.Proto().external_input.append(str(out) + "_grad")
            # NOTE: when nothing writes <input>_grad (a Sum passes it through), link the IR's name.
            written = versions.get(cell_input + "_grad", 0)
            bwd_links.append((cell_input + "_grad" if written else str(mapping[cell_input]), state + "_grad", 0))
    for input_t, seq in inputs:
        fwd_links.append((str(input_t), str(seq), 0))
    backward_args: dict[str, Any] = {}
    if bwd is not None:
        bwd_links += [(str(mapping[str(input_t)]), str(seq) + "_grad", 0) for input_t, seq in inputs]
        bwd.Proto().external_input.extend(cell.external_input)
        bwd.Proto().external_input.extend(cell.external_output)
        _accumulate_external(bwd)
        params = [p for p in references if str(p) in mapping]
        b_int, b_ext, b_off = _unzip(bwd_links)
        backward_args = {"param": [all_inputs.index(p) for p in params], "backward_link_internal": b_int,
                         "backward_link_external": b_ext, "backward_link_offset": b_off,
                         "outputs_with_grads": list(outputs_with_grads),
                         "recompute_blobs_on_backward": sorted(recompute or ()),
                         "param_grads": [str(mapping[str(p)]) for p in params]}
        if len(bwd.Proto().op):
            backward_args["backward_step_net"] = bwd.Proto()
    l_int, l_ext, l_off = _unzip(fwd_links)
    a_src, a_dst, a_off = _unzip(aliases)
    results = net.RecurrentNetwork(
        all_inputs, all_outputs + [s("step_workspaces")], alias_src=a_src, alias_dst=[str(a) for a in a_dst],
        alias_offset=a_off, recurrent_states=states,
        initial_recurrent_state_ids=[[str(b) for b in all_inputs].index(str(x[1])) for x in initial_cell_inputs],
        link_internal=l_int, link_external=l_ext, link_offset=l_off, enable_rnn_executor=1, step_net=cell,
        timestep="timestep" if timestep is None else str(timestep), **backward_args)
    return results[:-1]


def set_rnn_executor_config(rnn_op: caffe2_pb2.OperatorDef, num_threads: int | None = None,
                            max_cuda_streams: int | None = None) -> None:
    """Add ``rnn_executor.num_threads`` / ``rnn_executor.max_cuda_streams`` arguments to a
    RecurrentNetwork(Gradient) op, as Caffe2's helper does (netviz runs steps in order and ignores them)."""
    if rnn_op.type not in ("RecurrentNetwork", "RecurrentNetworkGradient"):
        raise GraphError(f"set_rnn_executor_config: op {rnn_op.type} is not a RecurrentNetwork(Gradient)")
    for name, value in (("num_threads", num_threads), ("max_cuda_streams", max_cuda_streams)):
        if value is not None:
            arg = rnn_op.arg.add()
            arg.name, arg.i = "rnn_executor." + name, value


def retrieve_step_blobs(net: Any, prefix: str = "rnn") -> list[Any]:
    """Copy every step's blobs of each RecurrentNetwork op of `net` (already run in the current
    workspace) into the workspace as ``<prefix>_<blob><t>``; returns their names.

    Why: the per-step blobs live in the op's step workspaces, which views cannot read; this is
    Caffe2's ``recurrent.retrieve_step_blobs``, built on RecurrentNetworkBlobFetcher.
    """
    names: list[Any] = []
    rnn_ops = [op for op in _proto(net).op if op.type == "RecurrentNetwork"]
    for count, op in enumerate(rnn_ops, start=1):
        listing = f"{prefix}_{count}"
        workspace.RunOperatorOnce(core.CreateOperator(
            "RecurrentNetworkBlobFetcher", [op.output[-1]], [listing], prefix=prefix))
        names += workspace.FetchBlob(listing).tolist()
    return names
