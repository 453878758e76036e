"""Every user action once: id → (keys, action, title).  Footer bindings and palette commands come from here.

Actions run on the :class:`~netviz.screens.main.MainScreen` (``app.`` ones on the app).  Keys are
pudb/gdb habits; a comma gives a second key.  Ids let a user remap keys (Textual keymaps).
"""
from __future__ import annotations

from textual.binding import Binding

#: id: (keys, action, title, footer label).  The title is the palette's and the help screen's; the short
#: footer label (empty: not in the footer) lets the first keys fit whole in 80 columns.
ACTIONS: dict[str, tuple[str, str, str, str]] = {
    "step.over": ("n", "step('step')", "Step", "Step"),
    "step.into": ("s", "step('step_into')", "Step into subnet", "Into"),
    "step.out": ("f", "step('step_out')", "Step out", "Out"),
    "run.continue": ("c", "step('continue_')", "Continue", "Continue"),
    "run.to-cursor": ("t", "run_to_cursor", "Run to cursor", "To cursor"),
    "run.to-nan": ("x", "step('run_to_nan')", "Run to first NaN/Inf", "To NaN"),
    "run.cancel": ("escape", "cancel_run", "Cancel run / drop typed-ahead moves", ""),
    "op.skip": ("K", "skip_op", "Skip op (give its outputs)", ""),
    "step.end-stops": ("E", "toggle_end_stops", "Stop at each subnet's end too (default: passed over)", ""),
    "step.back": ("u", "step('step_back')", "Step back", "Back"),
    "run.reverse-continue": ("U", "reverse_continue", "Reverse-continue to the previous breakpoint hit", ""),
    "run.first-iteration": ("I", "first_iteration", "Stop at the first loop iteration / RNN timestep where a condition "
                            "holds", ""),
    "run.record": ("T", "record_run", "Record the run to FILE.nvrec (re-runs it from the start to the end)", ""),
    "run.restart": ("r", "step('restart')", "Restart", "Restart"),
    "bp.toggle": ("b", "toggle_breakpoint", "Breakpoint", "Break"),
    "bp.list": ("B", "list_breakpoints", "Breakpoints list", "Breaks"),
    "bp.global": ("C", "global_breakpoint", "Global breakpoint (condition/type/name)", ""),
    "view.alerts": ("a", "show_alerts", "NaN/Inf alerts", ""),
    "blob.watch": ("w", "watch_blob", "Watch blob", "Watch"),
    "blob.inject": ("i", "inject_value", "Inject value", "Inject"),
    "blob.save": ("S", "save_blob", "Save value to .npy (.npz: all versions)", ""),
    "blob.copy-value": ("Y", "copy_value", "Copy shown value", ""),
    "blob.rerun": ("R", "rerun_to_blob", "Re-run to the shown blob version", ""),
    "blob.last-writer": ("G", "last_writer", "Who wrote this value: the pc back to the shown version's writer", ""),
    "view.backward": ("g", "toggle_backward", "Backward pass", "Backward"),
    "view.ssa": ("v", "toggle_ssa", "SSA versions", "SSA"),
    "view.overlay": ("m", "cycle_overlay", "Overlay: none/time/NaN/grad-norm", "Overlay"),
    "view.scopes": ("N", "toggle_scopes", "Nest the op tree by name scope", ""),
    "graph.zoom-out": ("z,minus", "zoom(1)", "Zoom out", ""),
    "graph.zoom-in": ("Z,plus", "zoom(-1)", "Zoom in", ""),
    "graph.follow": ("full_stop", "toggle_follow", "Follow cursor", ""),
    "graph.focus": ("o", "toggle_focus", "Focus neighbourhood", ""),
    "graph.direction": ("L", "cycle_direction", "Graph flow: auto / top-down / left-right", ""),
    "graph.wide": ("W", "toggle_wide", "Widen the graph over the side panes (and back)", ""),
    "graph.minimap": ("J", "focus_minimap", "Minimap: arrows pick a stretch of the net, Enter jumps there", ""),
    "net.drill": ("d", "drill", "Drill into subnet", ""),
    "net.up": ("backspace", "drill_up", "Up one net", ""),
    "search": ("slash", "search", "Search ops and blobs; ? EXPR queries the run (? max_abs(x) > 1e3)", "Search"),
    "repl.eval": ("colon", "eval", "Evaluate a NumPy expression over the blobs at the stop", "Eval"),
    "repl.shell": ("exclamation_mark", "shell", "Python shell with ws, net, dbg (TUI suspended)", ""),
    "blob.prev-version": ("left_square_bracket", "blob_version(-1)", "Shown blob: previous version", ""),
    "blob.next-version": ("right_square_bracket", "blob_version(1)", "Shown blob: next version", ""),
    "view.focus-ops": ("h", "focus_pane('ops')", "Focus the op list", ""),
    "view.focus-blobs": ("l", "focus_pane('blobs')", "Focus the inspector's blob list", ""),
    "view.cursor-down": ("j", "cursor(1)", "Cursor down in the focused list", ""),
    "view.cursor-up": ("k", "cursor(-1)", "Cursor up in the focused list", ""),
    "copy": ("y", "copy", "Copy name/value", ""),
    "export": ("e", "export", "Export the current view or the whole net", "Export"),
    "view.device-diff": ("D", "device_diff", "CPU vs GPU diff", ""),
    "view.onnx-diff": ("O", "onnx_diff", "ONNX Runtime vs engine: export, run both, differences on the graph", ""),
    "view.run-diff": ("A", "run_diff", "Two runs op by op (another init, model file, fix, gpu): ops by own error", ""),
    "export.extract": ("X", "extract", "Extract the culprit / selected op / N:M with its values into a repro folder", ""),
    "help": ("question_mark,f1", "app.help", "Help", "Help"),
    "quit": ("q", "app.quit", "Quit", "Quit"),
}


#: footer order: the keys a newcomer needs first, so a narrow footer still shows them
FOOTER_FIRST = ("quit", "help", "view.backward", "step.over", "step.into", "run.continue")
#: then, as far as the width allows (the footer shows whole keys only), the next most used
FOOTER_THEN = ("search", "bp.toggle", "step.out", "run.to-cursor", "step.back", "view.overlay", "export",
               "view.ssa", "repl.eval")

#: help groups: id prefix → heading, in the order the help screen lists them
GROUPS = {"step": "move", "run": "move", "op": "move", "bp": "breakpoints", "view": "views", "graph": "views",
          "net": "views", "blob": "inspect", "search": "inspect", "copy": "inspect", "export": "export",
          "repl": "inspect",
          "help": "app", "quit": "app"}


def group_of(aid: str) -> str:
    """The help heading of an action id (``step.over`` → move)."""
    return GROUPS[aid.split(".")[0]]


def bindings() -> list[Binding]:
    """The bindings of the main screen, one per action with its id (the title as tooltip); footer keys in
    FOOTER_FIRST, then FOOTER_THEN order."""
    order = {aid: k for k, aid in enumerate(FOOTER_FIRST + FOOTER_THEN)}
    ids = sorted(ACTIONS, key=lambda aid: (order.get(aid, len(order)), list(ACTIONS).index(aid)))
    return [Binding(ACTIONS[aid][0], ACTIONS[aid][1], ACTIONS[aid][3] or ACTIONS[aid][2], show=bool(ACTIONS[aid][3]),
                    tooltip=ACTIONS[aid][2], id=aid) for aid in ids]


def key_display(keys: str) -> str:
    """``question_mark,f1`` → ``? / F1`` for help texts."""
    names = {"question_mark": "?", "slash": "/", "full_stop": ".", "minus": "-", "plus": "+",
             "backspace": "Backspace", "f1": "F1", "escape": "Esc", "colon": ":", "exclamation_mark": "!",
             "left_square_bracket": "[", "right_square_bracket": "]"}
    return " / ".join(names.get(k, k) for k in keys.split(","))
