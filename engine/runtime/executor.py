"""Running ops and nets: look up the kernel, bind its declared args, pick ``xp``, run, store.

Each op is bound once (:func:`bind`) into a :class:`BoundOp` holding the kernel, its keyword
arguments and its array namespace, so running it costs a few dict lookups and one call.
Outputs are written only after the kernel returns: a failing op leaves the workspace with
every blob it had before, and its error names net, op index, type, blob and shapes.
"""
from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import engine.runtime.ops  # noqa: F401  (fills KERNELS)
from engine.runtime import device as dev, jit
from engine.runtime.ops import activation, arith, norm
from engine.catalogue import is_caffe2_op
from engine.catalogue.schema import NOT_CAFFE2, schema_policy, violations
from engine.errors import ExecutionError, SchemaError, ShapeError, UnknownOpError
from engine.model.opdef import args_of
from engine.runtime.plans import UNCHANGED, drive
from engine.catalogue.registry import KERNELS
from proto import caffe2_pb2

# Ops whose inputs may live on another device than the op (copy ops, InputsCanCrossDevices).
CROSS_DEVICE = frozenset({"Copy", "CopyCPUToGPU", "CopyGPUToCPU", "CopyFromCPUInput", "CopyOnDeviceLike",
                          "EnsureCPUOutput", "Shape", "Size", "Print"})
CPU_OUTPUT = frozenset({"CopyGPUToCPU", "EnsureCPUOutput", "Shape", "Size"})
# Ops that run under the mutex blob of their input 0 (Caffe2 holds it across the op's writes, so
# threads running them never lose an update): the lock covers the kernel and the output store.
MUTEX_OPS = frozenset({"AtomicIter", "AtomicAppend", "AtomicFetchAdd", "AtomicFetchAdd64"})
# Small int metadata that Caffe2 keeps on the CPU even for CUDA ops: {type: (input idx, output idx)}.
CPU_SIDE = {"Concat": ((), (1,)), "Split": ((1,), ()), "Reshape": ((1,), (1,)), "Slice": ((1, 2), ()),
            "SliceGradient": ((1, 2), ()), "ResizeNearest": ((1,), ()), "ResizeNearestGradient": ((2,), ()),
            "LearningRate": ((0,), ()), "Adam": ((5,), ()),
            "SparseAdam": ((6,), ()), "RowWiseSparseAdam": ((6,), ()), "SmartDecaySparseAdam": ((7,), ()),
            "DecayAdagrad": ((5,), ()), "YellowFin": ((9,), ()), "Iter": ((0,), (0,)), "AtomicIter": ((1,), (0,)),
            # NOTE: RNN link ops read the step's timestep as a CPU tensor (Input<Tensor>(0, CPU))
            "rnn_internal_apply_link": ((0,), ()), "rnn_internal_accumulate_gradient_input": ((0,), ())}
#: RNN unit ops read the step's timestep as a CPU tensor (``Input<Tensor>(TIMESTEP, CPU)``): its input
#: index without the optional sequence-lengths input
TIMESTEP_INPUT = {"LSTMUnit": 3, "LSTMUnitGradient": 3, "GRUUnit": 2, "GRUUnitGradient": 2}
_arity_cache: dict[Any, tuple[int, float]] = {}
MAX_SUBNET_DEPTH = 100
"""Subnets (Do/If/While/RNN) nested deeper than this stop with an ExecutionError, not a RecursionError."""
_nesting = threading.local()


_random_root: list[np.random.Generator | None] = [None]


@contextlib.contextmanager
def random_source(root: np.random.Generator | None) -> Iterator[None]:
    """Draw the seeds of random ops without a ``random_seed`` from `root` inside the block."""
    old, _random_root[0] = _random_root[0], root
    try:
        yield
    finally:
        _random_root[0] = old


@dataclass(frozen=True, slots=True)
class OpContext:
    """What a ``needs_context`` kernel gets: the op, where it runs, and a net runner."""

    op: caffe2_pb2.OperatorDef
    workspace: Any
    index: int
    net_name: str
    force_cpu: bool = False
    #: What a Caffe2 op object keeps between its runs (a counter): one dict per bound op, so it lasts
    #: over the runs of a created net or of RunOperatorMultiple, and RunOperatorOnce starts afresh.
    state: dict = field(default_factory=dict)

    def run_net(self, net: caffe2_pb2.NetDef, workspace: Any = None) -> None:
        run_net(net, workspace or self.workspace, device="cpu" if self.force_cpu else None)

    @property
    def rng(self) -> np.random.Generator:
        """The op's random generator: its ``random_seed`` if set, else one drawn from the active
        :func:`random_source` (so a debugging session replays the same numbers), else fresh."""
        if self.op.device_option.HasField("random_seed"):
            return np.random.default_rng(self.op.device_option.random_seed)
        root = _random_root[0]
        return np.random.default_rng(root.integers(2**63) if root is not None else None)


@dataclass(slots=True)
class BoundOp:
    """An op ready to run: kernel, bound keywords, namespace, blob names."""

    index: int
    op: caffe2_pb2.OperatorDef
    net_name: str
    fn: Any
    xp: Any
    kwargs: dict[str, Any]
    ins: tuple[str, ...]
    outs: tuple[str, ...]
    device: int
    out_devices: tuple[int, ...]
    checked: tuple[str, ...]
    gpu_out: bool
    ctx: OpContext | None = field(default=None)
    plan: bool = False  # the kernel is a generator of SubnetRun (engine.runtime.plans)
    mutex: bool = False  # runs under the mutex of input 0 (MUTEX_OPS)
    #: a CPU op without context, plan, mutex or CPU-side blobs, with one output: :func:`run_compiled`
    #: calls its kernel inline (no per-op helper calls: the dispatch overhead of tiny ops)
    direct: bool = False
    #: run_compiled runs this op and the next (``fuses`` ops in all) as this function (:func:`fuse_pairs`)
    fused: Any = None
    fuses: int = 2


def _arity(fn: Any) -> tuple[int, float]:
    """(required, maximum) positional array inputs of a kernel, ``xp`` excluded."""
    if fn not in _arity_cache:
        ps = list(inspect.signature(fn).parameters.values())[1:]
        pos = [p for p in ps if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        req = sum(p.default is p.empty for p in pos)
        var = any(p.kind is p.VAR_POSITIONAL for p in ps)
        _arity_cache[fn] = (req, float("inf") if var else len(pos))
    return _arity_cache[fn]


def _where(net_name: str, index: int, op: caffe2_pb2.OperatorDef) -> str:
    return f"{net_name or 'net'}: op #{index} {op.type} '{op.name}'"


def bind(op: caffe2_pb2.OperatorDef, index: int = 0, net_name: str = "", *,
         workspace: Any = None, device: str | None = None) -> BoundOp:
    """Bind `op` to its kernel once. ``device="cpu"`` maps every op to the CPU.

    Raises
    ------
    UnknownOpError
        "op X has no kernel" for types without one (Int8, detection ops…).
    ExecutionError
        Wrong number of inputs, or a CUDA op without CuPy/GPU.
    """
    spec = KERNELS.get(op.type)
    where = _where(net_name, index, op)
    if spec is None and not is_caffe2_op(op.type):
        raise UnknownOpError(f"{where}: op {op.type} {NOT_CAFFE2} (no kernel)")
    if schema_policy() == "error" and (wrong := violations(op)):  # Caffe2's OpSchema::Verify
        raise SchemaError(f"{where}: {wrong[0]} (did not pass schema checking)")
    if spec is None:
        why = ": netviz does not run Python ops" if op.type in ("Python", "PythonGradient", "PythonDLPack") else ""
        raise UnknownOpError(f"{where}: op {op.type} has no kernel{why}")
    req, most = _arity(spec.fn)
    if not req <= len(op.input) <= most:
        raise ExecutionError(f"{where}: takes {req}..{most} inputs, got {len(op.input)}")
    force_cpu = device == "cpu"
    dtype = op.device_option.device_type if op.HasField("device_option") else dev.CPU
    device_type = dev.CPU if force_cpu else dtype
    try:
        xp = dev.namespace(device_type)
    except ExecutionError as e:
        raise ExecutionError(f"{where}: {e}") from None
    values = args_of(op)
    kwargs = {k: values.get(k, d) for k, d in spec.arg_defaults.items()}
    ctx = OpContext(op, workspace, index, net_name, force_cpu) if spec.needs_context else None
    if ctx is not None:
        kwargs["ctx"] = ctx
    cpu_in, cpu_out = CPU_SIDE.get(op.type, ((), ()))
    if op.type in TIMESTEP_INPUT:  # its index moves by one when the op reads sequence lengths
        cpu_in = (TIMESTEP_INPUT[op.type] + (1 if values.get("sequence_lengths", 1) else 0),)
    out_devices = tuple(dev.CPU if op.type in CPU_OUTPUT or i in cpu_out else device_type
                        for i in range(len(op.output)))
    cross = op.type in CROSS_DEVICE or force_cpu
    checked = () if cross else tuple(n for i, n in enumerate(op.input) if i not in cpu_in)
    plan, mutex = inspect.isgeneratorfunction(spec.fn), op.type in MUTEX_OPS
    direct = (device_type == dev.CPU and not any(out_devices) and ctx is None and not plan and not mutex
              and len(op.output) == 1)
    return BoundOp(index, op, net_name, spec.fn, xp, kwargs, tuple(op.input), tuple(op.output),
                   device_type, out_devices, checked, any(out_devices), ctx, plan, mutex, direct)


def run_bound(b: BoundOp, ws: Any) -> None:
    """Run one bound op against workspace `ws`; outputs are stored only on success.

    A plan kernel (a generator, see :mod:`engine.runtime.plans`) has each subnet it asks for run whole; a
    :data:`MUTEX_OPS` op runs and stores while holding its mutex blob's lock.
    """
    lock = getattr(ws.values.get(b.ins[0]), "value", None) if b.mutex else None
    if hasattr(lock, "acquire"):
        with lock:
            return _run_bound(b, ws)
    return _run_bound(b, ws)


def _run_bound(b: BoundOp, ws: Any) -> None:
    out = call_kernel(b, ws)
    if b.plan:
        device = "cpu" if b.ctx is not None and b.ctx.force_cpu else None
        depth = getattr(_nesting, "depth", 0)
        if depth >= MAX_SUBNET_DEPTH:
            out.close()
            raise ExecutionError(f"{_where(b.net_name, b.index, b.op)}: subnets nested more than "
                                 f"{MAX_SUBNET_DEPTH} deep (engine.runtime.executor.MAX_SUBNET_DEPTH)")
        _nesting.depth = depth + 1
        try:
            out = drive(out, lambda run: run_net(run.net, run.workspace, device=device))
        finally:
            _nesting.depth = depth
    store_outputs(b, ws, out)


#: Caffe2's ``--caffe2_operator_throw_if_fp_exceptions`` (GlobalInit): an op whose float arithmetic
#: divides by zero, overflows or makes a NaN fails instead of going on (NumPy's errstate "raise").
THROW_IF_FP_EXCEPTIONS = [False]


def set_global_flags(args: list[str]) -> None:
    """Apply the GlobalInit arguments netviz honours (the others are ignored, as unknown gflags)."""
    for a in args:
        name, _, value = a.lstrip("-").partition("=")
        if name == "caffe2_operator_throw_if_fp_exceptions":
            THROW_IF_FP_EXCEPTIONS[0] = value.lower() not in ("0", "false", "")


def call_kernel(b: BoundOp, ws: Any) -> Any:
    """Call the kernel of `b` on its inputs from `ws`; a plan kernel returns its generator."""
    values = ws.values
    if b.checked and (b.device or ws.gpu_used):
        _check_devices(b, ws)
    if b.ctx is not None and b.ctx.workspace is not ws:
        b.ctx = b.kwargs["ctx"] = OpContext(b.op, ws, b.index, b.net_name, b.ctx.force_cpu, b.ctx.state)
    try:
        if THROW_IF_FP_EXCEPTIONS[0]:
            with np.errstate(divide="raise", over="raise", invalid="raise"):
                return b.fn(b.xp, *map(values.__getitem__, b.ins), **b.kwargs)
        return b.fn(b.xp, *map(values.__getitem__, b.ins), **b.kwargs)
    except Exception as e:
        raise _failure(b, ws, e) from (None if isinstance(e, KeyError) else e)


def store_outputs(b: BoundOp, ws: Any, out: Any) -> None:
    """Write a kernel's result into `ws`; None (a plan whose subnets wrote them) stores nothing,
    nor does an :data:`UNCHANGED` output."""
    if out is None and b.plan:
        return
    if type(out) is not tuple:
        out = (out,)
    outs = b.outs
    if len(out) < len(outs):
        raise ExecutionError(f"{_where(b.net_name, b.index, b.op)}: kernel gave {len(out)} outputs "
                             f"for {len(outs)} declared")
    values, devices = ws.values, ws.devices
    for n, v, d in zip(outs, out, b.out_devices):
        if v is UNCHANGED:
            continue
        values[n] = v
        devices[n] = d
    if b.gpu_out:
        ws.gpu_used = True


def _check_devices(b: BoundOp, ws: Any) -> None:
    devices = ws.devices
    for n in b.checked:
        if n in devices and devices[n] != b.device:
            raise ExecutionError(f"{_where(b.net_name, b.index, b.op)}: input blob '{n}' is on device "
                                 f"{devices[n]}, op runs on device {b.device}")


def _failure(b: BoundOp, ws: Any, e: Exception) -> ExecutionError:
    """The one-line error for a failed op: a missing input blob, or the kernel's error with shapes."""
    values = ws.values
    missing = next((n for n in b.ins if n not in values), None)
    if missing is not None:
        return ExecutionError(f"{_where(b.net_name, b.index, b.op)}: input blob '{missing}' not found")
    if isinstance(e, ExecutionError):
        return e
    bad = next((k for k, v in b.kwargs.items() if isinstance(v, (str, bytes))
                and isinstance(KERNELS[b.op.type].arg_defaults.get(k), (int, float))), None)
    if bad is not None and isinstance(e, (TypeError, ValueError)):  # NOTE: Cast(to="float16") is fine
        return ExecutionError(f"{_where(b.net_name, b.index, b.op)}: argument '{bad}' must be a number, "
                              f"got {b.kwargs[bad]!r}")
    args = [values[n] for n in b.ins]
    return ExecutionError(f"{_where(b.net_name, b.index, b.op)}: {_plain(e)}; inputs {_describe(b.ins, args)}")


#: What a kernel's Python exception means, in words a user reads (issue #35: no raw exception text).
_PLAIN = ((ShapeError, "{}"), (KeyError, "no entry {}"), (IndexError, "index out of range ({})"),
          (ZeroDivisionError, "division by zero ({})"), (FloatingPointError, "float arithmetic failed ({})"),
          (ArithmeticError, "float arithmetic failed ({})"), (RuntimeWarning, "float arithmetic failed ({})"),
          (TypeError, "an input or argument of the wrong type: {}"), (MemoryError, "out of memory{}"),
          (ValueError, "inputs it cannot take: {}"))


def _plain(e: Exception) -> str:
    """`e` as one line without its Python class name: what kind of failure, then its detail."""
    from engine.runtime.numpy_errors import numpy_in_op_terms  # noqa: PLC0415  (only on a failure)
    detail = numpy_in_op_terms(" ".join(str(e).split())) or type(e).__name__.lower()
    if isinstance(e, IndexError) and detail.endswith("index out of range"):  # NOTE: Python's, not the kernel's
        return "a dim or index it reads is out of range: its inputs' ranks or sizes do not fit this op"
    for cls, text in _PLAIN:
        if isinstance(e, cls):
            return text.format(detail)
    return f"the kernel failed: {detail}"


def _describe(names: tuple[str, ...], args: list[Any]) -> str:
    return ", ".join(f"{n}{tuple(a.shape) if hasattr(a, 'shape') else type(a).__name__}"
                     f"{':' + str(a.dtype) if hasattr(a, 'dtype') else ''}" for n, a in zip(names, args))


def run_op(op: caffe2_pb2.OperatorDef, ws: Any, *, device: str | None = None, index: int = 0,
           net_name: str = "") -> None:
    """Run one OperatorDef in `ws` (``RunOperatorOnce``)."""
    run_bound(bind(op, index, net_name, workspace=ws, device=device), ws)


@dataclass(slots=True)
class CompiledNet:
    """A created net: its proto and its ops, bound."""

    net: caffe2_pb2.NetDef
    ops: list[BoundOp]
    #: what :func:`run_compiled` walks, made on its first run: one tuple an op, (op, kernel, namespace,
    #: inputs, keywords, output 0, the one input's name or None), kernel None where the op does not run
    #: inline (not :attr:`BoundOp.direct`, or fused with the next)
    steps: list[tuple] | None = None


def _steps(ops: list[BoundOp]) -> list[tuple]:
    """:attr:`CompiledNet.steps` of `ops`: the attributes an inline op needs, read once per net, not
    once per op and run (a tiny op's cost is these Python lookups, not its kernel)."""
    return [(b, b.fn, b.xp, b.ins, b.kwargs, b.outs[0], b.ins[0] if len(b.ins) == 1 else None)
            if b.direct and b.fused is None else (b, None, None, None, None, None, None) for b in ops]


def compile_net(net: caffe2_pb2.NetDef, ws: Any, *, device: str | None = None) -> CompiledNet:
    """Bind every op of `net` (ops without a device option get the net's)."""
    ops = []
    for i, op in enumerate(net.op):
        if not op.HasField("device_option") and net.HasField("device_option"):
            op = caffe2_pb2.OperatorDef.FromString(op.SerializeToString())
            op.device_option.CopyFrom(net.device_option)
        if op.device_option.node_name:
            raise ExecutionError(f"{_where(net.name, i, op)}: node_name must be empty for all operators "
                                 "at execution time.")
        ops.append(bind(op, i, net.name, workspace=ws, device=device))
    fuse_pairs(ops)
    return CompiledNet(net, ops)


def _then_relu(kernel: Any) -> Any:
    """The pair function of `kernel` and the in-place Relu on its output 0 that follows it."""
    def pair(a: BoundOp, b: BoundOp, values: dict) -> tuple[Any, Any]:
        out = kernel(a.xp, *[values[n] for n in a.ins], **a.kwargs)
        return out, out[0] if type(out) is tuple else out
    return pair


def _relu_grad_bn_grad(a: BoundOp, b: BoundOp, values: dict) -> tuple[Any, Any] | None:
    """ReluGradient(Y, dY) -> G and SpatialBNGradient(X, scale, G, mean, inv_std) (G not yet stored)."""
    x, scale, _, mean, inv_std = (values[n] if i != 2 else None for i, n in enumerate(b.ins))
    return norm.relu_gradient_then_spatial_bn_gradient(values[a.ins[0]], values[a.ins[1]], x, scale, mean,
                                                       inv_std, **b.kwargs)


def _bn_sum_relu(a: BoundOp, b: BoundOp, c: BoundOp, values: dict) -> tuple[Any, Any, Any] | None:
    """SpatialBN -> Y, Sum(Y, R) or Sum(R, Y) -> S, Relu(S) -> S: a residual block's end."""
    y_first = b.ins[0] == a.outs[0]
    got = norm.spatial_bn_then_sum_relu(*[values[n] for n in a.ins], residual=values[b.ins[1 if y_first else 0]],
                                        y_first=y_first, **a.kwargs)
    return got and (got[0], got[1], got[1])


def _sum_relu_grad_bn_grad(a: BoundOp, b: BoundOp, c: BoundOp, values: dict) -> tuple[Any, Any, Any] | None:
    """Sum(dA, dB) -> S, ReluGradient(Y, S) -> S and SpatialBNGradient(X, scale, S, mean, inv_std) (S as G)."""
    x, scale, _, mean, inv_std = (values[n] if i != 2 else None for i, n in enumerate(c.ins))
    got = norm.sum_relu_gradient_then_spatial_bn_gradient(values[a.ins[0]], values[a.ins[1]], values[b.ins[0]], x,
                                                          scale, mean, inv_std, **c.kwargs)
    return got and (got[0], got[0], got[1])


def _sum_reads_y_then_relu(a: BoundOp, b: BoundOp, c: BoundOp) -> bool:
    """`b` (a Sum of two) reads `a`'s output 0 and no other output of `a` (which the function would read before
    `a` wrote it), and `c` is an in-place Relu on the Sum's output."""
    return len(b.ins) == 2 and sum(n in a.outs for n in b.ins) == 1 and a.outs[0] in b.ins and _relu_follows(b, c)


def _relu_grad_in_place_then_bn_grad(a: BoundOp, b: BoundOp, c: BoundOp) -> bool:
    """`a` (a Sum of two) is overwritten at once by `b`, a ReluGradient in place on it as its dY (so the Sum's
    own values are never seen), whose output `c` (SpatialBNGradient) reads as its dY."""
    return len(a.ins) == 2 and b.ins[1] == a.outs[0] == b.outs[0] != b.ins[0] and _bn_grad_reads_it(b, c)


def _relu_follows(a: BoundOp, b: BoundOp) -> bool:
    """`b` (a Relu) reads `a`'s output 0 and overwrites it in place."""
    return b.ins == a.outs[:1] == b.outs


def _bn_grad_reads_it(a: BoundOp, b: BoundOp) -> bool:
    """`b` (a 5-input SpatialBNGradient) reads `a`'s output 0 as its dY, and nowhere else."""
    return len(b.ins) == 5 and [i for i, n in enumerate(b.ins) if n == a.outs[0]] == [2]


#: (first kernel, second kernel) -> (when the pair fuses, the pair function: (first op, second op, blob
#: values) -> (first op's outputs, second op's outputs), or None to run them apart)
PAIRS = {(norm.spatial_bn, activation.relu): (_relu_follows, _then_relu(norm.spatial_bn_relu)),
         (arith.sum_, activation.relu): (_relu_follows, _then_relu(arith.sum_relu_inplace)),
         (activation.relu_gradient, norm.spatial_bn_gradient): (_bn_grad_reads_it, _relu_grad_bn_grad)}
#: The same for three ops in a row, tried before :data:`PAIRS`: (when, function of the three ops and the values)
TRIPLES = {(norm.spatial_bn, arith.sum_, activation.relu): (_sum_reads_y_then_relu, _bn_sum_relu),
           (arith.sum_, activation.relu_gradient, norm.spatial_bn_gradient):
               (_relu_grad_in_place_then_bn_grad, _sum_relu_grad_bn_grad)}


def fuse_pairs(ops: list[BoundOp]) -> None:
    """Mark each CPU op that :data:`TRIPLES` fuses with the next two, or else :data:`PAIRS` with the next:
    :func:`run_compiled` runs them as one function (ResNet's SpatialBN -> Sum -> in-place Relu, Sum ->
    in-place ReluGradient -> SpatialBNGradient, SpatialBN -> in-place Relu, Sum -> in-place Relu,
    ReluGradient -> SpatialBNGradient).  NOTE: each op reads the one before's output at once, nothing runs
    between them and the function gives every op's outputs with the values of the ops apart, so the
    workspace after them is the same; stepping (the debugger, :func:`run_bound`) runs them apart."""
    i = 0
    while i < len(ops):
        for rules, k in ((TRIPLES, 3), (PAIRS, 2)):
            group = ops[i:i + k]
            rule = rules.get(tuple(o.fn for o in group))
            if (rule is not None and rule[0](*group) and all(o.xp is np and not o.gpu_out and o.ctx is None
                                                             and not o.plan and not o.mutex for o in group)):
                group[0].fused, group[0].fuses = rule[1], k
                i += k - 1
                break
        i += 1


OPS_RUN = [0]
"""Ops started so far by :func:`run_compiled` (subnets included): net observers count from it."""


def run_compiled(c: CompiledNet, ws: Any) -> None:
    """Run the ops of a compiled net in order, stopping at the first failure.

    NOTE: a :attr:`BoundOp.direct` op in a CPU-only workspace runs inline, what :func:`run_bound`
    would do spelled out for its case (same result, same one-line error): a tiny op's cost is the
    Python calls around its kernel, not the kernel.  An op marked by :func:`fuse_pairs` runs with the
    one or two ops after it as one function (the same values, a pass over a big array less).  Whether the
    workspace holds a GPU blob is read again after each op that does not run inline (only such an op
    can write one); ``--caffe2_operator_throw_if_fp_exceptions`` is read once a run."""
    OPS_RUN[0] += len(c.ops)
    if c.steps is None:
        c.steps = _steps(c.ops)
        jit.load_for(b.fn for b in c.ops)  # NOTE: numba's kernels loaded before the first op, not inside one
    values, devices, cpu = ws.values, ws.devices, dev.CPU
    slow = ws.gpu_used or THROW_IF_FP_EXCEPTIONS[0]
    steps = iter(c.steps)
    for b, fn, xp, ins, kw, out0, in0 in steps:
        if fn is None or slow:
            if b.fused is not None and not slow:
                group = [b, *(next(steps)[0] for _ in range(b.fuses - 1))]
                try:
                    outs = b.fused(*group, values)
                except Exception:  # NOTE: run apart, each op fails with its own one-line error
                    outs = None
                if outs is None:
                    for o in group:
                        run_bound(o, ws)
                else:
                    for o, out in zip(group, outs):
                        store_outputs(o, ws, out)
            else:
                run_bound(b, ws)
            values, devices = ws.values, ws.devices  # NOTE: a subnet op may have rebound them
            slow = ws.gpu_used or THROW_IF_FP_EXCEPTIONS[0]
            continue
        try:
            out = fn(xp, values[in0], **kw) if in0 is not None else fn(xp, *[values[n] for n in ins], **kw)
        except Exception as e:
            raise _failure(b, ws, e) from (None if isinstance(e, KeyError) else e)
        if type(out) is tuple:
            store_outputs(b, ws, out)
        elif out is not UNCHANGED:
            values[out0] = out
            devices[out0] = cpu


def run_net(net: caffe2_pb2.NetDef, ws: Any, *, device: str | None = None) -> None:
    """``RunNetOnce``: bind and run every op of `net` in `ws`."""
    run_compiled(compile_net(net, ws, device=device), ws)
