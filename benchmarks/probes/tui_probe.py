"""Headless TUI probe run in a fresh process by ``benchmarks/bench_tui.py``.

``python -m benchmarks.probes.tui_probe MODEL [--init INIT] [--input NAME=SHAPE] [--steps K]``
opens MODEL in NetvizApp under Textual's ``run_test`` and prints JSON lines: ``{"frame": t, "ready": t2}``
where ``t`` is the first screen update (``App._display``, hooked) with the op tree populated and the
graph laid out, and ``t2`` when Pilot's idle wait after it returns (it also waits for the shape
inference worker); both are ``time.perf_counter()``, which the parent compares with its own clock
at spawn time (both read CLOCK_MONOTONIC on Linux).  Then, after ``--warmup`` presses (the first
step makes the workspace and runs the init net), with ``--steps K`` ``{"step_s": [...], "pilot_s": [...]}``:
for each press of ``n`` (step), ``step_s`` is measured in the app: from the key event to the first
screen update the compositor makes (``App._display``, hooked) that shows the new pc in the graph
and the op list; ``full_s`` until the op inspector shows the pc's op too (a step fills it one
frame after the pc moves); ``pilot_s`` is the old outside view, until Pilot's idle waits return (those wait
in 20 ms slices for the whole process to go quiet: a floor of ~85 ms on this machine).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time


async def _until(pilot, predicate, timeout: float) -> None:
    deadline = time.perf_counter() + timeout
    while not predicate():
        if time.perf_counter() > deadline:
            raise TimeoutError("probe timed out")
        await pilot.pause(0.001)


async def probe(ns: argparse.Namespace) -> None:
    from netviz.app import NetvizApp
    from netviz.session import Session

    app = NetvizApp(Session.open(ns.model, init=ns.init, inputs=ns.input))
    shown: list[tuple[float, object, object, object]] = []  # (time, canvas pc, selected op, inspected op) per update
    first: list[float] = []  # the first update with the op list and the graph on screen
    display = app._display

    def hooked(screen, renderable) -> None:
        if renderable is not None and getattr(app, "main", None) is not None and app.main.is_mounted:
            main = app.main
            now = time.perf_counter()
            shown.append((now, main.canvas.pc_op, main.selected, getattr(main, "details_ref", None)))
            if not first and main.op_tree.populated and main.canvas.scene is not None:
                first.append(now)
        display(screen, renderable)

    app._display = hooked  # NOTE: an instance attribute: Screen calls self.app._display(...)
    async with app.run_test(size=(160, 48)) as pilot:
        main = app.main
        await _until(pilot, lambda: main.is_mounted and main.op_tree.populated and main.canvas.scene is not None,
                     ns.timeout)
        await _until(pilot, lambda: bool(first), ns.timeout)
        frame = first[0]
        await pilot.pause()
        print(json.dumps({"frame": frame, "ready": time.perf_counter()}), flush=True)
        for _ in range(ns.warmup):  # NOTE: the first step makes the workspace and runs the init net
            before = app.session.pc
            await pilot.press("n")
            await _until(pilot, lambda: app.session.pc is not None and app.session.pc != before, ns.timeout)
            await pilot.pause()
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
            await _until(pilot, lambda: any(c == pc.index and sel == pc and op == pc for _, c, sel, op in shown),
                         ns.timeout)
            steps.append(next(ts for ts, c, sel, _ in shown if c == pc.index and sel == pc) - t)
            full.append(next(ts for ts, c, sel, op in shown if c == pc.index and sel == pc and op == pc) - t)
        print(json.dumps({"step_s": steps, "full_s": full, "pilot_s": outside}), flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--init", default=None)
    p.add_argument("--input", action="append", default=[])
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--warmup", type=int, default=1, help="presses before the measured ones (with --steps)")
    p.add_argument("--timeout", type=float, default=30.0, help="give up on a frame after this many seconds")
    asyncio.run(probe(p.parse_args()))


if __name__ == "__main__":
    main()
