"""The screen-against-record oracle (issue #42): a scripted TUI session stops everywhere, and at each
stop every value the inspector shows, every mark and overlay tag equals what ``netviz run --dump`` holds.

CI runs a fixed small subset (the small examples, through every subnet, iteration and timestep);
``NETVIZ_ORACLE=full`` (``make fuzz``) adds every example fully and every zoo net on random parameters.
The comparison itself is :mod:`tests.netviz.screen_oracle`.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from engine.model.optypes import CONTROL_FLOW
from netviz.app import NetvizApp
from netviz.session import OpRef, Session
from tests.conftest import zoo_nets
from tests.netviz.screen_oracle import Dump, Tally, check_stop, dump_plan, dump_run
from tests.netviz.waiting import asynctest, ready, wait_for

FULL = os.environ.get("NETVIZ_ORACLE") == "full"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DETECTION = ("detectron", "mask_rcnn")

#: example → script: "S" steps into (s) until the net ends, checking every stop, "X" 30 times; the other
#: letters are keys (T and I: see run_script)
CI_SCRIPTS = {
    "while_net/predict_net.pb": "nnnS",  # every cond check, iteration and op of the body, then the backward loop
    "nested_if_in_while/predict_net.pb": "nnX",  # 30 stops: iterations 0-1, the If's branch in each
    "lstm/predict_net.pb": "nsssssssfcuur",  # into the RecurrentNetwork's timesteps, out, to the end, back, restart
    "mlp/predict_net.pb": "nnncuuT",  # a training net: forward, backward, optimizer; back; run to the cursor
    "mlp/plan.pbtxt": "sssssnsssfnuT",  # the PlanDef: into its init and train steps' net runs, out, on, back
}
FULL_SCRIPTS = {"if_net/predict_net.pb": "S", "nested_if_in_while/predict_net.pb": "S", "do_net/predict_net.pb": "S", "mlp_forward/predict_net.pb": "S",
                "lstm/predict_net.pb": "S", "mlp/predict_net.pb": "S", "mlp/plan.pbtxt": "S"}
ZOO_SCRIPT = "nnnnnsfIssssssfcuT"  # I: run to the first control-flow op (Mask R-CNN's If), then into it


def _examples() -> list[tuple[str, str]]:
    chosen = dict(CI_SCRIPTS)
    if FULL:
        chosen.update({k: v + "r" + CI_SCRIPTS.get(k, "") for k, v in FULL_SCRIPTS.items()})
    return sorted(chosen.items())


def _zoo_inputs(path: Path, folder: Path) -> list[str]:
    """Every input as a .npy file, so the TUI and ``run --dump`` read the same arrays."""
    from engine.model.modelio import load_model

    model = load_model(path)
    rng, specs = np.random.default_rng(0), []
    shapes = {n: tuple(vi.shape) for n, vi in model.value_info.items() if vi.shape is not None and None not in vi.shape}
    if path.parent.name.startswith(DETECTION):  # NOTE: a 192×192 image and its im_info, as test_zoo_runs_to_end
        shapes.update(data=(1, 3, 192, 192), im_info=(1, 3))
    for name, shape in shapes.items():
        if name in model.predict.external_input:
            arr = rng.standard_normal(shape).astype(np.float32)
            if name == "im_info":
                arr = np.array([[192, 192, 1.0]], np.float32)
            file = folder / f"{name.replace('/', '_')}.npy"
            np.save(file, arr)
            specs.append(f"{name}={file}")
    return specs


async def _move(pilot, app, key: str) -> None:
    await pilot.press(key)
    await pilot.pause()
    await wait_for(pilot, lambda: app.main.idle, f"the move {key!r} to finish", timeout=300)
    await pilot.pause()


async def run_script(model: Path, script: str, tmp_path: Path, inputs: list[str], extra: list[str]) -> Tally:
    """Dump a run of `model`, then drive the TUI by `script` and compare at every stop."""
    if model.suffix == ".pbtxt" and model.name == "plan.pbtxt":
        dump_plan(model, tmp_path / "dump")
    else:
        dump_run(model, tmp_path / "dump", [*(f"--input={s}" for s in inputs), *extra])
    dump, tally = Dump.read(tmp_path / "dump"), Tally()
    app = NetvizApp(Session.open(model, inputs=inputs or None))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        for key in script:
            if key in "SX":  # s until the end (X: 30 times), every stop checked (marks at every tenth, and the end)
                for k in range(10_000 if key == "S" else 30):
                    if app.session.debugger is not None and app.session.debugger.finished:
                        break
                    await _move(pilot, app, "s")
                    await check_stop(pilot, app, dump, tally, marks=k % 10 == 0)
                await check_stop(pilot, app, dump, tally)
                continue
            if key in "TI":  # run to the cursor: the net's last op (T), its first control-flow op (I)
                ops = app.session.view(()).net.op
                at = len(ops) - 1 if key == "T" else next((i for i, o in enumerate(ops) if o.type in CONTROL_FLOW
                                                          and i > (app.session.pc or OpRef((), 0)).index), None)
                if at is None:
                    continue
                app.main.select(OpRef((), at))
                await pilot.pause()
                key = "t"
            await _move(pilot, app, key)
            await check_stop(pilot, app, dump, tally)
        errors = [n.message for n in app._notifications if n.severity == "error"]
        assert not errors, errors
    return tally


def _assert_equal(tally: Tally) -> None:
    assert tally.compared.get("stops") and tally.compared.get("statistics"), tally.compared
    assert not tally.wrong, f"{len(tally.wrong)} differences ({tally.compared}):\n" + "\n".join(tally.wrong[:20])


@pytest.mark.parametrize("name,script", _examples(), ids=[n.replace("/predict_net.pb", "") for n, _ in _examples()])
@asynctest
async def test_every_value_on_screen_equals_the_run_dump(name: str, script: str, tmp_path: Path) -> None:
    _assert_equal(await run_script(EXAMPLES / name, script, tmp_path, [], []))


@pytest.mark.skipif(not FULL, reason="NETVIZ_ORACLE=full (make fuzz) runs the zoo nets")
@pytest.mark.parametrize("path", [pytest.param(p, id=p.parent.name) for p in zoo_nets()])
@asynctest
async def test_zoo_net_values_on_screen_equal_the_run_dump(path: Path, tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    inputs = _zoo_inputs(path, tmp_path / "in")
    _assert_equal(await run_script(path, ZOO_SCRIPT, tmp_path, inputs, ["--random-params"]))
