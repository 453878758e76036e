"""Caffe2's C++ memonger: blob recycling that shrinks the number of distinct blobs a net uses.

Caffe2's ``memonger.py`` (``share_grad_blobs``, ``optimize_inference_for_dag``,
``optimize_inference_fast``) calls two C++ functions through ``workspace.C``; these are them,
as plain functions over NetDefs (``engine.caffe2.capi`` wraps them in Caffe2's byte-level signatures):

* :func:`optimize_inference_net` — linear scan over a simple net: a blob dies at its last read
  and its storage is handed to the next blob first written afterwards (``__m<k>_shared``).
* :func:`compute_blob_recycling_for_dag` — a DFS over the op graph from the ``heads`` that
  recycles only between ops whose order is fixed: every blob carries the *tokens* (branch
  ids) of the ops that touched it, and a freed blob may be reused only by an op holding all of
  them, so parallel branches of a DAG never share storage.

Both check every op against Caffe2's schema first (``SchemaError``, a RuntimeError, as
Caffe2's ``run_schema_check``).

Where Caffe2 iterates a C++ hash container of blob names (which recycled blob gets which
``__m<k>_shared`` number; in the linear scan, which of the blobs one op frees is reused first)
the order is libstdc++'s, which :func:`std_unordered_order` reproduces (``std::hash`` of a
string and the prime rehash policy of the GCC that built the torch 1.10.2 wheel), so the nets
come out byte for byte as Caffe2's.
"""
from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence

from google.protobuf import text_format

from engine.catalogue.schema import NOT_CAFFE2, violations
from engine.errors import ExecutionError, SchemaError
from proto import caffe2_pb2

__all__ = ["optimize_inference_net", "compute_blob_recycling_for_dag", "run_schema_check", "std_unordered_order"]


# ---- libstdc++ hash order ----

_M64 = (1 << 64) - 1
_MUL = 0xC6A4A7935BD1E995
_SEED = 0xC70F6907
#: libstdc++'s bucket counts: small sizes, then its prime list (as far as a net's blob count needs).
_FAST_BUCKETS = (2, 2, 2, 3, 5, 5, 7, 7, 11, 11, 11, 11, 13, 13)
_PRIMES = (17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97, 103, 109, 113, 127, 137,
           139, 149, 157, 167, 179, 193, 199, 211, 227, 241, 257, 277, 293, 313, 337, 359, 383, 409, 439, 467,
           503, 541, 577, 619, 661, 709, 761, 823, 887, 953, 1031, 1109, 1193, 1289, 1381, 1493, 1613, 1741,
           1879, 2029, 2179, 2357, 2549, 2753, 2971, 3209, 3469, 3739, 4027, 4349, 4703, 5087, 5503, 5953,
           6427, 6949, 7517, 8123, 8783, 9497, 10273, 11113, 12011, 12983, 14033, 15173, 16411, 17749, 19183,
           20753, 22447, 24281, 26267, 28411, 30727, 33223, 35933, 38873, 42043, 45481, 49201, 53201, 57557,
           62233, 67307, 72817, 78779, 85229, 92203, 99733, 107897, 116731, 126271, 136607, 147793, 159871,
           172933, 187091, 202409, 218971, 236897, 256279, 277261, 299951, 324503, 351061, 379787, 410857,
           444487, 480881, 520241, 562841, 608903, 658753, 712697, 771049, 834181, 902483, 976369)


def _std_hash(name: str) -> int:
    """``std::hash<std::string>`` of libstdc++ on 64-bit Linux (``_Hash_bytes``, a MurmurHash2 variant)."""
    data = name.encode()
    n, aligned = len(data), len(data) & ~7
    h = (_SEED ^ (n * _MUL)) & _M64
    for i in range(0, aligned, 8):
        d = (int.from_bytes(data[i:i + 8], "little") * _MUL) & _M64
        h = ((h ^ ((d ^ (d >> 47)) * _MUL & _M64)) * _MUL) & _M64
    if n & 7:
        h = ((h ^ int.from_bytes(data[aligned:], "little")) * _MUL) & _M64
    h = ((h ^ (h >> 47)) * _MUL) & _M64
    return h ^ (h >> 47)


def std_unordered_order(keys: Iterable[str]) -> list[str]:
    """The iteration order of a libstdc++ ``std::unordered_set<std::string>`` (or map) filled by
    inserting `keys` in order (repeats ignored) into a default-constructed container.

    The nodes form one list; a new key goes first in its bucket's run, or at the list's head
    when its bucket is empty; a rehash (at 1 element to 13 buckets, then when the count passes
    the bucket count, to the next prime at least twice as many) relinks the nodes in list order.
    """
    head: list[str | None] = [None]  # the node after "before begin"
    nxt: dict[str, str | None] = {}
    codes: dict[str, int] = {}
    before: list[str | None | bool] = [None]  # per bucket: the node before its run (True: before-begin)
    limit = 0

    def link_first(key: str, b: int) -> None:
        """Caffe2's container inserting `key` as the first node of bucket `b` (or of the list)."""
        if before[b] is not None:
            prev = before[b]
            if prev is True:
                nxt[key], head[0] = head[0], key
            else:
                nxt[key], nxt[prev] = nxt[prev], key
        else:
            nxt[key], head[0] = head[0], key
            if nxt[key] is not None:
                before[codes[nxt[key]] % len(before)] = key
            before[b] = True

    def rehash(n: int) -> None:
        node, head[0] = head[0], None
        before[:] = [None] * n
        begin_bucket = 0
        while node is not None:
            following, b = nxt[node], codes[node] % n
            if before[b] is None:
                nxt[node], head[0] = head[0], node
                before[b] = True
                if nxt[node] is not None:
                    before[begin_bucket] = node
                begin_bucket = b
            else:
                prev = before[b]
                if prev is True:
                    nxt[node], head[0] = head[0], node
                else:
                    nxt[node], nxt[prev] = nxt[prev], node
            node = following

    for key in keys:
        if key in codes:
            continue
        count = len(codes) + 1
        if count > limit:  # the prime rehash policy (max load factor 1)
            want = max(count, 11 if not limit else 0)
            if want >= len(before):
                n = max(want + 1, 2 * len(before))
                n = _FAST_BUCKETS[n] if n < len(_FAST_BUCKETS) else next(p for p in _PRIMES if p >= n)
                limit = n
                rehash(n)
            else:
                limit = len(before)
        codes[key] = _std_hash(key)
        link_first(key, codes[key] % len(before))
    out, node = [], head[0]
    while node is not None:
        out.append(node)
        node = nxt[node]
    return out


def run_schema_check(net: caffe2_pb2.NetDef) -> None:
    """Raise :class:`SchemaError` for the first op of `net` that fails Caffe2's schema check.

    Op types Caffe2 has no schema for are not checked (as Caffe2's ``Verify`` is skipped).
    """
    for i, op in enumerate(net.op):
        wrong = [v for v in violations(op) if not v.endswith(NOT_CAFFE2)]
        if wrong:
            raise SchemaError(f"{net.name or '<net>'}: op #{i} {op.type} '{op.name}': {wrong[0]} "
                              "(memonger: did not pass schema checking)")


def _shared_name(k: int, namescope: str = "") -> str:
    return f"{namescope}__m{k}_shared"


def optimize_inference_net(net: caffe2_pb2.NetDef, static_blobs: Iterable[str]) -> caffe2_pb2.NetDef:
    """A copy of `net` whose non-static blobs reuse the storage of blobs already dead.

    Nets of another type than ``""``/``"simple"``, nets holding a ``RecurrentNetwork`` op and
    nets already memongered (a ``__m<k>_shared`` name exists) come back unchanged, as in Caffe2.
    Blobs in `static_blobs` and blobs never written by an op (inputs) keep their names;
    external inputs/outputs are not renamed (Caffe2 leaves them as they are).
    """
    if net.type not in ("", "simple"):
        return net
    run_schema_check(net)
    if any(op.type == "RecurrentNetwork" for op in net.op):
        return net
    static = set(static_blobs)
    all_blobs: set[str] = set()
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for i, op in enumerate(net.op):
        for b in op.input:
            if b in first:
                last[b] = i
            all_blobs.add(b)
        for b in op.output:
            all_blobs.add(b)
            if b not in static and b not in first:
                first[b], last[b] = i, i
    free: list[str] = []
    renaming: dict[str, str] = {}
    mapping: dict[str, str] = {}
    for i, op in enumerate(net.op):
        freed: list[str] = []
        for b in op.input:
            if b not in first or last[b] != i:
                continue
            if b not in mapping:
                mapping[b] = b
                shared = _shared_name(len(renaming))
                if shared in all_blobs:
                    return net  # NOTE: Caffe2's guard against memongering a net twice
                renaming[b] = shared
            if mapping[b] not in freed:
                freed.append(mapping[b])
        for b in op.output:
            if free and first.get(b) == i:
                mapping[b] = free.pop()
        free.extend(std_unordered_order(freed))  # NOTE: Caffe2 collects them in a hash set
    out = caffe2_pb2.NetDef()
    out.CopyFrom(net)
    for op in out.op:
        op.input[:] = [renaming[mapping[b]] if b in mapping else b for b in op.input]
        op.output[:] = [renaming[mapping[b]] if b in mapping else b for b in op.output]
    return out


class _DagRecycler:
    """State of one :func:`compute_blob_recycling_for_dag` run (the DFS and its bookkeeping)."""

    def __init__(self, net: caffe2_pb2.NetDef, shareable: set[str], dont_share: set[str],
                 blob_shapes: Mapping[str, Sequence[int]]) -> None:
        n = len(net.op)
        self.net, self.shareable, self.dont_share, self.blob_shapes = net, shareable, dont_share, blob_shapes
        self.op_inputs = [0] * n            # in-degree of each op (readers of optimised outputs)
        self.op_visited_count = [0] * n
        self.op_token_deposit: list[set[int]] = [set() for _ in range(n)]
        self.op_visited = [False] * n
        self.tokens_counter = 1
        self.blob_to_ops: dict[str, list[int]] = defaultdict(list)
        self.blob_input_count: dict[str, int] = defaultdict(int)
        self.share_counts: dict[str, int] = defaultdict(int)
        self.blob_sizes: dict[str, int] = {}
        self.req_tokens: dict[str, set[int]] = defaultdict(set)
        self.optim_op_outputs: set[str] = set()
        self.mapping: dict[str, str] = {}
        self.blob_device: dict[str, tuple[int, int]] = {}
        self.processed_outputs: set[str] = set()

    def actual(self, name: str) -> str:
        return self.mapping.get(name, name)

    def size(self, name: str) -> int:
        shape = self.blob_shapes.get(name)
        if shape is None:
            return 0
        n = 1
        for d in shape:
            n *= int(d)
        return n

    def can_use(self, name: str, tokens: set[int], device: tuple[int, int]) -> bool:
        """The blob lives on `device` and every op that touched it holds a token we hold."""
        return self.blob_device.get(name, (0, 0)) == device and self.req_tokens[name] <= tokens

    def free_blob_for(self, name: str, tokens: set[int], free: list[tuple[int, str]],
                      device: tuple[int, int]) -> str:
        """A freed blob `name` may take over ("" if none): without shapes, the most shared
        usable one (heap order); with shapes, Caffe2's size heuristic (largest that fits)."""
        if not self.blob_shapes:
            skipped = []
            found = ""
            while free:
                cand = heapq.heappop(free)
                if self.can_use(cand[1], tokens, device):
                    found = cand[1]
                    break
                skipped.append(cand)
            for c in skipped:
                heapq.heappush(free, c)
            return found
        want, best, best_i = self.size(name), -1, -1
        for i, (_, cand) in enumerate(free):
            if self.can_use(cand, tokens, device):
                size = self.blob_sizes[cand]
                if size >= best and (best < want or best >= size):
                    best, best_i = size, i
        # NOTE: Caffe2 erases from the middle of its heap without re-heapifying; so do we.
        return free.pop(best_i)[1] if best_i != -1 else ""

    def process_op(self, i: int, free: list[tuple[int, str]], tokens: set[int]) -> None:
        """Visit op `i` and, depth first, every op it makes ready (an explicit stack: nets of
        thousands of ops would exceed Python's recursion limit)."""
        stack = [self._visit(i, free, tokens)]
        while stack:
            child = next(stack[-1], None)
            if child is None:
                stack.pop()
            else:
                stack.append(self._visit(child[0], free, child[1]))

    def _visit(self, i: int, free: list[tuple[int, str]], tokens: set[int]) -> Iterator[tuple[int, set[int]]]:
        """Caffe2's ``process_op`` for op `i`; yields each consumer ready to visit next."""
        tokens |= self.op_token_deposit[i]
        self.op_token_deposit[i] = set()
        if self.op_visited[i]:
            raise ExecutionError(f"{self.net.name or '<net>'}: op #{i}: memonger visited the op twice")
        self.op_visited[i] = True
        op = self.net.op[i]
        for b in [*op.input, *op.output]:
            a = self.actual(b)
            self.req_tokens[a] |= tokens
            if a != b:
                self.req_tokens[b] |= tokens
        new_free: list[tuple[int, str]] = []
        for b in op.input:
            if b in self.shareable:
                self.blob_input_count[b] += 1
                if self.blob_input_count[b] == len(self.blob_to_ops[b]):
                    a = self.actual(b)
                    if a not in self.dont_share:
                        new_free.append((-self.share_counts[a], a))
        new_free_names = {a for _, a in new_free}
        for b in op.output:
            if b in self.shareable and b not in self.processed_outputs and b not in new_free_names:
                freed = self.free_blob_for(b, tokens, free, self.blob_device.get(b, (0, 0)))
                if freed:
                    self.req_tokens[freed] |= tokens
                    self.share_counts[freed] += 1
                    self.mapping[b] = freed
                self.processed_outputs.add(b)
        in_pool = {name for _, name in free}
        for entry in new_free:
            if entry[1] not in in_pool:
                if self.blob_shapes and entry[1] not in self.blob_sizes:
                    self.blob_sizes[entry[1]] = self.size(entry[1])
                heapq.heappush(free, entry)
        branches = sum(len(self.blob_to_ops.get(b, ())) for b in op.output)
        for b in op.output:
            for j in self.blob_to_ops.get(b, ()):
                self.op_visited_count[j] += 1
                if self.op_visited_count[j] == self.op_inputs[j]:
                    new_tokens = set(tokens)
                    if branches > 1:
                        new_tokens.add(self.tokens_counter)
                        self.tokens_counter += 1
                    yield j, new_tokens
                elif not self.op_visited[j]:
                    self.op_token_deposit[j] |= tokens

    @staticmethod
    def _device_of(op: caffe2_pb2.OperatorDef) -> tuple[int, int]:
        return op.device_option.device_type, op.device_option.device_id

    def rename(self, net: caffe2_pb2.NetDef) -> caffe2_pb2.NetDef:
        """`net` with every blob replaced by what it maps to (RNN step nets too)."""
        out = caffe2_pb2.NetDef()
        out.CopyFrom(net)
        for op in out.op:
            if op.type.startswith("RecurrentNetwork"):
                self._rename_recurrent(op)
            if op.type == "AsyncIf":
                self._rename_async_if(op)
            op.input[:] = [self.actual(b) for b in op.input]
            op.output[:] = [self.actual(b) for b in op.output]
        return out

    def _rename_async_if(self, op: caffe2_pb2.OperatorDef) -> None:
        """Rename inside the branches of an ``AsyncIf``, their external inputs/outputs included."""
        for arg in op.arg:
            if arg.name in ("then_net", "else_net"):
                sub = self.rename(arg.n)
                sub.external_input[:] = [self.actual(b) for b in sub.external_input]
                sub.external_output[:] = [self.actual(b) for b in sub.external_output]
                arg.n.CopyFrom(sub)

    def _rename_recurrent(self, op: caffe2_pb2.OperatorDef) -> None:
        """Rename inside the step nets and record ``<blob>.rename`` args (the RNN op's links)."""
        for arg in op.arg:
            if arg.name not in ("step_net", "backward_step_net"):
                continue
            if arg.HasField("n"):
                if arg.HasField("s"):
                    raise ExecutionError(f"op {op.type} '{op.name}': {arg.name} holds both a NetDef and a string")
                arg.n.CopyFrom(self.rename(arg.n))
            else:
                step = text_format.Parse(arg.s.decode() if isinstance(arg.s, bytes) else arg.s, caffe2_pb2.NetDef())
                arg.s = text_format.MessageToString(self.rename(step), as_one_line=True).encode()  # Caffe2's text
        for b in [*op.input, *op.output]:
            if self.actual(b) != b:
                op.arg.add(name=f"{b}.rename", s=self.actual(b).encode())


def compute_blob_recycling_for_dag(net: caffe2_pb2.NetDef, heads: Sequence[str], op_indices: Sequence[int],
                                   shareable_blob_names: Iterable[str], namescope: str = "",
                                   dont_share_blob_names: Iterable[str] = (),
                                   blob_shapes: Mapping[str, Sequence[int]] | None = None) -> caffe2_pb2.NetDef:
    """A copy of `net` whose shareable blobs (outputs of `op_indices`) reuse dead blobs' storage.

    `heads` are the blobs the DFS starts from (the losses, or a net's inputs); only blobs in
    `shareable_blob_names` are recycled, never into a blob of `dont_share_blob_names`, never
    across devices or parallel branches.  With `blob_shapes` a freed blob is picked by size.
    Recycled storage is named ``<namescope>__m<k>_shared``.

    Raises
    ------
    SchemaError
        An op fails Caffe2's schema check (e.g. an op that must run in place does not).
    ExecutionError
        A shareable input of an optimised op is read before any of those ops writes it.
    """
    run_schema_check(net)
    shareable, head_set, dont_share = set(shareable_blob_names), set(heads), set(dont_share_blob_names)
    r = _DagRecycler(net, shareable, dont_share, blob_shapes or {})
    for i in op_indices:
        r.optim_op_outputs.update(b for b in net.op[i].output if b in shareable and b not in dont_share)
    seen: dict[str, int] = defaultdict(int)
    for i in op_indices:
        op = net.op[i]
        for b in op.input:
            if b in shareable or b in head_set:
                if b in r.optim_op_outputs:
                    if b not in seen:
                        raise ExecutionError(f"{net.name or '<net>'}: op #{i} {op.type}: input '{b}' was not "
                                             "output by an op before (memonger)")
                    r.op_inputs[i] += seen[b]
                else:
                    r.share_counts[b] = 1
                r.blob_to_ops[b].append(i)
        for b in op.output:
            seen[b] += 1
            # NOTE: CopyGPUToCPU runs with a GPU device option but writes CPU blobs
            r.blob_device[b] = (0, 0) if op.type == "CopyGPUToCPU" else r._device_of(op)
    for head in heads:
        for i in list(r.blob_to_ops.get(head, ())):
            if not r.op_visited[i] and not r.op_inputs[i]:  # NOTE: start from root ops only
                tokens = {r.tokens_counter}
                r.tokens_counter += 1
                r.process_op(i, [], tokens)
    shared: dict[str, str] = {}
    k = 0
    for canonical in (r.mapping[b] for b in std_unordered_order(r.mapping)):  # NOTE: Caffe2's hash map order
        if canonical not in shared:
            shared[canonical] = canonical
            if canonical in r.optim_op_outputs:
                shared[canonical], k = _shared_name(k, namescope), k + 1
    for blob, canonical in list(r.mapping.items()):
        r.mapping[blob] = shared[canonical]
    for canonical, name in shared.items():
        r.mapping.setdefault(canonical, name)
    return r.rename(net)
