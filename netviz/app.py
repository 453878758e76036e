"""NetvizApp: the Textual application; screens live in :mod:`netviz.screens`, looks in app.tcss.

Global keys are the app's (help, quit, palette); everything else is a main-screen action from
:data:`netviz.actions.ACTIONS`, each also a command in the palette (Ctrl+P).
"""
from __future__ import annotations

from collections.abc import Iterable
from functools import partial

from textual.app import App, SystemCommand
from textual.screen import Screen

from netviz.actions import ACTIONS, key_display
from netviz.screens.help import HelpScreen
from netviz.screens.main import MainScreen
from netviz.session import Session


class NetvizApp(App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "netviz"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]

    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session = session
        self.main = MainScreen(session)
        self.sub_title = str(session.model.path or session.name)

    def on_mount(self) -> None:
        self.push_screen(self.main)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for keys, action, title, _ in ACTIONS.values():
            yield SystemCommand(title, f"key: {key_display(keys)}", partial(self.main.run_action, action))
