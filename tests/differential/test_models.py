"""models/*: whole models saved by Caffe2's own builders load in netviz as Caffe2 described
them, and the ones Caffe2 ran (init, then predict, on random float / zero int / true bool
data) run in netviz too."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from engine.model.modelio import load_model
from engine.caffe2.workspace import Workspace
from tests.differential.goldens import GOLDEN, case_names, load

DTYPES = {1: np.float32, 2: np.int32, 5: np.bool_, 10: np.int64}
XFAIL: dict[str, str] = {}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(reason=XFAIL[n], strict=False))
                                  if n in XFAIL else n for n in case_names("model")])
def test_model_loads_and_runs_as_in_caffe2(name):
    case = load(name)
    model = load_model(GOLDEN / case["predict_net"], init=GOLDEN / case["init_net"])
    p, i = model.predict, model.init
    assert (len(p.op), len(i.op)) == (case["num_predict_ops"], case["num_init_ops"])
    assert sorted({o.type for o in p.op}) == case["predict_op_types"]
    assert sorted({o.type for o in i.op}) == case["init_op_types"]
    sets = set(case.get("compare_as_sets", []))
    for field in ("external_input", "external_output"):
        got, want = list(getattr(p, field)), case[field]
        assert (Counter(got) == Counter(want)) if field in sets else got == want, field
    if not case.get("caffe2_runs"):
        return
    ws, rng = Workspace(name), np.random.default_rng(0)
    ws.run_net_once(i)
    for blob, info in model.value_info.items():
        dt = DTYPES[info.data_type]
        x = rng.standard_normal(info.shape).astype(dt) if dt == np.float32 else np.zeros(info.shape, dt)
        ws.feed_blob(blob, x if dt != np.bool_ else np.ones(info.shape, dt))
    ws.run_net_once(p)
    for out in p.external_output:
        assert ws.has_blob(out)
