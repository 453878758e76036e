"""The TUI's view: overlays, focus set, canvas marks, backward/SSA/scopes, zoom, minimap, follow,
direction, drilling into subnets, panes and search.

A mixin of :class:`netviz.screens.main.MainScreen` (moved from it as is): one copy of the TUI's logic
for a live session and a replay, which differ only in the debugger behind :class:`netviz.session.Session`.
"""
from __future__ import annotations

from typing import Any

from textual.widgets import OptionList
from rich.style import Style

from netviz.messages import DrillRequested
from netviz.overlays import OVERLAYS, diff_colors, overlay_colors
from netviz.session import BlobRef, OpRef, Unavailable
from netviz.widgets.minimap import Minimap
from netviz.widgets.graph_scene import ZOOMS
from netviz.screens.guarding import guarded



class OverlayActions:
    """The main screen's view keys; they change what is drawn, never the run."""

    def set_focus_set(self) -> None:
        ref = self.selected
        if not self.focus_mode or ref is None or ref.path != self.path:
            self.canvas.focus_nodes = None
        else:
            ins, outs = self.session.view(ref.path).ssa[ref.index]
            names = {n for n, _ in (*ins, *outs)}
            ops = {ref.index, *(i for n in names for i, _ in self.session.producers(ref.path, n)),
                   *(i for n, _ in outs for i, _ in self.session.consumers(ref.path, n))}
            self.canvas.focus_nodes = (ops, names)
        self.canvas.refresh()

    def update_canvas_marks(self) -> None:
        """Markers on the canvas (pc, breakpoints, executed, NaN, overlay); repaints the boxes that changed."""
        s, pc, c = self.session, self.session.pc, self.canvas
        before = (c.pc_op, c.breakpoints, c.executed, c.nan_ops, c.overlay)
        c.pc_op = pc.index if isinstance(pc, OpRef) and pc.path == self.path else None
        c.breakpoints = {r.index for r in s.breakpoints if r.path == self.path}
        records = s.records_in(self.path)
        c.executed = set(records)
        c.records = records  # NOTE: blob shapes on the canvas: the value's once its op ran
        # NOTE: a record's NaN/Inf flag never changes: asked once per record, not of all records per move
        # (after c through DenseNet-121: 668 records, 0.85-1.2 ms each move); the memo holds only the shown records
        seen, self._nan_seen = self._nan_seen, {}
        memo, nan_ops = self._nan_seen, set()
        for i, r in records.items():
            hit = seen.get(i)
            if hit is None or hit[0] is not r:
                hit = (r, r.has_inf_or_nan)
            memo[i] = hit
            if hit[1]:
                nan_ops.add(i)
        c.nan_ops = nan_ops
        if self.overlay:
            recs = self._records()
            stale = [s.stale(OpRef(self.path, i)) for i in range(len(recs))]
            colors = overlay_colors(OVERLAYS[self.overlay], recs, stale)
            c.overlay = {i: Style(color="white", bgcolor=col, bold=True) for i, (col, _) in colors.items()}
        elif self.onnx_rows is not None and self.path == ():
            c.overlay = {i: Style(color="white", bgcolor=col, bold=True)
                         for i, (col, _) in diff_colors(self.onnx_rows).items()}
        else:
            c.overlay = {}
        changed = {before[0], c.pc_op} | (before[1] ^ c.breakpoints) | (before[2] ^ c.executed) \
            | (before[3] ^ c.nan_ops) | {i for i in before[4].keys() | c.overlay.keys()
                                         if before[4].get(i) != c.overlay.get(i)}
        c.refresh_rows(c.rows_of_ops(changed))
        self.query_one(Minimap).sync()  # NOTE: its marks in this frame, not at its next poll (0.2 s)

    def watch_overlay(self) -> None:
        if not self.is_mounted:
            return
        self.op_tree.overlay = OVERLAYS[self.overlay]
        self.op_tree.refresh_markers()
        self.update_canvas_marks()
        self.show_graph()
        self.update_status()

    def action_cycle_overlay(self) -> None:
        if self.onnx_rows is not None:  # NOTE: m first clears the ONNX diff's colours
            self.onnx_rows = None
            self.update_canvas_marks()
            self.show_graph()
        self.overlay = (self.overlay + 1) % len(OVERLAYS)
        self.notify(f"overlay: {OVERLAYS[self.overlay]}", title="Overlay")

    def on_drill_requested(self, message: DrillRequested) -> None:
        self.run_guarded(self.drill_into, message.ref, message.arg)

    def drill_into(self, ref: OpRef, arg: str | None) -> None:
        subnets = self.session.subnets(ref)
        if not subnets:
            raise Unavailable(f"op #{ref.index} {self.session.op(ref).type} holds no subnet")
        self.path = ref.path + ((ref.index, arg or subnets[0][0]),)

    def action_focus_pane(self, pane: str) -> None:
        """``h`` / ``l``: the op list / the blob list of the inspector (keyboard only, focus stays there)."""
        if pane == "ops":
            self.op_tree.focus()
            return
        blobs = self.query_one("#blob-list", OptionList)
        blobs.focus()
        if blobs.highlighted is None and blobs.option_count:
            blobs.highlighted = 0

    def action_cursor(self, delta: int) -> None:
        """``j`` / ``k``: down / up in the focused list (the op list at start)."""
        target = self.focused if isinstance(self.focused, OptionList) else self.op_tree
        (target.action_cursor_down if delta > 0 else target.action_cursor_up)()

    @guarded
    def action_toggle_backward(self, loss: str | None = None) -> None:
        if self.session.plan_def is not None:  # NOTE: its nets run as steps; no one loss to differentiate
            self.notify(f"plan {self.session.plan_def.name!r}: a plan has no backward view (open one of its nets "
                        "with --loss to see its backward pass)", title="Not available", severity="warning")
            return
        from netviz.commands import naming  # noqa: PLC0415 - the CLI's words for a gradient error

        try:
            with naming(str(self.session.model.path or self.session.model.predict.name or "net")):
                self.session.set_backward(not self.session.show_backward, loss)
        except Unavailable as e:
            if "loss" not in str(e):
                raise
            outs = list(self.session.model.predict.external_output)
            self._ask("loss blob to differentiate", outs[0] if len(outs) == 1 else "",
                      lambda name: self.action_toggle_backward(name), f"outputs: {', '.join(outs)}",
                      empty="no loss blob given: the backward view stays off")
            return
        for notice in self.session.pop_notices():  # a loss that is no scalar (netviz.overlays.loss_seed_note)
            self.notify(notice, title="Backward pass", severity="warning")
        self.op_tree.rebuild()
        if self.selected and self.selected.path == () and self.selected.index >= len(self.session.view(()).net.op):
            self.selected = OpRef((), 0)
        self.path = ()
        self.canvas.key = None
        self.infer_shapes()
        self.relint()
        self.refresh_all()
        if self.selected:
            self.select(self.selected)

    def action_toggle_ssa(self) -> None:
        self.ssa = not self.ssa

    @guarded
    def action_toggle_scopes(self) -> None:
        self.op_tree.group_scopes = not self.op_tree.group_scopes
        self.op_tree.rebuild()
        if self.selected:
            self.op_tree.select_ref(self.selected)

    def action_zoom(self, delta: int) -> None:
        # NOTE: from the zoom shown, not the one asked for: a big net shows "ops" while zoom is
        # "detail", and the first z from there did nothing
        self.zoom = max(0, min(len(ZOOMS) - 1, self.effective_zoom() + delta))

    def action_toggle_wide(self) -> None:
        """The graph over the side panes (op tree and inspector hidden) and back; the drawing
        reflows to the new width (the canvas re-plans on resize)."""
        self.set_class(not self.has_class("-wide-graph"), "-wide-graph")

    def action_focus_minimap(self) -> None:
        self.query_one(Minimap).focus()

    def action_toggle_follow(self) -> None:
        self.follow = not self.follow
        self.refresh_all()

    def action_cycle_direction(self) -> None:
        """The graph's flow: auto (the direction that uses the pane best, re-chosen on resize) → TB → LR."""
        order = ("auto", "TB", "LR")
        self.canvas.set_direction(order[(order.index(self.canvas.direction) + 1) % len(order)])
        self.show_graph()
        self.notify(f"graph flow: {self.canvas.direction}", title="Graph")

    def action_toggle_focus(self) -> None:
        self.focus_mode = not self.focus_mode
        self.set_focus_set()
        self.update_status()

    @guarded
    def action_drill(self) -> None:
        if self.selected is None:
            raise Unavailable("select an op first")
        self.drill_into(self.selected, None)

    @guarded
    def action_drill_up(self) -> None:
        if not self.path:
            raise Unavailable("already at the main net")
        index = self.path[-1][0]
        self.path = self.path[:-1]
        self.select(OpRef(self.path, index))

    @guarded
    def action_search(self) -> None:
        def found(hit: Any) -> None:
            if isinstance(hit, OpRef):
                self.run_guarded(self.select, hit)
            elif isinstance(hit, BlobRef):
                self.run_guarded(self.select_blob, hit)

        from netviz.screens.search import SearchScreen  # noqa: PLC0415 - a later key's screen
        self.app.push_screen(SearchScreen(self.session), found)
