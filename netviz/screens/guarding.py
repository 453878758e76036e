"""The main screen's action guard, shared by MainScreen and its concern mixins (netviz/screens/*.py):
an engine error (or any bug) in a key's action becomes a notification and the UI stays usable."""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from engine.errors import NetvizError
from netviz.errorlog import report
from netviz.session import Unavailable

if TYPE_CHECKING:
    from netviz.screens.main import MainScreen


def guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run an action; a NetvizError is a notification titled in words (:func:`error_title`), anything else too."""
    @functools.wraps(fn)
    def wrapper(self: MainScreen, *args: Any) -> Any:
        try:
            return fn(self, *args)
        except Unavailable as e:
            self.notify(str(e), title="Not available", severity="warning")
        except NetvizError as e:
            self.notify(str(e), title=error_title(e), severity="error")
        except Exception as e:  # noqa: BLE001 - a bad key must never take the UI down
            inner = args[0] if fn.__name__ == "run_guarded" and args else fn  # what run_guarded ran
            self.notify(report(e, getattr(inner, "__name__", fn.__name__).removeprefix("action_")),
                        title="Internal error", severity="error", timeout=20)
    return wrapper


#: A failure's toast title in the user's words, by the first of its classes (MRO order) named here
_ERROR_TITLES = {"ConditionError": "Bad condition", "UnknownOpError": "No kernel", "SchemaError": "Bad op",
                 "ShapeError": "Shapes", "GradientError": "Backward pass", "OnnxExportError": "ONNX export",
                 "ModelError": "Model", "ExecutionError": "Run failed", "InspectError": "Inspect"}


def error_title(e: BaseException) -> str:
    """A toast title for `e` in words ("Bad condition"), never its Python class name ("ConditionError")."""
    return next((_ERROR_TITLES[c.__name__] for c in type(e).__mro__ if c.__name__ in _ERROR_TITLES), "Error")


def notice_toast(notice: str) -> dict[str, str]:
    """A session notice's toast title and severity: a plan's how-to informs; filled parameters warn."""
    if notice.startswith("plan "):
        return {"title": "Plan", "severity": "information"}
    return {"title": "Parameters" if notice.startswith("no init net") else "Notice", "severity": "warning"}
