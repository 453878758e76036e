"""Every user action once: id → (keys, action, title).  Footer bindings and palette commands come from here.

Actions run on the :class:`~netviz.screens.main.MainScreen` (``app.`` ones on the app).  Keys are
pudb/gdb habits; a comma gives a second key.  Ids let a user remap keys (Textual keymaps).
"""
from __future__ import annotations

from textual.binding import Binding

#: id: (keys, action, title, shown in footer)
ACTIONS: dict[str, tuple[str, str, str, bool]] = {
    "step.over": ("n", "step('step')", "Step", True),
    "step.into": ("s", "step('step_into')", "Step into subnet", True),
    "step.out": ("f", "step('step_out')", "Step out", True),
    "run.continue": ("c", "step('continue_')", "Continue", True),
    "run.to-cursor": ("t", "run_to_cursor", "Run to cursor", True),
    "run.to-nan": ("x", "step('run_to_nan')", "Run to first NaN/Inf", True),
    "run.cancel": ("escape", "cancel_run", "Cancel run / drop typed-ahead moves", False),
    "op.skip": ("K", "skip_op", "Skip op (give its outputs)", False),
    "step.back": ("u", "step('step_back')", "Step back", True),
    "run.restart": ("r", "step('restart')", "Restart", True),
    "bp.toggle": ("b", "toggle_breakpoint", "Breakpoint", True),
    "bp.list": ("B", "list_breakpoints", "Breakpoints list", True),
    "bp.global": ("C", "global_breakpoint", "Global breakpoint (condition/type/name)", False),
    "view.alerts": ("a", "show_alerts", "NaN/Inf alerts", False),
    "blob.watch": ("w", "watch_blob", "Watch blob", True),
    "blob.inject": ("i", "inject_value", "Inject value", True),
    "blob.save": ("S", "save_blob", "Save value to .npy (.npz: all versions)", False),
    "blob.copy-value": ("Y", "copy_value", "Copy shown value", False),
    "blob.rerun": ("R", "rerun_to_blob", "Re-run to the shown blob version", False),
    "view.backward": ("g", "toggle_backward", "Backward pass", True),
    "view.ssa": ("v", "toggle_ssa", "SSA versions", True),
    "view.overlay": ("m", "cycle_overlay", "Overlay: none/time/NaN/grad-norm", True),
    "view.scopes": ("N", "toggle_scopes", "Group by name scope", False),
    "graph.zoom-out": ("z,minus", "zoom(1)", "Zoom out", False),
    "graph.zoom-in": ("Z,plus", "zoom(-1)", "Zoom in", False),
    "graph.follow": ("full_stop", "toggle_follow", "Follow cursor", False),
    "graph.focus": ("o", "toggle_focus", "Focus neighbourhood", False),
    "net.drill": ("d", "drill", "Drill into subnet", False),
    "net.up": ("backspace", "drill_up", "Up one net", False),
    "search": ("slash", "search", "Search ops and blobs", True),
    "copy": ("y", "copy", "Copy name/value", False),
    "export": ("e", "export", "Export graph", True),
    "view.device-diff": ("D", "device_diff", "CPU vs GPU diff", False),
    "help": ("question_mark,f1", "app.help", "Help", True),
    "quit": ("q", "app.quit", "Quit", True),
}


#: footer order: the keys a newcomer needs first, so a narrow footer still shows them
FOOTER_FIRST = ("quit", "help", "view.backward", "step.over", "step.into", "run.continue")

#: help groups: id prefix → heading, in the order the help screen lists them
GROUPS = {"step": "move", "run": "move", "op": "move", "bp": "breakpoints", "view": "views", "graph": "views",
          "net": "views", "blob": "inspect", "search": "inspect", "copy": "inspect", "export": "export",
          "help": "app", "quit": "app"}


def group_of(aid: str) -> str:
    """The help heading of an action id (``step.over`` → move)."""
    return GROUPS[aid.split(".")[0]]


def bindings() -> list[Binding]:
    """The bindings of the main screen, one per action with its id; footer keys in FOOTER_FIRST order."""
    order = {aid: k for k, aid in enumerate(FOOTER_FIRST)}
    ids = sorted(ACTIONS, key=lambda aid: (order.get(aid, len(order)), list(ACTIONS).index(aid)))
    return [Binding(ACTIONS[aid][0], ACTIONS[aid][1], ACTIONS[aid][2], show=ACTIONS[aid][3], id=aid) for aid in ids]


def key_display(keys: str) -> str:
    """``question_mark,f1`` → ``? / F1`` for help texts."""
    names = {"question_mark": "?", "slash": "/", "full_stop": ".", "minus": "-", "plus": "+",
             "backspace": "Backspace", "f1": "F1", "escape": "Esc"}
    return " / ".join(names.get(k, k) for k in keys.split(","))
