"""QA: the blob inspector's values table shows a string value as written, never as Rich markup."""
from __future__ import annotations

from pathlib import Path

from netviz.app import NetvizApp
from netviz.session import Session
from netviz.widgets.blob_inspector import BlobInspector
from tests.netviz.waiting import answer, asynctest, ready, text_of, wait_for

MLP = Path(__file__).resolve().parents[2] / "examples" / "mlp" / "predict_net.pb"


def blob_text(app) -> str:
    return "\n".join(text_of(w) for w in app.main.query_one(BlobInspector).query("Static"))


@asynctest
async def test_a_string_value_with_brackets_is_shown_verbatim_in_the_values_table():
    app = NetvizApp(Session.open(MLP))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("n")  # `:` evaluates at a stop
        await wait_for(pilot, lambda: app.main.idle and app.session.debugger is not None, "a step")
        await pilot.press("colon")
        await answer(pilot, app, 'np.array([["[bold]x[/bold]", "[red]"]])')
        await wait_for(pilot, lambda: "values [1, 2]" in blob_text(app), "the value in the inspector")
        rows = [line for line in blob_text(app).splitlines() if line.lstrip().startswith("0 ")]
        assert rows and "[bold]x[/bold]" in rows[-1] and "[red]" in rows[-1], blob_text(app)
