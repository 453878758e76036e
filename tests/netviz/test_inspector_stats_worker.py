"""The blob inspector computes a big tensor's statistics and histogram in a worker: the UI answers
meanwhile, a "computing …" line stands in for them, and the screen ends as a small tensor's shows at
once; another blob chosen meanwhile is never shown with the first one's statistics."""
from __future__ import annotations

import threading
from pathlib import Path

from engine.debugger import inspect
from netviz.app import NetvizApp
from netviz.session import BlobRef, Session
from netviz.widgets import blob_inspector
from netviz.widgets.blob_inspector import BlobInspector
from tests.netviz.tui_nets import mlp, write
from tests.netviz.waiting import asynctest, continue_to_end, ready, text_of, wait_for

INPUTS = ["X=64,8", "label=64:int32"]


def _shown(app: NetvizApp) -> str:
    return text_of(app.main.query_one(BlobInspector).values)


@asynctest
async def test_a_big_tensors_statistics_come_from_a_worker(tmp_path: Path, monkeypatch) -> None:
    path = write(tmp_path, "mlp", mlp())
    release, held = threading.Event(), threading.Event()
    stats = inspect.blob_stats

    def slow(*args, **kwargs):
        if threading.current_thread() is not threading.main_thread():
            held.set()
            assert release.wait(30), "the test never released the statistics"
        return stats(*args, **kwargs)

    app = NetvizApp(Session.open(path, inputs=INPUTS))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await continue_to_end(pilot, app)
        want = {}
        for blob in ("h1", "logits", "h1", "logits"):  # NOTE: what the screen shows with the statistics made
            app.main.select_blob(BlobRef((), blob, 1 if blob == "logits" else 2))  # at once, the pane laid out
            await pilot.pause()
            want[blob] = _shown(app)
            assert "min/max" in want[blob] and "histogram" in want[blob]
        monkeypatch.setattr(blob_inspector, "SYNC_STATS_ELEMENTS", 100)  # NOTE: h1 is 64x1000 (made-up FC widths)
        monkeypatch.setattr(inspect, "blob_stats", slow)

        app.main.select_blob(BlobRef((), "h1", 2))
        await wait_for(pilot, held.is_set, "the statistics worker")
        shown = _shown(app)
        assert "computing the statistics of the whole 64×1000 tensor …" in shown
        assert "min/max" not in shown
        assert "values [64, 1000]" in shown  # NOTE: the values table does not wait for them
        release.set()
        await wait_for(pilot, lambda: _shown(app) == want["h1"], "the statistics")

        release.clear()
        held.clear()
        app.main.select_blob(BlobRef((), "h1", 2))
        await wait_for(pilot, held.is_set, "the statistics worker")
        app.main.select_blob(BlobRef((), "logits", 1))  # NOTE: chosen while h1's are computed
        await pilot.pause()
        release.set()
        await wait_for(pilot, lambda: _shown(app) == want["logits"], "logits' statistics")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert _shown(app) == want["logits"]
