"""`e` offers the current view (what the canvas shows: the ops in the pane, overlay, pc and
marks) or the whole net; both run in a worker and ask before overwriting.  The written DOT files
are read back: their op sets and marks are what the screen showed."""
from __future__ import annotations

import threading
from pathlib import Path

import pygraphviz as pgv
import pytest

from netviz.app import NetvizApp
from netviz.screens.pick import PickScreen
from netviz.session import OpRef, Session
from netviz.widgets.graph_scene import ladder_window, window_of
from tests.netviz.tui_nets import chain, write
from tests.netviz.waiting import (answer, asynctest, export_while_moving, notified, pick_export, ready, screen_text,
                                  wait_for)

N = 1000


def _ops(path: Path) -> dict[int, dict[str, str]]:
    """Op index → graphviz attributes of each op node in a written DOT file."""
    g = pgv.AGraph(str(path))
    return {int(n[2:]): dict(n.attr) for n in g.nodes() if n.startswith("op") and n[2:].isdigit()}


def _in_pane(canvas) -> set[int]:
    """The ops whose boxes the canvas's pane shows, whole or in part, read from its scene and scroll
    offset (as a person sees them), here independently of :meth:`GraphCanvas.ops_in_view`."""
    r, sx, sy = canvas.scrollable_content_region, int(canvas.scroll_x), int(canvas.scroll_y)
    return {n.op for n in canvas.scene.nodes if n.kind == "op"
            and not (n.x + n.w <= sx or n.x >= sx + r.width or n.y + n.h <= sy or n.y >= sy + r.height)}


@asynctest
async def test_current_view_and_whole_net_write_what_they_say(tmp_path):
    app = NetvizApp(Session.open(write(tmp_path, "chain", chain(N)), inputs=["x0=2,3"]))
    view_file, net_file = tmp_path / "view.dot", tmp_path / "net.dot"
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        await ready(pilot)
        app.main.select(OpRef((), 500))
        await pilot.press("b")                      # a breakpoint at op 500 …
        await pilot.press("c")                      # … where the run stops
        await wait_for(pilot, lambda: app.main.idle and app.session.pc == OpRef((), 500), "the breakpoint")
        await pilot.press("m")                      # overlay: time
        await wait_for(pilot, lambda: app.main.canvas.scene is not None, "the layout")

        # the current view, in a worker that we hold until the UI has answered a key
        release, export_view = threading.Event(), app.session.export_view

        def held(*args, **kw):
            release.wait(30)
            return export_view(*args, **kw)
        app.session.export_view = held
        seen = _in_pane(app.main.canvas)           # what the pane shows when `e` is pressed
        await export_while_moving(pilot, app, "view", view_file, "up", OpRef((), 499), release)

        window = window_of(N, 500)
        assert 500 in seen and 5 <= len(seen) < len(window) < N
        ops = _ops(view_file)
        assert set(ops) == seen                     # the ops the pane showed: not the laid-out window, not the net
        assert ops[500]["label"].startswith("→ ● ") and ops[500]["penwidth"] == "4"  # pc on a breakpoint
        labels = [ops[i]["label"] for i in seen if i < 500]
        assert labels and all(lab.endswith(" ✓") and ("ms" in lab or "µs" in lab) for lab in labels)  # ran, timed …
        assert all("fillcolor" in ops[i] for i in seen if i < 500)  # … and colour
        assert not any("✓" in ops[i]["label"] for i in seen if i > 500)
        drawn = pgv.AGraph(str(view_file))  # NOTE: kept in a name: a node's attributes die with its graph
        title = drawn.get_node("view:title").attr["label"]
        assert f"{len(seen)} of {N} ops in view ({min(seen)}–{max(seen)})" in title and "overlay time" in title

        # the whole net: every op, no marks
        await pilot.press("e")
        await pick_export(pilot, "net")
        await answer(pilot, app, str(net_file))
        await wait_for(pilot, lambda: notified(app, f"wrote {net_file}"), "the whole-net export")
        ops = _ops(net_file)
        assert set(ops) == set(range(N)) and not any(a["label"].startswith("→") for a in ops.values())

        # the view again to the same file: asked first; "no" keeps it, "yes" overwrites
        before = view_file.read_text()
        app.main.select(OpRef((), 300))             # another window now
        await wait_for(pilot, lambda: 300 in (app.main.canvas.ops_in_view() or ()), "the layout around op 300")
        seen = _in_pane(app.main.canvas)
        await pilot.press("e")
        await pick_export(pilot, "view")
        await answer(pilot, app, str(view_file), then="exists — type yes")
        await answer(pilot, app, "no")
        assert view_file.read_text() == before and app.main.exporting is None
        await pilot.press("e")
        await pick_export(pilot, "view")
        await answer(pilot, app, str(view_file), then="exists — type yes")
        await answer(pilot, app, "yes")
        await wait_for(pilot, lambda: view_file.read_text() != before, "the overwritten view")
        assert set(_ops(view_file)) == seen and 300 in seen


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_export_choice_snapshot(snap_compare, tmp_path, size):
    async def run_before(pilot) -> None:
        app = pilot.app
        await ready(pilot)
        app.main.select(OpRef((), 500))
        await wait_for(pilot, lambda: 500 in (app.main.canvas.ops_in_view() or ()), "the layout around op 500")
        seen: list[set[int]] = []

        def still() -> bool:  # NOTE: the pane settled (centred on the cursor): the same ops two frames running
            seen[:] = [_in_pane(app.main.canvas), *seen][:2]
            return len(seen) == 2 and seen[0] == seen[1]
        await wait_for(pilot, still, "the pane to settle")
        await pilot.press("e")
        await wait_for(pilot, lambda: isinstance(app.screen, PickScreen), "the export choice")
        app.clear_notifications()
        await pilot.pause()
        shown = "\n".join(screen_text(app))
        assert 5 <= len(seen[0]) < 200 and f"current view: {len(seen[0])} of 1000 ops as shown" in shown, shown
        assert "whole net: all 1000 ops" in shown, shown
    app = NetvizApp(Session.open(write(tmp_path, "chain", chain(N))))
    assert snap_compare(app, terminal_size=size, run_before=run_before)


def test_view_of_a_subnet_and_of_a_net_holding_one(tmp_path):
    """The view of a While's loop_net is its three ops; a window over the main net keeps the While's
    subnet cluster with it (its ops belong to the op holding them)."""
    from netviz.view_export import ViewSpec
    from tests.netviz.tui_nets import while_net

    s = Session.open(write(tmp_path, "loop", while_net()))
    inner = ((5, "loop_net"),)
    s.export_view(ViewSpec(inner, "loop_net", pc=1, breakpoints=frozenset({2})), str(tmp_path / "inner.dot"))
    ops = _ops(tmp_path / "inner.dot")
    assert set(ops) == {0, 1, 2} and ops[1]["label"].startswith("→ ") and ops[2]["label"].startswith("● ")
    s.export_view(ViewSpec((), "main", blobs=False, ops=frozenset({4, 5})), str(tmp_path / "main.dot"))
    drawn = pgv.AGraph(str(tmp_path / "main.dot"))
    assert set(_ops(tmp_path / "main.dot")) == {4, 5}
    assert [g.name for g in drawn.subgraphs() if g.name.startswith("cluster")]  # the While's loop_net/cond_net
    assert any(n.startswith("op5:loop_net/") for n in drawn.nodes())


def test_current_view_svg_is_folded_not_one_tall_column(tmp_path):
    """The view export of a 200-op window is laid out as the CLI's: pieces side by side (it was one tall
    diagonal column, 25x taller than wide), every op of the window drawn."""
    import re
    import xml.etree.ElementTree as ET

    from netviz.view_export import ViewSpec

    s = Session.open(write(tmp_path, "chain", chain(N)))
    window = window_of(N, 500)
    out = tmp_path / "view.svg"
    s.export_view(ViewSpec((), "view", ops=frozenset(window), pc=500), str(out))
    head = out.read_text()[:2000]
    w, h = (float(re.search(rf'{k}="([\d.]+)pt"', head).group(1)) for k in ("width", "height"))
    assert max(w, h) / min(w, h) <= 3, (w, h)
    svg = "{http://www.w3.org/2000/svg}"
    titles = {g.findtext(f"{svg}title") for g in ET.parse(out).getroot().iter(f"{svg}g") if g.get("class") == "node"}
    assert {f"op{i}" for i in window} <= titles


@asynctest
async def test_current_view_of_resnet50_backward_is_what_the_pane_shows(zoo, tmp_path):
    """With the backward pass shown and the cursor on a gradient op deep in the net, the current view holds
    the ops the pane shows, each gradient op beside its forward op as there: not the canvas's 200-op
    window, whose gradient ops past the forward ops it holds were exported as a tall column of unpaired
    boxes the person never saw."""
    from tests.netviz.waiting import backward_view

    session = Session.open(zoo / "resnet50" / "predict_net.pbtxt")
    app = NetvizApp(session)
    out = tmp_path / "view.dot"
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await backward_view(pilot, app)
        view = session.view(())
        target = view.n_forward + 120
        app.main.select(OpRef((), target))
        await wait_for(pilot, lambda: target in (app.main.canvas.ops_in_view() or ()), "the gradient op in view")
        seen: list[set[int]] = []

        def still() -> bool:
            seen[:] = [_in_pane(app.main.canvas), *seen][:2]
            return len(seen) == 2 and seen[0] == seen[1]
        await wait_for(pilot, still, "the pane to settle")
        spec = app.main.view_spec()
        session.export_view(spec, str(out))
    ops = set(_ops(out))
    window = ladder_window(view, target)
    assert ops == seen[0] and target in ops and len(ops) < len(window), (sorted(ops), window)
    grads = [o for o in ops if view.forward_of(o) is not None]
    assert grads and all(view.forward_of(o) in ops for o in grads), sorted(ops)  # each beside its forward op
