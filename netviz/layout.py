"""Graphviz ``dot`` layout of a drawing: node boxes, edge polylines and cluster boxes in points.

The layout runs the ``dot`` program in a subprocess (so it can be stopped after a time limit:
pygraphviz's in-process ``layout()`` cannot be interrupted) and reads its ``json0`` output.
Coordinates are graphviz's: points (1/72 inch), origin bottom-left, y up; the TUI flips and
scales them to character cells.  Results are cached by the DOT text, so laying out the same
subnet twice costs nothing; call it from a worker thread, it blocks.
"""
from __future__ import annotations

import hashlib
import json
import os
import queue
import signal
import subprocess
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.errors import NetvizError
from netviz.graphviz_support import find_program, missing_program

if TYPE_CHECKING:
    import pygraphviz as pgv

__all__ = ["NodeBox", "EdgePath", "ClusterBox", "Layout", "LayoutError", "LayoutTimeout", "LayoutCrash",
           "layout_agraph", "layout_dot", "layout_net", "clear_cache", "DEFAULT_TIMEOUT", "run_graphviz_many",
           "run_graphviz_stream"]

DEFAULT_TIMEOUT = 60.0
_CACHE_SIZE = 64
_cache: OrderedDict[str, Layout] = OrderedDict()
_lock = threading.Lock()


class LayoutError(NetvizError):
    """Graphviz is missing or failed on a drawing."""


class LayoutTimeout(LayoutError):
    """The layout ran past its time limit."""


class LayoutCrash(LayoutError):
    """The graphviz program died of a signal (graphviz 2.43's ``dot`` segfaults on some big nets)."""


@dataclass(frozen=True, slots=True)
class NodeBox:
    """A node: centre ``(x, y)`` and size in points, with its graphviz name and label."""

    name: str
    x: float
    y: float
    width: float
    height: float
    label: str


@dataclass(frozen=True, slots=True)
class EdgePath:
    """An edge: cubic B-spline control points from tail to head (a polyline is a fair drawing).

    ``arrow`` is the arrowhead tip when graphviz drew one past the last control point.
    """

    tail: str
    head: str
    key: str
    points: tuple[tuple[float, float], ...]
    arrow: tuple[float, float] | None
    attrs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class ClusterBox:
    """A cluster (subnet or name scope): bounding box ``(x0, y0, x1, y1)`` and label."""

    name: str
    label: str
    bbox: tuple[float, float, float, float]


@dataclass(frozen=True, slots=True)
class Layout:
    """A laid-out drawing: overall size in points and every node, edge and cluster."""

    width: float
    height: float
    nodes: dict[str, NodeBox]
    edges: tuple[EdgePath, ...]
    clusters: tuple[ClusterBox, ...]


def layout_agraph(graph: pgv.AGraph, timeout: float = DEFAULT_TIMEOUT, prog: str = "dot") -> Layout:
    """Lay out a pygraphviz graph (as built by :func:`netviz.export.build_agraph`).

    Raises
    ------
    LayoutTimeout
        If graphviz takes longer than `timeout` seconds.
    LayoutError
        If the graphviz program is missing or fails.
    """
    return layout_dot(graph.string(), timeout, prog)


def layout_net(net: Any, path: Sequence[tuple[int, str]] = (), options: Any = None,
               timeout: float = DEFAULT_TIMEOUT) -> Layout:
    """Lay out one (sub)net on its own, as the TUI shows it: `path` as :func:`netviz.drawing.subnet_at`.

    `options` default to ``DrawOptions(subnets="none")`` (a subnet is entered, not drawn inside
    its op).  Node names are the drawing's ids for that subnet drawn as a top-level net
    (``op3``, ``X@1``); cached like :func:`layout_dot`.
    """
    from netviz.drawing import DrawOptions, draw_net, subnet_at
    from netviz.export import build_agraph
    d = draw_net(subnet_at(net, path), options or DrawOptions(subnets="none"))
    return layout_agraph(build_agraph(d), timeout)


def layout_dot(dot: str, timeout: float = DEFAULT_TIMEOUT, prog: str = "dot") -> Layout:
    """Lay out DOT source; cached by its text (and `prog`). See :func:`layout_agraph`."""
    key = hashlib.sha1(f"{prog}\0{dot}".encode()).hexdigest()
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    result = _parse_json0(json.loads(run_graphviz(dot, "json0", timeout, prog)))
    with _lock:
        _cache[key] = result
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return result


def clear_cache() -> None:
    """Forget every cached layout."""
    with _lock:
        _cache.clear()


def run_graphviz(dot: str, fmt: str, timeout: float = DEFAULT_TIMEOUT, prog: str = "dot",
                 output: str | None = None, extra: Sequence[str] = (),
                 tick: Callable[[float], None] | None = None, every: float = 5.0) -> bytes:
    """Run graphviz `prog` on DOT source and return its `fmt` output (or write it to `output`).

    `extra` are more command-line flags (``-Gsplines=false``).  A program killed by a signal is a
    :class:`LayoutCrash`, one past `timeout` a :class:`LayoutTimeout`.  `tick` is called with the
    seconds it has run every `every` seconds while it runs (a UI says how long ``dot`` is at it).

    Raises
    ------
    LayoutTimeout, LayoutError
        As :func:`layout_agraph`.
    """
    exe = find_program(prog)
    if exe is None:
        raise LayoutError(missing_program(prog))
    cmd = [exe, f"-T{fmt}", *extra] + ([f"-o{output}"] if output else [])
    (proc,), held = _start_held(1, lambda _: subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                               stderr=subprocess.PIPE))
    with proc:
        try:
            _release_interrupts(held)  # NOTE: a Ctrl-C held while it started lands here, where it is killed
            out, err_bytes = _communicate(proc, dot.encode(), timeout, tick, every)
        except BaseException as e:  # NOTE: the time limit, Ctrl-C, a cancelled worker: never leave it running
            proc.kill()
            proc.wait()
            if isinstance(e, subprocess.TimeoutExpired):
                raise LayoutTimeout(f"graphviz '{prog}' took longer than {timeout:g} s") from None
            raise
    return _checked(prog, proc.returncode, out, err_bytes)


def run_graphviz_many(dots: Sequence[str], fmt: str, timeout: float = DEFAULT_TIMEOUT, prog: str = "dot",
                      tick: Callable[[float], None] | None = None, every: float = 5.0,
                      extra: Sequence[str] = ()) -> list[bytes]:
    """Run one graphviz `prog` per DOT text, all at once, and return their outputs in order.

    `extra` are more flags, as :func:`run_graphviz`'s (``-Tsvg``: a second format, written after each
    graph's first).  One time limit covers them all; on it, Ctrl-C or any failure every program still
    running is killed and reaped.  Errors as :func:`run_graphviz` (the first failure in order is raised).
    """
    if len(dots) == 1:
        return [run_graphviz(dots[0], fmt, timeout, prog, extra=extra, tick=tick, every=every)]
    results: list[tuple[bytes, bytes] | BaseException | None] = [None] * len(dots)
    exe = find_program(prog)
    if exe is None:
        raise LayoutError(missing_program(prog))
    procs, held = _start_held(len(dots), lambda _: subprocess.Popen(
        [exe, f"-T{fmt}", *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE))

    def talk(k: int) -> None:
        try:
            results[k] = procs[k].communicate(dots[k].encode())
        except BaseException as e:  # NOTE: a killed program's pipes close; what it said is dropped
            results[k] = e

    threads = [threading.Thread(target=talk, args=(k,), daemon=True) for k in range(len(dots))]
    start, next_tick = time.monotonic(), every
    try:
        _release_interrupts(held)  # NOTE: a Ctrl-C held while they started lands here: the finally kills them
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                elapsed = time.monotonic() - start
                if elapsed >= timeout:
                    raise LayoutTimeout(f"graphviz '{prog}' took longer than {timeout:g} s")
                t.join(min(0.05, timeout - elapsed))
                if tick is not None and time.monotonic() - start >= next_tick:
                    tick(time.monotonic() - start)
                    next_tick += every
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        for t in threads:
            t.join()
    outs = []
    for p, r in zip(procs, results):
        if isinstance(r, BaseException) or r is None:
            raise LayoutError(f"graphviz '{prog}' failed: {r}")
        outs.append(_checked(prog, p.returncode, *r))
    return outs


def run_graphviz_stream(dots: Iterable[str], take: Callable[[int, bytes], None], jobs: int, fmt: str,
                        timeout: float = DEFAULT_TIMEOUT, prog: str = "dot", extra: Sequence[str] = (),
                        end: bytes = b"</svg>", tick: Callable[[float], None] | None = None,
                        every: float = 5.0) -> None:
    """Lay out the DOT texts of `dots` in `jobs` graphviz programs that run while `dots` is still being made.

    Graph ``k`` goes to program ``k % jobs`` as soon as it is made; each graph's output (its text up to and
    including `end`, the last bytes every output of `fmt`/`extra` ends with) is handed to
    ``take(k, output)`` as it comes back, in the calling thread, between feeds and after the last.  Why:
    the programs lay out the first pieces while Python writes the next ones and reads the finished
    ones, so both cores work (one ``run_graphviz_many`` call ran Python and ``dot`` one after the other).
    One time limit covers everything; on it, on Ctrl-C, on any failure (in `take` too) every program
    still running is killed and reaped.  Errors as :func:`run_graphviz_many`.
    """
    exe = find_program(prog)
    if exe is None:
        raise LayoutError(missing_program(prog))
    done: queue.SimpleQueue = queue.SimpleQueue()
    feeds: list[queue.SimpleQueue] = [queue.SimpleQueue() for _ in range(jobs)]
    errs = [tempfile.TemporaryFile() for _ in range(jobs)]
    try:
        procs, held = _start_held(jobs, lambda j: subprocess.Popen(
            [exe, f"-T{fmt}", *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errs[j]))
    except BaseException:
        for f in errs:
            f.close()
        raise
    threads = [threading.Thread(target=_feed, args=(p.stdin, feeds[j]), daemon=True) for j, p in enumerate(procs)]
    threads += [threading.Thread(target=_collect, args=(p.stdout, j, end, done), daemon=True) for j, p in enumerate(procs)]
    clock = _Clock(prog, timeout, tick, every)
    sent, got, finished = [0] * jobs, [0] * jobs, False
    try:
        for t in threads:  # NOTE: started with Ctrl-C held, they never take it: only this thread does, below
            t.start()
        _release_interrupts(held)  # NOTE: a Ctrl-C held while they started lands here: the finally kills them
        for k, dot in enumerate(dots):
            feeds[k % jobs].put(dot.encode())
            sent[k % jobs] += 1
            while not done.empty():
                _hand_over(done.get(), sent, got, jobs, take, procs, prog, errs)
            clock.check()
        for f in feeds:
            f.put(None)
        while got != sent:
            try:
                item = done.get(timeout=0.05)
            except queue.Empty:
                clock.check()
                continue
            _hand_over(item, sent, got, jobs, take, procs, prog, errs)
            if got != sent:  # NOTE: also when outputs keep coming within the poll: quick pieces ran past the limit
                clock.check()
        finished = True
    finally:
        for f in feeds:
            f.put(None)
        for p in procs:
            if p.poll() is None and not finished:  # NOTE: a Ctrl-C before anything was sent leaves got == sent
                p.kill()
            p.wait()
        for t in threads:
            if t.ident is not None:
                t.join()
        for p in procs:
            p.stdout.close()
        for f in errs:
            f.close()


class _Clock:
    """The time limit and progress ticks of :func:`run_graphviz_stream`."""

    def __init__(self, prog: str, timeout: float, tick: Callable[[float], None] | None, every: float) -> None:
        self.prog, self.timeout, self.tick, self.every = prog, timeout, tick, every
        self.start, self.next = time.monotonic(), every

    def check(self) -> None:
        elapsed = time.monotonic() - self.start
        if elapsed >= self.timeout:
            raise LayoutTimeout(f"graphviz '{self.prog}' took longer than {self.timeout:g} s")
        if self.tick is not None and elapsed >= self.next:
            self.tick(elapsed)
            self.next += self.every


def _hand_over(item: tuple[int, bytes | None], sent: list[int], got: list[int], jobs: int,
               take: Callable[[int, bytes], None], procs: list[subprocess.Popen], prog: str, errs: list) -> None:
    """One output of program ``j`` to `take` (as graph ``j + n·jobs``); its end (None) before every output
    came back is the program's failure, raised as :func:`run_graphviz` raises it."""
    j, out = item
    if out is not None:
        take(j + got[j] * jobs, out)
        got[j] += 1
        return
    if got[j] != sent[j]:
        procs[j].wait()
        errs[j].seek(0)
        _checked(prog, procs[j].returncode or 1, b"", errs[j].read())


def _feed(pipe: Any, texts: queue.SimpleQueue) -> None:
    """Write each text from `texts` to a program's stdin until None, then close it (a killed program: stop)."""
    try:
        while (data := texts.get()) is not None:
            pipe.write(data + b"\n")
            pipe.flush()
    except (OSError, ValueError):
        pass
    finally:
        try:
            pipe.close()
        except OSError:
            pass


def _collect(pipe: Any, j: int, end: bytes, done: queue.SimpleQueue) -> None:
    """Read a program's stdout, putting ``(j, output)`` on `done` for each output ending in `end`; ``(j, None)`` last."""
    buf = bytearray()
    fd = pipe.fileno()
    try:
        while chunk := os.read(fd, 1 << 20):
            seen = max(0, len(buf) - len(end))
            buf += chunk
            while (i := buf.find(end, seen)) >= 0:
                done.put((j, bytes(buf[:i + len(end)])))
                del buf[:i + len(end)]
                seen = 0
    except OSError:
        pass
    finally:
        done.put((j, None))


def _start_held(n: int, start: Callable[[int], subprocess.Popen]) -> tuple[list[subprocess.Popen], set[int] | None]:
    """``start(0) .. start(n - 1)`` with Ctrl-C held (:func:`_hold_interrupts`), and the mask to restore: the
    caller releases it inside the ``try`` that kills them.  If one fails to start (or Ctrl-C came in the
    middle), those started are killed and reaped, Ctrl-C is let through and the error re-raised."""
    procs: list[subprocess.Popen] = []
    held = _hold_interrupts()
    try:
        for j in range(n):
            procs.append(start(j))
    except BaseException:
        for p in procs:
            p.kill()
            p.wait()
        _release_interrupts(held)
        raise
    return procs, held


def _hold_interrupts() -> set[int] | None:
    """Hold Ctrl-C (SIGINT) back while graphviz programs start, in the main thread: a KeyboardInterrupt
    between the fork and the ``try`` that kills them left ``dot`` running after netviz quit.  Returns
    the signal mask to restore (None where nothing was held)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        return None
    return signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def _release_interrupts(held: set[int] | None) -> None:
    """Let a held Ctrl-C through (it is raised here, inside the caller's ``try``)."""
    if held is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _checked(prog: str, code: int, out: bytes, err_bytes: bytes) -> bytes:
    """`out` of a program that exited with `code`; a signal is a :class:`LayoutCrash`, other failures a LayoutError."""
    if code < 0 or code in _SIGNAL_EXITS:  # NOTE: 128+n is a wrapper shell's report of signal n
        raise LayoutCrash(f"graphviz '{prog}' crashed ({_signal_name(code)})")
    if code != 0:
        raise LayoutError(f"graphviz '{prog}' failed: {_last_error(err_bytes) or f'exit {code}'}")
    return out


def _last_error(err_bytes: bytes, limit: int = 300) -> str:
    """Graphviz's last ``Error:`` message on one line, the lines it runs on over joined (else its last line).

    Why: graphviz breaks one message over lines (``Error: node X in graph G has no position`` /
    ``as required by the -n flag``); the last line alone said neither what failed nor where."""
    lines = [ln.strip() for ln in err_bytes.decode(errors="replace").strip().splitlines() if ln.strip()]
    start = max((i for i, ln in enumerate(lines) if ln.startswith("Error")), default=len(lines) - 1)
    text = " ".join(lines[start:]).removeprefix("Error:").strip()
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _communicate(proc: subprocess.Popen, data: bytes, timeout: float, tick: Callable[[float], None] | None,
                 every: float) -> tuple[bytes, bytes]:
    """``proc.communicate(data, timeout)``, calling `tick(elapsed)` every `every` seconds meanwhile
    (a retried communicate loses no output; the input goes with the first call only)."""
    if tick is None:
        return proc.communicate(data, timeout=timeout)
    start = time.monotonic()
    send: bytes | None = data
    while True:
        left = timeout - (time.monotonic() - start)
        try:
            return proc.communicate(send, timeout=max(0.01, min(every, left)))
        except subprocess.TimeoutExpired:
            send = None
            elapsed = time.monotonic() - start
            if elapsed >= timeout:
                raise
            tick(elapsed)


_SIGNAL_EXITS = frozenset(128 + s for s in (signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE,
                                             signal.SIGILL, signal.SIGKILL))


def _signal_name(code: int) -> str:
    """``"SIGSEGV"`` for exit status -11 (or 139 from a shell); the number when Python does not know it."""
    n = -code if code < 0 else code - 128
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def _point(p: str) -> tuple[float, float]:
    x, y = p.split(",")[:2]
    return float(x), float(y)


def _edge_path(e: dict[str, Any], names: dict[int, str]) -> EdgePath:
    # NOTE: graphviz spline pos: "[e,x,y ][s,x,y ]p1 p2 …"; "e,"/"s," are arrow tips, not controls.
    arrow, points = None, []
    for part in e.get("pos", "").split():
        if part.startswith("e,"):
            arrow = _point(part[2:])
        elif not part.startswith("s,"):
            points.append(_point(part))
    skip = {"_gvid", "tail", "head", "pos", "key"}
    attrs = tuple((k, str(v)) for k, v in e.items() if k not in skip and not k.startswith("_"))
    return EdgePath(names[e["tail"]], names[e["head"]], str(e.get("key", "")), tuple(points), arrow, attrs)


def _parse_json0(g: dict[str, Any]) -> Layout:
    x0, y0, x1, y1 = (float(v) for v in g.get("bb", "0,0,0,0").split(","))
    nodes: dict[str, NodeBox] = {}
    clusters: list[ClusterBox] = []
    names: dict[int, str] = {}
    for obj in g.get("objects", []):
        if "nodes" in obj or "edges" in obj or "bb" in obj:  # a subgraph
            if obj["name"].startswith("cluster") and "bb" in obj:
                bb = tuple(float(v) for v in obj["bb"].split(","))
                clusters.append(ClusterBox(obj["name"], obj.get("label", ""), bb))  # type: ignore[arg-type]
            continue
        names[obj["_gvid"]] = obj["name"]
        if "pos" in obj:
            x, y = _point(obj["pos"])
            label = obj.get("label", "\\N")
            nodes[obj["name"]] = NodeBox(obj["name"], x, y, float(obj["width"]) * 72, float(obj["height"]) * 72,
                                         obj["name"] if label == "\\N" else label)
    edges = tuple(_edge_path(e, names) for e in g.get("edges", []))
    return Layout(x1 - x0, y1 - y0, nodes, edges, tuple(clusters))
