"""The op list draws an op's line itself (OpTree._render_line, from its label's spans): the segments,
styles and mouse meta must be exactly Tree's own for every line, in every state a user sees: before
and after a continue (✓ marks), the cursor's line, a hovered line, a narrow list (labels fitted),
unfocused."""
from __future__ import annotations

from pathlib import Path

from textual.widgets import Tree

from tests.netviz.waiting import asynctest, continue_to_end, ready

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "models"


def _compare(tree) -> int:
    """Every line in view drawn both ways; returns how many op lines took the fast path."""
    memo_lines = 0
    tree._pass = {}
    try:
        base = tree.rich_style
        tree._pseudo_class_state = tree.get_pseudo_class_state()
        for y in range(len(tree._tree_lines)):
            tree._line_cache.clear()
            ours = tree._render_line(y, 0, tree.size.width, base)
            tree._line_cache.clear()
            theirs = Tree._render_line(tree, y, 0, tree.size.width, base)
            got = [(s.text, s.style, s.style.meta if s.style else None) for s in ours]
            want = [(s.text, s.style, s.style.meta if s.style else None) for s in theirs]
            assert got == want, (y, got, want)
            node = tree._tree_lines[y].path[-1]
            memo_lines += not node._allow_expand and node.data is not None and not isinstance(node.data, tuple)
    finally:
        tree._pass = None
    return memo_lines


@asynctest
async def test_op_lines_are_drawn_as_tree_draws_them() -> None:
    from netviz.app import NetvizApp
    from netviz.session import Session

    def open_app():
        return NetvizApp(Session.open(GOLDEN / "resnet50" / "predict_net.pb", init=GOLDEN / "resnet50" / "init_net.pb",
                                      inputs=["data=1,3,224,224"]))

    app = open_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        tree = app.main.op_tree
        assert _compare(tree) > 30
        await pilot.press("n")
        await pilot.pause()
        tree.hover_line = 5
        assert _compare(tree) > 30
        await continue_to_end(pilot, app, timeout=120)
        await pilot.pause()
        tree.focus()
        tree.cursor_line = 3
        await pilot.pause()
        assert _compare(tree) > 30
        app.main.canvas.focus()
        await pilot.pause()
        assert _compare(tree) > 30
    app = open_app()
    async with app.run_test(size=(70, 30)) as pilot:  # a narrow list: labels cut to fit
        await ready(pilot)
        tree = app.main.op_tree
        assert any(tree._room(n) is not None and n._label.cell_len > tree._room(n) for n in tree.nodes_by_ref.values())
        assert _compare(tree) > 10
