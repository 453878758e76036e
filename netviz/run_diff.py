"""The TUI's two-run diff and extract (no Textual here: the main screen runs these in a worker).

``A`` asks for side B (an init net, another model file of the net, ``fix`` for netviz's Caffe2
fixes, ``gpu``) and runs :func:`engine.debugger.divergence.diverge`; its rows come back shaped as the
ONNX diff's (:class:`OwnRow`: ``max_abs`` is the op's OWN error), so the graph colours ops by own
error and the list names the culprit first.  ``X`` cuts the selected op, the culprit, or the first
op with a NaN/Inf (or any ``N:M`` typed) into a repro folder (:mod:`engine.debugger.extract`).
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rich.markup import escape

from engine.errors import ExecutionError, NetvizError


@dataclass(frozen=True, slots=True)
class OwnRow:
    """One op of a two-run diff in the ONNX diff's row shape (netviz.overlays reads these fields)."""

    op_index: int
    op_type: str
    blob: str
    max_abs: float
    max_rel: float
    ok: bool
    out: float
    inherited: float
    label: str = "run diff"


def side_b(session: Any, text: str) -> Any:
    """Side B from the prompt: ``fix``, ``gpu``, or a file: an init net, or a model file of the net
    (told apart by whether it makes blobs the predict net reads without running any of its ops)."""
    from engine.debugger.divergence import Side  # noqa: PLC0415 - the runtime, only when asked for
    from engine.model.modelio import Model, load_model, load_net  # noqa: PLC0415

    m, word = session.model, text.strip()
    if word in ("fix", "--fix-caffe2"):
        return Side(m, fix_caffe2=True, label="B")
    if word == "gpu":
        return Side(m, device="gpu", label="B")  # NOTE: without a GPU it runs on the stand-in (see _on_device)
    if not Path(word).is_file():
        raise NetvizError(f"{word}: no such file (give an init net, a model file, fix or gpu)")
    net = load_net(word)
    reads = {b for op in m.predict.op for b in op.input}
    if net.op and all(not op.input for op in net.op) and {o for op in net.op for o in op.output} & reads:
        return Side(Model(m.predict, net, m.value_info, m.path, Path(word)), label="B")
    return Side(load_model(word, init=m.init_path), label="B")


def compare(session: Any, text: str, cancel: threading.Event | None = None, tol: float = 1e-4) -> Any:
    """Run the session's net as side A and `text`'s side B op by op; the rows as :class:`OwnRow`s in a
    :class:`netviz.onnx_diff.RuntimeDiff` (what the ONNX diff's view shows), the culprit line its note.
    An ``.onnx`` side B is ONNX Runtime (each op's own error: its ONNX nodes run alone)."""
    from engine.debugger.descend import with_inside  # noqa: PLC0415
    from engine.debugger.divergence import Side, localize, run_side  # noqa: PLC0415

    if Path(text.strip()).suffix.lower() == ".onnx":
        return _compare_onnx(session, text.strip(), cancel, tol)
    b = side_b(session, text)
    synth = not (len(session.model.init.op) and len(b.model.init.op))
    traces = []
    with _on_device(b) as stand_in:
        for side in (Side(session.model), b):
            _check(cancel)
            traces.append(run_side(side, session.values, synthesize_params=synth))
        d = with_inside(replace(localize(*traces, tol=tol), traces=tuple(traces)))
    return _result(session, d, None, (STAND_IN_NOTE,) if stand_in else ())


#: what a gpu side B without a GPU says (``D`` and ``netviz diff --devices cpu,gpu`` run the same way)
STAND_IN_NOTE = ("note: no CUDA GPU here: side B gpu ran on the stand-in device (NumPy), so differences are "
                 "float rounding only")


@contextlib.contextmanager
def _on_device(b: Any) -> Iterator[bool]:
    """Run side `b`'s GPU ops on the NumPy stand-in when it is a gpu side and there is no GPU (as ``D``
    and ``netviz diff --devices cpu,gpu`` do, rather than refusing); yields whether the stand-in is used."""
    from engine.runtime import device as dev  # noqa: PLC0415

    stand_in = getattr(getattr(b, "side", b), "device", "cpu") == "gpu" and not dev.has_gpu()  # a Side or a Trace
    with dev.use_fake_cuda() if stand_in else contextlib.nullcontext():
        yield stand_in


def _check(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise ExecutionError("run diff cancelled")


def _compare_onnx(session: Any, path: str, cancel: threading.Event | None, tol: float) -> Any:
    """Side B ONNX Runtime running the model file at `path` (as ``netviz diff NET MODEL.onnx``)."""
    from engine.onnx import export as ox  # noqa: PLC0415 - heavy, and only when asked for
    from engine.onnx.divergence import localize_onnx, onnx_rerun  # noqa: PLC0415

    onnx = ox.onnx_module()
    ox.onnxruntime_module()
    if not Path(path).is_file():
        raise NetvizError(f"{path}: no such file (give an init net, a model file, fix or gpu)")
    try:
        model = onnx.load(path)
    except Exception as e:  # NOTE: any parse failure of a user's file is one line
        raise NetvizError(f"{path}: not an ONNX model ({(str(e).splitlines() or [type(e).__name__])[0]})") from None
    _check(cancel)
    m = session.model
    src = ox.prepare_model(m, session.values, where=str(m.path or "net"), random_params=not len(m.init.op))
    _check(cancel)
    d = localize_onnx(src, model, tol=tol)
    return _result(session, d, onnx_rerun(model, d.traces[0]))


def _result(session: Any, d: Any, rerun: Any, notes: tuple[str, ...] = ()) -> Any:
    """`d`'s rows as :class:`OwnRow`s in a RuntimeDiff (`notes` after the culprit's lines); the traces kept
    for :func:`op_detail`."""
    from netviz.onnx_diff import RuntimeDiff  # noqa: PLC0415

    _LAST[id(session)] = (*d.traces, {r.index: r.index_b for r in d.rows}, rerun)  # NOTE: for op_detail
    rows = tuple(OwnRow(r.index, r.op_type, r.blob or r.name, r.own if r.own == r.own else 0.0, r.out,
                        not r.own > d.tol, r.out, r.inherited) for r in d.rows if r.index_b is not None)
    return RuntimeDiff(rows, (escape(d.culprit_line()),
                              *([escape("\n".join(d.culprit_detail()))] if d.culprit_values else []),
                              *map(escape, notes)))


def op_detail(session: Any, i: int) -> str | None:
    """Side A's and side B's values of top-level op `i`'s outputs after the session's last run diff: where
    B's op re-run on A's inputs differs most (both values and the difference), or None (no run diff)."""
    from engine.debugger.divergence import op_values, side_by_side, value_error  # noqa: PLC0415

    last = _LAST.get(id(session))
    if last is None or last[2].get(i) is None:
        return None
    a, b, pairs, rerun = last
    lines = []
    with _on_device(b):
        values = op_values(a, b, i, pairs[i], rerun)
    for blob, va, vb, own in values:
        lines += [f"'{escape(blob)}': B's run " + (f"{value_error(va, vb):.3g} from A" if vb is not None
                                                    else "shows no value")
                  + ", B's op on A's inputs " + (f"{value_error(va, own):.3g}" if own is not None
                                                 else "(cannot run alone)"),
                  *(side_by_side(va, own if own is not None else vb, n=3))]
    return "\n".join(lines)


#: each session's last run diff (id(session) -> side A, side B, op of B per op of A, side B's re-run: None
#: for netviz's own)
_LAST: dict[int, tuple[Any, Any, dict[int, int | None], Any]] = {}


def default_range(session: Any, selected: Any, rows: Any) -> str:
    """What ``X`` offers: the culprit of the last diff, else the selected op, else the first op whose
    output has a NaN/Inf, as ``N`` (with ``K/ARG`` first for an op of a subnet one level down)."""
    first_bad = next((r.op_index for r in rows or () if not r.ok), None)
    if first_bad is not None:
        return str(first_bad)
    if selected is not None:
        path = selected.path
        return (f"{path[0][0]}/{path[0][1]} " if len(path) == 1 else "") + str(selected.index)
    nan = next((i for i, r in sorted(session.records_in(()).items()) if r.has_inf_or_nan), None)
    return str(nan) if nan is not None else "0"


def extract(session: Any, text: str, cancel: threading.Event | None = None) -> str:
    """``[K/ARG] N[:M] DIR`` from the prompt: write the repro folder; the one-line summary."""
    from engine.debugger.divergence import Side, run_side  # noqa: PLC0415
    from engine.debugger.extract import extract_range, write_repro  # noqa: PLC0415

    words = text.split()
    if len(words) not in (2, 3):
        raise NetvizError(f"extract: give [K/ARG] N:M DIR, got {text!r}")
    subnet, spec, folder = (None, *words) if len(words) == 2 else words
    out = Path(folder).expanduser()
    if out.is_dir() and any(out.iterdir()):
        raise NetvizError(f"{out}: not empty (give another folder)")
    trace = run_side(Side(session.model), session.values, synthesize_params=not len(session.model.init.op))
    if cancel is not None and cancel.is_set():
        raise ExecutionError("extract cancelled")
    x = extract_range(trace, spec, subnet)
    write_repro(x, out, source=str(session.model.path or "net"))
    return f"{x.where}: {len(x.predict.op)} ops, {len(x.inputs)} values captured → {out} (python repro.py)"
