"""MainScreen is split by concern (issue 45, "Design"): its logic lives in one mixin per concern, so a
live session and a replay share it through :class:`netviz.session.Session`, and main.py stays composition."""
from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

from netviz.actions import ACTIONS
from netviz.screens.main import MainScreen

#: concern module → the mixin it defines
CONCERNS = {
    "netviz.screens.stepping": "SteppingActions",
    "netviz.screens.inspecting": "InspectingActions",
    "netviz.screens.overlays_ui": "OverlayActions",
    "netviz.screens.exporting": "ExportActions",
    "netviz.timetravel_ui": "TimeTravelActions",
}
#: main.py holds compose, mount, the first frame and the shared state only
MAIN_MAX_LINES = 500


@pytest.mark.parametrize("module,name", sorted(CONCERNS.items()))
def test_each_concern_module_defines_its_mixin_and_main_screen_inherits_it(module: str, name: str) -> None:
    mixin = getattr(importlib.import_module(module), name)
    assert mixin.__module__ == module
    assert mixin in MainScreen.__mro__
    own = [n for n, v in vars(mixin).items() if inspect.isfunction(v)]
    assert own, f"{name} holds no method"


def test_main_py_stays_composition() -> None:
    source = Path(inspect.getsourcefile(MainScreen) or "").read_text()
    assert len(source.splitlines()) < MAIN_MAX_LINES
    # NOTE: no action method is defined twice (a copy on MainScreen would shadow the mixin's)
    mixins = [getattr(importlib.import_module(m), n) for m, n in CONCERNS.items()]
    for name, value in vars(MainScreen).items():
        if inspect.isfunction(value):
            assert not any(name in vars(m) for m in mixins), f"MainScreen.{name} is also in a mixin"


def test_every_screen_action_resolves_through_the_mixins() -> None:
    """Each screen action of the key table has its method on MainScreen (found through the MRO)."""
    for aid, entry in ACTIONS.items():
        action = entry[1]
        if action.startswith("app.") or action.startswith("screen."):
            continue
        method = "action_" + action.split("(", 1)[0]
        assert hasattr(MainScreen, method), f"{aid}: MainScreen has no {method}"
