"""``:`` in ``netviz replay`` was an internal error (AttributeError: the expression's blobs came from the
live debugger's frames); it evaluates over the recorded values at the pc.  ``!`` (a Python shell on the
workspace) has no workspace in a replay: it says so instead of an internal error."""
from __future__ import annotations

from pathlib import Path

from netviz.app import NetvizApp
from netviz.cli import main
from netviz.commands.replay import session_of
from tests.netviz.waiting import answer, asynctest, notified, wait_for

ROOT = Path(__file__).resolve().parents[2]


@asynctest
async def test_eval_and_shell_in_a_replay(tmp_path: Path) -> None:
    rec = tmp_path / "w.nvrec"
    assert main(["run", str(ROOT / "examples" / "while_net" / "predict_net.pb"), "--record", str(rec)]) == 0
    app = NetvizApp(session_of(str(rec)))
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        for _ in range(3):
            await pilot.press("n")
            await wait_for(pilot, lambda: app.main.idle and app.session.last_stop is not None, "the step")
        await pilot.press("colon")
        await answer(pilot, app, "acc.shape")
        await wait_for(pilot, lambda: bool(app._notifications), "the eval's notice")
        await wait_for(pilot, lambda: notified(app, "acc.shape → tuple"), "the eval's value",
                       timeout=5)  # NOTE: an internal error comes first, if at all
        assert not any(n.title == "Internal error" for n in app._notifications)
        await pilot.press("exclamation_mark")
        await wait_for(pilot, lambda: notified(app, "a replay has no workspace for a shell"), "the shell's refusal")
        assert not any(n.title == "Internal error" for n in app._notifications)
