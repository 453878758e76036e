"""Reference implementation of the golden 'compare_as_sets' paths
(see tests/golden/README.md).  Pure Python: works with any protobuf NetDef
class (caffe2.proto.caffe2_pb2 under .venv-caffe2, or netviz's proto).

    canonical = normalize(case_dict, parse_netdef, to_text)

returns a deep copy of the case in which every text-format NetDef that a
compare_as_sets path points into has been re-serialised with the listed
fields put into a canonical (sorted) order, so two goldens produced under
different PYTHONHASHSEEDs compare equal with ==.
"""
import copy
import re

_STEP = re.compile(r"(\w+)(?:\[([^\]]*)\])?")


def _split(path):
    """'backward.grad_net.op[0].arg[then_net].n.op[1:3]#bindings' ->
    (['backward', 'grad_net'], [('op','0'), ('arg','then_net'), ('n',None), ('op','1:3')], 'bindings')"""
    suffix = None
    if "#" in path:
        path, suffix = path.split("#", 1)
    parts = []
    for tok in re.findall(r"\w+(?:\[[^\]]*\])?", path):
        m = _STEP.fullmatch(tok)
        parts.append((m.group(1), m.group(2)))
    # the JSON part ends at the first step that names a text NetDef field:
    # everything up to and including 'forward_net' / 'grad_net' / 'net_after'
    for i, (name, idx) in enumerate(parts):
        if name in ("forward_net", "grad_net", "net_after") and idx is None:
            return [p[0] for p in parts[: i + 1]], parts[i + 1:], suffix
    raise ValueError("no NetDef field in path %r" % path)


def _slice(spec, n):
    if spec is None:
        return 0, n
    if ":" in spec:
        a, b = spec.split(":")
        a = int(a) if a else 0
        b = int(b) if b else n
        if a < 0:
            a += n
        if b < 0:
            b += n
        return a, b
    return None


def _resolve(msg, steps):
    """Walk steps except the last; returns (container message, last step)."""
    cur = msg
    for name, idx in steps[:-1]:
        if name == "op":
            cur = cur.op[int(idx)]
        elif name == "arg":
            cur = [a for a in cur.arg if a.name == idx][0]
        elif name == "n":
            cur = cur.n
        else:
            raise ValueError(name)
    return cur, steps[-1]


def _sort_field(container, last):
    name, idx = last
    if name == "arg":  # arg[saved_fwd_blobs].strings handled via 'strings'
        raise ValueError("path must end in a list field")
    field = getattr(container, name)
    a, b = _slice(idx, len(field))
    items = list(field)
    if name == "op":
        part = sorted(items[a:b], key=lambda o: o.SerializeToString(deterministic=True))
        new = items[:a] + part + items[b:]
        copies = [type(o)() for o in new]
        for c, o in zip(copies, new):
            c.CopyFrom(o)
        del field[:]
        field.extend(copies)
    else:
        new = items[:a] + sorted(items[a:b]) + items[b:]
        del field[:]
        field.extend(new)


def _canon_bindings(op):
    """Replace a Do op's (inner_blobs, outer_blobs_idx) by the equivalent
    bindings sorted by inner name, with indices computed against the op's
    inputs/outputs *after* those are sorted (input[:-1], output[:-1])."""
    outer = list(op.input[:-1]) + list(op.output[:-1])
    inner = idx = None
    for a in op.arg:
        if a.name == "inner_blobs":
            inner = a
        if a.name == "outer_blobs_idx":
            idx = a
    pairs = sorted(zip([s for s in inner.strings], [outer[i] for i in idx.ints]))
    ins = sorted(op.input[:-1]) + [op.input[-1]]
    outs = sorted(op.output[:-1]) + [op.output[-1]]
    order = ins[:-1] + outs[:-1]
    del inner.strings[:]
    inner.strings.extend([p[0] for p in pairs])
    del idx.ints[:]
    idx.ints.extend([order.index(p[1]) for p in pairs])


def normalize(case, parse_netdef, to_text):
    """parse_netdef(text) -> NetDef message; to_text(msg) -> str."""
    case = copy.deepcopy(case)
    paths = case.get("compare_as_sets", [])
    by_root = {}
    for p in paths:
        if p.endswith("#first_line"):
            keys = p[: -len("#first_line")].split(".")
            holder = case
            for k in keys[:-1]:
                holder = holder[k]
            holder[keys[-1]] = holder[keys[-1]].split("\n")[0]
            continue
        if not any(k in p.split("#")[0].split(".") for k in ("forward_net", "grad_net", "net_after")):
            # a plain JSON list
            keys = p.split(".")
            holder = case
            for k in keys[:-1]:
                holder = holder[k]
            holder[keys[-1]] = sorted(holder[keys[-1]])
            continue
        root, steps, suffix = _split(p)
        by_root.setdefault(tuple(root), []).append((steps, suffix))
    for root, items in by_root.items():
        holder = case
        for k in root[:-1]:
            holder = holder[k]
        msg = parse_netdef(holder[root[-1]])
        # 1) bindings first (they refer to the original input/output order)
        for steps, suffix in items:
            if suffix == "bindings":
                op, last = _resolve(msg, steps + [("input", None)])
                _canon_bindings(op)
        # 2) list fields, deepest first so op-range sorts see canonical children
        for steps, suffix in sorted(items, key=lambda it: -len(it[0])):
            if suffix == "bindings":
                continue
            container, last = _resolve(msg, steps)
            _sort_field(container, last)
        holder[root[-1]] = to_text(msg)
    return case
