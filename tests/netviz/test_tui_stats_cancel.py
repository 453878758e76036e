"""A big tensor's statistics worker stops within one slice when Esc is pressed or another blob is
chosen: it used to finish its whole pass (gigabytes for a big weight) and only then drop the result."""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from engine.debugger import inspect
from netviz.app import NetvizApp
from netviz.session import BlobRef, Session
from netviz.widgets import blob_inspector
from netviz.widgets.blob_inspector import BlobInspector
from tests.netviz.tui_nets import mlp, write
from tests.netviz.waiting import asynctest, continue_to_end, ready, text_of, wait_for

INPUTS = ["X=64,8", "label=64:int32"]


@asynctest
async def test_esc_and_another_blob_stop_the_statistics_pass(tmp_path: Path, monkeypatch) -> None:
    path = write(tmp_path, "mlp", mlp())
    chunks = inspect._chunks
    served: list[int] = []
    held, release = threading.Event(), threading.Event()

    def gated(flat: Any, *args: Any) -> Any:
        """h1's slices (64 of them) as the worker reads them; it waits at the second for the test."""
        for i, part in enumerate(chunks(flat, *args)):
            if flat.size > inspect.CHUNK and threading.current_thread() is not threading.main_thread():
                served.append(i)
                if i == 1:
                    held.set()
                    assert release.wait(30), "the test never released the statistics"
            yield part

    app = NetvizApp(Session.open(path, inputs=INPUTS))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await continue_to_end(pilot, app)
        monkeypatch.setattr(blob_inspector, "SYNC_STATS_ELEMENTS", 100)  # NOTE: h1 is 64x1000
        monkeypatch.setattr(inspect, "CHUNK", 1000)
        monkeypatch.setattr(inspect, "_chunks", gated)
        inspector = app.main.blob_inspector()
        for leave in ("escape", "another blob"):
            served.clear(), held.clear(), release.clear()
            app.main.select_blob(BlobRef((), "h1", 2))
            await wait_for(pilot, held.is_set, "the statistics worker")
            if leave == "escape":
                await pilot.press("escape")
            else:
                app.main.select_blob(BlobRef((), "X", 0))  # 64x8: a worker too, one slice
            await pilot.pause()
            release.set()
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert served == [0, 1], f"{leave}: the pass read {len(served)} of h1's 64 slices"
            shown = text_of(app.main.query_one(BlobInspector).values)
            if leave == "escape":
                assert "statistics cancelled (Esc)" in shown and "values [64, 1000]" in shown
                assert "min/max" not in shown
            else:
                await wait_for(pilot, lambda: "min/max" in text_of(inspector.values), "X's statistics")
                assert "values [64, 8]" in text_of(inspector.values) and inspector.ref == BlobRef((), "X", 0)
