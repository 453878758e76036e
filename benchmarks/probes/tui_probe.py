"""Headless TUI probe run in a fresh process by ``benchmarks/bench_tui.py``.

``python -m benchmarks.probes.tui_probe MODEL [--init INIT] [--input NAME=SHAPE] [--steps K] [--continue]``
opens MODEL in NetvizApp under Textual's ``run_test`` and prints JSON lines: ``{"frame": t, "ready": t2}``
where ``t`` is the first screen update (``App._display``, hooked) with the op tree populated and the
graph laid out, and ``t2`` when Pilot's idle wait after it returns (it also waits for the shape
inference worker); both are ``time.perf_counter()``, which the parent compares with its own clock
at spawn time (both read CLOCK_MONOTONIC on Linux).  Then, after ``--warmup`` presses (the first
step makes the workspace and runs the init net), with ``--steps K`` ``{"step_s": [...], "full_s": [...]}``:
for each press of ``n`` (step), ``step_s`` is measured in the app: from the key event to the first
screen update the compositor makes (``App._display``, hooked) that shows the new pc in the graph
and the op list; ``full_s`` until that update shows the complete move: canvas pc, op list cursor,
status line and op inspector all on the new op; ``pilot_s`` is the old outside view, until Pilot's
idle waits return (those wait in 20 ms slices for the whole process to go quiet: ~85 ms here).
``--queued K`` then presses ``n`` K times without waiting and reports ``{"queued_s": t}``: the first
key to the update showing the K-th op on; ``--continue`` presses ``n`` (makes the debugger), ``r``
(restart), then ``c`` and reports ``{"continue_s": t, "ops_s": s}``: the key to the update that shows
the end of the net, and the sum of the ops' own times in the app's records.

``--bare`` runs the floor instead: a bare Textual app (one static screen of text and a Footer, the
same size, Textual and Python, started the same way), stamped by the same hook: ``frame`` is its
first update showing the text; with ``--steps K`` a key rewrites the text and ``step_s`` is the
key to the update showing it.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time


async def _until(pilot, predicate, timeout: float, every: float = 0.001) -> None:
    """Wait until `predicate()`; the figures come from the display hook's stamps, so `every` only
    decides how soon the probe notices (a long move polls slowly: each poll takes the GIL)."""
    deadline = time.perf_counter() + timeout
    while not predicate():
        if time.perf_counter() > deadline:
            raise TimeoutError("probe timed out")
        await pilot.pause(every)


def _hook(app, shown: list, stamp) -> None:
    """Call ``stamp()`` at every screen update the app hands to its driver and keep (time, stamp())."""
    display = app._display

    def hooked(screen, renderable) -> None:
        if renderable is not None:
            got = stamp()
            if got is not None:
                shown.append((time.perf_counter(), got))
        display(screen, renderable)

    app._display = hooked  # NOTE: an instance attribute: Screen calls self.app._display(...)


async def bare(ns: argparse.Namespace) -> None:
    """The floor: Textual's own start and key -> repaint, nothing of netviz imported."""
    from textual.app import App, ComposeResult
    from textual.widgets import Footer, Static

    class Bare(App[None]):
        BINDINGS = [("n", "step", "Step"), ("c", "step", "Continue"), ("q", "quit", "Quit")]

        def __init__(self) -> None:
            super().__init__()
            self.count = 0

        def compose(self) -> ComposeResult:
            yield Static("\n".join(f"line {i:3d} " + "x" * 100 for i in range(40)), id="body")
            yield Footer()

        def action_step(self) -> None:
            self.count += 1
            self.query_one("#body", Static).update(f"step {self.count}")

    app = Bare()
    shown: list = []
    _hook(app, shown, lambda: app.count if app.screen.is_mounted and app.query("#body") else None)
    async with app.run_test(size=(160, 48)) as pilot:
        await _until(pilot, lambda: bool(shown), ns.timeout)
        print(json.dumps({"frame": shown[0][0], "ready": time.perf_counter()}), flush=True)
        steps = []
        for k in range(1, ns.steps + 1):
            await pilot.pause(0.05)
            shown.clear()
            t = time.perf_counter()
            await pilot.press("n")
            await _until(pilot, lambda: any(c == k for _, c in shown), ns.timeout)
            steps.append(next(ts for ts, c in shown if c == k) - t)
        if steps:
            print(json.dumps({"step_s": steps, "full_s": steps}), flush=True)


async def probe(ns: argparse.Namespace) -> None:
    # NOTE: started as `netviz MODEL` starts: the console script imports netviz.cli, parses the
    # command line with the open command's parser, and open.run runs the app open.start makes
    from netviz import cli

    argv = [ns.model] + (["--init", ns.init] if ns.init else []) + [a for i in ns.input for a in ("--input", i)]
    args = cli.build_parser("open").parse_args(["open", *argv])
    app = cli.command_module("open").start(args)
    from netviz.widgets.status_line import StatusLine

    shown: list = []  # (time, (canvas pc, selected op, inspected op, status pc text, end shown)) per update
    first: list[float] = []  # the first update with the op list and the graph on screen
    ended: list[object] = []  # the stop after_step has shown (--continue)

    def stamp():
        main = getattr(app, "main", None)
        if main is None or not main.is_mounted:
            return None
        if not first and main.op_tree.populated and main.canvas.scene is not None:
            first.append(time.perf_counter())
        status = main.query_one(StatusLine)._shown[0]
        return main.canvas.pc_op, main.selected, getattr(main, "details_ref", None), status, bool(ended)

    _hook(app, shown, stamp)
    async with app.run_test(size=(160, 48)) as pilot:
        main = app.main
        await _until(pilot, lambda: main.is_mounted and main.op_tree.populated and main.canvas.scene is not None,
                     ns.timeout)
        await _until(pilot, lambda: bool(first), ns.timeout)
        frame = first[0]
        await pilot.pause()
        print(json.dumps({"frame": frame, "ready": time.perf_counter()}), flush=True)
        if ns.steps or ns.queued or ns.cont:  # NOTE: keys are measured once the whole-net workers are done
            await _until(pilot, lambda: main.checked and app.session.shapes_ready(()) is not None, 120)
        for _ in range(ns.warmup if ns.steps or ns.queued or ns.cont else 0):
            before = app.session.pc  # NOTE: the first step makes the workspace and runs the init net
            await pilot.press("n")
            await _until(pilot, lambda: app.session.pc is not None and app.session.pc != before, ns.timeout)
            await _until(pilot, lambda: main.idle, ns.timeout)
            await pilot.pause()

        def complete(pc, s) -> bool:
            c, sel, op, status, _ = s
            return c == pc.index and sel == pc and op == pc and status == app.session.pc_label()

        steps, full, outside = [], [], []
        for _ in range(ns.steps):
            before = app.session.pc
            await pilot.pause(0.05)  # NOTE: separate presses, not type-ahead
            shown.clear()
            t = time.perf_counter()
            await pilot.press("n")
            await _until(pilot, lambda: app.session.pc is not None and app.session.pc != before
                         and main.selected == app.session.pc, ns.timeout)
            await pilot.pause()
            outside.append(time.perf_counter() - t)
            pc = app.session.pc
            await _until(pilot, lambda: any(complete(pc, s) for _, s in shown), ns.timeout)
            steps.append(next(ts for ts, s in shown if s[0] == pc.index and s[1] == pc) - t)
            full.append(next(ts for ts, s in shown if complete(pc, s)) - t)
        if ns.steps:
            print(json.dumps({"step_s": steps, "full_s": full, "pilot_s": outside}), flush=True)
        if ns.queued:
            await _until(pilot, lambda: main.idle, ns.timeout)
            target = app.session.pc.index + ns.queued
            await pilot.pause(0.05)
            shown.clear()
            t = time.perf_counter()
            for _ in range(ns.queued):  # NOTE: all at once, as a user holding the key (no idle waits)
                app.post_message(_key("n"))
            await _until(pilot, lambda: any(s[0] == target and complete(app.session.pc, s) for _, s in shown)
                         and main.idle, ns.timeout)
            print(json.dumps({"queued_s": next(ts for ts, s in shown if s[0] == target) - t,
                              "queued": ns.queued}), flush=True)
        if ns.cont:
            await _until(pilot, lambda: main.idle, ns.timeout)
            await pilot.press("r")  # NOTE: back to op 0 with the debugger made (the warm-up step)
            await _until(pilot, lambda: main.idle and app.session.pc is not None and app.session.pc.index == 0,
                         ns.timeout)
            await pilot.pause(0.05)
            after_step = main.after_step

            def noted(stop=None) -> None:
                after_step(stop)
                if stop is not None and stop.reason == "end":
                    ended.append(stop)

            main.after_step = noted
            shown.clear()
            t = time.perf_counter()
            await pilot.press("c")
            await _until(pilot, lambda: any(s[4] for _, s in shown), 600, every=0.05)
            records = app.session.debugger.records
            print(json.dumps({"continue_s": next(ts for ts, s in shown if s[4]) - t, "ops": len(records),
                              "ops_s": sum(r.wall_s for r in records)}), flush=True)


def _key(key: str):
    from textual import events

    return events.Key(key, key)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model", nargs="?")
    p.add_argument("--init", default=None)
    p.add_argument("--input", action="append", default=[])
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--queued", type=int, default=0, help="then K presses of n at once (type-ahead)")
    p.add_argument("--continue", dest="cont", action="store_true", help="then c from op 0 to the end")
    p.add_argument("--warmup", type=int, default=1, help="presses before the measured ones (with --steps)")
    p.add_argument("--timeout", type=float, default=30.0, help="give up on a frame after this many seconds")
    p.add_argument("--bare", action="store_true", help="a bare Textual app: the floor")
    ns = p.parse_args()
    asyncio.run(bare(ns) if ns.bare else probe(ns))


if __name__ == "__main__":
    main()
