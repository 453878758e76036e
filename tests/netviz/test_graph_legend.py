"""The canvas shows the exports' legend (netviz.style.LEGEND's colours) above the drawing while the backward
pass is shown, as every exported SVG/PNG/DOT carries it; the canvas draws optimizer ops gold, not red."""
from __future__ import annotations

from netviz import style as S
from netviz.app import NetvizApp
from netviz.session import Session
from netviz.widgets.breadcrumb import Breadcrumb
from tests.netviz.tui_nets import mlp, write
from tests.netviz.waiting import asynctest, ready, wait_for


def crumb(app) -> str:
    return app.main.query_one(Breadcrumb).render().plain


@asynctest
async def test_backward_view_shows_the_legend(tmp_path) -> None:
    app = NetvizApp(Session.open(write(tmp_path, "mlp", mlp())))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        assert "■" not in crumb(app)
        await pilot.press("g")
        await wait_for(pilot, lambda: app.session.show_backward and "■ grad" in crumb(app), "the legend")
        legend = app.main.query_one(Breadcrumb)._parts[3]
        colours = {str(span.style) for span in legend.spans}
        assert {S.GREEN, S.RED, S.GOLD, S.BLUE} <= {c.upper() for c in colours}, colours


def test_view_graph_colours_optimizer_ops_apart() -> None:
    from netviz.widgets.graph_scene import view_graph
    from tests.netviz.test_export_big import training_net

    net, n_fwd, _ = training_net(2)
    ssa = [([(b, 0) for b in o.input], [(b, 1) for b in o.output]) for o in net.op]
    g = view_graph(net, ssa, n_fwd, False, 1)
    styles = {m["op"]: m["style"] for m in g.meta.values() if m["kind"] == "op"}
    kinds = {net.op[i].type: s for i, s in styles.items() if i >= n_fwd}
    assert kinds["WeightedSum"] == "optimizer" and kinds["FCGradient"] == "backward"


def test_canvas_ladder_puts_gradient_ops_on_their_forward_ops_rows() -> None:
    """With the backward pass shown the canvas draws the exports' ladder: each gradient op on its forward
    op's row, to its right, gradient edges ending in ▲ (without it, the backward ops run on below)."""
    from pathlib import Path

    from netviz.widgets.graph_scene import CHARS, build_scene

    s = Session.open(Path(__file__).resolve().parents[2] / "examples" / "mlp" / "predict_net.pb")
    v = s.view(())
    pairs = [(v.forward_of(i), i) for i in range(v.n_forward, len(v.net.op))
             if v.forward_of(i) is not None and v.net.op[i].type != "Sum"]
    assert len(pairs) >= 4

    def rows(ladder: bool) -> tuple[dict[int, tuple[int, int]], str]:
        sc = build_scene(v.net, v.ssa, v.n_forward, False, 1, params=s.param_names(), direction="TB", ladder=ladder)
        return {n.op: (n.y, n.x) for n in sc.nodes if n.kind == "op"}, bytes(sc.grid).decode("latin-1").translate(CHARS)

    at, drawn = rows(True)
    assert all(at[f][0] == at[g][0] and at[f][1] < at[g][1] for f, g in pairs), (pairs, at)
    assert "▲" in drawn
    before, _ = rows(False)
    assert not all(before[f][0] == before[g][0] for f, g in pairs)


@asynctest
async def test_canvas_marks_in_place_ops_and_caffe2_fixes(zoo) -> None:
    """ResNet-50 at 160x48: its in-place Relus get a double-line border (the exports' double outline), the
    SpatialBN ops the lint flags a ⚑ on theirs, and the breadcrumb's legend names both marks."""
    from netviz.widgets.graph_canvas import in_place_ops

    app = NetvizApp(Session.open(zoo / "resnet50" / "predict_net.pbtxt"))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        m, s = app.main, app.session
        await wait_for(pilot, lambda: m.canvas.scene is not None and bool(s.lint_ready()) and "⚑" in crumb(app),
                       "the layout and the lint", timeout=60)
        await pilot.pause()
        c = m.canvas
        r, sx, sy = c.scrollable_content_region, int(c.scroll_x), int(c.scroll_y)
        seen = [n for n in c.scene.nodes if n.kind == "op" and n.h >= 3 and sx <= n.x and n.x + n.w <= sx + r.width
                and sy <= n.y and n.y + n.h <= sy + r.height]
        net = s.view(()).net
        lines = [c.render_line(y).text for y in range(r.height)]

        def top(n) -> str:
            return lines[n.y - sy][n.x - sx:n.x - sx + n.w]

        relus = [n for n in seen if net.op[n.op].type == "Relu"]
        bns = [n for n in seen if net.op[n.op].type == "SpatialBN"]
        assert relus and bns and all(n.op in in_place_ops(net) for n in relus)
        assert all(top(n).startswith("╔") and "⚑" not in top(n) for n in relus), [top(n) for n in relus]
        assert all(n.op in s.lint_ready() and top(n).startswith("╭") and top(n)[-2] == "⚑" for n in bns), \
            [top(n) for n in bns]
        assert "in-place" in crumb(app) and "⚑ Caffe2 fix" in crumb(app)
