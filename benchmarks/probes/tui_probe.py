"""Headless TUI probe run in a fresh process by ``benchmarks/bench_tui.py``.

``python -m benchmarks.probes.tui_probe MODEL [--init INIT] [--input NAME=SHAPE] [--steps K]``
opens MODEL in NetvizApp under Textual's ``run_test`` and prints JSON lines: ``{"ready": t}``
once the first interactive frame is up (op tree populated, graph laid out, screen refreshed;
``t`` is ``time.perf_counter()``, which the parent compares with its own clock at spawn time:
both read CLOCK_MONOTONIC on Linux), then with ``--steps K`` ``{"step_s": [...]}``: for each press
of ``n`` (step), seconds until the debugger's pc has moved, the op list follows it, and the
screen has repainted.
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
    async with app.run_test(size=(160, 48)) as pilot:
        main = app.main
        await _until(pilot, lambda: main.is_mounted and main.op_tree.populated and main.canvas.scene is not None,
                     ns.timeout)
        await pilot.pause()
        print(json.dumps({"ready": time.perf_counter()}), flush=True)
        steps = []
        for _ in range(ns.steps):
            before = app.session.pc
            t = time.perf_counter()
            await pilot.press("n")
            await _until(pilot, lambda: app.session.pc is not None and app.session.pc != before
                         and main.selected == app.session.pc, ns.timeout)
            await pilot.pause()
            steps.append(time.perf_counter() - t)
        print(json.dumps({"step_s": steps}), flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--init", default=None)
    p.add_argument("--input", action="append", default=[])
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--timeout", type=float, default=30.0, help="give up on a frame after this many seconds")
    asyncio.run(probe(p.parse_args()))


if __name__ == "__main__":
    main()
