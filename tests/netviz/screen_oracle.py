"""The screen-against-record oracle (issue #42): what the TUI shows at a stop equals ``netviz run --dump``.

:class:`Dump` reads a ``run --dump`` folder (every version of every blob, in the order the ops wrote
them) and answers "which array is version v of blob b, as of the k-th run of op p".  :func:`check_stop`
reads what the screen shows at a stop (the blob inspector's rendered text for every input and output
version of the op that ran last, the op list's marks and overlay tags, the canvas's marks) and compares
each number with the array it names.  Numbers are parsed from the rendered text and compared within
what their printed digits hold (4 significant digits in the inspector, 2 in the op list's tags).

Only "which run" comes from the debugger's record (how many times an op has run so far); every value
compared comes from the screen on one side and the dump on the other.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from contextlib import redirect_stdout
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path
from typing import Any

import numpy as np

from engine.autodiff.training import is_gradient_name
from netviz.overlays import OVERLAYS
from netviz.session import BlobRef, OpRef, to_oppath
from netviz.widgets import blob_inspector
from netviz.widgets.blob_inspector import BlobInspector
from tests.netviz.waiting import tree_line

_NUM = r"-?(?:\d+\.?\d*(?:e[-+]?\d+)?|inf|nan)"
HIST_ROW = re.compile(rf"(‖·‖ ({_NUM}|-)|NaN×(\d+) Inf×(\d+))\s*$")


def dump_run(model: Path, folder: Path, extra: list[str]) -> None:
    """``netviz run MODEL --dump FOLDER EXTRA…`` in this process (its table is not printed)."""
    from netviz.cli import main

    with redirect_stdout(StringIO()):
        code = main(["run", str(model), "--dump", str(folder), *extra])
    assert code == 0 and (folder / "index.json").exists(), f"netviz run --dump {model} exited {code}"


def dump_plan(plan: Path, folder: Path) -> None:
    """What ``run --dump`` writes, for a PlanDef (which ``run`` runs as written, with no dump): the same
    writer on the plan debugger the TUI steps, run to the end."""
    from engine.debugger.plan import PlanDebugger
    from netviz.commands.run import _Dumper
    from netviz.session import Session

    session = Session.open(plan)
    dbg = PlanDebugger(session.plan_def, session.model.path, feeds=session.values)
    dumper = _Dumper(folder, dbg)
    dbg.listeners.append(dumper)
    assert dbg.continue_().reason == "end", f"{plan}: the plan did not run to its end"
    dumper.finish()


@dataclass
class Dump:
    """A ``run --dump`` folder: entries in write order, grouped into runs of each op."""

    folder: Path
    entries: list[dict[str, Any]] = field(default_factory=list)
    runs: dict[tuple[Any, ...], list[dict[str, int]]] = field(default_factory=dict)  # op path → [{blob: entry}]
    _arrays: dict[int, np.ndarray] = field(default_factory=dict)
    linked: set[str] = field(default_factory=set)  # RNN state buffers: their files hold the final rows

    @classmethod
    def read(cls, folder: Path) -> Dump:
        d = cls(folder, json.loads((folder / "index.json").read_text()))
        d.linked = {e["blob"] for e in d.entries if e["op_type"] == "rnn_internal_apply_link"}
        last: tuple[Any, ...] | None = None
        for i, e in enumerate(d.entries):
            if e["op"] is None:
                last = None
                continue
            path = tuple(e["op"])
            runs = d.runs.setdefault(path, [])
            if path != last or e["blob"] in runs[-1]:  # NOTE: one record's outputs are distinct names
                runs.append({})
            runs[-1][e["blob"]] = i
            last = path
        return d

    def array(self, i: int) -> np.ndarray:
        if i not in self._arrays:
            self._arrays[i] = np.load(self.folder / self.entries[i]["file"], allow_pickle=False)
        return self._arrays[i]

    def written(self, path: tuple[Any, ...], name: str, k: int) -> int | None:
        """Entry of what op `path`'s k-th run (1-based) wrote to `name`."""
        runs = self.runs.get(path, [])
        return runs[k - 1].get(name) if 0 < k <= len(runs) else None

    def run_start(self, path: tuple[Any, ...], k: int) -> int | None:
        runs = self.runs.get(path, [])
        return min(runs[k - 1].values()) if 0 < k <= len(runs) and runs[k - 1] else None

    def before(self, name: str, pos: int, net: tuple[Any, ...] | None = None) -> int | None:
        """The last entry of `name` written before entry `pos` (what an op running then read); with `net`
        (an op path less its index), only by ops whose workspace is the net's or one around it: a Do's
        inner net has a workspace of its own, its same-named blobs are not the outer ones."""
        def visible(e: dict[str, Any]) -> bool:
            if net is None or e["op"] is None:
                return True
            ws = _workspace_of(tuple(e["op"][:-1]))
            return ws == net[:len(ws)]  # NOTE: written in the reader's workspace or one around it (copied in)
        return next((i for i in range(pos - 1, -1, -1)
                     if self.entries[i]["blob"] == name and visible(self.entries[i])), None)

    def initial(self, name: str) -> int | None:
        return next((i for i, e in enumerate(self.entries) if e["blob"] == name and e["op"] is None), None)


#: subnet args that run in a workspace of their own (a Do's scope, an RNN timestep's step workspace);
#: the others (If's branches, While's loop and cond nets) run in their parent's
OWN_WORKSPACE = ("net", "step_net")


def _workspace_of(net: tuple[Any, ...]) -> tuple[Any, ...]:
    """The net path whose workspace the net at `net` (an op path less its index) runs in."""
    cut = max((i for i, x in enumerate(net) if x in OWN_WORKSPACE), default=0)
    return net[:cut + 1]


@dataclass
class Tally:
    """What an oracle run compared: numbers per kind, and every difference found (empty: all equal)."""

    compared: dict[str, int] = field(default_factory=dict)
    wrong: list[str] = field(default_factory=list)

    def count(self, kind: str, n: int = 1) -> None:
        self.compared[kind] = self.compared.get(kind, 0) + n

    def differ(self, where: str, what: str) -> None:
        self.wrong.append(f"{where}: {what}")


def runs_so_far(session: Any, path: tuple[Any, ...]) -> int:
    return sum(1 for r in session.state.history if r.path == path)


def expected_entry(session: Any, dump: Dump, ref: BlobRef, reader: OpRef) -> int | None:
    """The dump entry of the version `ref` names, as of now: its writer's last run, the main net's
    initial value, or (a subnet's @0) what `reader`'s last run read."""
    name = ref.name
    writers = [i for i, v in session.producers(ref.path, name) if v == ref.version]
    if writers:
        p = to_oppath(OpRef(ref.path, writers[0]))
        return dump.written(p, name, runs_so_far(session, p))
    if not ref.path:
        return dump.initial(name)
    if session.view(()).is_backward(ref.path[0][0]):
        # NOTE: a backward loop body runs in the forward iteration's saved workspace (Caffe2's workspace
        # stack): what its @0 holds was never written under the reader's nets, so the write order can't name it
        return None
    q = to_oppath(reader)
    pos = dump.run_start(q, runs_so_far(session, q))
    return None if pos is None else dump.before(name, pos, q[:-1])


def close(shown: float, want: float, rel: float) -> bool:
    if math.isnan(want) or math.isnan(shown):
        return math.isnan(want) and math.isnan(shown)
    if math.isinf(want) or math.isinf(shown):
        return shown == want
    return abs(shown - want) <= rel * max(abs(want), 1e-30) + 1e-12


def _num(tok: str) -> float:
    return 1.0 if tok == "True" else 0.0 if tok == "False" else float(tok)


def shown(widget: Any) -> str:
    """A Static's content as drawn at the widget's own width (cut or folded as on the screen)."""
    from rich.console import Console

    width = widget.content_size.width or 100
    console = Console(width=width, record=True, file=StringIO(), color_system=None)
    console.print(widget.content)
    return console.export_text()


def inspector_text(app: Any) -> tuple[str, str]:
    box = app.main.query_one(BlobInspector)
    return shown(box.facts), shown(box.values)


def check_stats(where: str, text: str, arr: np.ndarray, tally: Tally) -> None:
    """The inspector's min/max, mean/std, nan/inf and zeros rows against the array (none for an empty one)."""
    if not arr.size:
        if re.search(r"^\s*(min/max|mean/std|nan/inf|zeros)\s", text, re.M):
            tally.differ(where, "statistics shown for a zero-size value")
        tally.count("statistics")
        return
    a = arr.astype(np.float64)
    fin = a[np.isfinite(a)]
    want = {"min/max": (fin.min(), fin.max()) if fin.size else None,
            "mean/std": (fin.mean(), fin.std()) if fin.size else None,
            "nan/inf": (float(np.isnan(a).sum()), float(np.isinf(a).sum()))}
    for row, pair in want.items():
        m = re.search(rf"^\s*{re.escape(row)}\s+(\S+) / (\S+)", text, re.M)
        if pair is None:
            if m is not None or not re.search(rf"^\s*{re.escape(row)}\s+-", text, re.M):
                tally.differ(where, f"{row}: '-' expected (no finite value)")
            continue
        if m is None:
            tally.differ(where, f"{row} not shown")
            continue
        tally.count("statistics", 2)
        for shown, w in zip(m.groups(), pair):
            if not close(float(shown), float(w), 1e-3):
                tally.differ(where, f"{row} shows {m.group(0).split()[-3:]} but the dump has {pair}")
                break
    m = re.search(r"^\s*zeros\s+(\d+) of (\d+)", text, re.M)
    if m is None or (int(m.group(1)), int(m.group(2))) != (int((a == 0).sum()), a.size):
        tally.differ(where, f"zeros row {m.group(0).strip() if m else 'missing'}, dump {(a == 0).sum()} of {a.size}")
    tally.count("statistics", 2)


def check_table(where: str, text: str, arr: np.ndarray, tally: Tally) -> None:
    """The values table (first rows, the columns shown) against the array's 2-D view."""
    lines = text.splitlines()
    at = next((i for i, line in enumerate(lines) if line.startswith("values [")), None)
    if at is None:
        tally.differ(where, "no values table")
        return
    shape = tuple(int(d) for d in re.findall(r"\d+", lines[at].split("]")[0]))
    if shape != arr.shape:
        tally.differ(where, f"values {list(shape)} shown, the dump's is {list(arr.shape)}")
        return
    if arr.size == 0:
        if "no values" not in "\n".join(lines[at:]):
            tally.differ(where, "a zero-size value without its 'no values' line")
        return
    a = np.atleast_2d(arr)
    while a.ndim > 2:
        a = a[0]
    cols = [int(c) for c in lines[at + 1].split()]
    for r, line in enumerate(lines[at + 2: at + 2 + min(10, len(a))]):
        cells = line.split()
        if not cells or cells[0] != str(r) or len(cells) != len(cols) + 1:
            tally.differ(where, f"values row {r} reads {line!r}")
            return
        for c, tok in zip(cols, cells[1:]):
            want = a[r, c]
            if not close(_num(tok), float(want), 1e-3 if a.dtype.kind == "f" else 0):
                tally.differ(where, f"values[{r}, {c}] shows {tok}, the dump has {want!r}")
                return
        tally.count("values", len(cols))


def check_history(where: str, facts: str, session: Any, dump: Dump, ref: BlobRef, tally: Tally) -> None:
    """The history rows (one per run of the version's writer, last 12) against the dump's runs."""
    shown = [m for line in facts.splitlines() if (m := HIST_ROW.search(line))]
    writers = [i for i, v in session.producers(ref.path, ref.name) if v == ref.version] if ref.path else []
    if not writers:
        if shown:
            tally.differ(where, f"{len(shown)} history rows for a version no op of this net writes")
        return
    p = to_oppath(OpRef(ref.path, writers[0]))
    k = runs_so_far(session, p)
    want = [dump.written(p, ref.name, j) for j in range(max(1, k - 11), k + 1)]
    if len(want) <= 1:
        return  # NOTE: one run: no history table
    if len(shown) != len(want):
        tally.differ(where, f"{len(shown)} history rows, {len(want)} runs of {p}")
        return
    for m, i in zip(shown, want):
        kind, arr = dump.array(i).dtype.kind, dump.array(i).astype(np.float64)
        nan, inf = int(np.isnan(arr).sum()), int(np.isinf(arr).sum())
        if m.group(3) is not None:
            ok = (int(m.group(3)), int(m.group(4))) == (nan, inf)
        elif m.group(2) == "-":
            ok = bool(nan or inf) or kind not in "fc"
        else:
            ok = not (nan or inf) and close(float(m.group(2)), float(np.linalg.norm(arr.reshape(-1))), 1e-3)
        tally.count("history")
        if not ok:
            tally.differ(where, f"history row {m.group(0)!r}: the dump's run has norm "
                                f"{np.linalg.norm(arr.reshape(-1)):.4g}, NaN {nan}, Inf {inf}")


def _header(facts: str) -> str:
    """The inspector's ``blob`` row, a long name's folded lines joined."""
    lines = facts.splitlines()
    at = next((i for i, line in enumerate(lines) if line.lstrip().startswith("blob ")), None)
    if at is None:
        return ""
    col = lines[at].index("blob") + len("blob")
    col += len(lines[at][col:]) - len(lines[at][col:].lstrip())
    text = lines[at][col:].rstrip()
    for line in lines[at + 1:]:
        if line[:col].strip() or not line[col:].strip():
            break
        text += line[col:].rstrip()
    return text


def check_blob(app: Any, dump: Dump, ref: BlobRef, reader: OpRef, tally: Tally) -> None:
    """Select `ref` in the inspector and compare all it shows with the dump."""
    session = app.session
    where = f"{session.pc_label()} | {reader.path}#{reader.index} {ref.label()}"
    i = expected_entry(session, dump, ref, reader)
    at_once, blob_inspector.SYNC_STATS_ELEMENTS = blob_inspector.SYNC_STATS_ELEMENTS, math.inf
    try:  # NOTE: every tensor's statistics at once: the app computes a big one's in a worker
        app.main.select_blob(ref)
    finally:
        blob_inspector.SYNC_STATS_ELEMENTS = at_once
    facts, values = inspector_text(app)
    head = _header(facts)
    if not head.startswith(ref.label()) or head[len(ref.label()):][:1] not in ("", " "):
        tally.differ(where, f"header shows {head!r}")
        return
    tally.count("headers")
    if i is None or "values [" not in values:
        tally.count("not shown or not in the dump")
        return
    arr = dump.array(i)
    if arr.dtype.kind not in "biuf" or "dequantized" in values:
        return
    if dump.entries[i]["blob"] in dump.linked:
        # NOTE: a state buffer's later timesteps write its rows through the link's view: the dump holds the
        # final value (VersionFinal), the screen the rows written so far
        tally.count("not shown or not in the dump")
        return
    check_stats(where, values, arr, tally)
    check_table(where, values, arr, tally)
    check_history(where, facts, session, dump, ref, tally)


def last_ran(session: Any) -> OpRef | None:
    from netviz.session import from_oppath

    hist = session.state.history
    return from_oppath(hist[-1].path) if hist else None


async def check_marks_and_overlays(pilot: Any, app: Any, dump: Dump, tally: Tally) -> None:
    """Every op of the net on screen: its op-list mark (✓ clean, ! NaN/Inf), its canvas mark, and
    its grad-norm overlay tag (‖g‖ of the gradient blobs it wrote; Δ of an update ratio)."""
    main, session = app.main, app.session
    path = main.path
    shown_overlay, main.overlay = main.overlay, OVERLAYS.index("grad-norm")  # NOTE: the op list's tags, as `m` shows
    await pilot.pause()
    canvas_rows = {}
    if main.canvas.scene is not None:
        for n in main.canvas.scene.nodes:
            if n.op is not None and n.h > 1:
                canvas_rows[n.op] = "".join("".join(c for c, _ in main.canvas._node_row(n, r)) for r in range(n.h))
    for index in range(len(session.view(path).net.op)):
        ref = OpRef(path, index)
        p = to_oppath(ref)
        k = runs_so_far(session, p)
        outs = dump.runs.get(p, [])
        if not k or k > len(outs) or not outs[k - 1] or session.pc == ref or ref in session.breakpoints:
            continue
        where = f"{session.pc_label()} | op {p}"
        arrays = {name: dump.array(i) for name, i in outs[k - 1].items()}
        bad = any(a.dtype.kind in "fc" and not np.isfinite(a).all() for a in arrays.values())
        line = tree_line(app, ref)
        mark = line.lstrip()[:1]
        if mark in ("✓", "!"):
            tally.count("marks")
            if (mark == "!") != bad:
                tally.differ(where, f"op list mark {mark} but the dump's outputs {'have' if bad else 'have no'} NaN/Inf")
        if index in canvas_rows and not path:
            row = canvas_rows[index]
            tally.count("marks")
            if bad and "✓" in row or not bad and "!" in row and "✓" not in row:
                tally.differ(where, f"canvas box {row!r} for outputs {'with' if bad else 'without'} NaN/Inf")
        tag = re.search(r"‖(\S+)‖|Δ(\S+)", line[2:])
        rec = session.record(ref)
        if tag is not None and tag.group(1) is not None:
            norms = [np.linalg.norm(a.reshape(-1).astype(np.float64)) for n, a in arrays.items()
                     if is_gradient_name(n) and a.dtype.kind == "f" and np.isfinite(a).all()]
            tally.count("overlay tags")
            if not norms:
                tally.differ(where, f"‖{tag.group(1)}‖ on an op that wrote no gradient blob ({', '.join(arrays)})")
            elif not close(float(tag.group(1).rstrip("~")), math.sqrt(sum(x * x for x in norms)), 0.06):
                tally.differ(where, f"‖{tag.group(1)}‖ but the dump's gradients have norm "
                                    f"{math.sqrt(sum(x * x for x in norms)):.3g}")
        elif tag is not None and tag.group(2) not in (None, "/0") and rec is not None:
            name = next(iter(arrays))
            old = dump.before(name, dump.run_start(p, k), p[:-1])
            if old is not None:
                w0 = dump.array(old).astype(np.float64)
                ratio = np.linalg.norm(arrays[name].astype(np.float64) - w0) / np.linalg.norm(w0)
                tally.count("overlay tags")
                if not close(float(tag.group(2).rstrip("~")), float(ratio), 0.06):
                    tally.differ(where, f"Δ{tag.group(2)} but the dump's update ratio is {ratio:.3g}")
    main.overlay = shown_overlay


def blob_versions(session: Any, ref: OpRef) -> Iterator[BlobRef]:
    ins, outs = session.view(ref.path).ssa[ref.index]
    seen = set()
    for name, v in (*ins, *outs):
        if (name, v) not in seen:
            seen.add((name, v))
            yield BlobRef(ref.path, name, v)


async def check_stop(pilot: Any, app: Any, dump: Dump, tally: Tally, marks: bool = True) -> None:
    """Everything the screen shows about the op that ran last, and (`marks`) every op's marks/tags."""
    ref = last_ran(app.session)
    if ref is not None:
        for blob in blob_versions(app.session, ref):
            check_blob(app, dump, blob, ref, tally)
    if marks:
        await check_marks_and_overlays(pilot, app, dump, tally)
    tally.count("stops")
