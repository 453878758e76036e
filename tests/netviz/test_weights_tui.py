"""The TUI binds an init net's weights after the first frame, in a worker with a progress line, and
the first step does not wait for it (issue #41)."""
from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from engine.model import modelio, tensorscan, valueref
from netviz import weights
from netviz.app import NetvizApp
from netviz.session import Session
from netviz.widgets.status_line import StatusLine
from tests.engine.test_weights import fill_op_bytes, net_bytes
from tests.netviz.tui_nets import mlp, write
from tests.netviz.waiting import asynctest, notified, text_of, wait_for

ROOT = Path(__file__).resolve().parents[2]
RNG = np.random.default_rng(41)
SHAPES = {"W1": (600, 8), "b1": (600,), "W2": (500, 600), "b2": (500,)}  # W2: 1.5 MB unpacked: the scanner path


def _trained(tmp: Path) -> tuple[Path, Path, dict[str, np.ndarray]]:
    values = {n: RNG.standard_normal(s).astype(np.float32) for n, s in SHAPES.items()}
    init = tmp / "init_net.pb"
    init.write_bytes(net_bytes([fill_op_bytes("GivenTensorFill", n, v.shape, v.reshape(-1), "unpacked") for n, v in values.items()]))
    assert init.stat().st_size >= modelio.SCAN_MIN_BYTES
    return write(tmp, "predict_net.pb", mlp()), init, values


@asynctest
async def test_weights_bind_in_a_worker_and_the_first_step_does_not_wait(tmp_path: Path, monkeypatch) -> None:
    predict, init, values = _trained(tmp_path)
    release, started = threading.Event(), threading.Event()
    bind = valueref.bind_values

    def held(net, progress=None, cancelled=lambda: False):
        progress(1, 2)
        started.set()
        assert release.wait(30), "the test never released the weights"
        return bind(net, progress, cancelled)

    monkeypatch.setattr(valueref, "bind_values", held)
    monkeypatch.setattr(weights, "SHOW_MIN_BYTES", 0)
    session = Session.open(predict, init=init, inputs=["X=4,8", "label=4:int32"])
    app = NetvizApp(session)
    async with app.run_test(size=(160, 48)) as pilot:
        main = app.main
        await wait_for(pilot, started.is_set, "the weights worker to start")
        await wait_for(pilot, lambda: "of weights … 50 %" in text_of(main.query_one(StatusLine)), "the progress line")
        await pilot.press("n")  # NOTE: the worker still holds: the step reads the views it needs
        await wait_for(pilot, lambda: session.debugger is not None and session.pc is not None
                       and getattr(session.pc, "index", None) == 1, "the first step")
        assert session.debugger.ws.values["W1"].tobytes() == values["W1"].tobytes()
        release.set()
        await wait_for(pilot, lambda: session.weights_line is None
                       and "of weights" not in text_of(main.query_one(StatusLine)), "the line to go")
        assert not notified(app, "Weights")


@asynctest
async def test_a_broken_run_of_floats_is_told_once_bound(tmp_path: Path, monkeypatch) -> None:
    """A quick open checks the floats' tags near their run's ends; the worker checks them all and says
    what is wrong."""
    predict, init, _ = _trained(tmp_path)
    data = bytearray(init.read_bytes())
    _, cuts = tensorscan.find_cuts(bytes(data))
    run = next(c.pieces[0] for c in cuts if c.pieces[0].end - c.pieces[0].start > 1 << 20)  # W2's floats
    k = (run.end - run.start) // 5 // 2  # NOTE: the middle: far from what a quick open reads
    data[run.start + 5 * k] = 0x35  # floats' tag (field 5, wire type 5) -> field 6: another field in the run
    init.write_bytes(bytes(data))
    session = Session.open(predict, init=init, inputs=["X=4,8", "label=4:int32"])
    app = NetvizApp(session)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: notified(app, "another field inside its floats"), "the weights error")
    with pytest.raises(Exception, match="ints|NetDef|field"):
        modelio.load_net(init)  # NOTE: a full open refuses it up front


def test_opening_a_trained_model_imports_no_numpy(tmp_path: Path) -> None:
    """The TUI's first frame imports no NumPy (netviz/session.py); a quick open of an init net of
    GivenTensorFill values needs none either."""
    predict, init, _ = _trained(tmp_path)
    code = ("import sys\nfrom netviz.session import Session\n"
            f"s = Session.open({str(predict)!r}, init={str(init)!r})\n"
            "assert len(s.model.init.op) == 4\nprint('numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.split()[-1] == "False", out.stdout + out.stderr


@asynctest
async def test_a_trained_models_drawing_is_read_from_the_cache_on_the_ui_thread(tmp_path: Path, monkeypatch) -> None:
    """A lazily opened init holds references, not values: hashing it for the drawing's cache key is cheap
    whatever its file's size, so the first frame reads a drawing seen before on the UI thread, as the
    fill-op init's does (it went through the layout worker: ~12 ms of ResNet-50's first frame, issue #41)."""
    import netviz.session as session_module  # noqa: PLC0415
    import netviz.widgets.graph_canvas as canvas_module  # noqa: PLC0415

    monkeypatch.setenv("NETVIZ_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("NETVIZ_NO_CACHE", raising=False)
    monkeypatch.setattr(session_module, "QUICK_INIT_BYTES", 1 << 20)
    predict, init, _ = _trained(tmp_path)
    assert init.stat().st_size > session_module.QUICK_INIT_BYTES
    session = Session.open(predict, init=init, inputs=["X=4,8", "label=4:int32"])
    key = session.shapes_key(block=False)
    assert key is not None and key == session.shapes_key()

    async def first_drawing() -> list[tuple[str, int, int]]:
        app = NetvizApp(Session.open(predict, init=init, inputs=["X=4,8", "label=4:int32"]))
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_for(pilot, lambda: app.main.is_mounted and app.main.canvas.scene is not None, "the drawing")
            return sorted((n.label, n.x, n.y) for n in app.main.canvas.scene.nodes)

    drawn = await first_drawing()

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("laid out in the worker: the cache should have answered on the UI thread")

    monkeypatch.setattr(canvas_module.GraphCanvas, "_layout", refuse)
    assert await first_drawing() == drawn and len(drawn) >= 4


class _Reads:
    """A file's bytes that note every offset read (an index, or a slice's first and last)."""

    def __init__(self, data: bytes) -> None:
        self.data, self.read = data, []

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, at):
        if isinstance(at, slice):
            start, stop, step = at.indices(len(self.data))
            self.read += [start, stop - 1] if stop > start else []
            if step > 1:  # NOTE: a strided read touches every page it spans
                self.read += list(range(start, stop, 4096))
        else:
            self.read.append(at)
        return self.data[at]


def test_a_quick_open_reads_only_the_ends_of_the_values(tmp_path: Path) -> None:
    """The TUI's open reads the op headers and the floats' tags near each run's two ends: the same
    few pages whatever the values' size, warm or cold page cache (64 tags spread over every run read
    ~100 ms of a cold 128 MB init before the first frame, issue #41); the worker checks the rest."""
    _, init, values = _trained(tmp_path)
    data = _Reads(init.read_bytes())
    _, cuts = tensorscan.find_cuts(data, quick=True)
    run = next(c.pieces[0] for c in cuts if c.pieces[0].end - c.pieces[0].start > 1 << 20)  # W2's floats
    middle = range(run.start + tensorscan.EDGE_BYTES, run.end - tensorscan.EDGE_BYTES)
    assert len(middle) > 1 << 20 and not [at for at in data.read if at in middle]
    net = valueref.load_binary_net(init, parse=modelio._parse_binary, quick=True)
    assert [valueref.referenced_count(a) for op in net.op for a in op.arg if a.name == "values"] == \
        [v.size for v in values.values()]


@pytest.mark.skipif(not hasattr(__import__("mmap"), "MADV_RANDOM"), reason="no madvise on this platform")
def test_a_quick_open_reads_no_ahead_while_it_hops_between_op_headers(tmp_path: Path, monkeypatch) -> None:
    """Read-ahead fetched ~128 kB of values around every op header the quick scan reads: a cold 128 MB
    ResNet-50 init took 86 ms to scan, 36 ms without it; the values are read in order afterwards, so the
    mapping is back to normal then (and a full open, which reads every tag in order, keeps it)."""
    import mmap  # noqa: PLC0415

    _, init, _ = _trained(tmp_path)
    advice: list[int] = []

    class Noted(mmap.mmap):
        def madvise(self, option: int, *args: int) -> None:
            advice.append(option)
            super().madvise(option, *args)

    monkeypatch.setattr(mmap, "mmap", Noted)
    valueref.load_binary_net(init, parse=modelio._parse_binary, quick=True)
    assert advice == [mmap.MADV_RANDOM, mmap.MADV_NORMAL]
    advice.clear()
    valueref.load_binary_net(init, parse=modelio._parse_binary)
    assert advice == []
