"""QA: the op inspector names a training net's optimizer ops as such, never as gradient ops."""
from __future__ import annotations

from pathlib import Path

from netviz.app import NetvizApp
from netviz.session import OpRef, Session
from netviz.widgets.op_inspector import OpInspector
from tests.netviz.waiting import asynctest, ready, text_of, wait_for

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@asynctest
async def test_optimizer_op_is_not_called_a_loss_seed_and_backward_ops_keep_their_pairing():
    # examples/mlp: forward 0-3, backward 4-8 (4 is the loss seed), optimizer 9-14 (Iter, LR, WeightedSum)
    app = NetvizApp(Session.open(EXAMPLES / "mlp" / "predict_net.pb"))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        inspector = app.main.query_one(OpInspector)
        shown = {}
        for i in (4, 6, 9, 14):
            app.main.select(OpRef((), i))
            await wait_for(pilot, lambda i=i: f"op #{i} " in text_of(inspector), f"op #{i} in the inspector")
            shown[i] = text_of(inspector)
        assert "gradient op (loss seed)" in shown[4]
        assert "gradient op for forward op #2" in shown[6]
        for i in (9, 14):  # Iter and WeightedSum update parameters: no gradient op of any forward op
            assert "gradient op" not in shown[i], shown[i]
            assert "optimizer op" in shown[i]
