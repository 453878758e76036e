"""An export and Python's cyclic garbage collector (issue #43's linear export): the collector is paused
while an export runs and comes back as it was, and an export leaves no reference cycle holding its
drawing (which then lived on, and was walked by every full collection, until the collector ran)."""
from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.bench_graph import grad_chain
from netviz.export import ExportError, export_net, gc_paused


@pytest.fixture
def collector() -> Iterator[None]:
    """Whatever a test does to the collector, it is on again, with no debug flag, afterwards."""
    yield
    gc.set_debug(0)
    gc.garbage.clear()
    gc.enable()


def test_export_runs_with_the_collector_paused_and_restores_it(tmp_path: Path, collector: None) -> None:
    seen: list[bool] = []
    export_net(grad_chain(30), tmp_path / "c.svg", backward=True, loss="loss", rankdir="auto",
               progress=lambda _: seen.append(gc.isenabled()))
    assert seen and not any(seen) and gc.isenabled()
    with pytest.raises(ExportError, match="already exists"):
        export_net(grad_chain(30), tmp_path / "c.svg", backward=True, loss="loss")
    assert gc.isenabled()
    gc.disable()
    export_net(grad_chain(30), tmp_path / "c.svg", backward=True, loss="loss", force=True)
    assert not gc.isenabled()  # NOTE: off before, off after: the export does not turn it on


def test_nested_pauses_restore_on_the_last_exit(collector: None) -> None:
    with gc_paused():
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_export_leaves_no_cycle_holding_its_drawing(tmp_path: Path, collector: None) -> None:
    """A 300-op chain with its backward pass (600+ nodes: drawn ops-only, in several ladder pieces):
    every drawing record the export made is freed by reference counting when it returns."""
    net = grad_chain(300)  # NOTE: > 500 nodes with the backward pass: the ops-only, many-piece path
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    export_net(net, tmp_path / "c.svg", backward=True, loss="loss", rankdir="auto")
    gc.collect()
    left = {type(o).__qualname__ for o in gc.garbage}
    assert not left & {"Drawing", "DrawNode", "DrawEdge"}, left



def test_export_leaves_no_styles_cached(tmp_path: Path) -> None:
    """Every ops-only edge has a style of its own (its blob's name): an export of a 300-op chain made
    600 of them, and none is kept for the session once it is written."""
    from netviz import ladder
    export_net(grad_chain(300), tmp_path / "c.svg", backward=True, loss="loss", rankdir="auto")
    assert ladder._style_text.cache_info().currsize == 0
