"""Gradients of Do / If / While: Caffe2's ``control_ops_grad``, with its wrong cases made right.

The gradient of a control op is a control op of the same kind whose subnets hold the gradient
ops of the forward subnets: a gradient ``Do`` pops the child workspace its forward ``Do`` pushed
(so forward locals are read from there), a gradient ``If`` re-reads the condition, a gradient
``While`` iterates while the body's workspace stack is non-empty (``HasScope``).

Names, op lists and arguments are Caffe2's (ordered deterministically where Caffe2 iterates a
set).  Where Caffe2 1.10.2 fails or is wrong, netviz differs (``docs/fidelity.md``):

* a subnet that reads and then overwrites a bound blob (loop-carried state) reads its input
  from a snapshot the forward ``Do`` takes (``<inner>/_DO_OPERATOR_FWD_INPUT_``), and its
  gradient ``Do`` may bind one outer gradient as both input and output;
* a loop whose body carries state accumulates read-only input gradients over iterations and
  zeroes the incoming gradient of outputs the body does not read;
* the gradient ``If`` lists every input its branches read (Caffe2 drops one-character names).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from engine.runtime.grad_makers import GradientMakerError
from engine.model.netnames import next_net_name
from engine.model.opdef import arg_value, make_argument
from engine.model.optypes import CONTROL_FLOW
from engine.model.scope import CurrentNameScope
from proto import caffe2_pb2

__all__ = ["dedupe_g_output", "gen_do_gradient", "gen_if_gradient", "gen_while_gradient",
           "do_bindings", "carried_names", "snapshot_name", "disambiguate_grad_if_op_output"]

INNER_GRAD = "/_DO_OPERATOR_INNER_GRAD_"
INNER_GRAD_COPY = "/_DO_OPERATOR_INNER_GRAD_COPY_"
FWD_INPUT = "/_DO_OPERATOR_FWD_INPUT_"
WHILE_ITER_GRAD = "/_WHILE_ITERATION_GRAD_"


def _fail(msg: str) -> GradientMakerError:
    return GradientMakerError(msg)


def _plain(op_type: str, inputs: Sequence[str], outputs: Sequence[str], name: str | None = None,
           **args: Any) -> caffe2_pb2.OperatorDef:
    """An op as Caffe2's Python helpers build it here (``name`` unset unless given)."""
    op = caffe2_pb2.OperatorDef(type=op_type, input=inputs, output=outputs, name=name)
    op.arg.extend(make_argument(k, v) for k, v in args.items())
    return op


def _net_arg(op: caffe2_pb2.OperatorDef, name: str) -> caffe2_pb2.NetDef | None:
    for a in op.arg:
        if a.name == name:
            return a.n
    return None


def _top_level_io(op: caffe2_pb2.OperatorDef, name: str) -> tuple[set[str], set[str]]:
    """Names the top-level ops of subnet arg `name` of `op` read and write (empty sets without it)."""
    net = _net_arg(op, name)
    ops = net.op if net is not None else ()
    return {i for o in ops for i in o.input}, {w for o in ops for w in o.output}


def kept_by_a_branch(op: caffe2_pb2.OperatorDef) -> list[str]:
    """Outputs of If `op` that one branch leaves unchanged and no branch reads (a then-only If
    overwriting a blob): when that branch runs, the blob keeps the value it had before the If."""
    if op.type != "If":
        return []
    (then_r, then_w), (else_r, else_w) = _top_level_io(op, "then_net"), _top_level_io(op, "else_net")
    return [b for b in dict.fromkeys(op.output) if b not in then_r | else_r and not (b in then_w and b in else_w)]


# ---- Do bindings -------------------------------------------------------------------------
def do_bindings(op: caffe2_pb2.OperatorDef) -> tuple[dict[str, str], str]:
    """``(inner -> outer bindings, workspace-stack blob)`` of a Do op, checked as Caffe2 does.

    NOTE: an outer name may be bound twice only in a gradient Do, once as an input and once as
    an output (an in-place gradient of loop-carried state); Caffe2 rejects that.

    Raises
    ------
    ValueError
        Caffe2's text ("Reusage of outer blob name X in Do op", …).
    """
    inner = [s for s in (arg_value(op, "inner_blobs") or [])]
    idx = list(arg_value(op, "outer_blobs_idx") or [])
    if _net_arg(op, "net") is None:
        raise ValueError("net must be specified in Do operator")
    if not op.input or not op.output:
        raise ValueError("Expected at least one input and one output blob in Do op")
    if op.input[-1] != op.output[-1]:
        raise ValueError("Expected same input/output workspace blob")
    ins, outs = list(op.input[:-1]), list(op.output[:-1])
    if len(set(ins)) != len(ins):
        raise ValueError("Found duplicates in Do op inputs")
    if len(set(outs)) != len(outs):
        raise ValueError("Found duplicates in Do op outputs")
    if len(inner) != len(idx):
        raise ValueError("Arguments inner_blobs and outer_blobs_idx of different length in Do op")
    if len(set(inner)) != len(inner):
        raise ValueError("Found duplicates in inner_blobs in Do op")
    outer = ins + outs
    bindings: dict[str, str] = {}
    used: dict[str, int] = {}
    for name, i in zip(inner, idx):
        if not 0 <= i < len(outer):
            raise ValueError("Outer blob index is out of bounds in Do op")
        o = outer[i]
        if o in used and not (op.is_gradient_op and (used[o] < len(ins)) != (i < len(ins))):
            raise ValueError(f"Reusage of outer blob name {o} in Do op")
        used[o] = i
        bindings[name] = o
    if set(used) != set(outer):
        raise ValueError("Not all outer blob names are used in blob bindings in Do op")
    return bindings, op.output[-1]


def snapshot_name(inner: str) -> str:
    """Where a forward Do keeps the input value of a loop-carried inner blob."""
    return inner + FWD_INPUT


def carried_names(net: caffe2_pb2.NetDef, bound: Iterable[str]) -> list[str]:
    """Bound inner names the subnet reads before it overwrites them (in first-read order)."""
    bound, written, read_first = set(bound), set(), {}
    for op in net.op:
        for i in op.input:
            if i in bound and i not in written:
                read_first.setdefault(i, None)
        written.update(op.output)
    return [n for n in read_first if n in written]


def _rename_carried(net: caffe2_pb2.NetDef, carried: Sequence[str]
                    ) -> tuple[list[caffe2_pb2.OperatorDef], set[str]]:
    """The subnet's ops with reads of each carried name, up to its first write, read from the
    snapshot; and the names renamed.  Control ops keep their reads (their own Do snapshots)."""
    ops, pending, renamed = [], set(carried), set()
    for op in net.op:
        new = caffe2_pb2.OperatorDef()
        new.CopyFrom(op)
        for k, i in enumerate(new.input):
            if i in pending and op.type not in CONTROL_FLOW:
                new.input[k] = snapshot_name(i)
                renamed.add(i)
        pending -= set(op.output)
        ops.append(new)
    return ops, renamed


# ---- shared helpers ------------------------------------------------------------------------
def dedupe_g_output(op: caffe2_pb2.OperatorDef, g_output: Sequence[Any]
                    ) -> tuple[list[caffe2_pb2.OperatorDef], list[Any]]:
    """Give each output its own gradient name: a repeated one becomes ``Copy(G) -> <O>_<G>_DEDUP``."""
    ops, deduped, seen = [], [], {}
    for out, g in zip(op.output, g_output):
        if not g:
            deduped.append(g)
        elif out in seen:
            deduped.append(seen[out])
        elif g not in seen.values():
            seen[out] = g
            deduped.append(g)
        else:
            name = f"{out}_{g}_DEDUP"
            ops.append(_plain("Copy", [str(g)], [name]))
            deduped.append(name)
            seen[out] = name
    return ops, deduped


SubnetBackward = Callable[[Sequence[caffe2_pb2.OperatorDef], dict[str, str]],
                          tuple[list[caffe2_pb2.OperatorDef], Mapping[Any, Any]]]
SUBNET_BACKWARD: list[SubnetBackward] = []
"""The backward-pass generator these makers differentiate subnets with.  It is the autodiff layer's
(``IR(ops, save_inputs=False).GetBackwardPass``), above the op families: :mod:`engine.autodiff.gradient_ir`
puts it here when it loads, and only it calls these makers."""


def _backward(ops: Sequence[caffe2_pb2.OperatorDef], init: Mapping[str, str]
              ) -> tuple[list[caffe2_pb2.OperatorDef], dict[str, str]]:
    if not SUBNET_BACKWARD:
        raise GradientMakerError("differentiating a subnet needs engine.autodiff.gradient_ir (import it first)")
    grad_ops, grad_map = SUBNET_BACKWARD[0](ops, dict(init))
    return grad_ops, {str(b): str(g) for b, g in grad_map.items()}


def _reads_writes(ops: Iterable[caffe2_pb2.OperatorDef]) -> tuple[list[str], list[str]]:
    """Names read before any of `ops` writes them, and names written (first-appearance order)."""
    reads, writes = {}, {}
    for op in ops:
        reads.update((i, None) for i in op.input if i not in writes)
        writes.update((o, None) for o in op.output)
    return list(reads), list(writes)


def _gen_subnet_gradient(subnet: caffe2_pb2.NetDef, init: Mapping[str, str]
                         ) -> tuple[caffe2_pb2.NetDef, dict[str, str], list[str], list[str]]:
    grad_ops, grad_map = _backward(subnet.op, init)
    reads, writes = _reads_writes(grad_ops)
    return _grad_net(subnet, grad_ops), grad_map, reads, writes


def _grad_net(net: caffe2_pb2.NetDef, ops: Iterable[caffe2_pb2.OperatorDef]) -> caffe2_pb2.NetDef:
    """Copy of `net` named ``<name>_grad`` holding `ops`, external lists cleared."""
    g = caffe2_pb2.NetDef()
    g.CopyFrom(net)
    if g.name:
        g.name += "_grad"
    del g.op[:], g.external_input[:], g.external_output[:]
    g.op.extend(ops)
    return g


def _init_grad_map(op: caffe2_pb2.OperatorDef, g_output: Sequence[Any], what: str) -> dict[str, str]:
    init = {o: str(g) for o, g in zip(op.output, g_output) if g}
    if not init:
        raise _fail(f"Empty initial gradient map for {what} op")
    return init


def _check_counts(op: caffe2_pb2.OperatorDef, g_output: Sequence[Any], what: str) -> None:
    if op.type != what:
        raise _fail(f"Expected {what} op")
    if what != "Do" and not op.input:
        raise _fail(f"Expected at least one input in {what} op")
    if len(op.output) != len(g_output):
        raise _fail(f"Different number of gradient blobs and {what} op outputs")


# ---- Do ---------------------------------------------------------------------------------------
def gen_do_gradient(op: caffe2_pb2.OperatorDef, g_output: Sequence[Any]
                    ) -> tuple[list[caffe2_pb2.OperatorDef], list[Any]]:
    """The gradient Do of a forward Do: pops its workspace, runs the subnet's gradient ops there.

    Examples
    --------
    >>> from engine.model.opdef import create_operator as mk
    >>> body = caffe2_pb2.NetDef(name="body", op=[mk("Tanh", "x", "y")])
    >>> do = mk("Do", ["X", "ws"], ["Y", "ws"], net=body, inner_blobs=["x", "y"], outer_blobs_idx=[0, 1])
    >>> ops, g = gen_do_gradient(do, ["Y_grad", None])
    >>> list(ops[0].input), list(ops[0].output), g
    (['Y', 'Y_grad', 'ws'], ['X_grad', 'ws'], ['X_grad'])
    """
    _check_counts(op, g_output, "Do")
    try:
        inner_to_outer, ws_blob = do_bindings(op)
    except ValueError as e:
        raise _fail(str(e)) from None
    subnet = _net_arg(op, "net")
    outer_to_inner = {o: i for i, o in inner_to_outer.items()}
    copies, g_output = dedupe_g_output(op, g_output)
    ins, outs = list(op.input[:-1]), list(op.output[:-1])
    init, incoming = {}, {}
    for outer, g in zip(outs, g_output):
        if g:
            inner = outer_to_inner[outer]
            init[inner] = inner + INNER_GRAD
            incoming[inner + INNER_GRAD] = str(g)
    if not init:
        raise _fail("Empty initial gradient map for Do op")
    carried = carried_names(subnet, inner_to_outer)
    fwd_ops, renamed = _rename_carried(subnet, carried) if carried else (subnet.op, set())
    inner_ops, grad_map = _backward(fwd_ops, init)
    if not inner_ops:
        return [], []
    copy_ops, g_input, new_outputs, bindings = [], [], [], {}
    for outer in ins:
        inner = outer_to_inner[outer]
        g = grad_map.get(snapshot_name(inner) if inner in renamed else inner)
        if g is None:
            g_input.append(None)
            continue
        copy_ops.append(_plain("Copy", [g], [inner + INNER_GRAD_COPY]))
        bindings[inner + INNER_GRAD_COPY] = outer + "_grad"
        new_outputs.append(outer + "_grad")
        g_input.append(outer + "_grad")
    new_inputs, saved, written = [], {}, set()
    for gop in inner_ops:
        for i in gop.input:
            if i in written:
                continue
            outer = inner_to_outer.get(i) or incoming.get(i)
            if outer:
                if outer not in new_inputs:
                    new_inputs.append(outer)
                bindings[i] = outer
            else:
                saved[i] = None
        written.update(gop.output)
    grad_do = _gradient_do(op, subnet, inner_ops + copy_ops, new_inputs, new_outputs, bindings,
                           list(saved), ws_blob)
    do_bindings(grad_do)
    return copies + [grad_do], g_input


def _gradient_do(fwd: caffe2_pb2.OperatorDef, net: caffe2_pb2.NetDef, ops: list[caffe2_pb2.OperatorDef],
                 inputs: list[str], outputs: list[str], bindings: dict[str, str], saved: list[str],
                 ws_blob: str) -> caffe2_pb2.OperatorDef:
    g = caffe2_pb2.OperatorDef()
    g.CopyFrom(fwd)
    if g.name:
        g.name += "_grad"
    del g.input[:], g.output[:], g.arg[:], g.control_input[:]
    g.input.extend(inputs + [ws_blob])
    g.output.extend(outputs + [ws_blob])
    outer = inputs + outputs
    # NOTE: a gradient copy binds to its output place, so an in-place gradient (outer name both
    # read and written) is bound twice, once per side; otherwise this is Caffe2's outer.index(o).
    idx = [len(inputs) + outputs.index(o) if k.endswith(INNER_GRAD_COPY) else outer.index(o)
           for k, o in bindings.items()]
    g.arg.extend([make_argument("net", _grad_net(net, ops)), make_argument("inner_blobs", list(bindings)),
                  make_argument("outer_blobs_idx", idx), caffe2_pb2.Argument(name="saved_fwd_blobs")])
    g.arg[-1].strings.extend(s.encode() for s in saved)
    g.is_gradient_op = True
    return g


# ---- If -----------------------------------------------------------------------------------------
def gen_if_gradient(op: caffe2_pb2.OperatorDef, g_output: Sequence[Any]
                    ) -> tuple[list[caffe2_pb2.OperatorDef], list[Any]]:
    """The gradient If: same condition, branch gradient nets, zero-init of one-sided gradients."""
    _check_counts(op, g_output, "If")
    copies, g_output = dedupe_g_output(op, g_output)
    init = _init_grad_map(op, g_output, "If")
    then_net = _net_arg(op, "then_net")
    if then_net is None:
        raise _fail("Expected then subnet in If op")
    then_grad, then_map, then_in, then_out = _gen_subnet_gradient(then_net, init)
    grad_map = dict(then_map)
    else_net, else_grad, else_map, else_in, else_out = _net_arg(op, "else_net"), None, {}, [], []
    if else_net is not None:
        else_grad, else_map, else_in, else_out = _gen_subnet_gradient(else_net, init)
        for blob, g in else_map.items():
            t = then_map.get(blob)
            if t is None or t == g:
                grad_map[blob] = g
            elif t == init.get(blob):
                grad_map[blob] = g
            elif g != init.get(blob):
                raise _fail(f"Unexpected grad blob name {blob}, {g}, {t}")
    zero_then = _zero_init(init, then_map, [o for o in then_out if o not in else_out and o in then_map.values()])
    if else_grad is not None:
        else_grad.op.extend(zero_then)
    elif zero_then:
        else_grad = caffe2_pb2.NetDef()
        else_grad.CopyFrom(then_grad)
        if else_grad.name:
            else_grad.name += "_auto_else_zero_blobs_"
        del else_grad.op[:]
        else_grad.op.extend(zero_then)
    then_grad.op.extend(_zero_init(init, else_map, [o for o in else_out if o not in then_out
                                                    and o in else_map.values()]))
    kept = _pass_through(op, init, grad_map, then_grad, else_grad)
    cond = op.input[0]
    inputs = [cond] + [i for i in dict.fromkeys(then_in + else_in + kept) if i != cond]  # NOTE: Caffe2 drops chars of cond
    g = caffe2_pb2.OperatorDef()
    g.CopyFrom(op)
    del g.input[:], g.output[:], g.arg[:], g.control_input[:]
    g.input.extend(inputs)
    g.output.extend(dict.fromkeys(then_out + else_out + [init[b] for b in kept]))
    g.arg.append(make_argument("then_net", then_grad))
    if else_grad is not None:
        g.arg.append(make_argument("else_net", else_grad))
    if g.name:
        g.name += "_grad"
    g.is_gradient_op = True
    return copies + [g], [grad_map.get(i) for i in op.input]


def _pass_through(op: caffe2_pb2.OperatorDef, init: Mapping[str, str], grad_map: dict[str, str],
                  then_grad: caffe2_pb2.NetDef, else_grad: caffe2_pb2.NetDef | None) -> list[str]:
    """Gradients of the earlier version of blobs a branch may leave unchanged, listed among the If's
    inputs by the IR (netviz only; Caffe2 raises a version error, docs/fidelity.md): the branch that
    overwrites the blob zeroes its gradient, the other passes the incoming one through."""
    kept = [b for b in kept_by_a_branch(op) if b in op.input and b in init]
    for b in kept:
        grad_map[b] = init[b]
        for name, grad in (("then_net", then_grad), ("else_net", else_grad)):
            if b in _top_level_io(op, name)[1]:
                grad.op.append(_plain("ConstantFill", [b], [init[b]], value=0.0))
    return kept


def _zero_init(init: Mapping[str, str], grad_map: Mapping[str, str], names: Iterable[str]
               ) -> list[caffe2_pb2.OperatorDef]:
    """Define each gradient the other branch computes: copy the incoming one, else zeros."""
    ops = []
    for g in names:
        blob = next(b for b, n in grad_map.items() if n == g)
        if blob in init:
            if init[blob] != g:
                ops.append(_plain("Copy", [init[blob]], [g]))
        else:
            ops.append(_plain("ConstantFill", [blob], [g], value=0.0))
    return ops


def disambiguate_grad_if_op_output(grad_op: caffe2_pb2.OperatorDef, idx: int, new: str) -> None:
    """Rename output `idx` of a gradient If, and the same output of the ops in its branches."""
    old = grad_op.output[idx]
    for name in ("then_net", "else_net"):
        net = _net_arg(grad_op, name)
        for op in net.op if net is not None else ():
            for k, o in enumerate(op.output):
                if o == old:
                    op.output[k] = new
    grad_op.output[idx] = new


# ---- While --------------------------------------------------------------------------------------
def gen_while_gradient(op: caffe2_pb2.OperatorDef, g_output: Sequence[Any]
                       ) -> tuple[list[caffe2_pb2.OperatorDef], list[Any]]:
    """The gradient While: one backward iteration per forward workspace left on the body's stack."""
    _check_counts(op, g_output, "While")
    copies, g_output = dedupe_g_output(op, g_output)
    init = _init_grad_map(op, g_output, "While")
    loop_net = _net_arg(op, "loop_net")
    if loop_net is None:
        raise _fail("Expected loop subnet in While op")
    if len(loop_net.op) != 1 or loop_net.op[0].type != "Do":
        raise _fail("Gradient While op requires single Do op as a loop body")
    body = loop_net.op[0]
    if arg_value(body, "reuse_workspace", 0):
        raise _fail("Gradient While op requires Do loop body op without reuse_workspace set")
    ws_blob = body.output[-1]
    loop_grad, loop_map, _, _ = _gen_subnet_gradient(loop_net, init)
    body_reads = _body_reads(body)
    pre: list[caffe2_pb2.OperatorDef] = []
    if _loop_varying(op, body, body_reads) and loop_grad.op:
        pre = _accumulate_over_iterations(op, body, body_reads, loop_grad, loop_map, init)
    reads, writes = _reads_writes(loop_grad.op)
    name = next_net_name("gradient_loop_cond_net")  # NOTE: Caffe2 names it by a core.Net, off the global counter
    cond_blob = CurrentNameScope() + name + "/cond"  # that fresh net's NextScopedBlob
    # NOTE: Caffe2 adds these through Net methods (CreateOperator), which set name: "".
    cond_net = caffe2_pb2.NetDef(name=name, op=[_plain("HasScope", [ws_blob], [cond_blob], name="")])
    init_ops = [_plain("HasScope", [ws_blob], [cond_blob], name="")]
    for blob, g in init.items():
        lg = loop_map.get(blob)
        if lg is not None and lg != g:
            cond_net.op.append(_plain("Copy", [lg], [g], name=""))
            init_ops.append(_plain("Copy", [g], [lg], name=""))
    cond_net.external_input.extend(_reads_writes(cond_net.op)[0])
    w = caffe2_pb2.OperatorDef()
    w.CopyFrom(op)
    if w.name:
        w.name += "_grad"
    del w.arg[:], w.control_input[:], w.input[:], w.output[:]
    w.arg.extend([make_argument("loop_net", loop_grad), make_argument("cond_net", cond_net)])
    w.input.extend([cond_blob] + reads)
    w.output.extend(writes)
    w.is_gradient_op = True
    return copies + pre + init_ops + [w], [loop_map.get(i) for i in op.input]


def _body_reads(body: caffe2_pb2.OperatorDef) -> set[str]:
    """Outer names whose values the body's subnet reads (add_while_op also lists outputs as inputs)."""
    try:
        bindings, _ = do_bindings(body)
    except ValueError as e:
        raise _fail(str(e)) from None
    reads = _reads_writes(_net_arg(body, "net").op)[0]
    return {bindings[i] for i in reads if i in bindings}


def _loop_varying(op: caffe2_pb2.OperatorDef, body: caffe2_pb2.OperatorDef, body_reads: set[str]) -> bool:
    """True when an iteration reads what the body or the cond net wrote (state carried over)."""
    written = set(body.output[:-1])
    cond_net = _net_arg(op, "cond_net")
    for cop in cond_net.op if cond_net is not None else ():
        written.update(cop.output)
        for sub in (a.n for a in cop.arg if a.HasField("n")):
            written.update(o for s in sub.op for o in s.output)
    return any(i in written for i in body_reads)


def _accumulate_over_iterations(op: caffe2_pb2.OperatorDef, body: caffe2_pb2.OperatorDef,
                                read: set[str], loop_grad: caffe2_pb2.NetDef, loop_map: dict[str, str],
                                init: Mapping[str, str]) -> list[caffe2_pb2.OperatorDef]:
    """netviz: sum read-only inputs' gradients over iterations; zero unread outputs' gradients.

    Returns the zero-fill ops to run before the gradient While.
    """
    grad_do, pre = loop_grad.op[-1], []
    written = set(body.output[:-1])
    for blob in dict.fromkeys(body.input[:-1]):
        g = loop_map.get(blob)
        if blob in written or blob not in read or g is None or g not in grad_do.output or g in init.values():
            continue
        k = list(grad_do.output).index(g)
        grad_do.output[k] = g + WHILE_ITER_GRAD
        loop_grad.op.append(_plain("Sum", [g, g + WHILE_ITER_GRAD], [g]))
        pre.append(_plain("ConstantFill", [blob], [g], value=0.0))
    for blob, g in init.items():
        if blob in written and blob not in read and blob != op.input[0]:
            loop_grad.op.append(_plain("ConstantFill", [g], [g], value=0.0))
    return pre
