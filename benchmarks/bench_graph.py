"""SSA + graph-model build time: synthetic chains/DAGs (linear-time check) and the model zoo; the export
of drawings (issue #43): a backward-pass export against its forward-only one (ResNet-50, DenseNet-121,
<= 4x, laid out by ``dot``; DenseNet-121's zoo net is refused, as by Caffe2, so the row draws it written
out of place: :func:`out_of_place`), a 10k-op chain with its backward pass against the 1k one (<= 10x:
linear; beside it the same ratio without the layout memo, which only repetitive nets gain from).  Each
ratio's two exports run alternated in this process, best of 3 each.

``run(quick)`` returns rows ``{"name", "netviz_s", "reference", "target", "ok"}``; quick mode
skips the 100k-op nets.  ``python -m benchmarks.bench_graph`` prints them (``--export`` only the export rows).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import best
from engine.graph import from_model, from_netdef
from engine.model.modelio import load_model
from engine.model.ssa import get_ssa
from proto import caffe2_pb2

ROOT = Path(__file__).resolve().parent.parent
ZOO = ROOT.parent / "shared" / "models" / "caffe2-model-zoo"
SIZES = (1_000, 10_000, 100_000)
ZOO_TARGET_S = 0.2


def chain(n: int) -> caffe2_pb2.NetDef:
    """Relu chain; every third op is in place, so versions climb as in real nets."""
    net = caffe2_pb2.NetDef(name=f"chain_{n}", external_input=["b0"])
    last = "b0"
    for i in range(n):
        out = last if i % 3 == 2 else f"b{i + 1}"
        net.op.add(type="Relu", input=[last], output=[out])
        last = out
    return net


def dag(n: int) -> caffe2_pb2.NetDef:
    """Each op adds the previous output and one from halfway back (fan-out up to log n)."""
    net = caffe2_pb2.NetDef(name=f"dag_{n}", external_input=["x0"])
    for i in range(1, n + 1):
        net.op.add(type="Add", input=[f"x{i - 1}", f"x{i // 2}"], output=[f"x{i}"])
    return net


def _synthetic(kind: str, make: Callable[[int], caffe2_pb2.NetDef], n: int) -> dict[str, Any]:
    net = make(n)
    secs = best(lambda: (get_ssa(net), from_netdef(net)), 2 if n >= 100_000 else 3)
    target = 6e-5 * n  # linear: 60 µs per op on a shared 2-core box
    return {"name": f"ssa+graph {kind} {n // 1000}k ops", "netviz_s": secs,
            "reference": {}, "target": f"<= {target:.2f} s", "ok": secs <= target}


def _zoo(path: Path) -> dict[str, Any]:
    def once() -> None:
        model = load_model(path)
        get_ssa(model.predict)
        from_model(model)
    secs = best(once, 3)
    return {"name": f"load+ssa+graph {path.parent.name}", "netviz_s": secs, "reference": {},
            "target": f"<= {ZOO_TARGET_S} s", "ok": secs <= ZOO_TARGET_S}


def grad_chain(n: int) -> caffe2_pb2.NetDef:
    """`n - 1` Relus and an AveragedLoss: every op differentiable (no in-place overwrite of a needed blob)."""
    net = caffe2_pb2.NetDef(name=f"grad_chain_{n}", external_input=["b0"])
    for i in range(n - 1):
        net.op.add(type="Relu", input=[f"b{i}"], output=[f"b{i + 1}"])
    net.op.add(type="AveragedLoss", input=[f"b{n - 1}"], output=["loss"])
    return net


def _export_pair(slow: tuple[caffe2_pb2.NetDef, bool], fast: tuple[caffe2_pb2.NetDef, bool],
                 repeat: int = 3) -> tuple[tuple[float, str, float], tuple[float, str, float]]:
    """Best wall times of two ``netviz export NET -o x.svg [--backward]`` runs in-process (load excluded),
    alternated (slow, fast, slow, ...) so a shared machine's load falls on both, how each was laid out,
    and its best CPU time (this process and the graphviz programs it ran): what the load moves least."""
    import resource
    import tempfile

    from netviz.export import export_net

    def cpu() -> float:
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    times: list[list[float]] = [[], []]
    cpus: list[list[float]] = [[], []]
    how = ["", ""]
    with tempfile.TemporaryDirectory() as tmp:
        def once(k: int, net: caffe2_pb2.NetDef, backward: bool) -> None:
            t, c = time.perf_counter(), cpu()
            how[k] = export_net(net, Path(tmp) / "x.svg", backward=backward, force=True, rankdir="auto",
                                loss="loss" if net.name.startswith("grad_chain") else None).layout
            times[k].append(time.perf_counter() - t)
            cpus[k].append(cpu() - c)
        for _ in range(repeat):
            once(0, *slow)
            once(1, *fast)
    return (min(times[0]), how[0], min(cpus[0])), (min(times[1]), how[1], min(cpus[1]))


def _ratio_row(name: str, pair: tuple[tuple[float, str, float], tuple[float, str, float]], limit: float,
               note: str = "") -> dict[str, Any]:
    """A ratio row: the wall-time ratio is the figure; the CPU-time ratio beside it (``cpu_ratio``)."""
    slow, fast = pair
    ratio = slow[0] / fast[0]
    by_dot = slow[1].startswith("dot") and fast[1].startswith("dot")
    row = {"name": name, "netviz_s": ratio, "reference": {"slow_s": round(slow[0], 3), "fast_s": round(fast[0], 3),
                                                          "cpu_ratio": round(slow[2] / max(fast[2], 1e-9), 2),
                                                          "layout": slow[1]},
           "target": f"<= {limit:g} (ratio), dot", "ok": ratio <= limit and by_dot}
    return row | ({"note": note} if note else {})


def out_of_place(net: caffe2_pb2.NetDef) -> tuple[caffe2_pb2.NetDef, int]:
    """A copy of `net` in which an op that overwrites a blob an earlier op read (and it does not read
    itself) writes a fresh name that its later readers read, and how many outputs were renamed.

    DenseNet-121's zoo net does its batch norms' affine step as ``Mul(x, w) → t``, ``Add(t, b) → x``: the
    Add overwrites the `x` that the Mul's gradient needs, so netviz refuses its backward pass, as Caffe2's
    ``AddGradientOperators`` does ("needs input conv5_blk/bn at version 0, but currently we have
    version 2"); written out of place, both build it."""
    out = caffe2_pb2.NetDef()
    out.CopyFrom(net)
    alias: dict[str, str] = {}
    read: set[str] = set()
    renamed = 0
    for i, op in enumerate(out.op):
        ins = [alias.get(b, b) for b in op.input]
        op.input[:] = ins
        outs = []
        for b in op.output:
            cur = alias.get(b, b)
            if cur in read and cur not in ins:
                alias[b] = cur = f"{b}_oop{i}"
                renamed += 1
            outs.append(cur)
        op.output[:] = outs
        read.update(ins)
    out.external_output[:] = [alias.get(b, b) for b in out.external_output]
    return out, renamed


def export_rows(repeat: int = 3, no_memo: bool = True) -> list[dict[str, Any]]:
    """The drawing-export rows of issue #43, each a ratio measured in this run (best of `repeat`, alternated);
    with `no_memo`, the chain row's ratios without the layout memo beside it (``no_memo_*``)."""
    from engine.errors import GradientError
    from engine.model.modelio import load_net
    from netviz.export import backward_drawing_net
    rows = []
    for model in ("resnet50", "densenet121"):
        net, name, note = load_net(ZOO / model / "predict_net.pbtxt"), f"export {model} --backward / forward-only", ""
        try:
            backward_drawing_net(net, None)
        except GradientError as e:  # NOTE: DenseNet-121: an in-place Add overwrites the input a Mul's gradient needs
            net, k = out_of_place(net)
            note = (f"the zoo net, refused as by Caffe2 ({e}), with its {k} in-place overwrites of a blob an earlier "
                    "op read written out of place (out_of_place)")
        rows.append(_ratio_row(name, _export_pair((net, True), (net, False), repeat), 4.0, note))
    chains = (grad_chain(10_000), True), (grad_chain(1_000), True)
    row = _ratio_row("export chain 10k / 1k ops, with backward", _export_pair(*chains, repeat), 10.0)
    if no_memo:
        row["reference"].update(_no_memo_ratios(chains, repeat))
    rows.append(row)
    return rows


def _no_memo_ratios(pair: tuple[tuple[caffe2_pb2.NetDef, bool], tuple[caffe2_pb2.NetDef, bool]], repeat: int
                    ) -> dict[str, float]:
    """The chain row's wall and CPU ratios without the layout memo (:mod:`netviz.ladder_memo`), which helps
    repetitive nets only (the chain's 154 pieces are a handful of graphs; ResNet-50's are all different)."""
    from netviz import ladder_svg
    was, ladder_svg.MEMO = ladder_svg.MEMO, False
    try:
        row = _ratio_row("", _export_pair(*pair, repeat), 10.0)
    finally:
        ladder_svg.MEMO = was
    ref = row["reference"]
    return {"no_memo_ratio": round(row["netviz_s"], 2), "no_memo_cpu_ratio": ref["cpu_ratio"],
            "no_memo_slow_s": ref["slow_s"], "no_memo_fast_s": ref["fast_s"]}


def run(quick: bool) -> list[dict[str, Any]]:
    rows = []
    for n in SIZES[:2] if quick else SIZES:
        rows.append(_synthetic("chain", chain, n))
        rows.append(_synthetic("dag", dag, n))
    if not quick and len(rows) >= 6:
        per_op = [r["netviz_s"] / n for r, n in zip(rows[::2], SIZES)]
        ratio = per_op[2] / per_op[1]
        rows.append({"name": "linearity chain 100k/10k per-op time", "netviz_s": ratio,
                     "reference": {}, "target": "<= 2.0 (ratio)", "ok": ratio <= 2.0})
    zoo = sorted(p for p in ZOO.glob("*/*.pbtxt") if p.name in ("predict_net.pbtxt", "model.pbtxt"))
    rows.extend(_zoo(p) for p in zoo)
    rows.extend(export_rows(1 if quick else 3, no_memo=not quick))
    return rows


if __name__ == "__main__":
    import sys
    for row in export_rows() if "--export" in sys.argv else run(quick="--quick" in sys.argv):
        print(f"{row['name']:<55} {row['netviz_s']:9.4f}  {row['target']:<18} "
              f"{'ok' if row['ok'] else 'SLOW'}")
